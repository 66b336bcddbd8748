//! The caching allocator, a faithful model of PyTorch's CUDA caching allocator
//! (see `shared/allocator-spec.md` and ARCHITECTURE.md), with its configuration,
//! statistics, errors and the raw device memory it sits on.

mod caching;
mod config;
pub mod consts;
mod error;
mod expandable;
mod format;
mod free_set;
mod raw;
mod stats;
mod summary;

pub use caching::{Allocation, BlockInfo, BlockState, CachingAllocator, MAX_REQUEST, SegmentInfo};
pub use config::{AllocatorConfig, ConfigError, ROUNDUP_BUCKETS};
pub use error::{AllocError, OutOfMemoryError};
pub use format::format_size;
pub use raw::{EventId, HostMemory, MemInfo, RawAllocator, RawError, SimulatedMemory, StreamId, physical_memory_bytes};
pub use stats::{MemoryStats, PoolKind, STAT_ARRAY_NAMES, Stat, StatArray};
pub use summary::memory_summary;
