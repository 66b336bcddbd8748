//! A comparison rendered for people and machines: the terminal table (worst
//! first, ANSI colour on request), `regressions.md` (for `$GITHUB_STEP_SUMMARY`),
//! GitHub workflow annotations, and JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vramlab_display::format::{fmt_change, fmt_ns};

use super::figures::amount_text;
use super::model::{Comparison, Design, Kind, Row, Status};
use crate::ReportError;

/// The Markdown file's name.
pub const REGRESSIONS_MD: &str = "regressions.md";

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Regression => "REGRESSION",
        Status::Inconclusive => "inconclusive",
        Status::Improvement => "improvement",
        Status::NoChange => "no change",
        Status::NotCompared => "not compared",
    }
}

fn headline(c: &Comparison) -> String {
    format!(
        "{} regression{}, {} improvement{}, {} inconclusive, {} unchanged, {} not compared; {} case{} only in the baseline, {} only in this run",
        c.count(Status::Regression),
        if c.count(Status::Regression) == 1 { "" } else { "s" },
        c.count(Status::Improvement),
        if c.count(Status::Improvement) == 1 { "" } else { "s" },
        c.count(Status::Inconclusive),
        c.count(Status::NoChange),
        c.count(Status::NotCompared),
        c.only_in_baseline.len(),
        if c.only_in_baseline.len() == 1 { "" } else { "s" },
        c.only_in_current.len(),
    )
}

fn method_line(c: &Comparison) -> String {
    let m = &c.method;
    if super::memory::is_memory_gate(c) {
        return format!(
            "Memory is exact — the same program on the same inputs asks the allocator for the same sequence — so any \
             increase beyond the tolerance ({} B unless vramlab.toml says otherwise) is a regression. Figures per rank \
             and device, from each snapshot's replay under its own settings.",
            m.memory_tolerance_bytes
        );
    }
    let sides = match m.design {
        Design::Pairs => format!(
            "{} A/B pairs run interleaved in one sitting; a hierarchical bootstrap over the pairs' ratios, then over each run's samples",
            m.baseline_runs.min(m.current_runs)
        ),
        Design::Runs => format!(
            "{} baseline run{} and {} of this build; a hierarchical bootstrap over runs, then over each run's samples, so the noise between runs is in the interval",
            m.baseline_runs,
            if m.baseline_runs == 1 { "" } else { "s" },
            m.current_runs
        ),
    };
    format!(
        "Memory is exact (tolerance {} B). Times: {sides} ({} resamples, seed {}); the {:.0} % interval of the ratio new/old uses Student's t on the bootstrap's standard error (few runs, wide interval). A regression only when the whole interval lies above +{} % and its one-sided p-value agrees after Benjamini–Hochberg over {} time comparison{} at a false discovery rate of {} %.",
        m.memory_tolerance_bytes,
        m.bootstrap_resamples,
        m.seed,
        m.confidence * 100.0,
        m.time_threshold_percent,
        m.time_tests,
        if m.time_tests == 1 { "" } else { "s" },
        m.false_discovery_rate * 100.0,
    ) + if m.gate_times {
        ""
    } else {
        " Times are not gated (gate_times = false): a slowdown is reported as inconclusive."
    } + &simulated_sentence(m)
}

/// Which figure gates a CPU case, and why, when simulated figures were compared.
fn simulated_sentence(m: &super::model::Method) -> String {
    if m.simulated_figures == 0 {
        return String::new();
    }
    format!(
        " CPU cases with simulated figures (`bench --simulate`: callgrind's instruction count and an estimated cycle count, L1 hits + 5 × LL hits + 35 × LL misses, in each case's measured region, entered with the caches as one warm-up call left them) are gated by those: counts of the same code and inputs repeat to within {} % on any machine, whatever its load, so a change of a few percent shows; their times are reported, not gated, since a shared runner's wall time cannot see a change that small. A change of at most {} instructions or {} estimated cycles is not gated: a tiny case's count moves that much between runs of one build (malloc's path through a heap laid out a little differently, a few cache misses), so the smallest cases are gated by their instructions and only a larger change of their estimated cycles counts. GPU cases and CPU cases without simulated figures are gated by time.",
        m.simulated_tolerance_percent, m.simulated_floor_instructions, m.simulated_floor_estimated_cycles
    )
}

/// The terminal report: every row that is not "no change" or "not compared" (all with `all`),
/// worst first, then the summary. `colour`: ANSI colours (for a TTY).
pub fn terminal(c: &Comparison, all: bool, colour: bool) -> String {
    let paint = |s: Status, text: &str| -> String {
        if !colour {
            return text.to_owned();
        }
        let code = match s {
            Status::Regression => "1;31",
            Status::Improvement => "32",
            Status::Inconclusive => "33",
            _ => "2",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    };
    let mut out = String::new();
    let _ = writeln!(out, "vramlab check: {} against baseline {}", c.current, c.baseline);
    let shown: Vec<&Row> =
        c.rows.iter().filter(|r| all || !matches!(r.status, Status::NoChange | Status::NotCompared)).collect();
    let w_case = shown.iter().map(|r| r.case.to_string().chars().count()).max().unwrap_or(4).clamp(4, 70);
    let w_metric = shown.iter().map(|r| r.metric.chars().count()).max().unwrap_or(6).max(6);
    if !shown.is_empty() {
        let _ = writeln!(out, "\n{:<12}  {:<w_case$}  {:<w_metric$}  detail", "verdict", "case", "metric");
        for r in &shown {
            let case = truncate(&r.case.to_string(), w_case);
            let word = format!("{:<12}", status_word(r.status));
            let _ = writeln!(out, "{}  {case:<w_case$}  {:<w_metric$}  {}", paint(r.status, &word), r.metric, r.detail);
        }
    }
    if !c.call_paths.is_empty() {
        let _ = writeln!(out, "\ncall paths whose bytes at the allocated peak moved most:");
        for p in &c.call_paths {
            let _ = writeln!(
                out,
                "  {:>12}  {}  {}  ({} → {})",
                fmt_change(p.change_bytes),
                p.case,
                p.label,
                amount_text(p.before_bytes as f64, true),
                amount_text(p.after_bytes as f64, true)
            );
            if p.user_frames.len() > 1 {
                let _ = writeln!(out, "                {}", p.user_frames.join(" <- "));
            }
        }
    }
    for (what, keys) in [("only in the baseline", &c.only_in_baseline), ("only in this run", &c.only_in_current)] {
        if !keys.is_empty() {
            let _ = writeln!(out, "\ncases {what}:");
            for k in keys {
                let _ = writeln!(out, "  {k}");
            }
        }
    }
    if !c.environment_differences.is_empty() {
        let _ = writeln!(out, "\nthe machines differ:");
        for d in &c.environment_differences {
            let _ = writeln!(out, "  {d}");
        }
    }
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for w in &c.warnings {
        let _ = writeln!(out, "{}: {w}", paint(Status::Inconclusive, "warning"));
    }
    let _ = writeln!(out, "\n{}", method_line(c));
    let verdict = if c.has_regression() { paint(Status::Regression, "FAIL") } else { paint(Status::Improvement, "ok") };
    let _ = writeln!(out, "{verdict}: {}", headline(c));
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn md_table(out: &mut String, rows: &[&Row]) {
    let _ = writeln!(out, "| case | metric | before | after | change | detail |\n|---|---|---:|---:|---:|---|");
    for r in rows {
        let is_bytes = r.metric.ends_with("_bytes");
        let fmt = |v: Option<f64>| match (v, r.kind) {
            (Some(v), Kind::Time) => fmt_ns(v),
            (Some(v), Kind::Simulated) => format!("{v}"),
            (Some(v), _) => amount_text(v, is_bytes),
            (None, _) => String::new(),
        };
        let change = match (r.change, r.kind) {
            (Some(c), Kind::Time) => format!("{:+.1} %", c * 100.0),
            (Some(c), Kind::Simulated) => format!("{:+.2} %", c * 100.0),
            (Some(c), _) => format!("{}{}", if c > 0.0 { "+" } else { "−" }, amount_text(c.abs(), is_bytes)),
            (None, _) => String::new(),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            md_escape(&r.case.to_string()),
            md_escape(&r.metric),
            fmt(r.old),
            fmt(r.new),
            change,
            md_escape(&r.detail)
        );
    }
}

/// `regressions.md`: the verdict, then regressions, inconclusive times,
/// improvements, cases on one side only, machine differences and the method.
pub fn markdown(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# vramlab regression check: {}\n",
        if c.has_regression() { "❌ regression" } else { "✅ no regression" }
    );
    let commit = |x: &Option<String>| x.as_deref().map(|s| format!(" (commit `{s}`)")).unwrap_or_default();
    let _ = writeln!(
        out,
        "This run: `{}`{}; baseline: `{}`{}.\n\n{}.\n",
        c.current,
        commit(&c.current_commit),
        c.baseline,
        commit(&c.baseline_commit),
        headline(c)
    );
    for (title, status) in [
        ("Regressions", Status::Regression),
        ("Inconclusive", Status::Inconclusive),
        ("Improvements", Status::Improvement),
    ] {
        let rows: Vec<&Row> = c.rows.iter().filter(|r| r.status == status).collect();
        if !rows.is_empty() {
            let _ = writeln!(out, "## {title} ({})\n", rows.len());
            md_table(&mut out, &rows);
            out.push('\n');
        }
    }
    if !c.call_paths.is_empty() {
        let _ = writeln!(
            out,
            "## Call paths whose bytes at the allocated peak moved most\n\n| rank and device | call path (your frames, innermost first) | before | after | change |\n|---|---|---:|---:|---:|"
        );
        for p in &c.call_paths {
            let frames = if p.user_frames.is_empty() { p.label.clone() } else { p.user_frames.join(" ← ") };
            let _ = writeln!(
                out,
                "| `{}` | `{}` | {} | {} | {} |",
                md_escape(&p.case.to_string()),
                md_escape(&frames),
                amount_text(p.before_bytes as f64, true),
                amount_text(p.after_bytes as f64, true),
                fmt_change(p.change_bytes)
            );
        }
        out.push('\n');
    }
    for (what, keys) in [("only in the baseline", &c.only_in_baseline), ("only in this run", &c.only_in_current)] {
        if !keys.is_empty() {
            let _ = writeln!(out, "## Cases {what} ({})\n", keys.len());
            for k in keys {
                let _ = writeln!(out, "- `{}`", md_escape(&k.to_string()));
            }
            out.push('\n');
        }
    }
    if !c.environment_differences.is_empty() {
        let _ = writeln!(out, "## The machines differ\n");
        for d in &c.environment_differences {
            let _ = writeln!(out, "- {}", md_escape(d));
        }
        out.push('\n');
    }
    for n in &c.notes {
        let _ = writeln!(out, "> Note: {}\n", md_escape(n));
    }
    for w in &c.warnings {
        let _ = writeln!(out, "> **Warning:** {}\n", md_escape(w));
    }
    let _ = writeln!(out, "## Method\n\n{}", method_line(c));
    out
}

/// Writes `regressions.md` into `dir`, atomically; returns its path.
pub fn write_markdown(dir: &Path, c: &Comparison) -> Result<PathBuf, ReportError> {
    let path = dir.join(REGRESSIONS_MD);
    crate::write_atomic(&path, markdown(c).as_bytes())?;
    Ok(path)
}

/// GitHub workflow commands: `::error` per regression, `::warning` per
/// inconclusive time, machine difference and case present on one side only.
pub fn annotations(c: &Comparison) -> String {
    let esc = |s: &str| s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A");
    let mut out = String::new();
    for r in &c.rows {
        let level = match r.status {
            Status::Regression => "error",
            Status::Inconclusive => "warning",
            _ => continue,
        };
        let title = if r.status == Status::Regression { "vramlab regression" } else { "vramlab: inconclusive time" };
        let _ = writeln!(out, "::{level} title={title}::{}", esc(&format!("{} {}: {}", r.case, r.metric, r.detail)));
    }
    for p in c.call_paths.iter().take(3) {
        let _ = writeln!(
            out,
            "::notice title=vramlab: a call path at the peak moved::{}",
            esc(&format!(
                "{}: {} {} at the allocated peak ({})",
                p.case,
                p.label,
                fmt_change(p.change_bytes),
                if p.user_frames.is_empty() { p.label.clone() } else { p.user_frames.join(" <- ") }
            ))
        );
    }
    for k in &c.only_in_baseline {
        let _ = writeln!(out, "::warning title=vramlab::{}", esc(&format!("{k}: in the baseline, not in this run")));
    }
    for d in &c.environment_differences {
        let _ = writeln!(out, "::warning title=vramlab: the machines differ::{}", esc(d));
    }
    for w in &c.warnings {
        let _ = writeln!(out, "::warning title=vramlab::{}", esc(w));
    }
    out
}

/// The comparison as JSON (rows worst first, the method, the notes).
pub fn json(c: &Comparison) -> Result<String, ReportError> {
    serde_json::to_string_pretty(c).map_err(|source| ReportError::Json { what: "the comparison".into(), source })
}
