//! Replaying a snapshot's trace through the `CachingAllocator` on a simulated
//! device, and the fidelity check: with the snapshot's own allocator settings
//! the replay must reproduce the recorded segment allocations and frees (sizes,
//! in order), put every allocation at the same offset of the same segment (the
//! n-th segment the trace allocates pairs with the replay's n-th; checked
//! without expandable segments, for segments allocated in the trace), and end
//! with the same segments and the totals they imply; the first place where they
//! part is reported.
//!
//! Memory live before the first entry (a ring buffer that lost its start, a
//! recording begun after the model was built) is the allocator's state at that
//! entry, rewound from the final segments through the trace (`rewind.rs`):
//! its segments restored at their addresses and their blocks at their
//! offsets before the first entry, and counted in `LiveAtStart`. A window
//! (`from_us`) starts from the state rewound to its first entry.
//!
//! Private pools (CUDA graphs, `MemPool`): every pool a final segment names by its
//! `segment_pool_id` is created (use count 1, as a live graph or `MemPool` holds
//! it), and each allocation the pool plan (`pools.rs`: segment lifetimes, their
//! pools known from the final segments or inferred) puts in a private pool is made
//! there (`beginAllocateToPool` for its stream around the `malloc`).
//!
//! Recorded out-of-memory errors and releases (`oom.rs`): each `oom` entry's
//! request is made again against a limited device — the capacity given, or where
//! none is, the one the recorded OOMs imply ([`InferredCapacity`]) — so that the
//! release, the retry and the failure happen in the allocator as they did in
//! PyTorch; a recorded OOM never stops the replay (the program went on). Runs of
//! segment frees are replayed as `empty_cache()` only when they were the
//! program's (or cannot be told); the allocator's own releases belong to its
//! settings and are left to the replayed allocator.
//!
//! This file holds the entry points and what comes before the walk (the
//! device, settings and capacity, and the start: assumed empty or rewound);
//! the walk itself is `walk.rs`'s.

use super::feed::SliceFeed;
use super::oom::{self, InferredCapacity};
use super::pools::PoolPlan;
use super::report::{SnapshotReplay, SnapshotReplayError, SnapshotReplayOptions};
use super::rewind::{self, StartState};
use super::states::{SegmentAt, StateHistory, StateRecorder};
use super::walk::{Run, Setup, Track, in_window, replay_from};
use crate::format::model::{Action, Snapshot, TraceEntry};
use vramlab_replay::MAX_BYTES;
use vramlab_replay::timeline::ReplayTimeline;

/// Replays `snapshot`'s trace for one device.
pub fn replay_snapshot(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
) -> Result<SnapshotReplay, SnapshotReplayError> {
    replay(snapshot, opts, None, Start::AssumeWhereSegmentsSay)
}

/// [`replay_snapshot`], and the device's memory over the replay: allocated and
/// reserved bytes after every trace entry (`ops` counts entries, so entry `i`
/// is at `i + 1`; the memory placed before the first entry is at the first
/// entry's index), the segments at the reserved peak (taken by a second replay
/// that stops there) when `peak_segments`, and the fragmentation figures of
/// every out-of-memory.
pub fn replay_snapshot_timeline(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
    peak_segments: bool,
) -> Result<(SnapshotReplay, ReplayTimeline), SnapshotReplayError> {
    let mut track = Track::new(None);
    let r = replay(snapshot, opts, Some(&mut track), Start::AssumeWhereSegmentsSay)?;
    let recorder = track.recorder.take().expect("the replay starts it");
    let peak_ops = recorder.peak_ops;
    let mut timeline = recorder.finish();
    if let (true, Some(ops)) = (peak_segments, peak_ops) {
        let mut again = Track::new(Some(ops));
        let quiet = SnapshotReplayOptions { record: false, ..opts.clone() };
        replay(snapshot, &quiet, Some(&mut again), Start::AssumeWhereSegmentsSay)?;
        timeline.peak = again.peak;
    }
    Ok((r, timeline))
}

/// Replays `snapshot` as [`replay_snapshot`] does and keeps the allocator's
/// state at every state of `windows` (entries applied, first and last
/// inclusive; see [`state_windows`](super::states::state_windows)).
pub fn replay_snapshot_states(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
    windows: Vec<(u64, u64)>,
) -> Result<StateHistory, SnapshotReplayError> {
    let (device, _) = choose_device(snapshot, opts)?;
    let entries = snapshot.device_traces[device].len() as u64;
    let mut track = Track::new(None);
    track.states = Some(StateRecorder::new(entries, windows));
    let quiet = SnapshotReplayOptions { record: false, ..opts.clone() };
    replay(snapshot, &quiet, Some(&mut track), Start::AssumeWhereSegmentsSay)?;
    Ok(track.states.take().expect("set above").history)
}

/// The allocator's segments after `ops` entries of the replay (a replay
/// stopped there), in the form [`StateHistory::state_at`] gives; `None` when
/// the replay never reaches that state.
pub fn replay_snapshot_state_at(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
    ops: u64,
) -> Result<Option<Vec<SegmentAt>>, SnapshotReplayError> {
    let mut track = Track::new(Some(ops));
    let quiet = SnapshotReplayOptions { record: false, ..opts.clone() };
    replay(snapshot, &quiet, Some(&mut track), Start::AssumeWhereSegmentsSay)?;
    Ok(track.peak.map(|p| SegmentAt::of(&p.segments)))
}

/// How [`replay`] finds the state at the first entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Empty where the segment events account for every segment (checked
    /// during the replay, which starts again rewound where it does not hold).
    AssumeWhereSegmentsSay,
    /// Always rewound (the tests compare the two).
    #[cfg_attr(not(test), allow(dead_code))]
    Rewind,
}

fn replay(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
    mut track: Option<&mut Track>,
    how: Start,
) -> Result<SnapshotReplay, SnapshotReplayError> {
    let (device, device_chosen) = choose_device(snapshot, opts)?;
    check_limits(opts)?;
    let trace = &snapshot.device_traces[device];
    let windowed = opts.from_us.is_some() || opts.to_us.is_some();
    let (config, settings_from_snapshot) = match &opts.config {
        Some(c) => (c.clone(), false),
        None => (snapshot.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default(), true),
    };
    let (marks, free_on_completed) = trace_marks(trace);
    let (capacity_inferred, capacity_not_inferred) = capacity(snapshot, opts, device, &marks);
    let device_bytes = device_bytes(opts, capacity_inferred.as_ref());
    let pools = PoolPlan::new(snapshot, device, &marks);
    let setup = Setup {
        device,
        device_chosen,
        windowed,
        config: &config,
        settings_from_snapshot,
        capacity_inferred,
        capacity_not_inferred,
        device_bytes,
        free_on_completed,
        pools: &pools,
        marks: &marks,
    };
    // Most recordings hold everything from the process's first allocation:
    // then nothing is live at the first entry and the rewind (a walk over the
    // whole trace) finds nothing. Where the segment events account for every
    // segment, that start is assumed and the replay checks the blocks as it
    // goes (each alloc at an address not live, each free of a live one, the
    // final segments' blocks live at the end); where they do not, the replay
    // starts again from the rewound state, so the outcome is always the
    // rewound start's.
    if how == Start::AssumeWhereSegmentsSay
        && !windowed
        && rewind::segments_start_empty(snapshot, device, trace, &marks)
    {
        let mut feed = SliceFeed { trace, frames: &snapshot.frames };
        match replay_from(snapshot, &mut feed, opts, track.as_deref_mut(), &setup, StartState::default(), true) {
            Ok(Run { replay, start_confirmed: true }) => return Ok(replay),
            Ok(_) => {}
            Err(e) if rewind::blocks_start_empty(snapshot, device, trace, free_on_completed) => return Err(e),
            Err(_) => {}
        }
        if let Some(t) = track.as_deref_mut() {
            t.recorder = None;
            t.peak = None;
            if let Some(states) = t.states.as_mut() {
                states.restart();
            }
        }
    }
    let start = rewound_start(snapshot, opts, &setup);
    let mut feed = SliceFeed { trace, frames: &snapshot.frames };
    replay_from(snapshot, &mut feed, opts, track, &setup, start, false).map(|run| run.replay)
}

/// The device to replay: the one asked for, or the busiest (then `true`).
fn choose_device(snapshot: &Snapshot, opts: &SnapshotReplayOptions) -> Result<(usize, bool), SnapshotReplayError> {
    match opts.device {
        Some(d) if d < snapshot.device_traces.len() => Ok((d, false)),
        Some(d) => Err(SnapshotReplayError::NoSuchDevice { device: d, available: snapshot.device_traces.len() }),
        None => Ok((snapshot.busiest_device().ok_or(SnapshotReplayError::NoTrace)?, true)),
    }
}

/// The capacity and memory fraction asked for, checked.
fn check_limits(opts: &SnapshotReplayOptions) -> Result<(), SnapshotReplayError> {
    if let Some(c) = opts.capacity_bytes
        && c > MAX_BYTES
    {
        return Err(SnapshotReplayError::CapacityTooLarge(c));
    }
    if let Some(f) = opts.memory_fraction
        && !(0.0..=1.0).contains(&f)
    {
        return Err(SnapshotReplayError::InvalidFraction(f));
    }
    Ok(())
}

/// Without a capacity, the one the recorded OOMs of `device`'s trace imply
/// (under the recorded settings), or why there is none.
fn capacity(
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
    device: usize,
    marks: &[usize],
) -> (Option<InferredCapacity>, Option<String>) {
    let trace = &snapshot.device_traces[device];
    if opts.capacity_bytes.is_some() || opts.no_capacity_inference {
        (None, None)
    } else if opts.from_us.is_some() || opts.to_us.is_some() {
        let has_oom = marks.iter().map(|&i| &trace[i]).any(|e| in_window(opts, e) && e.action == Action::Oom);
        (None, has_oom.then(|| "a time window was given: the reserved memory at the OOM is not known".to_owned()))
    } else {
        let recorded = snapshot.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
        match oom::infer_capacity(snapshot, device, marks, &recorded) {
            Ok(c) => (c, None),
            Err(why) => (None, Some(why)),
        }
    }
}

/// The simulated device's bytes: the capacity given; for an inferred
/// per-process limit, the device the recording saw (reserved then + its free
/// bytes) under that limit.
fn device_bytes(opts: &SnapshotReplayOptions, inferred: Option<&InferredCapacity>) -> u64 {
    match (inferred, opts.capacity_bytes) {
        (_, Some(c)) => c,
        (Some(c), None) if c.kind == oom::LimitKind::Fraction => {
            (c.reserved_at_oom_bytes + c.device_free_bytes).clamp(c.below, MAX_BYTES)
        }
        (Some(c), None) => c.bytes,
        (None, None) => MAX_BYTES,
    }
}

/// The state at the first entry (of the window), rewound from the final segments.
fn rewound_start(snapshot: &Snapshot, opts: &SnapshotReplayOptions, setup: &Setup) -> StartState {
    let trace = &snapshot.device_traces[setup.device];
    let first = opts.from_us.map_or(0, |f| trace.iter().position(|e| e.time_us >= f).unwrap_or(trace.len()));
    let mut start = rewind::rewind(snapshot, setup.device, &trace[first..], setup.config, setup.free_on_completed);
    if first == 0 {
        // Segments reserved before the trace and freed in it: their pool is the
        // plan's (known from a final segment, or inferred), not the address's.
        for seg in start.segments.iter_mut().filter(|s| s.pool_id == (0, 0)) {
            if let Some((a, b)) = setup.pools.pool_at_start(seg.address) {
                seg.pool_id = (a as i64, b as i64);
            }
        }
    }
    start
}

/// One pass over a trace for what the passes before the replay need: the
/// indices of its segment events and `oom` entries (a few in millions), and
/// whether frees complete apart from their requests (`free_completed` entries).
pub(crate) fn trace_marks(trace: &[TraceEntry]) -> (Vec<usize>, bool) {
    let mut marks: Vec<usize> = Vec::new();
    let mut free_on_completed = false;
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap | Action::Oom => {
                marks.push(i)
            }
            Action::FreeCompleted => free_on_completed = true,
            _ => {}
        }
    }
    (marks, free_on_completed)
}

#[cfg(test)]
mod tests {
    //! The replay from an assumed empty start (checked as it goes) against the
    //! replay from the rewound start: equal on every trace, clean or not.
    use proptest::prelude::*;

    use super::*;
    use crate::format::model::{FrameTable, Segment};
    use crate::replay::report::LiveAtStart;
    use vramlab_allocator::consts::MIB;
    use vramlab_allocator::{AllocatorConfig, BlockState};
    use vramlab_replay::OnOom;

    fn snapshot(trace: Vec<TraceEntry>, segments: Vec<Segment>) -> Snapshot {
        Snapshot::of_one_device(trace, segments, FrameTable::default())
    }

    /// A program of allocs (size), frees (of the live allocation at an index)
    /// and `empty_cache()`s (`None`), recorded by a replay: real addresses,
    /// segment events and final segments.
    fn recorded(ops: &[(Option<u64>, usize)]) -> Snapshot {
        let mut trace = Vec::new();
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut next = 1u64 << 40;
        let entry =
            |action, addr, size, t: usize| TraceEntry { action, addr, size, stream: 0, time_us: t as i64, frames: 0 };
        for &(size, at) in ops {
            let t = trace.len();
            match size {
                Some(size) if at % 3 != 0 || live.is_empty() => {
                    next += 1 << 30;
                    live.push((next, size));
                    trace.push(entry(Action::Alloc, next, size, t));
                }
                Some(_) => {
                    let (addr, size) = live.remove(at % live.len());
                    trace.push(entry(Action::FreeRequested, addr, size, t));
                    trace.push(entry(Action::FreeCompleted, addr, size, t + 1));
                }
                None => trace.push(entry(Action::SegmentFree, 0, 0, t)),
            }
        }
        let opts = SnapshotReplayOptions { record: true, ..Default::default() };
        replay_snapshot(&snapshot(trace, Vec::new()), &opts).unwrap().recording.unwrap()
    }

    /// Both starts, with the timeline stopping at `stop` entries when given.
    fn both(s: &Snapshot, opts: &SnapshotReplayOptions, stop: Option<u64>) {
        let run = |how| {
            let mut track = Track::new(stop);
            let r = replay(s, opts, Some(&mut track), how);
            let timeline = track.recorder.map(|t| t.finish());
            (r.map_err(|e| e.to_string()), timeline, track.peak)
        };
        let assumed = run(Start::AssumeWhereSegmentsSay);
        let rewound = run(Start::Rewind);
        assert_eq!(assumed, rewound);
    }

    fn op() -> impl Strategy<Value = (Option<u64>, usize)> {
        let size = prop_oneof![1u64..MIB, MIB..(10 * MIB), (10 * MIB)..(60 * MIB)];
        (prop_oneof![12 => size.prop_map(Some), 1 => Just(None)], any::<usize>())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A recorded trace as it is, with its start cut off, an entry dropped or
        /// doubled, or a live block added to its final segments: the same replay,
        /// on an unlimited device and a small one, to the end or stopped.
        #[test]
        fn an_assumed_empty_start_replays_as_the_rewound_one(
            ops in proptest::collection::vec(op(), 1..80),
            change in 0usize..5,
            at in any::<usize>(),
            capacity in prop_oneof![Just(None), (40u64..200).prop_map(|m| Some(m * MIB))],
            stop_on_oom in any::<bool>(),
            stop in prop_oneof![Just(None), (0u64..100).prop_map(Some)],
        ) {
            let mut s = recorded(&ops);
            let trace = &mut s.device_traces[0];
            let k = at % trace.len().max(1);
            match change {
                1 => { trace.drain(..k); }
                2 if !trace.is_empty() => { trace.remove(k); }
                3 if !trace.is_empty() => { let e = trace[k]; trace.insert(k, e); }
                4 => {
                    if let Some(b) = s.segments.iter_mut().flat_map(|g| &mut g.blocks).find(|b| b.state == BlockState::Inactive) {
                        b.state = BlockState::ActiveAllocated;
                        b.requested_size = b.size;
                    }
                }
                _ => {}
            }
            // Without expandable segments, the two checks hold exactly when the
            // rewind finds nothing at the start (and nothing it cannot undo).
            let trace = &s.device_traces[0];
            let completes = trace.iter().any(|e| e.action == Action::FreeCompleted);
            let all: Vec<usize> = (0..trace.len()).collect();
            let nothing = rewind::rewind(&s, 0, trace, &AllocatorConfig::default(), completes)
                == rewind::StartState::default();
            let checks = rewind::segments_start_empty(&s, 0, trace, &all)
                && rewind::blocks_start_empty(&s, 0, trace, completes);
            prop_assert_eq!(nothing, checks);
            let on_oom = if stop_on_oom { OnOom::Stop } else { OnOom::Continue };
            let opts = SnapshotReplayOptions { capacity_bytes: capacity, on_oom, record: true, ..Default::default() };
            both(&s, &opts, stop);
        }
    }

    #[test]
    fn a_clean_recording_is_assumed_to_start_empty_and_one_cut_is_not() {
        let ops: Vec<(Option<u64>, usize)> = (0..40u64).map(|k| (Some((k % 7 + 1) * MIB), (k * 5) as usize)).collect();
        let s = recorded(&ops);
        let trace = &s.device_traces[0];
        let marks: Vec<usize> = (0..trace.len()).filter(|&i| trace[i].action != Action::Alloc).collect();
        assert!(rewind::segments_start_empty(&s, 0, trace, &marks));
        assert!(rewind::blocks_start_empty(&s, 0, trace, true));
        let cut = &trace[trace.len() / 2..];
        let marks: Vec<usize> = (0..cut.len()).collect();
        assert!(!rewind::segments_start_empty(&s, 0, cut, &marks) || !rewind::blocks_start_empty(&s, 0, cut, true));
        let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
        assert!(r.fidelity.unwrap().agrees());
        assert_eq!(r.live_at_start, LiveAtStart::default());
    }
}
