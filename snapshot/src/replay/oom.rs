//! Recorded out-of-memory errors and whose releases a trace's segment frees
//! were, for the snapshot replay.
//!
//! An `oom` trace entry is a request PyTorch's `malloc` could not serve: it
//! released its cached blocks (`release_cached_blocks`: the run of
//! `segment_free` entries just before it, `num_alloc_retries` + 1), retried,
//! and raised (`num_ooms` + 1). The entry keeps the request (`size`, rounded:
//! `params.size()`) and the device's free bytes (`device_free`), not the limit
//! it ran into; [`infer_capacity`] works the limit out from the trace, so that
//! the replay can make the same request and fail the same way.
//!
//! A run of segment frees is a release of cached blocks. [`classify_run`]
//! tells whose: the program's `empty_cache()` (its frames name `empty_cache`
//! or c10's `emptyCache`, as cuDNN's benchmark calls it), the allocator's own
//! release before an OOM (the `oom` entry follows), the allocator's own release
//! on another path (C++ frames name `garbage_collect_cached_blocks`,
//! `release_cached_blocks` or the allocator's `malloc`), or not known (no
//! frames that say; such a run is replayed as an `empty_cache()`, as before).

use serde::Serialize;

use crate::format::model::{Action, FrameTable, Snapshot, StackId, TraceEntry};
use crate::format::stream::{NAMES_ALLOCATOR_RELEASE, NAMES_EMPTY_CACHE, stack_flags};
use vramlab_allocator::consts::{MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};
use vramlab_allocator::{AllocError, AllocatorConfig, CachingAllocator, StreamId};
use vramlab_display::format::fmt_bytes;

/// Whose release a run of recorded segment frees was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseKind {
    /// The program's (or a library's) `torch.cuda.empty_cache()`: its frames say so.
    Program,
    /// The allocator's release of cached blocks before a request it then failed
    /// (the `oom` entry follows the run).
    RetryBeforeOom,
    /// The allocator's own release on another path (garbage collection, a
    /// retry that succeeded): its C++ frames name the allocator's functions.
    Allocator,
    /// No frames say whose it was.
    Unattributed,
}

/// How the replay treated the recorded releases (runs of segment frees).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReleaseSummary {
    /// Runs of segment frees (or unmaps) in the replayed window.
    pub runs: u64,
    /// The program's own `empty_cache()` (frames name it).
    pub program: u64,
    /// The allocator's release before a recorded OOM.
    pub before_oom: u64,
    /// The allocator's own release on another path (frames name it).
    pub allocator: u64,
    /// Runs whose frames do not say whose they were.
    pub unattributed: u64,
    /// Runs the replay made as an `empty_cache()` call where they were recorded.
    pub replayed_as_empty_cache: u64,
    /// Runs left to the replayed allocator: it releases where its settings and
    /// capacity need it (for a release before an OOM, at the `oom` entry's request).
    pub left_to_allocator: u64,
}

impl ReleaseSummary {
    /// Counts a run of `kind` and says whether the replay makes it as an
    /// `empty_cache()` call: the program's and the unattributed always; a release
    /// before an OOM only when the failed request cannot be made again (no
    /// limit: `limited` false); the allocator's other releases only under the
    /// recorded settings and limit (`own_replayed`).
    pub(crate) fn count(&mut self, kind: ReleaseKind, limited: bool, own_replayed: bool) -> bool {
        self.runs += 1;
        let replayed = match kind {
            ReleaseKind::Program => {
                self.program += 1;
                true
            }
            ReleaseKind::Unattributed => {
                self.unattributed += 1;
                true
            }
            ReleaseKind::RetryBeforeOom => {
                self.before_oom += 1;
                !limited
            }
            ReleaseKind::Allocator => {
                self.allocator += 1;
                own_replayed
            }
        };
        if replayed {
            self.replayed_as_empty_cache += 1;
        } else {
            self.left_to_allocator += 1;
        }
        replayed
    }

    /// One line for reports, e.g. "2 runs of segment frees: 1 the program's
    /// empty_cache() (replayed as such), 1 the allocator's before an OOM (left to
    /// the allocator)".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [
            (self.program, "the program's empty_cache()"),
            (self.before_oom, "the allocator's release before an OOM"),
            (self.allocator, "the allocator's own (garbage collection or a retry)"),
            (self.unattributed, "not known from frames (taken as empty_cache())"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        format!(
            "{} run(s) of segment frees{}{}; {} replayed as empty_cache(), {} left to the allocator",
            self.runs,
            if parts.is_empty() { "" } else { ": " },
            parts.join(", "),
            self.replayed_as_empty_cache,
            self.left_to_allocator
        )
    }
}

/// Whose release the run of segment frees (or unmaps) starting at trace index
/// `start` was: the entries from `start` with its action that `keep` selects,
/// up to the first that is not. The replay asks at each run's first entry, so
/// the trace is not walked ahead of it for runs.
pub(crate) fn classify_run(
    trace: &[TraceEntry],
    start: usize,
    frames: &FrameTable,
    keep: impl Fn(&TraceEntry) -> bool,
) -> ReleaseKind {
    classify_run_by(trace, start, |stack| stack_flags(frames.stack(stack)), keep)
}

/// [`classify_run`], with what each stack names given by `flags` ([`stack_flags`]).
pub(crate) fn classify_run_by(
    trace: &[TraceEntry],
    start: usize,
    flags: impl Fn(StackId) -> u8,
    keep: impl Fn(&TraceEntry) -> bool,
) -> ReleaseKind {
    let action = trace[start].action;
    let end = start + trace[start..].iter().take_while(|e| e.action == action && keep(e)).count();
    let run = &trace[start..end];
    if run.iter().any(|e| flags(e.frames) & NAMES_EMPTY_CACHE != 0) {
        ReleaseKind::Program
    } else if trace.get(end).is_some_and(|e| e.action == Action::Oom && keep(e)) {
        ReleaseKind::RetryBeforeOom
    } else if run.iter().any(|e| flags(e.frames) & NAMES_ALLOCATOR_RELEASE != 0) {
        ReleaseKind::Allocator
    } else {
        ReleaseKind::Unattributed
    }
}

/// What kind of limit a recorded OOM ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The device itself: it had less free memory than the segment needed.
    Device,
    /// A per-process limit (`set_per_process_memory_fraction`): the device had
    /// room, the allocator refused before asking it.
    Fraction,
}

/// The capacity a replay uses when none is given, worked out from the
/// recorded OOM(s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InferredCapacity {
    /// The `oom` entry that bounds the limit from above (index in the device trace).
    pub entry: u64,
    pub kind: LimitKind,
    /// The limit the replay uses: for [`LimitKind::Device`] the device's memory
    /// for this process (reserved then + `device_free`); for
    /// [`LimitKind::Fraction`] the per-process limit, taken at its lower bound
    /// (`at_least`), so that a setting the what-if finds fitting fits under the
    /// recorded limit too.
    pub bytes: u64,
    /// The most the recording ever reserved: every segment it got fitted.
    pub at_least: u64,
    /// Reserved after the release at the entry plus the segment it asked for:
    /// that did not fit.
    pub below: u64,
    /// Reserved at the entry, after the allocator's release.
    pub reserved_at_oom_bytes: u64,
    /// The segment size the failed request needed (PyTorch's "Tried to allocate").
    pub segment_bytes: u64,
    /// The device's free bytes at the entry, as recorded.
    pub device_free_bytes: u64,
}

impl InferredCapacity {
    /// One line: the limit and how it was found.
    pub fn describe(&self) -> String {
        match self.kind {
            LimitKind::Device => format!(
                "{} inferred from the recorded OOM at entry {}: {} reserved after the release plus {} free on the \
                 device, less than the {} segment it needed",
                fmt_bytes(self.bytes),
                self.entry,
                fmt_bytes(self.reserved_at_oom_bytes),
                fmt_bytes(self.device_free_bytes),
                fmt_bytes(self.segment_bytes)
            ),
            LimitKind::Fraction => format!(
                "{} inferred from the recorded OOM at entry {}: the device had {} free, so a per-process limit \
                 (set_per_process_memory_fraction) refused {} more on top of {} reserved; the limit lies in [{}, {}) \
                 and the replay takes its lower end, the most the recording reserved",
                fmt_bytes(self.bytes),
                self.entry,
                fmt_bytes(self.device_free_bytes),
                fmt_bytes(self.segment_bytes),
                fmt_bytes(self.reserved_at_oom_bytes),
                fmt_bytes(self.at_least),
                fmt_bytes(self.below)
            ),
        }
    }
}

/// The segment size `malloc` asks for a rounded request (`get_allocation_size`).
pub(crate) fn allocation_size(rounded: u64, config: &AllocatorConfig) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        config.large_segment_size
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// The capacity the recorded OOMs of `trace` (device `device`, the whole
/// trace) imply under the recorded settings `config`: `Ok(None)` when the trace
/// has no `oom` entry, `Err(why)` when no single limit explains it. `marks`:
/// the indices of the trace's segment events and `oom` entries, in order (the
/// only entries this looks at).
pub(crate) fn infer_capacity(
    snapshot: &Snapshot,
    device: usize,
    marks: &[usize],
    config: &AllocatorConfig,
) -> Result<Option<InferredCapacity>, String> {
    let trace = &snapshot.device_traces[device];
    let marked = || marks.iter().map(|&i| (i, &trace[i]));
    if !marked().any(|(_, e)| e.action == Action::Oom) {
        return Ok(None);
    }
    // Reserved bytes before the first entry: the final segments, less what the
    // trace allocated, plus what it freed.
    let final_reserved: u64 =
        snapshot.segments.iter().filter(|s| s.device == device as i64).map(|s| s.total_size).sum();
    let (mut grown, mut shrunk) = (0u64, 0u64);
    for (_, e) in marked() {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => grown += e.size,
            Action::SegmentFree | Action::SegmentUnmap => shrunk += e.size,
            _ => {}
        }
    }
    let mut reserved = (final_reserved + shrunk).saturating_sub(grown);
    let mut at_least = reserved;
    // Per oom entry: (index, reserved then, segment needed, device free).
    let mut ooms: Vec<(u64, u64, u64, u64)> = Vec::new();
    for (i, e) in marked() {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved += e.size;
                at_least = at_least.max(reserved);
            }
            Action::SegmentFree | Action::SegmentUnmap => reserved = reserved.saturating_sub(e.size),
            Action::Oom => ooms.push((i as u64, reserved, allocation_size(config.round_size(e.size), config), e.addr)),
            _ => {}
        }
    }
    let &(entry, reserved_at_oom_bytes, segment_bytes, device_free_bytes) =
        ooms.iter().min_by_key(|o| (o.1 + o.2, o.0)).expect("one oom entry at least");
    let below = reserved_at_oom_bytes + segment_bytes;
    if at_least >= below {
        return Err(format!(
            "no single limit explains the recording: it reserved {} at most, yet {} more on top of {} failed at \
             entry {entry} (the limit, or other processes' use of the device, changed while it ran)",
            fmt_bytes(at_least),
            fmt_bytes(segment_bytes),
            fmt_bytes(reserved_at_oom_bytes)
        ));
    }
    let (kind, bytes) = if device_free_bytes < segment_bytes {
        (LimitKind::Device, (reserved_at_oom_bytes + device_free_bytes).max(at_least))
    } else {
        (LimitKind::Fraction, at_least)
    };
    Ok(Some(InferredCapacity {
        entry,
        kind,
        bytes,
        at_least,
        below,
        reserved_at_oom_bytes,
        segment_bytes,
        device_free_bytes,
    }))
}

/// A recorded failed request, made again by the replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomRequest {
    /// Index of the `oom` entry in the device trace.
    pub trace_index: u64,
    pub time_us: i64,
    /// The request as recorded (rounded by the recording's settings).
    pub requested_bytes: u64,
    pub frames: StackId,
    /// Whether the replayed allocator served it (then freed it at once: the
    /// trace does not say what the program would have done with it).
    pub served: bool,
    /// Served: the limit less the reserved memory once it was served.
    pub spare_bytes: Option<u64>,
    /// Not served: reserved after the release, plus the segment it needed, less the limit.
    pub short_bytes: Option<u64>,
    /// Not served: the allocator's out-of-memory message.
    pub message: Option<String>,
}

/// Makes the recorded failed request of `entry` (trace index `index`) on
/// `stream` again: a failure is the recorded OOM reproduced; a request served is
/// freed at once.
pub(crate) fn replay_request(
    allocator: &CachingAllocator,
    entry: &TraceEntry,
    index: u64,
    stream: StreamId,
) -> Result<OomRequest, AllocError> {
    let limit = || {
        let device = allocator.raw_memory().mem_info().total_bytes;
        allocator.memory_limit().map_or(device, |l| l.min(device))
    };
    let mut request = OomRequest {
        trace_index: index,
        time_us: entry.time_us,
        requested_bytes: entry.size,
        frames: entry.frames,
        served: false,
        spare_bytes: None,
        short_bytes: None,
        message: None,
    };
    match allocator.malloc(entry.size, stream, None) {
        Ok(a) => {
            request.served = true;
            request.spare_bytes = Some(limit().saturating_sub(allocator.memory_reserved()));
            allocator.free(a)?;
        }
        Err(AllocError::OutOfMemory(err)) => {
            let reserved = err.allocated_bytes + err.reserved_unallocated_bytes;
            request.short_bytes = Some((reserved + err.segment_bytes).saturating_sub(limit()));
            request.message = Some(err.to_string());
        }
        Err(e) => return Err(e),
    }
    Ok(request)
}
