//! Two results files compared case by case, for `cargo xtask diff A.json
//! B.json` (`vramlab diff`): for each suite case present in both (or the one
//! `--case SUITE/CASE` names), the peaks allocated, reserved and active
//! before and after, the allocated bytes by category (tag) at the allocated
//! peak, and the median time, each with the change; the page
//! (`templates/results_diff.html`, offline, no script) turns its tables into
//! labelled blocks on a narrow screen like the snapshot diff's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vramlab_display::format::{fmt_bytes, fmt_ns};
use vramlab_suites::{CaseResult, Outcome, RunResults};

use crate::replay_page::Fact;
use crate::{ReportError, prepare_out_dir};
use vramlab_display::format::{fmt_change, fmt_relative};

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSide {
    /// The file as the user named it.
    pub source: String,
    pub started_at: String,
    pub git_commit: Option<String>,
    pub device: String,
}

/// One figure before and after; `None` where that side has no such figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureChange {
    /// `peak_allocated_bytes`, `category:activation`, `median_ns`, …
    pub name: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// `after − before` where both have it.
    pub change: Option<f64>,
}

/// One suite case compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseChange {
    pub suite: String,
    pub case: String,
    /// `ok`, `failed: …`, `not available: …` on each side.
    pub outcome_before: String,
    pub outcome_after: String,
    /// Bytes (peaks, then categories at the allocated peak), then the median time.
    pub figures: Vec<FigureChange>,
    /// The phase path at each side's allocated peak.
    pub peak_phase_before: Option<String>,
    pub peak_phase_after: Option<String>,
}

/// Two results files compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultsDiff {
    pub before: RunSide,
    pub after: RunSide,
    /// The cases in both (`suite/case`), in A's order.
    pub cases: Vec<CaseChange>,
    /// Cases only one side has.
    pub only_before: Vec<String>,
    pub only_after: Vec<String>,
}

/// Why two results files cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResultsDiffError {
    #[error(
        "no case {wanted} in both files (A has {before}; B has {after}): name one as SUITE/CASE, as `cargo xtask diff A B` without --case lists them"
    )]
    NoSuchCase { wanted: String, before: String, after: String },
    #[error("the two results files have no suite case in common: compare runs of the same suites")]
    NothingInCommon,
}

fn side(source: &str, r: &RunResults) -> RunSide {
    RunSide {
        source: source.to_owned(),
        started_at: r.started_at.clone(),
        git_commit: r.environment.git_commit.clone(),
        device: r.environment.device.clone(),
    }
}

fn outcome(o: &Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Failed { message } => format!("failed: {message}"),
        Outcome::NotAvailable { reason } => format!("not available: {reason}"),
    }
}

fn cases(r: &RunResults) -> Vec<(String, &CaseResult)> {
    r.suites.iter().flat_map(|s| s.cases.iter().map(move |c| (format!("{}/{}", s.name, c.name), c))).collect()
}

fn figure(name: impl Into<String>, before: Option<f64>, after: Option<f64>) -> FigureChange {
    let change = before.zip(after).map(|(b, a)| a - b);
    FigureChange { name: name.into(), before, after, change }
}

fn compare(suite: &str, case: &str, a: &CaseResult, b: &CaseResult) -> CaseChange {
    let mut figures = Vec::new();
    let (ma, mb) = (a.memory.as_ref(), b.memory.as_ref());
    if ma.is_some() || mb.is_some() {
        for (name, get) in [
            ("peak_allocated_bytes", (|m: &vramlab_suites::MemoryPeaks| m.peak_allocated_bytes) as fn(&_) -> u64),
            ("peak_reserved_bytes", |m| m.peak_reserved_bytes),
            ("peak_active_bytes", |m| m.peak_active_bytes),
        ] {
            figures.push(figure(name, ma.map(|m| get(m) as f64), mb.map(|m| get(m) as f64)));
        }
        let names: BTreeSet<&String> = ma
            .iter()
            .flat_map(|m| m.by_category_at_peak_bytes.keys())
            .chain(mb.iter().flat_map(|m| m.by_category_at_peak_bytes.keys()))
            .collect();
        for n in names {
            let get = |m: Option<&vramlab_suites::MemoryPeaks>| {
                m.map(|m| m.by_category_at_peak_bytes.get(n).copied().unwrap_or(0) as f64)
            };
            figures.push(figure(format!("category:{n}"), get(ma), get(mb)));
        }
    }
    let (ta, tb) = (a.timing.as_ref().map(|t| t.median_ns), b.timing.as_ref().map(|t| t.median_ns));
    if ta.is_some() || tb.is_some() {
        figures.push(figure("median_ns", ta, tb));
    }
    CaseChange {
        suite: suite.to_owned(),
        case: case.to_owned(),
        outcome_before: outcome(&a.outcome),
        outcome_after: outcome(&b.outcome),
        figures,
        peak_phase_before: ma.and_then(|m| m.peak_phase.clone()),
        peak_phase_after: mb.and_then(|m| m.peak_phase.clone()),
    }
}

/// Compares the cases of `a` and `b` present in both, or only `case`
/// (`SUITE/CASE`) when given.
pub fn diff_results(
    (a_name, a): (&str, &RunResults),
    (b_name, b): (&str, &RunResults),
    case: Option<&str>,
) -> Result<ResultsDiff, ResultsDiffError> {
    let (ca, cb) = (cases(a), cases(b));
    let in_b: BTreeSet<&str> = cb.iter().map(|(n, _)| n.as_str()).collect();
    let in_a: BTreeSet<&str> = ca.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = Vec::new();
    for (name, ra) in &ca {
        if case.is_some_and(|c| c != name) || !in_b.contains(name.as_str()) {
            continue;
        }
        let rb = cb.iter().find(|(n, _)| n == name).map(|(_, c)| *c).expect("in B");
        let (suite, case_name) = name.split_once('/').unwrap_or((name, ""));
        out.push(compare(suite, case_name, ra, rb));
    }
    if out.is_empty() {
        let list = |v: &[(String, &CaseResult)]| {
            let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).take(8).collect();
            let more = v.len().saturating_sub(names.len());
            let mut s = names.join(", ");
            if more > 0 {
                s += &format!(" and {more} more");
            }
            if s.is_empty() { "no cases".to_owned() } else { s }
        };
        return Err(match case {
            Some(c) => ResultsDiffError::NoSuchCase { wanted: c.to_owned(), before: list(&ca), after: list(&cb) },
            None => ResultsDiffError::NothingInCommon,
        });
    }
    let only = |v: &[(String, &CaseResult)], other: &BTreeSet<&str>| {
        if case.is_some() {
            return Vec::new();
        }
        v.iter().filter(|(n, _)| !other.contains(n.as_str())).map(|(n, _)| n.clone()).collect()
    };
    Ok(ResultsDiff {
        before: side(a_name, a),
        after: side(b_name, b),
        cases: out,
        only_before: only(&ca, &in_b),
        only_after: only(&cb, &in_a),
    })
}

/// A figure's name in words.
pub fn figure_name(name: &str) -> String {
    match name {
        "peak_allocated_bytes" => "peak allocated".into(),
        "peak_reserved_bytes" => "peak reserved".into(),
        "peak_active_bytes" => "peak active".into(),
        "median_ns" => "median time".into(),
        n => match n.strip_prefix("category:") {
            Some(c) => format!("{c} at the allocated peak"),
            None => n.to_owned(),
        },
    }
}

/// A figure's value as shown ("—" where the side has none).
pub fn fmt_value(name: &str, v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(v) if name == "median_ns" => fmt_ns(v),
        Some(v) => fmt_bytes(v.max(0.0) as u64),
    }
}

/// A figure's change as shown, with the relative change.
pub fn fmt_figure_change(f: &FigureChange) -> String {
    let (Some(before), Some(change)) = (f.before, f.change) else { return "—".into() };
    if f.name == "median_ns" {
        if change == 0.0 {
            return "no change".into();
        }
        let pct = if before > 0.0 { format!(" ({:+.1} %)", change / before * 100.0) } else { String::new() };
        let sign = if change > 0.0 { "+" } else { "−" };
        return format!("{sign}{}{pct}", fmt_ns(change.abs())).replace('-', "−");
    }
    let change = change as i64;
    format!("{}{}", fmt_change(change), fmt_relative(before as u64, change))
}

/// The headline of one case: how its peak allocated (or, without memory, its time) moved.
pub fn case_headline(c: &CaseChange) -> String {
    let find = |n: &str| c.figures.iter().find(|f| f.name == n);
    if let Some(f) = find("peak_allocated_bytes").filter(|f| f.change.is_some()) {
        let r = find("peak_reserved_bytes").map(fmt_figure_change).unwrap_or_default();
        return format!("peak allocated {}; peak reserved {r}", fmt_figure_change(f));
    }
    if let Some(f) = find("median_ns").filter(|f| f.change.is_some()) {
        return format!("median time {}", fmt_figure_change(f));
    }
    "no figure on both sides".into()
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    before: String,
    after: String,
    change: String,
    class: &'static str,
}

#[derive(Debug, Serialize)]
struct CaseView {
    id: String,
    name: String,
    headline: String,
    outcomes: Option<String>,
    phases: Option<String>,
    rows: Vec<Row>,
}

/// Writes the page into `dir` (created if needed); returns `index.html`'s path.
pub fn write_results_diff_report(dir: &Path, d: &ResultsDiff) -> Result<PathBuf, ReportError> {
    prepare_out_dir(dir)?;
    let cases: Vec<CaseView> = d
        .cases
        .iter()
        .enumerate()
        .map(|(k, c)| CaseView {
            id: format!("case-{k}"),
            name: format!("{}/{}", c.suite, c.case),
            headline: case_headline(c),
            outcomes: (c.outcome_before != c.outcome_after || c.outcome_before != "ok")
                .then(|| format!("A: {} · B: {}", c.outcome_before, c.outcome_after)),
            phases: (c.peak_phase_before.is_some() || c.peak_phase_after.is_some()).then(|| {
                let p = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
                format!("A: {} · B: {}", p(&c.peak_phase_before), p(&c.peak_phase_after))
            }),
            rows: c
                .figures
                .iter()
                .map(|f| Row {
                    name: figure_name(&f.name),
                    before: fmt_value(&f.name, f.before),
                    after: fmt_value(&f.name, f.after),
                    change: fmt_figure_change(f),
                    class: match f.change {
                        Some(c) if c > 0.0 => "gain",
                        Some(c) if c < 0.0 => "loss",
                        _ => "",
                    },
                })
                .collect(),
        })
        .collect();
    let facts: Vec<Fact> = [("A", &d.before), ("B", &d.after)]
        .iter()
        .map(|(k, s)| {
            let commit = s.git_commit.as_deref().map(|c| format!(", commit {}", &c[..c.len().min(12)]));
            Fact::new(*k, format!("{} (run {} on {}{})", s.source, s.started_at, s.device, commit.unwrap_or_default()))
        })
        .collect();
    let ctx = minijinja::context! {
        title => format!("vramlab diff of {} and {}", d.before.source, d.after.source),
        version => env!("CARGO_PKG_VERSION"),
        source => format!("{} → {}", d.before.source, d.after.source),
        facts => facts,
        cases => cases,
        only_before => &d.only_before,
        only_after => &d.only_after,
        css => crate::html::CSS,
    };
    crate::html::write_index(dir, "results_diff.html", ctx)
}

#[cfg(test)]
mod tests {
    use vramlab_suites::{MemoryPeaks, SuiteResult};

    use super::*;

    fn run(peak: u64, activation: u64, median: f64, extra: bool) -> RunResults {
        let mut r = crate::tests::sample();
        let memory = MemoryPeaks {
            device: "cpu:0".into(),
            peak_allocated_bytes: peak,
            peak_reserved_bytes: peak + (2 << 20),
            peak_active_bytes: peak,
            peak_phase: Some("step/forward".into()),
            by_category_at_peak_bytes: [("activation".to_owned(), activation)].into_iter().collect(),
            allocator_events: 10,
        };
        let case = CaseResult::ok("train_step").with_memory(memory).with_timing(vramlab_suites::harness::summarize(
            vec![median; 3],
            1,
            "host",
        ));
        let mut cases = vec![case];
        if extra {
            cases.push(CaseResult::ok("only_here"));
        }
        r.suites = vec![SuiteResult {
            name: "memory".into(),
            description: String::new(),
            device: "cpu".into(),
            duration_ns: 1,
            cases,
            findings: vec![],
            charts: vec![],
        }];
        r
    }

    #[test]
    fn a_case_compared_names_each_change() {
        let (a, b) = (run(100 << 20, 60 << 20, 2e6, true), run(150 << 20, 90 << 20, 1e6, false));
        let d = diff_results(("a.json", &a), ("b.json", &b), None).unwrap();
        assert_eq!(d.cases.len(), 1);
        assert_eq!(d.only_before, ["memory/only_here"]);
        let c = &d.cases[0];
        assert_eq!((c.suite.as_str(), c.case.as_str()), ("memory", "train_step"));
        let peak = &c.figures[0];
        assert_eq!(peak.name, "peak_allocated_bytes");
        assert_eq!(peak.change, Some((50 << 20) as f64));
        assert_eq!(fmt_figure_change(peak), "+50.00 MiB (+50.0 %)");
        let act = c.figures.iter().find(|f| f.name == "category:activation").unwrap();
        assert_eq!(fmt_figure_change(act), "+30.00 MiB (+50.0 %)");
        let t = c.figures.iter().find(|f| f.name == "median_ns").unwrap();
        assert_eq!(fmt_figure_change(t), "−1.00 ms (−50.0 %)");
        assert_eq!(case_headline(c), "peak allocated +50.00 MiB (+50.0 %); peak reserved +50.00 MiB (+49.0 %)");
        // One case by name; a name in neither is an error that lists them.
        assert_eq!(diff_results(("a", &a), ("b", &b), Some("memory/train_step")).unwrap().cases.len(), 1);
        let err = diff_results(("a", &a), ("b", &b), Some("memory/nope")).unwrap_err();
        assert!(err.to_string().contains("memory/train_step, memory/only_here"), "{err}");
        let dir = std::env::temp_dir().join(format!("vramlab-results-diff-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let html = std::fs::read_to_string(write_results_diff_report(&dir, &d).unwrap()).unwrap();
        assert!(html.contains("<td class=\"num change\" data-label=\"change\">+50.00 MiB (+50.0 %)</td>"), "{html}");
        assert!(html.contains("activation at the allocated peak"));
        assert!(html.contains("<code>memory&#x2f;only_here</code>"), "names escaped");
        assert!(!html.contains("<script") && !html.contains("http://"), "offline, no script");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
