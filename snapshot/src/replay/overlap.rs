//! Reading a snapshot and replaying it at once, on two threads: the reader
//! sends the first device trace's entries as it reads them ([`Message`]), and
//! the replay runs on them as they come ([`StreamFeed`]), so that reading and
//! replaying a large file take about as long as the slower of the two.
//!
//! The replay cannot wait for what only the end of the file says, so it
//! assumes what most recordings are: the trace it gets is the busiest
//! device's, the allocator settings are the ones read from the file's tail
//! ([`peek_allocator_settings`](crate::format::import::peek_allocator_settings)) or PyTorch's
//! defaults, frees complete apart from their requests (`free_completed`), no
//! out-of-memory was recorded, no private pool is in use, and nothing was
//! live before the first entry. Once the whole snapshot is read, each of
//! these is checked, and so is that every segment took its recorded address
//! (the address plan arrives with the entries). If all hold, the replay is the
//! one [`replay_snapshot`] makes — the same function on the same inputs;
//! otherwise the snapshot, now whole, is replayed again the usual way. Either
//! way the result is [`replay_snapshot`]'s (a test compares them on every
//! fixture).

use std::io::Read;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};

use super::feed::Feed;
use super::oom::{self, ReleaseKind};
use super::pools::PoolPlan;
use super::report::{SnapshotReplay, SnapshotReplayError, SnapshotReplayOptions};
use super::rewind;
use super::run::{replay_snapshot, trace_marks};
use super::walk::{Run, Setup, replay_from};
use crate::format::error::SnapshotError;
use crate::format::import::{read_snapshot_streaming, read_snapshot_with};
use crate::format::model::{Action, Snapshot, TraceEntry};
use crate::format::pickle::ReadOptions;
use crate::format::stream::Message;
use vramlab_allocator::{AllocatorConfig, SimulatedMemory};
use vramlab_replay::MAX_BYTES;

/// How many messages may wait unread (each up to 64 Ki entries, 2.5 MiB).
const QUEUE: usize = 8;

/// Reads a snapshot from `input` and replays it with `opts`, the two at once
/// where `opts` is a plain replay (no device, window, capacity, settings or
/// sizes of its own; see the module docs), one after the other otherwise.
/// `settings` is what the file's tail says of the allocator settings, if
/// known. The snapshot comes back whole, with the replay's result; an error
/// reading it is the error.
#[allow(clippy::type_complexity)]
pub fn read_and_replay<R: Read + Send>(
    input: R,
    read: ReadOptions,
    settings: Option<AllocatorConfig>,
    opts: &SnapshotReplayOptions,
) -> Result<(Snapshot, Result<SnapshotReplay, SnapshotReplayError>), SnapshotError> {
    let plain = SnapshotReplayOptions {
        on_oom: opts.on_oom,
        no_capacity_inference: opts.no_capacity_inference,
        ..Default::default()
    };
    if *opts != plain || read.from_us.is_some() {
        let snap = read_snapshot_with(input, read)?;
        let replay = replay_snapshot(&snap, opts);
        return Ok((snap, replay));
    }
    let (tx, rx) = sync_channel(QUEUE);
    std::thread::scope(|scope| {
        let done = tx.clone();
        scope.spawn(move || {
            let read = read_snapshot_streaming(input, read, tx);
            let _ = done.send(Message::Done(Box::new(read)));
        });
        let mut feed = StreamFeed::new(rx);
        let config = settings.unwrap_or_default();
        let guess = feed.device().map(|device| replay_streamed(&mut feed, device, &config, opts));
        let snap = feed.finish()?;
        if let Some((device, Ok(run))) = guess
            && let Some(plan) = holds(&snap, device, &config, &feed)
            && run.start_confirmed
        {
            let mut r = run.replay;
            r.pool_inference = plan.inference;
            return Ok((snap, Ok(r)));
        }
        let replay = replay_snapshot(&snap, opts);
        Ok((snap, replay))
    })
}

/// The replay of the streamed trace of `device`, under the assumptions of the
/// module docs.
fn replay_streamed(
    feed: &mut StreamFeed,
    device: usize,
    config: &AllocatorConfig,
    opts: &SnapshotReplayOptions,
) -> (usize, Result<Run, SnapshotReplayError>) {
    let pools = PoolPlan::default();
    let setup = Setup {
        device,
        device_chosen: true,
        windowed: false,
        config,
        settings_from_snapshot: true,
        capacity_inferred: None,
        capacity_not_inferred: None,
        device_bytes: MAX_BYTES,
        free_on_completed: true,
        pools: &pools,
        marks: &[],
    };
    let mut partial = Snapshot::of_one_device(Vec::new(), Vec::new(), Default::default());
    partial.device_traces = vec![Vec::new(); device + 1];
    let run = replay_from(&partial, feed, opts, None, &setup, rewind::StartState::default(), true);
    (device, run)
}

/// Whether what the streamed replay assumed holds for the whole snapshot
/// `snap`: then the pool plan (default pools only), for its figures.
fn holds(snap: &Snapshot, device: usize, config: &AllocatorConfig, feed: &StreamFeed) -> Option<PoolPlan> {
    if snap.busiest_device() != Some(device) {
        return None;
    }
    let recorded = snap.allocator_settings.as_ref().map(|s| s.to_config()).unwrap_or_default();
    if recorded != *config {
        return None;
    }
    let trace = &snap.device_traces[device];
    let (marks, free_on_completed) = trace_marks(trace);
    // A recorded OOM: the capacity is inferred from it.
    if marks.iter().any(|&i| trace[i].action == Action::Oom) {
        return None;
    }
    if !free_on_completed || !rewind::segments_start_empty(snap, device, trace, &marks) {
        return None;
    }
    // Every segment took the recorded address, as with the whole plan known.
    if feed.memory.as_ref().is_none_or(|m| m.fresh_address_ranges() != 0) {
        return None;
    }
    let plan = PoolPlan::new(snap, device, &marks);
    plan.default_pool_only().then_some(plan)
}

/// A device trace still being read: entries as they arrive, waited for.
pub(crate) struct StreamFeed {
    rx: Receiver<Message>,
    trace: Vec<TraceEntry>,
    /// What each stack names ([`stack_flags`](crate::format::stream::stack_flags)), by stack id.
    flags: Vec<u8>,
    device: Option<usize>,
    /// The simulated device, whose address plan grows with the entries.
    memory: Option<Arc<SimulatedMemory>>,
    /// The rest of the snapshot once read (or why it could not be).
    done: Option<Result<(Snapshot, Option<usize>), SnapshotError>>,
    /// The snapshot made whole with the trace.
    whole: Option<Snapshot>,
}

impl StreamFeed {
    fn new(rx: Receiver<Message>) -> StreamFeed {
        StreamFeed { rx, trace: Vec::new(), flags: Vec::new(), device: None, memory: None, done: None, whole: None }
    }

    /// Takes the next message; false once the reader is done.
    fn receive(&mut self) -> bool {
        if self.done.is_some() {
            return false;
        }
        match self.rx.recv() {
            Ok(Message::Start { device }) => self.device = Some(device),
            Ok(Message::Entries { entries, stack_flags }) => {
                if let Some(m) = &self.memory {
                    m.extend_address_plan(segment_allocs(&entries));
                }
                self.flags.extend(stack_flags);
                self.trace.extend_from_slice(&entries);
            }
            Ok(Message::Done(read)) => self.done = Some(*read),
            // The reader's thread ended without a word: it panicked, and the
            // scope's join passes that on.
            Err(_) => self.done = Some(Err(SnapshotError::Malformed { offset: 0, what: "the reader stopped".into() })),
        }
        self.done.is_none()
    }

    /// The device whose trace comes, once the reader says (`None`: it sends none).
    fn device(&mut self) -> Option<usize> {
        while self.device.is_none() && self.receive() {}
        self.device
    }

    /// Waits for the reader to finish; the snapshot, whole.
    fn finish(&mut self) -> Result<Snapshot, SnapshotError> {
        while self.receive() {}
        if let Some(whole) = self.whole.take() {
            return Ok(whole);
        }
        let (mut snap, device) = self.done.take().expect("received to the end")?;
        if let Some(d) = device {
            snap.device_traces[d] = std::mem::take(&mut self.trace);
        }
        Ok(snap)
    }
}

/// The (size, address) of each `segment_alloc` among `entries`.
fn segment_allocs(entries: &[TraceEntry]) -> impl Iterator<Item = (u64, u64)> + '_ {
    entries.iter().filter(|e| e.action == Action::SegmentAlloc).map(|e| (e.size, e.addr))
}

impl Feed for StreamFeed {
    fn memory(
        &mut self,
        device_bytes: u64,
        start: Vec<(u64, u64)>,
        _marks: &[usize],
        _in_window: &dyn Fn(&TraceEntry) -> bool,
    ) -> Arc<SimulatedMemory> {
        let m = Arc::new(SimulatedMemory::with_open_address_plan(device_bytes));
        m.extend_address_plan(start);
        m.extend_address_plan(segment_allocs(&self.trace));
        self.memory = Some(m.clone());
        m
    }

    #[inline]
    fn get(&mut self, i: usize) -> Option<&TraceEntry> {
        while i >= self.trace.len() && self.receive() {}
        self.trace.get(i)
    }

    fn classify_run(&mut self, i: usize, keep: &dyn Fn(&TraceEntry) -> bool) -> ReleaseKind {
        // Read as far as the run and the entry after it.
        let n = self.run_len(i);
        self.get(i + n);
        let flags = &self.flags;
        oom::classify_run_by(&self.trace, i, |s| flags.get(s as usize).copied().unwrap_or(0), keep)
    }

    fn whole(&mut self) -> &[TraceEntry] {
        while self.receive() {}
        &self.trace
    }

    fn snapshot<'s>(&'s mut self, partial: &'s Snapshot) -> &'s Snapshot {
        match self.finish() {
            Ok(whole) => self.whole.insert(whole),
            Err(e) => {
                // Kept for `finish` to report; the replay ends on the partial snapshot.
                self.done = Some(Err(e));
                partial
            }
        }
    }
}
