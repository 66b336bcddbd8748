//! The replay's own events as its allocator reports them ([`SegmentLog`], a
//! hooks subscriber): the segment events, for the fidelity check, and when
//! the replay is recorded, every event, which [`Recorder`] turns into a trace
//! and [`recording`] into a [`Snapshot`] with the allocator's final segments.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::format::model::{Action, AllocatorSettings, Block, Segment, SegmentType, Snapshot, StackId, TraceEntry};
use vramlab_allocator::hooks::{AllocatorAction, Event, Subscriber};
use vramlab_allocator::{AllocatorConfig, BlockState, CachingAllocator, PoolKind};

/// An allocator event as the trace gives it: action, address, size, stream.
type RawEvent = (Action, u64, u64, u32);

/// Segment events of the replay, as they happen.
#[derive(Default)]
pub(crate) struct SegmentLog {
    /// Segment events: action, size, address.
    events: Mutex<Vec<(Action, u64, u64)>>,
    /// Whether `events` has any (the replay takes the lock only then; the
    /// allocator calls subscribers on the replay's own thread).
    segment_events: AtomicBool,
    /// Every event (action, addr, size as PyTorch's trace gives it, stream), when recording.
    all: Option<Mutex<Vec<RawEvent>>>,
}

impl SegmentLog {
    /// A log of the segment events, and of every event when `record`.
    pub(crate) fn new(record: bool) -> SegmentLog {
        SegmentLog {
            events: Mutex::default(),
            segment_events: AtomicBool::new(false),
            all: record.then(Mutex::default),
        }
    }

    /// Forgets every event so far (those of the memory placed before the first entry).
    pub(crate) fn forget(&self) {
        if let Some(all) = &self.all
            && let Ok(mut v) = all.lock()
        {
            v.clear();
        }
        if let Ok(mut v) = self.events.lock() {
            v.clear();
        }
    }

    /// Hands each segment event since the last call to `each` (action, size, address).
    #[inline(always)]
    pub(crate) fn drain_segment_events(&self, mut each: impl FnMut(Action, u64, u64)) {
        if self.segment_events.load(Ordering::Relaxed)
            && let Ok(mut v) = self.events.lock()
        {
            self.segment_events.store(false, Ordering::Relaxed);
            for (a, size, addr) in v.drain(..) {
                each(a, size, addr);
            }
        }
    }
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
                self.segment_events.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// The replay's own events, as a trace, while it runs.
#[derive(Default)]
pub(crate) struct Recorder {
    trace: Vec<TraceEntry>,
    /// Frames of the live blocks by (simulated) address.
    pub(crate) frames_of: HashMap<u64, StackId>,
}

impl Recorder {
    /// The events `log` holds since the last call, as entries at `time_us` with `frames`.
    pub(crate) fn take(&mut self, log: &SegmentLog, time_us: i64, frames: StackId) {
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

/// The replay as a snapshot: its trace on device `device` and its final segments.
pub(crate) fn recording(
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
        allocator_settings: Some(AllocatorSettings::from_config(config)),
        legacy_layout: false,
        host_segments: 0,
        host_trace_entries: 0,
        external_annotations: 0,
        other_keys: Vec::new(),
        // The replay of an estimate is still an estimate.
        estimate: snapshot.estimate.clone(),
    }
}
