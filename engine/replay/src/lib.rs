//! Trace replay: feeds an allocation trace through a [`CachingAllocator`] over
//! [`SimulatedMemory`] (addresses only, no backing bytes, so a trace from an
//! 80 GiB GPU replays on a laptop) and reports PyTorch's memory statistics, the
//! peaks, and every out-of-memory on the way.
//!
//! # Trace format, version 1
//!
//! JSON Lines: one object per line, one operation per object. Blank lines are
//! skipped; fields other than those below are ignored.
//!
//! ```text
//! {"op":"alloc","id":7,"size":1048576,"stream":0,"tag":"activation"}
//! {"op":"free","id":7}
//! {"op":"empty_cache"}
//! {"op":"reset_peak"}
//! ```
//!
//! - `alloc` needs `id` (any `u64`, unique among the live allocations) and `size`
//!   (bytes, any integer from 0 to 2^64 − 1: see "Request sizes" below); `stream` (default 0; a stream
//!   id the allocator does not track is an error) and `tag` (one of `parameter`,
//!   `gradient`, `activation`, `optimizer_state`, `input`, `temporary`,
//!   `workspace`) are optional.
//! - `free` needs the `id` of a live allocation. An id may be allocated again once
//!   it has been freed.
//! - `empty_cache` is `torch.cuda.empty_cache()`; `reset_peak` is
//!   `torch.cuda.reset_peak_memory_stats()` (every peak becomes its current value).
//!
//! # Trace format, version 2
//!
//! Version 2 adds ops and one field; every version-1 trace is a version-2 trace
//! and means the same.
//!
//! ```text
//! {"op":"alloc","id":8,"size":4096,"stream":1,"device":1}
//! {"op":"record_stream","id":8,"stream":2,"device":1}
//! {"op":"free","id":8}
//! {"op":"stream_done","stream":2,"device":1}
//! {"op":"set_memory_fraction","fraction":0.5}
//! {"op":"set_allocator_settings","settings":"max_split_size_mb:128"}
//! ```
//!
//! - `device` (default 0, below [`MAX_DEVICES`]) on any op: one allocator per
//!   device, each on its own simulated device of the replay's capacity. Ids are
//!   one namespace across devices; `free` and `record_stream` act on the device the
//!   id was allocated on (their `device` field is ignored).
//! - `record_stream` is `Tensor.record_stream(stream)` on a live id: when it is
//!   freed, its block stays `active_pending_free` (the snapshots' `free_requested`)
//!   until the work queued on `stream` so far has completed.
//! - `stream_done` says that work has completed (the snapshots' `free_completed`
//!   follows at the next allocator call): the work of `stream`, or of every stream
//!   when `stream` is absent (`torch.cuda.synchronize()`). Until then such blocks
//!   are not reused, except that an out-of-memory retry or `empty_cache`
//!   synchronizes, as in PyTorch.
//! - `set_memory_fraction` is `torch.cuda.set_per_process_memory_fraction(fraction)`
//!   (`fraction` in [0, 1]).
//! - `set_allocator_settings` is `torch.cuda.memory._set_allocator_settings(settings)`
//!   (see `CachingAllocator::set_allocator_settings`).
//!
//! The report's top-level figures are device 0's; `devices` lists every device the
//! trace used, with its own statistics.
//!
//! ## Private pools (CUDA graphs and `torch.cuda.MemPool`)
//!
//! ```text
//! {"op":"create_pool","pool":[0,1],"use_on_oom":true,"no_split":false}
//! {"op":"begin_allocate_to_pool","pool":[0,1]}
//! {"op":"begin_allocate_to_pool","pool":[7,0],"streams":[1]}
//! {"op":"end_allocate_to_pool","pool":[7,0]}
//! {"op":"release_pool","pool":[7,0]}
//! {"op":"empty_cache","pool":[0,1]}
//! {"op":"delete_pool","pool":[0,1]}
//! ```
//!
//! A pool is named by its `MempoolId_t`, two integers (`(capture id, 0)` for a
//! graph's own pool, `(0, n)` for `graph_pool_handle()` and `MemPool`; `[0,0]` is the
//! default pool and cannot be named). Each op acts on the allocator of `device`.
//!
//! - `create_pool` is `torch.cuda.MemPool(use_on_oom=…, no_split=…)`: creates the
//!   pool with use count 1 (or adds a user to an existing one). `use_on_oom`: a
//!   default-pool allocation that would run out of memory may take a free block of
//!   this pool; `no_split`: the pool's blocks are handed out whole. Both default to
//!   false.
//! - `begin_allocate_to_pool` is `beginAllocateToPool` (a graph's `capture_begin`, or
//!   entering `torch.cuda.use_mem_pool`): creates the pool or adds a user, and sends
//!   the allocations of `streams` (every stream when absent, as `use_mem_pool` takes
//!   the whole thread) to it until `end_allocate_to_pool`; the latest begun pool
//!   whose streams match wins. While any pool is begun, stream events are not
//!   processed and an out-of-memory does not release the cached blocks, as in PyTorch.
//! - `end_allocate_to_pool` is `endAllocateToPool` (`capture_end`, leaving
//!   `use_mem_pool`; leaving `use_mem_pool` is followed by a `release_pool`).
//! - `release_pool` is `releasePool` (`CUDAGraph.reset()`, deleting the graph): one
//!   user fewer. At 0 the pool's free segments go back to the device at the next
//!   `empty_cache`, and the pool is deleted once it holds none.
//! - `empty_cache` with `pool` is `emptyCache(pool)` (`torch.cuda.empty_cache()`
//!   inside `use_mem_pool`): only that pool, and only once its use count is 0.
//! - `delete_pool` is `MemPool`'s destructor: it stops serving as `use_on_oom`, is
//!   released once, and its cache is emptied (`empty_cache` with `pool`).
//!
//! Blocks of a private pool are never handed out outside it (but by the `use_on_oom`
//! fallback); their statistics count in `small_pool`/`large_pool` by size.
//!
//! Every malformed line is a [`ReplayError`] naming its 1-based line number. An
//! out-of-memory is not an error but data: an [`OomRecord`] in the report. With
//! [`OnOom::Continue`] the replay goes on, the failed allocation's id counts as
//! live for the trace, and its later `free` is ignored; with [`OnOom::Stop`] the
//! replay ends at the first one.
//!
//! # Request sizes, as PyTorch treats them
//!
//! Every `u64` size is valid input; what happens to it is what PyTorch does
//! (`CUDACachingAllocator.cpp`, `NativeCachingAllocator::allocate` and
//! `DeviceCachingAllocator::malloc`):
//!
//! - 0 bytes: a null allocation that never reaches the allocator (no statistic moves).
//! - [`MAX_REQUEST`] (1 EiB) or more: refused before the allocator ("Tried to allocate
//!   more than 1EB memory", an `OutOfMemoryError` in PyTorch). No statistic changes
//!   (`num_ooms` included); the refusal is a [`TooLargeRecord`] in the report and,
//!   like an out-of-memory, ends the replay under [`OnOom::Stop`].
//! - Anything else goes through the allocator: a request larger than the simulated
//!   device releases the cached blocks, retries once (`num_alloc_retries` + 1) and
//!   fails with an out-of-memory (`num_ooms` + 1), as on a GPU.
//!
//! The simulated device's capacity has its own, separate limit, [`MAX_BYTES`] (1 PiB).

pub mod timeline;

/// The synthetic trace of the tests and the bench (test support, not the crate's API).
#[cfg(test)]
#[path = "../tests/support/synthetic.rs"]
mod synthetic;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::timeline::{MAX_TIMELINE_POINTS, ReplayTimeline, TimelinePoint, TimelineRecorder, peak_state};
use vramlab_allocator::hooks::Tag;
use vramlab_allocator::{
    AllocError, Allocation, AllocatorConfig, CachingAllocator, MAX_REQUEST, OutOfMemoryError, PoolFilter,
    SimulatedMemory, StreamId,
};

/// The largest capacity a replay may simulate: 1 PiB, the capacity of an
/// unlimited [`SimulatedMemory`]. (Request sizes have no such limit: see the
/// module docs.)
pub const MAX_BYTES: u64 = 1 << 50;

/// How many out-of-memory events a report keeps in full; later ones are only
/// counted (in [`ReplayReport::ooms_not_recorded`] and `num_ooms`).
pub const MAX_OOM_RECORDS: usize = 1000;

/// The replay remembers at least this many of the latest frees for its
/// "already freed at line N" messages (and at most twice as many).
const FREED_IDS_REMEMBERED: usize = 1 << 16;

/// The longest line a trace may have (newline included).
pub const MAX_LINE_BYTES: usize = 1 << 24;

/// The ops of the format, for messages.
const OPS: &str = "alloc, free, empty_cache, reset_peak, record_stream, stream_done, set_memory_fraction, \
                   set_allocator_settings, create_pool, begin_allocate_to_pool, end_allocate_to_pool, release_pool or \
                   delete_pool";

/// Device indices a trace may use: 0 to 63.
pub const MAX_DEVICES: u32 = 64;

/// What to do when an allocation runs out of memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOom {
    /// End the replay at the first out-of-memory (what a PyTorch program does
    /// unless it catches the error).
    #[default]
    Stop,
    /// Record it and go on; later frees of the failed allocation are ignored.
    Continue,
}

/// How to replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayOptions {
    /// The simulated device's capacity; `None` is unlimited ([`MAX_BYTES`]).
    pub capacity_bytes: Option<u64>,
    /// The allocator configuration (as `PYTORCH_CUDA_ALLOC_CONF` would set it).
    pub config: AllocatorConfig,
    pub on_oom: OnOom,
}

/// One allocation that ran out of memory during a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct OomRecord {
    /// 0-based index of the op among the trace's ops (blank lines not counted).
    pub event_index: u64,
    /// The device index of the allocation (format version 2; 0 otherwise).
    pub device: u32,
    /// 1-based line number in the trace.
    pub line: u64,
    /// The `size` the trace asked for.
    pub requested_bytes: u64,
    pub error: OutOfMemoryError,
    /// The allocator's flattened statistics right after the failure.
    pub memory_stats: BTreeMap<String, i64>,
}

impl Serialize for OomRecord {
    /// As the fields plus `message`, the error's text.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("OomRecord", 7)?;
        s.serialize_field("event_index", &self.event_index)?;
        s.serialize_field("device", &self.device)?;
        s.serialize_field("line", &self.line)?;
        s.serialize_field("requested_bytes", &self.requested_bytes)?;
        s.serialize_field("message", &self.error.to_string())?;
        s.serialize_field("error", &self.error)?;
        s.serialize_field("memory_stats", &self.memory_stats)?;
        s.end()
    }
}

/// A request of [`MAX_REQUEST`] (1 EiB) or more, which PyTorch refuses before its
/// allocator sees it: no statistic changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TooLargeRecord {
    /// 0-based index of the op among the trace's ops (blank lines not counted).
    pub event_index: u64,
    /// 1-based line number in the trace.
    pub line: u64,
    /// The `size` the trace asked for.
    pub requested_bytes: u64,
    /// The error's text.
    pub message: String,
}

/// The outcome of a replay. The memory figures are the allocator's
/// (`torch.cuda.memory_allocated()` and friends); peaks count from the last
/// `reset_peak` op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Ops applied, including allocations that ran out of memory.
    pub events: u64,
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Whether the replay ended at an out-of-memory before the end of the trace
    /// (only with [`OnOom::Stop`]).
    pub stopped_early: bool,
    pub current_allocated_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub current_reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Allocations the trace left live at the end (failed ones not counted).
    pub live_allocations: u64,
    /// The line of the last `reset_peak` op, from which the peaks count.
    pub last_reset_peak_line: Option<u64>,
    /// The first [`MAX_OOM_RECORDS`] out-of-memory events.
    pub ooms: Vec<OomRecord>,
    /// Out-of-memory events beyond [`MAX_OOM_RECORDS`], counted only.
    pub ooms_not_recorded: u64,
    /// The first [`MAX_OOM_RECORDS`] requests of 1 EiB or more (refused before the
    /// allocator, so not in `num_ooms`).
    pub too_large: Vec<TooLargeRecord>,
    /// Such requests beyond [`MAX_OOM_RECORDS`], counted only.
    pub too_large_not_recorded: u64,
    /// `torch.cuda.memory_stats()` at the end, flattened.
    pub memory_stats: BTreeMap<String, i64>,
    /// `torch.cuda.memory_summary()` at the end.
    pub summary: String,
    /// Every device the trace used, by index (device 0 always).
    pub devices: Vec<DeviceReport>,
}

/// One device's figures at the end of a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub current_allocated_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub current_reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// `torch.cuda.memory_stats(device)` at the end, flattened.
    pub memory_stats: BTreeMap<String, i64>,
}

/// A trace that cannot be replayed. Every variant about the trace's content
/// names the 1-based line at fault.
#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("line {line}: cannot read the trace: {source}")]
    Io {
        line: u64,
        #[source]
        source: io::Error,
    },
    #[error("line {line}: longer than {limit} bytes; is this a trace?")]
    LineTooLong { line: u64, limit: usize },
    #[error("line {line}, column {column}: malformed JSON: {message}")]
    Json { line: u64, column: usize, message: String },
    #[error("line {line}: unknown op '{op}' (expected {OPS})")]
    UnknownOp { line: u64, op: String },
    #[error("line {line}: missing field '{field}'{}", required_by(*.op))]
    MissingField { line: u64, op: Option<&'static str>, field: &'static str },
    #[error("line {line}: unknown tag '{tag}' (expected one of {})", tag_names())]
    UnknownTag { line: u64, tag: String },
    #[error("line {line}: size {value} {reason}")]
    BadSize { line: u64, value: String, reason: &'static str },
    #[error("line {line}: record_stream of id {id}, which is not live{}", freed_at_note(*.freed_at))]
    RecordStreamNotLive { line: u64, id: u64, freed_at: Option<u64> },
    #[error("line {line}: device {device} is out of range: device indices go from 0 to {}", MAX_DEVICES - 1)]
    BadDevice { line: u64, device: u64 },
    #[error("line {line}: free of id {id}, which is not live{}", freed_at_note(*.freed_at))]
    NotLive { line: u64, id: u64, freed_at: Option<u64> },
    #[error("line {line}: alloc of id {id}, which is already live (allocated at line {allocated_at}{}); free it first", if *.failed { ", where it ran out of memory" } else { "" })]
    IdInUse { line: u64, id: u64, allocated_at: u64, failed: bool },
    #[error("the capacity of {capacity_bytes} bytes is too large: at most {MAX_BYTES} bytes (1 PiB) can be simulated")]
    CapacityTooLarge { capacity_bytes: u64 },
    #[error("cannot set up the allocator: {0}")]
    Setup(#[source] AllocError),
    #[error("line {line}: {source}")]
    Allocator {
        line: u64,
        #[source]
        source: AllocError,
    },
}

impl ReplayError {
    /// The 1-based trace line the error is about, when there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            ReplayError::Io { line, .. }
            | ReplayError::LineTooLong { line, .. }
            | ReplayError::Json { line, .. }
            | ReplayError::UnknownOp { line, .. }
            | ReplayError::MissingField { line, .. }
            | ReplayError::UnknownTag { line, .. }
            | ReplayError::BadSize { line, .. }
            | ReplayError::BadDevice { line, .. }
            | ReplayError::RecordStreamNotLive { line, .. }
            | ReplayError::NotLive { line, .. }
            | ReplayError::IdInUse { line, .. }
            | ReplayError::Allocator { line, .. } => Some(*line),
            ReplayError::CapacityTooLarge { .. } | ReplayError::Setup(_) => None,
        }
    }
}

fn required_by(op: Option<&'static str>) -> String {
    op.map(|op| format!(" (required by op '{op}')")).unwrap_or_default()
}

fn tag_names() -> String {
    Tag::ALL.map(Tag::as_str).join(", ")
}

fn freed_at_note(freed_at: Option<u64>) -> String {
    match freed_at {
        Some(at) => format!(" (already freed at line {at})"),
        None => " (never allocated, or freed long ago)".to_owned(),
    }
}

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

// ----- parsing -----

/// One trace line as it is written. Strings are borrowed from the line unless they
/// contain escapes; nothing is buffered.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object such as {\"op\":\"free\",\"id\":7}")]
struct Line<'a> {
    #[serde(borrow)]
    op: Option<Text<'a>>,
    id: Option<u64>,
    size: Option<SizeValue>,
    stream: Option<StreamId>,
    #[serde(borrow)]
    tag: Option<Text<'a>>,
    device: Option<u64>,
    fraction: Option<f64>,
    #[serde(borrow)]
    settings: Option<Text<'a>>,
    pool: Option<[u64; 2]>,
    streams: Option<Vec<StreamId>>,
    use_on_oom: Option<bool>,
    no_split: Option<bool>,
}

/// A string borrowed from the input when possible.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor(PhantomData))
    }
}

/// A JSON number as written, checked after parsing so that the message can name
/// the line and what is wrong with the value.
#[derive(Debug, Clone, Copy)]
enum SizeValue {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

impl<'de> Deserialize<'de> for SizeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = SizeValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count (a non-negative integer)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeValue, E> {
                Ok(SizeValue::Unsigned(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeValue, E> {
                Ok(if v < 0 { SizeValue::Negative(v) } else { SizeValue::Unsigned(v as u64) })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<SizeValue, E> {
                Ok(SizeValue::Float(v))
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}

impl SizeValue {
    /// The size in bytes: any `u64` (PyTorch's `size_t`); integral floats (`1e6`,
    /// `1024.0`) are accepted.
    fn bytes(self, line: u64) -> Result<u64, ReplayError> {
        let bad = |value: String, reason| Err(ReplayError::BadSize { line, value, reason });
        match self {
            SizeValue::Unsigned(n) => Ok(n),
            SizeValue::Negative(n) => bad(n.to_string(), "is negative"),
            SizeValue::Float(f) if f < 0.0 => bad(f.to_string(), "is negative"),
            SizeValue::Float(f) if f.fract() != 0.0 => bad(f.to_string(), "is not a whole number of bytes"),
            // 2^64 and above do not fit a size_t.
            SizeValue::Float(f) if f >= 18_446_744_073_709_551_616.0 => {
                bad(f.to_string(), "is too large (a size is at most 2^64 - 1 bytes)")
            }
            SizeValue::Float(f) => Ok(f as u64),
        }
    }
}

/// serde_json's message without its " at line 1 column N" (each line is parsed
/// on its own, so that position would mislead).
fn json_message(e: &serde_json::Error) -> String {
    let mut message = e.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    message
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

    fn apply_line(&mut self, text: &[u8]) -> Result<Flow, ReplayError> {
        let line = self.lines;
        // serde would read `[...]` as a struct too; name what a line must be instead.
        if let Some(column) = text.iter().position(|b| !b.is_ascii_whitespace())
            && text[column] != b'{'
        {
            return Err(ReplayError::Json {
                line,
                column: column + 1,
                message: "expected a JSON object such as {\"op\":\"free\",\"id\":7}".to_owned(),
            });
        }
        let parsed: Line<'_> = serde_json::from_slice(text).map_err(|e| ReplayError::Json {
            line,
            column: e.column(),
            message: json_message(&e),
        })?;
        let Some(op) = &parsed.op else {
            return Err(ReplayError::MissingField { line, op: None, field: "op" });
        };
        let flow = match &*op.0 {
            "alloc" => self.alloc(line, &parsed)?,
            "free" => {
                let id = parsed.id.ok_or(ReplayError::MissingField { line, op: Some("free"), field: "id" })?;
                self.free(line, id)?;
                Flow::Go
            }
            "empty_cache" => {
                let allocator = &self.device(line, &parsed)?.allocator;
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
                self.pool_op(line, op, &parsed)?;
                Flow::Go
            }
            "reset_peak" => {
                self.device(line, &parsed)?.allocator.reset_peak_stats();
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
                let device = self.device(line, &parsed)?;
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
                let device = self.device(line, &parsed)?;
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
                let device = self.device(line, &parsed)?;
                device
                    .allocator
                    .set_allocator_settings(&settings)
                    .map_err(|source| ReplayError::Allocator { line, source })?;
                Flow::Go
            }
            other => return Err(ReplayError::UnknownOp { line, op: other.to_owned() }),
        };
        self.events += 1;
        if self.track.is_some() {
            let allocator = &self.device0().allocator;
            let (allocated, reserved) = (allocator.memory_allocated(), allocator.memory_reserved());
            if let Some(track) = self.track.as_mut() {
                track.op(self.events, allocated, reserved);
            }
        }
        Ok(flow)
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
                match self.opts.on_oom {
                    OnOom::Stop => Ok(Flow::Stop),
                    OnOom::Continue => {
                        self.live.insert(id, Slot::Failed { line });
                        Ok(Flow::Go)
                    }
                }
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
                match self.opts.on_oom {
                    OnOom::Stop => Ok(Flow::Stop),
                    OnOom::Continue => {
                        self.live.insert(id, Slot::Failed { line });
                        Ok(Flow::Go)
                    }
                }
            }
            Err(source) => Err(ReplayError::Allocator { line, source }),
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

// ----- writing traces -----

/// One op of a trace, for writing traces (tests, benches, exporters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    Alloc { id: u64, size: u64, stream: StreamId, tag: Option<Tag> },
    Free { id: u64 },
    EmptyCache,
    ResetPeak,
}

impl TraceOp {
    /// Writes the op as one trace line, newline included. Stream 0 and a missing
    /// tag are left out.
    pub fn write_line<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        match *self {
            TraceOp::Alloc { id, size, stream, tag } => {
                write!(w, r#"{{"op":"alloc","id":{id},"size":{size}"#)?;
                if stream != 0 {
                    write!(w, r#","stream":{stream}"#)?;
                }
                if let Some(tag) = tag {
                    write!(w, r#","tag":"{tag}""#)?;
                }
                w.write_all(b"}\n")
            }
            TraceOp::Free { id } => writeln!(w, r#"{{"op":"free","id":{id}}}"#),
            TraceOp::EmptyCache => w.write_all(b"{\"op\":\"empty_cache\"}\n"),
            TraceOp::ResetPeak => w.write_all(b"{\"op\":\"reset_peak\"}\n"),
        }
    }
}

/// Writes `ops` as a version-1 trace.
pub fn write_trace<W: Write, I: IntoIterator<Item = TraceOp>>(mut w: W, ops: I) -> io::Result<()> {
    for op in ops {
        op.write_line(&mut w)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::synthetic::synthetic_trace;

    use vramlab_allocator::consts::MIB;

    fn run(trace: &str) -> Result<ReplayReport, ReplayError> {
        replay(trace.as_bytes(), &ReplayOptions::default())
    }

    fn run_with(trace: &str, capacity: u64, on_oom: OnOom) -> ReplayReport {
        let opts = ReplayOptions { capacity_bytes: Some(capacity), on_oom, ..Default::default() };
        replay(trace.as_bytes(), &opts).unwrap()
    }

    /// The error's message, checked to name `line`.
    fn error_at(trace: &str, line: u64) -> String {
        let err = run(trace).expect_err("the trace is bad");
        assert_eq!(err.line(), Some(line), "{err}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("line {line}")), "{message}");
        message
    }

    fn stat(report: &ReplayReport, key: &str) -> i64 {
        *report.memory_stats.get(key).unwrap_or_else(|| panic!("no stat {key}"))
    }

    /// The spec's known-answer vectors as a trace (a blank line included).
    const SPEC_TRACE: &str = "\
{\"op\":\"alloc\",\"id\":1,\"size\":3145728}
{\"op\":\"alloc\",\"id\":2,\"size\":5242880,\"tag\":\"activation\"}

{\"op\":\"free\",\"id\":1}
{\"op\":\"free\",\"id\":2}
{\"op\":\"empty_cache\"}
";

    #[test]
    fn spec_vectors_as_a_trace() {
        let trace = SPEC_TRACE;
        let r = run(trace).unwrap();
        assert_eq!(r.events, 5);
        assert_eq!(r.lines, 6);
        assert!(!r.stopped_early);
        assert!(r.ooms.is_empty());
        assert_eq!(r.current_allocated_bytes, 0);
        assert_eq!(r.current_reserved_bytes, 0);
        assert_eq!(r.peak_allocated_bytes, 8_388_608);
        assert_eq!(r.peak_reserved_bytes, 20_971_520);
        assert_eq!(r.live_allocations, 0);
        assert_eq!(r.last_reset_peak_line, None);
        assert_eq!(stat(&r, "num_device_alloc"), 1);
        assert_eq!(stat(&r, "num_device_free"), 1);
        assert_eq!(stat(&r, "allocation.all.allocated"), 2);
        assert_eq!(stat(&r, "allocation.all.freed"), 2);
        assert_eq!(stat(&r, "inactive_split_bytes.all.peak"), 17_825_792);
        assert_eq!(stat(&r, "requested_bytes.large_pool.allocated"), 8_388_608);
        assert_eq!(stat(&r, "max_split_size"), -1);
        assert_eq!(r.memory_stats.len(), 9 * 3 * 4 + 2 * 4 + 6);
    }

    #[test]
    fn timeline_of_the_spec_vectors() {
        let trace = SPEC_TRACE;
        let (report, t) = replay_with_timeline(trace.as_bytes(), &ReplayOptions::default()).unwrap();
        assert_eq!(report, run(trace).unwrap(), "the report is the plain replay's");
        let points: Vec<(u64, u64, u64)> =
            t.points.iter().map(|p| (p.ops, p.allocated_bytes, p.reserved_bytes)).collect();
        assert_eq!(
            points,
            [
                (0, 0, 0),
                (1, 3 * MIB, 20 * MIB),
                (2, 8 * MIB, 20 * MIB),
                (3, 5 * MIB, 20 * MIB),
                (4, 0, 20 * MIB),
                (5, 0, 0)
            ]
        );
        let peak = t.peak.clone().expect("memory was reserved");
        // The 20 MiB segment is first reserved by the first alloc: 3 MiB used, 17 MiB free.
        assert_eq!((peak.ops, peak.allocated_bytes, peak.reserved_bytes), (1, 3 * MIB, 20 * MIB));
        assert_eq!(peak.largest_free_block_bytes, 17 * MIB);
        assert_eq!(peak.segments.len(), 1);
        let blocks: Vec<(u64, bool)> = peak.segments[0]
            .blocks
            .iter()
            .map(|b| (b.size, b.state != vramlab_allocator::BlockState::Inactive))
            .collect();
        assert_eq!(blocks, [(3 * MIB, true), (17 * MIB, false)]);
        assert!(t.ooms.is_empty());
    }

    #[test]
    fn timeline_of_the_fragmentation_example() {
        let trace = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/traces/fragmentation.jsonl"))
            .expect("the README's example trace");
        let opts = ReplayOptions { capacity_bytes: Some(1 << 30), ..Default::default() };
        let (report, t) = replay_with_timeline(&trace, &opts).unwrap();
        assert_eq!(report, replay(&trace[..], &opts).unwrap());
        // 101 allocations of 8 MiB reserve the 51st 20 MiB segment.
        let peak = t.peak.clone().expect("memory was reserved");
        assert_eq!((peak.ops, peak.allocated_bytes, peak.reserved_bytes), (101, 808 * MIB, 1020 * MIB));
        assert_eq!(peak.segments.len(), 51);
        assert_eq!(peak.largest_free_block_bytes, 12 * MIB);
        // The README's figures: at line 154, 408 MiB allocated, 612 MiB reserved but
        // unallocated, and no free piece of 16 MiB.
        assert_eq!(t.ooms.len(), 1);
        let oom = &t.ooms[0];
        assert_eq!((oom.index, oom.line, oom.requested_bytes), (153, Some(154), 16 * MIB));
        assert_eq!((oom.allocated_bytes, oom.reserved_bytes), (408 * MIB, 1020 * MIB));
        assert_eq!(oom.reserved_unallocated_bytes, 612 * MIB);
        assert_eq!(oom.largest_free_block_bytes, 8 * MIB);
        assert!(oom.message.contains("612.00 MiB is reserved by vramlab but unallocated"), "{}", oom.message);
        assert_eq!(t.peak_reserved_bytes(), report.peak_reserved_bytes);
        assert_eq!(t.peak_allocated_bytes(), report.peak_allocated_bytes);
    }

    #[test]
    fn spec_vector_unsplit_and_one_byte() {
        let r = run("{\"op\":\"alloc\",\"id\":0,\"size\":11534337}\n{\"op\":\"alloc\",\"id\":1,\"size\":1}").unwrap();
        assert_eq!(r.current_allocated_bytes, 12_582_912 + 512);
        assert_eq!(r.current_reserved_bytes, 12_582_912 + 2_097_152);
        assert_eq!(stat(&r, "requested_bytes.all.current"), 11_534_338);
        assert_eq!(stat(&r, "segment.small_pool.current"), 1);
        assert_eq!(stat(&r, "segment.large_pool.current"), 1);
        assert_eq!(r.live_allocations, 2);
    }

    #[test]
    fn thousand_small_allocations() {
        let trace: String = (0..1000).map(|i| format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":1000}}\n")).collect();
        let r = run(&trace).unwrap();
        assert_eq!(r.current_allocated_bytes, 1_024_000);
        assert_eq!(r.current_reserved_bytes, 2_097_152);
        assert_eq!(stat(&r, "segment.all.current"), 1);
    }

    #[test]
    fn reset_peak_and_streams_and_tags() {
        let trace = r#"{"op":"alloc","id":1,"size":4194304,"stream":0,"tag":"parameter"}
{"op":"alloc","id":2,"size":4194304,"stream":3,"tag":"optimizer_state"}
{"op":"free","id":2}
{"op":"reset_peak"}
{"op":"alloc","id":2,"size":1024,"stream":3,"tag":"workspace"}
"#;
        let r = run(trace).unwrap();
        // Blocks are never shared across streams: two large segments.
        assert_eq!(stat(&r, "segment.large_pool.current"), 2);
        assert_eq!(r.peak_allocated_bytes, 4 * MIB + 1024, "peak restarts from current at reset_peak");
        assert_eq!(r.last_reset_peak_line, Some(4));
        assert_eq!(r.current_allocated_bytes, 4 * MIB + 1024);
    }

    #[test]
    fn zero_byte_allocations_replay() {
        let r = run("{\"op\":\"alloc\",\"id\":1,\"size\":0}\n{\"op\":\"free\",\"id\":1}\n").unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(r.current_reserved_bytes, 0);
        assert_eq!(stat(&r, "allocation.all.allocated"), 0);
    }

    #[test]
    fn integral_floats_and_escaped_strings_are_accepted() {
        let r = run(
            "{\"op\":\"alloc\",\"id\":1,\"size\":1e6,\"tag\":\"activ\\u0061tion\"}\n{\"op\":\"fr\\u0065e\",\"id\":1}\n",
        )
        .unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(stat(&r, "requested_bytes.all.allocated"), 1_000_000);
    }

    #[test]
    fn unknown_fields_crlf_and_missing_final_newline_are_fine() {
        let r = run(
            "{\"op\":\"alloc\",\"id\":1,\"size\":512,\"time_us\":12,\"frames\":[]}\r\n  \r\n{\"op\":\"free\",\"id\":1}",
        )
        .unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(r.lines, 3);
    }

    #[test]
    fn empty_trace() {
        let r = run("").unwrap();
        assert_eq!(r.events, 0);
        assert_eq!(r.current_reserved_bytes, 0);
        assert!(!r.summary.is_empty());
    }

    #[test]
    fn malformed_json() {
        let m = error_at("{\"op\":\"empty_cache\"}\n{\"op\":\"alloc\",\"id\":1,\n", 2);
        assert!(m.contains("malformed JSON"), "{m}");
        assert!(!m.contains("at line 1"), "serde's own position is dropped: {m}");
        let m = error_at("not json\n", 1);
        assert!(m.contains("column"), "{m}");
        let m = error_at("[1,2]\n", 1);
        assert!(m.contains("a JSON object"), "{m}");
        error_at("{\"op\":\"free\",\"id\":1} trailing\n", 1);
        error_at("{\"op\":\"free\",\"id\":1,\"id\":2}\n", 1);
    }

    #[test]
    fn wrong_field_types() {
        let m = error_at("{\"op\":7}\n", 1);
        assert!(m.contains("expected a string"), "{m}");
        let m = error_at("{\"op\":\"alloc\",\"id\":1,\"size\":\"1024\"}\n", 1);
        assert!(m.contains("expected a byte count"), "{m}");
        let m = error_at("{\"op\":\"free\",\"id\":-1}\n", 1);
        assert!(m.contains("-1"), "{m}");
        error_at("{\"op\":\"free\",\"id\":1.5}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":-2}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4294967296}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"tag\":3}\n", 1);
        error_at("{\"op\":\"free\",\"id\":18446744073709551616}\n", 1);
    }

    #[test]
    fn missing_fields() {
        assert_eq!(error_at("{\"id\":1}\n", 1), "line 1: missing field 'op'");
        assert_eq!(
            error_at("\n{\"op\":\"alloc\",\"size\":1}\n", 2),
            "line 2: missing field 'id' (required by op 'alloc')"
        );
        assert_eq!(
            error_at("{\"op\":\"alloc\",\"id\":1}\n", 1),
            "line 1: missing field 'size' (required by op 'alloc')"
        );
        assert_eq!(error_at("{\"op\":\"free\"}\n", 1), "line 1: missing field 'id' (required by op 'free')");
        assert_eq!(error_at("{\"op\":null}\n", 1), "line 1: missing field 'op'");
    }

    #[test]
    fn unknown_op_and_tag() {
        assert_eq!(
            error_at("{\"op\":\"allocate\",\"id\":1,\"size\":1}\n", 1),
            "line 1: unknown op 'allocate' (expected alloc, free, empty_cache, reset_peak, record_stream, stream_done, \
             set_memory_fraction, set_allocator_settings, create_pool, begin_allocate_to_pool, end_allocate_to_pool, \
             release_pool or delete_pool)"
        );
        let m = error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"tag\":\"weights\"}\n", 1);
        assert_eq!(
            m,
            "line 1: unknown tag 'weights' (expected one of parameter, gradient, activation, optimizer_state, \
             input, temporary, workspace)"
        );
    }

    #[test]
    fn bad_sizes() {
        let size = |s: &str| error_at(&format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{s}}}\n"), 1);
        assert_eq!(size("-5"), "line 1: size -5 is negative");
        assert_eq!(size("-0.5"), "line 1: size -0.5 is negative");
        assert_eq!(size("1.5"), "line 1: size 1.5 is not a whole number of bytes");
        // 2^64 does not fit a size_t: malformed (serde reads it as a float).
        assert!(size("18446744073709551616").contains("is too large"));
        assert!(size("1e300").contains("is too large"));
        assert!(size("true").contains("malformed JSON"));
        assert!(size("null").contains("missing field 'size'"));
        // The capacity limit fits the unlimited device exactly.
        let r = run("{\"op\":\"alloc\",\"id\":1,\"size\":1125899906842624}\n").unwrap();
        assert_eq!(r.current_allocated_bytes, MAX_BYTES);
    }

    #[test]
    fn v2_record_stream_holds_the_block_until_its_stream_is_done() {
        let alloc_again = "{\"op\":\"alloc\",\"id\":3,\"size\":512}\n";
        let head = "{\"op\":\"alloc\",\"id\":1,\"size\":512}\n{\"op\":\"alloc\",\"id\":2,\"size\":512}\n\
                    {\"op\":\"record_stream\",\"id\":1,\"stream\":2}\n{\"op\":\"free\",\"id\":1}\n";
        // Still pending: the block stays active, a new alloc takes other memory.
        let r = run(&format!("{head}{alloc_again}")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 3);
        assert_eq!(stat(&r, "allocation.all.current"), 2);
        // Another stream's completion does not release it …
        let r = run(&format!("{head}{{\"op\":\"stream_done\",\"stream\":5}}\n{alloc_again}")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 3);
        // … its own stream's, or a synchronize, does (at the next allocator call).
        for done in ["{\"op\":\"stream_done\",\"stream\":2}\n", "{\"op\":\"stream_done\"}\n"] {
            let r = run(&format!("{head}{done}{alloc_again}")).unwrap();
            assert_eq!(stat(&r, "active.all.current"), 2, "{done}");
            assert_eq!(r.current_allocated_bytes, 1024);
        }
        // empty_cache synchronizes, as in PyTorch.
        let r = run(&format!("{head}{{\"op\":\"empty_cache\"}}\n")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 1);
        assert_eq!(
            error_at("{\"op\":\"record_stream\",\"id\":9,\"stream\":1}\n", 1),
            "line 1: record_stream of id 9, which is not live (never allocated, or freed long ago)"
        );
        assert!(
            error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"record_stream\",\"id\":1}\n", 2)
                .contains("missing field 'stream'")
        );
    }

    #[test]
    fn v2_fraction_settings_and_devices() {
        let trace =
            "{\"op\":\"set_memory_fraction\",\"fraction\":0.5}\n{\"op\":\"alloc\",\"id\":1,\"size\":1073741824}\n";
        let r = run_with(trace, 1 << 30, OnOom::Stop);
        assert_eq!(r.ooms.len(), 1);
        assert_eq!(r.ooms[0].error.allowed_bytes, Some(1 << 29));
        assert!(
            error_at("{\"op\":\"set_memory_fraction\",\"fraction\":1.5}\n", 1)
                .contains("Invalid fraction value: 1.5. Allowed range: 0~1")
        );
        assert!(error_at("{\"op\":\"set_memory_fraction\"}\n", 1).contains("missing field 'fraction'"));

        let trace = "{\"op\":\"set_allocator_settings\",\"settings\":\"roundup_power2_divisions:4\"}\n\
                     {\"op\":\"alloc\",\"id\":1,\"size\":5000}\n";
        assert_eq!(run(trace).unwrap().current_allocated_bytes, 5120);
        assert!(
            error_at("{\"op\":\"set_allocator_settings\",\"settings\":\"foo:1\"}\n", 1)
                .contains("Unrecognized key 'foo' in CUDA allocator config.")
        );

        // One allocator per device; ids are one namespace; free finds the device.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"alloc\",\"id\":2,\"size\":3145728,\"device\":3}\n\
                     {\"op\":\"free\",\"id\":2}\n{\"op\":\"empty_cache\",\"device\":3}\n";
        let r = run(trace).unwrap();
        assert_eq!(r.current_allocated_bytes, 512);
        assert_eq!(r.devices.iter().map(|d| d.device).collect::<Vec<_>>(), vec![0, 3]);
        let d3 = &r.devices[1];
        assert_eq!((d3.current_allocated_bytes, d3.peak_allocated_bytes, d3.current_reserved_bytes), (0, 3 << 20, 0));
        assert_eq!(d3.memory_stats["num_device_free"], 1);
        assert_eq!(
            error_at("{\"op\":\"empty_cache\",\"device\":64}\n", 1),
            "line 1: device 64 is out of range: device indices go from 0 to 63"
        );
    }

    #[test]
    fn v2_graph_pools_keep_their_segments_until_released_and_emptied() {
        // A capture on stream 1 into pool (7,0): its blocks never serve stream 1's
        // allocations outside the capture, nor survive the graph's release + empty_cache.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"begin_allocate_to_pool\",\"pool\":[7,0],\"streams\":[1]}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"alloc\",\"id\":3,\"size\":4096,\"stream\":0}\n\
                     {\"op\":\"end_allocate_to_pool\",\"pool\":[7,0]}\n\
                     {\"op\":\"free\",\"id\":2}\n\
                     {\"op\":\"alloc\",\"id\":4,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"empty_cache\"}\n";
        let r = run(trace).unwrap();
        // Three 2 MiB segments: stream 1's default, the pool's, stream 0's default.
        assert_eq!(r.current_reserved_bytes, 3 * (2 << 20));
        assert_eq!(r.memory_stats["segment.small_pool.current"], 3);
        // The graph still lives: empty_cache leaves its (free) segment.
        let released = format!("{trace}{{\"op\":\"release_pool\",\"pool\":[7,0]}}\n{{\"op\":\"empty_cache\"}}\n");
        let r = run(&released).unwrap();
        assert_eq!(r.current_reserved_bytes, 2 * (2 << 20));
        assert_eq!(r.memory_stats["num_device_free"], 1);
    }

    #[test]
    fn v2_mem_pools_use_on_oom_and_delete() {
        // 40 MiB allowed: the pool's free 40 MiB segment serves a default-pool request.
        let trace = "{\"op\":\"create_pool\",\"pool\":[0,1],\"use_on_oom\":true}\n\
                     {\"op\":\"begin_allocate_to_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"alloc\",\"id\":1,\"size\":41943040}\n\
                     {\"op\":\"end_allocate_to_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"release_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"free\",\"id\":1}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":20971520}\n";
        let r = run_with(trace, 40 << 20, OnOom::Stop);
        assert!(r.ooms.is_empty());
        assert_eq!((r.current_allocated_bytes, r.current_reserved_bytes), (20 << 20, 40 << 20));
        // Without use_on_oom the same request runs out of memory.
        let r = run_with(&trace.replace(",\"use_on_oom\":true", ""), 40 << 20, OnOom::Stop);
        assert_eq!(r.ooms.len(), 1);
        // delete_pool gives the pool's free segment back.
        let deleted = format!(
            "{}{{\"op\":\"delete_pool\",\"pool\":[0,1]}}\n",
            trace.rsplit_once("{\"op\":\"alloc\",\"id\":2").unwrap().0
        );
        let r = run_with(&deleted, 40 << 20, OnOom::Stop);
        assert_eq!((r.current_reserved_bytes, r.memory_stats["num_device_free"]), (0, 1));
    }

    #[test]
    fn v2_pool_op_errors_name_the_line_and_the_fix() {
        assert!(
            error_at("{\"op\":\"release_pool\"}\n", 1).contains("missing field 'pool' (required by op 'release_pool')")
        );
        assert!(error_at("{\"op\":\"release_pool\",\"pool\":[0,5]}\n", 1).contains("no private pool (0, 5)"));
        assert!(error_at("{\"op\":\"end_allocate_to_pool\",\"pool\":[1,0]}\n", 1).contains("not currently recording"));
        assert!(error_at("{\"op\":\"create_pool\",\"pool\":[0,0]}\n", 1).contains("default pool"));
        let twice =
            "{\"op\":\"begin_allocate_to_pool\",\"pool\":[1,0]}\n{\"op\":\"begin_allocate_to_pool\",\"pool\":[1,0]}\n";
        assert!(error_at(twice, 2).contains("already recording"));
        let released = "{\"op\":\"create_pool\",\"pool\":[0,1]}\n{\"op\":\"release_pool\",\"pool\":[0,1]}\n\
                        {\"op\":\"release_pool\",\"pool\":[0,1]}\n";
        assert!(error_at(released, 3).contains("released by all its users"));
        assert!(error_at("{\"op\":\"create_pool\",\"pool\":[1]}\n", 1).starts_with("line 1, column"));
    }

    #[test]
    fn sizes_past_the_device_go_through_the_allocator_as_in_pytorch() {
        // 800 000 000 GiB: below 1 EiB, so PyTorch's allocator sees it, releases the
        // cache, retries once and raises its out-of-memory error.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"free\",\"id\":1}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":858993459200000000}\n";
        let r = run(trace).unwrap();
        assert!(r.stopped_early);
        assert_eq!(r.ooms.len(), 1);
        assert!(r.ooms[0].error.to_string().contains("Tried to allocate 800000000.00 GiB"), "{}", r.ooms[0].error);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(stat(&r, "num_alloc_retries"), 1);
        // The retry released the cached 2 MiB segment first.
        assert_eq!(stat(&r, "num_device_free"), 1);
        assert_eq!(r.current_reserved_bytes, 0);
        assert!(r.too_large.is_empty());
    }

    #[test]
    fn sizes_of_an_exbibyte_are_refused_before_the_allocator() {
        for size in [MAX_REQUEST, u64::MAX] {
            let trace = format!(
                "{{\"op\":\"alloc\",\"id\":1,\"size\":1}}\n{{\"op\":\"alloc\",\"id\":2,\"size\":{size}}}\n\
                 {{\"op\":\"free\",\"id\":2}}\n{{\"op\":\"free\",\"id\":1}}\n"
            );
            let before = run("{\"op\":\"alloc\",\"id\":1,\"size\":1}\n").unwrap();
            let stopped = run(&trace).unwrap();
            assert!(stopped.stopped_early);
            assert_eq!(stopped.events, 2);
            // Every statistic is as it was before the refused request.
            assert_eq!(stopped.memory_stats, before.memory_stats);
            assert_eq!(stopped.too_large.len(), 1);
            let record = &stopped.too_large[0];
            assert_eq!((record.line, record.event_index, record.requested_bytes), (2, 1, size));
            assert!(record.message.contains("Tried to allocate more than 1EB memory"), "{}", record.message);
            assert!(stopped.ooms.is_empty());
            // Under Continue the failed id's free is ignored, like a failed allocation's.
            let went_on = run_with(&trace, MAX_BYTES, OnOom::Continue);
            assert!(!went_on.stopped_early);
            assert_eq!(went_on.events, 4);
            assert_eq!(stat(&went_on, "num_ooms"), 0);
            assert_eq!(stat(&went_on, "num_alloc_retries"), 0);
            assert_eq!(went_on.too_large.len(), 1);
        }
        // Just below 1 EiB reaches the allocator.
        let r = run(&format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{}}}\n", MAX_REQUEST - 1)).unwrap();
        assert_eq!((r.ooms.len(), r.too_large.len(), stat(&r, "num_ooms")), (1, 0, 1));
    }

    #[test]
    fn free_of_an_id_that_is_not_live() {
        assert_eq!(
            error_at("{\"op\":\"free\",\"id\":7}\n", 1),
            "line 1: free of id 7, which is not live (never allocated, or freed long ago)"
        );
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"empty_cache\"}\n{\"op\":\"free\",\"id\":7}\n\
                     {\"op\":\"free\",\"id\":7}\n";
        assert_eq!(error_at(trace, 4), "line 4: free of id 7, which is not live (already freed at line 3)");
    }

    #[test]
    fn alloc_of_a_live_id() {
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"alloc\",\"id\":7,\"size\":2}\n";
        assert_eq!(
            error_at(trace, 2),
            "line 2: alloc of id 7, which is already live (allocated at line 1); free it first"
        );
        // After a free the id may be used again.
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"free\",\"id\":7}\n{\"op\":\"alloc\",\"id\":7,\"size\":2}\n";
        assert_eq!(run(trace).unwrap().live_allocations, 1);
    }

    #[test]
    fn io_errors_name_the_line() {
        struct Failing(usize);
        impl io::Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("disk on fire"));
                }
                let line = b"{\"op\":\"empty_cache\"}\n";
                self.0 -= 1;
                buf[..line.len()].copy_from_slice(line);
                Ok(line.len())
            }
        }
        let err = replay(io::BufReader::with_capacity(64, Failing(2)), &ReplayOptions::default()).unwrap_err();
        assert!(matches!(err, ReplayError::Io { line: 3, .. }), "{err:?}");
        assert_eq!(err.to_string(), "line 3: cannot read the trace: disk on fire");
        // Invalid UTF-8 inside a string is a JSON error, not a panic.
        let err = replay(&b"{\"op\":\"fr\xffee\",\"id\":1}\n"[..], &ReplayOptions::default()).unwrap_err();
        assert_eq!(err.line(), Some(1));
    }

    #[test]
    fn overlong_lines_are_refused_without_reading_them_whole() {
        let mut trace = b"{\"op\":\"empty_cache\"}\n".to_vec();
        trace.resize(trace.len() + MAX_LINE_BYTES, b' ');
        trace.extend_from_slice(b"{\"op\":\"empty_cache\"}\n");
        let err = replay(&trace[..], &ReplayOptions::default()).unwrap_err();
        assert!(matches!(err, ReplayError::LineTooLong { line: 2, .. }), "{err:?}");
        // Exactly at the limit, newline included, is fine.
        let mut trace = vec![b' '; MAX_LINE_BYTES - 21];
        trace.extend_from_slice(b"{\"op\":\"empty_cache\"}\n");
        assert_eq!(trace.len(), MAX_LINE_BYTES);
        assert_eq!(replay(&trace[..], &ReplayOptions::default()).unwrap().events, 1);
    }

    #[test]
    fn bad_options() {
        let opts = ReplayOptions { capacity_bytes: Some(MAX_BYTES + 1), ..Default::default() };
        let err = replay(&b""[..], &opts).unwrap_err();
        assert!(matches!(err, ReplayError::CapacityTooLarge { .. }));
        assert_eq!(err.line(), None);
        let opts = ReplayOptions {
            config: AllocatorConfig { large_segment_size: 3 * MIB, ..Default::default() },
            ..Default::default()
        };
        assert!(matches!(replay(&b""[..], &opts).unwrap_err(), ReplayError::Setup(_)));
    }

    const OOM_TRACE: &str = r#"{"op":"alloc","id":1,"size":41943040}
{"op":"alloc","id":2,"size":41943040,"tag":"activation"}
{"op":"alloc","id":3,"size":1}
{"op":"free","id":2}
{"op":"free","id":1}
{"op":"alloc","id":4,"size":41943040}
"#;

    #[test]
    fn oom_stop_ends_the_replay_with_stats() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Stop);
        assert!(r.stopped_early);
        assert_eq!(r.events, 2, "the failed alloc counts as applied");
        assert_eq!(r.lines, 2);
        assert_eq!(r.ooms.len(), 1);
        let oom = &r.ooms[0];
        assert_eq!((oom.event_index, oom.line, oom.requested_bytes), (1, 2, 41_943_040));
        assert_eq!(oom.error.segment_bytes, 41_943_040);
        assert_eq!(oom.error.total_bytes, 64 * MIB);
        assert_eq!(oom.error.free_bytes, 24 * MIB);
        assert_eq!(oom.error.allocated_bytes, 40 * MIB);
        assert_eq!(oom.memory_stats["num_ooms"], 1);
        assert_eq!(oom.memory_stats["allocated_bytes.all.current"], 40 * MIB as i64);
        assert!(oom.error.to_string().contains("out of memory"));
        assert_eq!(r.current_allocated_bytes, 40 * MIB);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(r.live_allocations, 1);
    }

    #[test]
    fn oom_continue_ignores_frees_of_failed_allocations() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Continue);
        assert!(!r.stopped_early);
        assert_eq!(r.events, 6);
        assert_eq!(r.ooms.len(), 1);
        assert_eq!(r.ooms[0].line, 2);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(r.current_allocated_bytes, 40 * MIB + 512, "id 4 reuses id 1's cached segment");
        assert_eq!(r.live_allocations, 2, "ids 3 and 4");
        // A failed alloc's id stays taken until the trace frees it; a second free is an error.
        let reuse = "{\"op\":\"alloc\",\"id\":1,\"size\":41943040}\n{\"op\":\"alloc\",\"id\":2,\"size\":41943040}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":1}\n";
        let opts = ReplayOptions { capacity_bytes: Some(64 * MIB), on_oom: OnOom::Continue, ..Default::default() };
        let err = replay(reuse.as_bytes(), &opts).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: alloc of id 2, which is already live (allocated at line 2, where it ran out of memory); free it first"
        );
        let twice =
            "{\"op\":\"alloc\",\"id\":1,\"size\":104857600}\n{\"op\":\"free\",\"id\":1}\n{\"op\":\"free\",\"id\":1}\n";
        let err = replay(twice.as_bytes(), &opts).unwrap_err();
        assert_eq!(err.to_string(), "line 3: free of id 1, which is not live (already freed at line 2)");
    }

    #[test]
    fn oom_records_are_capped() {
        let mut trace = String::from("{\"op\":\"alloc\",\"id\":0,\"size\":1}\n");
        for i in 1..=(MAX_OOM_RECORDS as u64 + 5) {
            trace.push_str(&format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":4194304}}\n"));
        }
        let r = run_with(&trace, 2 * MIB, OnOom::Continue);
        assert_eq!(r.ooms.len(), MAX_OOM_RECORDS);
        assert_eq!(r.ooms_not_recorded, 5);
        assert_eq!(stat(&r, "num_ooms"), MAX_OOM_RECORDS as i64 + 5);
    }

    #[test]
    fn report_serializes_with_messages() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Stop);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["events"], 2);
        assert_eq!(v["stopped_early"], true);
        assert_eq!(v["memory_stats"]["num_ooms"], 1);
        let oom = &v["ooms"][0];
        assert_eq!(oom["line"], 2);
        assert_eq!(oom["event_index"], 1);
        assert_eq!(oom["requested_bytes"], 41_943_040);
        assert!(oom["message"].as_str().unwrap().contains("Tried to allocate 40.00 MiB"));
        assert_eq!(oom["error"]["free_bytes"], 24 * MIB);
        assert_eq!(oom["memory_stats"]["allocated_bytes.all.current"], 40 * MIB);
    }

    #[test]
    fn alloc_conf_changes_the_replay() {
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":5000}\n";
        let config =
            AllocatorConfig { roundup_power2_divisions: [4; vramlab_allocator::ROUNDUP_BUCKETS], ..Default::default() };
        let r = replay(trace.as_bytes(), &ReplayOptions { config, ..Default::default() }).unwrap();
        assert_eq!(r.current_allocated_bytes, 5120);
        assert_eq!(stat(&r, "max_split_size"), -1);
    }

    #[test]
    fn synthetic_trace_is_valid_deterministic_and_exact() {
        let a = synthetic_trace(20_000, 7);
        assert_eq!(a, synthetic_trace(20_000, 7));
        assert_ne!(a, synthetic_trace(20_000, 8));
        assert_eq!(a.lines().count(), 20_000);
        let r = run(&a).unwrap();
        assert_eq!(r.events, 20_000);
        assert!(r.ooms.is_empty());
        assert!(r.peak_reserved_bytes > 1 << 30, "large tensors appear: {}", r.peak_reserved_bytes);
        assert!(stat(&r, "segment.small_pool.allocated") > 0);
        assert!(stat(&r, "num_device_free") > 0, "empty_cache released something");
        for tag in Tag::ALL {
            if tag != Tag::Parameter && tag != Tag::OptimizerState {
                assert!(a.contains(&format!("\"tag\":\"{tag}\"")), "{tag}");
            }
        }
        assert!(a.contains("\"stream\":1"));
        assert_eq!(a.matches("empty_cache").count(), 4);
        assert_eq!(a.matches("reset_peak").count(), 1);
        assert!(synthetic_trace(0, 1).is_empty());
        assert_eq!(run(&synthetic_trace(3, 1)).unwrap().events, 3);
    }

    #[test]
    fn synthetic_trace_runs_out_of_memory_on_a_small_device() {
        let trace = synthetic_trace(5_000, 3);
        let r = run_with(&trace, 2 << 30, OnOom::Continue);
        assert_eq!(r.events, 5_000);
        assert!(!r.ooms.is_empty());
        assert_eq!(r.ooms.len() as i64 + r.ooms_not_recorded as i64, stat(&r, "num_ooms"));
    }

    #[test]
    fn write_trace_round_trips() {
        let ops = [
            TraceOp::Alloc { id: u64::MAX, size: 1, stream: 2, tag: Some(Tag::Gradient) },
            TraceOp::Alloc { id: 0, size: 0, stream: 0, tag: None },
            TraceOp::Free { id: u64::MAX },
            TraceOp::EmptyCache,
            TraceOp::ResetPeak,
        ];
        let mut out = Vec::new();
        write_trace(&mut out, ops).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"op\":\"alloc\",\"id\":18446744073709551615,\"size\":1,\"stream\":2,\"tag\":\"gradient\"}\n\
             {\"op\":\"alloc\",\"id\":0,\"size\":0}\n{\"op\":\"free\",\"id\":18446744073709551615}\n\
             {\"op\":\"empty_cache\"}\n{\"op\":\"reset_peak\"}\n"
        );
        let r = run(&text).unwrap();
        assert_eq!(r.events, 5);
        assert_eq!(r.live_allocations, 1);
    }

    #[test]
    fn streams_the_allocator_refuses_are_errors_with_lines() {
        let expandable = AllocatorConfig { expandable_segments: true, ..Default::default() };
        let ok = "{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4095}\n\
                  {\"op\":\"alloc\",\"id\":2,\"size\":30000000,\"stream\":4095}\n\
                  {\"op\":\"free\",\"id\":1}\n{\"op\":\"empty_cache\"}\n";
        let bad = "{\"op\":\"empty_cache\"}\n{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4294967295}\n";
        for config in [AllocatorConfig::default(), expandable] {
            let opts = ReplayOptions { config, ..Default::default() };
            assert_eq!(replay(ok.as_bytes(), &opts).unwrap().events, 4);
            let err = replay(bad.as_bytes(), &opts).unwrap_err();
            assert!(matches!(err, ReplayError::Allocator { line: 2, .. }), "{err:?}");
            assert!(err.to_string().contains("4294967295"), "{err}");
        }
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn quiet(trace: &[u8]) {
            let opts = ReplayOptions { capacity_bytes: Some(256 * MIB), on_oom: OnOom::Continue, ..Default::default() };
            let _ = replay(trace, &opts);
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                quiet(&bytes);
            }

            #[test]
            fn on_mutated_traces(seed in 0u64..1000, cuts in proptest::collection::vec((0usize..4000, any::<u8>()), 1..8)) {
                let mut bytes = synthetic_trace(60, seed).into_bytes();
                for (at, byte) in cuts {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                quiet(&bytes);
            }

            #[test]
            fn on_arbitrary_ops(
                ops in proptest::collection::vec(
                    (0u8..5, 0u64..6, prop_oneof![Just(0u64), 0u64..(4 << 20), 0u64..(1 << 31), any::<u64>()], 0u32..3),
                    0..60,
                ),
                expandable in any::<bool>(),
            ) {
                let mut text = String::new();
                for (kind, id, size, stream) in ops {
                    text.push_str(&match kind {
                        0 | 1 => format!("{{\"op\":\"alloc\",\"id\":{id},\"size\":{size},\"stream\":{stream}}}\n"),
                        2 => format!("{{\"op\":\"free\",\"id\":{id}}}\n"),
                        3 => "{\"op\":\"empty_cache\"}\n".to_owned(),
                        _ => "{\"op\":\"reset_peak\"}\n".to_owned(),
                    });
                }
                let config = AllocatorConfig { expandable_segments: expandable, ..Default::default() };
                let opts = ReplayOptions { capacity_bytes: Some(1 << 30), on_oom: OnOom::Continue, config };
                let _ = replay(text.as_bytes(), &opts);
            }
        }
    }
}
