//! The results schema: what a run produces, versioned. Reports read this and
//! nothing else; the regression check compares two of these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bumped whenever a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// One `cargo xtask bench` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    pub schema_version: u32,
    pub vramlab_version: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub options: RunOptions,
    pub environment: Environment,
    /// In the order they ran; a suite appears once it has finished.
    pub suites: Vec<SuiteResult>,
}

/// What the run was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOptions {
    /// Suites requested (empty: all).
    pub suites: Vec<String>,
    /// `auto`, `cpu`, `cuda:N` as given.
    pub device: String,
    pub quick: bool,
    /// Timed samples per case (None: the harness's adaptive default).
    pub samples: Option<usize>,
    pub seed: u64,
    /// Capacity of the CPU device used by the memory suite.
    pub capacity_bytes: u64,
}

/// The machine the numbers come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub cpu_model: String,
    pub cpu_cores: u32,
    /// Host memory (source: host, /proc/meminfo).
    pub host_memory_bytes: u64,
    /// One entry per usable GPU; empty without one.
    pub gpus: Vec<GpuInfo>,
    /// Why there is no GPU, when there is none.
    pub gpu_unavailable_reason: Option<String>,
    /// The device the suites ran on.
    pub device: String,
    pub os: String,
    pub rustc: Option<String>,
    pub git_commit: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

/// One suite's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteResult {
    pub name: String,
    /// The guides' claim(s) the suite measures.
    pub description: String,
    pub device: String,
    pub duration_ns: u64,
    pub cases: Vec<CaseResult>,
    /// What the cases say about the claims.
    pub findings: Vec<Finding>,
}

/// One case's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub name: String,
    /// What varies between cases (`size`, `dtype`, `pinned`, …).
    pub params: BTreeMap<String, serde_json::Value>,
    pub outcome: Outcome,
    pub timing: Option<TimingStats>,
    /// Other measurements, each name carrying its unit (`_bytes`, `_ns`, `_gbps`,
    /// `_tflops`, `_ratio`, `_percent`, `_count`).
    pub metrics: BTreeMap<String, f64>,
    /// The profiler's view of the case, when it allocated.
    pub memory: Option<MemoryPeaks>,
    pub notes: Vec<String>,
    pub duration_ns: u64,
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// It failed, panicked, ran out of memory unexpectedly or overran its budget.
    Failed {
        message: String,
    },
    /// It does not apply here (e.g. a GPU case without a GPU).
    NotAvailable {
        reason: String,
    },
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }
}

/// Timing of a case: warm-up excluded, raw samples kept for the regression check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingStats {
    /// `host` (wall clock around synchronous work) or `device_events`.
    pub clock: String,
    /// Iterations of the work per sample (more than 1 for fast cases).
    pub iterations_per_sample: u64,
    pub median_ns: f64,
    pub p25_ns: f64,
    pub p75_ns: f64,
    pub iqr_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    pub mean_ns: f64,
    /// Per-iteration time of every sample.
    pub samples_ns: Vec<f64>,
}

/// Memory of a case, from a profiler recording (source: allocator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryPeaks {
    pub device: String,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub peak_active_bytes: u64,
    /// Phase path at the allocated peak.
    pub peak_phase: Option<String>,
    /// Allocated bytes by tag at the allocated peak.
    pub by_category_at_peak_bytes: BTreeMap<String, u64>,
    pub allocator_events: u64,
}

/// A verdict on a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub claim: String,
    pub verdict: Verdict,
    /// The numbers behind the verdict, in words.
    pub evidence: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Holds,
    DoesNotHold,
    Inconclusive,
    NotApplicable,
}
