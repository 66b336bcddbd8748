//! What a replay takes and gives: its limits ([`MAX_BYTES`], [`MAX_DEVICES`],
//! …), its options ([`ReplayOptions`], [`OnOom`]) and its report
//! ([`ReplayReport`], with every out-of-memory and too-large request).

use std::collections::BTreeMap;

use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use vramlab_allocator::{AllocatorConfig, OutOfMemoryError};

/// The largest capacity a replay may simulate: 1 PiB, the capacity of an
/// unlimited [`SimulatedMemory`](vramlab_allocator::SimulatedMemory). (Request sizes have no such limit: see the
/// module docs.)
pub const MAX_BYTES: u64 = 1 << 50;

/// How many out-of-memory events a report keeps in full; later ones are only
/// counted (in [`ReplayReport::ooms_not_recorded`] and `num_ooms`).
pub const MAX_OOM_RECORDS: usize = 1000;

/// The longest line a trace may have (newline included).
pub const MAX_LINE_BYTES: usize = 1 << 24;

/// Device indices a trace may use: 0 to 63.
pub const MAX_DEVICES: u32 = 64;

/// What to do when an allocation runs out of memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOom {
    /// End the replay at the first out-of-memory (what a PyTorch program does
    /// unless it catches the error).
    #[default]
    Stop,
    /// Record it and go on; later frees of the failed allocation are ignored.
    Continue,
}

/// How to replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayOptions {
    /// The simulated device's capacity; `None` is unlimited ([`MAX_BYTES`]).
    pub capacity_bytes: Option<u64>,
    /// The allocator configuration (as `PYTORCH_CUDA_ALLOC_CONF` would set it).
    pub config: AllocatorConfig,
    pub on_oom: OnOom,
}

/// One allocation that ran out of memory during a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct OomRecord {
    /// 0-based index of the op among the trace's ops (blank lines not counted).
    pub event_index: u64,
    /// The device index of the allocation (format version 2; 0 otherwise).
    pub device: u32,
    /// 1-based line number in the trace.
    pub line: u64,
    /// The `size` the trace asked for.
    pub requested_bytes: u64,
    pub error: OutOfMemoryError,
    /// The allocator's flattened statistics right after the failure.
    pub memory_stats: BTreeMap<String, i64>,
}

impl Serialize for OomRecord {
    /// As the fields plus `message`, the error's text.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("OomRecord", 7)?;
        s.serialize_field("event_index", &self.event_index)?;
        s.serialize_field("device", &self.device)?;
        s.serialize_field("line", &self.line)?;
        s.serialize_field("requested_bytes", &self.requested_bytes)?;
        s.serialize_field("message", &self.error.to_string())?;
        s.serialize_field("error", &self.error)?;
        s.serialize_field("memory_stats", &self.memory_stats)?;
        s.end()
    }
}

/// A request of [`MAX_REQUEST`](vramlab_allocator::MAX_REQUEST) (1 EiB) or more, which PyTorch refuses before its
/// allocator sees it: no statistic changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TooLargeRecord {
    /// 0-based index of the op among the trace's ops (blank lines not counted).
    pub event_index: u64,
    /// 1-based line number in the trace.
    pub line: u64,
    /// The `size` the trace asked for.
    pub requested_bytes: u64,
    /// The error's text.
    pub message: String,
}

/// The outcome of a replay. The memory figures are the allocator's
/// (`torch.cuda.memory_allocated()` and friends); peaks count from the last
/// `reset_peak` op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Ops applied, including allocations that ran out of memory.
    pub events: u64,
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Whether the replay ended at an out-of-memory before the end of the trace
    /// (only with [`OnOom::Stop`]).
    pub stopped_early: bool,
    pub current_allocated_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub current_reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Allocations the trace left live at the end (failed ones not counted).
    pub live_allocations: u64,
    /// The line of the last `reset_peak` op, from which the peaks count.
    pub last_reset_peak_line: Option<u64>,
    /// The first [`MAX_OOM_RECORDS`] out-of-memory events.
    pub ooms: Vec<OomRecord>,
    /// Out-of-memory events beyond [`MAX_OOM_RECORDS`], counted only.
    pub ooms_not_recorded: u64,
    /// The first [`MAX_OOM_RECORDS`] requests of 1 EiB or more (refused before the
    /// allocator, so not in `num_ooms`).
    pub too_large: Vec<TooLargeRecord>,
    /// Such requests beyond [`MAX_OOM_RECORDS`], counted only.
    pub too_large_not_recorded: u64,
    /// `torch.cuda.memory_stats()` at the end, flattened.
    pub memory_stats: BTreeMap<String, i64>,
    /// `torch.cuda.memory_summary()` at the end.
    pub summary: String,
    /// Every device the trace used, by index (device 0 always).
    pub devices: Vec<DeviceReport>,
}

/// One device's figures at the end of a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub current_allocated_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub current_reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// `torch.cuda.memory_stats(device)` at the end, flattened.
    pub memory_stats: BTreeMap<String, i64>,
}
