//! Compact event storage and the recorder that fills it.
//!
//! # Layout
//!
//! Every event becomes one (kernels: two) fixed-size 32-byte [`Record`]s. The
//! records live in chunks of [`CHUNK_RECORDS`] (2 MiB each); a full chunk is
//! never grown or moved, so recording never copies old data and never
//! allocates per event — one allocation per 65,536 records. What varies per
//! event but repeats across events is interned into small tables:
//!
//! - a *context* (device, stream, recording thread) becomes a `u16`,
//! - a kernel's (name, algorithm) pair becomes a `u32`,
//! - a phase name becomes a `u32`.
//!
//! A block's requested size is stored as its *slack* below the rounded size
//! (`u32`); the rare slack that does not fit goes to a side table keyed by the
//! record's index.
//!
//! | kind            | `time_ns`  | `a`        | `b`           | `c`               | `flags`       |
//! |-----------------|------------|------------|---------------|-------------------|---------------|
//! | allocator event | event time | address¹   | rounded bytes | rounded−requested | tag, ignored  |
//! | kernel          | start      | flops      | bytes moved   | kernel name id    |               |
//! | kernel (cont.)  | duration   | launch ns  | —             | —                 |               |
//! | copy            | start      | duration   | bytes         | copy kind, flags  |               |
//! | phase begin/end | event time | depth      | —             | phase name id     |               |
//!
//! ¹ For `oom` events the device's free bytes, as the engine reports them.

use std::borrow::Borrow;
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use vramlab_engine::hooks::{AllocatorAction, CopyKind, Event, Subscriber, Tag};

/// Records per chunk (2 MiB of 32-byte records).
pub const CHUNK_RECORDS: usize = 1 << 16;
const CHUNK_SHIFT: u32 = 16;
const CHUNK_MASK: usize = CHUNK_RECORDS - 1;

/// Device index of contexts that belong to no device (phase events).
pub(crate) const NO_DEVICE: u32 = u32::MAX;

/// `c` value meaning "the requested size is in the overflow table".
const SLACK_OVERFLOW: u32 = u32::MAX;

/// Flag bit: the record was left out of the series (a free of a block, or a
/// segment, that was allocated before the recording began).
pub(crate) const FLAG_IGNORED: u8 = 0x80;
const TAG_MASK: u8 = 0x0f;

/// Record kinds. Allocator actions keep their own codes, below `KIND_KERNEL`.
pub(crate) mod kind {
    pub const ALLOC: u8 = 0;
    pub const FREE_REQUESTED: u8 = 1;
    pub const FREE_COMPLETED: u8 = 2;
    pub const SEGMENT_ALLOC: u8 = 3;
    pub const SEGMENT_FREE: u8 = 4;
    pub const SEGMENT_MAP: u8 = 5;
    pub const SEGMENT_UNMAP: u8 = 6;
    pub const OOM: u8 = 7;
    pub const EMPTY_CACHE: u8 = 8;
    pub const KERNEL: u8 = 16;
    pub const KERNEL_CONT: u8 = 17;
    pub const COPY: u8 = 18;
    pub const PHASE_BEGIN: u8 = 19;
    pub const PHASE_END: u8 = 20;
}

/// One packed event record (see the module documentation for the layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Record {
    pub time_ns: u64,
    pub a: u64,
    pub b: u64,
    pub c: u32,
    pub ctx: u16,
    pub kind: u8,
    pub flags: u8,
}

const _: () = assert!(std::mem::size_of::<Record>() == 32);

impl Record {
    /// Whether this is an allocator event.
    #[inline]
    pub(crate) fn is_allocator(&self) -> bool {
        self.kind <= kind::EMPTY_CACHE
    }

    /// The tag's category index (0..7 = `Tag::ALL` order, 7 = untagged).
    #[inline]
    pub(crate) fn category_index(&self) -> usize {
        match self.flags & TAG_MASK {
            0 => 7,
            t => (t - 1) as usize,
        }
    }

    /// The allocation's tag (allocator records).
    pub(crate) fn tag(&self) -> Option<Tag> {
        match self.flags & TAG_MASK {
            0 => None,
            t => Tag::ALL.get((t - 1) as usize).copied(),
        }
    }

    #[inline]
    pub(crate) fn ignored(&self) -> bool {
        self.flags & FLAG_IGNORED != 0
    }
}

pub(crate) fn action_code(action: AllocatorAction) -> u8 {
    match action {
        AllocatorAction::Alloc => kind::ALLOC,
        AllocatorAction::FreeRequested => kind::FREE_REQUESTED,
        AllocatorAction::FreeCompleted => kind::FREE_COMPLETED,
        AllocatorAction::SegmentAlloc => kind::SEGMENT_ALLOC,
        AllocatorAction::SegmentFree => kind::SEGMENT_FREE,
        AllocatorAction::SegmentMap => kind::SEGMENT_MAP,
        AllocatorAction::SegmentUnmap => kind::SEGMENT_UNMAP,
        AllocatorAction::Oom => kind::OOM,
        AllocatorAction::EmptyCache => kind::EMPTY_CACHE,
    }
}

#[inline]
fn tag_code(tag: Option<Tag>) -> u8 {
    match tag {
        None => 0,
        Some(Tag::Parameter) => 1,
        Some(Tag::Gradient) => 2,
        Some(Tag::Activation) => 3,
        Some(Tag::OptimizerState) => 4,
        Some(Tag::Input) => 5,
        Some(Tag::Temporary) => 6,
        Some(Tag::Workspace) => 7,
    }
}

pub(crate) fn copy_kind_code(kind: CopyKind) -> u32 {
    match kind {
        CopyKind::HostToDevice => 0,
        CopyKind::DeviceToHost => 1,
        CopyKind::DeviceToDevice => 2,
        CopyKind::HostToHost => 3,
    }
}

pub(crate) fn copy_kind_of(code: u32) -> CopyKind {
    match code & 3 {
        0 => CopyKind::HostToDevice,
        1 => CopyKind::DeviceToHost,
        2 => CopyKind::DeviceToDevice,
        _ => CopyKind::HostToHost,
    }
}

// ---------------------------------------------------------------------------
// A small fast hasher for the intern tables (FxHash's mixing step).

#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

// ---------------------------------------------------------------------------
// Recording threads.

/// Names of the threads that emitted events, by the index this crate gave them.
fn thread_names() -> &'static Mutex<Vec<String>> {
    static NAMES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    NAMES.get_or_init(|| Mutex::new(Vec::new()))
}

static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static THREAD_INDEX: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// This thread's index among the threads that emitted events (assigned on
/// first use, stable for the process).
#[inline]
pub(crate) fn thread_index() -> u32 {
    THREAD_INDEX.with(|t| {
        let v = t.get();
        if v != u32::MAX {
            return v;
        }
        let v = register_thread();
        t.set(v);
        v
    })
}

#[cold]
fn register_thread() -> u32 {
    let index = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    let current = std::thread::current();
    let name = current.name().map_or_else(|| format!("thread {index}"), str::to_owned);
    let mut names = thread_names().lock().unwrap_or_else(|e| e.into_inner());
    if names.len() <= index as usize {
        names.resize(index as usize + 1, String::new());
    }
    names[index as usize] = name;
    index
}

/// The name of a recording thread (`main`, `thread 3`, …).
pub(crate) fn thread_name(index: u32) -> String {
    let names = thread_names().lock().unwrap_or_else(|e| e.into_inner());
    names.get(index as usize).filter(|n| !n.is_empty()).cloned().unwrap_or_else(|| format!("thread {index}"))
}

// ---------------------------------------------------------------------------
// The frozen recording.

/// Where an event came from: the device and stream it names and the thread
/// that emitted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Context {
    /// The device index (`u32::MAX` for phase events, which belong to no device).
    pub device: u32,
    pub stream: u32,
    /// The recording thread's index (see [`crate::Profile::thread_names`]).
    pub thread: u32,
}

/// An interned kernel: the operation and the algorithm that ran it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelName {
    pub name: String,
    pub algorithm: String,
}

/// A finished recording: the packed records and their intern tables.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    chunks: Vec<Vec<Record>>,
    len: usize,
    /// (record index, requested bytes) for records whose slack did not fit.
    overflow: Vec<(u64, u64)>,
    pub(crate) contexts: Vec<Context>,
    pub(crate) kernels: Vec<KernelName>,
    pub(crate) phases: Vec<String>,
}

impl Recording {
    /// Number of records (a kernel event takes two).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held by the records and side tables (capacity, not length).
    pub fn heap_bytes(&self) -> usize {
        let records: usize = self.chunks.iter().map(|c| c.capacity() * std::mem::size_of::<Record>()).sum();
        records
            + self.chunks.capacity() * std::mem::size_of::<Vec<Record>>()
            + self.overflow.capacity() * 16
            + self.contexts.capacity() * std::mem::size_of::<Context>()
            + self.kernels.iter().map(|k| k.name.capacity() + k.algorithm.capacity() + 48).sum::<usize>()
            + self.phases.iter().map(|p| p.capacity() + 24).sum::<usize>()
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> &Record {
        &self.chunks[index >> CHUNK_SHIFT][index & CHUNK_MASK]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, index: usize) -> &mut Record {
        &mut self.chunks[index >> CHUNK_SHIFT][index & CHUNK_MASK]
    }

    /// Every record with its index, in recording order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Record)> + '_ {
        self.chunks.iter().flat_map(|c| c.iter()).enumerate()
    }

    /// The records from `start` (inclusive) to `end` (exclusive).
    pub(crate) fn range(&self, start: usize, end: usize) -> impl Iterator<Item = (usize, &Record)> + '_ {
        (start..end.min(self.len)).map(move |i| (i, self.get(i)))
    }

    /// The requested bytes of an allocator record.
    #[inline]
    pub(crate) fn requested(&self, index: usize, r: &Record) -> u64 {
        if r.c == SLACK_OVERFLOW {
            match self.overflow.binary_search_by_key(&(index as u64), |&(i, _)| i) {
                Ok(pos) => self.overflow[pos].1,
                Err(_) => r.b,
            }
        } else {
            r.b - u64::from(r.c)
        }
    }

    #[inline]
    pub(crate) fn context(&self, r: &Record) -> Context {
        self.contexts[r.ctx as usize]
    }

    /// The columns, for serialization.
    fn columns(&self) -> RecordingColumns {
        let mut cols = RecordingColumns {
            time_ns: Vec::with_capacity(self.len),
            a: Vec::with_capacity(self.len),
            b: Vec::with_capacity(self.len),
            c: Vec::with_capacity(self.len),
            ctx: Vec::with_capacity(self.len),
            kind: Vec::with_capacity(self.len),
            flags: Vec::with_capacity(self.len),
            overflow: self.overflow.clone(),
            contexts: self.contexts.clone(),
            kernels: self.kernels.clone(),
            phases: self.phases.clone(),
        };
        for (_, r) in self.iter() {
            cols.time_ns.push(r.time_ns);
            cols.a.push(r.a);
            cols.b.push(r.b);
            cols.c.push(r.c);
            cols.ctx.push(r.ctx);
            cols.kind.push(r.kind);
            cols.flags.push(r.flags);
        }
        cols
    }

    /// Builds a recording from the given records (tests and deserialization).
    pub(crate) fn from_parts(
        records: impl IntoIterator<Item = Record>,
        overflow: Vec<(u64, u64)>,
        contexts: Vec<Context>,
        kernels: Vec<KernelName>,
        phases: Vec<String>,
    ) -> Recording {
        let mut w = Writer::default();
        for r in records {
            w.push(r);
        }
        let (chunks, len) = w.finish();
        Recording { chunks, len, overflow, contexts, kernels, phases }
    }
}

/// The serialized form of a [`Recording`]: one array per record field.
#[derive(Serialize, Deserialize)]
struct RecordingColumns {
    time_ns: Vec<u64>,
    a: Vec<u64>,
    b: Vec<u64>,
    c: Vec<u32>,
    ctx: Vec<u16>,
    kind: Vec<u8>,
    flags: Vec<u8>,
    overflow: Vec<(u64, u64)>,
    contexts: Vec<Context>,
    kernels: Vec<KernelName>,
    phases: Vec<String>,
}

impl Serialize for Recording {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.columns().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Recording {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let c = RecordingColumns::deserialize(deserializer)?;
        let n = c.time_ns.len();
        if [c.a.len(), c.b.len(), c.c.len(), c.ctx.len(), c.kind.len(), c.flags.len()].iter().any(|&l| l != n) {
            return Err(serde::de::Error::custom("recording columns have different lengths"));
        }
        if let Some(bad) = c.ctx.iter().find(|&&x| x as usize >= c.contexts.len()) {
            return Err(serde::de::Error::custom(format!(
                "record context {bad} out of range ({} contexts)",
                c.contexts.len()
            )));
        }
        let records = (0..n).map(|i| Record {
            time_ns: c.time_ns[i],
            a: c.a[i],
            b: c.b[i],
            c: c.c[i],
            ctx: c.ctx[i],
            kind: c.kind[i],
            flags: c.flags[i],
        });
        let mut rec = Recording::from_parts(records, c.overflow, c.contexts, c.kernels, c.phases);
        rec.overflow.sort_unstable();
        Ok(rec)
    }
}

// ---------------------------------------------------------------------------
// Writing.

/// Append-only chunked record storage.
#[derive(Debug, Default)]
struct Writer {
    full: Vec<Vec<Record>>,
    tail: Vec<Record>,
    len: usize,
}

impl Writer {
    #[inline(always)]
    fn push(&mut self, r: Record) -> usize {
        if self.tail.len() == self.tail.capacity() {
            self.grow();
        }
        self.tail.push(r);
        self.len += 1;
        self.len - 1
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let next = Vec::with_capacity(CHUNK_RECORDS);
        let old = std::mem::replace(&mut self.tail, next);
        if !old.is_empty() {
            self.full.push(old);
        }
    }

    fn finish(mut self) -> (Vec<Vec<Record>>, usize) {
        if !self.tail.is_empty() {
            self.full.push(std::mem::take(&mut self.tail));
        }
        (self.full, self.len)
    }

    fn heap_bytes(&self) -> usize {
        (self.full.len() * CHUNK_RECORDS + self.tail.capacity()) * std::mem::size_of::<Record>()
    }
}

/// Interns contexts, kernel names and phase names while recording.
const CONTEXT_CACHE: usize = 16;
/// A key no event has (device `NO_DEVICE` with a stream other than 0).
const NO_KEY: ((u32, u32, u32), u16) = ((NO_DEVICE, u32::MAX, u32::MAX), 0);

#[derive(Debug)]
struct Interner {
    contexts: Vec<Context>,
    context_ids: FxHashMap<(u32, u32, u32), u16>,
    /// Direct-mapped cache of recent contexts (events alternate between a few
    /// streams and threads).
    context_cache: [((u32, u32, u32), u16); CONTEXT_CACHE],
    kernels: Vec<(&'static str, &'static str)>,
    /// By the strings' addresses and lengths (fast), then by content.
    kernel_ptrs: FxHashMap<(usize, usize, usize, usize), u32>,
    kernel_ids: HashMap<(&'static str, &'static str), u32>,
    last_kernel: Option<((usize, usize, usize, usize), u32)>,
    phases: Vec<Arc<str>>,
    phase_ids: HashMap<Arc<str>, u32>,
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            contexts: Vec::new(),
            context_ids: FxHashMap::default(),
            context_cache: [NO_KEY; CONTEXT_CACHE],
            kernels: Vec::new(),
            kernel_ptrs: FxHashMap::default(),
            kernel_ids: HashMap::new(),
            last_kernel: None,
            phases: Vec::new(),
            phase_ids: HashMap::new(),
        }
    }
}

#[inline(always)]
fn context_slot(key: (u32, u32, u32)) -> usize {
    (key.0.wrapping_mul(7) ^ key.1 ^ key.2.wrapping_mul(5)) as usize % CONTEXT_CACHE
}

impl Interner {
    /// The context's id, or `None` when the table is full (65,535 contexts).
    #[inline(always)]
    fn context(&mut self, device: u32, stream: u32, thread: u32) -> Option<u16> {
        let key = (device, stream, thread);
        let (k, id) = self.context_cache[context_slot(key)];
        if k == key {
            return Some(id);
        }
        self.context_slow(key)
    }

    #[cold]
    #[inline(never)]
    fn context_slow(&mut self, key: (u32, u32, u32)) -> Option<u16> {
        let id = match self.context_ids.get(&key) {
            Some(&id) => id,
            None => {
                if self.contexts.len() >= usize::from(u16::MAX) {
                    return None;
                }
                let id = self.contexts.len() as u16;
                self.contexts.push(Context { device: key.0, stream: key.1, thread: key.2 });
                self.context_ids.insert(key, id);
                id
            }
        };
        self.context_cache[context_slot(key)] = (key, id);
        Some(id)
    }

    #[inline]
    fn kernel(&mut self, name: &'static str, algorithm: &'static str) -> u32 {
        let key = (name.as_ptr() as usize, name.len(), algorithm.as_ptr() as usize, algorithm.len());
        if let Some((k, id)) = self.last_kernel
            && k == key
        {
            return id;
        }
        let id = match self.kernel_ptrs.get(&key) {
            Some(&id) => id,
            None => self.kernel_slow(key, name, algorithm),
        };
        self.last_kernel = Some((key, id));
        id
    }

    #[cold]
    fn kernel_slow(&mut self, key: (usize, usize, usize, usize), name: &'static str, algorithm: &'static str) -> u32 {
        let id = *self.kernel_ids.entry((name, algorithm)).or_insert_with(|| {
            self.kernels.push((name, algorithm));
            (self.kernels.len() - 1) as u32
        });
        self.kernel_ptrs.insert(key, id);
        id
    }

    fn phase(&mut self, name: &Arc<str>) -> u32 {
        if let Some(&id) = self.phase_ids.get::<str>(name.borrow()) {
            return id;
        }
        let id = self.phases.len() as u32;
        self.phases.push(name.clone());
        self.phase_ids.insert(name.clone(), id);
        id
    }
}

/// What the recorder holds while recording.
#[derive(Debug, Default)]
pub(crate) struct RecorderState {
    writer: Writer,
    overflow: Vec<(u64, u64)>,
    interner: Interner,
    /// Events dropped because the context table was full.
    pub(crate) dropped_events: u64,
    /// Events of kinds this version does not know (the event enum is non-exhaustive).
    pub(crate) unknown_events: u64,
}

impl RecorderState {
    /// Records one event emitted on recording thread `thread`.
    #[inline(always)]
    pub(crate) fn record(&mut self, thread: u32, event: &Event) {
        match event {
            Event::Allocator(e) => {
                let Some(ctx) = self.interner.context(e.device, e.stream, thread) else {
                    self.dropped_events += 1;
                    return;
                };
                let slack = e.rounded_bytes.wrapping_sub(e.requested_bytes);
                let c = if e.requested_bytes <= e.rounded_bytes && slack < u64::from(SLACK_OVERFLOW) {
                    slack as u32
                } else {
                    SLACK_OVERFLOW
                };
                let index = self.writer.push(Record {
                    time_ns: e.time_ns,
                    a: e.addr,
                    b: e.rounded_bytes,
                    c,
                    ctx,
                    kind: action_code(e.action),
                    flags: tag_code(e.tag),
                });
                if c == SLACK_OVERFLOW {
                    self.overflow.push((index as u64, e.requested_bytes));
                }
            }
            Event::Kernel(k) => {
                let Some(ctx) = self.interner.context(k.device, k.stream, thread) else {
                    self.dropped_events += 1;
                    return;
                };
                let id = self.interner.kernel(k.name, k.algorithm);
                self.writer.push(Record {
                    time_ns: k.start_ns,
                    a: k.flops,
                    b: k.bytes,
                    c: id,
                    ctx,
                    kind: kind::KERNEL,
                    flags: 0,
                });
                self.writer.push(Record {
                    time_ns: k.duration_ns,
                    a: k.launch_ns,
                    b: 0,
                    c: 0,
                    ctx,
                    kind: kind::KERNEL_CONT,
                    flags: 0,
                });
            }
            Event::Copy(c) => {
                let Some(ctx) = self.interner.context(c.device, c.stream, thread) else {
                    self.dropped_events += 1;
                    return;
                };
                let flags = copy_kind_code(c.kind) | u32::from(c.pinned) << 2 | u32::from(c.non_blocking) << 3;
                self.writer.push(Record {
                    time_ns: c.start_ns,
                    a: c.duration_ns,
                    b: c.bytes,
                    c: flags,
                    ctx,
                    kind: kind::COPY,
                    flags: 0,
                });
            }
            Event::Phase(p) => {
                let Some(ctx) = self.interner.context(NO_DEVICE, 0, thread) else {
                    self.dropped_events += 1;
                    return;
                };
                let id = self.interner.phase(&p.name);
                self.writer.push(Record {
                    time_ns: p.time_ns,
                    a: u64::from(p.depth),
                    b: 0,
                    c: id,
                    ctx,
                    kind: if p.begin { kind::PHASE_BEGIN } else { kind::PHASE_END },
                    flags: 0,
                });
            }
            _ => self.unknown_events += 1,
        }
    }

    /// Records stored so far.
    pub(crate) fn len(&self) -> usize {
        self.writer.len
    }

    /// Heap bytes of the record chunks so far.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.writer.heap_bytes()
    }

    /// Freezes the state into a [`Recording`].
    pub(crate) fn finish(self) -> Recording {
        let (chunks, len) = self.writer.finish();
        let mut overflow = self.overflow;
        overflow.sort_unstable();
        Recording {
            chunks,
            len,
            overflow,
            contexts: self.interner.contexts,
            kernels: self
                .interner
                .kernels
                .into_iter()
                .map(|(n, a)| KernelName { name: n.to_owned(), algorithm: a.to_owned() })
                .collect(),
            phases: self.interner.phases.iter().map(|p| p.to_string()).collect(),
        }
    }
}

/// The subscriber: appends every event to the record storage under one mutex
/// (one lock per batch of events).
#[derive(Debug, Default)]
pub struct Recorder {
    state: Mutex<RecorderState>,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    #[inline(always)]
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, RecorderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records stored so far (a kernel event takes two).
    pub fn records(&self) -> usize {
        self.lock().len()
    }

    /// Heap bytes of the record storage so far.
    pub fn heap_bytes(&self) -> usize {
        self.lock().heap_bytes()
    }

    /// Takes what was recorded, leaving the recorder empty.
    pub(crate) fn take(&self) -> RecorderState {
        std::mem::take(&mut *self.lock())
    }
}

impl Subscriber for Recorder {
    #[inline]
    fn on_event(&self, event: &Event) {
        let thread = thread_index();
        self.lock().record(thread, event);
    }

    #[inline]
    fn on_events(&self, events: &[Event]) {
        let thread = thread_index();
        let mut st = self.lock();
        for e in events {
            st.record(thread, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramlab_engine::hooks::{AllocatorEvent, KernelEvent, PhaseEvent};

    fn alloc(action: AllocatorAction, addr: u64, requested: u64, rounded: u64, tag: Option<Tag>) -> Event {
        Event::Allocator(AllocatorEvent {
            action,
            time_ns: 5,
            device: 2,
            stream: 1,
            addr,
            requested_bytes: requested,
            rounded_bytes: rounded,
            tag,
        })
    }

    #[test]
    fn records_round_trip_through_storage() {
        let mut st = RecorderState::default();
        st.record(0, &alloc(AllocatorAction::Alloc, 4096, 1000, 1024, Some(Tag::Activation)));
        // Slack that does not fit in 32 bits goes to the overflow table.
        st.record(0, &alloc(AllocatorAction::Alloc, 8192, 1, 1 << 40, None));
        st.record(
            1,
            &Event::Kernel(KernelEvent {
                name: "matmul",
                algorithm: "gemm",
                device: 2,
                stream: 0,
                start_ns: 10,
                duration_ns: 20,
                launch_ns: 3,
                flops: 100,
                bytes: 200,
            }),
        );
        st.record(1, &Event::Phase(PhaseEvent { name: Arc::from("forward"), begin: true, time_ns: 9, depth: 1 }));
        let rec = st.finish();
        assert_eq!(rec.len(), 5);
        let r0 = *rec.get(0);
        assert_eq!((r0.kind, r0.a, r0.b, r0.tag()), (kind::ALLOC, 4096, 1024, Some(Tag::Activation)));
        assert_eq!(rec.requested(0, &r0), 1000);
        let r1 = *rec.get(1);
        assert_eq!(rec.requested(1, &r1), 1);
        assert_eq!(r1.category_index(), 7);
        assert_eq!(rec.get(2).kind, kind::KERNEL);
        assert_eq!(rec.get(3).kind, kind::KERNEL_CONT);
        assert_eq!(rec.kernels[0].name, "matmul");
        assert_eq!(rec.phases, vec!["forward".to_owned()]);
        assert_eq!(rec.context(rec.get(4)).device, NO_DEVICE);
        assert_eq!(rec.contexts.len(), 3);
    }

    #[test]
    fn chunks_hold_exactly_chunk_records() {
        let records = (0..(CHUNK_RECORDS * 2 + 5) as u64).map(|i| Record { time_ns: i, ..Record::default() });
        let rec = Recording::from_parts(records, vec![], vec![], vec![], vec![]);
        assert_eq!(rec.len(), CHUNK_RECORDS * 2 + 5);
        assert_eq!(rec.chunks.len(), 3);
        for i in [0, CHUNK_RECORDS - 1, CHUNK_RECORDS, CHUNK_RECORDS * 2 + 4] {
            assert_eq!(rec.get(i).time_ns, i as u64);
        }
        assert!(rec.iter().all(|(i, r)| r.time_ns == i as u64));
    }

    #[test]
    fn kernel_names_are_interned_by_content() {
        let mut i = Interner::default();
        let a = i.kernel("relu", "simd");
        let owned: &'static str = Box::leak(String::from("relu").into_boxed_str());
        assert_eq!(i.kernel(owned, "simd"), a);
        assert_ne!(i.kernel("relu", "scalar"), a);
    }
}
