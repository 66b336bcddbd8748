//! `test/test_cuda.py` (pytorch/pytorch commit 000e43cdff99f30291164c1f2e90133f19fa83fb):
//! `TestCuda`'s memory tests whose subject is the allocator's arithmetic. Each is a
//! function of the allocator config so that `test_cuda_expandable_segments.py`
//! (which re-runs `TestCuda` with `expandable_segments:True`) reuses it.

use vramlab_allocator::{AllocError, MAX_REQUEST};

use crate::harness::Gpu;

/// `TestCuda.test_memory_allocation`: `caching_allocator_alloc(1)` raises
/// `memory_allocated()`; `caching_allocator_delete` brings it back.
pub fn memory_allocation(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let prev = gpu.memory_allocated();
    let mem = gpu.empty(1).unwrap();
    assert!(gpu.memory_allocated() > prev);
    // From the source: a 1-byte request is one 512-byte block of a 2 MiB small segment.
    assert_eq!(gpu.memory_allocated() - prev, 512);
    drop(mem);
    assert_eq!(gpu.memory_allocated(), prev);
}

/// `TestCuda.test_memory_stats` (the `torch.accelerator` one): 1 KiB becomes active
/// and then freed, and the peaks reset to the values before.
pub fn memory_stats(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    gpu.reset_peak_memory_stats();
    gpu.reset_accumulated_memory_stats();
    let prev_allocated = gpu.memory_allocated();
    let prev_reserved = gpu.memory_reserved();
    let prev_max_allocated = gpu.max_memory_allocated();
    let prev_max_reserved = gpu.max_memory_reserved();
    assert_eq!(prev_allocated, prev_max_allocated);
    assert_eq!(prev_reserved, prev_max_reserved);
    // Activate 1kB memory
    let prev_active_current = gpu.stat("active_bytes.all.current");
    let tmp = gpu.floats(&[256]); // torch.randn(256)
    assert_eq!(gpu.stat("active_bytes.all.current"), 1024 + prev_active_current);
    assert_eq!(gpu.stat("active_bytes.all.freed"), 0);
    drop(tmp);
    gpu.empty_cache();
    assert_eq!(gpu.stat("active_bytes.all.current"), prev_active_current);
    assert_eq!(gpu.stat("active_bytes.all.freed"), 1024);
    gpu.reset_peak_memory_stats();
    assert_eq!(gpu.max_memory_allocated(), prev_max_allocated);
    assert_eq!(gpu.max_memory_reserved(), prev_max_reserved);
}

/// `TestCuda.test_out_of_memory`: 800 000 000 GiB goes through the allocator and
/// fails with its out-of-memory message; 8 000 000 000 GiB (≥ 1 EiB) is refused before
/// it ("Tried to allocate more than 1EB memory"); the live tensor is undisturbed.
pub fn out_of_memory(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let tensor = gpu.floats(&[1024]); // torch.zeros(1024)

    let err = gpu.empty(1024 * 1024 * 1024 * 800_000_000).err().expect("out of memory");
    // PyTorch: "Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of";
    // vramlab names its device "simulated" where PyTorch writes "GPU 0".
    let message = err.to_string();
    assert!(
        message.contains("Tried to allocate 800000000.00 GiB. Device simulated has a total capacity of"),
        "{message}"
    );
    // From the source: the allocator saw it — one OOM, after one counted retry.
    assert_eq!((gpu.stat("num_ooms"), gpu.stat("num_alloc_retries")), (1, 1));

    let before = gpu.memory_stats();
    let size = 1024u64 * 1024 * 1024 * 8_000_000_000;
    assert!(size >= MAX_REQUEST);
    let err = gpu.empty(size).err().expect("refused");
    assert!(err.to_string().contains("Tried to allocate more than 1EB memory"), "{err}");
    assert!(err.is_out_of_memory() && matches!(err, AllocError::RequestTooLarge { .. }));
    // From the source: refused before the allocator, so no statistic changed.
    assert_eq!(gpu.memory_stats(), before);

    // ensure out of memory error doesn't disturb subsequent kernel
    assert_eq!(tensor.block_bytes(), 4096);
    assert_eq!(gpu.memory_allocated(), 4096);
}

/// `TestCuda.test_out_of_memory_retry`: two halves of the device do not fit at once
/// (a real GPU's CUDA context takes some of it: [`Gpu::take_cuda_context`]); after
/// the first is freed the second fits.
pub fn out_of_memory_retry(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.take_cuda_context();
    gpu.empty_cache();
    let total_memory = gpu.total_memory();
    let size = (total_memory as f64 * 0.5) as u64;
    let a = gpu.empty(size).unwrap();
    let err = gpu.empty(size).err().expect("out of memory");
    assert!(err.to_string().contains("Tried to allocate"), "{err}");
    // From the source: the failure released the cache and retried once.
    assert_eq!((gpu.stat("num_ooms"), gpu.stat("num_alloc_retries")), (1, 1));
    drop(a);
    let b = gpu.empty(size).unwrap();
    // From the source: b reuses a's cached memory — no new device memory.
    assert_eq!(gpu.memory_reserved(), gpu.max_memory_reserved());
    drop(b);
    gpu.empty_cache();
    gpu.reset_peak_memory_stats();
    assert_eq!(gpu.max_memory_reserved(), 0);
}

/// `TestCuda.test_set_per_process_memory_fraction`: fractions outside [0, 1] are
/// refused; with 0.5 set, 0.499 of the device fits and 0.5 of it does not.
/// (`set_per_process_memory_fraction(1)` raising `TypeError` is Python typing, not
/// converted: the Rust signature takes an `f64`.)
pub fn set_per_process_memory_fraction(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.reset_peak_memory_stats();
    for bad in [-0.1, 2.0] {
        let err = gpu.allocator.set_memory_fraction(bad).unwrap_err();
        assert!(matches!(err, AllocError::InvalidFraction(_)), "{err}");
        assert!(err.to_string().contains("invalid memory fraction"), "{err}");
    }

    let tensor = gpu.floats(&[1024]);
    gpu.empty_cache();
    let total_memory = gpu.total_memory();
    gpu.allocator.set_memory_fraction(0.5).unwrap();

    // test 0.499 allocation is ok.
    let application = (total_memory as f64 * 0.499) as u64 - gpu.max_memory_reserved();
    let tmp_tensor = gpu.empty(application).unwrap();
    drop(tmp_tensor);
    gpu.empty_cache();

    let application = (total_memory as f64 * 0.5) as u64;
    // it will get OOM when try to allocate more than half memory.
    let err = gpu.empty(application).err().expect("out of memory");
    assert!(err.to_string().contains("out of memory"), "{err}");
    // From the source: the message carries the allowed bytes.
    assert_eq!(err.as_oom().unwrap().allowed_bytes, Some(total_memory / 2));

    // ensure out of memory error doesn't disturb subsequent kernel
    assert_eq!(tensor.block_bytes(), 4096);
    gpu.allocator.set_memory_fraction(1.0).unwrap();
}

/// `TestCuda.test_get_per_process_memory_fraction`: the fraction read back is the one
/// set, limits included (fixed values stand in for `torch.rand(3)`).
pub fn get_per_process_memory_fraction(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let fraction = |gpu: &Gpu| gpu.allocator.config().per_process_memory_fraction;
    for val in [1.0, 0.0, 0.123_456_789, 0.5, 0.987_654_321] {
        gpu.allocator.set_memory_fraction(val).unwrap();
        assert_eq!(fraction(&gpu), Some(val));
    }
    // From the source: a fraction of 0 lets no new segment be allocated.
    gpu.allocator.set_memory_fraction(0.0).unwrap();
    assert!(gpu.empty(1).unwrap_err().is_out_of_memory());
}

#[test]
fn test_memory_allocation() {
    memory_allocation(false);
}

#[test]
fn test_memory_stats() {
    memory_stats(false);
}

#[test]
fn test_out_of_memory() {
    out_of_memory(false);
}

#[test]
fn test_out_of_memory_retry() {
    out_of_memory_retry(false);
}

#[test]
fn test_set_per_process_memory_fraction() {
    set_per_process_memory_fraction(false);
}

#[test]
fn test_get_per_process_memory_fraction() {
    get_per_process_memory_fraction(false);
}
