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

pub use caching::{
    Allocation, BlockInfo, BlockState, CachingAllocator, CheckpointBlock, CheckpointDelta, CheckpointSegment,
    MAX_REQUEST, MempoolId, PoolCheckpoint, PoolFilter, RestoreBlock, RestoreSegment, SegmentInfo,
};
pub use config::{AllocatorConfig, ConfigError, ROUNDUP_BUCKETS};
pub use consistency::{StatInconsistency, check_memory_stat_consistency};
pub use error::{AllocError, OutOfMemoryError};
pub use format::format_size;
pub use raw::{EventId, HostMemory, MemInfo, RawAllocator, RawError, SimulatedMemory, StreamId, physical_memory_bytes};
pub use stats::{MemoryStats, PoolKind, STAT_ARRAY_NAMES, Stat, StatArray};
pub use summary::memory_summary;
