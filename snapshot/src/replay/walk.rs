//! The replay's walk over one device's trace from a given start
//! ([`replay_from`]): the allocator set up with the start's memory placed
//! ([`Walk::new`]), then entry by entry ([`Walk::entry`]) each `alloc`,
//! free, run of segment frees and recorded out-of-memory made in the
//! allocator, and after each ([`Walk::after_entry`]) the replay's segment
//! events, the allocation's place and the peaks noted; at the end
//! ([`Walk::finish`]) an assumed empty start confirmed, the totals, the
//! fidelity report and the recording.

use rustc_hash::FxHashMap as HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::feed::Feed;
use super::fidelity::SegmentCheck;
use super::oom::{self, InferredCapacity, ReleaseSummary};
use super::pools::{PoolPlan, malloc_in};
use super::recording::{Recorder, SegmentLog, recording};
use super::report::{ReplayOom, SnapshotReplay, SnapshotReplayError, SnapshotReplayOptions};
use super::rewind::{self, StartState};
use super::states::StateRecorder;
use super::two_step::PendingFrees;
use super::underivable::{TraceStart, underivable_stats};
use crate::format::model::{Action, Snapshot, TraceEntry};
use vramlab_allocator::hooks::Hooks;
use vramlab_allocator::{AllocError, Allocation, AllocatorConfig, CachingAllocator, SimulatedMemory, StreamId};
use vramlab_replay::OnOom;
use vramlab_replay::timeline::{MAX_TIMELINE_POINTS, PeakState, TimelinePoint, TimelineRecorder, peak_state};

/// What `replay_snapshot_timeline` asks of a replay.
pub(crate) struct Track {
    pub(crate) recorder: Option<TimelineRecorder>,
    /// Stop once this many entries are replayed (see [`TimelinePoint::ops`]) and
    /// keep the state then in `peak`.
    pub(crate) stop_after_ops: Option<u64>,
    pub(crate) peak: Option<PeakState>,
    /// The allocator's state at chosen states (the replay page's state at an entry).
    pub(crate) states: Option<StateRecorder>,
}

impl Track {
    /// A track of the timeline, stopping after `stop_after_ops` entries when given.
    pub(crate) fn new(stop_after_ops: Option<u64>) -> Track {
        Track { recorder: None, stop_after_ops, peak: None, states: None }
    }
}

/// What the replay works out before the walk.
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

/// Whether entry `e` is in the replay's time window.
#[inline(always)]
pub(crate) fn in_window(opts: &SnapshotReplayOptions, e: &TraceEntry) -> bool {
    opts.from_us.is_none_or(|f| e.time_us >= f) && opts.to_us.is_none_or(|t| e.time_us <= t)
}

/// The replay from `start`. `assumed`: `start` is empty without a rewind,
/// and the replay stops early, unconfirmed, at the first entry that says
/// otherwise (see `run::replay`).
pub(crate) fn replay_from<F: Feed>(
    snapshot: &Snapshot,
    feed: &mut F,
    opts: &SnapshotReplayOptions,
    mut track: Option<&mut Track>,
    setup: &Setup,
    start: StartState,
    assumed: bool,
) -> Result<Run, SnapshotReplayError> {
    let mut walk = Walk::new(feed, opts, setup, start, assumed)?;
    walk.start_track(feed, track.as_deref_mut());
    let walked = walk.walk(feed, track)?;
    // The whole snapshot (a streamed trace is complete from here on).
    walk.finish(feed.snapshot(snapshot), walked)
}

/// How the walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walked {
    /// Past the trace's last entry.
    Every,
    /// Stopped before it (at an out-of-memory, or where the timeline asked).
    Part,
    /// At an entry that contradicts the assumed empty start.
    Contradicted,
}

/// What one entry's step returns: its error boxed (errors are rare), so that
/// the result of the step made for every entry is a few words, not a
/// [`SnapshotReplayError`]-sized value written and read through memory.
type StepResult<T> = Result<T, Box<SnapshotReplayError>>;

/// What a trace's streams are to the allocator: numbered from 0 as they appear.
struct Streams {
    ids: HashMap<i64, StreamId>,
}

impl Streams {
    #[inline(always)]
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

/// The replay's state on its walk over the trace.
struct Walk<'a> {
    opts: &'a SnapshotReplayOptions,
    setup: &'a Setup<'a>,
    /// The start is assumed empty (see [`replay_from`]).
    assumed: bool,
    raw: Arc<SimulatedMemory>,
    allocator: CachingAllocator,
    log: Arc<SegmentLog>,
    /// The replay's own trace, when it is recorded.
    recorder: Option<Recorder>,
    /// A limit the failed requests can run into: then they are made again.
    limited: bool,
    /// The allocator's own releases are replayed only under the recorded
    /// settings and the recorded (unknown) limit; elsewhere the allocator
    /// releases by itself.
    own_releases_replayed: bool,
    frees: PendingFrees,
    streams: Streams,
    /// The live allocations by recorded address.
    handles: HashMap<u64, Allocation>,
    /// Recorded addresses whose alloc failed in the replay and is not freed yet.
    failed: HashMap<u64, ()>,
    check: SegmentCheck,
    prev_action: Action,
    peak_reserved_seen: u64,
    peak_allocated_seen: u64,
    r: SnapshotReplay,
}

impl<'a> Walk<'a> {
    /// The allocator on a simulated device whose segments take the
    /// recording's addresses, its limit and private pools, and `start`'s
    /// memory placed in it.
    fn new<F: Feed>(
        feed: &mut F,
        opts: &'a SnapshotReplayOptions,
        setup: &'a Setup<'a>,
        start: StartState,
        assumed: bool,
    ) -> Result<Walk<'a>, SnapshotReplayError> {
        let capacity_inferred = setup.capacity_inferred.as_ref();
        // The recording's segment addresses, in order (the start's segments, then
        // the trace's): PyTorch breaks ties between free blocks of one size by
        // address, so the replay must place its segments where the recording's
        // were to choose the same block.
        let plan = start.address_plan().collect();
        let raw = feed.memory(setup.device_bytes, plan, setup.marks, &|e| in_window(opts, e));
        if opts.fresh_addresses_downwards {
            raw.hand_out_downwards();
        }
        // Stream events wait for the trace's free_completed (two_step.rs).
        raw.hold_events(true);
        let hooks = Hooks::new();
        let log = Arc::new(SegmentLog::new(opts.record));
        hooks.subscribe(log.clone());
        let allocator = CachingAllocator::with_hooks(raw.clone(), setup.config.clone(), hooks, setup.device as u32)
            .map_err(SnapshotReplayError::Setup)?;
        if let Some(f) = opts.memory_fraction {
            allocator.set_memory_fraction(f).map_err(SnapshotReplayError::Setup)?;
        } else if let Some(c) = capacity_inferred.filter(|c| c.kind == oom::LimitKind::Fraction) {
            allocator.set_memory_limit(Some(c.bytes));
        }
        for &pool in &setup.pools.pools {
            allocator.create_or_incref_pool(pool).map_err(SnapshotReplayError::Setup)?;
        }
        let limited = opts.capacity_bytes.is_some()
            || opts.memory_fraction.is_some_and(|f| f < 1.0)
            || capacity_inferred.is_some();
        let own_releases_replayed =
            setup.settings_from_snapshot && opts.capacity_bytes.is_none() && opts.memory_fraction.is_none();
        let r = blank_replay(opts, setup, allocator.memory_limit());
        let mut walk = Walk {
            opts,
            setup,
            assumed,
            raw,
            allocator,
            log,
            recorder: opts.record.then(Recorder::default),
            limited,
            own_releases_replayed,
            frees: PendingFrees::default(),
            streams: Streams { ids: HashMap::from_iter([(0, 0)]) },
            handles: HashMap::default(),
            failed: HashMap::default(),
            check: SegmentCheck::new(!setup.config.expandable_segments),
            prev_action: Action::Snapshot,
            peak_reserved_seen: 0,
            peak_allocated_seen: 0,
            r,
        };
        walk.place_start(start)?;
        Ok(walk)
    }

    /// `start`'s memory placed in the allocator, its events and peaks forgotten.
    fn place_start(&mut self, start: StartState) -> Result<(), SnapshotReplayError> {
        let streams = &mut self.streams;
        for (addr, a, frames) in rewind::place(&self.allocator, &self.raw, &start, |raw| streams.id(raw))? {
            if let Some(rec) = self.recorder.as_mut() {
                rec.frames_of.insert(a.addr(), frames);
            }
            self.handles.insert(addr, a);
        }
        self.r.live_at_start = start.live_at_start;
        // The recording starts where the trace does: the placed memory is in its
        // final segments, from which a replay of it rewinds the same start. The
        // segments the placed memory needed are not in the trace: not compared.
        self.log.forget();
        self.allocator.reset_peak_stats();
        self.peak_reserved_seen = self.allocator.memory_reserved();
        self.peak_allocated_seen = self.allocator.memory_allocated();
        Ok(())
    }

    /// The timeline's first point (and the peak state, when it stops there).
    fn start_track<F: Feed>(&self, feed: &mut F, track: Option<&mut Track>) {
        let Some(t) = track else { return };
        let start = feed.whole().iter().position(|e| in_window(self.opts, e)).unwrap_or(0) as u64;
        if let Some(states) = t.states.as_mut() {
            states.at(start, &self.allocator);
        }
        if t.stop_after_ops == Some(start) {
            t.peak = Some(peak_state(&self.allocator, start));
        }
        let (allocated_bytes, reserved_bytes) = (self.allocator.memory_allocated(), self.allocator.memory_reserved());
        t.recorder =
            Some(TimelineRecorder::new(MAX_TIMELINE_POINTS, TimelinePoint::at(start, allocated_bytes, reserved_bytes)));
    }

    /// Every entry in the window, in order, until one ends the walk.
    fn walk<F: Feed>(&mut self, feed: &mut F, mut track: Option<&mut Track>) -> Result<Walked, SnapshotReplayError> {
        let mut next = 0;
        while let Some(&e) = feed.get(next) {
            let i = next as u64;
            next += 1;
            if !in_window(self.opts, &e) {
                continue;
            }
            self.r.entries_in_window += 1;
            let placed = match self.entry(feed, i, &e, track.as_deref_mut()).map_err(|e| *e)? {
                ControlFlow::Continue(placed) => placed,
                ControlFlow::Break(walked) => return Ok(walked),
            };
            if let ControlFlow::Break(walked) = self.after_entry(i, &e, placed, track.as_deref_mut()) {
                return Ok(walked);
            }
        }
        Ok(Walked::Every)
    }

    /// Entry `e` (index `i`) made in the allocator; for an `alloc`, where it
    /// was recorded and where the replay put it.
    #[inline(always)]
    fn entry<F: Feed>(
        &mut self,
        feed: &mut F,
        i: u64,
        e: &TraceEntry,
        track: Option<&mut Track>,
    ) -> StepResult<ControlFlow<Walked, Option<(u64, u64)>>> {
        let free_on_completed = self.setup.free_on_completed;
        let frees_at = if free_on_completed { Action::FreeCompleted } else { Action::FreeRequested };
        match e.action {
            Action::Alloc => return self.alloc(i, e, track),
            Action::FreeRequested if free_on_completed => self.free_requested(feed, i, e)?,
            a if a == frees_at => {
                if let ControlFlow::Break(walked) = self.free(i, e)? {
                    return Ok(ControlFlow::Break(walked));
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => self.segment_free(feed, i, e),
            Action::SegmentAlloc | Action::SegmentMap => self.check.recorded_alloc(i, e),
            Action::Oom => self.recorded_oom(i, e, track)?,
            // A capture's mark of the program's `empty_cache()`.
            Action::EmptyCache => self.allocator.empty_cache(),
            _ => {}
        }
        Ok(ControlFlow::Continue(None))
    }

    /// Notes a skipped entry (one that made no sense).
    fn skip(&mut self, what: String) {
        self.r.skipped_entries += 1;
        if self.r.first_skipped.is_none() {
            self.r.first_skipped = Some(what);
        }
    }

    /// An `alloc`: the request made (in its private pool, if any); a failure
    /// is an out-of-memory of the replay.
    #[inline(always)]
    fn alloc(
        &mut self,
        i: u64,
        e: &TraceEntry,
        track: Option<&mut Track>,
    ) -> StepResult<ControlFlow<Walked, Option<(u64, u64)>>> {
        self.r.allocs += 1;
        // An alloc at an address live already (or whose free is still
        // waiting, or whose alloc failed and was not freed) contradicts
        // an assumed empty start.
        if self.assumed && ((!self.failed.is_empty() && self.failed.contains_key(&e.addr)) || self.frees.holds(e.addr))
        {
            return Ok(ControlFlow::Break(Walked::Contradicted));
        }
        if let Some(old) = self.handles.remove(&e.addr) {
            if self.assumed {
                return Ok(ControlFlow::Break(Walked::Contradicted));
            }
            self.skip(format!(
                "entry {i}: alloc at {:#x}, which is live already; the older block is freed first",
                e.addr
            ));
            self.allocator.free(old).map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
        }
        let stream = self.streams.id(e.stream)?;
        let size = request_size(self.opts, i, e);
        match malloc_in(&self.allocator, size, stream, self.setup.pools.pool_of_entry(i as usize)) {
            Ok(a) => {
                let placed = (e.addr, a.addr());
                self.handles.insert(e.addr, a);
                Ok(ControlFlow::Continue(Some(placed)))
            }
            Err(AllocError::OutOfMemory(err)) => {
                if let Some(rec) = track.and_then(|t| t.recorder.as_mut()) {
                    rec.oom(&self.allocator, (i, None, self.setup.device as u32), size, err.to_string());
                }
                self.r.ooms.push(ReplayOom {
                    trace_index: i,
                    time_us: e.time_us,
                    requested_bytes: size,
                    frames: e.frames,
                    message: err.to_string(),
                });
                self.failed.insert(e.addr, ());
                if self.opts.on_oom == OnOom::Stop {
                    self.r.stopped_early = true;
                    return Ok(ControlFlow::Break(Walked::Part));
                }
                Ok(ControlFlow::Continue(None))
            }
            Err(source) => Err(Box::new(SnapshotReplayError::Allocator { index: i, source })),
        }
    }

    /// A `free_requested` in a trace whose frees complete apart: the two-step
    /// free (two_step.rs), allocated no more from here.
    #[inline(always)]
    fn free_requested<F: Feed>(&mut self, feed: &mut F, i: u64, e: &TraceEntry) -> StepResult<()> {
        if let Some(h) = self.handles.remove(&e.addr) {
            let after = feed.get(i as usize + 1);
            let now = after.is_some_and(|n| n.action == Action::FreeCompleted && n.addr == e.addr);
            self.frees
                .request(&self.allocator, e.addr, h, now)
                .map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
        }
        Ok(())
    }

    /// The free that makes a block reusable (`free_completed`, or
    /// `free_requested` in traces without completions).
    #[inline(always)]
    fn free(&mut self, i: u64, e: &TraceEntry) -> StepResult<ControlFlow<Walked>> {
        self.r.frees += 1;
        if self.frees.complete(&self.allocator, &self.raw, e.addr) {
            // Requested before: done now.
        } else if let Some(h) = self.handles.remove(&e.addr) {
            self.allocator.free(h).map_err(|source| SnapshotReplayError::Allocator { index: i, source })?
        } else if self.failed.remove(&e.addr).is_none() {
            if self.assumed {
                return Ok(ControlFlow::Break(Walked::Contradicted));
            }
            self.skip(format!("entry {i}: {} of {:#x}, which is not live", e.action.as_str(), e.addr));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// A recorded segment free (or unmapping). A run of them is a release of
    /// cached blocks: the program's `empty_cache()` is made where it was
    /// recorded, the allocator's own are left to the replayed allocator.
    fn segment_free<F: Feed>(&mut self, feed: &mut F, i: u64, e: &TraceEntry) {
        self.check.recorded_free(i, e);
        if self.prev_action == e.action {
            return;
        }
        let kind = feed.classify_run(i as usize, &|e| in_window(self.opts, e));
        if !self.r.releases.count(kind, self.limited, self.own_releases_replayed) {
            return;
        }
        // Pools whose segments this run frees were freeable then.
        let run = feed.run_len(i as usize);
        let pools = self.setup.pools;
        let mut freeable: Vec<_> =
            (i as usize..i as usize + run).flat_map(|k| pools.freeable_for(k).iter().copied()).collect();
        freeable.sort_unstable();
        freeable.dedup();
        for &p in &freeable {
            let _ = self.allocator.release_pool(p);
        }
        self.allocator.empty_cache();
        for &p in &freeable {
            let _ = self.allocator.create_or_incref_pool(p);
        }
    }

    /// A recorded `oom` entry: its request made again where a limit can fail it.
    fn recorded_oom(&mut self, i: u64, e: &TraceEntry, track: Option<&mut Track>) -> StepResult<()> {
        self.r.recorded_ooms += 1;
        if !self.limited {
            return Ok(());
        }
        let stream = self.streams.id(e.stream)?;
        let e = &TraceEntry { size: request_size(self.opts, i, e), ..*e };
        let request = oom::replay_request(&self.allocator, e, i, stream)
            .map_err(|source| SnapshotReplayError::Allocator { index: i, source })?;
        if let (Some(message), Some(rec)) = (&request.message, track.and_then(|t| t.recorder.as_mut())) {
            rec.oom(&self.allocator, (i, None, self.setup.device as u32), e.size, message.clone());
        }
        self.r.oom_requests.push(request);
        Ok(())
    }

    /// After entry `e` (index `i`): the replay's segment events and the
    /// allocation's place (`placed`) compared, the peaks and the timeline
    /// noted; a break where the timeline asks the walk to stop.
    #[inline(always)]
    fn after_entry(
        &mut self,
        i: u64,
        e: &TraceEntry,
        placed: Option<(u64, u64)>,
        track: Option<&mut Track>,
    ) -> ControlFlow<Walked> {
        self.prev_action = e.action;
        if let Some(rec) = self.recorder.as_mut() {
            rec.take(&self.log, e.time_us, e.frames);
        }
        let (check, r) = (&mut self.check, &mut self.r);
        self.log.drain_segment_events(|a, size, addr| {
            if check.replayed(i, a, size, addr) {
                r.segment_allocs += 1;
            }
        });
        if let Some((recorded_addr, replayed_addr)) = placed {
            self.check.placed(i, e.size, recorded_addr, replayed_addr);
        }
        let (allocated, reserved) = self.allocator.memory_allocated_and_reserved();
        if reserved > self.peak_reserved_seen {
            self.peak_reserved_seen = reserved;
            self.r.largest_free_block_at_peak_bytes = self.allocator.largest_free_block();
            self.r.fragmentation_at_peak_bytes = reserved - allocated;
        }
        if allocated > self.peak_allocated_seen {
            self.peak_allocated_seen = allocated;
            self.r.peak_allocated_index = Some(i);
        }
        if let Some(t) = track {
            if let Some(rec) = t.recorder.as_mut() {
                rec.op(i + 1, allocated, reserved);
            }
            if let Some(states) = t.states.as_mut() {
                states.at(i + 1, &self.allocator);
            }
            if t.stop_after_ops == Some(i + 1) {
                t.peak = Some(peak_state(&self.allocator, i + 1));
                return ControlFlow::Break(Walked::Part);
            }
        }
        ControlFlow::Continue(())
    }

    /// Whether what the blocks live at the end say confirms an assumed empty
    /// start (`walked`: how the walk ended).
    fn start_confirmed(&self, snapshot: &Snapshot, walked: Walked) -> bool {
        let (device, trace) = (self.setup.device, &snapshot.device_traces[self.setup.device]);
        match walked {
            Walked::Contradicted => false,
            Walked::Every => {
                let live = self.handles.len() + self.failed.len() + self.frees.len();
                rewind::final_blocks_match(snapshot, device, live, |a| {
                    self.handles.contains_key(&a) || self.failed.contains_key(&a) || self.frees.holds(a)
                })
            }
            Walked::Part => rewind::blocks_start_empty(snapshot, device, trace, self.setup.free_on_completed),
        }
    }

    /// The outcome, once the walk ended as `walked`, against the whole `snapshot`.
    fn finish(mut self, snapshot: &Snapshot, walked: Walked) -> Result<Run, SnapshotReplayError> {
        let (device, windowed) = (self.setup.device, self.setup.windowed);
        let r = &mut self.r;
        r.entries = snapshot.device_traces[device].len() as u64;
        r.devices_with_entries = snapshot.device_traces.iter().filter(|t| !t.is_empty()).count() as u64;
        r.private_pools = snapshot.private_pools(device as i64);
        if self.assumed && !self.start_confirmed(snapshot, walked) {
            return Ok(Run { replay: self.r, start_confirmed: false });
        }
        let (allocator, r) = (&self.allocator, &mut self.r);
        r.peak_allocated_bytes = allocator.max_memory_allocated();
        r.peak_reserved_bytes = allocator.max_memory_reserved();
        r.final_allocated_bytes = allocator.memory_allocated();
        r.final_reserved_bytes = allocator.memory_reserved();
        r.final_memory_stats = allocator.stats().flatten();
        r.frees_deferred = self.frees.deferred;
        let live_before = r.live_at_start.blocks_in_segments + r.live_at_start.freed_without_alloc > 0
            || r.pool_inference.live_at_start > 0;
        r.underivable_stats = underivable_stats(&r.final_memory_stats, TraceStart { live_before, windowed });
        r.frees_pending_at_end = self.frees.waiting();
        let opts = self.opts;
        // An estimate holds nothing PyTorch recorded to check against.
        if !windowed
            && snapshot.estimate.is_none()
            && self.setup.settings_from_snapshot
            && opts.capacity_bytes.is_none()
            && opts.memory_fraction.is_none()
            && !r.stopped_early
        {
            r.fidelity = Some(self.check.report(snapshot, device, allocator));
        }
        if let Some(rec) = self.recorder {
            r.recording = Some(recording(snapshot, device, allocator, self.setup.config, rec));
        }
        for (_, h) in self.handles.drain() {
            let _ = allocator.free(h);
        }
        Ok(Run { replay: self.r, start_confirmed: true })
    }
}

/// The outcome before the walk: what the setup says, every count at zero.
fn blank_replay(opts: &SnapshotReplayOptions, setup: &Setup, memory_limit_bytes: Option<u64>) -> SnapshotReplay {
    SnapshotReplay {
        device: setup.device,
        device_chosen: setup.device_chosen,
        devices_with_entries: 0,
        alloc_conf: setup.config.to_string(),
        settings_from_snapshot: setup.settings_from_snapshot,
        capacity_bytes: opts.capacity_bytes.or(setup.capacity_inferred.as_ref().map(|_| setup.device_bytes)),
        entries: 0,
        entries_in_window: 0,
        allocs: 0,
        frees: 0,
        live_at_start: Default::default(),
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
        memory_limit_bytes,
        capacity_inferred: setup.capacity_inferred.clone(),
        capacity_not_inferred: setup.capacity_not_inferred.clone(),
        oom_requests: Vec::new(),
        releases: ReleaseSummary::default(),
        private_pools: Vec::new(),
        pool_inference: setup.pools.inference.clone(),
        frees_deferred: 0,
        frees_pending_at_end: 0,
        peak_allocated_index: None,
        fidelity: None,
        final_memory_stats: Default::default(),
        underivable_stats: Vec::new(),
        recording: None,
    }
}

/// The bytes entry `i` requests: the trace's, or the scaled size given.
#[inline]
fn request_size(opts: &SnapshotReplayOptions, i: u64, e: &TraceEntry) -> u64 {
    opts.request_sizes.as_ref().and_then(|s| s.get(i as usize)).copied().unwrap_or(e.size)
}
