//! The engine's one event mechanism.
//!
//! Allocator events (and, as the engine grows, kernel, copy and phase events) are
//! delivered to [`Subscriber`]s registered on a [`Hooks`] hub. An emitter checks
//! [`Hooks::is_active`] — one relaxed atomic load — and builds the event only when
//! somebody listens, so an unobserved engine pays nothing else.
//!
//! Events are delivered synchronously on the emitting thread, in order, while the
//! emitter holds its own lock (the allocator's mutex for allocator events): a
//! subscriber must be quick and must not call back into the emitter.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

/// What a tensor's bytes are for. Carried by allocator events so the profiler can
/// attribute memory exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tag {
    Parameter,
    Gradient,
    Activation,
    OptimizerState,
    Input,
    Temporary,
    Workspace,
}

impl Tag {
    /// Every tag, in a stable order.
    pub const ALL: [Tag; 7] = [
        Tag::Parameter,
        Tag::Gradient,
        Tag::Activation,
        Tag::OptimizerState,
        Tag::Input,
        Tag::Temporary,
        Tag::Workspace,
    ];

    /// The tag's name as written in traces and reports (`optimizer_state`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Tag::Parameter => "parameter",
            Tag::Gradient => "gradient",
            Tag::Activation => "activation",
            Tag::OptimizerState => "optimizer_state",
            Tag::Input => "input",
            Tag::Temporary => "temporary",
            Tag::Workspace => "workspace",
        }
    }

    /// Parses a tag name as written by [`Tag::as_str`].
    pub fn from_name(name: &str) -> Option<Tag> {
        Tag::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened in the allocator. The names follow PyTorch's memory-snapshot
/// trace actions, plus `empty_cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocatorAction {
    /// A block was handed out.
    Alloc,
    /// The caller freed a block (allocated bytes drop now).
    FreeRequested,
    /// The block went back to the pool (active bytes drop now); later than
    /// `FreeRequested` when other streams still used it.
    FreeCompleted,
    /// A segment was obtained from the device.
    SegmentAlloc,
    /// A segment was given back to the device.
    SegmentFree,
    /// Pages of an expandable segment were mapped.
    SegmentMap,
    /// Pages of an expandable segment were unmapped.
    SegmentUnmap,
    /// An allocation failed for lack of memory; `addr` holds the device's free bytes.
    Oom,
    /// `empty_cache()` was called (emitted before the segments it releases).
    EmptyCache,
}

impl AllocatorAction {
    /// The action's name as PyTorch's trace writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            AllocatorAction::Alloc => "alloc",
            AllocatorAction::FreeRequested => "free_requested",
            AllocatorAction::FreeCompleted => "free_completed",
            AllocatorAction::SegmentAlloc => "segment_alloc",
            AllocatorAction::SegmentFree => "segment_free",
            AllocatorAction::SegmentMap => "segment_map",
            AllocatorAction::SegmentUnmap => "segment_unmap",
            AllocatorAction::Oom => "oom",
            AllocatorAction::EmptyCache => "empty_cache",
        }
    }
}

/// One allocator event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorEvent {
    pub action: AllocatorAction,
    /// Monotonic nanoseconds since the process's time origin ([`now_ns`]).
    pub time_ns: u64,
    /// The allocator's device: `DeviceId::event_index` (cpu:N is N, cuda:N is 1024 + N).
    pub device: u32,
    pub stream: u32,
    /// Block or segment address; for `Oom`, the device's free bytes.
    pub addr: u64,
    /// Bytes the caller asked for (block events) or the range's size (segment events).
    pub requested_bytes: u64,
    /// The block's rounded size, or the segment/range size.
    pub rounded_bytes: u64,
    pub tag: Option<Tag>,
}

/// A kernel launch and, once known, its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEvent {
    /// The operation (`matmul`, `conv2d_forward`, `relu`, …).
    pub name: &'static str,
    /// The algorithm that ran (`im2col_gemm`, `winograd_f2x3`, `gemm_rayon`, …).
    pub algorithm: &'static str,
    pub device: u32,
    pub stream: u32,
    /// Start on the [`now_ns`] clock (for a GPU, the host time of the launch).
    pub start_ns: u64,
    /// Time the kernel ran: device time from events on a GPU, wall time on the CPU.
    pub duration_ns: u64,
    /// Host time spent launching it (equal to `duration_ns` for synchronous CPU kernels).
    pub launch_ns: u64,
    /// Floating-point operations performed.
    pub flops: u64,
    /// Bytes read and written.
    pub bytes: u64,
}

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyKind {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    HostToHost,
}

/// A memory copy between host and device or within a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyEvent {
    pub kind: CopyKind,
    pub device: u32,
    pub stream: u32,
    pub bytes: u64,
    /// Whether the host side was pinned (page-locked) memory.
    pub pinned: bool,
    /// Whether the copy was queued without waiting for it (`non_blocking=True`).
    pub non_blocking: bool,
    pub start_ns: u64,
    pub duration_ns: u64,
}

/// Entering or leaving a named phase (`forward`, `backward`, `optimizer_step`, …).
/// Phases nest; the name travels on both events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseEvent {
    pub name: Arc<str>,
    /// True on entry, false on exit.
    pub begin: bool,
    pub time_ns: u64,
    /// The thread's phase depth after entering (≥ 1) or before leaving.
    pub depth: u32,
}

/// Every kind of engine event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    Allocator(AllocatorEvent),
    Kernel(KernelEvent),
    Copy(CopyEvent),
    Phase(PhaseEvent),
}

/// Receives events. Called on the emitting thread with the emitter's lock held:
/// keep it short and never call back into the emitter.
pub trait Subscriber: Send + Sync {
    fn on_event(&self, event: &Event);

    /// Receives the events of one emitter operation (an allocator call, say) at
    /// once, in order. The default hands them to [`on_event`](Self::on_event)
    /// one by one; recorders override it to take the batch in one go.
    fn on_events(&self, events: &[Event]) {
        for e in events {
            self.on_event(e);
        }
    }
}

/// Identifies a subscription so it can be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

type SubscriberList = Vec<(SubscriptionId, Arc<dyn Subscriber>)>;

/// A hub that emitters publish to and subscribers listen on.
pub struct Hooks {
    active: AtomicUsize,
    /// Bumped on every change of the subscriber list, so [`Emitter`]s can keep a
    /// cached copy of it.
    generation: AtomicU64,
    subscribers: ArcSwap<SubscriberList>,
    /// Serializes subscribe/unsubscribe (the list itself is read lock-free).
    writers: Mutex<u64>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").field("subscribers", &self.active.load(Ordering::Relaxed)).finish()
    }
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            active: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            subscribers: ArcSwap::from_pointee(Vec::new()),
            writers: Mutex::new(0),
        }
    }
}

impl Hooks {
    pub fn new() -> Arc<Hooks> {
        Arc::new(Hooks::default())
    }

    /// Whether anybody listens: one relaxed atomic load, the whole cost of an
    /// unobserved emitter.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed) != 0
    }

    /// Delivers `event` to every subscriber. Emitters call this only after
    /// [`is_active`](Self::is_active) returned true; emitters that produce events
    /// often use an [`Emitter`] instead.
    #[inline]
    pub fn emit(&self, event: &Event) {
        let list = self.subscribers.load();
        for (_, s) in list.iter() {
            s.on_event(event);
        }
    }

    /// Adds a subscriber; events emitted after this call reach it.
    pub fn subscribe(&self, subscriber: Arc<dyn Subscriber>) -> SubscriptionId {
        let mut next = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        *next += 1;
        let id = SubscriptionId(*next);
        let mut list: SubscriberList = (**self.subscribers.load()).clone();
        list.push((id, subscriber));
        self.active.store(list.len(), Ordering::Relaxed);
        self.subscribers.store(Arc::new(list));
        self.generation.fetch_add(1, Ordering::Release);
        id
    }

    /// Removes a subscriber; returns whether it was subscribed.
    pub fn unsubscribe(&self, id: SubscriptionId) -> bool {
        let _guard = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: SubscriberList = (**self.subscribers.load()).clone();
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        let removed = list.len() != before;
        self.subscribers.store(Arc::new(list));
        self.active.store(before - usize::from(removed), Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }
}

/// A buffered, batching front end to a [`Hooks`] hub for one emitter that
/// serializes its own operations (the allocator keeps one under its lock).
///
/// Events of one operation are [`push`](Emitter::push)ed, stamped with one time,
/// and delivered together by [`flush`](Emitter::flush). The emitter keeps a copy
/// of the subscriber list and refreshes it only when the hub's generation
/// changes, so a flush costs one atomic load plus the subscribers' own work.
pub struct Emitter {
    hooks: Arc<Hooks>,
    generation: u64,
    subscribers: Arc<SubscriberList>,
    buffer: Vec<Event>,
    /// The time stamped on the batch being built (0: none yet).
    batch_time_ns: u64,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter").field("hooks", &self.hooks).field("buffered", &self.buffer.len()).finish()
    }
}

impl Emitter {
    pub fn new(hooks: Arc<Hooks>) -> Emitter {
        Emitter {
            hooks,
            generation: u64::MAX,
            subscribers: Arc::new(Vec::new()),
            buffer: Vec::with_capacity(8),
            batch_time_ns: 0,
        }
    }

    /// The time of the batch being built: read once, on the first call after a flush.
    #[inline]
    pub fn batch_time_ns(&mut self) -> u64 {
        if self.batch_time_ns == 0 {
            self.batch_time_ns = now_ns().max(1);
        }
        self.batch_time_ns
    }

    /// The hub this emitter publishes to.
    pub fn hooks(&self) -> &Arc<Hooks> {
        &self.hooks
    }

    /// Whether anybody listens (one relaxed atomic load).
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.hooks.is_active()
    }

    /// Buffers an event for the next flush.
    #[inline]
    pub fn push(&mut self, event: Event) {
        self.buffer.push(event);
    }

    /// Delivers the buffered events, in order, to every subscriber.
    #[inline(always)]
    pub fn flush(&mut self) {
        if !self.buffer.is_empty() {
            self.deliver();
        }
    }

    #[inline(never)]
    fn deliver(&mut self) {
        let generation = self.hooks.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.subscribers = self.hooks.subscribers.load_full();
            self.generation = generation;
        }
        for (_, s) in self.subscribers.iter() {
            s.on_events(&self.buffer);
        }
        self.buffer.clear();
        self.batch_time_ns = 0;
    }
}

/// The process-wide hub that the engine's devices emit to (a profiler subscribes
/// here). Standalone allocators built in tests and replays use their own hubs.
pub fn global() -> &'static Arc<Hooks> {
    static GLOBAL: OnceLock<Arc<Hooks>> = OnceLock::new();
    GLOBAL.get_or_init(Hooks::new)
}

/// Monotonic nanoseconds since this process's time origin (the first call).
///
/// Read from the CPU's time-stamp counter through `quanta` where it is usable
/// (about 10 ns a read, against 25 ns for `std::time::Instant` on our CI
/// machine), with the OS clock as quanta's fallback.
#[inline]
pub fn now_ns() -> u64 {
    static CLOCK: OnceLock<(quanta::Clock, u64)> = OnceLock::new();
    let (clock, origin) = CLOCK.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        (clock, origin)
    });
    clock.delta_as_nanos(*origin, clock.raw())
}

thread_local! {
    /// The calling thread's phase depth, shared by every emitter of phase events
    /// (the profiler's `phase` guards and the training crate's data loader).
    static PHASE_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Enters phase `name` on the calling thread: bumps the thread's phase depth
/// and, when anybody listens on `hub`, emits the begin [`PhaseEvent`]. Returns
/// the depth to pass to [`phase_end`]. Costs one atomic load when nobody listens.
#[inline]
pub fn phase_begin(hub: &Hooks, name: &Arc<str>) -> u32 {
    let depth = PHASE_DEPTH.with(|d| {
        let v = d.get() + 1;
        d.set(v);
        v
    });
    if hub.is_active() {
        hub.emit(&Event::Phase(PhaseEvent { name: name.clone(), begin: true, time_ns: now_ns(), depth }));
    }
    depth
}

/// Leaves phase `name` (entered by [`phase_begin`] on this thread at `depth`):
/// emits the end [`PhaseEvent`] when anybody listens and lowers the depth.
#[inline]
pub fn phase_end(hub: &Hooks, name: &Arc<str>, depth: u32) {
    if hub.is_active() {
        hub.emit(&Event::Phase(PhaseEvent { name: name.clone(), begin: false, time_ns: now_ns(), depth }));
    }
    PHASE_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
}

/// A subscriber that keeps every event in memory, for tests and small tools.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<Event>>,
}

impl EventLog {
    pub fn new() -> Arc<EventLog> {
        Arc::new(EventLog::default())
    }

    /// The events received so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The allocator events received so far.
    pub fn allocator_events(&self) -> Vec<AllocatorEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Allocator(a) => Some(a),
                _ => None,
            })
            .collect()
    }
}

impl Subscriber for EventLog {
    fn on_event(&self, event: &Event) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(event.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_and_unsubscribe_toggle_activity() {
        let hooks = Hooks::new();
        assert!(!hooks.is_active());
        let log = EventLog::new();
        let id = hooks.subscribe(log.clone());
        assert!(hooks.is_active());
        let ev = Event::Allocator(AllocatorEvent {
            action: AllocatorAction::Alloc,
            time_ns: 1,
            device: 0,
            stream: 0,
            addr: 4096,
            requested_bytes: 1,
            rounded_bytes: 512,
            tag: Some(Tag::Activation),
        });
        hooks.emit(&ev);
        assert!(hooks.unsubscribe(id));
        assert!(!hooks.unsubscribe(id));
        assert!(!hooks.is_active());
        assert_eq!(log.events(), vec![ev]);
    }

    #[test]
    fn tag_names_round_trip() {
        for t in Tag::ALL {
            assert_eq!(Tag::from_name(t.as_str()), Some(t));
        }
        assert_eq!(Tag::from_name("weights"), None);
    }

    #[test]
    fn clock_is_monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
    }
}
