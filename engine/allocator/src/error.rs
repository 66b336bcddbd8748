//! The allocator's errors.

use thiserror::Error;

use super::config::ConfigError;
use super::format::format_size;
use super::raw::{RawError, StreamId};

/// Everything the caching allocator can fail with.
#[derive(Debug, Error)]
pub enum AllocError {
    /// No memory for the request even after releasing cached segments.
    #[error(transparent)]
    OutOfMemory(Box<OutOfMemoryError>),
    /// `free` of an allocation this allocator does not hold live.
    #[error("free of address {addr:#x} on {device}: not a live allocation of this allocator")]
    InvalidFree { device: String, addr: u64 },
    /// The device failed for a reason other than lack of memory.
    #[error("{device}: {source}")]
    Device {
        device: String,
        #[source]
        source: RawError,
    },
    /// A request of 1 EiB or more, which PyTorch refuses before its allocator sees it
    /// (`NativeCachingAllocator::allocate`: "CUDA out of memory. Tried to allocate
    /// more than 1EB memory."); no statistic changes.
    #[error(
        "vramlab: {device} out of memory. Tried to allocate more than 1EB memory ({requested_bytes} bytes requested; \
         PyTorch refuses requests of 1 EiB or more before its allocator sees them)"
    )]
    RequestTooLarge { device: String, requested_bytes: u64 },
    /// A stream id beyond what the allocator tracks.
    #[error("stream {stream} on {device}: stream ids go up to {max}")]
    InvalidStream { device: String, stream: StreamId, max: StreamId },
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `set_allocator_settings` switching `expandable_segments` while segments are held.
    #[error(
        "{device}: cannot switch expandable_segments while the allocator holds {reserved_bytes} reserved bytes; \
         free the live allocations and call empty_cache first (vramlab does not model a mix of both segment kinds)"
    )]
    SettingsWhileHolding { device: String, reserved_bytes: u64 },
    /// `set_memory_fraction` outside [0, 1], refused in
    /// `torch.cuda.set_per_process_memory_fraction`'s words.
    #[error("Invalid fraction value: {0:?}. Allowed range: 0~1")]
    InvalidFraction(f64),
    /// A private-pool call naming `(0, 0)`, the default pool's id.
    #[error("{device}: pool id (0, 0) is the default pool; private pools need another id")]
    DefaultPool { device: String },
    /// `begin_allocate_to_pool` for a pool already being allocated to.
    #[error(
        "{device}: beginAllocateToPool: already recording to mempool_id {pool:?}; end allocating to it \
         (end_allocate_to_pool) before beginning again"
    )]
    PoolAlreadyRecording { device: String, pool: (u64, u64) },
    /// `end_allocate_to_pool` for a pool not being allocated to.
    #[error(
        "{device}: endAllocatePool: not currently recording to mempool_id {pool:?}; begin allocating to it \
         (begin_allocate_to_pool) first"
    )]
    PoolNotRecording { device: String, pool: (u64, u64) },
    /// A call naming a private pool that does not exist (never created, or
    /// deleted by `empty_cache` after its last release).
    #[error("{device}: no private pool {pool:?}; create it (create_or_incref_pool / begin_allocate_to_pool) first")]
    UnknownPool { device: String, pool: (u64, u64) },
    /// `release_pool` on a pool whose use count is already 0.
    #[error("{device}: private pool {pool:?} has been released by all its users already; release it once per use")]
    PoolReleased { device: String, pool: (u64, u64) },
    /// `set_checkpoint_pool_state` for a pool whose use count reached 0
    /// (`setCheckpointPoolState`: "Not expected to checkpoint freeable graph").
    #[error(
        "{device}: Not expected to checkpoint freeable graph: private pool {pool:?} has been released by all its users"
    )]
    CheckpointFreeablePool { device: String, pool: (u64, u64) },
    /// A block of the pool waits for stream events, so its state cannot be
    /// checkpointed or restored (`BlockState` / `freeBlocksAllocatedToPool`:
    /// "Events should have synchronized when checkpointing block").
    #[error(
        "{device}: Events should have synchronized when checkpointing block {addr:#x} of private pool {pool:?}: \
         it waits for work on other streams (record_stream); synchronize and let the allocator process its events first"
    )]
    CheckpointPendingBlock { device: String, pool: (u64, u64), addr: u64 },
    /// A checkpoint that does not describe the pool's segments as they are
    /// (`setCheckpointPoolState`'s "could not find" and `setSegmentStateToCheckpoint`'s
    /// checks); refused before anything changes.
    #[error("{device}: checkpoint of private pool {pool:?} does not fit its segment at {segment:#x}: {reason}")]
    CheckpointMismatch { device: String, pool: (u64, u64), segment: u64, reason: String },
    /// A segment layout given to [`restore_segment`](crate::CachingAllocator::restore_segment)
    /// that no caching allocator could hold; refused before anything changes.
    #[error("{device}: cannot restore the segment of {size} bytes: {reason}")]
    RestoreMismatch { device: String, size: u64, reason: String },
}

impl AllocError {
    /// Whether this is an out-of-memory error: no room on the device, or a request
    /// of 1 EiB or more (PyTorch raises `OutOfMemoryError` for both).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, AllocError::OutOfMemory(_) | AllocError::RequestTooLarge { .. })
    }

    /// The out-of-memory details, when this is an out-of-memory error.
    pub fn as_oom(&self) -> Option<&OutOfMemoryError> {
        match self {
            AllocError::OutOfMemory(oom) => Some(oom),
            _ => None,
        }
    }
}

/// The numbers PyTorch puts in its out-of-memory message, as typed fields.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutOfMemoryError {
    /// The allocator's device name (`cpu`, `cuda:0`, `simulated`).
    pub device: String,
    pub stream: StreamId,
    /// Bytes the caller asked for.
    pub requested_bytes: u64,
    /// The request after rounding.
    pub rounded_bytes: u64,
    /// The segment size that was asked of the device ("Tried to allocate").
    pub segment_bytes: u64,
    /// The device's total memory.
    pub total_bytes: u64,
    /// The device's free memory, as the device reports it.
    pub free_bytes: u64,
    /// The per-process limit, when a memory fraction below 1 is set.
    pub allowed_bytes: Option<u64>,
    /// Bytes allocated through this allocator.
    pub allocated_bytes: u64,
    /// Bytes reserved by this allocator but not allocated (cached).
    pub reserved_unallocated_bytes: u64,
    /// Free bytes cached in private pools (CUDA graphs, `MemPool`s), which
    /// PyTorch's message counts as "allocated in private pools" (the free
    /// blocks of every graph pool: `allocated_in_private_pools`).
    #[serde(default)]
    pub private_pool_cached_bytes: u64,
}

impl std::fmt::Display for OutOfMemoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vramlab: {dev} out of memory. Tried to allocate {seg}. Device {dev} has a total capacity of {total} of which {free} is free. ",
            dev = self.device,
            seg = format_size(self.segment_bytes),
            total = format_size(self.total_bytes),
            free = format_size(self.free_bytes),
        )?;
        if let Some(allowed) = self.allowed_bytes {
            write!(f, "{} allowed; ", format_size(allowed))?;
        }
        // As PyTorch words it: private pools' free blocks count as allocated,
        // and come off the reserved-but-unallocated figure.
        let private = self.private_pool_cached_bytes;
        write!(f, "Of the allocated memory {} is allocated by vramlab, ", format_size(self.allocated_bytes + private))?;
        if private > 0 {
            write!(f, "with {} allocated in private pools (e.g., CUDA Graphs), ", format_size(private))?;
        }
        write!(
            f,
            "and {} is reserved by vramlab but unallocated. If reserved but unallocated memory is large try setting \
             expandable_segments:True in the allocator config to avoid fragmentation.",
            format_size(self.reserved_unallocated_bytes.saturating_sub(private)),
        )
    }
}

impl std::error::Error for OutOfMemoryError {}
