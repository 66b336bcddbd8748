//! The regression check: a finished run compared with a baseline run. Memory
//! figures are exact (any increase beyond a tolerance, default 0 bytes, is a
//! regression); times are judged by a seeded bootstrap interval of the ratio of
//! medians with a Mann–Whitney U test as a second opinion, Benjamini–Hochberg
//! over all time comparisons. The result is data: `output` renders it,
//! `export` turns a run into other tools' formats.

pub mod config;
pub mod export;
pub mod matching;
pub mod output;
pub mod stats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;
use vramlab_suites::{Outcome, RunResults};

pub use config::{CONFIG_FILE, CheckConfig, ConfigError};
pub use matching::CaseKey;

/// The newest results schema the check reads: this build's, and version 2
/// (which adds memory timelines) even before this build writes it. Fields it
/// does not know are ignored.
pub const MAX_SCHEMA_READ: u32 = if vramlab_suites::SCHEMA_VERSION > 2 { vramlab_suites::SCHEMA_VERSION } else { 2 };

/// Fewer samples than this on a side: the time comparison is inconclusive.
pub const MIN_SAMPLES: usize = 5;

/// Why a comparison could not be made (exit 2).
#[derive(Debug, Error)]
pub enum CheckError {
    #[error("{role} {path}: no such file — {}", missing_hint(role))]
    Missing { role: &'static str, path: PathBuf },
    #[error("{role} {path}: cannot be read: {source}")]
    Unreadable {
        role: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{role} {path}: not vramlab results, or corrupt or truncated ({reason}) — save the baseline again")]
    Corrupt { role: &'static str, path: PathBuf, reason: String },
    #[error("{role} {path}: incompatible: {reason}")]
    Incompatible { role: &'static str, path: PathBuf, reason: String },
}

fn missing_hint(role: &str) -> &'static str {
    if role == "baseline" {
        "save one with `cargo xtask bench --save-baseline NAME`, or name an existing results file"
    } else {
        "run `cargo xtask bench` first, or name an existing results file"
    }
}

/// Reads a results file for comparison (`role`: "baseline" or "results", for
/// messages). Unknown fields are ignored, so a later schema that only adds
/// fields still compares.
pub fn load_results(path: &Path, role: &'static str) -> Result<RunResults, CheckError> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            CheckError::Missing { role, path: path.to_path_buf() }
        } else {
            CheckError::Unreadable { role, path: path.to_path_buf(), source }
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(CheckError::Corrupt { role, path: path.into(), reason: "the file is empty".into() });
    }
    let run: RunResults = serde_json::from_slice(&bytes).map_err(|e| CheckError::Corrupt {
        role,
        path: path.into(),
        reason: e.to_string(),
    })?;
    if run.schema_version == 0 || run.schema_version > MAX_SCHEMA_READ {
        return Err(CheckError::Incompatible {
            role,
            path: path.into(),
            reason: format!(
                "results schema version {}; this build compares versions 1 to {MAX_SCHEMA_READ} — update vramlab, or save the baseline again with this build",
                run.schema_version
            ),
        });
    }
    Ok(run)
}

/// What a figure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The case's outcome (ok, failed, not available).
    Outcome,
    Memory,
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
    pub old: Option<f64>,
    pub new: Option<f64>,
    /// Memory: new − old (bytes or count). Time: new/old − 1.
    pub change: Option<f64>,
    /// Time: the bootstrap interval of the ratio new/old.
    pub ratio_interval: Option<(f64, f64)>,
    /// Time: Mann–Whitney one-sided p-value for "slower" and its BH-adjusted value.
    pub p_slower: Option<f64>,
    pub q_slower: Option<f64>,
    /// Time: the smallest slowdown this comparison would have flagged (about 95 % of the time), e.g. 0.12 for 12 %.
    pub detectable_slowdown: Option<f64>,
    /// Time: the noise threshold that applied (fraction); memory: the tolerance (bytes).
    pub threshold: f64,
    /// Time: false when `gate_times = false` applied (a slowdown is reported, not a regression).
    pub gated: bool,
    /// In words, for people.
    pub detail: String,
    #[serde(skip)]
    p_faster: Option<f64>,
    #[serde(skip)]
    interval: Option<stats::RatioInterval>,
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
    pub config_file: Option<PathBuf>,
    /// How many time comparisons Benjamini–Hochberg adjusted together.
    pub time_tests: usize,
}

/// Two runs compared.
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
    pub method: Method,
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

/// How the two runs are labelled in the output.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    pub baseline: String,
    pub current: String,
}

/// Compares `current` with `baseline`. `force_times` compares times even when
/// the machines differ.
pub fn compare(
    baseline: &RunResults,
    current: &RunResults,
    cfg: &CheckConfig,
    force_times: bool,
    labels: Labels,
) -> Comparison {
    let env_diff = matching::environment_differences(&baseline.environment, &current.environment);
    let times_compared = env_diff.is_empty() || force_times;
    let mut notes = Vec::new();
    if !env_diff.is_empty() {
        notes.push(if force_times {
            "the machines differ; times compared anyway (--force-times)".to_owned()
        } else {
            "the machines differ: times not compared (--force-times to compare them); memory compared".to_owned()
        });
    }
    if baseline.options.quick != current.options.quick {
        notes.push(format!(
            "the baseline is a {} run, this one {}: only the cases both ran are compared",
            if baseline.options.quick { "--quick" } else { "full" },
            if current.options.quick { "--quick" } else { "full" }
        ));
    }
    if baseline.options.seed != current.options.seed {
        notes.push(format!(
            "the runs used different seeds ({} vs {}): inputs differ",
            baseline.options.seed, current.options.seed
        ));
    }
    for (role, r) in [("baseline", baseline), ("this run", current)] {
        if r.schema_version > vramlab_suites::SCHEMA_VERSION {
            notes.push(format!(
                "{role} has results schema version {} (this build writes {}): fields it does not know were ignored",
                r.schema_version,
                vramlab_suites::SCHEMA_VERSION
            ));
        }
    }

    let old_index = matching::index(baseline);
    let new_index = matching::index(current);
    let old_map: BTreeMap<&CaseKey, &vramlab_suites::CaseResult> = old_index.iter().map(|(k, c)| (k, *c)).collect();
    let new_keys: std::collections::BTreeSet<&CaseKey> = new_index.iter().map(|(k, _)| k).collect();
    let only_in_baseline: Vec<CaseKey> =
        old_index.iter().filter(|(k, _)| !new_keys.contains(k)).map(|(k, _)| k.clone()).collect();
    let mut only_in_current = Vec::new();
    let mut rows = Vec::new();

    for (key, new_case) in &new_index {
        let Some(old_case) = old_map.get(key) else {
            only_in_current.push(key.clone());
            continue;
        };
        let case_rule = cfg.resolve(&key.suite, &key.case, "outcome");
        let row = |metric: &str, kind, status, detail: String| Row {
            case: key.clone(),
            metric: metric.to_owned(),
            kind,
            status,
            old: None,
            new: None,
            change: None,
            ratio_interval: None,
            p_slower: None,
            q_slower: None,
            detectable_slowdown: None,
            threshold: 0.0,
            gated: true,
            detail,
            p_faster: None,
            interval: None,
        };
        match (&old_case.outcome, &new_case.outcome) {
            (Outcome::Ok, Outcome::Ok) => {}
            (Outcome::Ok, Outcome::Failed { message }) => {
                let status = if case_rule.ignore { Status::NotCompared } else { Status::Regression };
                rows.push(row(
                    "outcome",
                    Kind::Outcome,
                    status,
                    format!("passed in the baseline, fails now: {message}"),
                ));
                continue;
            }
            (Outcome::Failed { message }, Outcome::Ok) => {
                rows.push(row(
                    "outcome",
                    Kind::Outcome,
                    Status::Improvement,
                    format!("failed in the baseline ({message}), passes now"),
                ));
                continue;
            }
            (Outcome::Failed { .. }, Outcome::Failed { message }) => {
                rows.push(row(
                    "outcome",
                    Kind::Outcome,
                    Status::NotCompared,
                    format!("fails on both sides: {message}"),
                ));
                continue;
            }
            (a, b) => {
                let why = match (a, b) {
                    (Outcome::NotAvailable { reason }, Outcome::NotAvailable { .. }) => {
                        format!("not available on either side: {reason}")
                    }
                    (Outcome::NotAvailable { reason }, _) => format!("not available in the baseline: {reason}"),
                    (_, Outcome::NotAvailable { reason }) => format!("not available in this run: {reason}"),
                    _ => "not run on both sides".to_owned(),
                };
                rows.push(row("outcome", Kind::Outcome, Status::NotCompared, why));
                continue;
            }
        }

        // Memory: exact.
        let old_mem = matching::memory_figures(old_case);
        let new_mem = matching::memory_figures(new_case);
        for (name, &v) in old_mem.iter().filter(|(k, _)| !new_mem.contains_key(*k)) {
            let mut r = row(name, Kind::Memory, Status::NotCompared, "in the baseline only".into());
            r.old = Some(v);
            rows.push(r);
        }
        for (name, &new_v) in &new_mem {
            let Some(&old_v) = old_mem.get(name) else {
                let mut r = row(name, Kind::Memory, Status::NotCompared, "not in the baseline".into());
                r.new = Some(new_v);
                rows.push(r);
                continue;
            };
            let rule = cfg.resolve(&key.suite, &key.case, name);
            let diff = new_v - old_v;
            let tol = rule.memory_tolerance_bytes as f64;
            let is_bytes = name.ends_with("_bytes");
            let status = if rule.ignore {
                Status::NotCompared
            } else if diff > tol {
                Status::Regression
            } else if diff < 0.0 {
                Status::Improvement
            } else {
                Status::NoChange
            };
            let detail = if diff == 0.0 {
                format!("{} on both sides", fmt_amount(new_v, is_bytes))
            } else {
                format!(
                    "{} → {} ({}{}{})",
                    fmt_amount(old_v, is_bytes),
                    fmt_amount(new_v, is_bytes),
                    if diff > 0.0 { "+" } else { "−" },
                    fmt_amount(diff.abs(), is_bytes),
                    if rule.ignore {
                        ", ignored by vramlab.toml".to_owned()
                    } else if diff > 0.0 && diff <= tol {
                        format!(", within the tolerance of {}", fmt_amount(tol, is_bytes))
                    } else {
                        String::new()
                    }
                )
            };
            let mut r = row(name, Kind::Memory, status, detail);
            r.old = Some(old_v);
            r.new = Some(new_v);
            r.change = Some(diff);
            r.threshold = tol;
            rows.push(r);
        }

        // Time: statistical.
        if let (Some(ot), Some(nt)) = (&old_case.timing, &new_case.timing) {
            let rule = cfg.resolve(&key.suite, &key.case, "time");
            let mut r = row("time", Kind::Time, Status::Inconclusive, String::new());
            r.old = Some(stats::median(&ot.samples_ns));
            r.new = Some(stats::median(&nt.samples_ns));
            r.threshold = rule.time_threshold;
            r.gated = rule.gate_times;
            if rule.ignore {
                r.status = Status::NotCompared;
                r.detail = "ignored by vramlab.toml".into();
            } else if !times_compared {
                r.status = Status::NotCompared;
                r.detail = "times are not compared across machines".into();
            } else if ot.samples_ns.len() < MIN_SAMPLES || nt.samples_ns.len() < MIN_SAMPLES {
                r.detail = format!(
                    "too few samples to judge ({} and {}; at least {MIN_SAMPLES} each)",
                    ot.samples_ns.len(),
                    nt.samples_ns.len()
                );
            } else {
                let seed = cfg.seed ^ fnv1a(&format!("{key}"));
                match stats::bootstrap_ratio_of_medians(
                    &ot.samples_ns,
                    &nt.samples_ns,
                    cfg.bootstrap_resamples,
                    cfg.confidence,
                    seed,
                ) {
                    Some(ci) => {
                        r.change = Some(ci.ratio - 1.0);
                        r.ratio_interval = Some((ci.lower, ci.upper));
                        r.interval = Some(ci);
                        r.detectable_slowdown =
                            Some(stats::detectable_ratio(&ci, cfg.confidence, rule.time_threshold) - 1.0);
                        let mw = stats::mann_whitney(&ot.samples_ns, &nt.samples_ns);
                        // Identical samples on both sides: no evidence of any change.
                        r.p_slower = Some(mw.map_or(1.0, |m| m.p_greater));
                        r.p_faster = Some(mw.map_or(1.0, |m| m.p_less));
                    }
                    None => r.detail = "no positive samples to compare".into(),
                }
            }
            rows.push(r);
        }
    }

    // Benjamini–Hochberg over every time comparison that produced a p-value.
    let tested: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].p_slower.is_some()).collect();
    let q_slower =
        stats::benjamini_hochberg(&tested.iter().map(|&i| rows[i].p_slower.unwrap_or(1.0)).collect::<Vec<_>>());
    let q_faster =
        stats::benjamini_hochberg(&tested.iter().map(|&i| rows[i].p_faster.unwrap_or(1.0)).collect::<Vec<_>>());
    for (j, &i) in tested.iter().enumerate() {
        let r = &mut rows[i];
        let Some(ci) = r.interval else { continue };
        r.q_slower = Some(q_slower[j]);
        let t = r.threshold;
        let slower = ci.lower > 1.0 + t && q_slower[j] <= cfg.false_discovery_rate;
        let faster = ci.upper < 1.0 / (1.0 + t) && q_faster[j] <= cfg.false_discovery_rate;
        let within = ci.lower >= 1.0 / (1.0 + t) && ci.upper <= 1.0 + t;
        r.status = if slower && r.gated {
            Status::Regression
        } else if slower {
            Status::Inconclusive
        } else if faster {
            Status::Improvement
        } else if within {
            Status::NoChange
        } else {
            Status::Inconclusive
        };
        let pct = |x: f64| format!("{:+.1} %", (x - 1.0) * 100.0);
        // The U test's p-value in the direction the medians moved.
        let (direction, p, q) = if ci.ratio < 1.0 {
            ("faster", r.p_faster.unwrap_or(1.0), q_faster[j])
        } else {
            ("slower", r.p_slower.unwrap_or(1.0), q_slower[j])
        };
        r.detail = format!(
            "median {} → {} ({}; {:.0} % interval {} to {}; Mann–Whitney p({direction}) = {:.2e}, BH-adjusted {:.2e}){}",
            fmt_ns(r.old.unwrap_or(0.0)),
            fmt_ns(r.new.unwrap_or(0.0)),
            pct(ci.ratio),
            cfg.confidence * 100.0,
            pct(ci.lower),
            pct(ci.upper),
            p,
            q,
            match r.status {
                _ if slower && !r.gated => "; slower, but times are not gated here (gate_times = false)".to_owned(),
                Status::Regression | Status::Improvement => String::new(),
                _ => format!(
                    "; could detect a slowdown of {:.0} % or more",
                    r.detectable_slowdown.unwrap_or(f64::NAN) * 100.0
                ),
            }
        );
    }

    rows.sort_by(|a, b| {
        // Within a status: outcomes, then memory (exact), then times; the largest change first.
        a.status
            .cmp(&b.status)
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| severity(b).total_cmp(&severity(a)))
            .then_with(|| a.case.cmp(&b.case))
    });
    Comparison {
        baseline: labels.baseline,
        current: labels.current,
        baseline_commit: baseline.environment.git_commit.clone(),
        current_commit: current.environment.git_commit.clone(),
        rows,
        only_in_baseline,
        only_in_current,
        environment_differences: env_diff,
        times_compared,
        notes,
        method: Method {
            time_threshold_percent: cfg.time_threshold_percent,
            memory_tolerance_bytes: cfg.memory_tolerance_bytes,
            confidence: cfg.confidence,
            false_discovery_rate: cfg.false_discovery_rate,
            bootstrap_resamples: cfg.bootstrap_resamples,
            seed: cfg.seed,
            gate_times: cfg.gate_times,
            config_file: cfg.source.clone(),
            time_tests: tested.len(),
        },
    }
}

/// How bad a row is within its status and kind: memory by the change as a
/// fraction of the old value, time by the interval's nearer bound.
fn severity(r: &Row) -> f64 {
    match (r.kind, r.status) {
        (Kind::Outcome, _) => f64::INFINITY,
        (Kind::Memory, _) => {
            let (old, change) = (r.old.unwrap_or(0.0), r.change.unwrap_or(0.0));
            if old > 0.0 { change / old } else { change.signum() * f64::MAX.sqrt() }
        }
        (Kind::Time, Status::Improvement) => -r.ratio_interval.map_or(0.0, |(_, hi)| 1.0 - hi).max(0.0) - 1.0,
        (Kind::Time, _) => r.ratio_interval.map_or(0.0, |(lo, _)| lo - 1.0),
    }
}

/// FNV-1a of a string: a stable per-case seed offset (std's hasher is not
/// stable across releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Bytes in binary units (exact below 1 KiB) or a plain count.
pub fn fmt_amount(v: f64, bytes: bool) -> String {
    if !bytes {
        return format!("{v}");
    }
    let a = v.abs();
    if a < 1024.0 {
        format!("{v} B")
    } else if a < 1024.0 * 1024.0 {
        format!("{:.1} KiB", v / 1024.0)
    } else if a < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MiB", v / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", v / (1024.0 * 1024.0 * 1024.0))
    }
}

/// A time in ns with a readable unit.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests;
