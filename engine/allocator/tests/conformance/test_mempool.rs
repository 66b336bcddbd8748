//! `test/test_cuda.py::TestMemPool` (pytorch/pytorch commit
//! 000e43cdff99f30291164c1f2e90133f19fa83fb): `torch.cuda.MemPool` is the
//! harness's [`MemPool`] (created with use count 1; deleting it is `~MemPool`:
//! `releasePool` then `emptyCache(id)`), `with torch.cuda.use_mem_pool(pool):` is
//! `begin_use_mem_pool` / `end_use_mem_pool` (`beginAllocateToPool` with the
//! current thread's filter, which takes every stream of the model's one thread;
//! then `endAllocateToPool` and `releasePool`), and `pool.snapshot()` is the
//! snapshot's segments whose `segment_pool_id` is the pool's.
//!
//! Several tests give the pool a pluggable allocator (`CUDAPluggableAllocator`)
//! whose only role in them is to count its calls (`called_dummy_alloc = 123`,
//! `called_dummy_free = 321`). vramlab does not model pluggable allocators: a
//! pool's segments come from the device like every other segment, and those
//! tests are converted *in part* — the counters become what they witness, a
//! segment of the pool obtained from (`num_device_alloc`) or given back to
//! (`num_device_free`) the device.
//!
//! Each test takes `expandable` so that `test_cuda_expandable_segments.py` (which
//! re-runs `TestMemPool` with `expandable_segments:True`) reuses it; which of them
//! run there, and why the others do not, is said in
//! `test_cuda_expandable_segments.rs`.

use crate::harness::Gpu;
use vramlab_allocator::AllocError;
use vramlab_allocator::consts::MIB;

const NELEM_1MB: u64 = 1024 * 1024 / 4;

/// `_setup_mempool_limited_memory_test(mb)`: a memory fraction that allows `mb`
/// MiB on top of what is reserved now.
fn setup_limited_memory(gpu: &Gpu, mb: u64) {
    gpu.empty_cache();
    let total_allowed = mb * MIB + gpu.memory_reserved();
    gpu.allocator.set_memory_fraction(total_allowed as f64 / gpu.total_memory() as f64).unwrap();
    gpu.check();
}

/// `TestMemPool.test_mempool_empty_cache`: deleting a pool empties its cache but
/// not the default pools', so segments remain.
pub fn mempool_empty_cache(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let pool = gpu.mem_pool(false, false);
    let x = gpu.floats(&[1024, 1024]);
    gpu.begin_use_mem_pool(&pool);
    let y = gpu.floats(&[1024, 1024]);
    gpu.end_use_mem_pool(&pool);
    let id = pool.id;
    drop(y);
    drop(x);
    drop(pool);
    let segments = gpu.allocator.snapshot();
    assert!(!segments.is_empty(), "expected more than one segment");
    // From the source: the one left is x's, in the default pool (an expandable
    // segment's one mapped page under expandable segments); the pool is gone, its
    // page unmapped by `emptyCache(id)`.
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].pool_id, None);
    assert_eq!(segments[0].is_expandable, expandable);
    assert_eq!(gpu.allocator.pool_use_count(id), None);
}

/// `TestMemPool.test_mempool_empty_cache_inactive` (in part: the pluggable
/// allocator's counters are the device's): a tensor outliving its pool keeps the
/// pool's segment until it is freed and the cache emptied.
pub fn mempool_empty_cache_inactive(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let x = {
        let pool = gpu.mem_pool(false, false);
        gpu.begin_use_mem_pool(&pool);
        let x = gpu.empty(8 * 1024 * 1024 * 2).unwrap(); // torch.arange(2M) (int64)
        gpu.end_use_mem_pool(&pool);
        x
    };
    assert_eq!(gpu.stat("num_device_alloc"), 1); // called_dummy_alloc == 123
    assert_eq!(gpu.stat("num_device_free"), 0); // called_dummy_free == 0
    drop(x);
    gpu.empty_cache();
    assert_eq!(gpu.stat("num_device_free"), 1); // called_dummy_free == 321
    assert!(gpu.allocator.pools().is_empty());
}

/// `TestMemPool.test_mempool_with_allocator` (in part, as above): use counts
/// through `use_mem_pool`, and the pool's segment count as small tensors fill
/// 2 MiB buffers.
pub fn mempool_with_allocator(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let pool = gpu.mem_pool(false, false);
    // pool's use count should be 1 at this point as MemPool object holds a reference
    assert_eq!(pool.use_count(), 1);
    assert_eq!(gpu.stat("num_device_alloc"), 0);
    gpu.begin_use_mem_pool(&pool);
    let out_0 = gpu.floats(&[NELEM_1MB]);
    // pool's use count should be 2 at this point as use_mem_pool holds a reference
    assert_eq!(pool.use_count(), 2);
    gpu.end_use_mem_pool(&pool);
    assert_eq!(pool.use_count(), 1);
    assert_eq!(gpu.stat("num_device_alloc"), 1); // called_dummy_alloc == 123

    let out_non_pool = gpu.floats(&[NELEM_1MB]);
    gpu.begin_use_mem_pool(&pool);
    // 1 MB packed into a 2 MB buffer
    assert_eq!(pool.snapshot().len(), 1);
    let out_1 = gpu.floats(&[NELEM_1MB]);
    assert_eq!(pool.snapshot().len(), 1);
    let out_2 = gpu.floats(&[NELEM_1MB]);
    // a new 2 MB buffer for out_2
    assert_eq!(pool.snapshot().len(), 2);
    gpu.end_use_mem_pool(&pool);
    assert_eq!(pool.snapshot().len(), 2);
    // From the source: the default pool's tensor is not in the pool.
    assert_eq!(gpu.allocator.snapshot().len(), 3);

    drop((out_0, out_1, out_2));
    let freed_before = gpu.stat("num_device_free");
    // pool's destructor calls emptyCache()
    drop(pool);
    // called_dummy_free == 321: the pool's two segments went back.
    assert_eq!(gpu.stat("num_device_free") - freed_before, 2);
    drop(out_non_pool);
}

/// `TestMemPool.test_tensor_delete_after_allocator_delete` (in part, as above):
/// deleting the pool while its tensor lives frees nothing; freeing the tensor and
/// emptying the cache gives the segment back.
pub fn tensor_delete_after_allocator_delete(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let pool = gpu.mem_pool(false, false);
    gpu.begin_use_mem_pool(&pool);
    let data = gpu.floats(&[4]);
    gpu.end_use_mem_pool(&pool);
    assert_eq!(gpu.stat("num_device_alloc"), 1);
    assert_eq!(gpu.stat("num_device_free"), 0);
    drop(pool);
    assert_eq!(gpu.stat("num_device_free"), 0);
    drop(data);
    gpu.empty_cache();
    assert_eq!(gpu.stat("num_device_free"), 1);
}

/// `TestMemPool.test_mempool_limited_memory_with_allocator` (without the
/// pluggable allocator, which only supplies the pools' memory): a default-pool
/// request that would run out of memory takes a free block of the `use_on_oom`
/// pool, never one of the other pool.
pub fn mempool_limited_memory_with_allocator(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let pool_do_not_use = gpu.mem_pool(false, false);
    let pool_use = gpu.mem_pool(true, false);
    setup_limited_memory(&gpu, 80);

    gpu.begin_use_mem_pool(&pool_do_not_use);
    let a = gpu.floats(&[40 * NELEM_1MB]);
    gpu.end_use_mem_pool(&pool_do_not_use);
    gpu.begin_use_mem_pool(&pool_use);
    let b = gpu.floats(&[40 * NELEM_1MB]);
    gpu.end_use_mem_pool(&pool_use);
    let b_dataptr = b.data_ptr();
    assert!(matches!(gpu.floats_checked(&[40 * NELEM_1MB]), Err(AllocError::OutOfMemory(_))));

    drop((a, b));
    // c should not oom and instead can use mempool_use as fallback
    let c = gpu.floats_checked(&[30 * NELEM_1MB]).unwrap();
    let c_dataptr = c.data_ptr();
    // out of memory since can't use mempool_do_not_use
    assert!(matches!(gpu.floats_checked(&[30 * NELEM_1MB]), Err(AllocError::OutOfMemory(_))));
    drop(c);
    assert_eq!(b_dataptr, c_dataptr);
    // From the source: c's block belonged to pool_use.
    assert!(pool_use.snapshot().iter().any(|s| s.address == c_dataptr));

    gpu.begin_use_mem_pool(&pool_use);
    let e = gpu.floats(&[20 * NELEM_1MB]);
    gpu.end_use_mem_pool(&pool_use);
    let e_dataptr = e.data_ptr();
    drop(e);
    assert_eq!(e_dataptr, c_dataptr);

    drop((pool_use, pool_do_not_use));
    gpu.empty_cache();
    assert_eq!(gpu.memory_reserved(), 0);
}

/// `TestMemPool.test_mempool_no_split`: a `no_split` pool hands out whole
/// segments, so it has more segments and fewer blocks than an ordinary pool.
pub fn mempool_no_split(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let pool_split = gpu.mem_pool(false, false);
    let pool_no_split = gpu.mem_pool(false, true);
    let mut live = Vec::new();
    for _ in 0..2 {
        for pool in [&pool_split, &pool_no_split] {
            gpu.begin_use_mem_pool(pool);
            live.push(gpu.floats(&[4 * NELEM_1MB]));
            gpu.end_use_mem_pool(pool);
        }
    }
    assert!(pool_no_split.snapshot().len() > pool_split.snapshot().len());
    for seg in pool_no_split.snapshot() {
        assert_eq!(seg.blocks.len(), 1, "Expected 1 block in no_split segment");
    }
    let count_blocks =
        |pool: &crate::harness::MemPool<'_>| pool.snapshot().iter().map(|s| s.blocks.len()).sum::<usize>();
    assert!(count_blocks(&pool_no_split) < count_blocks(&pool_split));
    // From the source: 20 MiB segments; 2 unsplit ones against one split in three.
    assert_eq!((pool_no_split.snapshot().len(), count_blocks(&pool_no_split)), (2, 2));
    assert_eq!((pool_split.snapshot().len(), count_blocks(&pool_split)), (1, 3));
    drop(live);
}

/// `TestMemPool.test_deleted_mempool_not_used_on_oom` (without the pluggable
/// allocator): deleted `use_on_oom` pools leave the fallback list; only the live
/// one serves the default pool's requests at the limit.
pub fn deleted_mempool_not_used_on_oom(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    setup_limited_memory(&gpu, 40);
    for _ in 0..10 {
        let pool = gpu.mem_pool(true, false);
        gpu.begin_use_mem_pool(&pool);
        let a = gpu.floats(&[40 * NELEM_1MB]);
        gpu.end_use_mem_pool(&pool);
        drop(a);
        drop(pool);
    }
    // From the source: each deleted pool gave its segment back and is gone.
    assert!(gpu.allocator.pools().is_empty());
    let new_pool = gpu.mem_pool(true, false);
    gpu.begin_use_mem_pool(&new_pool);
    let a = gpu.floats(&[40 * NELEM_1MB]);
    gpu.end_use_mem_pool(&new_pool);
    drop(a);
    let b = gpu.floats_checked(&[20 * NELEM_1MB]).unwrap();
    let c = gpu.floats_checked(&[20 * NELEM_1MB]).unwrap();
    // From the source: both came from the live pool's one 40 MiB segment.
    let segments = new_pool.snapshot();
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].allocated_size, 40 * MIB);
    drop((b, c));
    drop(new_pool);
    gpu.empty_cache();
    assert_eq!(gpu.memory_reserved(), 0);
}

/// `TestMemPool.test_mempool_emptycache_multithread` (the four threads one after
/// another: the model has one thread per device): `empty_cache` inside
/// `use_mem_pool` releases nothing of the pool in use.
pub fn mempool_emptycache_multithread(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let pools: Vec<_> = (0..4).map(|_| gpu.mem_pool(false, false)).collect();
    for pool in &pools {
        gpu.begin_use_mem_pool(pool);
        let x = gpu.floats(&[4]);
        drop(x);
        gpu.empty_cache();
        gpu.end_use_mem_pool(pool);
    }
    for p in &pools {
        assert_eq!(p.snapshot().len(), 1, "Expected to have a single segment");
        // From the source: a 2 MiB small segment, or one mapped 2 MiB page of the
        // pool's own small expandable segment.
        assert_eq!(p.snapshot()[0].total_size, 2 * MIB);
        assert_eq!(p.snapshot()[0].is_expandable, expandable);
    }
}

/// `TestMemPool.test_nested_mempool`: nested `use_mem_pool`s allocate to the
/// innermost pool.
pub fn nested_mempool(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let (pool1, pool2, pool3) = (gpu.mem_pool(false, false), gpu.mem_pool(false, false), gpu.mem_pool(false, false));
    let mut data = Vec::new();
    gpu.begin_use_mem_pool(&pool1);
    data.push(gpu.floats(&[NELEM_1MB * 20]));
    gpu.begin_use_mem_pool(&pool2);
    data.push(gpu.floats(&[NELEM_1MB * 20]));
    gpu.begin_use_mem_pool(&pool3);
    data.push(gpu.floats(&[NELEM_1MB * 20]));
    gpu.end_use_mem_pool(&pool3);
    data.push(gpu.floats(&[NELEM_1MB * 20]));
    gpu.end_use_mem_pool(&pool2);
    data.push(gpu.floats(&[NELEM_1MB * 20]));
    gpu.end_use_mem_pool(&pool1);
    assert_eq!(pool1.snapshot().len(), 2);
    assert_eq!(pool2.snapshot().len(), 2);
    assert_eq!(pool3.snapshot().len(), 1);
    drop(data);
}

#[test]
fn test_mempool_empty_cache() {
    mempool_empty_cache(false);
}

#[test]
fn test_mempool_empty_cache_inactive() {
    mempool_empty_cache_inactive(false);
}

#[test]
fn test_mempool_with_allocator() {
    mempool_with_allocator(false);
}

#[test]
fn test_tensor_delete_after_allocator_delete() {
    tensor_delete_after_allocator_delete(false);
}

#[test]
fn test_mempool_limited_memory_with_allocator() {
    mempool_limited_memory_with_allocator(false);
}

#[test]
fn test_mempool_no_split() {
    mempool_no_split(false);
}

#[test]
fn test_deleted_mempool_not_used_on_oom() {
    deleted_mempool_not_used_on_oom(false);
}

#[test]
fn test_mempool_emptycache_multithread() {
    mempool_emptycache_multithread(false);
}

#[test]
fn test_nested_mempool() {
    nested_mempool(false);
}
