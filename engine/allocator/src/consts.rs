//! The workspace's binary size units, and PyTorch's allocator constants
//! (`c10/cuda/CUDACachingAllocator.cpp`).

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
pub const TIB: u64 = 1024 * GIB;

/// Every request is rounded up to a multiple of this.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// The largest rounded request that goes to the small pool.
pub const SMALL_SIZE: u64 = MIB;
/// Segment size for small-pool requests (and the small pool's expandable page).
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// Large requests below this get a `large_segment_size` (20 MiB) segment.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Default large segment size (and the large pool's expandable page).
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// Large requests of `MIN_LARGE_ALLOC` or more are rounded up to this for their segment.
pub const ROUND_LARGE: u64 = 2 * MIB;
