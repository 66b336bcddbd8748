//! The regression check: this build's runs compared with a baseline's. Memory
//! figures are exact (any increase beyond a tolerance, default 0 bytes, is a
//! regression); times are judged from several runs — a hierarchical bootstrap
//! over runs then samples (or over A/B pairs), so the noise between runs is in
//! the interval — with Benjamini–Hochberg over all time comparisons.
//! Simulated-CPU figures (`bench --simulate`: instructions and an estimated
//! cycle count from callgrind) are deterministic up to a small tolerance and
//! gate the CPU cases that have them; those cases' times are reported.
//!
//! [`compare_runs`] is a pipeline of four steps, each in its own module:
//! match the cases ([`matching::match_runs`]), resolve each figure's rule
//! ([`figures::resolve`]), judge ([`judge::judge`]), render ([`output`]). The
//! result is data; `export` turns a run into other tools' formats.
//!
//! [`memory::compare_memory`] is the same gate for PyTorch programs: two sets
//! of snapshot figures (`vramlab check` on snapshots, `record --baseline`),
//! matched by rank and device, judged by the same memory rule and rendered by
//! the same writers, with the call paths at the peak that moved most.

pub mod config;
pub mod export;
pub mod figures;
pub mod judge;
pub mod matching;
pub mod memory;
pub mod model;
pub mod output;
pub mod runs;
pub mod stats;

use vramlab_suites::RunResults;

pub use config::{CONFIG_FILE, CheckConfig, ConfigError};
pub use matching::CaseKey;
pub use model::{
    CompareOptions, Comparison, Design, FunctionChange, Kind, KnownNoise, Labels, MIN_SAMPLES, Method, PathMove, Row,
    Status,
};
pub use runs::{
    AppendError, CheckError, MAX_SCHEMA_READ, RUNS_JSON, RunSet, environment_differences, load_results, load_runs,
};

/// Compares one run with one baseline run (see [`compare_runs`]): memory is
/// judged; times are not, since one run on each side cannot tell the noise
/// between runs. `force_times` compares times even when the machines differ.
pub fn compare(
    baseline: &RunResults,
    current: &RunResults,
    cfg: &CheckConfig,
    force_times: bool,
    labels: Labels,
) -> Comparison {
    let options = CompareOptions { force_times, design: Design::Runs, known_noise: None };
    compare_runs(&RunSet::one(baseline.clone()), &RunSet::one(current.clone()), cfg, options, labels)
}

/// Compares this build's runs with the baseline's: match the cases, resolve
/// each figure's rule, judge, then order the rows worst first.
pub fn compare_runs(
    baseline: &RunSet,
    current: &RunSet,
    cfg: &CheckConfig,
    options: CompareOptions,
    labels: Labels,
) -> Comparison {
    let context = Context::of(baseline, current, &options);
    let matched = matching::match_runs(baseline, current);
    let figures = figures::resolve(&matched, cfg);
    let times = judge::TimeRules {
        design: options.design,
        compared: context.times_compared,
        known: options.known_noise.as_ref(),
    };
    let mut rows = judge::judge(&figures, cfg, times);
    rows.sort_by(|a, b| {
        // Within a status: outcomes, then memory (exact), then times; the largest change first.
        a.status
            .cmp(&b.status)
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| severity(b).total_cmp(&severity(a)))
            .then_with(|| a.case.cmp(&b.case))
    });
    let mut warnings = context.warnings;
    if rows.iter().any(|r| r.detail == judge::NOISE_UNKNOWN) {
        warnings.push(format!(
            "times not judged: the baseline holds {} run{} and this check {}; the noise between runs is unknown with one run on each side — make a baseline of several runs (`cargo xtask bench --quick --repeat 5 --save-baseline NAME`, or add runs with `--save-baseline NAME --append`)",
            baseline.len(),
            if baseline.len() == 1 { "" } else { "s" },
            current.len()
        ));
    }
    let noisy: Vec<&Row> = rows.iter().filter(|r| r.detail.starts_with(judge::UNGATEABLE)).collect();
    if let Some(worst) =
        noisy.iter().max_by(|a, b| a.between_run.unwrap_or(0.0).total_cmp(&b.between_run.unwrap_or(0.0)))
    {
        warnings.push(format!(
            "{} time figure{} too noisy to gate on this machine (between-run σ above max_time_noise_percent = {} %), e.g. {}: {}; run `bench --simulate` so CPU cases are gated by their simulated figures, or use `check --ab`",
            noisy.len(),
            if noisy.len() == 1 { " is" } else { "s are" },
            cfg.max_time_noise_percent,
            worst.case,
            worst.detail
        ));
    }
    let time_tests = rows.iter().filter(|r| r.q_slower.is_some()).count();
    let simulated_figures = rows.iter().filter(|r| r.kind == Kind::Simulated).count();
    Comparison {
        baseline: labels.baseline,
        current: labels.current,
        baseline_commit: baseline.first().environment.git_commit.clone(),
        current_commit: current.first().environment.git_commit.clone(),
        rows,
        only_in_baseline: matched.only_in_baseline,
        only_in_current: matched.only_in_current,
        environment_differences: context.environment_differences,
        times_compared: context.times_compared,
        notes: context.notes,
        warnings,
        method: Method::new(cfg, options.design, time_tests, simulated_figures, (baseline.len(), current.len())),
        call_paths: Vec::new(),
    }
}

/// What the comparison says about the two sides before any case: machine
/// differences, run kinds, seeds, schemas.
struct Context {
    environment_differences: Vec<String>,
    times_compared: bool,
    notes: Vec<String>,
    warnings: Vec<String>,
}

impl Context {
    fn of(baseline: &RunSet, current: &RunSet, options: &CompareOptions) -> Context {
        let (b, c) = (baseline.first(), current.first());
        let env_diff = runs::environment_differences(&b.environment, &c.environment);
        let times_compared = env_diff.is_empty() || options.force_times;
        let mut notes = Vec::new();
        let mut warnings = Vec::new();
        if !env_diff.is_empty() {
            notes.push(if options.force_times {
                "the machines differ; times compared anyway (--force-times)".to_owned()
            } else {
                "the machines differ: times not compared (--force-times to compare them); memory compared".to_owned()
            });
        }
        if b.options.quick != c.options.quick {
            notes.push(format!(
                "the baseline is a {} run, this one {}: only the cases both ran are compared",
                if b.options.quick { "--quick" } else { "full" },
                if c.options.quick { "--quick" } else { "full" }
            ));
        }
        if b.options.seed != c.options.seed {
            notes.push(format!(
                "the runs used different seeds ({} vs {}): inputs differ",
                b.options.seed, c.options.seed
            ));
        }
        for (role, set) in [("baseline", baseline), ("this run", current)] {
            if let Some(r) = set.runs().iter().find(|r| r.schema_version > vramlab_suites::SCHEMA_VERSION) {
                notes.push(format!(
                    "{role} has results schema version {} (this build writes {}): fields it does not know were ignored",
                    r.schema_version,
                    vramlab_suites::SCHEMA_VERSION
                ));
            }
            let commits: std::collections::BTreeSet<&str> =
                set.runs().iter().filter_map(|r| r.environment.git_commit.as_deref()).collect();
            if commits.len() > 1 {
                warnings.push(format!(
                    "{role}'s {} runs come from {} commits ({}): their spread is not only noise",
                    set.len(),
                    commits.len(),
                    commits.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        match options.design {
            Design::Pairs => notes.push(format!(
                "A/B: {} pairs of runs, interleaved in one sitting; each time is judged from the pairs' ratios",
                baseline.len().min(current.len())
            )),
            Design::Runs if baseline.len() == 1 && current.len() > 1 => notes.push(format!(
                "the baseline holds one run: its noise between runs is taken from this build's {} runs",
                current.len()
            )),
            Design::Runs if current.len() == 1 && baseline.len() > 1 => notes.push(format!(
                "this build has one run: its noise between runs is taken from the baseline's {} runs",
                baseline.len()
            )),
            Design::Runs => {}
        }
        Context { environment_differences: env_diff, times_compared, notes, warnings }
    }
}

/// How bad a row is within its status and kind: memory by the change as a
/// fraction of the old value, time by the interval's nearer bound.
fn severity(r: &Row) -> f64 {
    match (r.kind, r.status) {
        (Kind::Outcome, _) => f64::INFINITY,
        (Kind::Simulated, _) => r.change.unwrap_or(0.0),
        (Kind::Memory, _) => {
            let (old, change) = (r.old.unwrap_or(0.0), r.change.unwrap_or(0.0));
            if old > 0.0 { change / old } else { change.signum() * f64::MAX.sqrt() }
        }
        (Kind::Time, Status::Improvement) => -r.ratio_interval.map_or(0.0, |(_, hi)| 1.0 - hi).max(0.0) - 1.0,
        (Kind::Time, _) => r.ratio_interval.map_or(0.0, |(lo, _)| lo - 1.0),
    }
}

#[cfg(test)]
mod tests;
