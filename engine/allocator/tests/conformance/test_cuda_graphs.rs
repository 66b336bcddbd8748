//! `test/test_cuda.py` (pytorch/pytorch commit 000e43cdff99f30291164c1f2e90133f19fa83fb):
//! the CUDA-graph tests of `TestCuda` that assert private-pool numbers. A graph
//! is the harness's [`Graph`]: `capture_begin` takes the generator's two holders
//! and begins allocating the capture stream to the graph's pool, `capture_end`
//! ends it, dropping the graph releases the pool. Kernels are not modelled: a
//! tensor op is the allocations and frees it makes (`x.clone()` allocates,
//! `x + 1` allocates its result, a temporary is freed at the end of its
//! statement, a rebound name frees its old tensor), and replays, which allocate
//! nothing, are left out — what PyTorch asserts about their results
//! (`b.sum()`) is data, not allocator state.

use vramlab_allocator::{BlockState, StreamId};

use crate::harness::{Gpu, Tensor};

const K_SMALL_SIZE: u64 = 1048576;
const K_SMALL_BUFFER: u64 = 2097152;
const K_LARGE_BUFFER: u64 = 20971520;
const K_MIN_LARGE_ALLOC: u64 = 10485760;
const K_ROUND_LARGE: u64 = 2097152;

/// The side stream `s = torch.cuda.Stream()` the tests capture on.
const S: StreamId = 1;

/// `t.clone() + val` on `stream`: the clone is a temporary freed once the sum exists.
fn clone_plus<'g>(gpu: &'g Gpu, t: &Tensor<'g>, stream: StreamId) -> Tensor<'g> {
    let tmp = gpu.empty_on(4 * t.numel(), stream).unwrap();
    let out = gpu.empty_on(4 * t.numel(), stream).unwrap();
    drop(tmp);
    out.with_numel(t.numel())
}

/// `func_with_temps(t, val)`: `x = t.clone() + val; y = t.clone() + val; return x + y`.
fn func_with_temps<'g>(gpu: &'g Gpu, t: &Tensor<'g>, stream: StreamId) -> Tensor<'g> {
    let x = clone_plus(gpu, t, stream);
    let y = clone_plus(gpu, t, stream);
    let out = gpu.empty_on(4 * t.numel(), stream).unwrap().with_numel(t.numel());
    drop((x, y));
    out
}

/// `torch.ones((numel,))` / `a.clone()` on `stream`.
fn floats_on(gpu: &Gpu, numel: u64, stream: StreamId) -> Tensor<'_> {
    gpu.empty_on(4 * numel, stream).unwrap().with_numel(numel)
}

/// `TestCuda.test_graph_memory_stats_and_use_result_after_destroy_graph`: the
/// capture's private pool adds exactly the expected segments, reserved bytes,
/// active blocks and active bytes per pool; `empty_cache` leaves them while the
/// graph lives; after the graph is deleted and the cache emptied only the segment
/// of the surviving output `b` remains.
pub fn graph_memory_stats_and_use_result_after_destroy_graph(expandable: bool) {
    let elem = 4;
    let large_round = K_ROUND_LARGE * (K_MIN_LARGE_ALLOC + 512).div_ceil(K_ROUND_LARGE);
    let cases = [
        (512 / elem, 1, K_SMALL_BUFFER, K_SMALL_BUFFER, "small_pool"),
        (K_SMALL_SIZE / elem, 2, 2 * K_SMALL_BUFFER, K_SMALL_BUFFER, "small_pool"),
        ((K_SMALL_SIZE + 512) / elem, 1, K_LARGE_BUFFER, K_LARGE_BUFFER, "large_pool"),
        ((K_MIN_LARGE_ALLOC - 512) / elem, 2, 2 * K_LARGE_BUFFER, K_LARGE_BUFFER, "large_pool"),
        ((K_MIN_LARGE_ALLOC + 512) / elem, 3, 3 * large_round, large_round, "large_pool"),
    ];
    let stats_to_check = ["segment.", "reserved_bytes.", "active.", "active_bytes.", "requested_bytes."];

    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    for (case, &(numel, delta_mallocs, delta_bytes, delta_bytes_post_del_g, pool_string)) in cases.iter().enumerate() {
        let (delta_active_blocks, delta_active_bytes) = if pool_string == "small_pool" {
            // one from "b" plus a sneaky two from CUDAGraph's one-element rng seed and offset holders
            (3, numel * elem + 1024)
        } else {
            (1, numel * elem)
        };
        // From the source: requested bytes are b's 4·numel plus the holders' 8 each.
        let delta_requested = if pool_string == "small_pool" { numel * elem + 16 } else { numel * elem };

        let a = floats_on(&gpu, numel, S);
        let precapture = gpu.memory_stats().flatten();

        let mut g = gpu.capture_begin(S, None);
        let mut b = floats_on(&gpu, numel, S); // a.clone()
        for _ in 0..5 {
            b = clone_plus(&gpu, &b, S); // b = b.clone() + 1
        }
        g.capture_end();

        let postcapture = gpu.memory_stats().flatten();
        let expecteds = [delta_mallocs, delta_bytes, delta_active_blocks, delta_active_bytes, delta_requested];
        for i in 0..2 {
            // PyTorch compares the stats taken after the capture both times; from the
            // source, the live stats also stay put across the empty_cache below,
            // since the graph still holds its pool.
            let now = gpu.memory_stats().flatten();
            for (stat, &expected) in stats_to_check.iter().zip(&expecteds) {
                let key = format!("{stat}{pool_string}.current");
                let mut expected = expected as i64;
                if expandable && stat.starts_with("segment") {
                    expected = 0;
                }
                if expandable && stat.starts_with("reserved") && (case == 3 || case == 4) {
                    expected = 2 * K_LARGE_BUFFER as i64;
                }
                let current = postcapture[&key] - precapture[&key];
                assert_eq!(current, expected, "Pre to post capture delta of {key} = {current}, numel = {numel}");
                assert_eq!(now[&key] - precapture[&key], expected, "after empty_cache: {key}, numel = {numel}");
            }
            if i == 0 {
                gpu.empty_cache();
            }
        }

        let pool = g.pool();
        drop(g);
        gpu.empty_cache();
        let postdel = gpu.memory_stats().flatten();
        // b should be the only live reference remaining from the graph's private pool
        let expecteds = [1, delta_bytes_post_del_g, 1, numel * elem, numel * elem];
        for (stat, &expected) in stats_to_check.iter().zip(&expecteds) {
            let key = format!("{stat}{pool_string}.current");
            let mut expected = expected as i64;
            if expandable && stat.starts_with("segment") {
                expected = 0;
            }
            if expandable && stat.starts_with("reserved") && case == 3 {
                expected = 2 * K_LARGE_BUFFER as i64;
            }
            if expandable && stat.starts_with("reserved") && case == 4 {
                expected = K_LARGE_BUFFER as i64;
            }
            let current = postdel[&key] - precapture[&key];
            assert_eq!(
                current, expected,
                "Pre capture to post graph delete delta of {key} = {current}, numel = {numel}"
            );
        }
        // From the source: the pool outlives the graph while b holds a segment of it.
        assert_eq!(gpu.allocator.pool_use_count(pool), Some(0));
        assert_eq!(gpu.pool_segments(pool).len(), 1);

        drop((a, b));
        gpu.empty_cache();
        // From the source: with b gone the freeable pool gives its segment back and
        // is deleted once its `cudaMalloc_count` is 0. Under expandable segments
        // each successful `alloc_block` raises the count and each `unmap_block`
        // lowers it, and they need not pair up: in case 3 the capture mapped the
        // pool's two pages in more `alloc_block`s than the unmaps that gave them
        // back (the free pages merge and go in one unmap), so PyTorch keeps the
        // pool, empty.
        let kept = expandable && case == 3;
        assert_eq!(gpu.allocator.pool_use_count(pool).is_none(), !kept, "case {case}");
        assert_eq!(gpu.memory_reserved(), 0);
    }
}

/// `TestCuda.test_graph_two_successive`: two graphs captured one after the other
/// reserve one small segment (`kSmallBuffer`) less when they share a pool (through
/// `g0.pool()` or a `graph_pool_handle()`) than when each has its own.
pub fn graph_two_successive(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let size = 1000;
    let mut reserved_no_sharing = None;
    for share_mem in ["Don't share", "via pool()", "via graph_pool_handle()"] {
        let a = floats_on(&gpu, size, 0);
        let g0_pool = (share_mem == "via graph_pool_handle()").then(|| gpu.graph_pool_handle());
        let mut g0 = gpu.capture_begin(S, g0_pool);
        let mut b = floats_on(&gpu, size, S); // a.clone()
        for _ in 0..5 {
            b = func_with_temps(&gpu, &b, S);
        }
        g0.capture_end();
        let g1_pool = if share_mem == "via pool()" { Some(g0.pool()) } else { g0_pool };
        let mut g1 = gpu.capture_begin(S, g1_pool);
        for _ in 0..5 {
            b = func_with_temps(&gpu, &b, S);
        }
        g1.capture_end();

        // mixes unrelated eager ops with replays
        let mut c = floats_on(&gpu, size, 0); // a.clone()
        for _ in 0..6 {
            c = func_with_temps(&gpu, &c, 0);
        }

        let reserved = gpu.stat("reserved_bytes.all.current");
        match reserved_no_sharing {
            Some(no_sharing) => assert_eq!(no_sharing - reserved, K_SMALL_BUFFER as i64, "{share_mem}"),
            None => reserved_no_sharing = Some(reserved),
        }
        // From the source: sharing means one pool with both graphs as users.
        let pools: Vec<_> =
            gpu.allocator.pools().into_iter().filter(|&p| gpu.allocator.pool_use_count(p) != Some(0)).collect();
        if share_mem == "Don't share" {
            assert_eq!(pools.len(), 2);
        } else {
            assert_eq!(pools, vec![g0.pool()]);
            assert_eq!(gpu.allocator.pool_use_count(g0.pool()), Some(2));
        }

        drop((a, b, c, g0, g1));
        gpu.empty_cache();
        // From the source: every pool is gone (under expandable segments too, as
        // above) and nothing stays reserved.
        assert!(gpu.allocator.pools().is_empty());
        assert_eq!(gpu.memory_reserved(), 0);
    }
}

/// `TestCuda.test_graph_three_successive`: PyTorch asserts that replaying g0, g2,
/// g1 corrupts `e` exactly when the graphs share a pool, because g2's capture then
/// reused c's memory (freed during g1's capture) for `f`. The allocator state that
/// assertion rests on: `f` takes c's block if and only if the pool is shared.
pub fn graph_three_successive(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let size = 1000;
    for share_mem in ["Don't share", "via pool()", "via graph_pool_handle()"] {
        let a = floats_on(&gpu, size, 0);
        let g0_pool = (share_mem == "via graph_pool_handle()").then(|| gpu.graph_pool_handle());
        let mut g0 = gpu.capture_begin(S, g0_pool);
        let b = floats_on(&gpu, size, S); // a.clone()
        let c = floats_on(&gpu, size, S); // b + 1
        let d = floats_on(&gpu, size, S); // b + 2
        g0.capture_end();
        let args = if share_mem == "via pool()" { Some(g0.pool()) } else { g0_pool };
        let mut g1 = gpu.capture_begin(S, args);
        let e = floats_on(&gpu, size, S); // c + 3
        let c_ptr = c.data_ptr();
        drop(c);
        g1.capture_end();
        let mut g2 = gpu.capture_begin(S, args);
        let f = floats_on(&gpu, size, S); // d + 4
        g2.capture_end();

        let expect_corruption = share_mem != "Don't share";
        assert_eq!(f.data_ptr() == c_ptr, expect_corruption, "{share_mem}");
        drop((a, b, d, e, f, g0, g1, g2));
        gpu.empty_cache();
    }
}

/// `TestCuda.test_graph_capture_oom`: an allocation too large for the device
/// inside `with torch.cuda.graph(g):` raises "out of memory".
pub fn graph_capture_oom(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    let mut g = gpu.capture_begin(S, None);
    let err = gpu.empty_on(4 << 40, S).unwrap_err(); // torch.zeros(2**40)
    g.capture_end();
    assert!(err.to_string().contains("out of memory"), "{err}");
    // From the source: during a capture the cached blocks are not released for a
    // retry (`captures_underway` is not empty), so no retry is counted.
    assert_eq!(gpu.stat("num_ooms"), 1);
    assert_eq!(gpu.stat("num_alloc_retries"), 0);
    assert_eq!(gpu.stat("num_sync_all_streams"), 0);
}

/// `TestCuda.test_graph_record_stream`: a capture does not process outstanding
/// stream events (PyTorch would query them, illegal during capture), and a block
/// freed during the capture after `record_stream` has its end-of-life events
/// recorded only after the capture; the first allocation after a synchronize then
/// reclaims both.
pub fn graph_record_stream(expandable: bool) {
    let gpu = Gpu::with_expandable(expandable);
    gpu.empty_cache();
    let (s0, s1, s2) = (1, 2, 3);
    let potential_problem = floats_on(&gpu, 3, 0);
    let a = floats_on(&gpu, 3, 0);
    let pp_ptr = potential_problem.data_ptr();
    gpu.raw.hold_events(true); // torch.cuda._sleep on s0
    gpu.record_stream(&potential_problem, s0);
    drop(potential_problem);

    let state_of = |ptr: u64| {
        gpu.allocator.snapshot().into_iter().flat_map(|s| s.blocks).find(|b| b.address == ptr).map(|b| b.state)
    };
    let mut g = gpu.capture_begin(s1, None);
    let b = floats_on(&gpu, 3, s1); // a.clone()
    let b_ptr = b.data_ptr();
    gpu.record_stream(&b, s2);
    drop(b);
    // From the source: the capture's allocation did not process potential_problem's
    // event, and b waits for its events, which are not even recorded yet.
    assert_eq!(state_of(pp_ptr), Some(BlockState::ActivePendingFree));
    assert_eq!(state_of(b_ptr), Some(BlockState::ActivePendingFree));
    g.capture_end();

    // torch.cuda.synchronize(): every stream is idle from here on.
    gpu.raw.complete_events();
    gpu.raw.hold_events(false);
    // dummy allocation triggers process_events
    let dummy = floats_on(&gpu, 3, 0);
    // From the source: b's events were recorded and completed and both blocks
    // freed before the lookup, so the dummy reuses potential_problem's block (the
    // best fit at the lowest address) and b's block is free in the graph's pool.
    assert_eq!(dummy.data_ptr(), pp_ptr);
    assert_eq!(state_of(b_ptr), Some(BlockState::Inactive));
    drop((a, dummy, g));
}

#[test]
fn test_graph_three_successive() {
    graph_three_successive(false);
}

#[test]
fn test_graph_capture_oom() {
    graph_capture_oom(false);
}

#[test]
fn test_graph_record_stream() {
    graph_record_stream(false);
}

#[test]
fn test_graph_memory_stats_and_use_result_after_destroy_graph() {
    graph_memory_stats_and_use_result_after_destroy_graph(false);
}

#[test]
fn test_graph_two_successive() {
    graph_two_successive(false);
}
