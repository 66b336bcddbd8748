//! The results schema: what a run produces, versioned. Reports read this and
//! nothing else; the regression check compares two of these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use vramlab_display::chart::ChartSpec;

/// Bumped whenever a field changes meaning or disappears. Version 2 added each
/// profiled case's [`MemoryTimeline`] and [`CategoryStack`]; a version 1 file
/// reads as version 2 without them. Optional, additive fields do not bump it:
/// [`CaseResult::kernels`] came later within version 2, and files without it
/// read with an empty list, and so did [`SuiteResult::charts`] (files without
/// it get their charts from their suite in the build that reads them:
/// `declared_charts`).
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest version this build still reads (its cases have no timelines).
pub const OLDEST_READABLE_SCHEMA_VERSION: u32 = 1;

/// Points per series kept in a case's timeline (min/max decimation: peaks kept).
pub const TIMELINE_POINTS: usize = 2000;

/// Kernel runs kept per profiled case (the first ones), for `trace.json`.
pub const MAX_KERNEL_SLICES: usize = 1000;

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
    /// The charts the suite declares to show its claim, computed from the
    /// cases when it ran (optional and additive within schema v2: absent in
    /// older files and for suites that declare none; see
    /// `declared_charts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charts: Vec<ChartSpec>,
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
    /// The case's memory over time, decimated for drawing (schema v2; absent
    /// for cases that did not allocate and in version 1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<MemoryTimeline>,
    /// Allocated bytes by category over time, for cases whose allocations are
    /// tagged (the memory suite's training step; schema v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<CategoryStack>,
    /// The first [`MAX_KERNEL_SLICES`] kernels the case ran, in order, for the
    /// trace (profiled cases; optional and additive within schema v2: absent in
    /// older files and for cases that ran no kernel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelSlice>,
    /// The case's measured work as a CPU simulator counted it (`bench
    /// --simulate`: callgrind), for CPU cases (optional and additive within
    /// schema v2: absent without `--simulate`, in older files and for GPU runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<SimulatedCpu>,
}

/// Constructors for the common outcomes: each gives a case with no params,
/// timing, metrics, memory, notes, timeline, categories or kernels and a zero
/// duration; the `with_*` methods fill in the rest.
impl CaseResult {
    /// A case named `name` that ended with `outcome`.
    pub fn new(name: impl Into<String>, outcome: Outcome) -> CaseResult {
        CaseResult {
            name: name.into(),
            params: BTreeMap::new(),
            outcome,
            timing: None,
            metrics: BTreeMap::new(),
            memory: None,
            notes: Vec::new(),
            duration_ns: 0,
            timeline: None,
            categories: None,
            kernels: Vec::new(),
            simulated: None,
        }
    }

    /// A case that ran ([`Outcome::Ok`]).
    pub fn ok(name: impl Into<String>) -> CaseResult {
        CaseResult::new(name, Outcome::Ok)
    }

    /// A case that failed ([`Outcome::Failed`]) with `message`.
    pub fn failed(name: impl Into<String>, message: impl Into<String>) -> CaseResult {
        CaseResult::new(name, Outcome::Failed { message: message.into() })
    }

    /// A case that does not apply here ([`Outcome::NotAvailable`]) for `reason`.
    pub fn not_available(name: impl Into<String>, reason: impl Into<String>) -> CaseResult {
        CaseResult::new(name, Outcome::NotAvailable { reason: reason.into() })
    }

    /// With these [`params`](CaseResult::params) (replacing any).
    pub fn with_params(mut self, params: impl IntoIterator<Item = (String, serde_json::Value)>) -> Self {
        self.params = params.into_iter().collect();
        self
    }

    /// With this [`timing`](CaseResult::timing) (a `TimingStats` or an `Option`).
    pub fn with_timing(mut self, timing: impl Into<Option<TimingStats>>) -> Self {
        self.timing = timing.into();
        self
    }

    /// With these [`metrics`](CaseResult::metrics) (replacing any).
    pub fn with_metrics(mut self, metrics: impl IntoIterator<Item = (String, f64)>) -> Self {
        self.metrics = metrics.into_iter().collect();
        self
    }

    /// With this [`memory`](CaseResult::memory) (a `MemoryPeaks` or an `Option`).
    pub fn with_memory(mut self, memory: impl Into<Option<MemoryPeaks>>) -> Self {
        self.memory = memory.into();
        self
    }

    /// With these [`notes`](CaseResult::notes) (replacing any).
    pub fn with_notes(mut self, notes: Vec<String>) -> Self {
        self.notes = notes;
        self
    }

    /// With this [`duration_ns`](CaseResult::duration_ns).
    pub fn with_duration_ns(mut self, duration_ns: u64) -> Self {
        self.duration_ns = duration_ns;
        self
    }

    /// With this [`timeline`](CaseResult::timeline) (a `MemoryTimeline` or an `Option`).
    pub fn with_timeline(mut self, timeline: impl Into<Option<MemoryTimeline>>) -> Self {
        self.timeline = timeline.into();
        self
    }

    /// With these [`categories`](CaseResult::categories) (a `CategoryStack` or an `Option`).
    pub fn with_categories(mut self, categories: impl Into<Option<CategoryStack>>) -> Self {
        self.categories = categories.into();
        self
    }

    /// With these [`kernels`](CaseResult::kernels).
    pub fn with_kernels(mut self, kernels: Vec<KernelSlice>) -> Self {
        self.kernels = kernels;
        self
    }
}

/// A case's measured work as callgrind counted it, summed over the case's
/// measured regions (the harness's one call of the work; set-up, warm-up and
/// the harness itself are outside). Counts are of the simulated CPU, not of
/// this machine's: instructions are exact, the cache figures come from
/// callgrind's cache model, and `estimated_cycles` is an estimate from them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatedCpu {
    /// The simulated process's measured regions that were this case's, first
    /// and last (1-based, in the order they ran: callgrind's dump parts). Only
    /// in the simulated process's own results, until its dumps are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<(u64, u64)>,
    /// Instructions executed (callgrind's `Ir`).
    pub instructions: u64,
    /// Data reads and writes (`Dr`, `Dw`).
    pub data_reads: u64,
    pub data_writes: u64,
    /// First-level cache misses, instruction and data (`I1mr + D1mr + D1mw`).
    pub l1_misses: u64,
    /// Last-level cache misses: accesses that went to memory (`ILmr + DLmr + DLmw`).
    pub ll_misses: u64,
    /// An estimate, not a measurement: L1 hits + 5 × LL hits + 35 × LL misses
    /// (the weights iai-callgrind and gungraun use).
    pub estimated_cycles: u64,
    /// The functions with the most instructions of their own (not their
    /// callees'), largest first, demangled (the first [`SIMULATED_FUNCTIONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionCount>,
    /// What the counted call ran when the case's work follows a choice made
    /// by the clock (autotune's benchmark mode: the algorithm its timed run
    /// chose). Two sides with different choices counted different code: their
    /// figures are not compared, and the case's time gates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_choice: Option<String>,
}

/// Functions kept per simulated case.
pub const SIMULATED_FUNCTIONS: usize = 100;

/// One function's own instructions in a simulated case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCount {
    /// Demangled, as callgrind names it (instances of one generic function share a name and are summed).
    pub name: String,
    pub instructions: u64,
}

/// One kernel run of a case (source: the profiler's kernel events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSlice {
    /// The operation (`matmul`, `conv2d_forward`, …).
    pub name: String,
    /// The algorithm that ran it (`gemm_rayon`, `im2col_gemm`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub algorithm: String,
    /// `cpu:0`, `cuda:0`, …
    pub device: String,
    pub stream: u32,
    /// Start, nanoseconds since the case's recording started (for a GPU, the
    /// host time of the launch).
    pub start_ns: u64,
    /// Device time on a GPU, wall time on the CPU.
    pub duration_ns: u64,
}

/// A step series: `bytes[i]` holds from `time_ns[i]` until the next point.
/// Times are nanoseconds since the case's recording started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    pub time_ns: Vec<u64>,
    pub bytes: Vec<u64>,
}

/// One device's memory during a case (source: allocator), each series
/// decimated to at most [`TIMELINE_POINTS`] points by min/max buckets, so the
/// peak is always kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTimeline {
    pub device: String,
    /// Length of the recording; every time lies in `0..=duration_ns`.
    pub duration_ns: u64,
    pub allocated: Series,
    pub reserved: Series,
    pub active: Series,
    /// Phases open during the case, in the order they began.
    pub phases: Vec<PhaseBand>,
    /// The allocated peak: bytes, first time reached, phase path then.
    pub peak_allocated_bytes: u64,
    pub peak_time_ns: u64,
    pub peak_phase: Option<String>,
    /// Allocator events behind the (decimated) series.
    pub events: u64,
}

/// One instance of a phase, times relative to the recording's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseBand {
    pub name: String,
    /// Enclosing phases and this one, joined by `/`.
    pub path: String,
    /// 1 for a top-level phase.
    pub depth: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Allocated bytes by category over time (rows chosen by min/max decimation of
/// the total, so every row still sums and the peak row is kept).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryStack {
    pub time_ns: Vec<u64>,
    /// Category name (`parameter`, `gradient`, …) → bytes at each time; only
    /// categories that were ever non-zero.
    pub by_category_bytes: BTreeMap<String, Vec<u64>>,
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
