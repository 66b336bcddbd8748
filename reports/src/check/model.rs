//! What a comparison is made of, shared by every step of the pipeline: the
//! figures' kinds and verdicts, a compared figure ([`Row`]), how the two sides'
//! runs relate ([`Design`]) and what noise is known beforehand
//! ([`KnownNoise`]), the settings a comparison ran with ([`Method`]) and the
//! comparison itself ([`Comparison`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::config::CheckConfig;
use super::matching::CaseKey;
use super::stats;

/// Fewer samples than this in a run: the time comparison is inconclusive.
pub const MIN_SAMPLES: usize = 5;

/// What a figure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The case's outcome (ok, failed, not available).
    Outcome,
    Memory,
    /// A simulated-CPU figure (`bench --simulate`): exact up to a tolerance.
    Simulated,
    Time,
}

/// The verdict on one figure, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Regression,
    Inconclusive,
    Improvement,
    NoChange,
    /// Matched, but not judged: `ignore` in vramlab.toml, times across
    /// machines, a case not run on one side.
    NotCompared,
}

/// One figure of one case, compared.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub case: CaseKey,
    /// `time` (median per iteration), a memory figure's name, or `outcome`.
    pub metric: String,
    pub kind: Kind,
    pub status: Status,
    /// Time: each side's geometric mean of its runs' medians.
    pub old: Option<f64>,
    pub new: Option<f64>,
    /// Memory: new − old (bytes or count). Time: new/old − 1.
    pub change: Option<f64>,
    /// Time: the interval of the ratio new/old.
    pub ratio_interval: Option<(f64, f64)>,
    /// Time: one-sided p-value for "slower" and its BH-adjusted value.
    pub p_slower: Option<f64>,
    pub q_slower: Option<f64>,
    /// Time: the smallest slowdown this comparison would have flagged (about 95 % of the time), e.g. 0.12 for 12 %.
    pub detectable_slowdown: Option<f64>,
    /// Time: runs on each side (A/B: pairs, twice).
    pub runs: Option<(usize, usize)>,
    /// Time: the noise between runs seen (standard deviation of ln(run median), as a fraction).
    pub between_run: Option<f64>,
    /// Time: the larger noise between runs the history knows for it, which
    /// the interval took instead (`--history`).
    pub known_between_run: Option<f64>,
    /// Time: the noise threshold that applied (fraction); memory: the tolerance (bytes).
    pub threshold: f64,
    /// Time: false when `gate_times = false` applied (a slowdown is reported, not a regression).
    pub gated: bool,
    /// In words, for people.
    pub detail: String,
    /// Simulated figures: the functions whose own instructions grew most
    /// (a differential profile), largest growth first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grew_most: Vec<FunctionChange>,
    /// Time: not gated because the case's simulated figures gate it.
    pub gated_by_simulation: bool,
    #[serde(skip)]
    pub(super) p_faster: Option<f64>,
    #[serde(skip)]
    pub(super) estimate: Option<stats::RunsEstimate>,
}

/// One function's own instructions on each side of a simulated figure
/// (None: not among the functions kept on that side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionChange {
    pub name: String,
    pub old: Option<u64>,
    pub new: Option<u64>,
}

impl FunctionChange {
    /// new − old, a side without the function counting 0.
    pub fn growth(&self) -> i64 {
        self.new.unwrap_or(0) as i64 - self.old.unwrap_or(0) as i64
    }
}

/// How the two sides' runs relate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Design {
    /// Independent runs: a baseline of k runs, this build of l.
    #[default]
    Runs,
    /// A/B pairs: run i of each side ran together, interleaved (`check --ab`).
    Pairs,
}

/// How to compare.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// Compare times even when the machines differ.
    pub force_times: bool,
    pub design: Design,
    /// Between-run noise of time figures known from the history's A/A runs.
    pub known_noise: Option<KnownNoise>,
}

/// Each time figure's between-run noise learned elsewhere (the history's runs
/// of one build in other sittings, [`crate::history::History::noise_floors`]):
/// where the runs compared show less, the comparison takes this.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownNoise {
    /// By figure name (`CaseKey`'s text and ` time`): σ of ln(time) between
    /// runs, and the builds it was pooled over.
    by_figure: BTreeMap<String, (f64, usize)>,
}

impl KnownNoise {
    pub fn new(floors: &[crate::history::NoiseFloor]) -> KnownNoise {
        KnownNoise { by_figure: floors.iter().map(|f| (f.name.clone(), (f.robust_between_run, f.builds))).collect() }
    }

    /// The noise known for the time of `case`, and the builds it comes from.
    pub fn time(&self, case: &CaseKey) -> Option<(f64, usize)> {
        self.by_figure.get(&format!("{case} time")).copied()
    }

    pub fn len(&self) -> usize {
        self.by_figure.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_figure.is_empty()
    }
}

/// The settings a comparison ran with, for the record.
#[derive(Debug, Clone, Serialize)]
pub struct Method {
    pub time_threshold_percent: f64,
    pub memory_tolerance_bytes: u64,
    pub confidence: f64,
    pub false_discovery_rate: f64,
    pub bootstrap_resamples: usize,
    pub seed: u64,
    pub gate_times: bool,
    /// The simulated figures' tolerance, percent.
    pub simulated_tolerance_percent: f64,
    /// The growth in instructions, and in estimated cycles, that is never a regression.
    pub simulated_floor_instructions: u64,
    pub simulated_floor_estimated_cycles: u64,
    /// How many figures were simulated-CPU figures (0 without `--simulate` on both sides).
    pub simulated_figures: usize,
    pub config_file: Option<PathBuf>,
    /// How many time comparisons Benjamini–Hochberg adjusted together.
    pub time_tests: usize,
    pub design: Design,
    /// Runs on each side (pairs: the same number).
    pub baseline_runs: usize,
    pub current_runs: usize,
}

impl Method {
    /// The settings of `cfg` a comparison of `design` ran with: `time_tests` time
    /// comparisons adjusted together, `simulated_figures` simulated-CPU figures, and
    /// the runs on each side. The bench gate and the memory gate both record it so.
    pub fn new(
        cfg: &CheckConfig,
        design: Design,
        time_tests: usize,
        simulated_figures: usize,
        runs: (usize, usize),
    ) -> Self {
        Method {
            time_threshold_percent: cfg.time_threshold_percent,
            memory_tolerance_bytes: cfg.memory_tolerance_bytes,
            confidence: cfg.confidence,
            false_discovery_rate: cfg.false_discovery_rate,
            bootstrap_resamples: cfg.bootstrap_resamples,
            seed: cfg.seed,
            gate_times: cfg.gate_times,
            simulated_tolerance_percent: cfg.simulated_tolerance_percent,
            simulated_floor_instructions: cfg.simulated_floor_instructions,
            simulated_floor_estimated_cycles: cfg.simulated_floor_estimated_cycles,
            simulated_figures,
            config_file: cfg.source.clone(),
            time_tests,
            design,
            baseline_runs: runs.0,
            current_runs: runs.1,
        }
    }
}

/// Two builds compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub baseline: String,
    pub current: String,
    pub baseline_commit: Option<String>,
    pub current_commit: Option<String>,
    /// Worst first.
    pub rows: Vec<Row>,
    pub only_in_baseline: Vec<CaseKey>,
    pub only_in_current: Vec<CaseKey>,
    /// Empty when the machines match.
    pub environment_differences: Vec<String>,
    /// False when the machines differ and times were not forced.
    pub times_compared: bool,
    pub notes: Vec<String>,
    /// What the user should act on (also GitHub warnings): e.g. times not judged for want of runs.
    pub warnings: Vec<String>,
    pub method: Method,
    /// The memory gate of snapshots: the call paths whose bytes at the
    /// allocated peak moved most, largest move first (empty for bench runs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_paths: Vec<PathMove>,
}

/// One call path's requested bytes live at the allocated peak of one rank
/// and device, before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathMove {
    pub case: CaseKey,
    /// The row's name (the innermost frame of the user's code, or the stand-in).
    pub label: String,
    /// The user's frames, innermost first.
    pub user_frames: Vec<String>,
    pub before_bytes: u64,
    pub after_bytes: u64,
    /// `after_bytes − before_bytes`.
    pub change_bytes: i64,
}

impl Comparison {
    pub fn count(&self, status: Status) -> usize {
        self.rows.iter().filter(|r| r.status == status).count()
    }

    pub fn has_regression(&self) -> bool {
        self.rows.iter().any(|r| r.status == Status::Regression)
    }

    /// 0: no regression; 1: at least one.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.has_regression())
    }
}

/// How the two sides are labelled in the output.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    pub baseline: String,
    pub current: String,
}
