//! Known-answer tests: fixed sequences on a fresh allocator, each asserting exact
//! statistics (the vectors of allocator-spec.md first, then more of our own).

use std::sync::Arc;

use vramlab_allocator::consts::{GIB, MIB};
use vramlab_allocator::hooks::{AllocatorAction, EventLog, Tag};
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, HostMemory, MemoryStats, PoolFilter, PoolKind,
    SimulatedMemory,
};

fn sim() -> CachingAllocator {
    CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default()).unwrap()
}

fn sim_with(capacity: u64, config: AllocatorConfig) -> (Arc<SimulatedMemory>, CachingAllocator) {
    let raw = Arc::new(SimulatedMemory::with_capacity(capacity));
    let a = CachingAllocator::new(raw.clone(), config).unwrap();
    (raw, a)
}

fn alloc(a: &CachingAllocator, size: u64) -> Allocation {
    a.malloc(size, 0, None).unwrap()
}

fn cur(s: &MemoryStats, name: &str) -> i64 {
    s.stat_array(name).unwrap().all.current
}

#[test]
fn spec_vector_one_byte() {
    let a = sim();
    let x = alloc(&a, 1);
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 512);
    assert_eq!(s.memory_reserved(), 2_097_152);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.segment.small_pool.current, 1);
    assert_eq!(s.segment.large_pool.current, 0);
    assert_eq!(x.pool(), PoolKind::Small);
    assert_eq!(s.requested_bytes.all.current, 1);
    assert_eq!(s.inactive_split.all.current, 1);
    assert_eq!(s.inactive_split_bytes.all.current, 2_097_152 - 512);
}

#[test]
fn spec_vector_unsplit_large_block() {
    let a = sim();
    let x = alloc(&a, 11_534_337);
    let s = a.stats();
    assert_eq!(x.size(), 12_582_912);
    assert_eq!(s.memory_allocated(), 12_582_912);
    assert_eq!(s.memory_reserved(), 12_582_912);
    assert_eq!(s.requested_bytes.all.current, 11_534_337);
    assert_eq!(s.inactive_split.all.current, 0, "remainder of 1 048 064 B is not split");
    assert_eq!(s.segment.large_pool.current, 1);
}

#[test]
fn spec_vector_split_reuse_and_empty_cache() {
    let a = sim();
    let x = alloc(&a, 3 * MIB);
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 3_145_728);
    assert_eq!(s.memory_reserved(), 20_971_520);
    assert_eq!(s.inactive_split_bytes.all.current, 17_825_792);
    assert_eq!(s.inactive_split.all.current, 1);

    let y = alloc(&a, 5 * MIB);
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 8_388_608);
    assert_eq!(s.memory_reserved(), 20_971_520, "reuses the same segment");
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(y.addr(), x.addr() + 3 * MIB, "best fit takes the low addresses of the remainder");
    assert_eq!(s.inactive_split_bytes.all.current, 12_582_912);

    a.free(x).unwrap();
    a.free(y).unwrap();
    let s = a.stats();
    assert_eq!(s.inactive_split.all.current, 0, "everything merged back into one block");
    assert_eq!(s.inactive_split_bytes.all.current, 0);
    a.empty_cache();
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 0);
    assert_eq!(s.memory_reserved(), 0);
    assert_eq!(s.num_device_free, 1);
    assert_eq!(s.num_device_alloc, 1);
    assert_eq!(s.num_sync_all_streams, 1);
    assert_eq!(s.max_memory_allocated(), 8_388_608);
    assert_eq!(s.max_memory_reserved(), 20_971_520);
}

#[test]
fn spec_vector_thousand_small() {
    let a = sim();
    let live: Vec<_> = (0..1000).map(|_| alloc(&a, 1000)).collect();
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 1_024_000);
    assert_eq!(s.memory_reserved(), 2_097_152);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.allocation.all.current, 1000);
    assert_eq!(s.requested_bytes.all.current, 1_000_000);
    for x in live {
        a.free(x).unwrap();
    }
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 0);
    assert_eq!(s.allocation.all.allocated, 1000);
    assert_eq!(s.allocation.all.freed, 1000);
    assert_eq!(s.inactive_split.all.current, 0);
}

#[test]
fn zero_byte_request_touches_nothing() {
    let a = sim();
    let z = alloc(&a, 0);
    assert!(z.is_null());
    assert_eq!(a.stats(), sim().stats());
    a.free(z).unwrap();
    assert_eq!(a.stats().allocation.all.allocated, 0);
}

#[test]
fn exactly_one_mib_is_small() {
    let a = sim();
    let x = alloc(&a, MIB);
    assert_eq!(x.pool(), PoolKind::Small);
    assert_eq!(a.memory_reserved(), 2 * MIB);
    let y = alloc(&a, MIB + 1);
    assert_eq!(y.pool(), PoolKind::Large);
    assert_eq!(y.size(), MIB + 512);
    assert_eq!(a.memory_reserved(), 2 * MIB + 20 * MIB);
}

#[test]
fn segment_sizes_by_request() {
    for (request, segment) in [
        (512, 2 * MIB),
        (MIB, 2 * MIB),
        (2 * MIB, 20 * MIB),
        (10 * MIB - 512, 20 * MIB),
        (10 * MIB, 10 * MIB),
        (10 * MIB + 1, 12 * MIB),
        (100 * MIB + 3, 102 * MIB),
    ] {
        let a = sim();
        let _x = alloc(&a, request);
        assert_eq!(a.memory_reserved(), segment, "request {request}");
    }
}

#[test]
fn large_pool_split_threshold_is_strictly_above_one_mib() {
    // 19 MiB from a 20 MiB segment leaves exactly 1 MiB: not split.
    let a = sim();
    let x = alloc(&a, 19 * MIB);
    assert_eq!(x.size(), 20 * MIB);
    assert_eq!(a.stats().inactive_split.all.current, 0);
    // 19 MiB - 512 leaves 1 MiB + 512: split.
    let b = sim();
    let y = alloc(&b, 19 * MIB - 512);
    assert_eq!(y.size(), 19 * MIB - 512);
    assert_eq!(b.stats().inactive_split_bytes.all.current as u64, MIB + 512);
}

#[test]
fn small_pool_splits_down_to_512() {
    let a = sim();
    let w = alloc(&a, MIB);
    let x = alloc(&a, MIB - 1024);
    assert_eq!((w.pool(), x.pool()), (PoolKind::Small, PoolKind::Small));
    let y = alloc(&a, 512);
    let z = alloc(&a, 512);
    assert_eq!(a.stats().segment.all.current, 1);
    assert_eq!(a.stats().inactive_split.all.current, 0, "segment exactly full");
    a.free(y).unwrap();
    let s = a.stats();
    assert_eq!(s.inactive_split.all.current, 1);
    assert_eq!(s.inactive_split_bytes.all.current, 512);
    a.free(x).unwrap();
    let s = a.stats();
    assert_eq!(s.inactive_split.all.current, 1, "x and y merged into one free block");
    assert_eq!(s.inactive_split_bytes.all.current as u64, MIB - 512);
    a.free(z).unwrap();
    assert_eq!(a.stats().inactive_split.all.current, 1, "w is still live");
    a.free(w).unwrap();
    assert_eq!(a.stats().inactive_split.all.current, 0);
}

#[test]
fn best_fit_prefers_smallest_then_lowest_address() {
    let a = sim();
    // Three large segments of different sizes, all freed (cached).
    let s30 = alloc(&a, 30 * MIB);
    let s12 = alloc(&a, 12 * MIB);
    let s14 = alloc(&a, 14 * MIB);
    let (a30, a12, a14) = (s30.addr(), s12.addr(), s14.addr());
    a.free(s30).unwrap();
    a.free(s12).unwrap();
    a.free(s14).unwrap();
    let x = alloc(&a, 11 * MIB);
    assert_eq!(x.addr(), a12, "12 MiB is the smallest block that fits");
    let y = alloc(&a, 13 * MIB);
    assert_eq!(y.addr(), a14);
    let z = alloc(&a, 11 * MIB);
    assert_eq!(z.addr(), a30, "only the 30 MiB block is left");
    assert_eq!(a.stats().segment.all.current, 3);
}

#[test]
fn streams_never_share_blocks() {
    let a = sim();
    let x = a.malloc(4 * MIB, 0, None).unwrap();
    a.free(x).unwrap();
    let y = a.malloc(4 * MIB, 1, None).unwrap();
    assert_eq!(a.stats().segment.all.current, 2, "stream 1 cannot use stream 0's cached segment");
    assert_eq!(y.stream(), 1);
}

#[test]
fn record_stream_delays_reuse_until_event_completes() {
    let raw = Arc::new(SimulatedMemory::unlimited());
    let a = CachingAllocator::new(raw.clone(), AllocatorConfig::default()).unwrap();
    raw.hold_events(true);
    let x = alloc(&a, 4 * MIB);
    let addr = x.addr();
    a.record_stream(&x, 1);
    a.free(x).unwrap();
    let s = a.stats();
    assert_eq!(s.memory_allocated(), 0, "allocated drops at free time");
    assert_eq!(s.active_bytes.all.current as u64, 4 * MIB, "still active until stream 1 is done");
    let y = alloc(&a, 4 * MIB);
    assert_ne!(y.addr(), addr, "block in use by stream 1 is not reused");
    assert_eq!(a.snapshot().iter().map(|s| s.total_size).sum::<u64>(), 20 * MIB);
    raw.complete_events();
    let z = alloc(&a, 4 * MIB);
    assert_eq!(z.addr(), addr, "after the event completed, the block is free again");
    let s = a.stats();
    assert_eq!(s.active.all.current, 2);
}

#[test]
fn empty_cache_waits_for_pending_frees() {
    let raw = Arc::new(SimulatedMemory::unlimited());
    let a = CachingAllocator::new(raw.clone(), AllocatorConfig::default()).unwrap();
    raw.hold_events(true);
    let x = alloc(&a, 4 * MIB);
    a.record_stream(&x, 2);
    a.free(x).unwrap();
    a.empty_cache();
    let s = a.stats();
    assert_eq!(s.memory_reserved(), 0);
    assert_eq!(s.active.all.current, 0);
}

#[test]
fn oom_error_carries_pytorch_numbers_and_changes_only_counters() {
    let (_raw, a) = sim_with(64 * MIB, AllocatorConfig::default());
    let x = alloc(&a, 40 * MIB);
    let y = alloc(&a, 3 * MIB); // 20 MiB segment, 17 MiB cached inside it
    let before = a.stats();
    let err = a.malloc(30 * MIB, 0, None).unwrap_err();
    let oom = err.as_oom().expect("out of memory");
    assert_eq!(oom.requested_bytes, 30 * MIB);
    assert_eq!(oom.segment_bytes, 30 * MIB);
    assert_eq!(oom.total_bytes, 64 * MIB);
    assert_eq!(oom.free_bytes, 4 * MIB);
    assert_eq!(oom.allocated_bytes, 43 * MIB);
    assert_eq!(oom.reserved_unallocated_bytes, 17 * MIB);
    let msg = err.to_string();
    assert!(msg.contains("Tried to allocate 30.00 MiB"), "{msg}");
    assert!(msg.contains("total capacity of 64.00 MiB of which 4.00 MiB is free"), "{msg}");
    assert!(msg.contains("43.00 MiB is allocated by vramlab"), "{msg}");
    assert!(msg.contains("17.00 MiB is reserved by vramlab but unallocated"), "{msg}");
    let after = a.stats();
    assert_eq!(after.num_ooms, 1);
    assert_eq!(after.num_alloc_retries, 1, "the release-all retry counts even when it fails");
    assert_eq!(after.num_sync_all_streams, 1);
    let mut expected = before.clone();
    expected.num_ooms = 1;
    expected.num_alloc_retries = 1;
    expected.num_sync_all_streams = 1;
    assert_eq!(after, expected, "nothing else changes (no fully free segment was cached)");
    a.free(x).unwrap();
    a.free(y).unwrap();
}

#[test]
fn an_oom_counts_private_pools_free_blocks_as_allocated_in_private_pools() {
    // PyTorch's `allocated_in_private_pools`: the free blocks of every private
    // pool, added to "allocated" and taken off "reserved but unallocated".
    let (_raw, a) = sim_with(64 * MIB, AllocatorConfig::default());
    let pool = (0, 1);
    a.create_or_incref_pool(pool).unwrap();
    a.begin_allocate_to_pool(pool, PoolFilter::AllStreams).unwrap();
    let in_pool = alloc(&a, 6 * MIB); // a 20 MiB segment of the pool
    a.end_allocate_to_pool(pool).unwrap();
    a.free(in_pool).unwrap(); // the pool (still in use) keeps it, all free
    let x = alloc(&a, 30 * MIB);
    let err = a.malloc(20 * MIB, 0, None).unwrap_err();
    let oom = err.as_oom().expect("out of memory: 14 MiB free");
    assert_eq!((oom.allocated_bytes, oom.private_pool_cached_bytes), (30 * MIB, 20 * MIB));
    assert_eq!(oom.reserved_unallocated_bytes, 20 * MIB);
    let msg = err.to_string();
    assert!(
        msg.contains(
            "Of the allocated memory 50.00 MiB is allocated by vramlab, with 20.00 MiB allocated in private pools \
             (e.g., CUDA Graphs), and 0 bytes is reserved by vramlab but unallocated."
        ),
        "{msg}"
    );
    a.free(x).unwrap();
    // Without private pools the clause is absent (the test above).
    assert!(!sim().malloc(1 << 62, 0, None).unwrap_err().to_string().contains("private pools"));
}

#[test]
fn oom_retry_releases_cached_segments_and_succeeds() {
    let (_raw, a) = sim_with(64 * MIB, AllocatorConfig::default());
    let x = alloc(&a, 40 * MIB);
    a.free(x).unwrap(); // 40 MiB cached
    let y = alloc(&a, 50 * MIB);
    let s = a.stats();
    assert_eq!(y.size(), 50 * MIB);
    assert_eq!(s.memory_reserved(), 50 * MIB);
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_device_free, 1);
    assert_eq!(s.num_ooms, 0);
}

#[test]
fn one_byte_oom_asks_for_a_two_mib_segment() {
    let (_raw, a) = sim_with(MIB, AllocatorConfig::default());
    let err = a.malloc(1, 0, None).unwrap_err();
    assert!(err.to_string().contains("Tried to allocate 2.00 MiB"), "{err}");
}

/// PyTorch's message names `format_size(alloc_size)`, the segment it tried
/// after rounding, not the request: 956 MiB under `roundup_power2_divisions:4`
/// rounds to 1024 MiB (512 MiB bucket, 128 MiB steps).
#[test]
fn oom_message_names_the_rounded_allocation_under_roundup_power2_divisions() {
    let (_raw, a) = sim_with(900 * MIB, AllocatorConfig::parse("roundup_power2_divisions:4").unwrap());
    let err = a.malloc(956 * MIB, 0, None).unwrap_err();
    let oom = err.as_oom().expect("out of memory");
    assert_eq!((oom.requested_bytes, oom.rounded_bytes, oom.segment_bytes), (956 * MIB, 1024 * MIB, 1024 * MIB));
    assert!(err.to_string().contains("Tried to allocate 1024.00 MiB."), "{err}");
    assert!(!err.to_string().contains("956"), "{err}");
}

#[test]
fn max_split_size_oversize_rules() {
    let config = AllocatorConfig { max_split_size: Some(64 * MIB), ..Default::default() };
    let (_raw, a) = sim_with(GIB, config);
    let big = alloc(&a, 100 * MIB);
    let s = a.stats();
    assert_eq!(s.oversize_segments.current, 1);
    assert_eq!(s.oversize_allocations.current, 1);
    assert_eq!(s.max_split_size, 64 * MIB as i64);
    let big_addr = big.addr();
    a.free(big).unwrap();
    // A request below max_split_size never takes an oversize block.
    let small = alloc(&a, 30 * MIB);
    assert_ne!(small.addr(), big_addr);
    assert_eq!(a.stats().segment.all.current, 2);
    // A request at or above it takes a block smaller than request + 20 MiB…
    let reuse = alloc(&a, 90 * MIB);
    assert_eq!(reuse.addr(), big_addr);
    assert_eq!(reuse.size(), 100 * MIB, "oversize blocks are never split");
    a.free(reuse).unwrap();
    // …but not one 20 MiB or more larger.
    let other = alloc(&a, 80 * MIB);
    assert_ne!(other.addr(), big_addr);
    a.free(small).unwrap();
    a.free(other).unwrap();
}

#[test]
fn max_split_size_releases_oversize_blocks_before_release_all() {
    let config = AllocatorConfig { max_split_size: Some(64 * MIB), ..Default::default() };
    let (_raw, a) = sim_with(160 * MIB, config);
    let x = alloc(&a, 100 * MIB);
    let keep = alloc(&a, 3 * MIB); // a split 20 MiB segment that stays
    a.free(x).unwrap();
    // 70 MiB cannot take the cached 100 MiB block (100 ≥ 70 + 20) and does not fit
    // beside it: the oversize block is released, then the allocation succeeds.
    let y = alloc(&a, 70 * MIB);
    let s = a.stats();
    assert_eq!(y.size(), 70 * MIB);
    assert_eq!(s.memory_reserved(), 90 * MIB);
    assert_eq!(s.num_device_free, 1, "only the oversize block was released");
    assert_eq!(s.num_alloc_retries, 0, "the release-available path is not a counted retry");
    assert_eq!(s.num_sync_all_streams, 0);
    a.free(keep).unwrap();
}

#[test]
fn max_split_size_partial_release_falls_through_to_release_all() {
    // As in PyTorch: oversize blocks that together are not enough are released
    // anyway, and the release-all retry then counts.
    let config = AllocatorConfig { max_split_size: Some(64 * MIB), ..Default::default() };
    let (_raw, a) = sim_with(200 * MIB, config);
    let x = alloc(&a, 100 * MIB);
    let keep = alloc(&a, 3 * MIB);
    a.free(x).unwrap();
    let y = alloc(&a, 150 * MIB);
    let s = a.stats();
    assert_eq!(y.size(), 150 * MIB);
    assert_eq!(s.num_device_free, 1);
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_sync_all_streams, 1);
    a.free(keep).unwrap();
}

#[test]
fn memory_fraction_caps_reserved() {
    let config = AllocatorConfig { per_process_memory_fraction: Some(0.5), ..Default::default() };
    let (_raw, a) = sim_with(100 * MIB, config);
    let x = alloc(&a, 40 * MIB);
    let err = a.malloc(12 * MIB, 0, None).unwrap_err();
    let oom = err.as_oom().unwrap();
    assert_eq!(oom.allowed_bytes, Some(50 * MIB));
    assert!(err.to_string().contains("50.00 MiB allowed;"), "{err}");
    a.free(x).unwrap();
    a.set_memory_fraction(1.0).unwrap();
    let _y = alloc(&a, 60 * MIB);
    assert!(matches!(a.set_memory_fraction(1.5), Err(AllocError::InvalidFraction(_))));
}

#[test]
fn garbage_collection_frees_old_cached_blocks() {
    let config = AllocatorConfig {
        per_process_memory_fraction: Some(0.9),
        garbage_collection_threshold: Some(0.5),
        ..Default::default()
    };
    let (_raw, a) = sim_with(100 * MIB, config);
    let x = alloc(&a, 30 * MIB);
    let y = alloc(&a, 20 * MIB);
    a.free(x).unwrap();
    a.free(y).unwrap();
    // reserved 50 MiB > 0.5 × 90 MiB: the next miss reclaims cached blocks first.
    let z = alloc(&a, 40 * MIB);
    let s = a.stats();
    assert!(s.num_device_free >= 1, "gc released cached blocks: {s:?}");
    assert_eq!(s.num_alloc_retries, 0, "no retry was needed");
    assert_eq!(z.size(), 40 * MIB);
    assert!(s.memory_reserved() <= 60 * MIB);
}

#[test]
fn reset_peak_and_accumulated() {
    let a = sim();
    let x = alloc(&a, 10 * MIB);
    let y = alloc(&a, 10 * MIB);
    a.free(x).unwrap();
    a.reset_peak_stats();
    let s = a.stats();
    assert_eq!(s.max_memory_allocated(), 10 * MIB, "peak becomes current, not zero");
    assert_eq!(s.max_memory_reserved(), 20 * MIB);
    a.reset_accumulated_stats();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.allocated, 0);
    assert_eq!(s.allocated_bytes.all.freed, 0);
    assert_eq!(s.num_device_alloc, 0);
    assert_eq!(s.memory_allocated(), 10 * MIB);
    a.free(y).unwrap();
}

#[test]
fn roundup_power2_divisions_change_block_sizes() {
    let config = AllocatorConfig { roundup_power2_divisions: [4; 16], ..Default::default() };
    let a = CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), config).unwrap();
    let x = alloc(&a, 3 * MIB + 1);
    assert_eq!(x.size(), 3 * MIB + MIB / 2);
    assert_eq!(a.memory_reserved(), 20 * MIB);
}

#[test]
fn invalid_free_is_an_error_not_a_panic() {
    let a = sim();
    let b = sim();
    let x = alloc(&a, 100);
    let err = b.free(x).unwrap_err();
    assert!(matches!(err, AllocError::InvalidFree { .. }), "{err}");
}

#[test]
fn expandable_segments_map_pages_on_demand() {
    let config = AllocatorConfig { expandable_segments: true, ..Default::default() };
    let (_raw, a) = sim_with(GIB, config);
    let x = alloc(&a, 30 * MIB);
    let s = a.stats();
    assert_eq!(s.memory_reserved(), 40 * MIB, "two 20 MiB pages");
    assert_eq!(s.segment.all.current, 0, "mapping does not count segments");
    assert_eq!(s.num_device_alloc, 1);
    let y = alloc(&a, 30 * MIB);
    assert_eq!(y.addr(), x.addr() + 30 * MIB, "the segment grows in place");
    assert_eq!(a.memory_reserved(), 60 * MIB);
    let s = a.stats();
    assert_eq!(s.inactive_split.all.current, 0, "not counted for expandable segments");
    let snap = a.snapshot();
    assert_eq!(snap.len(), 1);
    assert!(snap[0].is_expandable);
    assert_eq!(snap[0].total_size, 60 * MIB);
    a.free(y).unwrap();
    a.empty_cache();
    assert_eq!(a.memory_reserved(), 40 * MIB, "pages behind x stay; the rest is unmapped");
    a.free(x).unwrap();
    a.empty_cache();
    let s = a.stats();
    assert_eq!(s.memory_reserved(), 0);
    assert_eq!(s.num_device_free, 2);
}

#[test]
fn expandable_small_pool_uses_two_mib_pages() {
    let config = AllocatorConfig { expandable_segments: true, ..Default::default() };
    let (_raw, a) = sim_with(GIB, config);
    let xs: Vec<_> = (0..5).map(|_| alloc(&a, MIB)).collect();
    assert_eq!(a.memory_reserved(), 6 * MIB);
    for x in xs {
        a.free(x).unwrap();
    }
    a.empty_cache();
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
fn events_carry_sizes_tags_and_order() {
    let a = sim();
    let log = EventLog::new();
    a.hooks().subscribe(log.clone());
    let x = a.malloc(1000, 0, Some(Tag::Activation)).unwrap();
    let addr = x.addr();
    a.free(x).unwrap();
    a.empty_cache();
    let ev = log.allocator_events();
    let actions: Vec<_> = ev.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [
            AllocatorAction::SegmentAlloc,
            AllocatorAction::Alloc,
            AllocatorAction::FreeRequested,
            AllocatorAction::FreeCompleted,
            AllocatorAction::EmptyCache,
            AllocatorAction::SegmentFree,
        ]
    );
    assert_eq!((ev[1].addr, ev[1].requested_bytes, ev[1].rounded_bytes), (addr, 1000, 1024));
    assert_eq!(ev[1].tag, Some(Tag::Activation));
    assert_eq!(ev[3].tag, Some(Tag::Activation));
    assert_eq!(ev[0].rounded_bytes, 2 * MIB);
    assert!(ev.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

#[test]
fn oom_event_is_emitted() {
    let (_raw, a) = sim_with(MIB, AllocatorConfig::default());
    let log = EventLog::new();
    a.hooks().subscribe(log.clone());
    let _ = a.malloc(10, 0, None);
    let ev = log.allocator_events();
    assert_eq!(ev.last().unwrap().action, AllocatorAction::Oom);
    assert_eq!(ev.last().unwrap().addr, MIB, "oom events carry the device's free bytes");
}

#[test]
fn host_memory_is_real_and_capacity_bound() {
    let a = CachingAllocator::new(Arc::new(HostMemory::with_capacity(64 * MIB)), AllocatorConfig::default()).unwrap();
    let x = a.malloc(3 * MIB, 0, None).unwrap();
    let slice = unsafe { std::slice::from_raw_parts_mut(x.addr() as *mut u8, x.size() as usize) };
    slice.fill(0xAB);
    assert!(slice.iter().all(|&b| b == 0xAB));
    assert!(a.malloc(60 * MIB, 0, None).unwrap_err().as_oom().is_some());
    a.free(x).unwrap();
    assert_eq!(cur(&a.stats(), "allocated_bytes"), 0);
}

#[cfg(unix)]
#[test]
fn host_memory_supports_expandable_segments() {
    let config = AllocatorConfig { expandable_segments: true, ..Default::default() };
    let a = CachingAllocator::new(Arc::new(HostMemory::with_capacity(256 * MIB)), config).unwrap();
    let x = a.malloc(25 * MIB, 0, None).unwrap();
    let slice = unsafe { std::slice::from_raw_parts_mut(x.addr() as *mut u8, x.size() as usize) };
    slice.fill(7);
    assert_eq!(a.memory_reserved(), 40 * MIB);
    a.free(x).unwrap();
    a.empty_cache();
    assert_eq!(a.memory_reserved(), 0);
}

/// `set_requested`: a block allocated at its size counts the bytes its caller
/// asked for, in `requested_bytes` only; freeing it takes those bytes back.
#[test]
fn set_requested_counts_the_callers_bytes_for_a_block_placed_at_its_size() {
    let a = sim();
    let mut x = a.malloc(512, 0, None).unwrap();
    a.set_requested(&mut x, 40);
    let s = a.stats();
    assert_eq!((s.requested_bytes.all.current, s.allocated_bytes.all.current), (40, 512));
    assert_eq!(x.requested(), 40);
    a.set_requested(&mut x, 4096);
    assert_eq!(a.stats().requested_bytes.all.current, 40, "never more than the block");
    a.free(x).unwrap();
    assert_eq!(a.stats().requested_bytes.all.current, 0);
}
