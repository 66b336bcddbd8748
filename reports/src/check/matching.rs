//! The pipeline's first step: which cases of two run sets are the same case —
//! matched by suite, case name and parameters, per device, across every run of
//! each side; which figures of a case are memory (gated exactly) and which are
//! times (gated statistically).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use vramlab_suites::{CaseResult, RunResults};

use super::runs::RunSet;

/// A case's identity across runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CaseKey {
    pub suite: String,
    pub case: String,
    /// The parameters as canonical JSON (keys sorted), `{}` for none.
    pub params: String,
    pub device: String,
}

impl fmt::Display for CaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.suite, self.case)?;
        if self.params != "{}" {
            write!(f, " {}", self.params)?;
        }
        write!(f, " ({})", self.device)
    }
}

/// The cases of a run by key, in run order. A key seen twice (a suite that
/// repeats a case) gets `#2`, `#3` … appended to its case name.
pub fn index(run: &RunResults) -> Vec<(CaseKey, &CaseResult)> {
    let mut seen: BTreeMap<CaseKey, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for s in &run.suites {
        for c in &s.cases {
            let params = serde_json::to_string(&c.params).unwrap_or_else(|_| "{}".into());
            let mut key = CaseKey { suite: s.name.clone(), case: c.name.clone(), params, device: s.device.clone() };
            let n = seen.entry(key.clone()).or_insert(0);
            *n += 1;
            if *n > 1 {
                key.case = format!("{}#{n}", key.case);
            }
            out.push((key, c));
        }
    }
    out
}

/// One case found on both sides: its result in each run of each side (runs
/// that lack it are left out).
#[derive(Debug)]
pub struct MatchedCase<'a> {
    pub key: CaseKey,
    pub old: Vec<&'a CaseResult>,
    pub new: Vec<&'a CaseResult>,
}

/// The cases of two run sets, matched.
#[derive(Debug)]
pub struct Matched<'a> {
    /// In the order of the current side's first run.
    pub cases: Vec<MatchedCase<'a>>,
    pub only_in_baseline: Vec<CaseKey>,
    pub only_in_current: Vec<CaseKey>,
}

/// Matches the cases of `old` and `new`: a case is on a side when its first
/// run has it; each side then lists the case's result in every run that has it.
pub fn match_runs<'a>(old: &'a RunSet, new: &'a RunSet) -> Matched<'a> {
    let per_run = |set: &'a RunSet| -> Vec<BTreeMap<CaseKey, &'a CaseResult>> {
        set.runs().iter().map(|r| index(r).into_iter().collect()).collect()
    };
    let (old_runs, new_runs) = (per_run(old), per_run(new));
    let collect = |runs: &[BTreeMap<CaseKey, &'a CaseResult>], key: &CaseKey| -> Vec<&'a CaseResult> {
        runs.iter().filter_map(|r| r.get(key).copied()).collect()
    };
    let mut matched = Matched { cases: Vec::new(), only_in_baseline: Vec::new(), only_in_current: Vec::new() };
    for (key, _) in index(new.first()) {
        if old_runs[0].contains_key(&key) {
            let (o, n) = (collect(&old_runs, &key), collect(&new_runs, &key));
            matched.cases.push(MatchedCase { key, old: o, new: n });
        } else {
            matched.only_in_current.push(key);
        }
    }
    matched.only_in_baseline =
        index(old.first()).into_iter().map(|(k, _)| k).filter(|k| !new_runs[0].contains_key(k)).collect();
    matched
}

/// Is this metric a memory figure, compared exactly? Every `_bytes` metric,
/// and the counts that follow from the allocator's decisions: segments,
/// out-of-memory events and the batch sizes at which memory runs out.
pub fn is_memory_metric(name: &str) -> bool {
    name.ends_with("_bytes")
        || (name.ends_with("_count") && ["segment", "oom", "batch"].iter().any(|w| name.contains(w)))
}

/// A case's memory figures, by name: the memory metrics and the profiler's
/// peaks (`memory.peak_allocated_bytes`, …, `memory.at_peak.<tag>_bytes`).
pub fn memory_figures(c: &CaseResult) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> =
        c.metrics.iter().filter(|(k, _)| is_memory_metric(k)).map(|(k, v)| (k.clone(), *v)).collect();
    if let Some(m) = &c.memory {
        out.insert("memory.peak_allocated_bytes".into(), m.peak_allocated_bytes as f64);
        out.insert("memory.peak_reserved_bytes".into(), m.peak_reserved_bytes as f64);
        out.insert("memory.peak_active_bytes".into(), m.peak_active_bytes as f64);
        for (tag, b) in &m.by_category_at_peak_bytes {
            out.insert(format!("memory.at_peak.{tag}_bytes"), *b as f64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_metrics_by_name() {
        for m in
            ["peak_allocated_bytes", "segment_bytes", "oom_batch_count", "largest_fitting_batch_count", "oom_count"]
        {
            assert!(is_memory_metric(m), "{m}");
        }
        for m in ["pair_ns", "bandwidth_gbps", "steps_count", "speedup_vs_off_ratio", "bytes_per_s"] {
            assert!(!is_memory_metric(m), "{m}");
        }
    }
}
