//! `summary.md`: GitHub-flavoured Markdown for `$GITHUB_STEP_SUMMARY` — the
//! environment, the verdict table and each suite's key numbers, kept well under
//! GitHub's 1 MiB limit (at most [`MAX_ROWS_PER_SUITE`] case rows per suite).

use std::fmt::Write;

use vramlab_suites::{Outcome, RunResults, Verdict};

use vramlab_display::format::{fmt_bytes, fmt_ns};

/// Case rows shown per suite; the rest are counted.
pub const MAX_ROWS_PER_SUITE: usize = 40;

/// A verdict in words.
pub fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "holds",
        Verdict::DoesNotHold => "does not hold",
        Verdict::Inconclusive => "inconclusive",
        Verdict::NotApplicable => "not applicable",
    }
}

/// Text safe in a Markdown table cell: pipes, backslashes, angle brackets and
/// newlines escaped.
pub fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '|' => out.push_str("\\|"),
            '\\' => out.push_str("\\\\"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The verdict table alone (header and one row per finding), so other outputs
/// (the regression check's summary) can reuse it.
pub fn verdict_table(results: &RunResults) -> String {
    let mut s = String::from("| Suite | Claim | Verdict | Evidence |\n|---|---|---|---|\n");
    for suite in &results.suites {
        for f in &suite.findings {
            let _ = writeln!(
                s,
                "| {} | {} | **{}** | {} |",
                cell(&suite.name),
                cell(&f.claim),
                verdict_text(f.verdict),
                cell(&f.evidence)
            );
        }
    }
    s
}

/// The whole `summary.md`.
pub fn render_summary(results: &RunResults) -> String {
    let env = &results.environment;
    let mut s = String::from("# vramlab results\n\n");
    let _ = writeln!(
        s,
        "vramlab {} · started {} · device `{}` · CPU {} ({} cores) · commit {}{}\n",
        cell(&results.vramlab_version),
        cell(&results.started_at),
        cell(&env.device),
        cell(&env.cpu_model),
        env.cpu_cores,
        cell(env.git_commit.as_deref().unwrap_or("unknown")),
        if results.options.quick { " · quick run" } else { "" },
    );
    if env.gpus.is_empty() {
        let _ = writeln!(s, "No GPU: {}\n", cell(env.gpu_unavailable_reason.as_deref().unwrap_or("none found")));
    } else {
        for g in &env.gpus {
            let _ = writeln!(s, "GPU {}: {} ({})\n", g.index, cell(&g.name), fmt_bytes(g.memory_bytes));
        }
    }
    s.push_str("## Verdicts\n\n");
    s.push_str(&verdict_table(results));
    for suite in &results.suites {
        let ok = suite.cases.iter().filter(|c| c.outcome.is_ok()).count();
        let failed = suite.cases.iter().filter(|c| matches!(c.outcome, Outcome::Failed { .. })).count();
        let _ = writeln!(
            s,
            "\n## {}\n\n{} cases: {ok} ok, {failed} failed, {} not available here.\n",
            cell(&suite.name),
            suite.cases.len(),
            suite.cases.len() - ok - failed
        );
        s.push_str("| Case | Median time | Peak allocated | Outcome |\n|---|---|---|---|\n");
        for c in suite.cases.iter().take(MAX_ROWS_PER_SUITE) {
            let outcome = match &c.outcome {
                Outcome::Ok => "ok".to_owned(),
                Outcome::Failed { message } => format!("failed: {message}"),
                Outcome::NotAvailable { .. } => "not available".to_owned(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                cell(&c.name),
                c.timing.as_ref().map(|t| fmt_ns(t.median_ns)).unwrap_or_else(|| "–".into()),
                c.memory.as_ref().map(|m| fmt_bytes(m.peak_allocated_bytes)).unwrap_or_else(|| "–".into()),
                cell(&outcome)
            );
        }
        if suite.cases.len() > MAX_ROWS_PER_SUITE {
            let _ = writeln!(
                s,
                "\n… and {} more cases (see the HTML report and CSV).",
                suite.cases.len() - MAX_ROWS_PER_SUITE
            );
        }
    }
    s
}
