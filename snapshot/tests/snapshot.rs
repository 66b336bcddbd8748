//! PyTorch memory snapshots: import of the fixtures in tests/data/snapshots
//! (written by scripts/make_snapshot_fixtures.py at protocols 2, 4 and 5, in the
//! current, legacy and multi-device layouts), the replay and its fidelity check,
//! and bad files giving errors that name what was expected and where.

use std::path::PathBuf;

use vramlab_allocator::BlockState;
use vramlab_allocator::consts::MIB;
use vramlab_snapshot::{
    Action, ReadOptions, SegmentType, Snapshot, SnapshotError, SnapshotReplayOptions, read_snapshot,
    read_snapshot_file, read_snapshot_with, replay_snapshot,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/snapshots").join(name)
}

fn load(name: &str) -> Snapshot {
    read_snapshot_file(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

#[test]
fn every_protocol_reads_the_same_snapshot() {
    let p2 = load("small_p2.pickle");
    let p4 = load("small_p4.pickle");
    let p5 = load("small_p5.pickle");
    assert_eq!((p2.protocol, p4.protocol, p5.protocol), (2, 4, 5));
    assert_eq!(p2.segments, p5.segments);
    assert_eq!(p4.device_traces, p5.device_traces);
    assert_eq!(p2.device_traces, p5.device_traces);
    assert_eq!(p2.frames, p5.frames);
}

#[test]
fn the_small_snapshot_has_the_known_content() {
    let s = load("small_p5.pickle");
    assert_eq!(s.device_traces.len(), 1);
    let trace = &s.device_traces[0];
    assert_eq!(trace.len(), 26);
    let segment_events: Vec<(Action, u64)> = trace
        .iter()
        .filter(|e| matches!(e.action, Action::SegmentAlloc | Action::SegmentFree))
        .map(|e| (e.action, e.size))
        .collect();
    assert_eq!(
        segment_events,
        vec![
            (Action::SegmentAlloc, 20 * MIB),
            (Action::SegmentAlloc, 2 * MIB),
            (Action::SegmentAlloc, 30 * MIB),
            (Action::SegmentFree, 12 * MIB),
            (Action::SegmentFree, 30 * MIB),
            (Action::SegmentAlloc, 64 * MIB),
        ]
    );
    // The first alloc: 3 MiB, with two interned frames.
    let first = trace.iter().find(|e| e.action == Action::Alloc).unwrap();
    assert_eq!(first.size, 3 * MIB);
    assert!(first.time_us > 1_700_000_000_000_000);
    let frames: Vec<String> = s.frames.stack(first.frames).map(|f| f.short()).collect();
    assert_eq!(frames.len(), 2);
    assert!(s.frames.frames.len() <= 5, "frames are interned: {}", s.frames.frames.len());
    assert_eq!(s.segments.len(), 4);
    let sizes: Vec<u64> = s.segments.iter().map(|g| g.total_size).collect();
    assert_eq!(sizes, vec![40 * MIB, 20 * MIB, 2 * MIB, 64 * MIB]);
    assert_eq!(s.segments[2].segment_type, SegmentType::Small);
    assert_eq!(s.segments[2].blocks[0].state, BlockState::ActiveAllocated);
    assert_eq!(s.segments[2].blocks[0].requested_size, 700);
    let settings = s.allocator_settings.as_ref().unwrap();
    assert_eq!(settings.max_split_size, None);
    assert!(!settings.expandable_segments);
    assert_eq!(s.busiest_device(), Some(0));
}

#[test]
fn the_legacy_layout_reads_history_and_no_frames() {
    let s = load("legacy_p2.pickle");
    assert!(s.legacy_layout);
    assert!(s.allocator_settings.is_none());
    assert_eq!(s.device_traces[0].len(), 26);
    assert!(s.device_traces[0].iter().all(|e| e.frames == 0 && e.time_us == 0));
    let small = load("small_p2.pickle");
    // Requested sizes come from history[0].real_size; addresses from the segment's.
    for (a, b) in s.segments.iter().zip(&small.segments) {
        let blocks = |g: &vramlab_snapshot::Segment| -> Vec<(u64, u64, u64, BlockState)> {
            g.blocks
                .iter()
                .map(|b| {
                    (b.address, b.size, if b.state == BlockState::Inactive { 0 } else { b.requested_size }, b.state)
                })
                .collect()
        };
        assert_eq!(blocks(a), blocks(b));
    }
}

#[test]
fn newer_keys_are_tolerated_and_the_busiest_device_is_chosen() {
    let s = load("multi_device_p4.pickle");
    assert_eq!(s.device_traces.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 10]);
    assert_eq!(s.busiest_device(), Some(1));
    assert_eq!(s.external_annotations, 1);
    assert_eq!(s.host_segments, 0);
    assert!(s.other_keys.is_empty(), "{:?}", s.other_keys);
    let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
    assert_eq!(r.device, 1);
    assert!(r.device_chosen);
    assert_eq!(r.devices_with_entries, 2);
    let r0 = replay_snapshot(&s, &SnapshotReplayOptions { device: Some(0), ..Default::default() }).unwrap();
    assert_eq!((r0.device, r0.allocs, r0.frees), (0, 1, 1));
    let err = replay_snapshot(&s, &SnapshotReplayOptions { device: Some(5), ..Default::default() }).unwrap_err();
    assert!(err.to_string().contains("device 5 has no trace"), "{err}");
}

#[test]
fn the_replay_reproduces_the_recording() {
    for name in ["small_p2.pickle", "small_p5.pickle", "legacy_p2.pickle", "medium_p5.pickle", "multi_device_p4.pickle"]
    {
        let s = load(name);
        let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
        let f = r.fidelity.as_ref().unwrap();
        assert!(f.agrees(), "{name}: {f:#?}");
        assert!(f.recorded_segment_events > 0, "{name}");
        assert_eq!(r.skipped_entries, 0, "{name}: {:?}", r.first_skipped);
    }
}

#[test]
fn memory_live_before_the_recording_is_placed_first_and_counted() {
    let s = load("small_p5.pickle");
    let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
    // The 40 MiB weight (in the segments, no alloc) and the 12 MiB buffer (freed, no alloc).
    assert_eq!(r.live_at_start.blocks_in_segments, 1);
    assert_eq!(r.live_at_start.blocks_in_segments_bytes, 40 * MIB);
    assert_eq!(r.live_at_start.freed_without_alloc, 1);
    assert_eq!(r.live_at_start.freed_without_alloc_bytes, 12 * MIB - 100);
    // Rewound from the final segments: the weight's 40 MiB segment and the
    // buffer's 12 MiB one were reserved at the first entry, at their addresses.
    let l = &r.live_at_start;
    assert_eq!((l.segments, l.segments_bytes, l.blocks), (2, 52 * MIB, 2));
    assert_eq!((l.outside_segments, l.entries_not_undone), (0, 0));
    assert!(r.fidelity.as_ref().unwrap().agrees());
    assert_eq!(r.final_reserved_bytes, (40 + 20 + 2 + 64) * MIB);
    assert_eq!(r.final_allocated_bytes, (40 + 64) * MIB + 1024 + 200_192);
}

#[test]
fn a_time_window_keeps_only_its_entries() {
    let s = load("small_p5.pickle");
    let t = &s.device_traces[0];
    let (from, to) = (t[3].time_us, t[10].time_us);
    let r = replay_snapshot(&s, &SnapshotReplayOptions { from_us: Some(from), to_us: Some(to), ..Default::default() })
        .unwrap();
    assert_eq!(r.entries_in_window, 8);
    assert!(r.fidelity.is_none());
}

/// A window applied while reading (the entries before it never kept) replays
/// to the figures of the same window applied to the whole trace: the state at
/// its start is rewound from the final segments either way.
#[test]
fn a_window_applied_while_reading_replays_as_one_applied_after() {
    let dirs = ["../tests/data/snapshots", "../tests/data/torch-snapshots"];
    let mut compared = 0;
    for dir in dirs.map(|d| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(d)) {
        for path in std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "pickle") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let whole = read_snapshot(&bytes[..]).unwrap();
            let Some(device) = whole.busiest_device() else { continue };
            let trace = &whole.device_traces[device];
            for k in [trace.len() / 4, trace.len() / 2] {
                let (from_us, to_us) = (Some(trace[k].time_us), Some(trace[(k + trace.len()) / 2].time_us));
                let opts = SnapshotReplayOptions { device: Some(device), from_us, to_us, ..Default::default() };
                let after = replay_snapshot(&whole, &opts).unwrap();
                let read = read_snapshot_with(&bytes[..], ReadOptions { from_us }).unwrap();
                let skipped = read.skipped_entries[device];
                assert_eq!(skipped as usize, trace.iter().position(|e| e.time_us >= from_us.unwrap()).unwrap());
                let during = replay_snapshot(&read, &opts).unwrap();
                let figures = |r: &vramlab_snapshot::SnapshotReplay| {
                    (
                        r.entries_in_window,
                        r.allocs,
                        r.frees,
                        r.peak_allocated_bytes,
                        r.peak_reserved_bytes,
                        r.final_allocated_bytes,
                        r.final_reserved_bytes,
                        r.live_at_start.clone(),
                        r.ooms.len(),
                        r.skipped_entries,
                    )
                };
                assert_eq!(figures(&after), figures(&during), "{} from entry {k}", path.display());
                compared += 1;
            }
        }
    }
    assert!(compared >= 20, "{compared}");
}

#[test]
fn a_disagreement_names_the_first_event_where_they_part() {
    // Replaying with the snapshot's settings but a recorded segment size changed by hand.
    let mut s = load("small_p5.pickle");
    let k = s.device_traces[0].iter().position(|e| e.action == Action::SegmentAlloc && e.size == 30 * MIB).unwrap();
    s.device_traces[0][k].size = 32 * MIB;
    let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
    let d = r.fidelity.unwrap().first_segment_disagreement.unwrap();
    assert_eq!(d.position, 2);
    assert_eq!(d.recorded, Some((k as u64, Action::SegmentAlloc, 32 * MIB)));
    assert_eq!(d.replayed.map(|x| (x.1, x.2)), Some((Action::SegmentAlloc, 30 * MIB)));
}

#[test]
fn a_capacity_too_small_runs_out_of_memory_at_the_big_allocation() {
    let s = load("small_p5.pickle");
    let r =
        replay_snapshot(&s, &SnapshotReplayOptions { capacity_bytes: Some(100 * MIB), ..Default::default() }).unwrap();
    assert_eq!(r.ooms.len(), 1);
    assert!(r.stopped_early);
    assert_eq!(r.ooms[0].requested_bytes, 64 * MIB);
    assert!(r.fidelity.is_none());
}

/// A segment's address and size, and its blocks' address, size, requested size and state.
type SegmentShape = (u64, u64, Vec<(u64, u64, u64, BlockState)>);

fn err(bytes: &[u8]) -> String {
    match read_snapshot(bytes) {
        Ok(_) => panic!("read a bad file"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_files_give_errors_naming_what_and_where() {
    assert!(err(b"").contains("not a pickle: it starts with nothing"));
    assert!(err(b"{\"op\":\"alloc\"}\n").contains("not a pickle: it starts with \"{\"op\":\"a\""));
    assert!(err(&[0x80, 9, b'N', b'.']).contains("protocol 9"));
    // Truncated at every length: an error, never a panic.
    let good = bytes("small_p4.pickle");
    for n in 0..good.len() {
        let e = err(&good[..n]);
        assert!(e.contains("truncated") || e.contains("not a pickle"), "{n}: {e}");
    }
    // A pickle of another shape.
    let e = err(&[0x80, 4, b'K', 7, b'.']);
    assert!(e.contains("expected a dict with 'segments'"), "{e}");
    // A class instance.
    let e = err(b"\x80\x04\x8c\x08builtins\x8c\x03set\x93.");
    assert!(e.contains("STACK_GLOBAL"), "{e}");
    // A dict without segments.
    let e = err(b"\x80\x04}\x8c\x01a\x8c\x01bs.");
    assert!(e.contains("a 'segments' key") && e.contains("'a'"), "{e}");
}

#[test]
fn absurd_sizes_are_errors_naming_the_entry() {
    // A trace entry with a size of 2**60 bytes, written like PyTorch's dicts.
    let e = err(b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces]](}(\x8c\x06action\x8c\x05alloc\x8c\x04addr\
          K\x10\x8c\x04size\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x10ueau.");
    assert!(e.contains("device_traces[0][0].size") && e.contains("1152921504606846976"), "{e}");
    // A negative block size in a segment.
    let e =
        err(b"\x80\x04}(\x8c\x08segments](}(\x8c\x07address\x8a\x01\x00\x8c\x0atotal_size\x8a\x01\x00\x8c\x06blocks]}\
          \x8c\x04size\x8a\x01\xffsaue\x8c\x0ddevice_traces]u.");
    assert!(e.contains("segments[0].blocks[0].size") && e.contains("-1"), "{e}");
}

#[test]
fn a_free_of_an_unknown_block_is_placed_before_and_frees_twice_are_skipped() {
    let mut s = load("small_p5.pickle");
    let t = &mut s.device_traces[0];
    let k = t.iter().position(|e| e.action == Action::FreeCompleted).unwrap();
    let dup = t[k];
    t.insert(k + 1, dup);
    let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
    assert_eq!(r.skipped_entries, 1);
    assert!(r.first_skipped.unwrap().contains("which is not live"));
}

#[test]
fn what_it_errors_on_is_a_snapshot_error() {
    // The error type is public and names its variants' places.
    let e = read_snapshot(&[0x80u8, 4, b']'][..]).unwrap_err();
    assert!(matches!(e, SnapshotError::Truncated { offset: 3, .. }), "{e}");
}

#[test]
fn lengths_and_memo_indices_that_promise_too_much_cost_nothing() {
    // A string "of 60 MiB" in a 12-byte file: truncated, without a 60 MiB buffer first.
    let e = err(b"\x80\x04\x8d\x00\x00\x00\x03\x00\x00\x00\x00");
    assert!(e.contains("truncated"), "{e}");
    // A memo slot far beyond the table, then read back.
    let e = err(b"\x80\x04Nr\xff\xff\xff\x0f0j\xff\xff\xff\x0f.");
    assert!(e.contains("expected a dict with 'segments'") && e.contains("None"), "{e}");
    // A memo get of a slot never put.
    let e = err(b"\x80\x04h\x05.");
    assert!(e.contains("memo get of slot 5, which was never put"), "{e}");
}

#[test]
fn written_snapshots_read_back_the_same() {
    use vramlab_snapshot::write_snapshot;
    for name in ["small_p2.pickle", "small_p5.pickle", "multi_device_p4.pickle", "medium_p5.pickle"] {
        let s = load(name);
        let mut out = Vec::new();
        write_snapshot(&s, &mut out).unwrap();
        let back = read_snapshot(&out[..]).unwrap();
        assert_eq!(back.segments, s.segments, "{name}");
        assert_eq!(back.device_traces, s.device_traces, "{name}");
        assert_eq!(back.allocator_settings, s.allocator_settings, "{name}");
        // Frames are renumbered in order of first use, but say the same.
        for (a, b) in s.device_traces.iter().flatten().zip(back.device_traces.iter().flatten()) {
            assert!(s.frames.stack(a.frames).eq(back.frames.stack(b.frames)));
        }
    }
}

#[test]
fn a_recorded_replay_is_a_snapshot_that_replays_to_the_same_figures() {
    let s = load("small_p5.pickle");
    let r = replay_snapshot(&s, &SnapshotReplayOptions { record: true, ..Default::default() }).unwrap();
    let rec = r.recording.as_ref().unwrap();
    // The recording starts where the trace does: the memory live at the start
    // (2 blocks) is in its final segments, not in its trace.
    let trace = &rec.device_traces[0];
    assert_eq!(trace.iter().filter(|e| e.action == Action::Alloc).count() as u64, r.allocs);
    let reserved: u64 = rec.segments.iter().map(|g| g.total_size).sum();
    assert_eq!(reserved, r.final_reserved_bytes);
    // Replaying the recording rewinds it to the same start, reproduces it, and
    // the fidelity check agrees.
    let again = replay_snapshot(rec, &SnapshotReplayOptions::default()).unwrap();
    assert_eq!(again.live_at_start, r.live_at_start);
    assert!(again.fidelity.as_ref().unwrap().agrees(), "{:#?}", again.fidelity);
    assert_eq!(again.peak_reserved_bytes, r.peak_reserved_bytes);
    assert_eq!(again.final_allocated_bytes, r.final_allocated_bytes);
    // And as a pickle.
    let mut out = Vec::new();
    vramlab_snapshot::write_snapshot(rec, &mut out).unwrap();
    let back = read_snapshot(&out[..]).unwrap();
    let shape = |s: &Snapshot| -> Vec<SegmentShape> {
        s.segments
            .iter()
            .map(|g| {
                (
                    g.address,
                    g.total_size,
                    g.blocks.iter().map(|b| (b.address, b.size, b.requested_size, b.state)).collect(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&back), shape(rec));
    // Frames are renumbered in the file's order of first use but name the same code.
    for (a, b) in rec.segments.iter().flat_map(|g| &g.blocks).zip(back.segments.iter().flat_map(|g| &g.blocks)) {
        assert!(rec.frames.stack(a.frames).eq(back.frames.stack(b.frames)));
    }
}

#[test]
fn the_chrome_trace_has_counters_and_oom_instants() {
    let mut s = load("small_p5.pickle");
    let t = s.device_traces[0][5].time_us;
    s.device_traces[0].push(vramlab_snapshot::TraceEntry {
        action: Action::Oom,
        addr: 1 << 20,
        size: 1 << 30,
        stream: 0,
        time_us: t + 1000,
        frames: 0,
    });
    let mut out = Vec::new();
    vramlab_snapshot::write_chrome_trace(&s, 0, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let counters: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert!(counters.len() > 10);
    // The last counter: what the trace added, allocated (requested) and reserved.
    let last = counters.last().unwrap();
    assert_eq!(last["args"]["reserved_bytes"], (20 + 2 + 30 - 12 - 30 + 64) * MIB);
    let ooms: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(ooms.len(), 1);
    assert_eq!(ooms[0]["args"]["requested_bytes"], 1u64 << 30);
}

#[test]
fn private_pool_segments_are_replayed_in_their_pool() {
    // The 20 MiB segment marked as a CUDA-graph pool's: its blocks are replayed in
    // private pool (1, 7), the rest in the default pool, and the replay still
    // reproduces the recording.
    let mut s = load("small_p5.pickle");
    let k = s.segments.iter().position(|g| g.total_size == 20 * MIB).unwrap();
    s.segments[k].segment_pool_id = (1, 7);
    assert_eq!(s.private_pools(0), vec![(1, 7)]);
    let r = replay_snapshot(&s, &SnapshotReplayOptions { record: true, ..Default::default() }).unwrap();
    assert_eq!(r.private_pools, vec![(1, 7)]);
    let f = r.fidelity.as_ref().unwrap();
    assert_eq!((f.recorded_segments, f.replayed_segments), (4, 4));
    assert!(f.agrees(), "{f:?}");
    // The replay's own snapshot carries the pool id on that segment only.
    let rec = r.recording.unwrap();
    let pooled: Vec<_> = rec.segments.iter().filter(|g| g.segment_pool_id != (0, 0)).collect();
    assert_eq!(pooled.len(), 1);
    assert_eq!((pooled[0].segment_pool_id, pooled[0].total_size), ((1, 7), 20 * MIB));
}

#[test]
fn the_timeline_agrees_with_the_replay_and_holds_the_peak_segments() {
    use vramlab_snapshot::{replay_snapshot_timeline, what_if, what_if_timelines};
    for name in ["small_p4.pickle", "medium_p5.pickle"] {
        let snap = load(name);
        let opts = SnapshotReplayOptions::default();
        let plain = replay_snapshot(&snap, &opts).unwrap();
        let (r, t) = replay_snapshot_timeline(&snap, &opts, true).unwrap();
        assert_eq!(r, plain, "{name}: the replay is unchanged");
        assert_eq!(t.peak_reserved_bytes(), r.peak_reserved_bytes, "{name}");
        assert_eq!(t.peak_allocated_bytes(), r.peak_allocated_bytes, "{name}");
        let last = t.points.last().unwrap();
        assert_eq!((last.allocated_bytes, last.reserved_bytes), (r.final_allocated_bytes, r.final_reserved_bytes));
        let peak = t.peak.as_ref().expect("memory was reserved");
        assert_eq!(peak.reserved_bytes, r.peak_reserved_bytes, "{name}");
        assert_eq!(peak.segments.iter().map(|s| s.total_size).sum::<u64>(), peak.reserved_bytes, "{name}");
        let allocated: u64 = peak
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.size)
            .sum();
        assert_eq!(allocated, peak.allocated_bytes, "{name}");
        if r.fragmentation_at_peak_bytes > 0 || r.largest_free_block_at_peak_bytes > 0 {
            assert_eq!(peak.reserved_bytes - peak.allocated_bytes, r.fragmentation_at_peak_bytes, "{name}");
            assert_eq!(peak.largest_free_block_bytes, r.largest_free_block_at_peak_bytes, "{name}");
        }
        // The what-if replays draw the same curves.
        let configs = [None, Some(vramlab_allocator::AllocatorConfig::parse("expandable_segments:True").unwrap())];
        let with = what_if_timelines(&snap, &opts, &configs).unwrap();
        let without = what_if(&snap, &opts, &configs).unwrap();
        assert_eq!(with.iter().map(|(w, _)| w.clone()).collect::<Vec<_>>(), without);
        assert_eq!(with[0].1.points, t.points, "{name}");
        assert!(with[1].1.peak.is_none(), "what-if timelines skip the peak segments");
    }
}

/// Reading and replaying at once (the trace replayed on one thread while the
/// other reads it) gives the snapshot and the replay that reading it whole
/// and then replaying give, on every fixture, whether the assumptions the
/// overlapped replay makes hold or it has to replay again.
#[test]
fn reading_and_replaying_at_once_gives_the_replay_of_the_whole_snapshot() {
    let dirs = ["../tests/data/snapshots", "../tests/data/torch-snapshots", "../tests/data/torch-2.11-h200"];
    let mut compared = 0;
    for dir in dirs.map(|d| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(d)) {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "pickle") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let whole = read_snapshot(&bytes[..]).unwrap();
            let settings = vramlab_snapshot::peek_allocator_settings(&bytes).map(|s| s.to_config());
            assert_eq!(
                settings,
                whole.allocator_settings.as_ref().map(|s| s.to_config()),
                "{}: the settings read from the tail",
                path.display()
            );
            for opts in [
                SnapshotReplayOptions::default(),
                SnapshotReplayOptions { capacity_bytes: Some(300 * MIB), ..Default::default() },
            ] {
                let expected = replay_snapshot(&whole, &opts);
                for hint in [settings.clone(), None] {
                    let (snap, got) =
                        vramlab_snapshot::read_and_replay(&bytes[..], ReadOptions::default(), hint, &opts).unwrap();
                    assert_eq!(snap, whole, "{}", path.display());
                    let json =
                        |r: &Result<vramlab_snapshot::SnapshotReplay, vramlab_snapshot::SnapshotReplayError>| match r {
                            Ok(r) => serde_json::to_string(r).unwrap(),
                            Err(e) => e.to_string(),
                        };
                    assert_eq!(json(&got), json(&expected), "{}", path.display());
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 40, "{compared}");
}

/// A capture as `vramlab estimate` writes it: no segments, a trace of
/// requests only, and the `vramlab_estimate` marker.
fn capture() -> Snapshot {
    use vramlab_snapshot::{AssumedGpuInfo, Estimate, Frame, FrameTable, ModelledRule, Scalar, TraceEntry};
    let frames = FrameTable {
        frames: vec![
            Frame { filename: "<vramlab model>".into(), line: 0, name: "cuBLAS workspace, 32 MiB per thread".into() },
            Frame { filename: "train.py".into(), line: 12, name: "<module>".into() },
        ],
        stacks: vec![Box::new([]), Box::new([0]), Box::new([1])],
    };
    let entry = |action, addr, size, frames| TraceEntry { action, addr, size, stream: 0, time_us: 0, frames };
    let trace = vec![
        entry(Action::Alloc, 512, 32 * MIB, 1),
        entry(Action::Alloc, 1024, 4_000_000, 2),
        entry(Action::Alloc, 1536, 8_000_000, 2),
        entry(Action::FreeRequested, 1024, 4_000_000, 2),
        entry(Action::FreeCompleted, 1024, 4_000_000, 2),
        entry(Action::Alloc, 2048, 1000, 2),
    ];
    let mut s = Snapshot::of_one_device(trace, Vec::new(), frames);
    s.estimate = Some(Estimate {
        version: 1,
        torch: "2.11.0+cu130".into(),
        gpu: AssumedGpuInfo {
            name: "NVIDIA H100 80GB HBM3".into(),
            total_memory: 85_029_158_912,
            sm_count: 132,
            major: 9,
            minor: 0,
            other: vec![("cudnn_version".into(), Scalar::Int(91_002)), ("l2".into(), Scalar::Float(0.5))],
        },
        rules: vec![
            ModelledRule {
                name: "cuBLAS workspace".into(),
                count: 1,
                bytes: 32 * MIB,
                why: "32 MiB per thread at its first GEMM".into(),
                bound: None,
            },
            ModelledRule {
                name: "cuDNN convolution workspaces: NOT MODELLED".into(),
                count: 3,
                bytes: 0,
                why: "counted, not sized".into(),
                bound: Some("cuDNN may take what is free".into()),
            },
        ],
        capture_s: 2.5,
        startup_s: 1.25,
        argv: vec!["python".into(), "train.py".into()],
    });
    s
}

#[test]
fn the_estimate_marker_survives_write_and_read() {
    let s = capture();
    let mut out = Vec::new();
    vramlab_snapshot::write_snapshot(&s, &mut out).unwrap();
    let back = read_snapshot(&out[..]).unwrap();
    assert_eq!(back.estimate, s.estimate);
    let e = back.estimate.unwrap();
    assert_eq!(e.unsized_reasons(), ["cuDNN may take what is free"]);
    assert!(e.headline().ends_with("lower bounds (requests counted, not sized), at most 79.19 GiB (the assumed GPU's memory: an estimate's bound)"), "{}", e.headline());
    assert!(back.other_keys.is_empty(), "{:?}", back.other_keys);
    // A recording has none.
    assert_eq!(load("small_p5.pickle").estimate, None);
}

#[test]
fn a_capture_replays_from_empty_into_a_full_snapshot_still_marked_estimated() {
    let s = capture();
    let r = replay_snapshot(&s, &SnapshotReplayOptions { record: true, ..Default::default() }).unwrap();
    // Nothing to check against: no fidelity report, rather than a disagreement.
    assert!(r.fidelity.is_none());
    assert_eq!(r.live_at_start.segments, 0);
    assert_eq!(r.peak_allocated_bytes, 32 * MIB + 4_000_256 + 8_000_000, "requests rounded to 512 bytes");
    let rec = r.recording.unwrap();
    assert_eq!(rec.estimate, s.estimate);
    assert!(rec.device_traces[0].iter().any(|e| e.action == Action::SegmentAlloc));
    // Through a pickle: the full snapshot replays to the same figures and is still an estimate.
    let mut out = Vec::new();
    vramlab_snapshot::write_snapshot(&rec, &mut out).unwrap();
    let back = read_snapshot(&out[..]).unwrap();
    assert_eq!(back.estimate, s.estimate);
    let again = replay_snapshot(&back, &SnapshotReplayOptions::default()).unwrap();
    assert_eq!(
        (again.peak_allocated_bytes, again.peak_reserved_bytes),
        (r.peak_allocated_bytes, r.peak_reserved_bytes)
    );
    assert!(again.fidelity.is_none());
}

#[test]
fn a_bad_marker_is_an_error_that_names_its_field() {
    let mut s = capture();
    s.estimate.as_mut().unwrap().version = 2;
    let mut out = Vec::new();
    vramlab_snapshot::write_snapshot(&s, &mut out).unwrap();
    let e = read_snapshot(&out[..]).unwrap_err().to_string();
    assert!(e.contains("vramlab_estimate.version") && e.contains("version 2"), "{e}");
}

#[test]
fn a_captures_empty_cache_entry_releases_the_cache_in_the_replay() {
    let mut s = capture();
    let entry =
        |action, addr, size| vramlab_snapshot::TraceEntry { action, addr, size, stream: 0, time_us: 0, frames: 2 };
    s.device_traces[0].extend([
        entry(Action::FreeRequested, 1536, 8_000_000),
        entry(Action::FreeCompleted, 1536, 8_000_000),
        entry(Action::EmptyCache, 0, 0),
    ]);
    let r = replay_snapshot(&s, &SnapshotReplayOptions { record: true, ..Default::default() }).unwrap();
    // Left: the 32 MiB workspace's segment and the small block's 2 MiB one.
    assert_eq!(r.final_reserved_bytes, 34 * MIB);
    let mut out = Vec::new();
    vramlab_snapshot::write_snapshot(&s, &mut out).unwrap();
    assert_eq!(read_snapshot(&out[..]).unwrap().device_traces[0].last().unwrap().action, Action::EmptyCache);
    // The replay's own snapshot shows the release as PyTorch's trace does: segment frees.
    let rec = r.recording.unwrap();
    assert!(rec.device_traces[0].iter().any(|e| e.action == Action::SegmentFree));
    assert!(rec.device_traces[0].iter().all(|e| e.action != Action::EmptyCache));
}
