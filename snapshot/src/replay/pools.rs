//! Which private pool (a CUDA graph's, a `torch.cuda.MemPool`) each allocation
//! of a snapshot's trace went to. PyTorch's trace entries do not name their
//! pool; the final segments do (`segment_pool_id`), but only for the segments
//! still reserved at the dump, and an address range can belong to a warm-up's
//! default-pool segment first and to a graph's pool after an `empty_cache()`
//! (what `torch.cuda.graph`'s `__enter__` does before the capture).
//!
//! So the pool belongs to a segment's *lifetime*, from its `segment_alloc` (or
//! the start of the trace) to its `segment_free` (or the dump), and an
//! allocation's pool is that of the segment holding its address at the time:
//!
//! - a lifetime that lasts to the dump is in the final segment's pool: known;
//! - a lifetime that ends before the dump (its segment freed) has no recorded
//!   pool. It is inferred where the trace allows: its `segment_alloc` lies in a
//!   capture window of a surviving pool `P` on the same stream (between the
//!   first and last allocation in `P`'s segments on that stream — during a
//!   capture every allocation on the capturing stream goes to `P`), or its
//!   stream allocated only into `P`'s segments (no default-pool allocation on it
//!   is known) and it began at or after `P`'s first allocation there. Otherwise
//!   it is replayed in the default pool and counted as not known: a pool whose
//!   segments were all released before the dump (a deleted graph followed by
//!   `empty_cache()`) leaves no trace of its id.
//!
//! A private pool keeps its segments while it has users; PyTorch releases them
//! only once the pool is freeable (use count 0). A lifetime inferred to be in a
//! surviving pool and freed in the trace therefore says the pool was freeable
//! then: the plan lists those frees, and the replay makes the pool freeable for
//! the run of segment frees and takes it back after.

use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::format::model::{Action, Snapshot, TraceEntry};
use vramlab_allocator::{AllocError, Allocation, CachingAllocator, MempoolId, PoolFilter, StreamId};

/// How the replay learned the pool of each segment the trace touches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PoolInference {
    /// Segment lifetimes seen (allocated in the trace, or reserved before it
    /// and freed in it or kept to the dump).
    pub segments: u64,
    /// Lifetimes that last to the dump: their pool is the final segment's.
    pub known_from_final_segments: u64,
    /// Of those, in a private pool.
    pub known_private: u64,
    /// Freed before the dump and inferred to be in a private pool (see the module docs).
    pub inferred_private: u64,
    /// Freed before the dump with no sign of a private pool: replayed in the
    /// default pool. Their pool is not known from the trace when the recording
    /// had private pools that left no final segment.
    pub freed_assumed_default: u64,
    /// Lifetimes that began before the first entry (segments reserved then).
    pub live_at_start: u64,
    /// Allocations replayed in a private pool.
    pub allocs_in_private_pools: u64,
}

/// One segment's life in the trace.
#[derive(Debug, Clone)]
struct Life {
    addr: u64,
    size: u64,
    stream: i64,
    /// Index of its `segment_alloc`; `None`: reserved before the first entry.
    start: Option<usize>,
    /// Index of its `segment_free`; `None`: kept to the dump.
    end: Option<usize>,
    pool: Option<MempoolId>,
}

/// The pool of every allocation of one device's trace.
#[derive(Debug, Default)]
pub(crate) struct PoolPlan {
    /// Trace index of an `alloc` → its private pool (absent: the default pool).
    by_entry: HashMap<usize, MempoolId>,
    /// Lifetimes reserved before the first entry: (address, end address, pool).
    at_start: Vec<(u64, u64, Option<MempoolId>)>,
    /// Trace index of a `segment_free` → private pools to make freeable for it.
    freeable_at: HashMap<usize, Vec<MempoolId>>,
    /// The private pools to create before the replay (surviving ones).
    pub pools: Vec<MempoolId>,
    pub inference: PoolInference,
}

/// The segment lifetimes of `trace`, in the order their events appear
/// (`marks`: the indices of its segment events, in order, and maybe others).
fn open_lives(trace: &[TraceEntry], marks: &[usize]) -> Vec<Life> {
    let mut lives: Vec<Life> = Vec::new();
    // Live lifetimes by base address: (end address, lifetime index).
    let mut live: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for (i, e) in marks.iter().map(|&i| (i, &trace[i])) {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                lives.push(Life {
                    addr: e.addr,
                    size: e.size,
                    stream: e.stream,
                    start: Some(i),
                    end: None,
                    pool: None,
                });
                live.insert(e.addr, (e.addr.saturating_add(e.size), lives.len() - 1));
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let gone = overlapping(&live, e.addr, e.size);
                if gone.is_empty() {
                    // Reserved before the first entry.
                    lives.push(Life {
                        addr: e.addr,
                        size: e.size,
                        stream: e.stream,
                        start: None,
                        end: Some(i),
                        pool: None,
                    });
                }
                for base in gone {
                    if let Some((_, k)) = live.remove(&base) {
                        lives[k].end = Some(i);
                    }
                }
            }
            _ => {}
        }
    }
    lives
}

/// The base addresses of the live lifetimes overlapping `[addr, addr + size)`.
fn overlapping(live: &BTreeMap<u64, (u64, usize)>, addr: u64, size: u64) -> Vec<u64> {
    let end = addr.saturating_add(size.max(1));
    // Live lifetimes never overlap each other: the one holding `addr`, if any,
    // and those starting inside the range (a lookup, not a scan of every
    // lifetime below `end`).
    let holding = live.range(..=addr).next_back().filter(|(_, (stop, _))| *stop > addr).map(|(&base, _)| base);
    holding.into_iter().chain(live.range(addr.saturating_add(1)..end).map(|(&base, _)| base)).collect()
}

/// Walks the trace again over the lifetimes `open_lives` found, calling
/// `on_alloc` for every `alloc` with the index of the lifetime holding its
/// address then.
fn walk_allocs(trace: &[TraceEntry], lives: &[Life], mut on_alloc: impl FnMut(usize, &TraceEntry, Option<usize>)) {
    let mut live: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for (k, l) in lives.iter().enumerate().filter(|(_, l)| l.start.is_none()) {
        live.insert(l.addr, (l.addr.saturating_add(l.size), k));
    }
    let mut opened = lives.iter().enumerate().filter(|(_, l)| l.start.is_some()).map(|(k, _)| k);
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                if let Some(k) = opened.next() {
                    live.insert(e.addr, (e.addr.saturating_add(e.size), k));
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                for base in overlapping(&live, e.addr, e.size) {
                    live.remove(&base);
                }
            }
            Action::Alloc => {
                let holder =
                    live.range(..=e.addr).next_back().filter(|(_, (stop, _))| e.addr < *stop).map(|(_, &(_, k))| k);
                on_alloc(i, e, holder);
            }
            _ => {}
        }
    }
}

impl PoolPlan {
    /// The plan for `device`'s trace of `snapshot`; `marks`: the indices of
    /// its segment events, in order (other entries among them are ignored).
    pub(crate) fn new(snapshot: &Snapshot, device: usize, marks: &[usize]) -> PoolPlan {
        let trace = &snapshot.device_traces[device];
        let finals: Vec<(u64, u64, MempoolId)> = {
            let mut v: Vec<_> = snapshot
                .segments
                .iter()
                .filter(|s| s.device == device as i64)
                .map(|s| {
                    let (a, b) = s.segment_pool_id;
                    (s.address, s.address.saturating_add(s.total_size), (a as u64, b as u64))
                })
                .collect();
            v.sort_unstable();
            v
        };
        let final_pool = |addr: u64| -> Option<MempoolId> {
            let k = finals.partition_point(|r| r.0 <= addr);
            k.checked_sub(1).map(|k| finals[k]).filter(|r| addr < r.1).map(|r| r.2)
        };

        // Pass 1: the lifetimes the segment events open and close.
        let mut lives = open_lives(trace, marks);
        // Lifetimes kept to the dump take the final segment's pool; final segments
        // no lifetime covers were reserved before the first entry and kept.
        let mut covered = vec![false; finals.len()];
        for life in lives.iter_mut().filter(|l| l.end.is_none()) {
            let k = finals.partition_point(|r| r.0 <= life.addr);
            if let Some(k) = k.checked_sub(1).filter(|&k| life.addr < finals[k].1) {
                covered[k] = true;
                life.pool = Some(finals[k].2);
            }
        }
        for (k, &(addr, stop, pool)) in finals.iter().enumerate() {
            if !covered[k] {
                let stream = snapshot
                    .segments
                    .iter()
                    .find(|s| s.device == device as i64 && s.address == addr)
                    .map_or(0, |s| s.stream);
                lives.push(Life { addr, size: stop - addr, stream, start: None, end: None, pool: Some(pool) });
            }
        }
        let private = |p: Option<MempoolId>| p.filter(|&p| p != (0, 0));
        let start_lives: Vec<usize> = (0..lives.len()).filter(|&k| lives[k].start.is_none()).collect();

        let mut pools: Vec<MempoolId> = finals.iter().map(|r| r.2).filter(|&p| p != (0, 0)).collect();
        pools.sort_unstable();
        pools.dedup();
        let mut plan = PoolPlan { pools, ..PoolPlan::default() };
        let inf = &mut plan.inference;
        inf.segments = lives.len() as u64;
        inf.live_at_start = start_lives.len() as u64;
        inf.known_from_final_segments = lives.iter().filter(|l| l.end.is_none()).count() as u64;
        inf.known_private = lives.iter().filter(|l| l.end.is_none() && private(l.pool).is_some()).count() as u64;
        if plan.pools.is_empty() {
            // No private pool survives: nothing to route, nothing to infer from.
            inf.freed_assumed_default = lives.iter().filter(|l| l.end.is_some()).count() as u64;
            plan.at_start = start_lives.iter().map(|&k| (lives[k].addr, lives[k].addr + lives[k].size, None)).collect();
            return plan;
        }

        // Pass 2: what the known lifetimes say about each stream: per (stream,
        // pool) the first and last allocation in it; streams with a known
        // default-pool allocation.
        let mut windows: HashMap<(i64, MempoolId), (usize, usize)> = HashMap::default();
        let mut default_streams: HashMap<i64, ()> = HashMap::default();
        let pools_of: Vec<Option<MempoolId>> =
            lives.iter().map(|l| if l.end.is_none() { l.pool } else { None }).collect();
        let known: Vec<bool> = lives.iter().map(|l| l.end.is_none()).collect();
        walk_allocs(trace, &lives, |i, e, holder| {
            let Some(k) = holder.filter(|&k| known[k]) else { return };
            match private(pools_of[k]) {
                Some(p) => {
                    let w = windows.entry((e.stream, p)).or_insert((i, i));
                    w.1 = i;
                }
                None => {
                    default_streams.insert(e.stream, ());
                }
            }
        });

        // Infer the pools of freed lifetimes.
        for life in lives.iter_mut().filter(|l| l.end.is_some()) {
            let Some(start) = life.start else {
                inf.freed_assumed_default += 1;
                continue;
            };
            let in_window = windows
                .iter()
                .filter(|((s, _), (a, b))| *s == life.stream && *a <= start && start <= *b)
                .map(|((_, p), _)| *p)
                .min();
            let by_stream = || {
                if default_streams.contains_key(&life.stream) {
                    return None;
                }
                let mut of: Vec<(MempoolId, usize)> =
                    windows.iter().filter(|((s, _), _)| *s == life.stream).map(|((_, p), (a, _))| (*p, *a)).collect();
                of.sort_unstable();
                (of.len() == 1 && of[0].1 <= start).then_some(of[0].0)
            };
            match in_window.or_else(by_stream) {
                Some(p) => {
                    life.pool = Some(p);
                    inf.inferred_private += 1;
                    if let Some(end) = life.end {
                        plan.freeable_at.entry(end).or_default().push(p);
                    }
                }
                None => inf.freed_assumed_default += 1,
            }
        }
        for v in plan.freeable_at.values_mut() {
            v.sort_unstable();
            v.dedup();
        }

        // Pass 3: each allocation's pool.
        let pool_of_life: Vec<Option<MempoolId>> = lives.iter().map(|l| private(l.pool)).collect();
        let mut by_entry = HashMap::default();
        walk_allocs(trace, &lives, |i, e, holder| {
            let pool = match holder {
                Some(k) => pool_of_life[k],
                // Not in any segment the trace or the dump shows: the final
                // segments are the only map left.
                None => private(final_pool(e.addr)),
            };
            if let Some(p) = pool {
                by_entry.insert(i, p);
            }
        });
        plan.inference.allocs_in_private_pools = by_entry.len() as u64;
        plan.by_entry = by_entry;
        plan.at_start = start_lives
            .iter()
            .map(|&k| (lives[k].addr, lives[k].addr + lives[k].size, private(lives[k].pool)))
            .collect();
        plan.at_start.sort_unstable_by_key(|r| r.0);
        plan
    }

    /// Whether every allocation goes to the default pool and no private pool
    /// is created or made freeable (the plan of a trace without private pools).
    pub(crate) fn default_pool_only(&self) -> bool {
        self.by_entry.is_empty() && self.freeable_at.is_empty() && self.pools.is_empty()
    }

    /// The private pool of the `alloc` at trace index `index`, if any.
    pub(crate) fn pool_of_entry(&self, index: usize) -> Option<MempoolId> {
        self.by_entry.get(&index).copied()
    }

    /// The private pool of memory live at `addr` before the first entry, if any.
    pub(crate) fn pool_at_start(&self, addr: u64) -> Option<MempoolId> {
        let k = self.at_start.partition_point(|r| r.0 <= addr);
        k.checked_sub(1).map(|k| self.at_start[k]).filter(|r| addr < r.1).and_then(|r| r.2)
    }

    /// Private pools that must be freeable for the `segment_free` at `index`.
    pub(crate) fn freeable_for(&self, index: usize) -> &[MempoolId] {
        self.freeable_at.get(&index).map_or(&[], Vec::as_slice)
    }
}

/// `malloc`, in private pool `pool` when given (begin allocating the stream to it,
/// allocate, end and give the use back).
pub(crate) fn malloc_in(
    allocator: &CachingAllocator,
    size: u64,
    stream: StreamId,
    pool: Option<MempoolId>,
) -> Result<Allocation, AllocError> {
    let Some(pool) = pool else {
        return allocator.malloc(size, stream, None);
    };
    allocator.begin_allocate_to_pool(pool, PoolFilter::Streams(vec![stream]))?;
    let result = allocator.malloc(size, stream, None);
    allocator.end_allocate_to_pool(pool)?;
    allocator.release_pool(pool)?;
    result
}
