//! Partial traces: a full recording with the start of its trace cut off (as a
//! ring buffer loses it, or a recording begun late) replays from the state
//! rewound from its final segments. The rewound start must equal the full
//! replay's state at the same entry — the same segments at the same addresses
//! with the same blocks — and the cut replay must end at the recorded segments;
//! for any recorded trace cut anywhere (the property test).

use std::path::PathBuf;

use proptest::prelude::*;
use vramlab_allocator::consts::MIB;
use vramlab_allocator::{AllocatorConfig, BlockState};
use vramlab_snapshot::{
    Action, Snapshot, SnapshotReplay, SnapshotReplayOptions, TraceEntry, read_snapshot_file, replay_snapshot,
};

fn torch_fixture(name: &str) -> Snapshot {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots").join(name);
    read_snapshot_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Segments as (address, size, [(block address, size, allocated)]), by address.
type Shape = Vec<(u64, u64, Vec<(u64, u64, bool)>)>;

fn shape(s: &Snapshot) -> Shape {
    let mut v: Shape = s
        .segments
        .iter()
        .map(|g| {
            let blocks = g.blocks.iter().map(|b| (b.address, b.size, b.state != BlockState::Inactive)).collect();
            (g.address, g.total_size, blocks)
        })
        .collect();
    v.sort();
    v
}

/// `snapshot` with the first `k` entries of device `device`'s trace cut off.
fn cut(snapshot: &Snapshot, device: usize, k: usize) -> Snapshot {
    let mut s = snapshot.clone();
    s.device_traces[device].drain(..k);
    s
}

fn recorded(snapshot: &Snapshot, opts: SnapshotReplayOptions) -> (SnapshotReplay, Snapshot) {
    let mut r = replay_snapshot(snapshot, &SnapshotReplayOptions { record: true, ..opts }).unwrap();
    let rec = r.recording.take().unwrap();
    (r, rec)
}

/// The first entry at or after `k` whose time is later than its predecessor's
/// (a `to_us` window can end exactly before it).
fn cut_point(trace: &[TraceEntry], k: usize) -> usize {
    (k.max(1)..trace.len()).find(|&i| trace[i].time_us > trace[i - 1].time_us).expect("the trace's time moves on")
}

/// The full replay's state just before entry `k`, and the rewound start of the
/// trace cut at `k` (a window ending before its first entry), as segment shapes.
fn states_at(snapshot: &Snapshot, device: usize, k: usize) -> (Shape, Shape, SnapshotReplay) {
    let t = &snapshot.device_traces[device];
    let before = SnapshotReplayOptions { device: Some(device), to_us: Some(t[k - 1].time_us), ..Default::default() };
    let (_, full) = recorded(snapshot, before);
    let partial = cut(snapshot, device, k);
    let none = SnapshotReplayOptions { device: Some(device), to_us: Some(t[k].time_us - 1), ..Default::default() };
    let (r, start) = recorded(&partial, none);
    assert_eq!(r.entries_in_window, 0);
    (shape(&full), shape(&start), r)
}

#[test]
fn a_real_recording_cut_in_half_rewinds_to_the_full_replays_state_and_ends_as_recorded() {
    for name in ["mlp-default.pickle", "cnn-default.pickle", "transformer-default.pickle"] {
        let s = torch_fixture(name);
        let device = s.busiest_device().unwrap();
        let trace = &s.device_traces[device];
        for k in [cut_point(trace, trace.len() / 2), cut_point(trace, trace.len() / 5)] {
            let (full, start, r) = states_at(&s, device, k);
            assert_eq!(start, full, "{name} cut at {k}");
            let l = &r.live_at_start;
            assert_eq!(l.segments as usize, full.len(), "{name}");
            let live = full.iter().flat_map(|g| &g.2).filter(|b| b.2).count();
            assert_eq!(l.blocks as usize, live, "{name}");
            assert!(l.blocks > 0 && l.freed_without_alloc > 0, "{name}: {l:?}");
            assert_eq!((l.outside_segments, l.entries_not_undone), (0, 0), "{name}: {l:?}");

            // The cut trace replays exactly from there: every segment event, every
            // allocation's place, the final segments and the totals.
            let partial = cut(&s, device, k);
            let r = replay_snapshot(&partial, &SnapshotReplayOptions::default()).unwrap();
            let f = r.fidelity.as_ref().unwrap();
            assert!(f.agrees(), "{name} cut at {k}: {f:#?}");
            assert_eq!(r.skipped_entries, 0, "{name}: {:?}", r.first_skipped);
        }
    }
}

#[test]
fn expandable_recordings_cut_in_half_end_with_the_recorded_memory() {
    for name in ["mlp-expandable.pickle", "cnn-expandable.pickle", "transformer-expandable.pickle"] {
        let s = torch_fixture(name);
        let device = s.busiest_device().unwrap();
        let trace = &s.device_traces[device];
        let k = cut_point(trace, trace.len() / 2);
        let partial = cut(&s, device, k);
        let r = replay_snapshot(&partial, &SnapshotReplayOptions::default()).unwrap();
        let f = r.fidelity.as_ref().unwrap();
        assert_eq!(r.skipped_entries, 0, "{name}: {:?}", r.first_skipped);
        assert_eq!(f.replayed_allocated_bytes, f.recorded_allocated_bytes, "{name}");
        assert_eq!(f.replayed_reserved_bytes, f.recorded_reserved_bytes, "{name}: {f:#?}");
    }
}

#[test]
fn a_window_starts_from_the_state_rewound_to_its_first_entry() {
    let s = torch_fixture("transformer-default.pickle");
    let device = s.busiest_device().unwrap();
    let trace = &s.device_traces[device];
    let k = cut_point(trace, trace.len() / 3);
    let end = cut_point(trace, 2 * trace.len() / 3);
    // The window [k, end) of the whole trace ends where the full replay is at `end`.
    let window = SnapshotReplayOptions {
        device: Some(device),
        from_us: Some(trace[k].time_us),
        to_us: Some(trace[end - 1].time_us),
        ..Default::default()
    };
    let (w, windowed) = recorded(&s, window);
    assert_eq!(w.entries_in_window as usize, end - k);
    let (_, full) = recorded(&s, SnapshotReplayOptions { to_us: Some(trace[end - 1].time_us), ..Default::default() });
    assert_eq!(shape(&windowed), shape(&full));
    assert!(w.live_at_start.blocks > 0);
}

/// One operation of a random program.
#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        stream: i64,
    },
    /// Frees the live allocation at this index (modulo the live count).
    Free(usize),
    EmptyCache,
}

fn op_alloc() -> impl Strategy<Value = Op> {
    let size = prop_oneof![1u64..(MIB), MIB..(10 * MIB), (10 * MIB)..(80 * MIB)];
    (size, 0i64..2).prop_map(|(size, stream)| Op::Alloc { size, stream })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op_alloc(),
        5 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
    ]
}

/// A snapshot whose trace is `ops` (addresses are ids; the replay gives real ones).
fn program(ops: &[Op]) -> Snapshot {
    let mut trace = Vec::new();
    let mut live: Vec<(u64, u64, i64)> = Vec::new();
    let mut next = 1u64 << 40;
    let entry = |action, addr, size, stream, t: usize| TraceEntry {
        action,
        addr,
        size,
        stream,
        time_us: t as i64 + 1,
        frames: 0,
    };
    for o in ops {
        let t = trace.len();
        match *o {
            Op::Alloc { size, stream } => {
                next += 1 << 30;
                live.push((next, size, stream));
                trace.push(entry(Action::Alloc, next, size, stream, t));
            }
            Op::Free(i) if !live.is_empty() => {
                let (addr, size, stream) = live.remove(i % live.len());
                trace.push(entry(Action::FreeRequested, addr, size, stream, t));
                trace.push(entry(Action::FreeCompleted, addr, size, stream, t + 1));
            }
            Op::Free(_) => {}
            // A segment free in the trace is an empty_cache() to the replay.
            Op::EmptyCache => trace.push(entry(Action::SegmentFree, 0, 0, 0, t)),
        }
    }
    let mut s = torch_fixture("mlp-default.pickle");
    s.segments.clear();
    s.device_traces = vec![trace];
    s.allocator_settings = None;
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Any recorded trace, cut anywhere, rewinds and replays to the recorded segments.
    #[test]
    fn rewinding_then_replaying_any_recorded_trace_ends_at_its_segments(
        first in op_alloc(),
        rest in proptest::collection::vec(op(), 0..120),
        at in 0.0f64..1.0,
        // Not max_split_size: the size of an oversize block freed in the trace
        // without its alloc is not known (it absorbed what the free block held).
        conf in prop_oneof![Just(""), Just("roundup_power2_divisions:4"), Just("garbage_collection_threshold:0.8")],
    ) {
        let config = AllocatorConfig::parse(conf).unwrap();
        let ops: Vec<Op> = std::iter::once(first).chain(rest).collect();
        let r = replay_snapshot(&program(&ops), &SnapshotReplayOptions {
            config: Some(config), record: true, ..Default::default()
        }).unwrap();
        let rec = r.recording.unwrap();
        let trace = &rec.device_traces[0];
        let k = (at * trace.len() as f64) as usize;
        let partial = cut(&rec, 0, k);
        let again = replay_snapshot(&partial, &SnapshotReplayOptions::default()).unwrap();
        let f = again.fidelity.as_ref().unwrap();
        prop_assert!(f.agrees(), "cut at {} of {}: {:#?}", k, trace.len(), f);
        prop_assert_eq!(again.skipped_entries, 0);
        prop_assert_eq!(again.live_at_start.entries_not_undone, 0);
        let (_, end) = recorded(&partial, SnapshotReplayOptions::default());
        prop_assert_eq!(shape(&end), shape(&rec));
    }
}

#[test]
fn every_fixture_cut_in_half_replays_exactly_from_its_rewound_start() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut paths: Vec<PathBuf> = Vec::new();
    for dir in ["../tests/data/torch-snapshots", "../tests/data/snapshots", "../tests/data/torch-2.11-h200"] {
        let dir = root.join(dir);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        paths.extend(entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "pickle")));
    }
    paths.sort();
    assert!(paths.len() >= 12, "{paths:?}");
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let s = read_snapshot_file(&path).unwrap();
        let device = s.busiest_device().unwrap();
        let k = s.device_traces[device].len() / 2;
        let r = replay_snapshot(&cut(&s, device, k), &SnapshotReplayOptions::default()).unwrap();
        let f = r.fidelity.as_ref().unwrap();
        assert!(f.agrees(), "{name} cut at {k}: {f:#?}");
        assert_eq!(r.live_at_start.entries_not_undone, 0, "{name}: {:?}", r.live_at_start);
    }
}

/// Every real recording with PyTorch's `memory_stats()` beside it, its trace
/// cut at 1/5, 1/2 and 4/5 (as a ring buffer loses its start): every
/// `.current` key (and every other key the replay does not declare
/// underivable) equals PyTorch's final value.
#[test]
fn every_real_fixture_cut_at_a_fifth_a_half_and_four_fifths_keeps_its_current_stats() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let mut checked = 0;
    let mut failures = Vec::new();
    for dir in ["torch-snapshots", "torch-2.11-h200"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
            .collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let stats_path = vramlab_snapshot::stats_file_beside(&path);
            let text = std::fs::read_to_string(&stats_path).unwrap();
            let torch = vramlab_snapshot::read_pytorch_stats(&name, &text).unwrap();
            let s = read_snapshot_file(&path).unwrap();
            let device = s.busiest_device().unwrap();
            let n = s.device_traces[device].len();
            for (num, den) in [(1, 5), (1, 2), (4, 5)] {
                let k = n * num / den;
                let mut r = replay_snapshot(&cut(&s, device, k), &SnapshotReplayOptions::default()).unwrap();
                let check = r.check_memory_stats(&torch).unwrap().clone();
                let current = torch.stats.keys().filter(|k| k.ends_with(".current")).count();
                let derivable_current =
                    current - check.underivable.iter().filter(|u| u.key.ends_with(".current")).count();
                assert!(derivable_current > 0);
                for d in &check.differing {
                    failures.push(format!(
                        "{name} cut at {num}/{den} (entry {k}): {}: vramlab {:?}, PyTorch {}",
                        d.key, d.replayed, d.pytorch
                    ));
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 27, "nine recordings, three cuts each");
    assert!(failures.is_empty(), "{} keys differ:\n{}", failures.len(), failures.join("\n"));
}
