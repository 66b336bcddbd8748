//! What a snapshot replay is asked and what it gives back: the options
//! ([`SnapshotReplayOptions`]), the outcome ([`SnapshotReplay`]) with its
//! fidelity check ([`FidelityReport`]), the memory live at the start
//! ([`LiveAtStart`]) and the out-of-memory errors of the replay, and the
//! errors that stop one ([`SnapshotReplayError`]).

use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

use super::oom::{InferredCapacity, OomRequest, ReleaseSummary};
use super::pools::PoolInference;
use super::stats_check::{MemoryStatsCheck, PytorchStats, StatsNotCompared, compare};
use super::underivable::UnderivableStat;
use crate::format::model::{Action, Snapshot, StackId};
use vramlab_allocator::{AllocError, AllocatorConfig};
use vramlab_replay::OnOom;

/// How to replay a snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotReplayOptions {
    /// The device whose trace to replay; `None` is the one with the most entries.
    pub device: Option<usize>,
    /// Keep only entries with `time_us` in this window (inclusive).
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    /// The simulated device's capacity; `None` is unlimited, or, for a trace
    /// with `oom` entries, the capacity they imply ([`InferredCapacity`]).
    pub capacity_bytes: Option<u64>,
    /// Never infer a capacity from recorded OOMs: `None` stays unlimited.
    pub no_capacity_inference: bool,
    /// `torch.cuda.set_per_process_memory_fraction(f)` on the simulated device:
    /// the process may reserve `f` × the capacity (garbage collection under
    /// `garbage_collection_threshold` acts only with a fraction below 1, as in PyTorch).
    pub memory_fraction: Option<f64>,
    /// The settings to replay under; `None` is the snapshot's own (its
    /// `allocator_settings`, or PyTorch's defaults when it has none).
    pub config: Option<AllocatorConfig>,
    pub on_oom: OnOom,
    /// Record the replay itself as a [`Snapshot`] ([`SnapshotReplay::recording`]),
    /// for export as a pickle or a Chrome trace.
    pub record: bool,
    /// Bytes to request instead of the trace's, one per entry of the device's
    /// trace (read for `alloc` and `oom` entries): the smaller-batch what-if's
    /// scaled requests (`whatif.rs`). `None` replays the trace's own sizes.
    pub request_sizes: Option<Arc<[u64]>>,
    /// Segments the trace does not place (no recorded address) take addresses
    /// going down rather than up. Only a trace without segment events (an
    /// estimate's capture) is changed by it: where the driver put each segment
    /// decides which of two equal free blocks PyTorch reuses.
    pub fresh_addresses_downwards: bool,
}

/// Where the replay and the recording first disagree on segment events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentDisagreement {
    /// 0-based position in the sequence of segment events.
    pub position: u64,
    /// The recorded event there: its index in the device trace, action and size.
    pub recorded: Option<(u64, Action, u64)>,
    /// The replayed event there: the trace index that caused it, action and size.
    pub replayed: Option<(u64, Action, u64)>,
}

/// Where an allocation landed: the segment (numbered in the order the trace,
/// or the replay, allocated segments, from 0), its size and the offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub segment: u64,
    pub segment_bytes: u64,
    pub offset: u64,
}

/// The first allocation the replay put somewhere other than the recording did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Misplacement {
    /// Index of the `alloc` in the device trace.
    pub trace_index: u64,
    pub requested_bytes: u64,
    pub recorded: Placement,
    /// `None`: the replay's block lies in a segment it allocated outside the
    /// trace (memory live at the start).
    pub replayed: Option<Placement>,
}

/// The fidelity check's outcome (only for a whole-trace replay under the
/// snapshot's own settings on an unlimited device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FidelityReport {
    pub recorded_segment_events: u64,
    pub replayed_segment_events: u64,
    pub first_segment_disagreement: Option<SegmentDisagreement>,
    /// The first allocation placed differently (`None` also when the check
    /// does not apply: expandable segments).
    pub first_misplaced_alloc: Option<Misplacement>,
    pub recorded_segments: u64,
    pub replayed_segments: u64,
    /// The first difference between the final segments (sorted by size, then
    /// their blocks' sizes and states), described; `None` when they agree.
    pub final_segments_disagreement: Option<String>,
    pub recorded_allocated_bytes: u64,
    pub replayed_allocated_bytes: u64,
    pub recorded_reserved_bytes: u64,
    pub replayed_reserved_bytes: u64,
    /// PyTorch's own `memory_stats()` read at the dump (the `.stats.json`
    /// beside the snapshot) compared key by key, when there is one
    /// ([`SnapshotReplay::check_memory_stats`]).
    pub memory_stats: Option<MemoryStatsCheck>,
}

impl FidelityReport {
    /// The segment events, placements, final segments and totals agree, and
    /// so does every `memory_stats()` key where PyTorch's are known.
    pub fn agrees(&self) -> bool {
        self.memory_stats.as_ref().is_none_or(MemoryStatsCheck::agrees)
            && self.first_segment_disagreement.is_none()
            && self.first_misplaced_alloc.is_none()
            && self.final_segments_disagreement.is_none()
            && self.recorded_allocated_bytes == self.replayed_allocated_bytes
            && self.recorded_reserved_bytes == self.replayed_reserved_bytes
    }
}

/// One out-of-memory in the replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayOom {
    /// Index of the `alloc` in the device trace.
    pub trace_index: u64,
    pub time_us: i64,
    pub requested_bytes: u64,
    pub frames: StackId,
    pub message: String,
}

/// The outcome of a snapshot replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotReplay {
    pub device: usize,
    /// Whether the device was chosen as the busiest (no `--device`).
    pub device_chosen: bool,
    pub devices_with_entries: u64,
    /// The settings replayed, in `PYTORCH_CUDA_ALLOC_CONF` syntax ("" = defaults).
    pub alloc_conf: String,
    pub settings_from_snapshot: bool,
    pub capacity_bytes: Option<u64>,
    pub entries: u64,
    pub entries_in_window: u64,
    pub allocs: u64,
    pub frees: u64,
    pub live_at_start: LiveAtStart,
    /// Entries that made no sense (a free of a block freed already, an alloc at a live address), skipped.
    pub skipped_entries: u64,
    pub first_skipped: Option<String>,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub final_allocated_bytes: u64,
    pub final_reserved_bytes: u64,
    /// Segment allocations (`cudaMalloc` calls, or mappings for expandable segments) in the replay.
    pub segment_allocs: u64,
    /// Free bytes in the largest free block, and reserved − allocated, at the reserved peak.
    pub largest_free_block_at_peak_bytes: u64,
    pub fragmentation_at_peak_bytes: u64,
    pub ooms: Vec<ReplayOom>,
    pub stopped_early: bool,
    /// `oom` entries in the recording itself.
    pub recorded_ooms: u64,
    /// The capacity used when none was given, inferred from the recorded OOMs.
    pub capacity_inferred: Option<InferredCapacity>,
    /// Why no capacity could be inferred for a trace with recorded OOMs (they
    /// are then only counted, and their releases replayed as `empty_cache()`).
    pub capacity_not_inferred: Option<String>,
    /// The per-process limit in force (fraction or inferred), in bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Each recorded failed request, made again: served or not, with how much
    /// to spare or how much short.
    pub oom_requests: Vec<OomRequest>,
    /// Whose the recorded releases (runs of segment frees) were and how the
    /// replay treated them.
    pub releases: ReleaseSummary,
    /// Private pools the snapshot's segments use on this device, replayed as
    /// private pools (see the module docs).
    pub private_pools: Vec<(i64, i64)>,
    /// How each segment's pool was learned (final segments, inferred, assumed default).
    pub pool_inference: PoolInference,
    /// Frees whose `free_completed` came after other entries: blocks used on other
    /// streams (`record_stream`), allocated no more from `free_requested`, reusable
    /// only from `free_completed` (PyTorch's two-step free).
    pub frees_deferred: u64,
    /// Of those, still waiting for other streams at the dump (no `free_completed`).
    pub frees_pending_at_end: u64,
    /// Index in the trace of the entry at which allocated memory peaked (after it ran).
    pub peak_allocated_index: Option<u64>,
    pub fidelity: Option<FidelityReport>,
    /// `torch.cuda.memory_stats()` of the replay's allocator at the end, keyed
    /// as PyTorch keys it. Equal to the recording process's own when the trace
    /// holds everything from its first allocation (nothing live at the start).
    pub final_memory_stats: std::collections::BTreeMap<String, i64>,
    /// The keys of `final_memory_stats` this recording's trace cannot determine
    /// (underivable.rs): lower bounds or not known. Every other key is
    /// PyTorch's when the fidelity check agrees.
    pub underivable_stats: Vec<UnderivableStat>,
    /// The replay as a snapshot (its trace and final segments, the simulated
    /// addresses; the memory placed before the first entry comes first), when
    /// [`SnapshotReplayOptions::record`] asked for it.
    #[serde(skip)]
    pub recording: Option<Snapshot>,
}

impl SnapshotReplay {
    /// Compares `pytorch` with this replay's final `memory_stats()` and puts
    /// the result into its fidelity report. Only a replay with a fidelity
    /// check (the recording's own settings, whole trace) of the stats' device.
    pub fn check_memory_stats(&mut self, pytorch: &PytorchStats) -> Result<&MemoryStatsCheck, StatsNotCompared> {
        let device = pytorch.device_index.unwrap_or(0);
        if device != self.device {
            return Err(StatsNotCompared::OtherDevice { stats: device, replay: self.device });
        }
        let check = compare(&self.final_memory_stats, &self.underivable_stats, pytorch);
        let fidelity = self.fidelity.as_mut().ok_or(StatsNotCompared::NotTheRecording)?;
        Ok(fidelity.memory_stats.insert(check))
    }
}

/// A snapshot that cannot be replayed as asked.
#[derive(Debug, Error)]
pub enum SnapshotReplayError {
    #[error(
        "device {device} has no trace in this snapshot (it has {available} device trace(s); pick one with --device)"
    )]
    NoSuchDevice { device: usize, available: usize },
    #[error(
        "no device in this snapshot has trace entries; was it recorded with torch.cuda.memory._record_memory_history()?"
    )]
    NoTrace,
    #[error("the capacity of {0} bytes is too large: at most 1 PiB can be simulated")]
    CapacityTooLarge(u64),
    #[error("the memory fraction {0} is not in [0, 1]")]
    InvalidFraction(f64),
    #[error("the trace uses more than {max} streams, more than the allocator model tracks")]
    TooManyStreams { max: u32 },
    #[error("cannot set up the allocator: {0}")]
    Setup(#[source] AllocError),
    #[error("trace entry {index}: {source}")]
    Allocator {
        index: u64,
        #[source]
        source: AllocError,
    },
}

/// Memory live when the recording began: the trace rewound from the final
/// segments, set up before the first entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LiveAtStart {
    /// Segments reserved at the first entry (rewound), and their bytes.
    pub segments: u64,
    pub segments_bytes: u64,
    /// Blocks allocated at the first entry, and their bytes (block sizes).
    pub blocks: u64,
    pub blocks_bytes: u64,
    /// Of those, the blocks still allocated in the final segments with no
    /// entry in the trace (bytes requested).
    pub blocks_in_segments: u64,
    pub blocks_in_segments_bytes: u64,
    /// Of those, the blocks freed in the trace whose `alloc` is not in it
    /// (lost from the ring buffer; bytes requested).
    pub freed_without_alloc: u64,
    pub freed_without_alloc_bytes: u64,
    /// Blocks allocated at the first entry that lie in no segment then (the
    /// trace contradicts the final segments): placed in segments of the
    /// replay's own making.
    pub outside_segments: u64,
    /// Trace entries the backward walk could not undo (an `alloc` of a block
    /// not live, a free of one live, a segment event of no segment), and the
    /// first of them.
    pub entries_not_undone: u64,
    pub first_not_undone: Option<String>,
}
