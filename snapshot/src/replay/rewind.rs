//! The allocator's state at a trace's first entry, rewound from the snapshot's
//! final segments, and that state set up in the replay's allocator.
//!
//! A trace that lost its start (PyTorch's ring buffer of `max_entries`), or
//! whose recording began after the model was built, starts with memory already
//! reserved and allocated. The final segments say what was there at the dump;
//! walking the trace backwards undoes each entry: an `alloc`'s block becomes
//! free, a free (`free_completed`, or `free_requested` in traces without
//! completions) makes its block allocated again, a `segment_alloc`'s segment
//! disappears, a `segment_free`'s reappears (address, size and stream from the
//! entry), and for expandable segments a `segment_map`'s range is unmapped
//! again and a `segment_unmap`'s mapped again. What is left at the first entry
//! is every segment and every live block then; the free blocks are the gaps
//! between live blocks, since PyTorch merges free neighbours. memory_viz
//! (`torch/cuda/_memory_viz.py`, `segments` / `trace`) rebuilds its timeline's
//! start the same way.
//!
//! What the walk cannot know: the block size of a block freed in the trace
//! whose `alloc` is not in it (the entry holds the bytes requested). It is the
//! request rounded as the allocator rounds it, plus the rest up to the next
//! live block or the segment's end when the allocator would not have split
//! that rest off (`should_split`). A segment that reappears from a
//! `segment_free` is in the small pool when it is 2 MiB (PyTorch's small
//! segments), else the large; its private pool is the one of a final segment
//! at its address, else the default pool.
//!
//! The state is set up in the allocator before the replay's first entry:
//! each plain segment at its address ([`CachingAllocator::restore_segment`],
//! the simulated device's address plan handing out the recorded address), its
//! blocks at their offsets. Expandable segments are carved out by requests in
//! address order (each live block and each gap; the gaps freed afterwards).
//! Blocks that lie in no segment at the start (a trace that contradicts its
//! final segments) are allocated in segments of the replay's own making, in
//! address order, as memory_viz places memory it cannot place.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

use rustc_hash::{FxHashMap, FxHashSet};

use super::pools::malloc_in;
use super::report::{LiveAtStart, SnapshotReplayError};
use crate::format::model::{Action, SegmentType, Snapshot, StackId, TraceEntry};
use vramlab_allocator::consts::{MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE};
use vramlab_allocator::{
    Allocation, AllocatorConfig, BlockState, CachingAllocator, MempoolId, PoolKind, RestoreBlock, RestoreSegment,
    SimulatedMemory, StreamId,
};

/// A block allocated at the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartBlock {
    pub address: u64,
    /// Its block size.
    pub size: u64,
    pub requested: u64,
    pub frames: StackId,
}

/// A segment at the start (for expandable segments, one contiguous mapped range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartSegment {
    pub address: u64,
    pub size: u64,
    pub stream: i64,
    pub pool: PoolKind,
    pub pool_id: (i64, i64),
    pub expandable: bool,
    /// The allocated blocks, in address order.
    pub blocks: Vec<StartBlock>,
}

impl StartSegment {
    /// Every block from the segment's start to its end: the live ones and the
    /// gaps between them, as (address, size, live block).
    pub(crate) fn layout(&self) -> Vec<(u64, u64, Option<&StartBlock>)> {
        let mut out = Vec::with_capacity(2 * self.blocks.len() + 1);
        let mut at = self.address;
        for b in &self.blocks {
            if b.address > at {
                out.push((at, b.address - at, None));
            }
            out.push((b.address, b.size, Some(b)));
            at = b.address + b.size;
        }
        let end = self.address + self.size;
        if end > at {
            out.push((at, end - at, None));
        }
        out
    }
}

/// The rewound state at the first entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StartState {
    /// In address order.
    pub segments: Vec<StartSegment>,
    /// Allocated blocks in no segment (stream, block), in address order.
    pub outside: Vec<(i64, StartBlock)>,
    pub live_at_start: LiveAtStart,
}

impl StartState {
    /// (size, address) of the plain segments, in the order [`place`] restores
    /// them: the head of the simulated device's address plan.
    pub(crate) fn address_plan(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().filter(|s| !s.expandable).map(|s| (s.size, s.address))
    }
}

#[derive(Debug, Clone)]
struct Seg {
    size: u64,
    stream: i64,
    pool: PoolKind,
    pool_id: (i64, i64),
    expandable: bool,
}

#[derive(Debug, Clone)]
struct Live {
    /// The block size when the final segments give it.
    size: Option<u64>,
    requested: u64,
    frames: StackId,
    stream: i64,
    /// Still live in the final segments with no entry in the trace.
    untouched: bool,
    /// For a block freed in the trace: the index of its free.
    freed_at: usize,
}

fn pool_by_size(size: u64) -> PoolKind {
    if size <= SMALL_BUFFER { PoolKind::Small } else { PoolKind::Large }
}

/// Rewinds device `device`'s final segments through `undo` (the trace entries
/// after the start, in trace order) to the state before the first of them.
/// `free_on_completed`: frees take effect at `free_completed` (else at
/// `free_requested`).
pub(crate) fn rewind(
    snapshot: &Snapshot,
    device: usize,
    undo: &[TraceEntry],
    config: &AllocatorConfig,
    free_on_completed: bool,
) -> StartState {
    let mut state = Backward::at_dump(snapshot, device);
    let mut counts = LiveAtStart::default();
    state.undo(undo, free_on_completed, &mut counts);
    state.start(undo, config, counts)
}

/// In [`Backward::live`]: the block is a final segment's (the rest of the
/// value indexes [`Backward::finals`]), else the value is its free's index.
const FINAL: u64 = 1 << 63;

/// The state as the backward walk goes: segments and live blocks.
struct Backward {
    segs: BTreeMap<u64, Seg>,
    /// The final segments' live blocks.
    finals: Vec<Live>,
    /// Hashed, not ordered: a whole trace's allocs and frees pass through it
    /// (millions on a big recording), so an entry is small — the address and
    /// where its block is described (a final segment's block in `finals`, with
    /// [`FINAL`] set, or the free entry that brought it back); the few blocks
    /// left at the start are built and sorted after.
    live: FxHashMap<u64, u64>,
    /// The pool of each final segment, by address.
    final_pools: BTreeMap<u64, (i64, i64)>,
}

impl Backward {
    /// The state at the dump: device `device`'s final segments.
    fn at_dump(snapshot: &Snapshot, device: usize) -> Backward {
        let mut b = Backward {
            segs: BTreeMap::new(),
            finals: Vec::new(),
            live: FxHashMap::default(),
            final_pools: BTreeMap::new(),
        };
        for s in snapshot.segments.iter().filter(|s| s.device == device as i64) {
            let pool = match s.segment_type {
                SegmentType::Small => PoolKind::Small,
                SegmentType::Large => PoolKind::Large,
                SegmentType::Unknown => pool_by_size(s.total_size),
            };
            b.segs.insert(
                s.address,
                Seg {
                    size: s.total_size,
                    stream: s.stream,
                    pool,
                    pool_id: s.segment_pool_id,
                    expandable: s.is_expandable,
                },
            );
            b.final_pools.insert(s.address, s.segment_pool_id);
            for blk in s.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                b.finals.push(Live {
                    size: Some(blk.size),
                    requested: blk.requested_size,
                    frames: blk.frames,
                    stream: s.stream,
                    untouched: true,
                    freed_at: usize::MAX,
                });
                b.live.insert(blk.address, FINAL | (b.finals.len() - 1) as u64);
            }
        }
        b
    }

    /// Undoes `undo`'s entries, last first; what cannot be undone is counted.
    fn undo(&mut self, undo: &[TraceEntry], free_on_completed: bool, counts: &mut LiveAtStart) {
        let free = if free_on_completed { Action::FreeCompleted } else { Action::FreeRequested };
        for (i, e) in undo.iter().enumerate().rev() {
            let problem = match e.action {
                Action::Alloc => self.live.remove(&e.addr).is_none().then_some("no block is allocated there"),
                a if a == free => match self.live.entry(e.addr) {
                    Entry::Occupied(_) => Some("the block is allocated already"),
                    Entry::Vacant(v) => {
                        v.insert(i as u64);
                        None
                    }
                },
                Action::SegmentAlloc => self.segs.remove(&e.addr).is_none().then_some("no segment starts there"),
                Action::SegmentFree if e.size == 0 => Some("a segment of 0 bytes"),
                Action::SegmentFree => {
                    // A segment that ends in the trace is not a final segment: a final
                    // segment at its address is a later one (a CUDA graph's pool may
                    // take the range a warm-up segment left), so its pool is not
                    // known here; the replay's pool plan (pools.rs) decides it.
                    let pool_id = (0, 0);
                    let seg =
                        Seg { size: e.size, stream: e.stream, pool: pool_by_size(e.size), pool_id, expandable: false };
                    self.segs.insert(e.addr, seg).is_some().then_some("a segment starts there already")
                }
                Action::SegmentMap => {
                    (!unmap_range(&mut self.segs, e.addr, e.size)).then_some("the range is not mapped")
                }
                Action::SegmentUnmap => {
                    map_range(&mut self.segs, &self.final_pools, e);
                    None
                }
                _ => None,
            };
            if let Some(why) = problem {
                counts.entries_not_undone += 1;
                if counts.first_not_undone.is_none() {
                    counts.first_not_undone =
                        Some(format!("entry {i} from the start: {} at {:#x}: {why}", e.action.as_str(), e.addr));
                }
            }
        }
    }

    /// The state reached, as segments with their live blocks: every live
    /// block in the segment holding it, sized (see the module docs), or
    /// outside any.
    fn start(self, undo: &[TraceEntry], config: &AllocatorConfig, mut counts: LiveAtStart) -> StartState {
        let mut segments: Vec<StartSegment> = self
            .segs
            .iter()
            .map(|(&address, s)| StartSegment {
                address,
                size: s.size,
                stream: s.stream,
                pool: s.pool,
                pool_id: s.pool_id,
                expandable: s.expandable,
                blocks: Vec::new(),
            })
            .collect();
        let finals = &self.finals;
        let mut live: Vec<(u64, Live)> = self
            .live
            .into_iter()
            .map(|(addr, at)| {
                let b = if at & FINAL != 0 {
                    finals[(at & !FINAL) as usize].clone()
                } else {
                    let e = &undo[at as usize];
                    Live {
                        size: None,
                        requested: e.size,
                        frames: e.frames,
                        stream: e.stream,
                        untouched: false,
                        freed_at: at as usize,
                    }
                };
                (addr, b)
            })
            .collect();
        live.sort_unstable_by_key(|(addr, _)| *addr);
        let bounds = alloc_bounds(undo, &live);
        let mut outside = Vec::new();
        for (k, (addr, b)) in live.iter().enumerate() {
            if b.untouched {
                counts.blocks_in_segments += 1;
                counts.blocks_in_segments_bytes += b.requested;
            } else {
                counts.freed_without_alloc += 1;
                counts.freed_without_alloc_bytes += b.requested;
            }
            let holder = segments.partition_point(|s| s.address <= *addr).checked_sub(1);
            let Some(seg) = holder.map(|h| &mut segments[h]).filter(|s| *addr < s.address + s.size) else {
                let size = b.size.unwrap_or_else(|| config.round_size(b.requested));
                outside.push((b.stream, StartBlock { address: *addr, size, requested: b.requested, frames: b.frames }));
                counts.outside_segments += 1;
                continue;
            };
            // Up to the next live block in the segment, or the segment's end.
            let seg_end = seg.address + seg.size;
            let limit = live.get(k + 1).map_or(seg_end, |(next, _)| (*next).min(seg_end)).min(bounds[k]);
            let size = start_block_size(config, seg, b, limit - addr);
            seg.blocks.push(StartBlock { address: *addr, size, requested: b.requested, frames: b.frames });
        }
        counts.segments = segments.len() as u64;
        counts.segments_bytes = segments.iter().map(|s| s.size).sum();
        counts.blocks = live.len() as u64;
        counts.blocks_bytes =
            segments.iter().flat_map(|s| &s.blocks).chain(outside.iter().map(|(_, b)| b)).map(|b| b.size).sum();
        StartState { segments, outside, live_at_start: counts }
    }
}

/// The block size of live block `b` in `seg`, with `room` bytes to the next
/// live block (or the segment's end): the final segments' size, or for a
/// block freed without its `alloc` in the trace, its request as the
/// allocator rounds and splits it.
fn start_block_size(config: &AllocatorConfig, seg: &StartSegment, b: &Live, room: u64) -> u64 {
    let size = match b.size {
        Some(size) => size.min(room),
        None => {
            let rounded = config.round_size(b.requested).min(room);
            if splits(config, seg.pool, seg.expandable, rounded, room - rounded) {
                rounded
            } else if !seg.expandable && rounded >= config.max_split_size.unwrap_or(u64::MAX) {
                // An oversize block is never split, but takes no free block
                // of its size plus `max_non_split_rounding` or more.
                room.min(rounded + config.max_non_split_rounding - MIN_BLOCK_SIZE)
            } else {
                room
            }
        }
    };
    // A block must be a whole number of 512-byte units, as every block PyTorch makes is.
    (size / MIN_BLOCK_SIZE * MIN_BLOCK_SIZE).max(MIN_BLOCK_SIZE.min(room))
}

/// Whether the segment events of `undo` (the entries at `marks`, in order;
/// other entries among them are ignored) account for every segment: from
/// nothing reserved, each `segment_alloc` takes an address where no live
/// segment starts, each `segment_free` (of some bytes) ends a live one, there
/// is no expandable map or unmap, and what is left is the final segments. Then
/// [`rewind`] finds no segment at the start, and it finds nothing at all when
/// [`blocks_start_empty`] (or [`final_blocks_match`] at the end of a replay that
/// saw every entry undone cleanly) holds too: the backward walk undoes exactly
/// the forward steps from an empty start, each of them cleanly.
pub(crate) fn segments_start_empty(snapshot: &Snapshot, device: usize, undo: &[TraceEntry], marks: &[usize]) -> bool {
    let mut segs: FxHashSet<u64> = FxHashSet::default();
    for e in marks.iter().map(|&i| &undo[i]) {
        let clean = match e.action {
            Action::SegmentAlloc => segs.insert(e.addr),
            Action::SegmentFree => e.size != 0 && segs.remove(&e.addr),
            Action::SegmentMap | Action::SegmentUnmap => false,
            _ => true,
        };
        if !clean {
            return false;
        }
    }
    let finals: FxHashSet<u64> =
        snapshot.segments.iter().filter(|s| s.device == device as i64).map(|s| s.address).collect();
    finals == segs
}

/// Whether the allocs and frees of `undo` account for every block: from
/// nothing allocated, each `alloc` takes an address not live, each free (at
/// `free_completed`, or `free_requested` without completions) ends a live
/// block, and what is left live is the final segments' allocated blocks.
pub(crate) fn blocks_start_empty(
    snapshot: &Snapshot,
    device: usize,
    undo: &[TraceEntry],
    free_on_completed: bool,
) -> bool {
    let free = if free_on_completed { Action::FreeCompleted } else { Action::FreeRequested };
    let mut live: FxHashSet<u64> = FxHashSet::default();
    for e in undo {
        let clean = match e.action {
            Action::Alloc => live.insert(e.addr),
            a if a == free => live.remove(&e.addr),
            _ => true,
        };
        if !clean {
            return false;
        }
    }
    final_blocks_match(snapshot, device, live.len(), |addr| live.contains(&addr))
}

/// Whether the final segments' allocated blocks on `device` are, by address,
/// exactly a set of `count` addresses of which `holds` says whether it has one.
pub(crate) fn final_blocks_match(
    snapshot: &Snapshot,
    device: usize,
    count: usize,
    holds: impl Fn(u64) -> bool,
) -> bool {
    let finals: FxHashSet<u64> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| b.address)
        .collect();
    finals.len() == count && finals.iter().all(|&a| holds(a))
}

/// For each live block freed in the trace, the lowest address above it that
/// an `alloc` took while it was still allocated (its block ends there at the
/// latest); `u64::MAX` for the others.
fn alloc_bounds(undo: &[TraceEntry], live: &[(u64, Live)]) -> Vec<u64> {
    let mut bounds = vec![u64::MAX; live.len()];
    let mut by_free: Vec<usize> = (0..live.len()).filter(|&k| live[k].1.freed_at != usize::MAX).collect();
    by_free.sort_by_key(|&k| live[k].1.freed_at);
    let mut taken = std::collections::BTreeSet::new();
    let mut next = 0;
    for k in by_free {
        let (addr, ref b) = live[k];
        while next < b.freed_at {
            if undo[next].action == Action::Alloc {
                taken.insert(undo[next].addr);
            }
            next += 1;
        }
        if let Some(&above) = taken.range(addr + 1..).next() {
            bounds[k] = above;
        }
    }
    bounds
}

/// Whether the allocator splits the rest of `remaining` bytes off a block of
/// `size` (`should_split`).
fn splits(config: &AllocatorConfig, pool: PoolKind, expandable: bool, size: u64, remaining: u64) -> bool {
    if pool == PoolKind::Small || expandable {
        remaining >= MIN_BLOCK_SIZE
    } else {
        size < config.max_split_size.unwrap_or(u64::MAX) && remaining > SMALL_SIZE
    }
}

/// Takes `[addr, addr + size)` out of the mapped range holding it (undoing a
/// `segment_map`); false when no segment holds it.
fn unmap_range(segs: &mut BTreeMap<u64, Seg>, addr: u64, size: u64) -> bool {
    let Some((&base, seg)) = segs.range(..=addr).next_back() else { return false };
    let end = base + seg.size;
    if addr + size > end {
        return false;
    }
    let seg = seg.clone();
    segs.remove(&base);
    if addr > base {
        segs.insert(base, Seg { size: addr - base, ..seg.clone() });
    }
    if addr + size < end {
        segs.insert(addr + size, Seg { size: end - addr - size, ..seg });
    }
    true
}

/// Adds `entry`'s range as mapped (undoing a `segment_unmap`), joined to the
/// expandable ranges of its stream it touches.
fn map_range(segs: &mut BTreeMap<u64, Seg>, final_pools: &BTreeMap<u64, (i64, i64)>, entry: &TraceEntry) {
    let (mut addr, mut size) = (entry.addr, entry.size);
    let pool_id = final_pools.get(&addr).copied().unwrap_or((0, 0));
    let mut seg = Seg { size, stream: entry.stream, pool: pool_by_size(size), pool_id, expandable: true };
    if let Some((&base, before)) = segs.range(..addr).next_back()
        && base + before.size == addr
        && before.expandable
        && before.stream == entry.stream
    {
        seg = before.clone();
        size += addr - base;
        addr = base;
        segs.remove(&base);
    }
    if let Some(after) = segs.get(&(addr + size))
        && after.expandable
        && after.stream == entry.stream
    {
        let after_size = after.size;
        segs.remove(&(addr + size));
        size += after_size;
    }
    seg.size = size;
    segs.insert(addr, seg);
}

/// The rewound state set up in `allocator`: returns each allocated block's
/// allocation with its recorded address and frames. Blocks outside segments
/// and expandable segments are placed first (their segments take fresh
/// addresses); then `raw`'s address plan is armed and the plain segments are
/// restored at theirs.
pub(crate) fn place(
    allocator: &CachingAllocator,
    raw: &SimulatedMemory,
    start: &StartState,
    mut stream_id: impl FnMut(i64) -> Result<StreamId, SnapshotReplayError>,
) -> Result<Vec<(u64, Allocation, StackId)>, SnapshotReplayError> {
    let err = |source| SnapshotReplayError::Allocator { index: 0, source };
    let private = |s: &StartSegment| (s.pool_id != (0, 0)).then_some((s.pool_id.0 as u64, s.pool_id.1 as u64));
    let mut placed = Vec::new();

    // Expandable segments: requests in address order, the gaps freed after.
    let mut gaps: Vec<Allocation> = Vec::new();
    for s in start.segments.iter().filter(|s| s.expandable) {
        let stream = stream_id(s.stream)?;
        let pool: Option<MempoolId> = private(s);
        // The requests: each live block, and each gap (in the small pool a MiB
        // at a time, as a larger request would go to the large pool). A gap of
        // the large pool of 1 MiB or less cannot be requested there: it joins
        // the live block before it (or after it, at the segment's start).
        let mut requests: Vec<(u64, Option<&StartBlock>)> = Vec::new();
        let mut carry = 0;
        for (_, size, block) in s.layout() {
            match block {
                Some(b) => requests.push((carry + size, Some(b))),
                None if s.pool == PoolKind::Large && size <= SMALL_SIZE => match requests.last_mut() {
                    Some(last) => last.0 += size,
                    None => {
                        carry = size;
                        continue;
                    }
                },
                None if s.pool == PoolKind::Small => {
                    let mut left = size;
                    while left > 0 {
                        requests.push((left.min(SMALL_SIZE), None));
                        left -= left.min(SMALL_SIZE);
                    }
                }
                None => requests.push((size, None)),
            }
            carry = 0;
        }
        for (size, block) in requests {
            let mut a = malloc_in(allocator, size, stream, pool).map_err(err)?;
            match block {
                Some(b) => {
                    // The block's size was asked for, to place it; its caller asked for fewer.
                    allocator.set_requested(&mut a, b.requested);
                    placed.push((b.address, a, b.frames));
                }
                None => gaps.push(a),
            }
        }
    }
    for (stream, b) in &start.outside {
        let a = malloc_in(allocator, b.requested.max(1), stream_id(*stream)?, None).map_err(err)?;
        placed.push((b.address, a, b.frames));
    }
    for g in gaps {
        allocator.free(g).map_err(err)?;
    }

    raw.arm_address_plan();
    for s in start.segments.iter().filter(|s| !s.expandable) {
        let blocks = s
            .layout()
            .into_iter()
            .map(|(_, size, b)| RestoreBlock { size, requested: b.map_or(0, |b| b.requested), allocated: b.is_some() })
            .collect();
        let segment =
            RestoreSegment { size: s.size, stream: stream_id(s.stream)?, pool: s.pool, private: private(s), blocks };
        let allocations = allocator.restore_segment(&segment).map_err(err)?;
        placed.extend(s.blocks.iter().zip(allocations).map(|(b, a)| (b.address, a, b.frames)));
    }
    Ok(placed)
}
