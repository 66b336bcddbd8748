//! The profiler's answers: memory levels, peaks, live allocations,
//! fragmentation, OOM reports, per-device profiles, phase spans and peaks,
//! kernel and copy tables — plain data, computed by [`super::passes`].

use serde::{Deserialize, Serialize};
use vramlab_engine::hooks::CopyKind;

use crate::timeline::{ByCategory, Category};

/// How many OOMs per device are reported in full (later ones are only counted).
pub const MAX_OOM_REPORTS: usize = 64;

/// How many of the largest live allocations an OOM report lists.
pub const OOM_LIVE_ALLOCATIONS: usize = 16;

/// The phase index of "no phase".
pub(crate) const NO_PHASE: u32 = u32::MAX;

/// The four allocator counters at one moment, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLevels {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub active_bytes: u64,
    pub requested_bytes: u64,
}

/// The highest value of one counter: when it was first reached and in which
/// phase (the innermost open phase of the thread whose event made it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    pub bytes: u64,
    pub time_ns: u64,
    /// Index of the record that made the peak (`None`: the counter never rose).
    pub event_index: Option<u64>,
    /// The phase path (`train_step/forward`), if any phase was open.
    pub phase: Option<String>,
}

/// One live allocation in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAllocation {
    pub addr: u64,
    /// The block's size, as counted in allocated bytes.
    pub size_bytes: u64,
    /// What the caller asked for.
    pub requested_bytes: u64,
    pub category: Category,
    pub stream: u32,
    pub allocated_at_ns: u64,
    /// The phase path in which it was allocated.
    pub phase: Option<String>,
}

/// Where the reserved bytes went at one moment: the answer to "why did I run
/// out of memory with memory reserved but unallocated".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragmentation {
    pub time_ns: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Reserved minus allocated (`reserved_but_unallocated` in PyTorch's OOM message).
    pub reserved_unallocated_bytes: u64,
    /// Freed blocks still in use by other streams (active minus allocated).
    pub pending_free_bytes: u64,
    /// Free bytes in segments that also hold active blocks — PyTorch's
    /// `inactive_split_bytes` (expandable segments are left out, as there).
    pub inactive_split_bytes: u64,
    /// Free bytes in segments (or mapped ranges of expandable segments) that
    /// hold no active block: what `empty_cache()` would give back.
    pub cached_free_bytes: u64,
    /// The largest free block: no request larger than this fits without a new segment.
    pub largest_free_block_bytes: u64,
    pub free_blocks: u64,
    pub segments: u64,
}

/// The state at a device's allocated peak.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakSnapshot {
    pub time_ns: u64,
    pub phase: Option<String>,
    pub levels: MemoryLevels,
    /// Sums to `levels.allocated_bytes`.
    pub by_category: ByCategory,
    /// Every live allocation, largest first (ties by address).
    pub live_allocations: Vec<LiveAllocation>,
    pub fragmentation: Fragmentation,
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Enough bytes were reserved but unallocated, yet no free block was large
    /// enough: fragmentation (try `expandable_segments:True` or
    /// `max_split_size_mb`).
    Fragmentation,
    /// Reserved-but-unallocated bytes were fewer than the request and the
    /// device had no room for a new segment: the work needs more memory.
    Capacity,
}

/// One out-of-memory event and the picture at that moment (after the
/// allocator's retries released its cached segments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomReport {
    pub time_ns: u64,
    pub event_index: u64,
    pub phase: Option<String>,
    pub stream: u32,
    pub requested_bytes: u64,
    /// The request after rounding: what a free block would have to hold.
    pub rounded_bytes: u64,
    /// Free bytes on the device, as the device reported them.
    pub device_free_bytes: u64,
    pub cause: OomCause,
    pub fragmentation: Fragmentation,
    /// The largest live allocations at that moment.
    pub largest_live_allocations: Vec<LiveAllocation>,
}

/// Counts of one device's allocator events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    pub allocator_events: u64,
    pub allocs: u64,
    pub frees_requested: u64,
    pub frees_completed: u64,
    pub segment_allocs: u64,
    pub segment_frees: u64,
    pub segment_maps: u64,
    pub segment_unmaps: u64,
    pub empty_cache_calls: u64,
    pub ooms: u64,
    /// Frees of blocks (and segments) allocated before the recording began:
    /// left out of every series, which cover what was allocated while recording.
    pub unmatched_frees: u64,
    pub kernels: u64,
    pub copies: u64,
}

/// What kind of device an index stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ProfiledDeviceKind {
    /// The host; its sampled counterpart is the process's resident memory.
    Cpu,
    /// A CUDA device; NVML samples are matched to it by `uuid`
    /// (`GPU-xxxxxxxx-…`, as NVML and `nvidia-smi -L` print it).
    Cuda { ordinal: u32, uuid: Option<String> },
    /// Simulated memory (replays, tests).
    Simulated,
    /// Not described when the profiler was started.
    #[default]
    Unknown,
}

/// A device of the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The index the engine's events carry.
    pub index: u32,
    /// `cpu`, `cuda:0`, `simulated`, …
    pub name: String,
    #[serde(flatten)]
    pub kind: ProfiledDeviceKind,
}

impl DeviceInfo {
    pub fn cpu(index: u32) -> DeviceInfo {
        DeviceInfo { index, name: "cpu".into(), kind: ProfiledDeviceKind::Cpu }
    }

    pub fn cuda(index: u32, ordinal: u32, uuid: Option<String>) -> DeviceInfo {
        DeviceInfo { index, name: format!("cuda:{ordinal}"), kind: ProfiledDeviceKind::Cuda { ordinal, uuid } }
    }

    pub fn simulated(index: u32) -> DeviceInfo {
        DeviceInfo { index, name: "simulated".into(), kind: ProfiledDeviceKind::Simulated }
    }
}

/// Everything the profile knows about one device's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub info: DeviceInfo,
    pub counts: EventCounts,
    /// The counters at the end of the recording.
    pub end: MemoryLevels,
    pub peak_allocated: Peak,
    pub peak_reserved: Peak,
    pub peak_active: Peak,
    pub peak_requested: Peak,
    /// Allocated bytes by category at the allocated peak.
    pub peak_by_category: ByCategory,
    /// The full picture at the allocated peak (`None`: nothing was allocated).
    pub at_peak_allocated: Option<PeakSnapshot>,
    /// The fragmentation picture at the reserved peak.
    pub at_peak_reserved: Option<Fragmentation>,
    /// The first [`MAX_OOM_REPORTS`] OOMs in full.
    pub oom_reports: Vec<OomReport>,
}

/// One instance of a phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub name: String,
    /// The enclosing phases and this one, joined by `/`.
    pub path: String,
    pub thread: u32,
    /// 1 for a top-level phase.
    pub depth: u32,
    pub start_ns: u64,
    /// The end, or the recording's end for a phase still open then.
    pub end_ns: u64,
    pub closed: bool,
}

/// The memory peak of a phase on one device, over all its instances. Nested
/// phases count toward their parents: while `forward` runs inside
/// `train_step`, both are open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePeak {
    pub phase: String,
    pub device: u32,
    pub instances: u64,
    pub total_ns: u64,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_time_ns: u64,
    pub peak_reserved_bytes: u64,
    /// The largest rise of allocated bytes above the value at an instance's entry.
    pub max_rise_bytes: u64,
}

/// One row of the kernel table: a kernel with one algorithm on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStats {
    pub name: String,
    pub algorithm: String,
    pub device: u32,
    pub calls: u64,
    /// Device time (wall time for CPU kernels).
    pub total_ns: u64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Host time spent launching.
    pub launch_total_ns: u64,
    /// Saturates at `u64::MAX`.
    pub total_flops: u64,
    pub total_bytes: u64,
    /// Total flops over total time, in 10⁹ floating-point operations per second.
    pub achieved_gflops: f64,
    /// Total bytes over total time, in 10⁹ bytes per second.
    pub achieved_gbps: f64,
}

/// One row of the copy table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyStats {
    pub kind: CopyKind,
    pub device: u32,
    pub pinned: bool,
    pub non_blocking: bool,
    pub calls: u64,
    pub total_bytes: u64,
    pub total_ns: u64,
    /// Total bytes over total time, in 10⁹ bytes per second.
    pub achieved_gbps: f64,
}

/// Everything the two passes found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Analysis {
    pub devices: Vec<DeviceProfile>,
    pub phases: Vec<PhaseSpan>,
    pub phase_peaks: Vec<PhasePeak>,
    pub kernels: Vec<KernelStats>,
    pub copies: Vec<CopyStats>,
    pub unmatched_phase_ends: u64,
}
