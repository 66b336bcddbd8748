//! Recorded out-of-memory errors and whose releases a trace's segment frees
//! were: the real OOM back-off snapshot PyTorch 2.11 recorded on an H200
//! (`tests/data/torch-2.11-h200/oom-backoff.pickle`, a 3 GiB limit set
//! with `set_per_process_memory_fraction`) replays with its failed request made
//! again — every `memory_stats()` key equal to PyTorch's, `num_alloc_retries`
//! and `num_ooms` included — and hand-made traces pin the capacity inference,
//! the release classification and garbage collection under a memory fraction.

mod common;

use std::sync::Arc;

use common::{h200_dir, torch_stats};
use vramlab_allocator::AllocatorConfig;
use vramlab_allocator::consts::MIB;
use vramlab_snapshot::{
    Action, Frame, FrameTable, LimitKind, Snapshot, SnapshotReplayOptions, TraceEntry, read_snapshot_file,
    replay_snapshot, what_if,
};

#[test]
fn the_oom_backoff_snapshot_replays_its_failed_request_and_gives_pytorchs_memory_stats() {
    let dir = h200_dir();
    let snapshot = read_snapshot_file(&dir.join("oom-backoff.pickle")).unwrap();
    let torch = torch_stats(&dir, "oom-backoff");
    let r = replay_snapshot(&snapshot, &SnapshotReplayOptions::default()).unwrap();

    let f = r.fidelity.as_ref().expect("the recorded settings, no capacity given: checked");
    assert!(f.agrees(), "{f:#?}");
    let differ: Vec<_> = torch
        .iter()
        .filter(|(k, v)| r.final_memory_stats.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: vramlab {:?} torch {v}", r.final_memory_stats.get(k)))
        .collect();
    assert!(differ.is_empty(), "{} statistics differ:\n{}", differ.len(), differ.join("\n"));
    assert_eq!((torch["num_alloc_retries"], torch["num_ooms"]), (1, 1));

    // The limit: a per-process one (the device had 136 GiB free), between the
    // most the recording reserved and what failed on top of the reserved memory then.
    let c = r.capacity_inferred.as_ref().expect("inferred from the oom entry");
    assert_eq!((c.entry, c.kind), (44, LimitKind::Fraction));
    assert_eq!(c.bytes, torch["reserved_bytes.all.peak"] as u64);
    assert_eq!(c.segment_bytes, 512 * MIB);
    assert!(c.at_least <= 3 * 1024 * MIB && 3 * 1024 * MIB < c.below, "the true limit, 3 GiB, lies in the range");
    assert_eq!(r.memory_limit_bytes, Some(c.bytes));
    assert_eq!(r.recorded_ooms, 1);
    assert!(r.ooms.is_empty(), "a recorded OOM is not an unexpected one: {:?}", r.ooms);
    assert_eq!(r.oom_requests.len(), 1);
    let o = &r.oom_requests[0];
    assert_eq!((o.trace_index, o.requested_bytes, o.served), (44, 512 * MIB, false));
    assert!(o.message.as_deref().unwrap().contains("Tried to allocate 512.00 MiB"), "{o:?}");
    // The two 64 MiB segment frees before the oom entry were the allocator's
    // release (left to it), the six after `empty_cache` the program's.
    let s = &r.releases;
    assert_eq!((s.runs, s.program, s.before_oom, s.allocator, s.unattributed), (2, 1, 1, 0, 0));
    assert_eq!((s.replayed_as_empty_cache, s.left_to_allocator), (1, 1));

    // Told not to infer: the request is not made, the OOM only counted.
    let opts = SnapshotReplayOptions { no_capacity_inference: true, ..Default::default() };
    let plain = replay_snapshot(&snapshot, &opts).unwrap();
    assert!(plain.oom_requests.is_empty() && plain.capacity_inferred.is_none());
    assert_eq!(plain.final_memory_stats["num_ooms"], 0);
    assert_eq!(plain.releases.replayed_as_empty_cache, 2);
}

#[test]
fn whatif_of_the_oom_backoff_snapshot_says_whether_each_setting_avoids_the_recorded_oom() {
    let dir = h200_dir();
    let snapshot = read_snapshot_file(&dir.join("oom-backoff.pickle")).unwrap();
    let configs = [None, Some(AllocatorConfig::parse("expandable_segments:True").unwrap())];
    let results = what_if(&snapshot, &SnapshotReplayOptions::default(), &configs).unwrap();
    // No capacity given: the inferred one; the recorded settings fail at the recorded entry.
    assert_eq!(results[0].avoids_recorded_oom, Some(false));
    assert_eq!(results[0].first_failure(), Some((44, 512 * MIB, true)));
    assert!(!results[0].fits());
    assert!(results[0].replay.oom_requests[0].short_bytes.unwrap() > 0);
    // The replay goes on past the recorded OOM (the program caught it).
    assert!(!results[0].replay.stopped_early);
    assert_eq!(results[1].replay.capacity_inferred, results[0].replay.capacity_inferred);

    // With room for it, every setting serves it, with the spare memory said.
    let base = SnapshotReplayOptions { capacity_bytes: Some(3500 * MIB), ..Default::default() };
    let results = what_if(&snapshot, &base, &configs).unwrap();
    for w in &results {
        assert_eq!(w.avoids_recorded_oom, Some(true), "{}", w.alloc_conf);
        let o = &w.replay.oom_requests[0];
        assert!(o.served && o.spare_bytes.is_some() && o.short_bytes.is_none(), "{o:?}");
        assert!(w.fits());
    }
}

fn entry(action: Action, addr: u64, size: u64, frames: u32) -> TraceEntry {
    TraceEntry { action, addr, size, stream: 0, time_us: 0, frames }
}

/// A snapshot of one device's trace, with no final segments (everything freed,
/// or left live by allocs in the trace), `frames` its stacks.
fn snapshot_of(trace: Vec<TraceEntry>, frames: FrameTable) -> Snapshot {
    Snapshot::of_one_device(trace, Vec::new(), frames)
}

/// Stack 1 is `torch.cuda.empty_cache()`'s.
fn empty_cache_frames() -> FrameTable {
    let frame = Frame { filename: Arc::from("torch/cuda/memory.py"), line: 224, name: Arc::from("empty_cache") };
    FrameTable { frames: vec![frame], stacks: vec![Box::new([]), Box::new([0])] }
}

#[test]
fn a_device_limited_oom_infers_the_device_and_releases_are_told_apart() {
    use Action::*;
    let a = 0x1000_0000;
    let b = 0x2000_0000;
    let trace = vec![
        entry(SegmentAlloc, a, 100 * MIB, 0),
        entry(Alloc, a, 100 * MIB, 0),
        entry(FreeRequested, a, 100 * MIB, 0),
        entry(FreeCompleted, a, 100 * MIB, 0),
        // The program's empty_cache(): its frames say so.
        entry(SegmentFree, a, 100 * MIB, 1),
        entry(SegmentAlloc, b, 60 * MIB, 0),
        entry(Alloc, b, 60 * MIB, 0),
        entry(FreeRequested, b, 60 * MIB, 0),
        entry(FreeCompleted, b, 60 * MIB, 0),
        // The allocator's release before the failed 200 MiB request; the device had 50 MiB free.
        entry(SegmentFree, b, 60 * MIB, 0),
        entry(Oom, 50 * MIB, 200 * MIB, 0),
    ];
    let snapshot = snapshot_of(trace, empty_cache_frames());
    let r = replay_snapshot(&snapshot, &SnapshotReplayOptions::default()).unwrap();
    let c = r.capacity_inferred.as_ref().unwrap();
    // Nothing reserved after the release + 50 MiB free: less than the most the
    // recording held (100 MiB), which it did hold, so 100 MiB.
    assert_eq!((c.kind, c.reserved_at_oom_bytes, c.at_least, c.below), (LimitKind::Device, 0, 100 * MIB, 200 * MIB));
    assert_eq!(c.bytes, 100 * MIB);
    assert_eq!(r.capacity_bytes, Some(100 * MIB));
    assert!(r.fidelity.as_ref().unwrap().agrees(), "{:#?}", r.fidelity);
    assert_eq!(r.final_memory_stats["num_ooms"], 1);
    assert_eq!(r.final_memory_stats["num_alloc_retries"], 1);
    assert_eq!(r.final_memory_stats["num_device_free"], 2);
    let s = &r.releases;
    assert_eq!((s.program, s.before_oom, s.replayed_as_empty_cache, s.left_to_allocator), (1, 1, 1, 1));

    // A bigger device serves it: the release before it does not happen at all.
    let opts = SnapshotReplayOptions { capacity_bytes: Some(400 * MIB), ..Default::default() };
    let r = replay_snapshot(&snapshot, &opts).unwrap();
    assert!(r.oom_requests[0].served);
    assert_eq!(r.oom_requests[0].spare_bytes, Some(400 * MIB - 260 * MIB));
    assert_eq!(r.final_memory_stats["num_alloc_retries"], 0);
    assert_eq!(r.final_memory_stats["num_ooms"], 0);
}

/// Garbage collection acts only under a per-process memory fraction, as in
/// PyTorch: two 100 MiB blocks cached, then a 120 MiB request. On a 300 MiB
/// device with no fraction the segment does not fit (200 + 120 > 300): the
/// allocator releases everything and retries (a counted retry). Under a 0.3
/// fraction of 1000 MiB (300 MiB allowed) with `garbage_collection_threshold:0.5`,
/// reserved 200 MiB is above the 150 MiB threshold, so collection frees cached
/// blocks first and the new segment fits with no retry.
#[test]
fn garbage_collection_acts_under_a_memory_fraction_only() {
    use Action::*;
    let (a, b, c) = (0x1000_0000, 0x2000_0000, 0x3000_0000);
    let trace = vec![
        entry(SegmentAlloc, a, 100 * MIB, 0),
        entry(Alloc, a, 100 * MIB, 0),
        entry(SegmentAlloc, b, 100 * MIB, 0),
        entry(Alloc, b, 100 * MIB, 0),
        entry(FreeRequested, a, 100 * MIB, 0),
        entry(FreeRequested, b, 100 * MIB, 0),
        entry(SegmentAlloc, c, 120 * MIB, 0),
        entry(Alloc, c, 120 * MIB, 0),
    ];
    let snapshot = snapshot_of(trace, FrameTable::default());
    let gc = AllocatorConfig::parse("garbage_collection_threshold:0.5").unwrap();

    let no_fraction =
        SnapshotReplayOptions { capacity_bytes: Some(300 * MIB), config: Some(gc.clone()), ..Default::default() };
    let r = replay_snapshot(&snapshot, &no_fraction).unwrap();
    assert!(r.ooms.is_empty());
    assert_eq!(r.memory_limit_bytes, None);
    assert_eq!(r.final_memory_stats["num_alloc_retries"], 1, "no collection: release everything and retry");
    assert_eq!(r.final_memory_stats["num_device_free"], 2);
    assert_eq!(r.peak_reserved_bytes, 200 * MIB);

    let fraction = SnapshotReplayOptions {
        capacity_bytes: Some(1000 * MIB),
        memory_fraction: Some(0.3),
        config: Some(gc),
        ..Default::default()
    };
    let r = replay_snapshot(&snapshot, &fraction).unwrap();
    assert!(r.ooms.is_empty());
    assert_eq!(r.memory_limit_bytes, Some(300 * MIB));
    assert_eq!(r.final_memory_stats["num_alloc_retries"], 0, "collection made room: no retry");
    assert!(r.final_memory_stats["num_device_free"] >= 1, "collection released a cached segment");
    assert!(r.final_reserved_bytes <= 220 * MIB);

    // A fraction of 1 is no limit (PyTorch keeps none): no collection.
    let one = SnapshotReplayOptions { memory_fraction: Some(1.0), ..fraction.clone() };
    let r = replay_snapshot(&snapshot, &one).unwrap();
    assert_eq!(r.memory_limit_bytes, None);
    assert_eq!(r.final_memory_stats["num_device_free"], 0);

    let bad = SnapshotReplayOptions { memory_fraction: Some(1.5), ..fraction };
    assert!(replay_snapshot(&snapshot, &bad).unwrap_err().to_string().contains("not in [0, 1]"));
}
