//! The conformance tests' stand-in for `torch.cuda`: a device whose every
//! allocator operation is followed by PyTorch's `_check_memory_stat_consistency`,
//! and tensors that free their memory when the last reference goes, as Python's
//! reference counting frees a tensor's storage.

use std::sync::Arc;

use vramlab_allocator::consts::GIB;
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MemoryStats, RawAllocator, SimulatedMemory,
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
        let raw = Arc::new(SimulatedMemory::with_capacity(TOTAL_MEMORY_BYTES));
        let allocator = CachingAllocator::new(raw.clone(), config).expect("a valid config");
        let gpu = Gpu { raw, allocator };
        gpu.check();
        gpu
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
        let result = self.allocator.malloc(bytes, 0, None);
        self.check();
        result.map(|allocation| Tensor { gpu: self, allocation: Some(allocation), numel: bytes })
    }

    /// `torch.cuda.FloatTensor(*size)`: 4 bytes per element.
    #[track_caller]
    pub fn floats(&self, size: &[u64]) -> Tensor<'_> {
        let numel: u64 = size.iter().product();
        let mut t = self.empty(4 * numel).expect("fits the simulated device");
        t.numel = numel;
        t
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
