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
//!
//! Three module folders, imports pointing one way: `format` imports from
//! neither of the others, `replay` builds on `format`, `analysis` on both.
//! The files:
//!
//! - `src/lib.rs` — the public surface (re-exports only).
//! - `src/format/mod.rs` — the format's modules.
//! - `src/format/error.rs` — `SnapshotError`: where (a byte offset or a path
//!   such as `device_traces[0][17].size`) and what was expected.
//! - `src/format/model.rs` — the typed model: `Snapshot`, `Segment`, `Block`,
//!   `TraceEntry`, `Action`, `FrameTable`, `AllocatorSettings`.
//! - `src/format/estimate.rs` — the `vramlab_estimate` marker of a snapshot
//!   captured with no GPU (`Estimate`: the assumed GPU and torch, the modelled rules).
//! - `src/format/estimate_import.rs` — the marker read from the pickle's values.
//! - `src/format/value.rs` — the pickle machine's 16-byte value handles.
//! - `src/format/fields.rs` — a trace entry's fields as the pickle holds them:
//!   the keys, how each value is taken, the checks that make a `TraceEntry`.
//! - `src/format/heap.rs` — the reader's heap: containers, interned strings,
//!   frames and stacks, each list's trace entries (`EntryList`), the window.
//! - `src/format/stream.rs` — what the reader sends a replay on another
//!   thread (`Message`, `Streamer`) and what a stack names (`stack_flags`).
//! - `src/format/pickle.rs` — the streaming pickle machine (protocols 2–5),
//!   its memo and input, and the entry reader that reads trace entries
//!   straight from the buffer.
//! - `src/format/import.rs` — from the pickle's values to the model (segments,
//!   blocks, traces, settings; both layouts); `peek_allocator_settings`.
//! - `src/format/export.rs` — `write_snapshot` (a protocol-2 pickle) and
//!   `write_chrome_trace`.
//! - `src/replay/mod.rs` — the replay's modules.
//! - `src/replay/report.rs` — what a replay is asked and gives back:
//!   `SnapshotReplayOptions`, `SnapshotReplay`, `FidelityReport`,
//!   `LiveAtStart`, `SnapshotReplayError`.
//! - `src/replay/run.rs` — `replay_snapshot`, `replay_snapshot_timeline`: the
//!   device, settings and capacity worked out, and the start chosen (assumed
//!   empty where the segment events say so, else rewound).
//! - `src/replay/walk.rs` — the walk over the trace from a start (`Walk`: one
//!   method a step) and its outcome.
//! - `src/replay/feed.rs` — where the walk takes its entries from (`Feed`).
//! - `src/replay/overlap.rs` — `read_and_replay`: reading and replaying at once.
//! - `src/replay/rewind.rs` — the state at the first entry, rewound from the
//!   final segments, and its placing in the allocator.
//! - `src/replay/pools.rs` — the pool plan (private pools per allocation).
//! - `src/replay/two_step.rs` — `record_stream`'s two-step free.
//! - `src/replay/oom.rs` — recorded out-of-memory errors and whose releases
//!   the segment frees were; the capacity they imply.
//! - `src/replay/underivable.rs` — the `memory_stats()` keys a trace cannot determine.
//! - `src/replay/stats_check.rs` — PyTorch's `memory_stats()` read beside a
//!   snapshot (`NAME.stats.json`) and compared with the replay's, key by key.
//! - `src/replay/fidelity.rs` — the fidelity check: segment events and
//!   placements side by side, final segments and totals.
//! - `src/replay/recording.rs` — the replay's own events, and the replay as a `Snapshot`.
//! - `src/replay/states.rs` — the allocator's state at every entry of chosen windows
//!   (`StateHistory`: keyframes and block changes), for the replay page's state at an entry.
//! - `src/analysis/mod.rs` — the analyses' modules.
//! - `src/analysis/attribution.rs` — who holds the memory at a point, by the
//!   user's call path, with categories.
//! - `src/analysis/path_timeline.rs` — live memory over the trace stacked by call path, and each
//!   column's block under the cursor.
//! - `src/analysis/band_split.rs` — a band split by its next frames (the page's drill-down).
//! - `src/analysis/diff.rs` — two snapshots compared (`diff_snapshots`).
//! - `src/analysis/gate.rs` — the figures a memory gate judges of a snapshot,
//!   per device (`snapshot_figures`), as saved in a memory baseline.
//! - `src/analysis/whatif.rs` — what-if under other settings, the
//!   recommendation, the smaller-batch answer at an OOM.
//! - `tests/snapshot.rs` — the fixtures at every protocol and layout, the
//!   fidelity check, bad files, export round trips.
//! - `tests/partial_traces.rs` — recordings cut short: the rewound start, windows.
//! - `tests/states.rs` — the allocator's state at chosen entries, rebuilt from the
//!   kept history, equal to a replay stopped there on real recordings.
//! - `tests/torch_snapshots.rs` — six real PyTorch 2.11 snapshots replayed exactly.
//! - `tests/h200_recordings.rs` — the H200 snapshots: every stat equal.
//! - `tests/common/mod.rs` — the H200 recordings' folder and PyTorch's stats.
//! - `tests/recorded_oom.rs` — recorded OOMs: the inferred limit, the releases.
//! - `tests/record_stream.rs` — a `record_stream` free pending at the dump.
//! - `benches/snapshot.rs` — import plus replay of a 2-million-entry snapshot.

mod analysis;
mod format;
mod replay;

pub use analysis::attribution::{
    Attribution, CallPathGroup, Category, CategoryShare, CategorySource, FailedRequest, FrameKind, FullStack, NoFrames,
    Point, PointKind, StackFrame, attribute, entry_categories, frame_kind, replay_attribution, requested_peak_index,
};
pub use analysis::band_split::{BandSplit, MAX_SPLIT_CHANGES, SPLIT_PARTS, SplitPart};
pub use analysis::diff::{DiffSide, PathChange, SegmentSizeCount, SnapshotDiff, diff_snapshots};
pub use analysis::gate::{
    FIGURES, FIGURES_KIND, FIGURES_VERSION, GateFigure, MemoryFigures, PATHS_KEPT, PathBytes, RankFigures,
    snapshot_figures,
};
pub use analysis::path_timeline::{
    BlockStack, LiveBlock, MAX_COLUMNS, PathBlock, PathSeries, PathTimeline, TOP_PATHS, path_timeline,
};
pub use analysis::whatif::{
    BatchTrial, SMALLER_BATCH_MODEL, SWEEP_GRID, SmallerBatch, WhatIf, recommend, smaller_batch, what_if,
    what_if_timelines,
};
pub use format::error::SnapshotError;
pub use format::estimate::{AssumedGpuInfo, ESTIMATE_KEY, ESTIMATE_VERSION, Estimate, ModelledRule, Scalar};
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
pub use replay::run::{replay_snapshot, replay_snapshot_state_at, replay_snapshot_states, replay_snapshot_timeline};
pub use replay::states::{
    BlockChange, PIN_WINDOW, SPREAD_WINDOWS, STATE_BUDGET, SegmentAt, StateBlock, StateHistory, StateSegment,
    StateWindow, state_windows,
};
pub use replay::stats_check::{
    MemoryStatsCheck, PytorchStats, StatDifference, StatsFileError, StatsNotCompared, UnderivableValue,
    read_pytorch_stats, stats_file_beside,
};
pub use replay::underivable::UnderivableStat;
