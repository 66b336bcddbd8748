//! The conformance tests' stand-in for `torch.cuda`: a device whose every
//! allocator operation is followed by PyTorch's `_check_memory_stat_consistency`,
//! and tensors that free their memory when the last reference goes, as Python's
//! reference counting frees a tensor's storage.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use vramlab_allocator::consts::GIB;
use vramlab_allocator::hooks::{EventLog, Hooks};
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MemoryStats, MempoolId, PoolCheckpoint, PoolFilter,
    RawAllocator, SimulatedMemory, StreamId,
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
    /// Blocks allocated by `set_checkpoint_pool_state` that no tensor took
    /// (PyTorch releases those `DataPtr`s: the block stays allocated until a
    /// deleter or `raw_delete` frees it by address), by address.
    released: Mutex<BTreeMap<u64, Allocation>>,
}

impl Gpu {
    pub fn new(config: AllocatorConfig) -> Gpu {
        Gpu::with_capacity(config, TOTAL_MEMORY_BYTES)
    }

    /// A device of `total_bytes`, for the tests that fill a device up.
    pub fn with_capacity(config: AllocatorConfig, total_bytes: u64) -> Gpu {
        let raw = Arc::new(SimulatedMemory::with_capacity(total_bytes));
        let allocator = CachingAllocator::new(raw.clone(), config).expect("a valid config");
        let gpu = Gpu { raw, allocator, next_pool: std::sync::atomic::AtomicU64::new(1), released: Mutex::default() };
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
        (Gpu { raw, allocator, next_pool: std::sync::atomic::AtomicU64::new(1), released: Mutex::default() }, log)
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
        result.map(|allocation| Tensor {
            gpu: self,
            ptr: allocation.addr(),
            allocation: Some(allocation),
            numel: bytes,
        })
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

    /// `torch._C._cuda_getCheckpointState(device, pool)`.
    pub fn checkpoint_pool_state(&self, pool: MempoolId) -> Result<PoolCheckpoint, AllocError> {
        let result = self.allocator.checkpoint_pool_state(pool);
        self.check();
        result
    }

    /// `torch._C._cuda_setCheckpointPoolState(device, state, stale_storages,
    /// storages_to_add_deleters_to)`: restores the pool; the stale tensors lose
    /// their deleters (dropping them frees nothing), each tensor of `deleters`
    /// takes the new allocation at its address, and the other new allocations are
    /// released (allocated until [`raw_delete`](Self::raw_delete) or a tensor at
    /// that address frees them: PyTorch's deleters free by address).
    pub fn set_checkpoint_pool_state(
        &self,
        state: &PoolCheckpoint,
        stale: &mut [&mut Tensor<'_>],
        deleters: &mut [&mut Tensor<'_>],
    ) -> Result<Vec<u64>, AllocError> {
        let result = self.allocator.set_checkpoint_pool_state(state);
        self.check();
        let delta = result?;
        for t in stale.iter_mut() {
            t.allocation = None;
        }
        for allocation in delta.dataptrs_allocd {
            match deleters.iter_mut().find(|t| t.ptr == allocation.addr()) {
                Some(t) => t.allocation = Some(allocation),
                None => {
                    self.released.lock().unwrap().insert(allocation.addr(), allocation);
                }
            }
        }
        Ok(delta.ptrs_freed)
    }

    /// `torch._C._cuda_cudaCachingAllocator_raw_delete(ptr)` of a block that the
    /// restore allocated and no tensor took.
    #[track_caller]
    pub fn raw_delete(&self, ptr: u64) {
        let allocation = self.released.lock().unwrap().remove(&ptr).expect("a released allocation");
        self.allocator.free(allocation).expect("a live allocation");
        self.check();
    }

    /// `torch._C._cuda_checkPoolLiveAllocations(device, pool, live_dps)`.
    pub fn check_pool_live_allocations(&self, pool: MempoolId, live: &[u64]) -> bool {
        let set: BTreeSet<u64> = live.iter().copied().collect();
        self.allocator.check_pool_live_allocations(pool, &set).expect("a live pool")
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
    /// `data_ptr()`, kept when the tensor holds no deleter.
    ptr: u64,
    allocation: Option<Allocation>,
    numel: u64,
}

impl<'g> Tensor<'g> {
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
        self.ptr
    }
    /// A tensor over the same storage that frees nothing when dropped
    /// (`reconstruct_from_tensor_metadata`: a storage built from a data pointer,
    /// with no deleter).
    pub fn view_without_deleter(&self) -> Tensor<'g> {
        Tensor { gpu: self.gpu, ptr: self.ptr, allocation: None, numel: self.numel }
    }
    /// Bytes of the block behind the tensor.
    pub fn block_bytes(&self) -> u64 {
        self.allocation.as_ref().map_or(0, Allocation::size)
    }
}

impl Drop for Tensor<'_> {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            // The deleter frees by address: after a checkpoint restore the block
            // at this address may be one the restore allocated.
            let released = self.gpu.released.lock().unwrap().remove(&allocation.addr());
            self.gpu.allocator.free(released.unwrap_or(allocation)).expect("a live allocation");
            if !std::thread::panicking() {
                self.gpu.check();
            }
        }
    }
}
