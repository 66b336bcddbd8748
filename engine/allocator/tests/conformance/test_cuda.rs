//! `test/test_cuda.py` (pytorch/pytorch commit 000e43cdff99f30291164c1f2e90133f19fa83fb):
//! the memory tests of `TestCuda` and `TestCudaMallocAsync` (the class that, despite
//! its name, holds the native allocator's settings and OOM tests) whose subject is
//! the allocator's arithmetic. Each takes `expandable` so that
//! `test_cuda_expandable_segments.py` (which re-runs `TestCuda` with
//! `expandable_segments:True`) reuses it; the `TestCudaMallocAsync` ones are run
//! with expandable segments too, as vramlab's extra (PyTorch's expandable runner
//! does not import that class).

use vramlab_allocator::consts::GIB;
use vramlab_allocator::hooks::{AllocatorAction, Event};
use vramlab_allocator::{AllocError, AllocatorConfig, BlockState, MAX_REQUEST};

use crate::harness::{Gpu, Tensor};

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

    let err = gpu.empty(1024 * 1024 * 1024 * 800_000_000).expect_err("out of memory");
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
    let err = gpu.empty(size).expect_err("refused");
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
    let err = gpu.empty(size).expect_err("out of memory");
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
        // PyTorch's ValueError, as Python formats the float.
        let shown = if bad < 0.0 { "-0.1" } else { "2.0" };
        assert_eq!(err.to_string(), format!("Invalid fraction value: {shown}. Allowed range: 0~1"));
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
    let err = gpu.empty(application).expect_err("out of memory");
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

/// `TestCuda.test_record_stream`: a block freed while another stream still uses it
/// is not reused before that stream's work completes, and is reused after.
pub fn record_stream(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let (main, side) = (0, 1);
    let result = gpu.empty_on(16, main).unwrap(); // torch.cuda.FloatTensor(t.size())
    let ptr = {
        // perform_copy(): tmp is allocated on the side stream …
        let tmp = gpu.empty_on(16, side).unwrap();
        let ptr = tmp.data_ptr();
        gpu.record_stream(&tmp, main);
        // … and the main stream is busy (_sleep) when tmp dies.
        gpu.raw.hold_events(true);
        ptr
    };
    // From the source: the block waits as active_pending_free.
    let pending = gpu.allocator.snapshot().into_iter().flat_map(|s| s.blocks).find(|b| b.address == ptr).unwrap();
    assert_eq!(pending.state, BlockState::ActivePendingFree);
    let tmp2 = gpu.empty_on(16, side).unwrap();
    assert_ne!(tmp2.data_ptr(), ptr, "allocation reused to soon");
    // torch.cuda.current_stream().synchronize()
    gpu.raw.complete_events();
    let tmp3 = gpu.empty_on(16, side).unwrap();
    assert_eq!(tmp3.data_ptr(), ptr, "allocation not reused");
    drop((result, tmp2, tmp3));
    gpu.raw.hold_events(false);
}

/// `TestCuda.test_record_stream_on_shifted_view`: recording a stream on a view
/// (here: on the storage the view shares) keeps the block from being reused while
/// that stream is busy, even after the allocating stream synchronized.
pub fn record_stream_on_shifted_view(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let (stream_alloc, stream_record) = (1, 2);
    let base = gpu.empty_on(8, stream_alloc).unwrap(); // torch.cuda.FloatTensor([10, 10])
    gpu.raw.hold_events(true); // _sleep on stream_record
    gpu.record_stream(&base, stream_record); // view.record_stream(stream_record)
    let data_ptr = base.data_ptr();
    drop(base);
    // stream_alloc.synchronize() completes nothing of stream_record's work.
    let try_realloc = gpu.empty_on(8, stream_alloc).unwrap();
    assert_ne!(try_realloc.data_ptr(), data_ptr);
    drop(try_realloc);
    gpu.raw.hold_events(false);
}

/// `TestCuda.test_caching_allocator_record_stream_oom`: allocations held back by
/// `record_stream` are freed by the out-of-memory retry (issue #19219), so filling
/// the device never raises. The device here has 2 GiB, so that the 100 × 160 MiB
/// loop reaches its capacity as it does on the GPUs the test was written for.
pub fn caching_allocator_record_stream_oom(expandable: bool) {
    let config = AllocatorConfig { expandable_segments: expandable, ..AllocatorConfig::default() };
    let gpu = Gpu::with_capacity(config, 2 * GIB);
    let stream = 1;
    let y = gpu.empty_on(40 * 1024 * 1024 * 4, stream).unwrap();
    gpu.raw.hold_events(true); // `y += x` keeps the stream busy
    for _ in 0..100 {
        let x = gpu.empty(40 * 1024 * 1024 * 4).expect("the retry frees the held blocks");
        gpu.record_stream(&x, stream);
        drop(x);
    }
    // From the source: the device filled up, and each time the retry synchronized
    // and released the held blocks; no OOM was raised.
    assert_eq!(gpu.stat("num_ooms"), 0);
    assert!(gpu.stat("num_alloc_retries") >= 1);
    assert!(gpu.stat("num_sync_all_streams") >= 1);
    gpu.empty_cache();
    drop(y);
    gpu.raw.hold_events(false);
    gpu.empty_cache();
}

/// `power2_div` of `TestCuda.test_allocator_settings`.
fn power2_div(size: u64, div_factor: u64) -> u64 {
    let mut pow2 = 1;
    while pow2 < size {
        pow2 *= 2;
    }
    if pow2 == size {
        return pow2;
    }
    let step = pow2 / 2 / div_factor;
    let mut ret = pow2 / 2;
    while ret < size {
        ret += step;
    }
    ret
}

/// `TestCudaMallocAsync.test_allocator_settings`: `_set_allocator_settings` between
/// allocations changes the rounding of the next ones, resets the keys it leaves
/// out, and refuses bad strings.
pub fn allocator_settings(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let key_allocated = "active_bytes.all.allocated";
    let key_requested = "requested_bytes.all.allocated";
    let nelems = 21 * 1024 * 1024;
    let nbytes = 4 * nelems; // floats are 4 bytes
    let nelems_big = 100 * 1024 * 1024;
    let nbytes_big = 4 * nelems_big;
    let delta = |start: i64| (gpu.stat(key_allocated) - start) as u64;

    let start_mem = gpu.stat(key_allocated);
    gpu.set_allocator_settings("").unwrap();
    let _x = gpu.floats(&[nelems]);

    // test roundup_power2_divisions single value syntax
    let reg_mem = gpu.stat(key_allocated);
    let start_requested = gpu.stat(key_requested);
    gpu.set_allocator_settings("roundup_power2_divisions:4").unwrap();
    let _y = gpu.floats(&[nelems]);
    let pow2_div4_mem = gpu.stat(key_allocated);
    let current_requested = gpu.stat(key_requested);
    assert_eq!((reg_mem - start_mem) as u64, nbytes);
    assert_eq!((pow2_div4_mem - reg_mem) as u64, power2_div(nbytes, 4));
    assert_eq!((current_requested - start_requested) as u64, nbytes);

    gpu.set_allocator_settings("garbage_collection_threshold:0.5").unwrap();
    gpu.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40").unwrap();

    // should have reset the power2 divisions now
    gpu.empty_cache();
    let start_mem = gpu.stat(key_allocated);
    let _z = gpu.floats(&[nelems]);
    assert_eq!(delta(start_mem), nbytes);

    // roundup_power2_divisions knob array syntax
    gpu.empty_cache();
    gpu.set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]",
    )
    .unwrap();
    let start_mem = gpu.stat(key_allocated);
    let w = gpu.floats(&[nelems]);
    assert_eq!(delta(start_mem), power2_div(nbytes, 8));

    gpu.empty_cache();
    let start_mem = gpu.stat(key_allocated);
    let _v = gpu.floats(&[nelems_big]);
    assert_eq!(delta(start_mem), power2_div(nbytes_big, 2));

    gpu.empty_cache();
    gpu.set_allocator_settings("release_lock_on_cudamalloc:True").unwrap();
    let start_mem = gpu.stat(key_allocated);
    let w2 = gpu.floats(&[nelems]); // `w = torch.rand(...)`: the new tensor first …
    drop(w); // … then the old one is released
    assert_eq!(delta(start_mem), nbytes);
    drop(w2);

    for bad in [
        "foo:1,bar:2",
        "garbage_collection_threshold:1.2",
        "max_split_size_mb:2",
        "release_lock_on_cudamalloc:none",
        "pinned_use_cuda_host_register:none",
        "pinned_num_register_threads:none",
        "pinned_num_register_threads:1024",
    ] {
        let before = gpu.allocator.config();
        let err = gpu.set_allocator_settings(bad).expect_err(bad);
        assert!(matches!(err, AllocError::Config(_)), "{bad}: {err}");
        // From the source: a refused string changes nothing.
        assert_eq!(gpu.allocator.config(), before, "{bad}");
    }
}

/// `TestCudaMallocAsync.test_raises_oom` (parametrized on `max_split_size_mb_setting`): 4 TiB
/// raises `OutOfMemoryError`, with or without `max_split_size_mb:1024` set first.
pub fn raises_oom(expandable: bool, max_split_size_mb_setting: bool) {
    let gpu = Gpu::with_expandable(expandable);
    if max_split_size_mb_setting {
        gpu.set_allocator_settings("max_split_size_mb:1024").unwrap();
        gpu.empty_cache();
    }
    let err = gpu.floats_checked(&[1024 * 1024 * 1024 * 1024]).expect_err("out of memory");
    assert!(err.as_oom().is_some(), "{err}");
}

/// `TestCudaMallocAsync.test_notifies_oom`: the out-of-memory observer is called. vramlab's
/// observers are hook subscribers; the allocator emits an `oom` event.
pub fn notifies_oom(expandable: bool) {
    let (gpu, log) = Gpu::with_event_log(AllocatorConfig { expandable_segments: expandable, ..Default::default() });
    assert!(gpu.floats_checked(&[1024 * 1024 * 1024 * 1024]).unwrap_err().as_oom().is_some());
    let x = log.events().iter().any(|e| matches!(e, Event::Allocator(a) if a.action == AllocatorAction::Oom));
    assert!(x);
}

/// `TestCudaMallocAsync.test_allocator_fuzz`: 10 000 random allocs (2–20 MiB of int32), frees
/// and `empty_cache` calls, keeping the total under 1 GiB / 10 … of elements as
/// PyTorch's does. PyTorch checks each tensor still holds its own values; here every
/// live tensor must own a distinct, non-overlapping block, and the statistics must
/// agree with the snapshot after every op. Python's `random.seed(123)` sequence is
/// replaced by the workspace's generator seeded with 123 (`vramlab_rng::Rng`; the
/// assertions hold for any sequence).
pub fn allocator_fuzz(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let mut rng = vramlab_rng::Rng::new(123);
    let mut next = move || rng.next_u64();
    let mut mem: Vec<Tensor<'_>> = Vec::new();
    let mut total = 0u64;
    let limit = 1024 * 1024 * 1024 / (4 * 10);
    for _ in 0..10_000 {
        while total >= limit {
            let idx = (next() % mem.len() as u64) as usize;
            total -= mem.swap_remove(idx).numel();
        }
        // random.choices(choices, weights=[1, 1 if mem else 0, 0.1])
        let weights_total = if mem.is_empty() { 11 } else { 21 };
        let pick = next() % weights_total;
        if pick < 10 {
            let b = 2 * 1024 * 1024 / 4 + next() % (18 * 1024 * 1024 / 4);
            mem.push(gpu.floats(&[b]));
            total += b;
        } else if pick < 20 && !mem.is_empty() {
            let idx = (next() % mem.len() as u64) as usize;
            total -= mem.swap_remove(idx).numel();
        } else {
            gpu.empty_cache();
        }
    }
    let mut ranges: Vec<(u64, u64)> = mem.iter().map(|t| (t.data_ptr(), t.block_bytes())).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "live tensors overlap");
    }
    assert_eq!(gpu.memory_allocated(), ranges.iter().map(|r| r.1).sum::<u64>());
}

/// `TestCudaMallocAsync.test_allocator_memory_fraction_setting`: `per_process_memory_fraction`
/// in the config string is what the allocator reports; outside [0, 1] it is refused
/// (PyTorch: "per_process_memory_fraction is invalid"; vramlab words it its own way).
pub fn allocator_memory_fraction_setting(expandable: bool) {
    let run_test = |value: &str| {
        let conf = format!(
            "expandable_segments:{},per_process_memory_fraction:{value}",
            if expandable { "True" } else { "False" }
        );
        AllocatorConfig::parse(&conf).map(|c| Gpu::new(c).allocator.config().per_process_memory_fraction)
    };
    assert_eq!(run_test("0.0").unwrap(), Some(0.0));
    assert_eq!(run_test("0.5").unwrap(), Some(0.5));
    assert_eq!(run_test("1.0").unwrap(), Some(1.0));
    for bad in ["-0.1", "1.1"] {
        let err = run_test(bad).unwrap_err().to_string();
        assert!(err.contains("per_process_memory_fraction is invalid, set it in [0.0, 1.0]"), "{err}");
    }
    // From the source: the fraction from the config is in force — half the device.
    let gpu = Gpu::new(AllocatorConfig::parse("per_process_memory_fraction:0.5").unwrap());
    let err = gpu.empty(gpu.total_memory() / 2 + 1).expect_err("past the fraction");
    assert_eq!(err.as_oom().unwrap().allowed_bytes, Some(gpu.total_memory() / 2));
}

/// `TestCudaMallocAsync.test_cachingAllocator_raw_alloc`, its enabled half: a 1 MiB raw
/// allocation adds 1 MiB to `requested_bytes.all.allocated`. (The half with
/// `caching_allocator_enable(False)` is not converted: vramlab has no switch
/// that bypasses the caching allocator.)
pub fn caching_allocator_raw_alloc(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    gpu.reset_accumulated_memory_stats();
    let raw_alloc_size = 1024 * 1024;
    let start = gpu.stat("requested_bytes.all.allocated");
    let mem = gpu.empty(raw_alloc_size).unwrap();
    let finish = gpu.stat("requested_bytes.all.allocated");
    drop(mem);
    assert_eq!((finish - start) as u64, raw_alloc_size);
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

#[test]
fn test_record_stream() {
    record_stream(false);
}

#[test]
fn test_record_stream_on_shifted_view() {
    record_stream_on_shifted_view(false);
}

#[test]
fn test_caching_allocator_record_stream_oom() {
    caching_allocator_record_stream_oom(false);
}

#[test]
fn test_allocator_settings() {
    allocator_settings(false);
}

#[test]
fn test_raises_oom_max_split_size_mb_setting_false() {
    raises_oom(false, false);
}

#[test]
fn test_raises_oom_max_split_size_mb_setting_true() {
    raises_oom(false, true);
}

#[test]
fn test_notifies_oom() {
    notifies_oom(false);
}

#[test]
fn test_allocator_fuzz() {
    allocator_fuzz(false);
}

#[test]
fn test_allocator_memory_fraction_setting() {
    allocator_memory_fraction_setting(false);
}

#[test]
fn test_caching_allocator_raw_alloc() {
    caching_allocator_raw_alloc(false);
}

// vramlab's extra: the `TestCudaMallocAsync` conversions under expandable segments.

#[test]
fn test_allocator_settings_with_expandable_segments() {
    allocator_settings(true);
}

#[test]
fn test_raises_oom_max_split_size_mb_setting_false_with_expandable_segments() {
    raises_oom(true, false);
}

#[test]
fn test_raises_oom_max_split_size_mb_setting_true_with_expandable_segments() {
    raises_oom(true, true);
}

#[test]
fn test_notifies_oom_with_expandable_segments() {
    notifies_oom(true);
}

#[test]
fn test_allocator_fuzz_with_expandable_segments() {
    allocator_fuzz(true);
}

#[test]
fn test_allocator_memory_fraction_setting_with_expandable_segments() {
    allocator_memory_fraction_setting(true);
}

#[test]
fn test_caching_allocator_raw_alloc_with_expandable_segments() {
    caching_allocator_raw_alloc(true);
}
