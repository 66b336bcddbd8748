//! `cargo xtask report --from results.json [--out DIR]`: renders the report
//! (index.html, summary.md, CSV, charts, trace.json) from a results file alone,
//! and the short terminal summary that `bench` prints too.

use std::path::{Path, PathBuf};

use anyhow::Result;
use vramlab_reports::markdown::verdict_text;
use vramlab_suites::RunResults;

use crate::cli::ReportArgs;
use crate::output::{WIDTH, fit, wrap};

/// Exit status for a results file that is unreadable or partly unreadable.
pub const BAD_INPUT: u8 = 2;

pub fn run(args: &ReportArgs) -> Result<u8> {
    let loaded = match vramlab_reports::load_results(&args.from) {
        Ok(l) => l,
        Err(e) => {
            crate::output::eprint_line(&format!("error: {e}"));
            return Ok(BAD_INPUT);
        }
    };
    let shown: Vec<String> = loaded.problems.iter().chain(&loaded.notes).cloned().collect();
    let history = history_for(args);
    let options = vramlab_reports::ReportOptions { history: history.as_deref(), ..Default::default() };
    let files = vramlab_reports::write_report_with(&loaded.results, &args.out, &shown, Some(&args.from), &options)?;
    print_short_summary(&mut std::io::stdout(), &loaded.results)?;
    for p in &loaded.problems {
        crate::output::eprint_line(&format!("error: {p}"));
    }
    for n in &loaded.notes {
        crate::output::eprint_line(&format!("note: {n}"));
    }
    println!("report: {}", files.index_html.display());
    Ok(if loaded.problems.is_empty() { 0 } else { BAD_INPUT })
}

/// The history the trends come from: `--history`, else `history.sqlite`
/// beside the results file, else `target/vramlab/history.sqlite`, when there.
fn history_for(args: &ReportArgs) -> Option<PathBuf> {
    if let Some(p) = &args.history {
        return Some(p.clone());
    }
    let beside = args.from.parent().map(|d| d.join(vramlab_reports::history::HISTORY_FILE));
    let default = Path::new("target/vramlab").join(vramlab_reports::history::HISTORY_FILE);
    beside.into_iter().chain([default]).find(|p| p.is_file())
}

/// Writes the report for `bench` into `dir`, with trends from `history`;
/// returns index.html's path.
pub fn write_for_bench(results: &RunResults, dir: &Path, history: Option<&Path>) -> Result<PathBuf> {
    let options = vramlab_reports::ReportOptions { history, ..Default::default() };
    Ok(vramlab_reports::write_report_with(results, dir, &[], None, &options)?.index_html)
}

/// The width the terminal summary fits: no line is longer, and no word is cut.
pub const SUMMARY_WIDTH: usize = WIDTH;

/// One line per claim — its suite, its verdict and the figure that decides it
/// (the evidence's first clause), fitted to [`SUMMARY_WIDTH`] columns at a word
/// boundary — and, once, why CUDA is unavailable; the full evidence is in the report.
pub fn print_short_summary(w: &mut dyn std::io::Write, results: &RunResults) -> std::io::Result<()> {
    for line in short_summary(results, SUMMARY_WIDTH) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

/// [`print_short_summary`]'s lines, each at most `width` columns (characters).
pub fn short_summary(results: &RunResults, width: usize) -> Vec<String> {
    let env = &results.environment;
    let mut lines = vec![fit(&format!("vramlab — {} on {}", env.cpu_model, env.device), width)];
    let reason = env.gpu_unavailable_reason.as_deref().filter(|r| !r.is_empty());
    if let Some(r) = reason {
        // Said once and whole: wrapped at word boundaries, never cut.
        lines.extend(wrap(&format!("no GPU: {r}"), width, "  "));
    }
    // Columns line up whatever the suites' names ("input-pipeline" included).
    let name_w = results.suites.iter().map(|s| s.name.chars().count()).max().unwrap_or(0).max(10);
    let verdict_w = "not applicable".len();
    for s in &results.suites {
        let failed = s.cases.iter().filter(|c| matches!(c.outcome, vramlab_suites::Outcome::Failed { .. })).count();
        let failed = if failed > 0 { format!(" ({failed} failed cases)") } else { String::new() };
        if s.findings.is_empty() {
            lines.push(fit(&format!("  {:<name_w$} {} cases{failed}", s.name, s.cases.len()), width));
        }
        for f in &s.findings {
            let head = format!("  {:<name_w$} {:<verdict_w$} ", s.name, verdict_text(f.verdict));
            let room = width.saturating_sub(head.chars().count() + failed.chars().count());
            lines.push(format!("{head}{}{failed}", fit(&key_figure(&f.evidence, reason), room)));
        }
    }
    lines
}

/// The evidence's first clause — the figure that decides the verdict — with
/// the CUDA reason (printed once above) left out.
fn key_figure(evidence: &str, reason: Option<&str>) -> String {
    let mut ev = evidence.to_owned();
    if let Some(r) = reason {
        let rest = r.strip_prefix("CUDA unavailable: ").unwrap_or(r);
        for (from, to) in
            [(format!(" ({r})"), ""), (format!(" ({rest})"), ""), (r.to_owned(), "no GPU"), (rest.to_owned(), "no GPU")]
        {
            ev = ev.replace(&from, to);
        }
    }
    ev.split("; ").next().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_figure_drops_the_cuda_reason_and_keeps_the_first_clause() {
        let l = key_figure(
            "GPU cases not run: no libcuda.so.1 found; pageable 3.1 GB/s",
            Some("CUDA unavailable: no libcuda.so.1 found"),
        );
        assert_eq!(l, "GPU cases not run: no GPU");
    }

    /// Every claim of a real full CPU run, one line each, within 100 columns,
    /// and every word of each line a whole word of its evidence.
    #[test]
    fn the_summary_of_a_full_run_fits_100_columns_without_a_cut_word() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../reports/tests/data/full-cpu-results.json");
        let results = vramlab_reports::load_results(std::path::Path::new(path)).unwrap().results;
        let lines = short_summary(&results, SUMMARY_WIDTH);
        let claims: usize =
            results.suites.iter().map(|s| s.findings.len().max(usize::from(s.findings.is_empty()))).sum();
        let reason = results.environment.gpu_unavailable_reason.as_deref().unwrap();
        let reason_lines = wrap(&format!("no GPU: {reason}"), SUMMARY_WIDTH, "  ");
        let first = 1 + reason_lines.len();
        assert_eq!(lines.len(), claims + first, "a header, the CUDA reason, one line per claim:\n{}", lines.join("\n"));
        // The reason is said once, whole, within the width.
        assert_eq!(lines[1..first], reason_lines[..]);
        let joined = lines[1..first].iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
        assert_eq!(joined, format!("no GPU: {}", reason.split_whitespace().collect::<Vec<_>>().join(" ")));
        assert!(reason_lines.iter().all(|l| l.chars().count() <= SUMMARY_WIDTH), "{reason_lines:?}");
        let verdict_column = lines[first].find(verdict_text(results.suites[0].findings[0].verdict)).unwrap();
        for (line, f) in lines[first..].iter().zip(results.suites.iter().flat_map(|s| &s.findings)) {
            assert!(line.chars().count() <= SUMMARY_WIDTH, "{} columns: {line}", line.chars().count());
            assert_eq!(line.find(verdict_text(f.verdict)), Some(verdict_column), "out of line: {line}");
            // What is shown is the decisive clause itself or its first whole words.
            let key = key_figure(&f.evidence, results.environment.gpu_unavailable_reason.as_deref());
            let shown = line[verdict_column + 15..].trim_end_matches(" …");
            assert!(key.starts_with(shown), "{shown:?} is not the start of {key:?}");
            let next = key[shown.len()..].chars().next();
            assert!(next.is_none_or(|c| c == ' '), "a cut word: {shown:?} of {key:?}");
        }
        println!("{}", lines.join("\n"));
        // At 60 columns too.
        assert!(short_summary(&results, 60).iter().all(|l| l.chars().count() <= 60));
    }
}
