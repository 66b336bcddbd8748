//! `vramlab.toml`: the regression check's thresholds, with defaults, per suite,
//! case or metric. Every key is validated: an unknown key or a bad value is an
//! error naming it (and the file and line, from the TOML parser).
//!
//! ```toml
//! [check]                         # defaults for everything
//! time_threshold_percent = 5.0    # a slowdown smaller than this is noise
//! memory_tolerance_bytes = 0      # a memory increase beyond this is a regression
//! confidence = 0.95               # of the bootstrap interval
//! false_discovery_rate = 0.05     # Benjamini–Hochberg q over all time comparisons
//! bootstrap_resamples = 2000
//! seed = 42
//! gate_times = true               # false: times reported, never a regression
//! simulated_tolerance_percent = 0.5   # `bench --simulate`: instructions may grow this much
//! simulated_floor_instructions = 32   # … and a growth of at most this many is not a regression
//! simulated_floor_estimated_cycles = 350  # the same for estimated cycles (10 LL misses)
//! gate_simulated_times = false    # a case with a simulated figure: its time is reported only
//! max_time_noise_percent = 25.0   # a time noisier than this between runs is not judged
//!
//! [suite.allocator]               # one suite
//! time_threshold_percent = 10.0
//!
//! [case."memory/fragmentation*"]  # suite/case, `*` and `?` wildcards
//! memory_tolerance_bytes = 2097152
//!
//! [metric.memory_capacity_bytes]  # a metric name in every case (wildcards too)
//! ignore = true
//! ```
//!
//! The most specific setting wins: metric over case over suite over `[check]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;
use thiserror::Error;

/// The file's name at the repository root.
pub const CONFIG_FILE: &str = "vramlab.toml";

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// One level's settings as written; every field optional so levels layer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    pub time_threshold_percent: Option<f64>,
    pub memory_tolerance_bytes: Option<u64>,
    /// Leave this suite, case or metric out of the verdict (still listed).
    pub ignore: Option<bool>,
    /// False: its times are judged and reported, but a slowdown is not a regression.
    pub gate_times: Option<bool>,
    /// The simulated figures (`bench --simulate`): a growth beyond this percentage is a regression.
    pub simulated_tolerance_percent: Option<f64>,
    /// A growth of at most this many instructions is not a regression, whatever its percentage.
    pub simulated_floor_instructions: Option<u64>,
    /// A growth of at most this many estimated cycles is not a regression, whatever its percentage.
    pub simulated_floor_estimated_cycles: Option<u64>,
    /// True: a case with simulated figures on both sides has its time gated too.
    pub gate_simulated_times: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckSection {
    time_threshold_percent: Option<f64>,
    memory_tolerance_bytes: Option<u64>,
    confidence: Option<f64>,
    false_discovery_rate: Option<f64>,
    bootstrap_resamples: Option<usize>,
    seed: Option<u64>,
    gate_times: Option<bool>,
    simulated_tolerance_percent: Option<f64>,
    simulated_floor_instructions: Option<u64>,
    simulated_floor_estimated_cycles: Option<u64>,
    gate_simulated_times: Option<bool>,
    max_time_noise_percent: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    check: CheckSection,
    #[serde(default)]
    suite: BTreeMap<String, Overrides>,
    #[serde(default)]
    case: BTreeMap<String, Overrides>,
    #[serde(default)]
    metric: BTreeMap<String, Overrides>,
}

/// The check's settings: defaults and the per-suite, per-case and per-metric rules.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    pub time_threshold_percent: f64,
    pub memory_tolerance_bytes: u64,
    pub confidence: f64,
    pub false_discovery_rate: f64,
    pub bootstrap_resamples: usize,
    pub seed: u64,
    pub gate_times: bool,
    /// The simulated figures' tolerance, percent of the baseline's count.
    pub simulated_tolerance_percent: f64,
    /// The growth in instructions, and in estimated cycles, that is never a
    /// regression: what a tiny case's count moves between runs of one build
    /// (glibc malloc's path through a heap laid out a little differently, a
    /// few cache misses), a percent of a case of a few thousand instructions.
    pub simulated_floor_instructions: u64,
    pub simulated_floor_estimated_cycles: u64,
    /// Whether a case with simulated figures on both sides has its time gated too.
    pub gate_simulated_times: bool,
    /// A time whose between-run noise (σ of ln(time), the runs' or the
    /// history's) exceeds this percentage is not judged, and a warning says so.
    pub max_time_noise_percent: f64,
    suites: BTreeMap<String, Overrides>,
    cases: Vec<(String, GlobMatcher, Overrides)>,
    metrics: Vec<(String, GlobMatcher, Overrides)>,
    /// Where the settings came from (None: the defaults).
    pub source: Option<PathBuf>,
}

/// What applies to one metric of one case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub time_threshold: f64,
    pub memory_tolerance_bytes: u64,
    pub ignore: bool,
    pub gate_times: bool,
    /// The simulated figures' tolerance (fraction).
    pub simulated_tolerance: f64,
    /// The growth in instructions, and in estimated cycles, that is never a regression.
    pub simulated_floor_instructions: u64,
    pub simulated_floor_estimated_cycles: u64,
    pub gate_simulated_times: bool,
}

impl Default for CheckConfig {
    fn default() -> CheckConfig {
        CheckConfig {
            time_threshold_percent: 5.0,
            memory_tolerance_bytes: 0,
            confidence: 0.95,
            false_discovery_rate: 0.05,
            bootstrap_resamples: 2000,
            seed: 42,
            gate_times: true,
            simulated_tolerance_percent: 0.5,
            simulated_floor_instructions: 32,
            simulated_floor_estimated_cycles: 350,
            gate_simulated_times: false,
            max_time_noise_percent: 25.0,
            suites: BTreeMap::new(),
            cases: Vec::new(),
            metrics: Vec::new(),
            source: None,
        }
    }
}

impl CheckConfig {
    /// Reads `path`; a missing file is an error (use [`CheckConfig::discover`]
    /// for "the file if there is one").
    pub fn load(path: &Path) -> Result<CheckConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.into(), source })?;
        let mut cfg =
            CheckConfig::parse(&text).map_err(|message| ConfigError::Invalid { path: path.into(), message })?;
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// `dir/vramlab.toml` when it exists, else the defaults.
    pub fn discover(dir: &Path) -> Result<CheckConfig, ConfigError> {
        let path = dir.join(CONFIG_FILE);
        if path.is_file() { CheckConfig::load(&path) } else { Ok(CheckConfig::default()) }
    }

    /// Parses the TOML text; the error names the key and what is wrong with it.
    pub fn parse(text: &str) -> Result<CheckConfig, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
        let d = CheckConfig::default();
        let c = &file.check;
        let cfg = CheckConfig {
            time_threshold_percent: c.time_threshold_percent.unwrap_or(d.time_threshold_percent),
            memory_tolerance_bytes: c.memory_tolerance_bytes.unwrap_or(d.memory_tolerance_bytes),
            confidence: c.confidence.unwrap_or(d.confidence),
            false_discovery_rate: c.false_discovery_rate.unwrap_or(d.false_discovery_rate),
            bootstrap_resamples: c.bootstrap_resamples.unwrap_or(d.bootstrap_resamples),
            seed: c.seed.unwrap_or(d.seed),
            gate_times: c.gate_times.unwrap_or(d.gate_times),
            simulated_tolerance_percent: c.simulated_tolerance_percent.unwrap_or(d.simulated_tolerance_percent),
            simulated_floor_instructions: c.simulated_floor_instructions.unwrap_or(d.simulated_floor_instructions),
            simulated_floor_estimated_cycles: c
                .simulated_floor_estimated_cycles
                .unwrap_or(d.simulated_floor_estimated_cycles),
            gate_simulated_times: c.gate_simulated_times.unwrap_or(d.gate_simulated_times),
            max_time_noise_percent: c.max_time_noise_percent.unwrap_or(d.max_time_noise_percent),
            suites: file.suite.clone(),
            cases: globs("case", &file.case)?,
            metrics: globs("metric", &file.metric)?,
            source: None,
        };
        check_percent("check.time_threshold_percent", cfg.time_threshold_percent)?;
        check_percent("check.simulated_tolerance_percent", cfg.simulated_tolerance_percent)?;
        check_percent("check.max_time_noise_percent", cfg.max_time_noise_percent)?;
        if !(cfg.confidence > 0.5 && cfg.confidence < 1.0) {
            return Err(format!("check.confidence = {}: must lie between 0.5 and 1 (e.g. 0.95)", cfg.confidence));
        }
        if !(cfg.false_discovery_rate > 0.0 && cfg.false_discovery_rate < 1.0) {
            return Err(format!(
                "check.false_discovery_rate = {}: must lie between 0 and 1 (e.g. 0.05)",
                cfg.false_discovery_rate
            ));
        }
        if !(100..=1_000_000).contains(&cfg.bootstrap_resamples) {
            return Err(format!(
                "check.bootstrap_resamples = {}: must be between 100 and 1000000 (e.g. 2000)",
                cfg.bootstrap_resamples
            ));
        }
        for (table, map) in [("suite", &file.suite), ("case", &file.case), ("metric", &file.metric)] {
            for (name, o) in map {
                if let Some(t) = o.time_threshold_percent {
                    check_percent(&format!("{table}.\"{name}\".time_threshold_percent"), t)?;
                }
                if let Some(t) = o.simulated_tolerance_percent {
                    check_percent(&format!("{table}.\"{name}\".simulated_tolerance_percent"), t)?;
                }
            }
        }
        Ok(cfg)
    }

    /// The settings for `metric` of `case` in `suite`.
    pub fn resolve(&self, suite: &str, case: &str, metric: &str) -> Resolved {
        let mut r = Resolved {
            time_threshold: self.time_threshold_percent / 100.0,
            memory_tolerance_bytes: self.memory_tolerance_bytes,
            ignore: false,
            gate_times: self.gate_times,
            simulated_tolerance: self.simulated_tolerance_percent / 100.0,
            simulated_floor_instructions: self.simulated_floor_instructions,
            simulated_floor_estimated_cycles: self.simulated_floor_estimated_cycles,
            gate_simulated_times: self.gate_simulated_times,
        };
        let mut apply = |o: &Overrides| {
            if let Some(t) = o.time_threshold_percent {
                r.time_threshold = t / 100.0;
            }
            if let Some(m) = o.memory_tolerance_bytes {
                r.memory_tolerance_bytes = m;
            }
            if let Some(i) = o.ignore {
                r.ignore = i;
            }
            if let Some(g) = o.gate_times {
                r.gate_times = g;
            }
            if let Some(t) = o.simulated_tolerance_percent {
                r.simulated_tolerance = t / 100.0;
            }
            if let Some(n) = o.simulated_floor_instructions {
                r.simulated_floor_instructions = n;
            }
            if let Some(n) = o.simulated_floor_estimated_cycles {
                r.simulated_floor_estimated_cycles = n;
            }
            if let Some(g) = o.gate_simulated_times {
                r.gate_simulated_times = g;
            }
        };
        if let Some(o) = self.suites.get(suite) {
            apply(o);
        }
        let case_key = format!("{suite}/{case}");
        for (_, g, o) in &self.cases {
            if g.is_match(&case_key) {
                apply(o);
            }
        }
        for (_, g, o) in &self.metrics {
            if g.is_match(metric) {
                apply(o);
            }
        }
        r
    }
}

fn globs(table: &str, map: &BTreeMap<String, Overrides>) -> Result<Vec<(String, GlobMatcher, Overrides)>, String> {
    map.iter()
        .map(|(k, o)| {
            // `/` is an ordinary character here: case names contain it.
            let g = globset::GlobBuilder::new(k)
                .literal_separator(false)
                .build()
                .or_else(|_| Glob::new(&globset::escape(k)))
                .map_err(|e| format!("{table}.\"{k}\": not a valid pattern: {e}"))?;
            Ok((k.clone(), g.compile_matcher(), o.clone()))
        })
        .collect()
}

fn check_percent(key: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (0.0..=1000.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("{key} = {v}: must be a percentage between 0 and 1000 (e.g. 5.0)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_without_a_file() {
        let c = CheckConfig::parse("").unwrap();
        assert_eq!(c.time_threshold_percent, 5.0);
        assert_eq!(c.memory_tolerance_bytes, 0);
        let r = c.resolve("memory", "x", "peak_allocated_bytes");
        assert_eq!(
            r,
            Resolved {
                time_threshold: 0.05,
                memory_tolerance_bytes: 0,
                ignore: false,
                gate_times: true,
                simulated_tolerance: 0.005,
                simulated_floor_instructions: 32,
                simulated_floor_estimated_cycles: 350,
                gate_simulated_times: false
            }
        );
        let c = CheckConfig::parse(
            "[check]\nsimulated_floor_instructions = 0\n[suite.allocator]\nsimulated_floor_estimated_cycles = 35\n",
        )
        .unwrap();
        let r = c.resolve("allocator", "raw/4KiB", "simulated.estimated_cycles");
        assert_eq!((r.simulated_floor_instructions, r.simulated_floor_estimated_cycles), (0, 35));
        let c = CheckConfig::parse(
            "[check]\nsimulated_tolerance_percent = 1\n[case.\"cpu-vs-gpu/add*\"]\nsimulated_tolerance_percent = 0.1\n",
        )
        .unwrap();
        assert_eq!(c.resolve("cpu-vs-gpu", "add/cpu/1024", "simulated.instructions").simulated_tolerance, 0.001);
        assert_eq!(c.resolve("amp", "x", "simulated.instructions").simulated_tolerance, 0.01);
        let e = CheckConfig::parse("[check]\nsimulated_tolerance_percent = -1\n").unwrap_err();
        assert!(e.contains("check.simulated_tolerance_percent = -1"), "{e}");
    }

    #[test]
    fn the_most_specific_setting_wins() {
        let c = CheckConfig::parse(
            r#"
            [check]
            time_threshold_percent = 8
            [suite.allocator]
            time_threshold_percent = 10.0
            memory_tolerance_bytes = 100
            [case."allocator/cached/*"]
            time_threshold_percent = 20.0
            [metric."*_capacity_bytes"]
            ignore = true
            [suite.amp]
            gate_times = false
            "#,
        )
        .unwrap();
        assert_eq!(c.resolve("amp", "a", "t").time_threshold, 0.08);
        assert_eq!(c.resolve("allocator", "raw/64MiB", "t").time_threshold, 0.10);
        let r = c.resolve("allocator", "cached/64MiB", "peak_reserved_bytes");
        assert_eq!((r.time_threshold, r.memory_tolerance_bytes, r.ignore), (0.20, 100, false));
        assert!(c.resolve("devices", "props", "memory_capacity_bytes").ignore);
        assert!(!c.resolve("amp", "a", "time").gate_times && c.resolve("memory", "a", "time").gate_times);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = CheckConfig::parse("[check]\ntime_treshold_percent = 5\n").unwrap_err();
        assert!(e.contains("time_treshold_percent") && e.contains("unknown field"), "{e}");
        let e = CheckConfig::parse("[suite.amp]\nignroe = true\n").unwrap_err();
        assert!(e.contains("ignroe"), "{e}");
        let e = CheckConfig::parse("[check]\nmemory_tolerance_bytes = \"2MiB\"\n").unwrap_err();
        assert!(e.contains("memory_tolerance_bytes") || e.contains("line 2"), "{e}");
        let e = CheckConfig::parse("[check]\nconfidence = 1.5\n").unwrap_err();
        assert!(e.contains("check.confidence = 1.5"), "{e}");
        let e = CheckConfig::parse("[case.\"a/*\"]\ntime_threshold_percent = -1\n").unwrap_err();
        assert!(e.contains("case.\"a/*\".time_threshold_percent"), "{e}");
        let e = CheckConfig::parse("[typo]\n").unwrap_err();
        assert!(e.contains("typo"), "{e}");
    }

    #[test]
    fn the_repositorys_own_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(CONFIG_FILE);
        let c = CheckConfig::load(&path).unwrap();
        assert_eq!((c.time_threshold_percent, c.memory_tolerance_bytes), (5.0, 0));
        assert!(c.resolve("devices", "device_properties", "memory_capacity_bytes").ignore);
        assert!(!c.resolve("devices", "to_roundtrip/4KiB", "size_bytes").ignore);
    }

    #[test]
    fn load_names_the_file() {
        let path = std::env::temp_dir().join(format!("vramlab-config-{}.toml", std::process::id()));
        std::fs::write(&path, "[check]\nseed = -3\n").unwrap();
        let e = CheckConfig::load(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("seed"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
