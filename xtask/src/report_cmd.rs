//! `cargo xtask report --from results.json [--out DIR]`: renders the report
//! (index.html, summary.md, CSV, charts, trace.json) from a results file alone,
//! and the short terminal summary that `bench` prints too.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use vramlab_reports::markdown::verdict_text;
use vramlab_suites::RunResults;

use crate::cli::ReportArgs;

/// Exit status for a results file that is unreadable or partly unreadable.
pub const BAD_INPUT: u8 = 2;

pub fn run(args: &ReportArgs) -> Result<u8> {
    let loaded = match vramlab_reports::load_results(&args.from) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            return Ok(BAD_INPUT);
        }
    };
    let shown: Vec<String> = loaded.problems.iter().chain(&loaded.notes).cloned().collect();
    let history = history_for(args);
    let options = vramlab_reports::ReportOptions { history: history.as_deref(), ..Default::default() };
    let files = vramlab_reports::write_report_with(&loaded.results, &args.out, &shown, Some(&args.from), &options)?;
    print_short_summary(&mut std::io::stdout(), &loaded.results)?;
    for p in &loaded.problems {
        let _ = writeln!(std::io::stderr(), "error: {p}");
    }
    for n in &loaded.notes {
        let _ = writeln!(std::io::stderr(), "note: {n}");
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

/// One line per claim (its verdict and key number) and, once, why CUDA is
/// unavailable; the full evidence is in the report.
pub fn print_short_summary(w: &mut dyn std::io::Write, results: &RunResults) -> std::io::Result<()> {
    let env = &results.environment;
    writeln!(w, "vramlab — {} on {}", env.cpu_model, env.device)?;
    let reason = env.gpu_unavailable_reason.as_deref().filter(|r| !r.is_empty());
    if let Some(r) = reason {
        writeln!(w, "no GPU: {r}")?;
    }
    for s in &results.suites {
        let failed = s.cases.iter().filter(|c| matches!(c.outcome, vramlab_suites::Outcome::Failed { .. })).count();
        let failed = if failed > 0 { format!(" ({failed} failed cases)") } else { String::new() };
        if s.findings.is_empty() {
            writeln!(w, "  {:<10} {} cases{failed}", s.name, s.cases.len())?;
        }
        for f in &s.findings {
            writeln!(
                w,
                "  {:<10} {:<14} {}{failed}",
                s.name,
                verdict_text(f.verdict),
                key_line(&f.claim, &f.evidence, reason)
            )?;
        }
    }
    Ok(())
}

/// The claim and the evidence's first clause, with the CUDA reason (printed
/// once above) left out, cut to a terminal line.
fn key_line(claim: &str, evidence: &str, reason: Option<&str>) -> String {
    let mut ev = evidence.to_owned();
    if let Some(r) = reason {
        let rest = r.strip_prefix("CUDA unavailable: ").unwrap_or(r);
        for (from, to) in
            [(format!(" ({r})"), ""), (format!(" ({rest})"), ""), (r.to_owned(), "no GPU"), (rest.to_owned(), "no GPU")]
        {
            ev = ev.replace(&from, to);
        }
    }
    let first = ev.split("; ").next().unwrap_or("").trim();
    let claim: String =
        if claim.chars().count() > 60 { claim.chars().take(59).collect::<String>() + "…" } else { claim.to_owned() };
    let first: String =
        if first.chars().count() > 70 { first.chars().take(69).collect::<String>() + "…" } else { first.to_owned() };
    format!("{claim} — {first}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_line_drops_the_cuda_reason_and_keeps_the_first_clause() {
        let l = key_line(
            "pinned memory is faster",
            "GPU cases not run: no libcuda.so.1 found; pageable 3.1 GB/s",
            Some("CUDA unavailable: no libcuda.so.1 found"),
        );
        assert_eq!(l, "pinned memory is faster — GPU cases not run: no GPU");
    }
}
