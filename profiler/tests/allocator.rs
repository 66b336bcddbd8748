//! Timelines, peaks, live allocations and fragmentation checked against the
//! caching allocator's own statistics on the same run.

mod common;

use std::sync::Arc;

use common::{MIB, Rng};
use vramlab_engine::alloc::{
    AllocError, Allocation, AllocatorConfig, BlockState, CachingAllocator, MemoryStats, SimulatedMemory,
};
use vramlab_engine::hooks::{Hooks, Tag};
use vramlab_profiler::{Category, OomCause, Profile, StepSeries};

fn peak_and_last(s: &StepSeries) -> (u64, u64) {
    (s.max().map_or(0, |(_, b)| b), s.last_bytes())
}

fn stat(s: &vramlab_engine::alloc::StatArray) -> (u64, u64) {
    (s.all.peak as u64, s.all.current as u64)
}

/// A random workload over two streams, with frees that wait for another
/// stream, `empty_cache`, and — last — one large allocation, so the allocated
/// peak is the final state and can be compared with the allocator's.
fn run_workload(seed: u64, config: AllocatorConfig) -> (Profile, CachingAllocator, Vec<Allocation>) {
    let hub = Hooks::new();
    let raw = Arc::new(SimulatedMemory::unlimited());
    let alloc = CachingAllocator::with_hooks(raw.clone(), config, hub.clone(), 3).unwrap();
    let profiler = common::profiler(&hub, &[3]);
    let mut rng = Rng::new(seed);
    let mut live: Vec<Allocation> = Vec::new();
    let mut allocated_after_each: Vec<u64> = Vec::new();
    for _ in 0..600 {
        match rng.below(20) {
            0..=10 => {
                let a = alloc.malloc(rng.size(), rng.below(2) as u32, rng.tag()).unwrap();
                if rng.below(6) == 0 {
                    alloc.record_stream(&a, 7);
                }
                live.push(a);
            }
            11..=17 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                alloc.free(live.swap_remove(i)).unwrap();
            }
            18 => {
                raw.hold_events(rng.below(2) == 0);
                continue;
            }
            19 if rng.below(8) == 0 => {
                alloc.empty_cache();
                continue;
            }
            _ => continue,
        }
        allocated_after_each.push(alloc.memory_allocated());
    }
    let big = alloc.malloc(alloc.max_memory_allocated() + 64 * MIB, 0, Some(Tag::Workspace)).unwrap();
    allocated_after_each.push(alloc.memory_allocated());
    live.push(big);
    let profile = profiler.stop();

    // Allocated bytes change exactly once per malloc/free: the series (without
    // its start and end points) is the allocator's value after every call.
    let t = profile.timeline(3).unwrap();
    let inner = &t.allocated_bytes.bytes[1..t.allocated_bytes.len() - 1];
    assert_eq!(inner, &allocated_after_each[..], "seed {seed}");
    (profile, alloc, live)
}

fn check_against_stats(seed: u64, profile: &Profile, stats: &MemoryStats) {
    let t = profile.timeline(3).unwrap();
    assert_eq!(peak_and_last(&t.allocated_bytes), stat(&stats.allocated_bytes), "allocated, seed {seed}");
    assert_eq!(peak_and_last(&t.reserved_bytes), stat(&stats.reserved_bytes), "reserved, seed {seed}");
    assert_eq!(peak_and_last(&t.active_bytes), stat(&stats.active_bytes), "active, seed {seed}");
    assert_eq!(peak_and_last(&t.requested_bytes), stat(&stats.requested_bytes), "requested, seed {seed}");
    let d = profile.device(3).unwrap();
    assert_eq!(d.peak_allocated.bytes, stats.allocated_bytes.all.peak as u64);
    assert_eq!(d.peak_reserved.bytes, stats.reserved_bytes.all.peak as u64);
    assert_eq!(d.peak_active.bytes, stats.active_bytes.all.peak as u64);
    assert_eq!(d.peak_requested.bytes, stats.requested_bytes.all.peak as u64);
    assert_eq!(d.end.allocated_bytes, stats.allocated_bytes.all.current as u64);
    assert_eq!(d.end.reserved_bytes, stats.reserved_bytes.all.current as u64);
    assert_eq!(d.end.active_bytes, stats.active_bytes.all.current as u64);
    assert_eq!(d.end.requested_bytes, stats.requested_bytes.all.current as u64);
    // Mapping pages of an expandable segment counts as a device allocation.
    assert_eq!((d.counts.segment_allocs + d.counts.segment_maps) as i64, stats.num_device_alloc);
    assert_eq!((d.counts.segment_frees + d.counts.segment_unmaps) as i64, stats.num_device_free);
    assert_eq!(d.counts.unmatched_frees, 0);
    // The peak's time is the time of the point that first reached it.
    let (time, _) = t.allocated_bytes.max().unwrap();
    assert_eq!(d.peak_allocated.time_ns, time);
}

/// The snapshot at the allocated peak (the final state here) against the
/// allocator's own view of that state.
fn check_peak_snapshot(seed: u64, profile: &Profile, alloc: &CachingAllocator, live: &[Allocation]) {
    let stats = alloc.stats();
    let d = profile.device(3).unwrap();
    let snap = d.at_peak_allocated.as_ref().expect("a peak snapshot");
    assert_eq!(snap.levels.allocated_bytes, stats.allocated_bytes.all.current as u64);
    assert_eq!(snap.by_category.total_bytes(), snap.levels.allocated_bytes);
    assert_eq!(snap.by_category, d.peak_by_category);

    // Live allocations: exactly the handles still held, largest first.
    let mut expected: Vec<(u64, u64, Category)> = live.iter().map(|a| (a.size(), a.addr(), a.tag().into())).collect();
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let got: Vec<(u64, u64, Category)> =
        snap.live_allocations.iter().map(|l| (l.size_bytes, l.addr, l.category)).collect();
    assert_eq!(got, expected, "seed {seed}");
    for l in &snap.live_allocations {
        let a = live.iter().find(|a| a.addr() == l.addr).unwrap();
        assert_eq!((l.requested_bytes, l.stream), (a.requested(), a.stream()));
    }

    // Fragmentation, from the same state.
    let f = &snap.fragmentation;
    let segments = alloc.snapshot();
    assert_eq!(f.reserved_bytes, stats.reserved_bytes.all.current as u64);
    assert_eq!(f.reserved_unallocated_bytes, f.reserved_bytes - f.allocated_bytes);
    assert_eq!(f.pending_free_bytes, (stats.active_bytes.all.current - stats.allocated_bytes.all.current) as u64);
    assert_eq!(f.largest_free_block_bytes, alloc.largest_free_block(), "seed {seed}");
    if !alloc.config().expandable_segments {
        assert_eq!(f.inactive_split_bytes, stats.inactive_split_bytes.all.current as u64, "seed {seed}");
        let free_blocks = segments.iter().flat_map(|s| &s.blocks).filter(|b| b.state == BlockState::Inactive).count();
        assert_eq!(f.free_blocks, free_blocks as u64, "seed {seed}");
        assert_eq!(f.segments, segments.len() as u64);
        let whole_free: u64 = segments.iter().filter(|s| s.active_size == 0).map(|s| s.total_size).sum();
        assert_eq!(f.cached_free_bytes, whole_free);
    }
}

#[test]
fn timelines_and_peaks_match_allocator_stats() {
    let (mut pending, mut split, mut still_pending) = (0, 0, 0);
    for seed in 1..=6 {
        let (profile, alloc, live) = run_workload(seed, AllocatorConfig::default());
        check_against_stats(seed, &profile, &alloc.stats());
        check_peak_snapshot(seed, &profile, &alloc, &live);
        let d = profile.device(3).unwrap();
        let f = &d.at_peak_allocated.as_ref().unwrap().fragmentation;
        pending += f.pending_free_bytes;
        split += f.inactive_split_bytes;
        still_pending += d.counts.frees_requested - d.counts.frees_completed;
    }
    // The workloads did exercise frees that wait for another stream and split segments.
    assert!(pending > 0 && split > 0 && still_pending > 0, "{pending} {split} {still_pending}");
}

#[test]
fn timelines_match_with_expandable_segments() {
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    for seed in 11..=14 {
        let (profile, alloc, live) = run_workload(seed, config.clone());
        let d = profile.device(3).unwrap();
        assert!(d.counts.segment_maps > 0);
        check_against_stats(seed, &profile, &alloc.stats());
        check_peak_snapshot(seed, &profile, &alloc, &live);
    }
}

#[test]
fn timelines_match_with_max_split_size_and_roundup() {
    let config = AllocatorConfig::parse("max_split_size_mb:24,roundup_power2_divisions:4").unwrap();
    for seed in 21..=23 {
        let (profile, alloc, live) = run_workload(seed, config.clone());
        check_against_stats(seed, &profile, &alloc.stats());
        check_peak_snapshot(seed, &profile, &alloc, &live);
    }
}

#[test]
fn decimated_timeline_keeps_the_peak() {
    let (profile, alloc, _live) = run_workload(5, AllocatorConfig::default());
    let stats = alloc.stats();
    let full = profile.timeline(3).unwrap();
    for max_points in [4, 16, 100] {
        let t = profile.timeline_decimated(3, max_points).unwrap();
        for (s, f) in [(&t.allocated_bytes, &full.allocated_bytes), (&t.reserved_bytes, &full.reserved_bytes)] {
            assert!(s.len() <= max_points, "{} points for {max_points}", s.len());
            assert_eq!(s.max().map(|m| m.1), f.max().map(|m| m.1));
            assert_eq!(s.last_bytes(), f.last_bytes());
        }
        assert_eq!(t.allocated_bytes.max().unwrap().1, stats.allocated_bytes.all.peak as u64);
        let c = profile.categories_decimated(3, max_points).unwrap();
        assert!(c.len() <= max_points);
        assert_eq!(c.allocated_bytes.iter().max().copied().unwrap(), stats.allocated_bytes.all.peak as u64);
        for (row, total) in c.by_category.iter().zip(&c.allocated_bytes) {
            assert_eq!(row.total_bytes(), *total);
        }
    }
    // Short series come back whole.
    assert_eq!(profile.timeline_decimated(3, 1_000_000).unwrap(), full);
}

#[test]
fn oom_report_explains_fragmentation() {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, Some(100 * MIB), AllocatorConfig::default(), 0);
    let profiler = common::profiler(&hub, &[0]);
    let mut blocks = Vec::new();
    for _ in 0..30 {
        blocks.push(alloc.malloc(3 * MIB, 0, Some(Tag::Activation)).unwrap());
    }
    // Free every other block: plenty of memory free, none of it contiguous.
    let mut kept = Vec::new();
    for (i, b) in blocks.into_iter().enumerate() {
        if i % 2 == 0 { alloc.free(b).unwrap() } else { kept.push(b) }
    }
    let err = {
        let _phase = profiler.phase("grow");
        alloc.malloc(12 * MIB, 0, Some(Tag::Activation)).unwrap_err()
    };
    let AllocError::OutOfMemory(oom) = err else { panic!("expected an OOM, got {err}") };
    let largest = alloc.largest_free_block();
    let profile = profiler.stop();
    let d = profile.device(0).unwrap();
    assert_eq!(d.counts.ooms, 1);
    let r = &d.oom_reports[0];
    assert_eq!(r.requested_bytes, 12 * MIB);
    assert_eq!(r.rounded_bytes, oom.rounded_bytes);
    assert_eq!(r.device_free_bytes, oom.free_bytes);
    assert_eq!(r.fragmentation.allocated_bytes, oom.allocated_bytes);
    assert_eq!(r.fragmentation.reserved_unallocated_bytes, oom.reserved_unallocated_bytes);
    assert_eq!(r.fragmentation.largest_free_block_bytes, largest);
    assert!(largest < r.rounded_bytes);
    assert_eq!(r.cause, OomCause::Fragmentation);
    assert_eq!(r.phase.as_deref(), Some("grow"));
    assert_eq!(r.largest_live_allocations.len(), 15);
    assert!(r.largest_live_allocations.iter().all(|l| l.size_bytes == 3 * MIB));
}

#[test]
fn oom_for_lack_of_capacity_says_so() {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, Some(64 * MIB), AllocatorConfig::default(), 0);
    let profiler = common::profiler(&hub, &[0]);
    let _a = alloc.malloc(40 * MIB, 0, None).unwrap();
    assert!(alloc.malloc(40 * MIB, 0, None).is_err());
    let profile = profiler.stop();
    let r = &profile.device(0).unwrap().oom_reports[0];
    assert_eq!(r.cause, OomCause::Capacity);
    assert_eq!(r.fragmentation.reserved_unallocated_bytes, 0);
}

#[test]
fn frees_of_blocks_from_before_the_recording_are_left_out() {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, None, AllocatorConfig::default(), 0);
    let before = alloc.malloc(5 * MIB, 0, Some(Tag::Parameter)).unwrap();
    let profiler = common::profiler(&hub, &[0]);
    let during = alloc.malloc(MIB, 0, Some(Tag::Gradient)).unwrap();
    alloc.free(before).unwrap();
    alloc.empty_cache();
    let profile = profiler.stop();
    let d = profile.device(0).unwrap();
    // The free of `before` (requested and completed) and its segment's release.
    assert_eq!(d.counts.unmatched_frees, 3);
    assert_eq!(d.end.allocated_bytes, MIB);
    assert_eq!(d.peak_allocated.bytes, MIB);
    let t = profile.timeline(0).unwrap();
    assert_eq!(t.allocated_bytes.last_bytes(), MIB);
    let c = profile.categories(0).unwrap();
    assert_eq!(c.by_category.last().unwrap().gradient_bytes, MIB);
    assert_eq!(c.by_category.last().unwrap().parameter_bytes, 0);
    alloc.free(during).unwrap();
}

#[test]
fn devices_get_their_own_timelines() {
    let hub = Hooks::new();
    let a0 = common::allocator(&hub, None, AllocatorConfig::default(), 0);
    let a1 = common::allocator(&hub, None, AllocatorConfig::default(), 1);
    let profiler = common::profiler(&hub, &[0]);
    let x = a0.malloc(2 * MIB, 0, None).unwrap();
    let y = a1.malloc(30 * MIB, 0, None).unwrap();
    a1.free(y).unwrap();
    let profile = profiler.stop();
    assert_eq!(profile.devices.len(), 2);
    assert_eq!(profile.device(1).unwrap().info.name, "device 1");
    assert_eq!(profile.device(0).unwrap().peak_allocated.bytes, 2 * MIB);
    assert_eq!(profile.device(1).unwrap().peak_allocated.bytes, 30 * MIB);
    assert_eq!(profile.device(1).unwrap().end.allocated_bytes, 0);
    assert!(profile.timeline(2).is_err());
    let err = profile.timeline(2).unwrap_err().to_string();
    assert!(err.contains("device 2") && err.contains("[0, 1]"), "{err}");
    a0.free(x).unwrap();
}

#[test]
fn profile_round_trips_through_serde() {
    let (profile, _alloc, _live) = run_workload(9, AllocatorConfig::default());
    let json = serde_json::to_string(&profile).unwrap();
    let back: Profile = serde_json::from_str(&json).unwrap();
    assert_eq!(back.records(), profile.records());
    assert_eq!(back.devices, profile.devices);
    assert_eq!(back.timeline(3).unwrap(), profile.timeline(3).unwrap());
    assert_eq!(back.categories(3).unwrap(), profile.categories(3).unwrap());
    let summary = profile.summary(&Default::default());
    let s: vramlab_profiler::ProfileSummary = serde_json::from_str(&serde_json::to_string(&summary).unwrap()).unwrap();
    assert_eq!(s, summary);
    assert!(summary.devices[0].timeline.allocated_bytes.len() <= 2000);
}

#[test]
fn profiles_from_events_without_segments_or_phases() {
    use vramlab_engine::hooks::{AllocatorAction, AllocatorEvent, Event};
    let ev = |action, time_ns, addr, bytes| {
        Event::Allocator(AllocatorEvent {
            action,
            time_ns,
            device: 0,
            stream: 0,
            addr,
            requested_bytes: bytes,
            rounded_bytes: bytes,
            tag: None,
        })
    };
    let events = [
        ev(AllocatorAction::Alloc, 10, 0x1000, 512),
        ev(AllocatorAction::Alloc, 20, 0x2000, 1024),
        ev(AllocatorAction::FreeRequested, 30, 0x1000, 512),
        ev(AllocatorAction::FreeCompleted, 30, 0x1000, 512),
    ];
    let profile = Profile::from_events(&events, &[]);
    let d = profile.device(0).unwrap();
    assert_eq!(d.peak_allocated.bytes, 1536);
    assert_eq!(d.peak_allocated.time_ns, 20);
    assert_eq!(d.peak_reserved, vramlab_profiler::Peak::default());
    assert_eq!(d.at_peak_reserved, None);
    assert_eq!(d.end.allocated_bytes, 1024);
    assert_eq!((profile.start_ns, profile.end_ns), (10, 30));
    let t = profile.timeline(0).unwrap();
    assert_eq!(t.allocated_bytes.time_ns, [10, 10, 20, 30, 30]);
    assert_eq!(t.allocated_bytes.bytes, [0, 512, 1536, 1024, 1024]);
    // Blocks outside any known segment: no free blocks to report.
    let f = &d.at_peak_allocated.as_ref().unwrap().fragmentation;
    assert_eq!((f.segments, f.largest_free_block_bytes), (0, 0));
    let empty = Profile::from_events(&[], &[]);
    assert!(empty.devices.is_empty() && empty.records() == 0);
}
