//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot()` pickles):
//! the typed model ([`Snapshot`] and its parts), the import from a pickle of any
//! protocol PyTorch writes (2 to 5; [`read_snapshot`]), and the replay of a
//! snapshot's trace through the allocator with the fidelity check against what
//! the snapshot recorded ([`replay_snapshot`]; [`replay_snapshot_timeline`] adds
//! its memory over the trace for reports), and the what-if replay under
//! other settings with its recommendation ([`what_if`], [`recommend`]), and
//! who holds the memory at the allocated peak and at each out-of-memory, by
//! the call path of the user's own code ([`attribute`], [`replay_attribution`]).
//!
//! The pickle is read by a streaming reader of its own ([`pickle`]): trace
//! entries become compact [`TraceEntry`] values as soon as they are complete,
//! strings and frames are interned, and no generic value tree of the whole file
//! is ever built (ARCHITECTURE.md says why no pickle crate is used).

mod attribution;
mod diff;
mod export;
mod feed;
mod import;
mod model;
mod oom;
mod overlap;
mod path_timeline;
pub mod pickle;
mod pools;
mod replay;
mod rewind;
mod two_step;
mod underivable;
mod whatif;

pub use attribution::{
    Attribution, CallPathGroup, Category, CategoryShare, CategorySource, FailedRequest, FrameKind, FullStack, NoFrames,
    Point, PointKind, StackFrame, attribute, entry_categories, frame_kind, replay_attribution, requested_peak_index,
};
pub use diff::{DiffSide, PathChange, SegmentSizeCount, SnapshotDiff, diff_snapshots};
pub use export::{write_chrome_trace, write_snapshot};
pub use import::{is_pickle, peek_allocator_settings, read_snapshot, read_snapshot_file, read_snapshot_with};
pub use model::{
    Action, AllocatorSettings, Block, Frame, FrameTable, Segment, SegmentType, Snapshot, StackId, TraceEntry,
};
pub use oom::{InferredCapacity, LimitKind, OomRequest, ReleaseKind, ReleaseSummary};
pub use overlap::read_and_replay;
pub use path_timeline::{MAX_COLUMNS, PathBlock, PathSeries, PathTimeline, TOP_PATHS, path_timeline};
pub use pickle::ReadOptions;
pub use pools::PoolInference;
pub use replay::{
    FidelityReport, LiveAtStart, Misplacement, Placement, ReplayOom, SegmentDisagreement, SnapshotReplay,
    SnapshotReplayError, SnapshotReplayOptions, replay_snapshot, replay_snapshot_timeline,
};
pub use underivable::UnderivableStat;
pub use whatif::{
    BatchTrial, SMALLER_BATCH_MODEL, SWEEP_GRID, SmallerBatch, WhatIf, recommend, smaller_batch, what_if,
    what_if_timelines,
};

use thiserror::Error;

/// A file that cannot be read as a memory snapshot. Every variant says where
/// (a byte offset into the pickle, or a path such as `device_traces[0][17].size`)
/// and what was expected there.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("cannot read the snapshot at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "not a pickle: it starts with {found}; a PyTorch memory snapshot starts with the pickle PROTO opcode (0x80)"
    )]
    NotAPickle { found: String },
    #[error("pickle protocol {protocol} is not one PyTorch writes (expected 2 to 5)")]
    Protocol { protocol: u8 },
    #[error(
        "the pickle ends at byte {offset} in the middle of {what}; the file is truncated (was the dump interrupted?)"
    )]
    Truncated { offset: u64, what: &'static str },
    #[error("byte {offset}: pickle opcode {opcode:#04x} ({name}) {why}")]
    Opcode { offset: u64, opcode: u8, name: &'static str, why: &'static str },
    #[error("byte {offset}: malformed pickle: {what}")]
    Malformed { offset: u64, what: String },
    #[error("byte {offset}: {what} of {bytes} bytes is absurd (the limit is {limit} bytes); the file is corrupt")]
    TooLong { offset: u64, what: &'static str, bytes: u64, limit: u64 },
    #[error("{path}: expected {expected}, found {found}")]
    Shape { path: String, expected: &'static str, found: String },
    #[error("{path}: {value} is not a plausible byte count (expected 0 to 1 PiB); the snapshot is corrupt")]
    AbsurdSize { path: String, value: i128 },
}
