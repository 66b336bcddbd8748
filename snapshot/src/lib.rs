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

mod analysis;
mod format;
mod replay;

pub use analysis::attribution::{
    Attribution, CallPathGroup, Category, CategoryShare, CategorySource, FailedRequest, FrameKind, FullStack, NoFrames,
    Point, PointKind, StackFrame, attribute, entry_categories, frame_kind, replay_attribution, requested_peak_index,
};
pub use analysis::diff::{DiffSide, PathChange, SegmentSizeCount, SnapshotDiff, diff_snapshots};
pub use analysis::path_timeline::{MAX_COLUMNS, PathBlock, PathSeries, PathTimeline, TOP_PATHS, path_timeline};
pub use analysis::whatif::{
    BatchTrial, SMALLER_BATCH_MODEL, SWEEP_GRID, SmallerBatch, WhatIf, recommend, smaller_batch, what_if,
    what_if_timelines,
};
pub use format::error::SnapshotError;
pub use format::export::{write_chrome_trace, write_snapshot};
pub use format::import::{is_pickle, peek_allocator_settings, read_snapshot, read_snapshot_file, read_snapshot_with};
pub use format::model::{
    Action, AllocatorSettings, Block, Frame, FrameTable, Segment, SegmentType, Snapshot, StackId, TraceEntry,
};
pub use format::pickle;
pub use format::pickle::ReadOptions;
pub use replay::oom::{InferredCapacity, LimitKind, OomRequest, ReleaseKind, ReleaseSummary};
pub use replay::overlap::read_and_replay;
pub use replay::pools::PoolInference;
pub use replay::report::{
    FidelityReport, LiveAtStart, Misplacement, Placement, ReplayOom, SegmentDisagreement, SnapshotReplay,
    SnapshotReplayError, SnapshotReplayOptions,
};
pub use replay::run::{replay_snapshot, replay_snapshot_timeline};
pub use replay::underivable::UnderivableStat;
