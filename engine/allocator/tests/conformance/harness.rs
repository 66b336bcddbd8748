//! The conformance tests' stand-in for `torch.cuda`: a device whose every
//! allocator operation is followed by PyTorch's `_check_memory_stat_consistency`,
//! and tensors that free their memory when the last reference goes, as Python's
//! reference counting frees a tensor's storage.

use std::sync::Arc;

use vramlab_allocator::consts::GIB;
use vramlab_allocator::hooks::{EventLog, Hooks};
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MemoryStats, MempoolId, PoolFilter, RawAllocator,
    SimulatedMemory, StreamId,
};

/// The simulated GPU's total memory: an 80 GiB device (an H100's class).
pub const TOTAL_MEMORY_BYTES: u64 = 80 * GIB;

/// Memory the CUDA context holds outside the caching allocator on a real GPU; the
/// tests that depend on a device never being entirely free take it (see each use).
pub const CUDA_CONTEXT_BYTES: u64 = 512 << 20;

/// One device: `torch.cuda` for one device index.
#[derive(Debug)]
pub struct Gpu {
    pub raw: Arc<SimulatedMemory>,
    pub allocator: CachingAllocator,
    /// Source of pool ids: `graph_pool_handle()`, `MemPool()` and each graph's own pool.
    next_pool: std::sync::atomic::AtomicU64,
}

impl Gpu {
    pub fn new(config: AllocatorConfig) -> Gpu {
        Gpu::with_capacity(config, TOTAL_MEMORY_BYTES)
    }

    /// A device of `total_bytes`, for the tests that fill a device up.
    pub fn with_capacity(config: AllocatorConfig, total_bytes: u64) -> Gpu {
        let raw = Arc::new(SimulatedMemory::with_capacity(total_bytes));
        let allocator = CachingAllocator::new(raw.clone(), config).expect("a valid config");
        let gpu = Gpu { raw, allocator, next_pool: std::sync::atomic::AtomicU64::new(1) };
        gpu.check();
        gpu
    }

    /// A device whose allocator events go to the returned log.
    pub fn with_event_log(config: AllocatorConfig) -> (Gpu, Arc<EventLog>) {
        let raw = Arc::new(SimulatedMemory::with_capacity(TOTAL_MEMORY_BYTES));
        let hooks = Hooks::new();
        let log = EventLog::new();
        hooks.subscribe(log.clone());
        let allocator = CachingAllocator::with_hooks(raw.clone(), config, hooks, 0).expect("a valid config");
        (Gpu { raw, allocator, next_pool: std::sync::atomic::AtomicU64::new(1) }, log)
    }

    /// The default allocator, or expandable segments (`test_cuda_expandable_segments.py`).
    pub fn with_expandable(expandable: bool) -> Gpu {
        Gpu::new(AllocatorConfig { expandable_segments: expandable, ..AllocatorConfig::default() })
    }

    /// Takes [`CUDA_CONTEXT_BYTES`] from the device outside the allocator, as the CUDA
    /// context does on a real GPU (`total_memory` stays the device's total).
    pub fn take_cuda_context(&self) -> u64 {
        self.raw.malloc(CUDA_CONTEXT_BYTES).expect("the context fits")
    }

    /// `_check_memory_stat_consistency`, run after every operation.
    #[track_caller]
    pub fn check(&self) {
        if let Err(e) = self.allocator.check_memory_stat_consistency() {
            panic!("{e}");
        }
    }

    /// `torch.empty(bytes, dtype=torch.int8)` (and every other tensor, by its byte size).
    #[track_caller]
    pub fn empty(&self, bytes: u64) -> Result<Tensor<'_>, AllocError> {
        self.empty_on(bytes, 0)
    }

    /// A tensor allocated with `stream` current (`with torch.cuda.stream(s):`).
    #[track_caller]
    pub fn empty_on(&self, bytes: u64, stream: StreamId) -> Result<Tensor<'_>, AllocError> {
        let result = self.allocator.malloc(bytes, stream, None);
        self.check();
        result.map(|allocation| Tensor { gpu: self, allocation: Some(allocation), numel: bytes })
    }

    /// `tensor.record_stream(stream)`.
    pub fn record_stream(&self, tensor: &Tensor<'_>, stream: StreamId) {
        if let Some(allocation) = &tensor.allocation {
            self.allocator.record_stream(allocation, stream);
        }
        self.check();
    }

    /// `torch.cuda.memory._set_allocator_settings(settings)`.
    pub fn set_allocator_settings(&self, settings: &str) -> Result<(), AllocError> {
        let result = self.allocator.set_allocator_settings(settings);
        self.check();
        result
    }

    /// `torch.cuda.FloatTensor(*size)`: 4 bytes per element.
    #[track_caller]
    pub fn floats(&self, size: &[u64]) -> Tensor<'_> {
        let numel: u64 = size.iter().product();
        let mut t = self.empty(4 * numel).expect("fits the simulated device");
        t.numel = numel;
        t
    }

    /// `torch.empty(*size)` of floats that may fail.
    #[track_caller]
    pub fn floats_checked(&self, size: &[u64]) -> Result<Tensor<'_>, AllocError> {
        let numel: u64 = size.iter().product();
        self.empty(4 * numel).map(|mut t| {
            t.numel = numel;
            t
        })
    }

    pub fn empty_cache(&self) {
        self.allocator.empty_cache();
        self.check();
    }

    pub fn reset_peak_memory_stats(&self) {
        self.allocator.reset_peak_stats();
        self.check();
    }

    pub fn reset_accumulated_memory_stats(&self) {
        self.allocator.reset_accumulated_stats();
        self.check();
    }

    pub fn memory_stats(&self) -> MemoryStats {
        self.allocator.stats()
    }

    /// One flattened key of `torch.cuda.memory_stats()`.
    pub fn stat(&self, key: &str) -> i64 {
        *self.allocator.stats().flatten().get(key).unwrap_or_else(|| panic!("no stat {key}"))
    }

    pub fn memory_allocated(&self) -> u64 {
        self.allocator.memory_allocated()
    }
    pub fn max_memory_allocated(&self) -> u64 {
        self.allocator.max_memory_allocated()
    }
    pub fn memory_reserved(&self) -> u64 {
        self.allocator.memory_reserved()
    }
    pub fn max_memory_reserved(&self) -> u64 {
        self.allocator.max_memory_reserved()
    }
    pub fn total_memory(&self) -> u64 {
        self.allocator.mem_info().total_bytes
    }

    fn next_pool_number(&self) -> u64 {
        self.next_pool.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// `torch.cuda.graph_pool_handle()`: a fresh id `(0, n)`; the pool itself is
    /// created by the first capture into it.
    pub fn graph_pool_handle(&self) -> MempoolId {
        (0, self.next_pool_number())
    }

    /// `g = torch.cuda.CUDAGraph(); g.capture_begin(pool)` with `stream` current.
    /// As `CUDAGraph::capture_begin` does, the graph first takes its generator's
    /// one-element seed and offset holders (8 bytes each, from the default pool on
    /// the capture stream: they live as long as the graph), then begins allocating
    /// the capture stream's allocations to `pool`, or to a pool of its own `(n, 0)`.
    pub fn capture_begin(&self, stream: StreamId, pool: Option<MempoolId>) -> Graph<'_> {
        let holders = vec![self.empty_on(8, stream).unwrap(), self.empty_on(8, stream).unwrap()];
        let pool = pool.unwrap_or_else(|| (self.next_pool_number(), 0));
        self.allocator.begin_allocate_to_pool(pool, PoolFilter::Streams(vec![stream])).expect("a new capture");
        self.check();
        Graph { gpu: self, pool, holders, capturing: true }
    }

    /// `torch.cuda.MemPool(use_on_oom=…, no_split=…)`: a fresh id `(0, n)`.
    pub fn mem_pool(&self, use_on_oom: bool, no_split: bool) -> MemPool<'_> {
        let id = (0, self.next_pool_number());
        self.allocator.create_mem_pool(id, use_on_oom, no_split).expect("a new pool");
        self.check();
        MemPool { gpu: self, id }
    }

    /// `with torch.cuda.use_mem_pool(pool):` — entered; leave with
    /// [`end_use_mem_pool`](Self::end_use_mem_pool).
    pub fn begin_use_mem_pool(&self, pool: &MemPool<'_>) {
        self.allocator.begin_allocate_to_pool(pool.id, PoolFilter::AllStreams).expect("not in use already");
        self.check();
    }

    /// Leaving `use_mem_pool`: `endAllocateToPool` then `releasePool`.
    pub fn end_use_mem_pool(&self, pool: &MemPool<'_>) {
        self.allocator.end_allocate_to_pool(pool.id).expect("in use");
        self.allocator.release_pool(pool.id).expect("in use");
        self.check();
    }

    /// `torch.cuda.memory.memory_snapshot()` segments of one pool.
    pub fn pool_segments(&self, pool: MempoolId) -> Vec<vramlab_allocator::SegmentInfo> {
        self.allocator.snapshot().into_iter().filter(|s| s.pool_id == Some(pool)).collect()
    }
}

/// A captured CUDA graph (`torch.cuda.CUDAGraph`): deleting it (`reset`) releases
/// its pool and its generator's holders.
#[derive(Debug)]
pub struct Graph<'g> {
    gpu: &'g Gpu,
    pool: MempoolId,
    holders: Vec<Tensor<'g>>,
    capturing: bool,
}

impl Graph<'_> {
    /// `g.capture_end()`.
    pub fn capture_end(&mut self) {
        self.gpu.allocator.end_allocate_to_pool(self.pool).expect("capturing");
        self.capturing = false;
        self.gpu.check();
    }

    /// `g.pool()`.
    pub fn pool(&self) -> MempoolId {
        self.pool
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        if self.capturing {
            let _ = self.gpu.allocator.end_allocate_to_pool(self.pool);
        }
        self.holders.clear();
        self.gpu.allocator.release_pool(self.pool).expect("the graph's pool is live");
        if !std::thread::panicking() {
            self.gpu.check();
        }
    }
}

/// `torch.cuda.MemPool`: deleting it releases the pool and empties its cache
/// (`~MemPool`: `releasePool`, then `emptyCache(id)`).
#[derive(Debug)]
pub struct MemPool<'g> {
    gpu: &'g Gpu,
    pub id: MempoolId,
}

impl MemPool<'_> {
    /// `pool.use_count()`.
    pub fn use_count(&self) -> i64 {
        self.gpu.allocator.pool_use_count(self.id).expect("a live pool")
    }
    /// `pool.snapshot()`: the pool's segments.
    pub fn snapshot(&self) -> Vec<vramlab_allocator::SegmentInfo> {
        self.gpu.pool_segments(self.id)
    }
}

impl Drop for MemPool<'_> {
    fn drop(&mut self) {
        let _ = self.gpu.allocator.set_use_on_oom(self.id, false);
        self.gpu.allocator.release_pool(self.id).expect("the pool is live");
        self.gpu.allocator.empty_cache_pool(self.id);
        if !std::thread::panicking() {
            self.gpu.check();
        }
    }
}

/// A tensor's storage: freed (and the stats checked) when dropped.
#[derive(Debug)]
pub struct Tensor<'g> {
    gpu: &'g Gpu,
    allocation: Option<Allocation>,
    numel: u64,
}

impl Tensor<'_> {
    pub fn numel(&self) -> u64 {
        self.numel
    }
    /// The same storage seen as `numel` floats.
    pub fn with_numel(mut self, numel: u64) -> Self {
        self.numel = numel;
        self
    }
    /// `tensor.data_ptr()`.
    pub fn data_ptr(&self) -> u64 {
        self.allocation.as_ref().map_or(0, Allocation::addr)
    }
    /// Bytes of the block behind the tensor.
    pub fn block_bytes(&self) -> u64 {
        self.allocation.as_ref().map_or(0, Allocation::size)
    }
}

impl Drop for Tensor<'_> {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            self.gpu.allocator.free(allocation).expect("a live allocation");
            if !std::thread::panicking() {
                self.gpu.check();
            }
        }
    }
}
