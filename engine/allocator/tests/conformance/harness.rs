//! The conformance tests' stand-in for `torch.cuda`: a device whose every
//! allocator operation is followed by PyTorch's `_check_memory_stat_consistency`,
//! and tensors that free their memory when the last reference goes, as Python's
//! reference counting frees a tensor's storage.

use std::sync::Arc;

use vramlab_allocator::consts::GIB;
use vramlab_allocator::hooks::{EventLog, Hooks};
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MemoryStats, RawAllocator, SimulatedMemory, StreamId,
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
}

impl Gpu {
    pub fn new(config: AllocatorConfig) -> Gpu {
        Gpu::with_capacity(config, TOTAL_MEMORY_BYTES)
    }

    /// A device of `total_bytes`, for the tests that fill a device up.
    pub fn with_capacity(config: AllocatorConfig, total_bytes: u64) -> Gpu {
        let raw = Arc::new(SimulatedMemory::with_capacity(total_bytes));
        let allocator = CachingAllocator::new(raw.clone(), config).expect("a valid config");
        let gpu = Gpu { raw, allocator };
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
        (Gpu { raw, allocator }, log)
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
