//! `test/test_cuda_expandable_segments.py` (pytorch/pytorch commit
//! 079f90097f3a95c53dee49374203a895885478f4): it re-runs `TestCuda` (and
//! `TestBlockStateAbsorption`, `TestCudaAllocator`, `TestMemPool`) from
//! `test_cuda.py` after `_set_allocator_settings("expandable_segments:True")`.
//! Here: the converted `TestCuda` and graph tests, and the converted `TestMemPool`
//! tests that can hold with expandable segments (see below), with expandable
//! segments on.

use crate::test_cuda;

#[test]
fn test_memory_allocation() {
    test_cuda::memory_allocation(true);
}

#[test]
fn test_memory_stats() {
    test_cuda::memory_stats(true);
}

#[test]
fn test_out_of_memory() {
    test_cuda::out_of_memory(true);
}

#[test]
fn test_out_of_memory_retry() {
    test_cuda::out_of_memory_retry(true);
}

#[test]
fn test_set_per_process_memory_fraction() {
    test_cuda::set_per_process_memory_fraction(true);
}

#[test]
fn test_get_per_process_memory_fraction() {
    test_cuda::get_per_process_memory_fraction(true);
}

#[test]
fn test_record_stream() {
    test_cuda::record_stream(true);
}

#[test]
fn test_record_stream_on_shifted_view() {
    test_cuda::record_stream_on_shifted_view(true);
}

#[test]
fn test_caching_allocator_record_stream_oom() {
    test_cuda::caching_allocator_record_stream_oom(true);
}

#[test]
fn test_graph_memory_stats_and_use_result_after_destroy_graph() {
    crate::test_cuda_graphs::graph_memory_stats_and_use_result_after_destroy_graph(true);
}

#[test]
fn test_graph_two_successive() {
    crate::test_cuda_graphs::graph_two_successive(true);
}

#[test]
fn test_graph_capture_oom() {
    crate::test_cuda_graphs::graph_capture_oom(true);
}

#[test]
fn test_graph_record_stream() {
    crate::test_cuda_graphs::graph_record_stream(true);
}

#[test]
fn test_graph_three_successive() {
    crate::test_cuda_graphs::graph_three_successive(true);
}

// `TestMemPool` with expandable segments. Each private pool then gets its own
// expandable segment per stream and pool kind (`find_expandable_block` searches
// the pool's `unmapped` blocks), mapped page by page and unmapped by
// `emptyCache(mempool_id)` once the pool is released. Left out here, each for a
// reason of its own:
//
// - `test_mempool_empty_cache_inactive`, `test_mempool_with_allocator`,
//   `test_tensor_delete_after_allocator_delete`,
//   `test_mempool_limited_memory_with_allocator`,
//   `test_deleted_mempool_not_used_on_oom`: their pools take their memory from
//   a pluggable allocator, and PyTorch never uses expandable segments for a
//   pool with an allocator (`alloc_block`: `expandable_segments() &&
//   !active_user_pool`; `TestMemPool.test_mempool_expandable` asserts that such
//   a pool's segment is not expandable). In PyTorch's expandable run these pools
//   still hold ordinary segments next to an expandable default pool; vramlab
//   does not model pluggable allocators and has no such mix, so converted here
//   their pools would be expandable, which is not what PyTorch runs.
// - `test_mempool_no_split`, `test_nested_mempool`: PyTorch's own assertions
//   cannot hold with expandable segments by PyTorch's allocator source. A
//   pool's second 4 MiB / 20 MiB tensor maps the pages right after the first
//   one's in the pool's one expandable segment, and a snapshot reports one
//   segment per contiguous mapped range, so `pool_no_split` has one segment (of
//   two blocks, not more segments than `pool_split`) and `pool1` / `pool2` one
//   segment each, not two.

#[test]
fn test_mempool_empty_cache() {
    crate::test_mempool::mempool_empty_cache(true);
}

#[test]
fn test_mempool_emptycache_multithread() {
    crate::test_mempool::mempool_emptycache_multithread(true);
}

#[test]
fn test_block_state_absorption_simple() {
    crate::test_block_state_absorption::simple(true);
}

#[test]
fn test_block_state_absorption_allocated_in_middle_of_segment() {
    crate::test_block_state_absorption::allocated_in_middle_of_segment(true);
}

#[test]
fn test_block_state_absorption_multiple_middle_allocations() {
    crate::test_block_state_absorption::multiple_middle_allocations(true);
}

#[test]
fn test_block_state_absorption_middle_allocations_contiguous() {
    crate::test_block_state_absorption::middle_allocations_contiguous(true);
}

#[test]
fn test_block_state_absorption_additional_free_following_checkpoint() {
    crate::test_block_state_absorption::additional_free_following_checkpoint(true);
}

#[test]
fn test_block_state_absorption_tensor_dies_after_checkpoint() {
    crate::test_block_state_absorption::tensor_dies_after_checkpoint(true);
}

#[test]
fn test_block_state_absorption_assigning_back_deleter_fns_to_tensor() {
    crate::test_block_state_absorption::assigning_back_deleter_fns_to_tensor(true);
}

#[test]
fn test_block_state_absorption_check_pool_live_allocations() {
    crate::test_block_state_absorption::check_pool_live_allocations(true);
}
