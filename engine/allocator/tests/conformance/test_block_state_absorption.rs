//! `test/test_cuda.py::TestBlockStateAbsorption`, read in a fork of
//! pytorch/pytorch (Nik-Reddy/pytorch commit
//! 44ca9097a8e5b6d8fa05803d64651b68faea2279; the stored pytorch/pytorch copy of
//! `test_cuda.py` predates the class), against `CUDACachingAllocator.cpp` at
//! pytorch/pytorch commit 001074d25084fdb87a799823e395a50f5ec044d3.
//!
//! `cudagraphify(fn, inputs, pool)` runs `fn` once on the side stream (a
//! warm-up in the default pool, its outputs dropped), then captures it with
//! `torch.cuda.graph(graph, stream, pool)`, whose `__enter__` empties the
//! cache; the graph is the harness's [`Graph`]. A tensor op is the allocations
//! and frees it makes, temporaries freed as CPython frees them (a binary op's
//! operands after the op, a function's locals when it returns, a list's
//! elements last to first); replays allocate nothing and the data they write is
//! not modelled. `torch._C._cuda_getCheckpointState` is
//! `checkpoint_pool_state`; `torch._C._cuda_setCheckpointPoolState(device,
//! state, stale_storages, storages_to_add_deleters_to)` is the harness's
//! `set_checkpoint_pool_state` (a stale tensor's deleter is removed, a tensor
//! given a deleter takes the new allocation at its address, the other new
//! allocations stay allocated until `raw_delete`, i.e.
//! `torch._C._cuda_cudaCachingAllocator_raw_delete`, or a tensor's deleter
//! frees them by address). `tearDown` (the pools' segments are all given back
//! once the graphs are gone and the cache is emptied) is asserted at the end of
//! every test.

use vramlab_allocator::{BlockState, MempoolId, SegmentInfo, StreamId};

use crate::harness::{Gpu, Graph, Tensor};

const MIN_BLOCK_SIZE: u64 = 512;
const SMALL_SIZE: u64 = 1048576;
const SMALL_BUFFER: u64 = 2097152;
const LARGE_BUFFER: u64 = 20971520;

/// The side stream `cudagraphify` creates and captures on.
const S: StreamId = 1;

/// `int8_cuda(size)`: `torch.ones([size], dtype=torch.uint8)` on the current
/// (capture) stream.
fn int8_cuda(gpu: &Gpu, size: u64) -> Tensor<'_> {
    gpu.empty_on(size, S).unwrap()
}

/// `cudagraphify(fn, inputs, pool)`: (graph, static outputs).
fn cudagraphify<'g>(
    gpu: &'g Gpu,
    pool: Option<MempoolId>,
    f: impl Fn(&'g Gpu) -> Vec<Tensor<'g>>,
) -> (Graph<'g>, Vec<Tensor<'g>>) {
    drop(f(gpu));
    // `torch.cuda.graph.__enter__`: synchronize, then `torch.cuda.empty_cache()`.
    gpu.empty_cache();
    let mut graph = gpu.capture_begin(S, pool);
    let outputs = f(gpu);
    graph.capture_end();
    (graph, outputs)
}

/// `live_blocks(pool_id)`: the pool's blocks in state `active_allocated`.
fn live_blocks(gpu: &Gpu, pool: MempoolId) -> usize {
    gpu.pool_segments(pool).iter().flat_map(|s| &s.blocks).filter(|b| b.state == BlockState::ActiveAllocated).count()
}

/// `checkCheckpointedState(before, after)`: every segment of `before` is in
/// `after` with the same sizes, type and pool, and the same blocks (size and state).
#[track_caller]
fn check_checkpointed_state(before: &[SegmentInfo], after: &[SegmentInfo]) {
    for b in before {
        let a = after.iter().find(|a| a.address == b.address).expect("the segment is still there");
        assert_eq!(b.total_size, a.total_size);
        assert_eq!(b.allocated_size, a.allocated_size);
        assert_eq!(b.active_size, a.active_size);
        assert_eq!(b.pool, a.pool);
        assert_eq!(b.pool_id, a.pool_id);
        assert_eq!(b.blocks.len(), a.blocks.len());
        // `checkCheckpointedBlock`.
        for (bb, ab) in b.blocks.iter().zip(&a.blocks) {
            assert_eq!(bb.size, ab.size);
            assert_eq!(bb.state, ab.state);
        }
    }
}

/// `tearDown`: once the graphs are gone and the cache emptied, no private
/// pool's segment is left (there were none at `setUp`).
#[track_caller]
fn tear_down(gpu: &Gpu) {
    gpu.empty_cache();
    assert_eq!(gpu.allocator.snapshot().iter().filter(|s| s.pool_id.is_some()).count(), 0);
}

/// `checkFunction(fn, [])`: capture `fn`, checkpoint the graph's pool, restore
/// the checkpoint at once, and the pool's segments are as before.
fn check_function<'g>(gpu: &'g Gpu, f: impl Fn(&'g Gpu) -> Vec<Tensor<'g>>) {
    let (graph, outputs) = cudagraphify(gpu, None, f);
    let pool = graph.pool();
    let segments_before_checkpoint = gpu.pool_segments(pool);
    let stats_before = gpu.memory_stats().flatten();
    let live_requested: u64 = segments_before_checkpoint
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.requested_size)
        .sum();
    let live_sizes: u64 = segments_before_checkpoint.iter().map(|s| s.allocated_size).sum();

    let state = gpu.checkpoint_pool_state(pool).unwrap();
    let freed = gpu.set_checkpoint_pool_state(&state, &mut [], &mut []).unwrap();

    check_checkpointed_state(&segments_before_checkpoint, &gpu.pool_segments(pool));

    // From the source: every live block of the pool was freed (`ptrs_freed`)
    // and allocated again; segments and reserved memory are untouched; the
    // current allocated/active figures end where they were, and
    // `requested_bytes` now counts each restored block at its size.
    let mut expected_freed: Vec<u64> = outputs.iter().map(Tensor::data_ptr).collect();
    expected_freed.sort_unstable();
    expected_freed.dedup();
    let mut freed_sorted = freed.clone();
    freed_sorted.sort_unstable();
    assert_eq!(freed_sorted, expected_freed);
    let stats_after = gpu.memory_stats().flatten();
    for key in [
        "segment.all.current",
        "reserved_bytes.all.current",
        "allocation.all.current",
        "allocated_bytes.all.current",
        "active.all.current",
        "active_bytes.all.current",
        "inactive_split.all.current",
        "inactive_split_bytes.all.current",
        "num_device_alloc",
        "num_device_free",
    ] {
        assert_eq!(stats_before[key], stats_after[key], "{key}");
    }
    assert_eq!(
        stats_after["requested_bytes.all.current"],
        stats_before["requested_bytes.all.current"] - live_requested as i64 + live_sizes as i64
    );

    drop(outputs);
    drop(graph);
    tear_down(gpu);
}

pub fn simple(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    check_function(&gpu, |g| {
        // x = torch.zeros([SMALL_SIZE * 8], dtype=torch.uint8); x = x + x
        let x0 = int8_cuda(g, SMALL_SIZE * 8);
        let x = int8_cuda(g, SMALL_SIZE * 8);
        drop(x0);
        // x1 = int8_cuda(SMALL_SIZE) + int8_cuda(SMALL_SIZE) + int8_cuda(SMALL_SIZE)
        let (a, b) = (int8_cuda(g, SMALL_SIZE), int8_cuda(g, SMALL_SIZE));
        let ab = int8_cuda(g, SMALL_SIZE);
        drop((a, b));
        let c = int8_cuda(g, SMALL_SIZE);
        let x1 = int8_cuda(g, SMALL_SIZE);
        drop((ab, c));
        // y = int8_cuda(SMALL_SIZE) + x1
        let d = int8_cuda(g, SMALL_SIZE);
        let y = int8_cuda(g, SMALL_SIZE);
        drop(d);
        // z = int8_cuda(SMALL_SIZE); return x, y, z (x1 dies with the frame)
        let z = int8_cuda(g, SMALL_SIZE);
        drop(x1);
        vec![x, y, z]
    });
}

/// `[int8_cuda(MIN_BLOCK_SIZE) for _ in range(11)]`, returning the ones at
/// `keep` (the rest die with the list, last first).
fn middle_allocations<'g>(g: &'g Gpu, keep: &[usize]) -> Vec<Tensor<'g>> {
    let mut small_buffers: Vec<Option<Tensor<'g>>> = (0..11).map(|_| Some(int8_cuda(g, MIN_BLOCK_SIZE))).collect();
    let kept: Vec<Tensor<'g>> = keep.iter().map(|&i| small_buffers[i].take().unwrap()).collect();
    while let Some(t) = small_buffers.pop() {
        drop(t);
    }
    kept
}

pub fn allocated_in_middle_of_segment(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    // return small_buffers[5].add_(2): in place, no allocation
    check_function(&gpu, |g| middle_allocations(g, &[5]));
}

pub fn multiple_middle_allocations(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    check_function(&gpu, |g| middle_allocations(g, &[5, 8]));
}

pub fn middle_allocations_contiguous(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    check_function(&gpu, |g| middle_allocations(g, &[5, 6]));
}

pub fn additional_free_following_checkpoint(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let (graph, outputs) = cudagraphify(&gpu, None, |g| vec![int8_cuda(g, MIN_BLOCK_SIZE)]);
    let pool_id = graph.pool();
    let segments_before_checkpoint = gpu.pool_segments(pool_id);
    let state = gpu.checkpoint_pool_state(pool_id).unwrap();

    let (graph2, mut outputs2) = cudagraphify(&gpu, Some(pool_id), |g| vec![int8_cuda(g, MIN_BLOCK_SIZE)]);
    // From the source: the second capture's output lies in the same pool.
    assert_eq!(live_blocks(&gpu, pool_id), 2);

    let mut stale: Vec<&mut Tensor<'_>> = outputs2.iter_mut().collect();
    let freed = gpu.set_checkpoint_pool_state(&state, &mut stale, &mut []).unwrap();
    // From the source: both live blocks were freed, the checkpoint's one made again.
    assert_eq!(freed.len(), 2);
    assert_eq!(live_blocks(&gpu, pool_id), 1);

    drop(outputs2);

    check_checkpointed_state(&segments_before_checkpoint, &gpu.pool_segments(pool_id));

    drop((outputs, graph2, graph));
    tear_down(&gpu);
}

pub fn tensor_dies_after_checkpoint(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let (graph, outputs) =
        cudagraphify(&gpu, None, |g| vec![int8_cuda(g, MIN_BLOCK_SIZE), int8_cuda(g, MIN_BLOCK_SIZE)]);
    let pool_id = graph.pool();
    let _segments_before_checkpoint = gpu.pool_segments(pool_id);
    let state = gpu.checkpoint_pool_state(pool_id).unwrap();

    let output_data_ptrs: Vec<u64> = outputs.iter().map(Tensor::data_ptr).collect();
    drop(outputs);

    let freed = gpu.set_checkpoint_pool_state(&state, &mut [], &mut []).unwrap();
    // From the source: nothing was live to free.
    assert!(freed.is_empty());

    assert_eq!(live_blocks(&gpu, pool_id), 2);
    gpu.raw_delete(output_data_ptrs[0]);
    assert_eq!(live_blocks(&gpu, pool_id), 1);
    gpu.raw_delete(output_data_ptrs[1]);
    assert_eq!(live_blocks(&gpu, pool_id), 0);

    drop(graph);
    tear_down(&gpu);
}

/// In part: the data checks (`mean() == 2`, then 3 after `inp.add_(1)` and a
/// replay) are not modelled; the deleters are the restore's allocations.
pub fn assigning_back_deleter_fns_to_tensor(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    // inp = torch.tensor([1], device="cuda"): int64, current stream
    let _inp = gpu.empty_on(8, 0).unwrap();
    // foo(x): (int8_cuda(n) + x) three times; uint8 + int64 is int64 (8n bytes),
    // the ones temporary freed after each sum.
    let (graph, outputs) = cudagraphify(&gpu, None, |g| {
        [SMALL_BUFFER, SMALL_BUFFER, LARGE_BUFFER]
            .into_iter()
            .map(|n| {
                let ones = int8_cuda(g, n);
                let out = g.empty_on(8 * n, S).unwrap();
                drop(ones);
                out
            })
            .collect()
    });
    let pool_id = graph.pool();
    // graph.replay(): allocates nothing.

    let state = gpu.checkpoint_pool_state(pool_id).unwrap();
    let output_ptrs: Vec<u64> = outputs.iter().map(Tensor::data_ptr).collect();
    let mut reconstructed: Vec<Tensor<'_>> = outputs.iter().map(Tensor::view_without_deleter).collect();

    assert_eq!(live_blocks(&gpu, pool_id), 3);
    drop(outputs);
    assert_eq!(live_blocks(&gpu, pool_id), 0);

    let r2 = reconstructed.pop().unwrap();
    let mut r1 = reconstructed.pop().unwrap();
    let mut r0 = reconstructed.pop().unwrap();
    gpu.set_checkpoint_pool_state(&state, &mut [], &mut [&mut r0, &mut r1]).unwrap();
    assert_eq!(live_blocks(&gpu, pool_id), 3);

    drop(r0);
    assert_eq!(live_blocks(&gpu, pool_id), 2);
    drop(r1);
    assert_eq!(live_blocks(&gpu, pool_id), 1);
    // should not change, we did not pass it in to swap data ptrs
    drop(r2);
    assert_eq!(live_blocks(&gpu, pool_id), 1);

    gpu.raw_delete(output_ptrs[2]);
    assert_eq!(live_blocks(&gpu, pool_id), 0);

    drop(graph);
    tear_down(&gpu);
}

pub fn check_pool_live_allocations(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let pool = gpu.graph_pool_handle();
    // foo: torch.ones([4]) (float32)
    let (graph, outputs) = cudagraphify(&gpu, Some(pool), |g| vec![g.empty_on(16, S).unwrap()]);
    let check = |live: &[u64]| gpu.check_pool_live_allocations(pool, live);

    assert!(check(&[outputs[0].data_ptr()]));
    assert!(!check(&[outputs[0].data_ptr(), 0]));
    assert!(!check(&[]));

    drop(outputs);
    assert!(check(&[]));

    drop(graph);
    tear_down(&gpu);
}

#[test]
fn test_simple() {
    simple(false);
}

#[test]
fn test_allocated_in_middle_of_segment() {
    allocated_in_middle_of_segment(false);
}

#[test]
fn test_multiple_middle_allocations() {
    multiple_middle_allocations(false);
}

#[test]
fn test_middle_allocations_contiguous() {
    middle_allocations_contiguous(false);
}

#[test]
fn test_additional_free_following_checkpoint() {
    additional_free_following_checkpoint(false);
}

#[test]
fn test_tensor_dies_after_checkpoint() {
    tensor_dies_after_checkpoint(false);
}

#[test]
fn test_assigning_back_deleter_fns_to_tensor() {
    assigning_back_deleter_fns_to_tensor(false);
}

#[test]
fn test_check_pool_live_allocations() {
    check_pool_live_allocations(false);
}
