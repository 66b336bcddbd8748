//! Turning a [`Recording`] into answers: a replay of the allocator's state
//! (levels, live blocks, segments, phases) that runs twice — once to find the
//! peaks, OOMs, phase peaks, kernel and copy tables, once more to take the
//! snapshots at the peaks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vramlab_engine::hooks::CopyKind;

use crate::record::{FLAG_IGNORED, FxHashMap, NO_DEVICE, Record, Recording, copy_kind_of, kind};
use crate::timeline::{ByCategory, CATEGORY_COUNT, Category};

/// How many OOMs per device are reported in full (later ones are only counted).
pub const MAX_OOM_REPORTS: usize = 64;

/// How many of the largest live allocations an OOM report lists.
pub const OOM_LIVE_ALLOCATIONS: usize = 16;

pub(crate) const NO_PHASE: u32 = u32::MAX;

// ---------------------------------------------------------------------------
// Public answers.

/// The four allocator counters at one moment, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLevels {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub active_bytes: u64,
    pub requested_bytes: u64,
}

/// The highest value of one counter: when it was first reached and in which
/// phase (the innermost open phase of the thread whose event made it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    pub bytes: u64,
    pub time_ns: u64,
    /// Index of the record that made the peak (`None`: the counter never rose).
    pub event_index: Option<u64>,
    /// The phase path (`train_step/forward`), if any phase was open.
    pub phase: Option<String>,
}

/// One live allocation in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAllocation {
    pub addr: u64,
    /// The block's size, as counted in allocated bytes.
    pub size_bytes: u64,
    /// What the caller asked for.
    pub requested_bytes: u64,
    pub category: Category,
    pub stream: u32,
    pub allocated_at_ns: u64,
    /// The phase path in which it was allocated.
    pub phase: Option<String>,
}

/// Where the reserved bytes went at one moment: the answer to "why did I run
/// out of memory with memory reserved but unallocated".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragmentation {
    pub time_ns: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Reserved minus allocated (`reserved_but_unallocated` in PyTorch's OOM message).
    pub reserved_unallocated_bytes: u64,
    /// Freed blocks still in use by other streams (active minus allocated).
    pub pending_free_bytes: u64,
    /// Free bytes in segments that also hold active blocks — PyTorch's
    /// `inactive_split_bytes` (expandable segments are left out, as there).
    pub inactive_split_bytes: u64,
    /// Free bytes in segments (or mapped ranges of expandable segments) that
    /// hold no active block: what `empty_cache()` would give back.
    pub cached_free_bytes: u64,
    /// The largest free block: no request larger than this fits without a new segment.
    pub largest_free_block_bytes: u64,
    pub free_blocks: u64,
    pub segments: u64,
}

/// The state at a device's allocated peak.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakSnapshot {
    pub time_ns: u64,
    pub phase: Option<String>,
    pub levels: MemoryLevels,
    /// Sums to `levels.allocated_bytes`.
    pub by_category: ByCategory,
    /// Every live allocation, largest first (ties by address).
    pub live_allocations: Vec<LiveAllocation>,
    pub fragmentation: Fragmentation,
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Enough bytes were reserved but unallocated, yet no free block was large
    /// enough: fragmentation (try `expandable_segments:True` or
    /// `max_split_size_mb`).
    Fragmentation,
    /// Reserved-but-unallocated bytes were fewer than the request and the
    /// device had no room for a new segment: the work needs more memory.
    Capacity,
}

/// One out-of-memory event and the picture at that moment (after the
/// allocator's retries released its cached segments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomReport {
    pub time_ns: u64,
    pub event_index: u64,
    pub phase: Option<String>,
    pub stream: u32,
    pub requested_bytes: u64,
    /// The request after rounding: what a free block would have to hold.
    pub rounded_bytes: u64,
    /// Free bytes on the device, as the device reported them.
    pub device_free_bytes: u64,
    pub cause: OomCause,
    pub fragmentation: Fragmentation,
    /// The largest live allocations at that moment.
    pub largest_live_allocations: Vec<LiveAllocation>,
}

/// Counts of one device's allocator events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    pub allocator_events: u64,
    pub allocs: u64,
    pub frees_requested: u64,
    pub frees_completed: u64,
    pub segment_allocs: u64,
    pub segment_frees: u64,
    pub segment_maps: u64,
    pub segment_unmaps: u64,
    pub empty_cache_calls: u64,
    pub ooms: u64,
    /// Frees of blocks (and segments) allocated before the recording began:
    /// left out of every series, which cover what was allocated while recording.
    pub unmatched_frees: u64,
    pub kernels: u64,
    pub copies: u64,
}

/// What kind of device an index stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ProfiledDeviceKind {
    /// The host; its sampled counterpart is the process's resident memory.
    Cpu,
    /// A CUDA device; NVML samples are matched to it by `uuid`
    /// (`GPU-xxxxxxxx-…`, as NVML and `nvidia-smi -L` print it).
    Cuda { ordinal: u32, uuid: Option<String> },
    /// Simulated memory (replays, tests).
    Simulated,
    /// Not described when the profiler was started.
    #[default]
    Unknown,
}

/// A device of the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The index the engine's events carry.
    pub index: u32,
    /// `cpu`, `cuda:0`, `simulated`, …
    pub name: String,
    #[serde(flatten)]
    pub kind: ProfiledDeviceKind,
}

impl DeviceInfo {
    pub fn cpu(index: u32) -> DeviceInfo {
        DeviceInfo { index, name: "cpu".into(), kind: ProfiledDeviceKind::Cpu }
    }

    pub fn cuda(index: u32, ordinal: u32, uuid: Option<String>) -> DeviceInfo {
        DeviceInfo { index, name: format!("cuda:{ordinal}"), kind: ProfiledDeviceKind::Cuda { ordinal, uuid } }
    }

    pub fn simulated(index: u32) -> DeviceInfo {
        DeviceInfo { index, name: "simulated".into(), kind: ProfiledDeviceKind::Simulated }
    }
}

/// Everything the profile knows about one device's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub info: DeviceInfo,
    pub counts: EventCounts,
    /// The counters at the end of the recording.
    pub end: MemoryLevels,
    pub peak_allocated: Peak,
    pub peak_reserved: Peak,
    pub peak_active: Peak,
    pub peak_requested: Peak,
    /// Allocated bytes by category at the allocated peak.
    pub peak_by_category: ByCategory,
    /// The full picture at the allocated peak (`None`: nothing was allocated).
    pub at_peak_allocated: Option<PeakSnapshot>,
    /// The fragmentation picture at the reserved peak.
    pub at_peak_reserved: Option<Fragmentation>,
    /// The first [`MAX_OOM_REPORTS`] OOMs in full.
    pub oom_reports: Vec<OomReport>,
}

/// One instance of a phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub name: String,
    /// The enclosing phases and this one, joined by `/`.
    pub path: String,
    pub thread: u32,
    /// 1 for a top-level phase.
    pub depth: u32,
    pub start_ns: u64,
    /// The end, or the recording's end for a phase still open then.
    pub end_ns: u64,
    pub closed: bool,
}

/// The memory peak of a phase on one device, over all its instances. Nested
/// phases count toward their parents: while `forward` runs inside
/// `train_step`, both are open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePeak {
    pub phase: String,
    pub device: u32,
    pub instances: u64,
    pub total_ns: u64,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_time_ns: u64,
    pub peak_reserved_bytes: u64,
    /// The largest rise of allocated bytes above the value at an instance's entry.
    pub max_rise_bytes: u64,
}

/// One row of the kernel table: a kernel with one algorithm on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStats {
    pub name: String,
    pub algorithm: String,
    pub device: u32,
    pub calls: u64,
    /// Device time (wall time for CPU kernels).
    pub total_ns: u64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Host time spent launching.
    pub launch_total_ns: u64,
    /// Saturates at `u64::MAX`.
    pub total_flops: u64,
    pub total_bytes: u64,
    /// Total flops over total time, in 10⁹ floating-point operations per second.
    pub achieved_gflops: f64,
    /// Total bytes over total time, in 10⁹ bytes per second.
    pub achieved_gbps: f64,
}

/// One row of the copy table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyStats {
    pub kind: CopyKind,
    pub device: u32,
    pub pinned: bool,
    pub non_blocking: bool,
    pub calls: u64,
    pub total_bytes: u64,
    pub total_ns: u64,
    /// Total bytes over total time, in 10⁹ bytes per second.
    pub achieved_gbps: f64,
}

/// Everything the two passes found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Analysis {
    pub devices: Vec<DeviceProfile>,
    pub phases: Vec<PhaseSpan>,
    pub phase_peaks: Vec<PhasePeak>,
    pub kernels: Vec<KernelStats>,
    pub copies: Vec<CopyStats>,
    pub unmatched_phase_ends: u64,
}

// ---------------------------------------------------------------------------
// Levels: the one place that says how an allocator record moves the counters.

/// Bits of what [`apply_levels`] changed.
pub(crate) const CH_ALLOCATED: u8 = 1;
pub(crate) const CH_RESERVED: u8 = 2;
pub(crate) const CH_ACTIVE: u8 = 4;
pub(crate) const CH_REQUESTED: u8 = 8;

/// Applies an allocator record to the counters (PyTorch's semantics) and
/// returns which of them changed. Ignored records change nothing.
#[inline]
pub(crate) fn apply_levels(
    lv: &mut MemoryLevels,
    by_cat: &mut [u64; CATEGORY_COUNT],
    rec: &Recording,
    index: usize,
    r: &Record,
) -> u8 {
    if r.ignored() {
        return 0;
    }
    match r.kind {
        kind::ALLOC => {
            lv.allocated_bytes += r.b;
            lv.active_bytes += r.b;
            lv.requested_bytes += rec.requested(index, r);
            by_cat[r.category_index()] += r.b;
            CH_ALLOCATED | CH_ACTIVE | CH_REQUESTED
        }
        kind::FREE_REQUESTED => {
            lv.allocated_bytes = lv.allocated_bytes.saturating_sub(r.b);
            let c = &mut by_cat[r.category_index()];
            *c = c.saturating_sub(r.b);
            CH_ALLOCATED
        }
        kind::FREE_COMPLETED => {
            lv.active_bytes = lv.active_bytes.saturating_sub(r.b);
            lv.requested_bytes = lv.requested_bytes.saturating_sub(rec.requested(index, r));
            CH_ACTIVE | CH_REQUESTED
        }
        kind::SEGMENT_ALLOC | kind::SEGMENT_MAP => {
            lv.reserved_bytes += r.b;
            CH_RESERVED
        }
        kind::SEGMENT_FREE | kind::SEGMENT_UNMAP => {
            lv.reserved_bytes = lv.reserved_bytes.saturating_sub(r.b);
            CH_RESERVED
        }
        _ => 0,
    }
}

// ---------------------------------------------------------------------------
// Mapped ranges of expandable segments.

/// A set of disjoint half-open ranges, adjacent ranges merged.
#[derive(Debug, Default, Clone)]
struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Merge a range that starts at or before `start` and reaches it.
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back()
            && pe >= s
        {
            s = ps;
            e = e.max(pe);
            self.ranges.remove(&ps);
        }
        // Merge ranges starting inside [s, e].
        while let Some((&ns, &ne)) = self.ranges.range(s..=e).next() {
            e = e.max(ne);
            self.ranges.remove(&ns);
        }
        self.ranges.insert(s, e);
    }

    fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        if let Some((&ps, &pe)) = self.ranges.range(..start).next_back()
            && pe > start
        {
            self.ranges.insert(ps, start);
            if pe > end {
                self.ranges.insert(end, pe);
            }
        }
        let inside: Vec<(u64, u64)> = self.ranges.range(start..end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in inside {
            self.ranges.remove(&s);
            if e > end {
                self.ranges.insert(end, e);
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }
}

// ---------------------------------------------------------------------------
// Phases.

#[derive(Debug, Clone)]
pub(crate) struct PhaseInstance {
    pub(crate) name: u32,
    pub(crate) parent: u32,
    thread: u32,
    depth: u32,
    start_ns: u64,
    end_ns: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Phases {
    pub(crate) instances: Vec<PhaseInstance>,
    /// Open instances per recording thread, innermost last.
    stacks: Vec<Vec<u32>>,
    /// Every open instance, in the order they began.
    open: Vec<u32>,
    unmatched_ends: u64,
}

impl Phases {
    fn stack(&mut self, thread: u32) -> &mut Vec<u32> {
        let t = thread as usize;
        if self.stacks.len() <= t {
            self.stacks.resize_with(t + 1, Vec::new);
        }
        &mut self.stacks[t]
    }

    pub(crate) fn begin(&mut self, name: u32, thread: u32, time_ns: u64) -> u32 {
        let id = self.instances.len() as u32;
        let stack = self.stack(thread);
        let parent = stack.last().copied().unwrap_or(NO_PHASE);
        let depth = stack.len() as u32 + 1;
        stack.push(id);
        self.instances.push(PhaseInstance { name, parent, thread, depth, start_ns: time_ns, end_ns: None });
        self.open.push(id);
        id
    }

    /// Closes the innermost open instance of `name` on `thread` (and any
    /// instances opened inside it and left open); returns the closed ones.
    pub(crate) fn end(&mut self, name: u32, thread: u32, time_ns: u64, closed: &mut Vec<u32>) {
        closed.clear();
        let instances = &self.instances;
        let stack = {
            let t = thread as usize;
            if self.stacks.len() <= t {
                self.stacks.resize_with(t + 1, Vec::new);
            }
            &mut self.stacks[t]
        };
        let Some(pos) = stack.iter().rposition(|&i| instances[i as usize].name == name) else {
            self.unmatched_ends += 1;
            return;
        };
        closed.extend(stack.drain(pos..).rev());
        for &id in closed.iter() {
            self.instances[id as usize].end_ns = Some(time_ns);
            if let Some(p) = self.open.iter().rposition(|&o| o == id) {
                self.open.remove(p);
            }
        }
    }

    /// The phase an event of `thread` belongs to: the thread's innermost open
    /// phase, else the most recently begun open phase of any thread.
    #[inline]
    pub(crate) fn current(&self, thread: u32) -> u32 {
        self.stacks
            .get(thread as usize)
            .and_then(|s| s.last().copied())
            .or_else(|| self.open.last().copied())
            .unwrap_or(NO_PHASE)
    }

    fn path(&self, id: u32, names: &[String]) -> Option<String> {
        if id == NO_PHASE {
            return None;
        }
        let mut parts = Vec::new();
        let mut cur = id;
        while cur != NO_PHASE {
            let Some(inst) = self.instances.get(cur as usize) else { break };
            parts.push(names.get(inst.name as usize).map_or("?", String::as_str));
            cur = inst.parent;
        }
        parts.reverse();
        Some(parts.join("/"))
    }
}

// ---------------------------------------------------------------------------
// The replay.

#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    requested: u64,
    time_ns: u64,
    phase: u32,
    stream: u32,
    category: u8,
    allocated: bool,
}

/// The state of every device's allocator as the records describe it.
struct Replay<'a> {
    rec: &'a Recording,
    /// Context → device slot (`u32::MAX`: no device).
    ctx_slot: Vec<u32>,
    levels: Vec<MemoryLevels>,
    by_cat: Vec<[u64; CATEGORY_COUNT]>,
    live: FxHashMap<(u32, u64), Live>,
    segments: FxHashMap<(u32, u64), u64>,
    mapped: Vec<RangeSet>,
    phases: Phases,
    closed: Vec<u32>,
}

/// What one replay step did.
#[derive(Debug, Clone, Copy)]
struct Step {
    slot: u32,
    changed: u8,
    /// The record was found to free something allocated before the recording.
    ignored: bool,
}

impl<'a> Replay<'a> {
    fn new(rec: &'a Recording, slot_of_device: &dyn Fn(u32) -> u32, slots: usize) -> Replay<'a> {
        Replay {
            rec,
            ctx_slot: rec
                .contexts
                .iter()
                .map(|c| if c.device == NO_DEVICE { u32::MAX } else { slot_of_device(c.device) })
                .collect(),
            levels: vec![MemoryLevels::default(); slots],
            by_cat: vec![[0; CATEGORY_COUNT]; slots],
            live: FxHashMap::default(),
            segments: FxHashMap::default(),
            mapped: vec![RangeSet::default(); slots],
            phases: Phases::default(),
            closed: Vec::new(),
        }
    }

    /// Applies an allocator record: updates the live blocks and segments, and
    /// the counters unless the record frees something allocated before the
    /// recording (the first pass flags those; every pass decides the same).
    fn allocator(&mut self, index: usize, r: &Record) -> Step {
        let slot = self.ctx_slot[r.ctx as usize];
        if slot == u32::MAX {
            return Step { slot, changed: 0, ignored: false };
        }
        let key = (slot, r.a);
        let known = match r.kind {
            kind::ALLOC => {
                let ctx = self.rec.contexts[r.ctx as usize];
                let phase = self.phases.current(ctx.thread);
                self.live.insert(
                    key,
                    Live {
                        size: r.b,
                        requested: self.rec.requested(index, r),
                        time_ns: r.time_ns,
                        phase,
                        stream: ctx.stream,
                        category: r.category_index() as u8,
                        allocated: true,
                    },
                );
                true
            }
            kind::FREE_REQUESTED => match self.live.get_mut(&key) {
                Some(l) if l.allocated => {
                    l.allocated = false;
                    true
                }
                _ => false,
            },
            kind::FREE_COMPLETED => self.live.remove(&key).is_some(),
            kind::SEGMENT_ALLOC => {
                self.segments.insert(key, r.b);
                true
            }
            kind::SEGMENT_FREE => self.segments.remove(&key).is_some(),
            kind::SEGMENT_MAP => {
                self.mapped[slot as usize].insert(r.a, r.a.saturating_add(r.b));
                true
            }
            kind::SEGMENT_UNMAP => {
                self.mapped[slot as usize].remove(r.a, r.a.saturating_add(r.b));
                true
            }
            _ => true,
        };
        if !known {
            return Step { slot, changed: 0, ignored: true };
        }
        let s = slot as usize;
        let changed = apply_levels(&mut self.levels[s], &mut self.by_cat[s], self.rec, index, r);
        Step { slot, changed, ignored: false }
    }

    fn live_allocations(&self, slot: u32, names: &[String], phases: &Phases) -> Vec<LiveAllocation> {
        let mut v: Vec<LiveAllocation> = self
            .live
            .iter()
            .filter(|(k, l)| k.0 == slot && l.allocated)
            .map(|(k, l)| LiveAllocation {
                addr: k.1,
                size_bytes: l.size,
                requested_bytes: l.requested,
                category: Category::ALL[l.category as usize],
                stream: l.stream,
                allocated_at_ns: l.time_ns,
                phase: phases.path(l.phase, names),
            })
            .collect();
        v.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.addr.cmp(&b.addr)));
        v
    }

    fn largest_live(&self, slot: u32, n: usize, names: &[String]) -> Vec<LiveAllocation> {
        let mut top: Vec<(u64, u64, Live)> =
            self.live.iter().filter(|(k, l)| k.0 == slot && l.allocated).map(|(k, l)| (l.size, k.1, *l)).collect();
        top.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        top.truncate(n);
        top.into_iter()
            .map(|(size, addr, l)| LiveAllocation {
                addr,
                size_bytes: size,
                requested_bytes: l.requested,
                category: Category::ALL[l.category as usize],
                stream: l.stream,
                allocated_at_ns: l.time_ns,
                phase: self.phases.path(l.phase, names),
            })
            .collect()
    }

    /// The fragmentation picture of one device now: every non-expandable
    /// segment and every mapped range of expandable segments, swept against the
    /// active blocks inside it; the gaps are the free blocks (the allocator
    /// merges free neighbours, so a gap is one block).
    fn fragmentation(&self, slot: u32, time_ns: u64) -> Fragmentation {
        let lv = self.levels[slot as usize];
        let mut blocks: Vec<(u64, u64)> =
            self.live.iter().filter(|(k, _)| k.0 == slot).map(|(k, l)| (k.1, l.size)).collect();
        blocks.sort_unstable();
        // (start, end, expandable)
        let mut regions: Vec<(u64, u64, bool)> = self
            .segments
            .iter()
            .filter(|(k, _)| k.0 == slot)
            .map(|(k, &size)| (k.1, k.1.saturating_add(size), false))
            .collect();
        regions.extend(self.mapped[slot as usize].iter().map(|(s, e)| (s, e, true)));
        regions.sort_unstable();

        let mut f = Fragmentation {
            time_ns,
            reserved_bytes: lv.reserved_bytes,
            allocated_bytes: lv.allocated_bytes,
            reserved_unallocated_bytes: lv.reserved_bytes.saturating_sub(lv.allocated_bytes),
            pending_free_bytes: lv.active_bytes.saturating_sub(lv.allocated_bytes),
            segments: regions.len() as u64,
            ..Fragmentation::default()
        };
        let mut j = 0;
        for &(start, end, expandable) in &regions {
            while j < blocks.len() && blocks[j].0 < start {
                j += 1;
            }
            let mut cursor = start;
            let mut active = 0u64;
            let mut n_active = 0u64;
            while j < blocks.len() && blocks[j].0 < end {
                let (addr, size) = blocks[j];
                gap(cursor, addr, &mut f);
                cursor = cursor.max(addr.saturating_add(size));
                active += size;
                n_active += 1;
                j += 1;
            }
            gap(cursor, end, &mut f);
            let size = end - start;
            if n_active == 0 {
                f.cached_free_bytes += size;
            } else if !expandable {
                f.inactive_split_bytes += size.saturating_sub(active);
            }
        }
        f
    }
}

// ---------------------------------------------------------------------------
// The passes.

#[derive(Debug, Clone, Copy)]
struct PeakTrack {
    bytes: u64,
    time_ns: u64,
    index: Option<u64>,
    phase: u32,
}

impl Default for PeakTrack {
    fn default() -> Self {
        PeakTrack { bytes: 0, time_ns: 0, index: None, phase: NO_PHASE }
    }
}

impl PeakTrack {
    #[inline]
    fn offer(&mut self, bytes: u64, time_ns: u64, index: usize, phase: &dyn Fn() -> u32) -> bool {
        if bytes > self.bytes {
            *self = PeakTrack { bytes, time_ns, index: Some(index as u64), phase: phase() };
            true
        } else {
            false
        }
    }
}

#[derive(Debug, Default, Clone)]
struct DevAcc {
    counts: EventCounts,
    peak_allocated: PeakTrack,
    peak_reserved: PeakTrack,
    peak_active: PeakTrack,
    peak_requested: PeakTrack,
    peak_by_cat: [u64; CATEGORY_COUNT],
    ooms: Vec<OomReport>,
}

#[derive(Debug, Clone, Copy, Default)]
struct PhaseTrack {
    entry_allocated: u64,
    max_allocated: u64,
    max_allocated_time: u64,
    max_reserved: u64,
    touched: bool,
}

#[derive(Debug, Default)]
struct PhasePeakAcc {
    instances: u64,
    total_ns: u64,
    peak_allocated: u64,
    peak_allocated_time: u64,
    peak_reserved: u64,
    max_rise: u64,
}

#[derive(Debug, Default)]
struct KernelAcc {
    durations: Vec<u64>,
    launch: u64,
    flops: u64,
    bytes: u64,
}

#[derive(Debug, Default)]
struct CopyAcc {
    calls: u64,
    bytes: u64,
    ns: u64,
}

/// Records a free gap `[from, to)` in `f`.
fn gap(from: u64, to: u64, f: &mut Fragmentation) {
    if to > from {
        f.free_blocks += 1;
        f.largest_free_block_bytes = f.largest_free_block_bytes.max(to - from);
    }
}

/// Runs both passes. Marks the records found to free pre-recording memory as
/// ignored, so later timeline queries need no replay state.
pub(crate) fn analyze(rec: &mut Recording, devices: &[DeviceInfo], end_ns: u64) -> Analysis {
    // Slots: the described devices and every device the events name.
    let mut infos: Vec<DeviceInfo> = devices.to_vec();
    for c in &rec.contexts {
        if c.device != NO_DEVICE && !infos.iter().any(|d| d.index == c.device) {
            infos.push(DeviceInfo {
                index: c.device,
                name: format!("device {}", c.device),
                kind: ProfiledDeviceKind::Unknown,
            });
        }
    }
    infos.sort_by_key(|d| d.index);
    infos.dedup_by_key(|d| d.index);
    let index_of: Vec<u32> = infos.iter().map(|d| d.index).collect();
    let slot_of = |device: u32| index_of.binary_search(&device).map_or(u32::MAX, |p| p as u32);
    let n = infos.len();

    let (accs, ignored, pass1) = first_pass(rec, &slot_of, n, end_ns);
    for i in ignored {
        rec.get_mut(i).flags |= FLAG_IGNORED;
    }
    let rec: &Recording = rec;
    let names = &rec.phases;

    // Second pass: snapshots at the allocated and reserved peaks.
    let mut targets: Vec<(u64, u32, bool)> = Vec::new();
    for (s, a) in accs.iter().enumerate() {
        if let Some(i) = a.peak_allocated.index {
            targets.push((i, s as u32, true));
        }
        if let Some(i) = a.peak_reserved.index {
            targets.push((i, s as u32, false));
        }
    }
    targets.sort_unstable();
    let mut at_alloc: Vec<Option<PeakSnapshot>> = vec![None; n];
    let mut at_reserved: Vec<Option<Fragmentation>> = vec![None; n];
    if let Some(&(last, _, _)) = targets.last() {
        let mut replay = Replay::new(rec, &slot_of, n);
        let mut t = 0;
        for (i, r) in rec.range(0, last as usize + 1) {
            match r.kind {
                k if k <= kind::EMPTY_CACHE => {
                    replay.allocator(i, r);
                }
                kind::PHASE_BEGIN => {
                    let ctx = rec.context(r);
                    replay.phases.begin(r.c, ctx.thread, r.time_ns);
                }
                kind::PHASE_END => {
                    let ctx = rec.context(r);
                    let mut closed = std::mem::take(&mut replay.closed);
                    replay.phases.end(r.c, ctx.thread, r.time_ns, &mut closed);
                    replay.closed = closed;
                }
                _ => {}
            }
            while t < targets.len() && targets[t].0 == i as u64 {
                let (_, slot, allocated) = targets[t];
                let s = slot as usize;
                if allocated {
                    let a = &accs[s];
                    at_alloc[s] = Some(PeakSnapshot {
                        time_ns: r.time_ns,
                        phase: pass1.phases.path(a.peak_allocated.phase, names),
                        levels: replay.levels[s],
                        by_category: ByCategory::from_array(replay.by_cat[s]),
                        live_allocations: replay.live_allocations(slot, names, &pass1.phases),
                        fragmentation: replay.fragmentation(slot, r.time_ns),
                    });
                } else {
                    at_reserved[s] = Some(replay.fragmentation(slot, r.time_ns));
                }
                t += 1;
            }
        }
    }

    let path = |p: u32| pass1.phases.path(p, names);
    let peak = |p: &PeakTrack| Peak { bytes: p.bytes, time_ns: p.time_ns, event_index: p.index, phase: path(p.phase) };
    let devices_out: Vec<DeviceProfile> = infos
        .into_iter()
        .zip(accs)
        .enumerate()
        .map(|(s, (info, a))| DeviceProfile {
            info,
            counts: a.counts,
            end: pass1.levels[s],
            peak_allocated: peak(&a.peak_allocated),
            peak_reserved: peak(&a.peak_reserved),
            peak_active: peak(&a.peak_active),
            peak_requested: peak(&a.peak_requested),
            peak_by_category: ByCategory::from_array(a.peak_by_cat),
            at_peak_allocated: at_alloc[s].take(),
            at_peak_reserved: at_reserved[s].take(),
            oom_reports: a.ooms,
        })
        .collect();

    let phases = pass1
        .phases
        .instances
        .iter()
        .enumerate()
        .map(|(id, p)| PhaseSpan {
            name: names.get(p.name as usize).cloned().unwrap_or_default(),
            path: path(id as u32).unwrap_or_default(),
            thread: p.thread,
            depth: p.depth,
            start_ns: p.start_ns,
            end_ns: p.end_ns.unwrap_or(end_ns.max(p.start_ns)),
            closed: p.end_ns.is_some(),
        })
        .collect();

    let mut phase_peaks: Vec<PhasePeak> = pass1
        .phase_peaks
        .into_iter()
        .map(|((name, slot), a)| PhasePeak {
            phase: names.get(name as usize).cloned().unwrap_or_default(),
            device: index_of[slot as usize],
            instances: a.instances,
            total_ns: a.total_ns,
            peak_allocated_bytes: a.peak_allocated,
            peak_allocated_time_ns: a.peak_allocated_time,
            peak_reserved_bytes: a.peak_reserved,
            max_rise_bytes: a.max_rise,
        })
        .collect();
    phase_peaks.sort_by(|a, b| a.device.cmp(&b.device).then(a.phase.cmp(&b.phase)));

    let mut kernels: Vec<KernelStats> = pass1
        .kernels
        .into_iter()
        .map(|((id, slot), mut k)| {
            k.durations.sort_unstable();
            let calls = k.durations.len() as u64;
            let total: u64 = k.durations.iter().fold(0u64, |s, &d| s.saturating_add(d));
            let m = k.durations.len();
            let median = if m == 0 {
                0.0
            } else if m % 2 == 1 {
                k.durations[m / 2] as f64
            } else {
                (k.durations[m / 2 - 1] as f64 + k.durations[m / 2] as f64) / 2.0
            };
            let name = rec.kernels.get(id as usize).cloned().unwrap_or_else(|| crate::record::KernelName {
                name: format!("kernel {id}"),
                algorithm: String::new(),
            });
            KernelStats {
                name: name.name,
                algorithm: name.algorithm,
                device: index_of[slot as usize],
                calls,
                total_ns: total,
                mean_ns: if calls == 0 { 0.0 } else { total as f64 / calls as f64 },
                median_ns: median,
                min_ns: k.durations.first().copied().unwrap_or(0),
                max_ns: k.durations.last().copied().unwrap_or(0),
                launch_total_ns: k.launch,
                total_flops: k.flops,
                total_bytes: k.bytes,
                achieved_gflops: rate(k.flops, total),
                achieved_gbps: rate(k.bytes, total),
            }
        })
        .collect();
    kernels.sort_by(|a, b| {
        b.total_ns.cmp(&a.total_ns).then_with(|| (&a.name, &a.algorithm).cmp(&(&b.name, &b.algorithm)))
    });

    let mut copies: Vec<CopyStats> = pass1
        .copies
        .into_iter()
        .map(|((slot, code, pinned, nb), c)| CopyStats {
            kind: copy_kind_of(code),
            device: index_of[slot as usize],
            pinned,
            non_blocking: nb,
            calls: c.calls,
            total_bytes: c.bytes,
            total_ns: c.ns,
            achieved_gbps: rate(c.bytes, c.ns),
        })
        .collect();
    copies.sort_by_key(|c| (c.device, crate::record::copy_kind_code(c.kind), c.pinned, c.non_blocking));

    Analysis {
        devices: devices_out,
        phases,
        phase_peaks,
        kernels,
        copies,
        unmatched_phase_ends: pass1.phases.unmatched_ends,
    }
}

/// Units per nanosecond = 10⁹ units per second.
fn rate(units: u64, ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { units as f64 / ns as f64 }
}

struct FirstPass {
    levels: Vec<MemoryLevels>,
    phases: Phases,
    phase_peaks: BTreeMap<(u32, u32), PhasePeakAcc>,
    kernels: FxHashMap<(u32, u32), KernelAcc>,
    copies: FxHashMap<(u32, u32, bool, bool), CopyAcc>,
}

fn fold_phase(
    peaks: &mut BTreeMap<(u32, u32), PhasePeakAcc>,
    inst: &PhaseInstance,
    tracks: &[PhaseTrack],
    end_ns: u64,
) {
    for (slot, t) in tracks.iter().enumerate() {
        if !t.touched && t.max_allocated == 0 && t.max_reserved == 0 {
            continue;
        }
        let a = peaks.entry((inst.name, slot as u32)).or_default();
        a.instances += 1;
        a.total_ns += end_ns.saturating_sub(inst.start_ns);
        if a.instances == 1 || t.max_allocated > a.peak_allocated {
            a.peak_allocated = t.max_allocated;
            a.peak_allocated_time = t.max_allocated_time;
        }
        a.peak_reserved = a.peak_reserved.max(t.max_reserved);
        a.max_rise = a.max_rise.max(t.max_allocated - t.entry_allocated.min(t.max_allocated));
    }
}

fn first_pass(
    rec: &Recording,
    slot_of: &dyn Fn(u32) -> u32,
    n: usize,
    end_ns: u64,
) -> (Vec<DevAcc>, Vec<usize>, FirstPass) {
    let names = &rec.phases;
    let mut replay = Replay::new(rec, slot_of, n);
    let mut accs = vec![DevAcc::default(); n];
    let mut ignored = Vec::new();
    // Open phase instances and their per-device trackers, in begin order.
    let mut tracks: Vec<(u32, Vec<PhaseTrack>)> = Vec::new();
    let mut phase_peaks: BTreeMap<(u32, u32), PhasePeakAcc> = BTreeMap::new();
    let mut kernels: FxHashMap<(u32, u32), KernelAcc> = FxHashMap::default();
    let mut copies: FxHashMap<(u32, u32, bool, bool), CopyAcc> = FxHashMap::default();
    let mut closed = Vec::new();

    let mut i = 0;
    while i < rec.len() {
        let r = rec.get(i);
        match r.kind {
            k if k <= kind::EMPTY_CACHE => {
                let step = replay.allocator(i, r);
                if step.slot == u32::MAX {
                    i += 1;
                    continue;
                }
                let s = step.slot as usize;
                let acc = &mut accs[s];
                let c = &mut acc.counts;
                c.allocator_events += 1;
                match k {
                    kind::ALLOC => c.allocs += 1,
                    kind::FREE_REQUESTED => c.frees_requested += 1,
                    kind::FREE_COMPLETED => c.frees_completed += 1,
                    kind::SEGMENT_ALLOC => c.segment_allocs += 1,
                    kind::SEGMENT_FREE => c.segment_frees += 1,
                    kind::SEGMENT_MAP => c.segment_maps += 1,
                    kind::SEGMENT_UNMAP => c.segment_unmaps += 1,
                    kind::EMPTY_CACHE => c.empty_cache_calls += 1,
                    kind::OOM => c.ooms += 1,
                    _ => {}
                }
                if step.ignored {
                    c.unmatched_frees += 1;
                    ignored.push(i);
                }
                if step.changed != 0 {
                    let lv = replay.levels[s];
                    let thread = rec.context(r).thread;
                    let phases = &replay.phases;
                    let phase = || phases.current(thread);
                    if step.changed & CH_ALLOCATED != 0
                        && acc.peak_allocated.offer(lv.allocated_bytes, r.time_ns, i, &phase)
                    {
                        acc.peak_by_cat = replay.by_cat[s];
                    }
                    if step.changed & CH_RESERVED != 0 {
                        acc.peak_reserved.offer(lv.reserved_bytes, r.time_ns, i, &phase);
                    }
                    if step.changed & CH_ACTIVE != 0 {
                        acc.peak_active.offer(lv.active_bytes, r.time_ns, i, &phase);
                    }
                    if step.changed & CH_REQUESTED != 0 {
                        acc.peak_requested.offer(lv.requested_bytes, r.time_ns, i, &phase);
                    }
                    for (_, t) in tracks.iter_mut() {
                        let t = &mut t[s];
                        t.touched = true;
                        if lv.allocated_bytes > t.max_allocated {
                            t.max_allocated = lv.allocated_bytes;
                            t.max_allocated_time = r.time_ns;
                        }
                        t.max_reserved = t.max_reserved.max(lv.reserved_bytes);
                    }
                } else if !tracks.is_empty() {
                    for (_, t) in tracks.iter_mut() {
                        t[s].touched = true;
                    }
                }
                if k == kind::OOM && acc.ooms.len() < MAX_OOM_REPORTS {
                    let frag = replay.fragmentation(step.slot, r.time_ns);
                    let rounded = r.b;
                    let cause = if frag.reserved_unallocated_bytes >= rounded && frag.largest_free_block_bytes < rounded
                    {
                        OomCause::Fragmentation
                    } else {
                        OomCause::Capacity
                    };
                    let thread = rec.context(r).thread;
                    let report = OomReport {
                        time_ns: r.time_ns,
                        event_index: i as u64,
                        phase: replay.phases.path(replay.phases.current(thread), names),
                        stream: rec.context(r).stream,
                        requested_bytes: rec.requested(i, r),
                        rounded_bytes: rounded,
                        device_free_bytes: r.a,
                        cause,
                        fragmentation: frag,
                        largest_live_allocations: replay.largest_live(step.slot, OOM_LIVE_ALLOCATIONS, names),
                    };
                    accs[s].ooms.push(report);
                }
            }
            kind::KERNEL => {
                let slot = replay.ctx_slot[r.ctx as usize];
                let (duration, launch) = if i + 1 < rec.len() && rec.get(i + 1).kind == kind::KERNEL_CONT {
                    let cont = rec.get(i + 1);
                    i += 1;
                    (cont.time_ns, cont.a)
                } else {
                    (0, 0)
                };
                if slot != u32::MAX {
                    accs[slot as usize].counts.kernels += 1;
                    let k = kernels.entry((r.c, slot)).or_default();
                    k.durations.push(duration);
                    k.launch = k.launch.saturating_add(launch);
                    k.flops = k.flops.saturating_add(r.a);
                    k.bytes = k.bytes.saturating_add(r.b);
                }
            }
            kind::COPY => {
                let slot = replay.ctx_slot[r.ctx as usize];
                if slot != u32::MAX {
                    accs[slot as usize].counts.copies += 1;
                    let key = (slot, r.c & 3, r.c & 4 != 0, r.c & 8 != 0);
                    let c = copies.entry(key).or_default();
                    c.calls += 1;
                    c.bytes = c.bytes.saturating_add(r.b);
                    c.ns = c.ns.saturating_add(r.a);
                }
            }
            kind::PHASE_BEGIN => {
                let thread = rec.context(r).thread;
                let id = replay.phases.begin(r.c, thread, r.time_ns);
                let t: Vec<PhaseTrack> = replay
                    .levels
                    .iter()
                    .map(|lv| PhaseTrack {
                        entry_allocated: lv.allocated_bytes,
                        max_allocated: lv.allocated_bytes,
                        max_allocated_time: r.time_ns,
                        max_reserved: lv.reserved_bytes,
                        touched: false,
                    })
                    .collect();
                tracks.push((id, t));
            }
            kind::PHASE_END => {
                let thread = rec.context(r).thread;
                replay.phases.end(r.c, thread, r.time_ns, &mut closed);
                for &id in &closed {
                    if let Some(p) = tracks.iter().rposition(|(t, _)| *t == id) {
                        let (_, t) = tracks.remove(p);
                        fold_phase(&mut phase_peaks, &replay.phases.instances[id as usize], &t, r.time_ns);
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Phases still open at the end count up to the end.
    for (id, t) in tracks.drain(..) {
        let inst = &replay.phases.instances[id as usize];
        fold_phase(&mut phase_peaks, inst, &t, end_ns.max(inst.start_ns));
    }
    let pass = FirstPass { levels: replay.levels, phases: replay.phases, phase_peaks, kernels, copies };
    (accs, ignored, pass)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramlab_engine::hooks::Tag;

    #[test]
    fn range_set_merges_and_splits() {
        let mut s = RangeSet::default();
        s.insert(0, 10);
        s.insert(10, 20);
        s.insert(30, 40);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 20), (30, 40)]);
        s.insert(15, 35);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 40)]);
        s.remove(5, 8);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(0, 5), (8, 40)]);
        s.remove(0, 40);
        assert!(s.iter().next().is_none());
    }

    #[test]
    fn phase_ends_close_inner_phases_left_open() {
        let mut p = Phases::default();
        let a = p.begin(0, 0, 1);
        let b = p.begin(1, 0, 2);
        assert_eq!(p.current(0), b);
        assert_eq!(p.current(7), b, "other threads fall back to the latest open phase");
        let mut closed = Vec::new();
        p.end(0, 0, 3, &mut closed);
        assert_eq!(closed, vec![b, a]);
        assert_eq!(p.current(0), NO_PHASE);
        p.end(0, 0, 4, &mut closed);
        assert_eq!(p.unmatched_ends, 1);
        let names = vec!["step".to_owned(), "forward".to_owned()];
        assert_eq!(p.path(b, &names).as_deref(), Some("step/forward"));
    }

    #[test]
    fn tag_categories_line_up() {
        for t in Tag::ALL {
            assert_eq!(Category::from(Some(t)).tag(), Some(t));
        }
    }
}
