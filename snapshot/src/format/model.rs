//! The typed model of a PyTorch memory snapshot: segments and their blocks, the
//! per-device traces, the interned frames, and the allocator settings in force.

use std::sync::Arc;

use serde::Serialize;

use super::estimate::Estimate;
use vramlab_allocator::{AllocatorConfig, BlockState, ROUNDUP_BUCKETS};

/// An interned call stack: an index into [`FrameTable::stacks`]; 0 is "no frames".
pub type StackId = u32;

/// One Python (or C++) frame as PyTorch's `py_symbolize` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Frame {
    pub filename: Arc<str>,
    pub line: i64,
    pub name: Arc<str>,
}

impl Frame {
    /// `file:line:function` with the file's last path component, as memory_viz shows it.
    pub fn short(&self) -> String {
        let file = self.filename.rsplit('/').next().unwrap_or(&self.filename);
        format!("{file}:{}:{}", self.line, self.name)
    }
}

/// Every distinct frame and call stack of a snapshot, each stored once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameTable {
    pub frames: Vec<Frame>,
    /// Stacks as frame indices, innermost first (PyTorch's order); stack 0 is empty.
    pub stacks: Vec<Box<[u32]>>,
}

impl FrameTable {
    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: StackId) -> impl Iterator<Item = &Frame> {
        self.stacks.get(id as usize).into_iter().flat_map(|s| s.iter()).map(|&f| &self.frames[f as usize])
    }
}

/// What a trace entry records (`TraceEntry::Action` in PyTorch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
    /// `torch.cuda.empty_cache()` where the program called it: an entry of
    /// `vramlab estimate`'s capture, which has no segments to free (PyTorch's
    /// own trace shows the `segment_free` entries instead).
    EmptyCache,
    /// An action this reader does not know (a newer PyTorch's); kept and skipped by the replay.
    Other,
}

impl Action {
    pub fn from_name(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "oom" => Action::Oom,
            "snapshot" => Action::Snapshot,
            "empty_cache" => Action::EmptyCache,
            _ => Action::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::EmptyCache => "empty_cache",
            Action::Other => "other",
        }
    }
}

/// One entry of a device trace. For `alloc` and the frees, `size` is the bytes
/// requested; for segment actions the segment's (or mapped range's) size; for
/// `oom`, `addr` holds the device's free bytes (`device_free`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: i64,
    /// Microseconds (PyTorch's `time_us`); 0 when the snapshot has no times.
    pub time_us: i64,
    pub frames: StackId,
}

/// Which of the allocator's pools a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentType {
    Large,
    Small,
    /// Absent (the oldest layouts): inferred from the size by the replay.
    Unknown,
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    /// Bytes requested (the legacy layout's `history[0].real_size`); for free blocks 0.
    pub requested_size: u64,
    pub state: BlockState,
    pub frames: StackId,
}

/// One segment (`cudaMalloc`'d range, or the mapped part of an expandable segment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub stream: i64,
    pub segment_type: SegmentType,
    /// `(0, 0)` is the default pool; anything else a private pool (CUDA graphs,
    /// `torch.cuda.MemPool`), which the replay does not model yet.
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub frames: StackId,
    pub blocks: Vec<Block>,
}

impl Segment {
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.size).sum()
    }
}

/// `allocator_settings` as PyTorch 2.2+ writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// The `PYTORCH_CUDA_ALLOC_CONF` string last applied ("" when unset).
    pub alloc_conf: String,
    /// `None` is unlimited (PyTorch writes `SIZE_MAX` as -1).
    pub max_split_size: Option<u64>,
    /// `None` when 0 (off).
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: bool,
    /// Divisions per power-of-two bucket, PyTorch's `roundup_power2_divisions`
    /// keys ("1", "2", "4", … MiB) in order.
    pub roundup_power2_divisions: [u64; ROUNDUP_BUCKETS],
}

impl AllocatorSettings {
    /// The settings as PyTorch would record them for `config`.
    pub fn from_config(config: &AllocatorConfig) -> AllocatorSettings {
        AllocatorSettings {
            alloc_conf: config.to_string(),
            max_split_size: config.max_split_size,
            garbage_collection_threshold: config.garbage_collection_threshold,
            expandable_segments: config.expandable_segments,
            roundup_power2_divisions: config.roundup_power2_divisions,
        }
    }

    /// The allocator configuration these settings describe: the recorded fields,
    /// plus what only the `PYTORCH_CUDA_ALLOC_CONF` string holds
    /// (`max_non_split_rounding_mb`, …) when vramlab can parse it.
    pub fn to_config(&self) -> AllocatorConfig {
        let mut config = AllocatorConfig::parse(&self.alloc_conf).unwrap_or_default();
        config.max_split_size = self.max_split_size;
        config.garbage_collection_threshold = self.garbage_collection_threshold;
        config.expandable_segments = self.expandable_segments;
        config.roundup_power2_divisions = self.roundup_power2_divisions;
        config
    }
}

/// A PyTorch memory snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The pickle protocol the file was written with.
    pub protocol: u8,
    pub segments: Vec<Segment>,
    /// One trace per device index (empty for devices that recorded nothing).
    pub device_traces: Vec<Vec<TraceEntry>>,
    /// Per device, the leading entries a windowed read dropped (empty, or
    /// all 0, for a whole read): entry `i` of a trace is the recording's
    /// entry `skipped_entries[device] + i`.
    pub skipped_entries: Vec<u64>,
    pub frames: FrameTable,
    /// Absent in snapshots from PyTorch before 2.2.
    pub allocator_settings: Option<AllocatorSettings>,
    /// The legacy layout (`history` in blocks, PyTorch 2.0).
    pub legacy_layout: bool,
    /// Pinned host memory (`host_segments`, `host_traces`): counted, not replayed.
    pub host_segments: u64,
    pub host_trace_entries: u64,
    pub external_annotations: u64,
    /// Top-level keys this reader does not use, tolerated.
    pub other_keys: Vec<String>,
    /// The `vramlab_estimate` marker: the snapshot was captured with no GPU
    /// (`vramlab estimate`), its figures are estimates.
    pub estimate: Option<Estimate>,
}

impl Snapshot {
    /// A snapshot of one device (index 0): its trace, its final segments and the
    /// stacks the entries name, as PyTorch 2.2 and later write it (protocol 4,
    /// no allocator settings, nothing else). For tests and generated snapshots.
    pub fn of_one_device(trace: Vec<TraceEntry>, segments: Vec<Segment>, frames: FrameTable) -> Snapshot {
        Snapshot {
            protocol: 4,
            segments,
            device_traces: vec![trace],
            skipped_entries: Vec::new(),
            frames,
            allocator_settings: None,
            legacy_layout: false,
            host_segments: 0,
            host_trace_entries: 0,
            external_annotations: 0,
            other_keys: Vec::new(),
            estimate: None,
        }
    }

    /// The device with the most trace entries (the lowest index on ties), if any has one.
    pub fn busiest_device(&self) -> Option<usize> {
        let (device, trace) = self.device_traces.iter().enumerate().max_by_key(|(i, t)| (t.len(), usize::MAX - i))?;
        (!trace.is_empty()).then_some(device)
    }

    /// The private pools (other than the default `(0, 0)`) the segments of `device` use.
    pub fn private_pools(&self, device: i64) -> Vec<(i64, i64)> {
        let mut pools: Vec<_> = self
            .segments
            .iter()
            .filter(|s| s.device == device && s.segment_pool_id != (0, 0))
            .map(|s| s.segment_pool_id)
            .collect();
        pools.sort_unstable();
        pools.dedup();
        pools
    }
}
