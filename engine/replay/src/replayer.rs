//! The replay itself: [`replay`] and [`replay_with_timeline`] run a trace's
//! lines through one [`CachingAllocator`] per device, each over a
//! [`SimulatedMemory`], keeping the live ids, the recent frees (for messages)
//! and every out-of-memory.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::sync::Arc;

use vramlab_allocator::hooks::Tag;
use vramlab_allocator::{AllocError, Allocation, CachingAllocator, MAX_REQUEST, PoolFilter, SimulatedMemory, StreamId};

use crate::error::ReplayError;
use crate::line::Line;
use crate::report::{
    DeviceReport, MAX_BYTES, MAX_DEVICES, MAX_LINE_BYTES, MAX_OOM_RECORDS, OnOom, OomRecord, ReplayOptions,
    ReplayReport, TooLargeRecord,
};
use crate::timeline::{MAX_TIMELINE_POINTS, ReplayTimeline, TimelinePoint, TimelineRecorder, peak_state};

/// The replay remembers at least this many of the latest frees for its
/// "already freed at line N" messages (and at most twice as many).
const FREED_IDS_REMEMBERED: usize = 1 << 16;

/// Replays a version-1 trace (see the [module docs](self)) and reports the
/// allocator's state at the end.
pub fn replay<R: BufRead>(input: R, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let mut replayer = Replayer::new(opts)?;
    replayer.run(input)?;
    Ok(replayer.finish())
}

/// [`replay`], and device 0's memory over the replay: allocated and reserved
/// bytes after every op, the segments at the reserved peak and the
/// fragmentation figures of every out-of-memory. The trace is in memory because
/// the segments at the peak are taken by a second replay that stops there
/// (replays are deterministic), so the first needs no copy of every state.
pub fn replay_with_timeline(trace: &[u8], opts: &ReplayOptions) -> Result<(ReplayReport, ReplayTimeline), ReplayError> {
    let mut replayer = Replayer::new(opts)?;
    replayer.track = Some(TimelineRecorder::new(MAX_TIMELINE_POINTS, TimelinePoint::default()));
    replayer.run(trace)?;
    let track = replayer.track.take().expect("set above");
    let peak_ops = track.peak_ops;
    let report = replayer.finish();
    let mut timeline = track.finish();
    if let Some(ops) = peak_ops {
        let mut again = Replayer::new(opts)?;
        again.stop_after_ops = Some(ops);
        again.run(trace)?;
        timeline.peak = Some(peak_state(&again.device0().allocator, ops));
    }
    Ok((report, timeline))
}

// ----- replaying -----

/// An id the trace holds live.
#[derive(Debug)]
enum Slot {
    Live {
        allocation: Allocation,
        line: u64,
        /// Index into `Replayer::devices`.
        device: u32,
    },
    /// Its alloc ran out of memory (with [`OnOom::Continue`]).
    Failed { line: u64 },
}

enum Flow {
    Go,
    Stop,
}

/// One simulated device of a replay and its allocator.
struct ReplayDevice {
    raw: Arc<SimulatedMemory>,
    allocator: CachingAllocator,
}

struct Replayer<'o> {
    opts: &'o ReplayOptions,
    /// Device `i` of the trace at index `i`; created on first use.
    devices: Vec<Option<ReplayDevice>>,
    live: HashMap<u64, Slot>,
    /// id → line of its last free, for messages: the recent frees, in two
    /// generations so that the memory stays small (and in cache) on long traces.
    freed: HashMap<u64, u64>,
    freed_before: HashMap<u64, u64>,
    events: u64,
    lines: u64,
    last_reset_peak_line: Option<u64>,
    stopped_early: bool,
    ooms: Vec<OomRecord>,
    ooms_not_recorded: u64,
    too_large: Vec<TooLargeRecord>,
    too_large_not_recorded: u64,
    /// Device 0's memory after every op, when asked ([`replay_with_timeline`]).
    track: Option<TimelineRecorder>,
    /// End the replay once this many ops have been applied.
    stop_after_ops: Option<u64>,
}

impl<'o> Replayer<'o> {
    fn new(opts: &'o ReplayOptions) -> Result<Self, ReplayError> {
        if let Some(capacity_bytes) = opts.capacity_bytes
            && capacity_bytes > MAX_BYTES
        {
            return Err(ReplayError::CapacityTooLarge { capacity_bytes });
        }
        let device0 = Self::new_device(opts).map_err(ReplayError::Setup)?;
        Ok(Replayer {
            opts,
            devices: vec![Some(device0)],
            live: HashMap::new(),
            freed: HashMap::new(),
            freed_before: HashMap::new(),
            events: 0,
            lines: 0,
            last_reset_peak_line: None,
            stopped_early: false,
            ooms: Vec::new(),
            ooms_not_recorded: 0,
            too_large: Vec::new(),
            too_large_not_recorded: 0,
            track: None,
            stop_after_ops: None,
        })
    }

    /// A simulated device of the replay's capacity. Its stream events are held until
    /// a `stream_done` op (or a synchronizing allocator call) completes them; only
    /// `record_stream` ever records one.
    fn new_device(opts: &ReplayOptions) -> Result<ReplayDevice, AllocError> {
        let raw = Arc::new(SimulatedMemory::with_capacity(opts.capacity_bytes.unwrap_or(MAX_BYTES)));
        raw.hold_events(true);
        let allocator = CachingAllocator::new(raw.clone(), opts.config.clone())?;
        Ok(ReplayDevice { raw, allocator })
    }

    /// The device a line names (`device`, default 0), created on first use.
    fn device(&mut self, line: u64, parsed: &Line<'_>) -> Result<&ReplayDevice, ReplayError> {
        let index = parsed.device.unwrap_or(0);
        if index >= MAX_DEVICES as u64 {
            return Err(ReplayError::BadDevice { line, device: index });
        }
        let index = index as usize;
        if self.devices.len() <= index {
            self.devices.resize_with(index + 1, || None);
        }
        if self.devices[index].is_none() {
            self.devices[index] = Some(Self::new_device(self.opts).map_err(ReplayError::Setup)?);
        }
        Ok(self.devices[index].as_ref().expect("created above"))
    }

    fn device0(&self) -> &ReplayDevice {
        self.devices[0].as_ref().expect("device 0 always exists")
    }

    fn run<R: BufRead>(&mut self, mut input: R) -> Result<(), ReplayError> {
        let mut buf = Vec::with_capacity(256);
        loop {
            buf.clear();
            // At most one byte past the limit: a huge file without newlines must
            // not be read into memory whole.
            let read = (&mut input)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|source| ReplayError::Io { line: self.lines + 1, source })?;
            if read == 0 {
                return Ok(());
            }
            self.lines += 1;
            if buf.len() > MAX_LINE_BYTES {
                return Err(ReplayError::LineTooLong { line: self.lines, limit: MAX_LINE_BYTES });
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Flow::Stop = self.apply_line(&buf)? {
                // The replay ends here; the rest of the input is not read.
                self.stopped_early = true;
                return Ok(());
            }
            if self.stop_after_ops.is_some_and(|n| self.events >= n) {
                return Ok(());
            }
        }
    }

    /// Applies one line: parses it, applies its op, and records device 0's memory
    /// after it when a timeline is kept.
    fn apply_line(&mut self, text: &[u8]) -> Result<Flow, ReplayError> {
        let line = self.lines;
        let parsed = Line::parse(line, text)?;
        let flow = self.apply_op(line, &parsed)?;
        self.events += 1;
        self.track_memory();
        Ok(flow)
    }

    /// Applies a parsed line's op.
    #[inline]
    fn apply_op(&mut self, line: u64, parsed: &Line<'_>) -> Result<Flow, ReplayError> {
        let Some(op) = &parsed.op else {
            return Err(ReplayError::MissingField { line, op: None, field: "op" });
        };
        let flow = match &*op.0 {
            "alloc" => self.alloc(line, parsed)?,
            "free" => {
                let id = parsed.id.ok_or(ReplayError::MissingField { line, op: Some("free"), field: "id" })?;
                self.free(line, id)?;
                Flow::Go
            }
            "empty_cache" => {
                let allocator = &self.device(line, parsed)?.allocator;
                match parsed.pool {
                    Some([a, b]) => allocator.empty_cache_pool((a, b)),
                    None => allocator.empty_cache(),
                }
                Flow::Go
            }
            op @ ("create_pool"
            | "begin_allocate_to_pool"
            | "end_allocate_to_pool"
            | "release_pool"
            | "delete_pool") => {
                self.pool_op(line, op, parsed)?;
                Flow::Go
            }
            "reset_peak" => {
                self.device(line, parsed)?.allocator.reset_peak_stats();
                self.last_reset_peak_line = Some(line);
                Flow::Go
            }
            "record_stream" => {
                let missing = |field| ReplayError::MissingField { line, op: Some("record_stream"), field };
                let id = parsed.id.ok_or_else(|| missing("id"))?;
                let stream = parsed.stream.ok_or_else(|| missing("stream"))?;
                self.record_stream(line, id, stream)?;
                Flow::Go
            }
            "stream_done" => {
                let device = self.device(line, parsed)?;
                match parsed.stream {
                    Some(stream) => device.raw.complete_stream_events(stream),
                    None => device.raw.complete_events(),
                }
                Flow::Go
            }
            "set_memory_fraction" => {
                let fraction = parsed.fraction.ok_or(ReplayError::MissingField {
                    line,
                    op: Some("set_memory_fraction"),
                    field: "fraction",
                })?;
                let device = self.device(line, parsed)?;
                device
                    .allocator
                    .set_memory_fraction(fraction)
                    .map_err(|source| ReplayError::Allocator { line, source })?;
                Flow::Go
            }
            "set_allocator_settings" => {
                let Some(settings) = &parsed.settings else {
                    return Err(ReplayError::MissingField {
                        line,
                        op: Some("set_allocator_settings"),
                        field: "settings",
                    });
                };
                let settings = settings.0.clone();
                let device = self.device(line, parsed)?;
                device
                    .allocator
                    .set_allocator_settings(&settings)
                    .map_err(|source| ReplayError::Allocator { line, source })?;
                Flow::Go
            }
            other => return Err(ReplayError::UnknownOp { line, op: other.to_owned() }),
        };
        Ok(flow)
    }

    /// Device 0's memory after the op just applied, when a timeline is kept.
    #[inline]
    fn track_memory(&mut self) {
        if self.track.is_some() {
            let allocator = &self.device0().allocator;
            let (allocated, reserved) = (allocator.memory_allocated(), allocator.memory_reserved());
            if let Some(track) = self.track.as_mut() {
                track.op(self.events, allocated, reserved);
            }
        }
    }

    /// The private-pool ops (see the module docs).
    fn pool_op(&mut self, line: u64, op: &str, parsed: &Line<'_>) -> Result<(), ReplayError> {
        let op: &'static str = match op {
            "create_pool" => "create_pool",
            "begin_allocate_to_pool" => "begin_allocate_to_pool",
            "end_allocate_to_pool" => "end_allocate_to_pool",
            "release_pool" => "release_pool",
            _ => "delete_pool",
        };
        let [a, b] = parsed.pool.ok_or(ReplayError::MissingField { line, op: Some(op), field: "pool" })?;
        let pool = (a, b);
        let allocator = &self.device(line, parsed)?.allocator;
        let result = match op {
            "create_pool" => {
                allocator.create_mem_pool(pool, parsed.use_on_oom.unwrap_or(false), parsed.no_split.unwrap_or(false))
            }
            "begin_allocate_to_pool" => {
                let filter = match &parsed.streams {
                    Some(streams) => PoolFilter::Streams(streams.clone()),
                    None => PoolFilter::AllStreams,
                };
                allocator.begin_allocate_to_pool(pool, filter)
            }
            "end_allocate_to_pool" => allocator.end_allocate_to_pool(pool),
            "release_pool" => allocator.release_pool(pool),
            _ => allocator
                .set_use_on_oom(pool, false)
                .and_then(|()| allocator.release_pool(pool))
                .map(|()| allocator.empty_cache_pool(pool)),
        };
        result.map_err(|source| ReplayError::Allocator { line, source })
    }

    fn alloc(&mut self, line: u64, parsed: &Line<'_>) -> Result<Flow, ReplayError> {
        let missing = |field| ReplayError::MissingField { line, op: Some("alloc"), field };
        let id = parsed.id.ok_or_else(|| missing("id"))?;
        let size = parsed.size.ok_or_else(|| missing("size"))?.bytes(line)?;
        let stream = parsed.stream.unwrap_or(0);
        let tag = match &parsed.tag {
            None => None,
            Some(name) => Some(
                Tag::from_name(&name.0)
                    .ok_or_else(|| ReplayError::UnknownTag { line, tag: name.0.clone().into_owned() })?,
            ),
        };
        if let Some(slot) = self.live.get(&id) {
            let (allocated_at, failed) = match slot {
                Slot::Live { line, .. } => (*line, false),
                Slot::Failed { line } => (*line, true),
            };
            return Err(ReplayError::IdInUse { line, id, allocated_at, failed });
        }
        let device_index = parsed.device.unwrap_or(0) as u32;
        let device = self.device(line, parsed)?;
        let result = device.allocator.malloc(size, stream, tag);
        let stats_after = matches!(result, Err(AllocError::OutOfMemory(_))).then(|| device.allocator.stats().flatten());
        if let (Some(track), Err(AllocError::OutOfMemory(error))) = (self.track.as_mut(), &result) {
            let device = self.devices[device_index as usize].as_ref().expect("created above");
            track.oom(&device.allocator, (self.events, Some(line), device_index), size, error.to_string());
        }
        match result {
            Ok(allocation) => {
                self.live.insert(id, Slot::Live { allocation, line, device: device_index });
                Ok(Flow::Go)
            }
            Err(AllocError::OutOfMemory(error)) => {
                if self.ooms.len() < MAX_OOM_RECORDS {
                    self.ooms.push(OomRecord {
                        event_index: self.events,
                        device: device_index,
                        line,
                        requested_bytes: size,
                        error: *error,
                        memory_stats: stats_after.expect("taken for an out-of-memory"),
                    });
                } else {
                    self.ooms_not_recorded += 1;
                }
                Ok(self.after_failed_alloc(id, line))
            }
            Err(error @ AllocError::RequestTooLarge { .. }) => {
                // PyTorch's `OutOfMemoryError` from before the allocator: data, like an OOM.
                debug_assert!(size >= MAX_REQUEST);
                if self.too_large.len() < MAX_OOM_RECORDS {
                    self.too_large.push(TooLargeRecord {
                        event_index: self.events,
                        line,
                        requested_bytes: size,
                        message: error.to_string(),
                    });
                } else {
                    self.too_large_not_recorded += 1;
                }
                Ok(self.after_failed_alloc(id, line))
            }
            Err(source) => Err(ReplayError::Allocator { line, source }),
        }
    }

    /// What follows an alloc that failed as data (out of memory, or a request too
    /// large): the replay stops, or goes on with `id` marked failed.
    fn after_failed_alloc(&mut self, id: u64, line: u64) -> Flow {
        match self.opts.on_oom {
            OnOom::Stop => Flow::Stop,
            OnOom::Continue => {
                self.live.insert(id, Slot::Failed { line });
                Flow::Go
            }
        }
    }

    /// `record_stream` on a live id (ignored for an id whose alloc ran out of memory).
    fn record_stream(&mut self, line: u64, id: u64, stream: StreamId) -> Result<(), ReplayError> {
        match self.live.get(&id) {
            Some(Slot::Live { allocation, device, .. }) => {
                let device = self.devices[*device as usize].as_ref().expect("an allocation's device exists");
                device.allocator.record_stream(allocation, stream);
                Ok(())
            }
            Some(Slot::Failed { .. }) => Ok(()),
            None => {
                let freed_at = self.freed.get(&id).or_else(|| self.freed_before.get(&id)).copied();
                Err(ReplayError::RecordStreamNotLive { line, id, freed_at })
            }
        }
    }

    fn free(&mut self, line: u64, id: u64) -> Result<(), ReplayError> {
        match self.live.remove(&id) {
            Some(Slot::Live { allocation, device, .. }) => {
                let device = self.devices[device as usize].as_ref().expect("an allocation's device exists");
                device.allocator.free(allocation).map_err(|source| ReplayError::Allocator { line, source })?;
            }
            // The allocation never happened: nothing to give back.
            Some(Slot::Failed { .. }) => {}
            None => {
                let freed_at = self.freed.get(&id).or_else(|| self.freed_before.get(&id)).copied();
                return Err(ReplayError::NotLive { line, id, freed_at });
            }
        }
        if self.freed.len() >= FREED_IDS_REMEMBERED {
            std::mem::swap(&mut self.freed, &mut self.freed_before);
            self.freed.clear();
        }
        self.freed.insert(id, line);
        Ok(())
    }

    fn finish(self) -> ReplayReport {
        let devices = self
            .devices
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| (i as u32, d)))
            .map(|(device, d)| {
                let stats = d.allocator.stats();
                DeviceReport {
                    device,
                    current_allocated_bytes: stats.memory_allocated(),
                    peak_allocated_bytes: stats.max_memory_allocated(),
                    current_reserved_bytes: stats.memory_reserved(),
                    peak_reserved_bytes: stats.max_memory_reserved(),
                    memory_stats: stats.flatten(),
                }
            })
            .collect();
        let stats = self.device0().allocator.stats();
        let summary = self.device0().allocator.memory_summary(false);
        let live_allocations = self.live.values().filter(|s| matches!(s, Slot::Live { .. })).count() as u64;
        ReplayReport {
            events: self.events,
            lines: self.lines,
            stopped_early: self.stopped_early,
            current_allocated_bytes: stats.memory_allocated(),
            peak_allocated_bytes: stats.max_memory_allocated(),
            current_reserved_bytes: stats.memory_reserved(),
            peak_reserved_bytes: stats.max_memory_reserved(),
            live_allocations,
            last_reset_peak_line: self.last_reset_peak_line,
            ooms: self.ooms,
            ooms_not_recorded: self.ooms_not_recorded,
            too_large: self.too_large,
            too_large_not_recorded: self.too_large_not_recorded,
            memory_stats: stats.flatten(),
            summary,
            devices,
        }
    }
}
