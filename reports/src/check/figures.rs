//! The pipeline's second step: each matched case's figures — its outcome, its
//! memory figures, its time — each with the rule `vramlab.toml` gives it. A
//! case that did not pass on both sides has only its outcome; one that did has
//! its memory figures (from each side's first run that passed: memory is exact,
//! every run of a build has the same), its simulated-CPU figures when both
//! sides have them (from each side's first run that has them: `bench
//! --simulate` counts once per invocation) and its time (every run's samples).

use vramlab_display::format::fmt_bytes;
use vramlab_suites::{CaseResult, Outcome, SimulatedCpu};

use super::config::{CheckConfig, Resolved};
use super::matching::{self, CaseKey, Matched};

/// What a figure is judged from.
#[derive(Debug)]
pub enum Evidence<'a> {
    /// The case did not pass on both sides: the outcome is its only figure.
    Outcome { old: &'a Outcome, new: &'a Outcome },
    /// A memory figure (None: not on that side).
    Memory { old: Option<f64>, new: Option<f64> },
    /// A simulated-CPU figure (`simulated.instructions`, `simulated.estimated_cycles`) of each side.
    Simulated { old: &'a SimulatedCpu, new: &'a SimulatedCpu },
    /// The timing samples of each run (of the runs that passed and were timed).
    Time { old: Vec<&'a [f64]>, new: Vec<&'a [f64]> },
}

/// One figure of one case, with its rule.
#[derive(Debug)]
pub struct Figure<'a> {
    pub case: CaseKey,
    /// `outcome`, a memory figure's name, or `time`.
    pub metric: String,
    pub rule: Resolved,
    pub evidence: Evidence<'a>,
    /// The case has simulated figures on both sides (its time then gates
    /// only with `gate_simulated_times`).
    pub simulated: bool,
}

/// Every figure of the matched cases, in case order: outcome, memory figures (by name), time.
pub fn resolve<'a>(matched: &Matched<'a>, cfg: &CheckConfig) -> Vec<Figure<'a>> {
    let mut out = Vec::new();
    for m in &matched.cases {
        let simulated = |side: &[&'a CaseResult]| side.iter().find_map(|c| c.simulated.as_ref());
        // Figures of two different timed choices count different code: not
        // compared (the case's time gates it), and said in one row.
        let (sims, choices) = match simulated(&m.old).zip(simulated(&m.new)) {
            Some((o, n)) if !same_choice(o, n) => (None, Some((o, n))),
            both => (both, None),
        };
        let figure = |metric: &str, evidence| Figure {
            case: m.key.clone(),
            metric: metric.to_owned(),
            rule: cfg.resolve(&m.key.suite, &m.key.case, metric),
            evidence,
            simulated: sims.is_some(),
        };
        let (old, new) = (side_outcome(&m.old), side_outcome(&m.new));
        if !(old.is_ok() && new.is_ok()) {
            out.push(figure("outcome", Evidence::Outcome { old, new }));
            continue;
        }
        let first_ok = |side: &[&'a CaseResult]| side.iter().copied().find(|c| c.outcome.is_ok());
        let (Some(o), Some(n)) = (first_ok(&m.old), first_ok(&m.new)) else { continue };
        let (old_mem, new_mem) = (matching::memory_figures(o), matching::memory_figures(n));
        let mut names: Vec<&String> = old_mem.keys().chain(new_mem.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let evidence = Evidence::Memory { old: old_mem.get(name).copied(), new: new_mem.get(name).copied() };
            out.push(figure(name, evidence));
        }
        if let Some((old, new)) = sims {
            for name in SIMULATED_METRICS {
                out.push(figure(name, Evidence::Simulated { old, new }));
            }
        }
        if let Some((old, new)) = choices {
            out.push(figure(SIMULATED_CHOICE, Evidence::Simulated { old, new }));
        }
        let samples = |side: &[&'a CaseResult]| -> Vec<&'a [f64]> {
            side.iter()
                .filter(|c| c.outcome.is_ok())
                .filter_map(|c| c.timing.as_ref().map(|t| t.samples_ns.as_slice()))
                .collect()
        };
        let (old_t, new_t) = (samples(&m.old), samples(&m.new));
        if !old_t.is_empty() && !new_t.is_empty() {
            out.push(figure("time", Evidence::Time { old: old_t, new: new_t }));
        }
    }
    out
}

/// The simulated figures each case with them gets, in this order.
pub const SIMULATED_METRICS: [&str; 2] = ["simulated.instructions", "simulated.estimated_cycles"];

/// The one row of a case whose two sides counted different timed choices.
pub const SIMULATED_CHOICE: &str = "simulated.timed_choice";

/// Whether two sides' simulated figures count the same code: the same timed
/// choice, or none on either side.
fn same_choice(old: &SimulatedCpu, new: &SimulatedCpu) -> bool {
    match (&old.timed_choice, &new.timed_choice) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// A simulated figure's value.
pub fn simulated_value(s: &SimulatedCpu, metric: &str) -> u64 {
    if metric.ends_with("estimated_cycles") { s.estimated_cycles } else { s.instructions }
}

/// A side's outcome over its runs: the first failure when a run failed (a
/// flaky failure is a failure), else ok when every run passed, else the first
/// run's (not available).
fn side_outcome<'a>(runs: &[&'a CaseResult]) -> &'a Outcome {
    if let Some(failed) = runs.iter().find(|c| matches!(c.outcome, Outcome::Failed { .. })) {
        return &failed.outcome;
    }
    runs.iter().find(|c| !c.outcome.is_ok()).map_or(&runs[0].outcome, |c| &c.outcome)
}

/// A memory figure's value (or change) as text: bytes in binary units
/// ([`fmt_bytes`]), a count as it is.
pub fn amount_text(v: f64, bytes: bool) -> String {
    if bytes { fmt_bytes(v.max(0.0) as u64) } else { format!("{v}") }
}
