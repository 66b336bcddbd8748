//! `Profile::memory_snapshot`: a recording exported as a PyTorch memory
//! snapshot holds the allocator's own end state (segments and blocks), goes
//! through the pickle writer and reader unchanged, and replays through the
//! allocator model with the fidelity check agreeing.

mod common;

use std::sync::Arc;

use common::{MIB, Rng};
use vramlab_engine::alloc::{AllocatorConfig, BlockState, CachingAllocator, SimulatedMemory};
use vramlab_engine::hooks::{Hooks, Tag};
use vramlab_snapshot::{self as snapshot, Action, SnapshotReplayOptions};

/// (address, total, [(address, size, state)]) of every segment, in address order.
type Layout = Vec<(u64, u64, Vec<(u64, u64, BlockState)>)>;

fn allocator_layout(alloc: &CachingAllocator) -> Layout {
    let mut l: Layout = alloc
        .snapshot()
        .into_iter()
        .map(|s| (s.address, s.total_size, s.blocks.iter().map(|b| (b.address, b.size, b.state)).collect()))
        .collect();
    l.sort_by_key(|s| s.0);
    l
}

fn snapshot_layout(s: &snapshot::Snapshot) -> Layout {
    s.segments
        .iter()
        .map(|s| (s.address, s.total_size, s.blocks.iter().map(|b| (b.address, b.size, b.state)).collect()))
        .collect()
}

fn frame_names(s: &snapshot::Snapshot, stack: u32) -> Vec<String> {
    s.frames.stack(stack).map(|f| f.name.to_string()).collect()
}

#[test]
fn a_recording_exports_as_a_snapshot_that_replays_faithfully() {
    for seed in [1u64, 2, 3] {
        let hub = Hooks::new();
        let alloc = CachingAllocator::with_hooks(
            Arc::new(SimulatedMemory::unlimited()),
            AllocatorConfig::default(),
            hub.clone(),
            3,
        )
        .unwrap();
        let profiler = common::profiler(&hub, &[3]);
        let mut rng = Rng::new(seed);
        let mut live = Vec::new();
        let mut allocs = 0u64;
        {
            let _phase = profiler.phase("train_step");
            for step in 0..400 {
                let _inner = (step % 2 == 0).then(|| profiler.phase("forward"));
                if rng.below(10) < 6 || live.is_empty() {
                    live.push(alloc.malloc(rng.size(), 0, rng.tag()).unwrap());
                    allocs += 1;
                } else {
                    let i = rng.below(live.len() as u64) as usize;
                    alloc.free(live.swap_remove(i)).unwrap();
                }
                if step == 200 {
                    alloc.empty_cache();
                }
            }
            live.push(alloc.malloc(30 * MIB, 0, Some(Tag::Activation)).unwrap());
            allocs += 1;
        }
        let profile = profiler.stop();
        let config = alloc.config();
        let snap = profile.memory_snapshot(3, Some(&config)).unwrap();

        // The trace: every alloc, in order; the end state: the allocator's own.
        let trace = &snap.device_traces[0];
        assert_eq!(trace.iter().filter(|e| e.action == Action::Alloc).count() as u64, allocs, "seed {seed}");
        assert!(trace.iter().any(|e| e.action == Action::SegmentFree), "empty_cache released segments");
        assert!(snapshot_layout(&snap) == allocator_layout(&alloc), "seed {seed}");
        let last = trace.iter().rev().find(|e| e.action == Action::Alloc).unwrap();
        assert_eq!(frame_names(&snap, last.frames), ["tag:activation", "phase:train_step"], "tag, then open phases");

        // Through the pickle and back, unchanged.
        let mut bytes = Vec::new();
        snapshot::write_snapshot(&snap, &mut bytes).unwrap();
        let back = snapshot::read_snapshot(&bytes[..]).unwrap();
        // Stack ids are the reader's own: compare the frames they name.
        assert!(snapshot_layout(&back) == snapshot_layout(&snap), "seed {seed}");
        let block_frames = |s: &snapshot::Snapshot| -> Vec<Vec<String>> {
            s.segments.iter().flat_map(|g| &g.blocks).map(|b| frame_names(s, b.frames)).collect()
        };
        assert!(block_frames(&back) == block_frames(&snap), "seed {seed}");
        let entries = |s: &snapshot::Snapshot| -> Vec<(Action, u64, u64, i64, i64, Vec<String>)> {
            s.device_traces[0]
                .iter()
                .map(|e| (e.action, e.addr, e.size, e.stream, e.time_us, frame_names(s, e.frames)))
                .collect()
        };
        assert!(entries(&back) == entries(&snap), "seed {seed}");
        assert_eq!(back.allocator_settings, snap.allocator_settings);

        // The replay reproduces every segment event and the end state.
        let r = snapshot::replay_snapshot(&back, &SnapshotReplayOptions::default()).unwrap();
        let f = r.fidelity.as_ref().expect("a whole-trace replay under the recorded settings is checked");
        assert!(f.agrees(), "seed {seed}: {f:?}");
        assert!(f.recorded_segment_events > 0);
        assert_eq!(r.peak_allocated_bytes, alloc.max_memory_allocated(), "seed {seed}");
        assert_eq!(r.final_reserved_bytes, alloc.memory_reserved(), "seed {seed}");
        for a in live {
            alloc.free(a).unwrap();
        }
    }
}

#[test]
fn pending_frees_and_unknown_devices() {
    let hub = Hooks::new();
    let raw = Arc::new(SimulatedMemory::unlimited());
    let alloc = CachingAllocator::with_hooks(raw.clone(), AllocatorConfig::default(), hub.clone(), 0).unwrap();
    let profiler = common::profiler(&hub, &[0]);
    // Stream 1 stays busy: a free of a block it used waits.
    raw.hold_events(true);
    let a = alloc.malloc(MIB / 2, 0, None).unwrap();
    let b = alloc.malloc(MIB / 4, 0, None).unwrap();
    // Used on stream 1 too: its free waits for that stream.
    alloc.record_stream(&b, 1);
    alloc.free(b).unwrap();
    let profile = profiler.stop();
    let snap = profile.memory_snapshot(0, None).unwrap();
    assert!(snap.allocator_settings.is_none());
    assert_eq!(snap.segments.len(), 1);
    let states: Vec<BlockState> = snap.segments[0].blocks.iter().map(|b| b.state).collect();
    assert_eq!(states, [BlockState::ActiveAllocated, BlockState::ActivePendingFree, BlockState::Inactive]);
    assert_eq!(snapshot_layout(&snap), allocator_layout(&alloc));
    let e = profile.memory_snapshot(9, None).unwrap_err().to_string();
    assert!(e.contains("device 9") && e.contains("[0]"), "{e}");
    alloc.free(a).unwrap();
}

#[test]
fn expandable_segments_are_inferred_from_mappings_and_replay_faithfully() {
    let hub = Hooks::new();
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let alloc = CachingAllocator::with_hooks(Arc::new(SimulatedMemory::unlimited()), config, hub.clone(), 0).unwrap();
    let profiler = common::profiler(&hub, &[0]);
    let mut rng = Rng::new(11);
    let mut live = Vec::new();
    for step in 0..300 {
        if rng.below(10) < 6 || live.is_empty() {
            live.push(alloc.malloc(rng.size(), 0, rng.tag()).unwrap());
        } else {
            let i = rng.below(live.len() as u64) as usize;
            alloc.free(live.swap_remove(i)).unwrap();
        }
        if step == 150 {
            alloc.empty_cache();
        }
    }
    let profile = profiler.stop();
    // Written without the allocator's settings, as for a suite's private device.
    let snap = profile.memory_snapshot(0, None).unwrap();
    assert!(snap.device_traces[0].iter().any(|e| e.action == Action::SegmentMap));
    assert_eq!(snap.allocator_settings.as_ref().map(|s| s.expandable_segments), Some(true));
    assert!(snap.segments.iter().all(|s| s.is_expandable));
    let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(reserved, alloc.memory_reserved(), "the mapped pages at the end");
    let mut bytes = Vec::new();
    snapshot::write_snapshot(&snap, &mut bytes).unwrap();
    let back = snapshot::read_snapshot(&bytes[..]).unwrap();
    let r = snapshot::replay_snapshot(&back, &SnapshotReplayOptions::default()).unwrap();
    let f = r.fidelity.as_ref().expect("checked");
    assert!(f.agrees(), "{f:?}");
    for a in live {
        alloc.free(a).unwrap();
    }
}
