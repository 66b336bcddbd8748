//! Replaying a snapshot's trace through the [`CachingAllocator`] on a simulated
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
//! entry, rewound from the final segments through the trace (the `rewind`
//! module): its segments restored at their addresses and their blocks at their
//! offsets before the first entry, and counted in [`LiveAtStart`]. A window
//! (`from_us`) starts from the state rewound to its first entry.
//!
//! Private pools (CUDA graphs, `MemPool`): every pool a final segment names by its
//! `segment_pool_id` is created (use count 1, as a live graph or `MemPool` holds
//! it), and each allocation the pool plan (`pools.rs`: segment lifetimes, their
//! pools known from the final segments or inferred) puts in a private pool is made
//! there (`beginAllocateToPool` for its stream around the `malloc`).
//!
//! Recorded out-of-memory errors and releases ([`super::oom`]): each `oom` entry's
//! request is made again against a limited device — the capacity given, or where
//! none is, the one the recorded OOMs imply ([`InferredCapacity`]) — so that the
//! release, the retry and the failure happen in the allocator as they did in
//! PyTorch; a recorded OOM never stops the replay (the program went on). Runs of
//! segment frees are replayed as `empty_cache()` only when they were the
//! program's (or cannot be told); the allocator's own releases belong to its
//! settings and are left to the replayed allocator.

use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Mutex};

use super::feed::{Feed, SliceFeed};
use super::oom::{self, InferredCapacity, ReleaseSummary};
use super::pools::{PoolPlan, malloc_in};
use super::report::{
    FidelityReport, Misplacement, Placement, ReplayOom, SegmentDisagreement, SnapshotReplay, SnapshotReplayError,
    SnapshotReplayOptions,
};
use super::rewind;
use super::two_step::PendingFrees;
use super::underivable::{TraceStart, underivable_stats};
use crate::format::model::{Action, AllocatorSettings, Block, Segment, SegmentType, Snapshot, StackId, TraceEntry};
use vramlab_allocator::hooks::{AllocatorAction, Event, Hooks, Subscriber};
use vramlab_allocator::{AllocError, Allocation, AllocatorConfig, BlockState, CachingAllocator, PoolKind, StreamId};
use vramlab_replay::timeline::{
    MAX_TIMELINE_POINTS, PeakState, ReplayTimeline, TimelinePoint, TimelineRecorder, peak_state,
};
use vramlab_replay::{MAX_BYTES, OnOom};

/// Segment events of the replay, as they happen.
/// An allocator event as the trace gives it: action, address, size, stream.
type RawEvent = (Action, u64, u64, u32);

#[derive(Default)]
struct SegmentLog {
    /// Segment events: action, size, address.
    events: Mutex<Vec<(Action, u64, u64)>>,
    /// Whether `events` has any (the replay takes the lock only then; the
    /// allocator calls subscribers on the replay's own thread).
    segment_events: std::sync::atomic::AtomicBool,
    /// Every event (action, addr, size as PyTorch's trace gives it, stream), when recording.
    all: Option<Mutex<Vec<RawEvent>>>,
}

impl Subscriber for SegmentLog {
    fn on_event(&self, event: &Event) {
        if let Event::Allocator(e) = event {
            let action = match e.action {
                AllocatorAction::SegmentAlloc => Action::SegmentAlloc,
                AllocatorAction::SegmentFree => Action::SegmentFree,
                AllocatorAction::SegmentMap => Action::SegmentMap,
                AllocatorAction::SegmentUnmap => Action::SegmentUnmap,
                AllocatorAction::Alloc => Action::Alloc,
                AllocatorAction::FreeRequested => Action::FreeRequested,
                AllocatorAction::FreeCompleted => Action::FreeCompleted,
                AllocatorAction::Oom => Action::Oom,
                AllocatorAction::EmptyCache => return,
            };
            let segment = matches!(
                action,
                Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap
            );
            if let Some(all) = &self.all
                && let Ok(mut v) = all.lock()
            {
                let size = if segment { e.rounded_bytes } else { e.requested_bytes };
                v.push((action, e.addr, size, e.stream));
            }
            if segment && let Ok(mut v) = self.events.lock() {
                v.push((action, e.rounded_bytes, e.addr));
                self.segment_events.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// The replay's own events, as a trace, while it runs.
struct Recorder {
    trace: Vec<TraceEntry>,
    /// Frames of the live blocks by (simulated) address.
    frames_of: HashMap<u64, StackId>,
}

impl Recorder {
    fn take(&mut self, log: &SegmentLog, time_us: i64, frames: StackId) {
        let Some(all) = &log.all else { return };
        let Ok(mut v) = all.lock() else { return };
        for (action, addr, size, stream) in v.drain(..) {
            if action == Action::Alloc {
                self.frames_of.insert(addr, frames);
            }
            self.trace.push(TraceEntry { action, addr, size, stream: stream as i64, time_us, frames });
        }
    }
}

struct Streams {
    ids: HashMap<i64, StreamId>,
}

impl Streams {
    fn id(&mut self, raw: i64) -> Result<StreamId, SnapshotReplayError> {
        let n = self.ids.len() as StreamId;
        let id = *self.ids.entry(raw).or_insert(n);
        // The allocator model tracks streams 0 ..= 1023 at least.
        if id > 1023 {
            return Err(SnapshotReplayError::TooManyStreams { max: 1024 });
        }
        Ok(id)
    }
}

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
    let mut track = Track { recorder: None, stop_after_ops: None, peak: None };
    let r = replay(snapshot, opts, Some(&mut track), Start::AssumeWhereSegmentsSay)?;
    let recorder = track.recorder.take().expect("the replay starts it");
    let peak_ops = recorder.peak_ops;
    let mut timeline = recorder.finish();
    if let (true, Some(ops)) = (peak_segments, peak_ops) {
        let mut again = Track { recorder: None, stop_after_ops: Some(ops), peak: None };
        let quiet = SnapshotReplayOptions { record: false, ..opts.clone() };
        replay(snapshot, &quiet, Some(&mut again), Start::AssumeWhereSegmentsSay)?;
        timeline.peak = again.peak;
    }
    Ok((r, timeline))
}

/// What [`replay_snapshot_timeline`] asks of a replay.
pub(crate) struct Track {
    recorder: Option<TimelineRecorder>,
    /// Stop once this many entries are replayed (see [`TimelinePoint::ops`]) and
    /// keep the state then in `peak`.
    stop_after_ops: Option<u64>,
    peak: Option<PeakState>,
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
    let (device, device_chosen) = match opts.device {
        Some(d) if d < snapshot.device_traces.len() => (d, false),
        Some(d) => {
            return Err(SnapshotReplayError::NoSuchDevice { device: d, available: snapshot.device_traces.len() });
        }
        None => (snapshot.busiest_device().ok_or(SnapshotReplayError::NoTrace)?, true),
    };
    let trace = &snapshot.device_traces[device];
    let windowed = opts.from_us.is_some() || opts.to_us.is_some();
    let in_window =
        |e: &TraceEntry| opts.from_us.is_none_or(|f| e.time_us >= f) && opts.to_us.is_none_or(|t| e.time_us <= t);
    let (config, settings_from_snapshot) = match &opts.config {
        Some(c) => (c.clone(), false),
        None => (snapshot.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default(), true),
    };
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
    let (marks, free_on_completed) = trace_marks(trace);
    let marked = || marks.iter().map(|&i| &trace[i]);
    // Without a capacity, the one the recorded OOMs imply (under the recorded settings).
    let (capacity_inferred, capacity_not_inferred) = if opts.capacity_bytes.is_some() || opts.no_capacity_inference {
        (None, None)
    } else if windowed {
        let has_oom = marked().any(|e| in_window(e) && e.action == Action::Oom);
        (None, has_oom.then(|| "a time window was given: the reserved memory at the OOM is not known".to_owned()))
    } else {
        let recorded = snapshot.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
        match oom::infer_capacity(snapshot, device, &marks, &recorded) {
            Ok(c) => (c, None),
            Err(why) => (None, Some(why)),
        }
    };
    // The device: the capacity given; for an inferred per-process limit, the
    // device the recording saw (reserved then + its free bytes) under that limit.
    let device_bytes = match (&capacity_inferred, opts.capacity_bytes) {
        (_, Some(c)) => c,
        (Some(c), None) if c.kind == oom::LimitKind::Fraction => {
            (c.reserved_at_oom_bytes + c.device_free_bytes).clamp(c.below, MAX_BYTES)
        }
        (Some(c), None) => c.bytes,
        (None, None) => MAX_BYTES,
    };
    let first = opts.from_us.map_or(0, |f| trace.iter().position(|e| e.time_us >= f).unwrap_or(trace.len()));
    let pools = PoolPlan::new(snapshot, device, &marks);
    // The state at the first entry (of the window), rewound from the final segments.
    let rewound = || {
        let mut start = rewind::rewind(snapshot, device, &trace[first..], &config, free_on_completed);
        if first == 0 {
            // Segments reserved before the trace and freed in it: their pool is the
            // plan's (known from a final segment, or inferred), not the address's.
            for seg in start.segments.iter_mut().filter(|s| s.pool_id == (0, 0)) {
                if let Some((a, b)) = pools.pool_at_start(seg.address) {
                    seg.pool_id = (a as i64, b as i64);
                }
            }
        }
        start
    };
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
        match replay_from(snapshot, &mut feed, opts, track.as_deref_mut(), &setup, rewind::StartState::default(), true)
        {
            Ok(Run { replay, start_confirmed: true }) => return Ok(replay),
            Ok(_) => {}
            Err(e) if rewind::blocks_start_empty(snapshot, device, trace, free_on_completed) => return Err(e),
            Err(_) => {}
        }
        if let Some(t) = track.as_deref_mut() {
            t.recorder = None;
            t.peak = None;
        }
    }
    let mut feed = SliceFeed { trace, frames: &snapshot.frames };
    replay_from(snapshot, &mut feed, opts, track, &setup, rewound(), false).map(|run| run.replay)
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

/// What [`replay`] works out before the replay itself.
pub(crate) struct Setup<'a> {
    pub(crate) device: usize,
    pub(crate) device_chosen: bool,
    pub(crate) windowed: bool,
    pub(crate) config: &'a AllocatorConfig,
    pub(crate) settings_from_snapshot: bool,
    pub(crate) capacity_inferred: Option<InferredCapacity>,
    pub(crate) capacity_not_inferred: Option<String>,
    pub(crate) device_bytes: u64,
    pub(crate) free_on_completed: bool,
    pub(crate) pools: &'a PoolPlan,
    /// Indices of the trace's segment events and `oom` entries.
    pub(crate) marks: &'a [usize],
}

/// A replay, and whether the empty start it assumed held (always, for a
/// rewound start).
pub(crate) struct Run {
    pub(crate) replay: SnapshotReplay,
    pub(crate) start_confirmed: bool,
}

/// The replay from `start`. `assumed`: `start` is empty without a rewind,
/// and the replay stops early, unconfirmed, at the first entry that says
/// otherwise (see [`replay`]).
pub(crate) fn replay_from<F: Feed>(
    snapshot: &Snapshot,
    feed: &mut F,
    opts: &SnapshotReplayOptions,
    mut track: Option<&mut Track>,
    setup: &Setup,
    start: rewind::StartState,
    assumed: bool,
) -> Result<Run, SnapshotReplayError> {
    let Setup {
        device, device_chosen, windowed, config, settings_from_snapshot, device_bytes, free_on_completed, ..
    } = *setup;
    let pools = setup.pools;
    let capacity_inferred = setup.capacity_inferred.clone();
    let capacity_not_inferred = setup.capacity_not_inferred.clone();
    let in_window =
        |e: &TraceEntry| opts.from_us.is_none_or(|f| e.time_us >= f) && opts.to_us.is_none_or(|t| e.time_us <= t);
    let is_free = |a: Action| if free_on_completed { a == Action::FreeCompleted } else { a == Action::FreeRequested };
    // The recording's segment addresses, in order (the start's segments, then
    // the trace's): PyTorch breaks ties between free blocks of one size by
    // address, so the replay must place its segments where the recording's
    // were to choose the same block.
    let raw = feed.memory(device_bytes, start.address_plan().collect(), setup.marks, &in_window);
    // Stream events wait for the trace's free_completed (two_step.rs).
    raw.hold_events(true);
    let hooks = Hooks::new();
    let log = Arc::new(SegmentLog {
        events: Mutex::default(),
        segment_events: Default::default(),
        all: opts.record.then(Mutex::default),
    });
    let mut recorder = opts.record.then(|| Recorder { trace: Vec::new(), frames_of: HashMap::default() });
    hooks.subscribe(log.clone());
    let allocator = CachingAllocator::with_hooks(raw.clone(), config.clone(), hooks, device as u32)
        .map_err(SnapshotReplayError::Setup)?;
    if let Some(f) = opts.memory_fraction {
        allocator.set_memory_fraction(f).map_err(SnapshotReplayError::Setup)?;
    } else if let Some(c) = capacity_inferred.as_ref().filter(|c| c.kind == oom::LimitKind::Fraction) {
        allocator.set_memory_limit(Some(c.bytes));
    }
    // A limit the failed requests can run into: then they are made again.
    let limited =
        opts.capacity_bytes.is_some() || opts.memory_fraction.is_some_and(|f| f < 1.0) || capacity_inferred.is_some();
    // The allocator's own releases are replayed only under the recorded settings
    // and the recorded (unknown) limit; elsewhere the allocator releases by itself.
    let own_releases_replayed =
        settings_from_snapshot && opts.capacity_bytes.is_none() && opts.memory_fraction.is_none();
    for &pool in &pools.pools {
        allocator.create_or_incref_pool(pool).map_err(SnapshotReplayError::Setup)?;
    }
    let mut frees = PendingFrees::default();
    let mut streams = Streams { ids: HashMap::from_iter([(0, 0)]) };
    let mut handles: HashMap<u64, Allocation> = HashMap::default();
    for (addr, a, frames) in rewind::place(&allocator, &raw, &start, |raw| streams.id(raw))? {
        if let Some(rec) = recorder.as_mut() {
            rec.frames_of.insert(a.addr(), frames);
        }
        handles.insert(addr, a);
    }
    let live_at_start = start.live_at_start;
    // The recording starts where the trace does: the placed memory is in its
    // final segments, from which a replay of it rewinds the same start.
    if let Some(all) = &log.all
        && let Ok(mut v) = all.lock()
    {
        v.clear();
    }
    allocator.reset_peak_stats();
    // The segments the placed memory needed are not in the trace: not compared.
    if let Ok(mut v) = log.events.lock() {
        v.clear();
    }

    let mut r = SnapshotReplay {
        device,
        device_chosen,
        devices_with_entries: 0,
        alloc_conf: config.to_string(),
        settings_from_snapshot,
        capacity_bytes: opts.capacity_bytes.or(capacity_inferred.as_ref().map(|_| device_bytes)),
        entries: 0,
        entries_in_window: 0,
        allocs: 0,
        frees: 0,
        live_at_start,
        skipped_entries: 0,
        first_skipped: None,
        peak_allocated_bytes: 0,
        peak_reserved_bytes: 0,
        final_allocated_bytes: 0,
        final_reserved_bytes: 0,
        segment_allocs: 0,
        largest_free_block_at_peak_bytes: 0,
        fragmentation_at_peak_bytes: 0,
        ooms: Vec::new(),
        stopped_early: false,
        recorded_ooms: 0,
        memory_limit_bytes: allocator.memory_limit(),
        capacity_inferred,
        capacity_not_inferred,
        oom_requests: Vec::new(),
        releases: ReleaseSummary::default(),
        private_pools: Vec::new(),
        pool_inference: pools.inference.clone(),
        frees_deferred: 0,
        frees_pending_at_end: 0,
        peak_allocated_index: None,
        fidelity: None,
        final_memory_stats: Default::default(),
        underivable_stats: Vec::new(),
        recording: None,
    };
    let mut recorded_seg: Vec<(u64, Action, u64)> = Vec::new();
    let mut replayed_seg: Vec<(u64, Action, u64)> = Vec::new();
    let check_placement = !config.expandable_segments;
    let mut recorded_segs = LiveSegments::default();
    let mut replayed_segs = LiveSegments::default();
    let mut first_misplaced: Option<Misplacement> = None;
    let mut failed: HashMap<u64, ()> = HashMap::default();
    let mut prev_action = Action::Snapshot;
    let mut peak_reserved_seen = allocator.memory_reserved();
    if let Some(t) = track.as_deref_mut() {
        let start = feed.whole().iter().position(in_window).unwrap_or(0) as u64;
        if t.stop_after_ops == Some(start) {
            t.peak = Some(peak_state(&allocator, start));
        }
        let (allocated_bytes, reserved_bytes) = (allocator.memory_allocated(), allocator.memory_reserved());
        t.recorder = Some(TimelineRecorder::new(
            MAX_TIMELINE_POINTS,
            TimelinePoint { ops: start, allocated_bytes, reserved_bytes },
        ));
    }
    let mut peak_allocated_seen = allocator.memory_allocated();
    // An assumed empty start: whether an entry contradicted it, and whether
    // the loop went through every entry (else the rest is checked apart).
    let mut contradicted = false;
    let mut saw_every_entry = true;
    let skip = |r: &mut SnapshotReplay, what: String| {
        r.skipped_entries += 1;
        if r.first_skipped.is_none() {
            r.first_skipped = Some(what);
        }
    };
    let mut next = 0;
    while let Some(&e) = feed.get(next) {
        let e = &e;
        let i = next as u64;
        next += 1;
        if !in_window(e) {
            continue;
        }
        r.entries_in_window += 1;
        // The allocation to place once this entry's segment events are in:
        // (recorded address, replayed address).
        let mut placed: Option<(u64, u64)> = None;
        match e.action {
            Action::Alloc => {
                r.allocs += 1;
                // An alloc at an address live already (or whose free is still
                // waiting, or whose alloc failed and was not freed) contradicts
                // an assumed empty start.
                if assumed && ((!failed.is_empty() && failed.contains_key(&e.addr)) || frees.holds(e.addr)) {
                    contradicted = true;
                    break;
                }
                if let Some(old) = handles.remove(&e.addr) {
                    if assumed {
                        contradicted = true;
                        break;
                    }
                    skip(
                        &mut r,
                        format!(
                            "entry {i}: alloc at {:#x}, which is live already; the older block is freed first",
                            e.addr
                        ),
                    );
                    allocator.free(old).map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
                }
                let stream = streams.id(e.stream)?;
                let size = request_size(opts, i, e);
                match malloc_in(&allocator, size, stream, pools.pool_of_entry(i as usize)) {
                    Ok(a) => {
                        placed = Some((e.addr, a.addr()));
                        handles.insert(e.addr, a);
                    }
                    Err(AllocError::OutOfMemory(err)) => {
                        if let Some(rec) = track.as_deref_mut().and_then(|t| t.recorder.as_mut()) {
                            rec.oom(&allocator, (i, None, device as u32), size, err.to_string());
                        }
                        r.ooms.push(ReplayOom {
                            trace_index: i,
                            time_us: e.time_us,
                            requested_bytes: size,
                            frames: e.frames,
                            message: err.to_string(),
                        });
                        failed.insert(e.addr, ());
                        if opts.on_oom == OnOom::Stop {
                            r.stopped_early = true;
                            saw_every_entry = false;
                            break;
                        }
                    }
                    Err(source) => return Err(SnapshotReplayError::Allocator { index: i, source }),
                }
            }
            Action::FreeRequested if free_on_completed => {
                // The two-step free (two_step.rs): allocated no more from here.
                if let Some(h) = handles.remove(&e.addr) {
                    let after = feed.get(i as usize + 1);
                    let now = after.is_some_and(|n| n.action == Action::FreeCompleted && n.addr == e.addr);
                    frees
                        .request(&allocator, e.addr, h, now)
                        .map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
                }
            }
            a if is_free(a) => {
                r.frees += 1;
                if frees.complete(&allocator, &raw, e.addr) {
                    // Requested before: done now.
                } else if let Some(h) = handles.remove(&e.addr) {
                    allocator.free(h).map_err(|source| SnapshotReplayError::Allocator { index: i, source })?
                } else if failed.remove(&e.addr).is_none() {
                    if assumed {
                        contradicted = true;
                        break;
                    }
                    skip(&mut r, format!("entry {i}: {} of {:#x}, which is not live", a.as_str(), e.addr));
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                recorded_seg.push((i, e.action, e.size));
                recorded_segs.free(e.addr);
                // A run of segment frees is a release of cached blocks: the
                // program's empty_cache() is made where it was recorded, the
                // allocator's own are left to the replayed allocator.
                if prev_action != e.action {
                    let kind = feed.classify_run(i as usize, &in_window);
                    if r.releases.count(kind, limited, own_releases_replayed) {
                        // Pools whose segments this run frees were freeable then.
                        let run = feed.run_len(i as usize);
                        let mut freeable: Vec<_> = (i as usize..i as usize + run)
                            .flat_map(|k| pools.freeable_for(k).iter().copied())
                            .collect();
                        freeable.sort_unstable();
                        freeable.dedup();
                        for &p in &freeable {
                            let _ = allocator.release_pool(p);
                        }
                        allocator.empty_cache();
                        for &p in &freeable {
                            let _ = allocator.create_or_incref_pool(p);
                        }
                    }
                }
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                recorded_seg.push((i, e.action, e.size));
                recorded_segs.alloc(e.addr, e.size);
            }
            Action::Oom => {
                r.recorded_ooms += 1;
                if limited {
                    let stream = streams.id(e.stream)?;
                    let e = &TraceEntry { size: request_size(opts, i, e), ..*e };
                    let request = oom::replay_request(&allocator, e, i, stream)
                        .map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
                    if let (Some(message), Some(rec)) =
                        (&request.message, track.as_deref_mut().and_then(|t| t.recorder.as_mut()))
                    {
                        rec.oom(&allocator, (i, None, device as u32), e.size, message.clone());
                    }
                    r.oom_requests.push(request);
                }
            }
            _ => {}
        }
        prev_action = e.action;
        if let Some(rec) = recorder.as_mut() {
            rec.take(&log, e.time_us, e.frames);
        }
        if log.segment_events.load(std::sync::atomic::Ordering::Relaxed)
            && let Ok(mut v) = log.events.lock()
        {
            log.segment_events.store(false, std::sync::atomic::Ordering::Relaxed);
            for (a, size, addr) in v.drain(..) {
                if matches!(a, Action::SegmentAlloc | Action::SegmentMap) {
                    r.segment_allocs += 1;
                    replayed_segs.alloc(addr, size);
                } else {
                    replayed_segs.free(addr);
                }
                replayed_seg.push((i, a, size));
            }
        }
        // The same address is the same place: while the address plan holds, the
        // replay's segments sit at the recording's (and fresh addresses lie above
        // every recorded segment), so only a different address is looked up.
        if check_placement
            && first_misplaced.is_none()
            && let Some((recorded_addr, replayed_addr)) = placed
            && recorded_addr != replayed_addr
            && let Some(recorded) = recorded_segs.place(recorded_addr)
        {
            let replayed = replayed_segs.place(replayed_addr);
            if replayed != Some(recorded) {
                first_misplaced = Some(Misplacement { trace_index: i, requested_bytes: e.size, recorded, replayed });
            }
        }
        let (allocated, reserved) = allocator.memory_allocated_and_reserved();
        if reserved > peak_reserved_seen {
            peak_reserved_seen = reserved;
            r.largest_free_block_at_peak_bytes = allocator.largest_free_block();
            r.fragmentation_at_peak_bytes = reserved - allocated;
        }
        if allocated > peak_allocated_seen {
            peak_allocated_seen = allocated;
            r.peak_allocated_index = Some(i);
        }
        if let Some(t) = track.as_deref_mut() {
            if let Some(rec) = t.recorder.as_mut() {
                rec.op(i + 1, allocated, reserved);
            }
            if t.stop_after_ops == Some(i + 1) {
                t.peak = Some(peak_state(&allocator, i + 1));
                saw_every_entry = false;
                break;
            }
        }
    }
    // The whole snapshot (a streamed trace is complete from here on).
    let snapshot = feed.snapshot(snapshot);
    let trace = &snapshot.device_traces[device];
    r.entries = trace.len() as u64;
    r.devices_with_entries = snapshot.device_traces.iter().filter(|t| !t.is_empty()).count() as u64;
    r.private_pools = snapshot.private_pools(device as i64);
    if assumed {
        let confirmed = !contradicted
            && if saw_every_entry {
                let live = handles.len() + failed.len() + frees.len();
                rewind::final_blocks_match(snapshot, device, live, |a| {
                    handles.contains_key(&a) || failed.contains_key(&a) || frees.holds(a)
                })
            } else {
                rewind::blocks_start_empty(snapshot, device, trace, free_on_completed)
            };
        if !confirmed {
            return Ok(Run { replay: r, start_confirmed: false });
        }
    }
    r.peak_allocated_bytes = allocator.max_memory_allocated();
    r.peak_reserved_bytes = allocator.max_memory_reserved();
    r.final_allocated_bytes = allocator.memory_allocated();
    r.final_reserved_bytes = allocator.memory_reserved();
    r.final_memory_stats = allocator.stats().flatten();
    r.frees_deferred = frees.deferred;
    let live_before = r.live_at_start.blocks_in_segments + r.live_at_start.freed_without_alloc > 0
        || r.pool_inference.live_at_start > 0;
    r.underivable_stats = underivable_stats(&r.final_memory_stats, TraceStart { live_before, windowed });
    r.frees_pending_at_end = frees.waiting();

    if !windowed
        && settings_from_snapshot
        && opts.capacity_bytes.is_none()
        && opts.memory_fraction.is_none()
        && !r.stopped_early
    {
        let mut report = fidelity(snapshot, device, &allocator, &recorded_seg, &replayed_seg);
        report.first_misplaced_alloc = first_misplaced;
        r.fidelity = Some(report);
    }
    if let Some(rec) = recorder {
        r.recording = Some(recording(snapshot, device, &allocator, config, rec));
    }
    for (_, h) in handles.drain() {
        let _ = allocator.free(h);
    }
    Ok(Run { replay: r, start_confirmed: true })
}

/// The bytes entry `i` requests: the trace's, or the scaled size given.
fn request_size(opts: &SnapshotReplayOptions, i: u64, e: &TraceEntry) -> u64 {
    opts.request_sizes.as_ref().and_then(|s| s.get(i as usize)).copied().unwrap_or(e.size)
}

/// The replay as a snapshot: its trace on device `device` and its final segments.
fn recording(
    snapshot: &Snapshot,
    device: usize,
    allocator: &CachingAllocator,
    config: &AllocatorConfig,
    rec: Recorder,
) -> Snapshot {
    let segments = allocator
        .snapshot()
        .into_iter()
        .map(|s| Segment {
            device: device as i64,
            address: s.address,
            total_size: s.total_size,
            stream: s.stream as i64,
            segment_type: if s.pool == PoolKind::Small { SegmentType::Small } else { SegmentType::Large },
            segment_pool_id: s.pool_id.map_or((0, 0), |(a, b)| (a as i64, b as i64)),
            is_expandable: s.is_expandable,
            frames: 0,
            blocks: s
                .blocks
                .into_iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: if b.state == BlockState::Inactive { 0 } else { b.requested_size },
                    state: b.state,
                    frames: if b.state == BlockState::Inactive {
                        0
                    } else {
                        rec.frames_of.get(&b.address).copied().unwrap_or(0)
                    },
                })
                .collect(),
        })
        .collect();
    let mut device_traces = vec![Vec::new(); device + 1];
    device_traces[device] = rec.trace;
    Snapshot {
        protocol: 2,
        segments,
        device_traces,
        skipped_entries: Vec::new(),
        frames: snapshot.frames.clone(),
        allocator_settings: Some(AllocatorSettings {
            alloc_conf: config.to_string(),
            max_split_size: config.max_split_size,
            garbage_collection_threshold: config.garbage_collection_threshold,
            expandable_segments: config.expandable_segments,
            roundup_power2_divisions: config.roundup_power2_divisions,
        }),
        legacy_layout: false,
        host_segments: 0,
        host_trace_entries: 0,
        external_annotations: 0,
        other_keys: Vec::new(),
    }
}

/// The live segments of the recording or of the replay, by address, each with
/// its number in allocation order.
#[derive(Default)]
struct LiveSegments {
    by_addr: std::collections::BTreeMap<u64, (u64, u64)>,
    allocated: u64,
}

impl LiveSegments {
    fn alloc(&mut self, addr: u64, size: u64) {
        self.by_addr.insert(addr, (size, self.allocated));
        self.allocated += 1;
    }

    fn free(&mut self, addr: u64) {
        self.by_addr.remove(&addr);
    }

    /// Where `addr` lies, if in a live segment.
    fn place(&self, addr: u64) -> Option<Placement> {
        let (&base, &(size, segment)) = self.by_addr.range(..=addr).next_back()?;
        (addr < base + size).then_some(Placement { segment, segment_bytes: size, offset: addr - base })
    }
}

type SegKey = (u64, Vec<(u64, bool)>);

fn fidelity(
    snapshot: &Snapshot,
    device: usize,
    allocator: &CachingAllocator,
    recorded: &[(u64, Action, u64)],
    replayed: &[(u64, Action, u64)],
) -> FidelityReport {
    let first_segment_disagreement = (0..recorded.len().max(replayed.len())).find_map(|k| {
        let rec = recorded.get(k).copied();
        let rep = replayed.get(k).copied();
        let same = matches!((rec, rep), (Some((_, a, s)), Some((_, b, t))) if a == b && s == t);
        (!same).then_some(SegmentDisagreement { position: k as u64, recorded: rec, replayed: rep })
    });
    let mut rec_segs: Vec<SegKey> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .map(|s| (s.total_size, s.blocks.iter().map(|b| (b.size, b.state != BlockState::Inactive)).collect()))
        .collect();
    let ours = allocator.snapshot();
    let mut rep_segs: Vec<SegKey> = ours
        .iter()
        .map(|s| (s.total_size, s.blocks.iter().map(|b| (b.size, b.state != BlockState::Inactive)).collect()))
        .collect();
    rec_segs.sort();
    rep_segs.sort();
    let final_segments_disagreement = if rec_segs == rep_segs {
        None
    } else {
        let k = rec_segs.iter().zip(&rep_segs).position(|(a, b)| a != b).unwrap_or(rec_segs.len().min(rep_segs.len()));
        let show = |s: Option<&SegKey>| match s {
            None => "none".to_owned(),
            Some((total, blocks)) => format!(
                "a segment of {total} bytes with blocks [{}]",
                blocks
                    .iter()
                    .map(|(size, active)| format!("{size}{}", if *active { " active" } else { " free" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Some(format!(
            "{} recorded and {} replayed segments; in size order, #{k} is {} in the snapshot but {} in the replay",
            rec_segs.len(),
            rep_segs.len(),
            show(rec_segs.get(k)),
            show(rep_segs.get(k))
        ))
    };
    let rec_iter = || snapshot.segments.iter().filter(|s| s.device == device as i64);
    FidelityReport {
        recorded_segment_events: recorded.len() as u64,
        replayed_segment_events: replayed.len() as u64,
        first_segment_disagreement,
        first_misplaced_alloc: None,
        recorded_segments: rec_segs.len() as u64,
        replayed_segments: rep_segs.len() as u64,
        final_segments_disagreement,
        // A block whose free waits for other streams (active_pending_free) is
        // active but allocated no more.
        recorded_allocated_bytes: rec_iter().map(Segment::allocated_bytes).sum(),
        replayed_allocated_bytes: allocator.memory_allocated(),
        recorded_reserved_bytes: rec_iter().map(|s| s.total_size).sum(),
        replayed_reserved_bytes: allocator.memory_reserved(),
    }
}

#[cfg(test)]
mod tests {
    //! The replay from an assumed empty start (checked as it goes) against the
    //! replay from the rewound start: equal on every trace, clean or not.
    use proptest::prelude::*;

    use super::*;
    use crate::format::model::FrameTable;
    use crate::replay::report::LiveAtStart;
    use vramlab_allocator::consts::MIB;

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
            let mut track = Track { recorder: None, stop_after_ops: stop, peak: None };
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
