//! vramlab's allocator model: the caching allocator, a faithful model of
//! PyTorch's CUDA caching allocator (see `shared/allocator-spec.md` and
//! ARCHITECTURE.md), with its configuration, statistics, errors and the raw
//! device memory it sits on; [`hooks`], the one event mechanism through which
//! the allocator (and the runtime's kernels, copies and phases) report what they
//! do; and [`consistency`], PyTorch's check that the statistics agree with the
//! snapshot. It reads and writes no file format: the doors into the model are
//! other crates (`vramlab-replay` for the JSON Lines allocation traces,
//! `vramlab-snapshot` for PyTorch's memory snapshots).
//!
//! It depends on nothing else of vramlab: the runtime (`vramlab-engine`) builds
//! devices on it and re-exports it as `vramlab_engine::alloc`.
//!
//! # Files
//!
//! - `src/lib.rs` — the crate's map and re-exports.
//! - `src/consts.rs` — PyTorch's size constants (`kSmallSize`, `kLargeBuffer`, …) and the binary units.
//! - `src/caching.rs` — `CachingAllocator`, PyTorch's `DeviceCachingAllocator`: malloc and free step for
//!   step, pools and private pools, expandable segments.
//! - `src/caching/checkpoint.rs` — pool checkpoints (`getCheckpointState`, `setCheckpointPoolState`,
//!   `checkPoolLiveAllocations`).
//! - `src/caching/restore.rs` — `restore_segment`: a segment set up with a given block layout, for a snapshot
//!   replay's start state.
//! - `src/free_set.rs` — a pool's ordered free set: (stream, size, address) keys, a sorted vector and a
//!   `BTreeMap` beyond it.
//! - `src/expandable.rs` — one expandable segment: its reserved range and its bitmap of mapped pages.
//! - `src/raw.rs` — the `RawAllocator` trait and its host implementations, `HostMemory` and
//!   `SimulatedMemory`.
//! - `src/config.rs` — `AllocatorConfig`, parsed from `PYTORCH_CUDA_ALLOC_CONF` syntax, with `round_size` and
//!   the roundup buckets.
//! - `src/stats.rs` — `MemoryStats`, PyTorch's `DeviceStats`, and `flatten()` to `torch.cuda.memory_stats()`
//!   keys.
//! - `src/summary.rs` — `memory_summary()`, PyTorch's table line for line.
//! - `src/error.rs` — `AllocError` and `OutOfMemoryError` (PyTorch's OOM numbers and message).
//! - `src/format.rs` — `format_size`, c10's size formatting.
//! - `src/hooks.rs` — the event mechanism: `Hooks`, `Subscriber`, `Emitter`, `Event`, `Tag`, `now_ns` and the
//!   phase depth.
//! - `src/consistency.rs` — PyTorch's `_check_memory_stat_consistency` as a library function.
//! - `tests/known_answers.rs` — the spec's vectors and more.
//! - `tests/properties.rs` — random operation sequences and configs against the model's invariants and the
//!   consistency check.
//! - `tests/pools.rs` — random sequences with private pools: accounting, no overlap, pools kept apart.
//! - `tests/checkpoint.rs` — pool checkpoints: the refusals, a restore's statistics, random work restored to
//!   the checkpoint.
//! - `tests/stress.rs` — threads on real host memory.
//! - `tests/conformance/main.rs` — PyTorch's own allocator tests, converted: the suite.
//! - `tests/conformance/harness.rs` — a `torch.cuda` stand-in, every call followed by the consistency check.
//! - `tests/conformance/test_cuda.rs` — the memory tests of test_cuda.py (`TestCuda`,
//!   `TestCudaMallocAsync`).
//! - `tests/conformance/test_cuda_expandable_segments.rs` — those tests again with expandable segments.
//! - `tests/conformance/test_cuda_multigpu.rs` — the memory-statistics tests of test_cuda_multigpu.py.
//! - `tests/conformance/allocator_config_test.rs` — c10's `AllocatorConfigTest`.
//! - `tests/conformance/test_cuda_graphs.rs` — the CUDA-graph tests that assert pool numbers.
//! - `tests/conformance/test_mempool.rs` — `TestMemPool`.
//! - `tests/conformance/test_block_state_absorption.rs` — `TestBlockStateAbsorption`: pool checkpoints.
//! - `benches/allocator.rs` — the cached alloc+free pair, with and without a recording subscriber, against
//!   glibc.

mod caching;
mod config;
pub mod consistency;
pub mod consts;
mod error;
mod expandable;
mod format;
mod free_set;
pub mod hooks;
mod raw;
mod stats;
mod summary;

pub use caching::checkpoint::{CheckpointBlock, CheckpointDelta, CheckpointSegment, PoolCheckpoint};
pub use caching::restore::{RestoreBlock, RestoreSegment};
pub use caching::{
    Allocation, BlockInfo, BlockState, CachingAllocator, MAX_REQUEST, MempoolId, PoolFilter, SegmentInfo,
};
pub use config::{AllocatorConfig, ConfigError, ROUNDUP_BUCKETS};
pub use consistency::{StatInconsistency, check_memory_stat_consistency};
pub use error::{AllocError, OutOfMemoryError};
pub use format::format_size;
pub use raw::{EventId, HostMemory, MemInfo, RawAllocator, RawError, SimulatedMemory, StreamId, physical_memory_bytes};
pub use stats::{MemoryStats, PoolKind, STAT_ARRAY_NAMES, Stat, StatArray};
pub use summary::memory_summary;
