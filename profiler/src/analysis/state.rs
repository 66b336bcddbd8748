//! The allocator state as the records describe it, replayed: mapped ranges
//! of expandable segments, nested phases per thread, live blocks and segments
//! per device.

use std::collections::BTreeMap;

use crate::record::{FxHashMap, NO_DEVICE, Record, Recording, kind};
use crate::timeline::{CATEGORY_COUNT, Category};

use super::NO_PHASE;
use super::levels::apply_levels;
use super::types::*;

// ---------------------------------------------------------------------------
// Mapped ranges of expandable segments.

/// A set of disjoint half-open ranges, adjacent ranges merged.
#[derive(Debug, Default, Clone)]
pub(super) struct RangeSet {
    pub(super) ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub(super) fn insert(&mut self, start: u64, end: u64) {
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

    pub(super) fn remove(&mut self, start: u64, end: u64) {
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

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }
}

// ---------------------------------------------------------------------------
// Phases.

#[derive(Debug, Clone)]
pub(crate) struct PhaseInstance {
    pub(crate) name: u32,
    pub(crate) parent: u32,
    pub(super) thread: u32,
    pub(super) depth: u32,
    pub(super) start_ns: u64,
    pub(super) end_ns: Option<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Phases {
    pub(crate) instances: Vec<PhaseInstance>,
    /// Open instances per recording thread, innermost last.
    pub(super) stacks: Vec<Vec<u32>>,
    /// Every open instance, in the order they began.
    pub(super) open: Vec<u32>,
    pub(super) unmatched_ends: u64,
}

impl Phases {
    pub(super) fn stack(&mut self, thread: u32) -> &mut Vec<u32> {
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

    pub(super) fn path(&self, id: u32, names: &[String]) -> Option<String> {
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
pub(super) struct Live {
    pub(super) size: u64,
    pub(super) requested: u64,
    pub(super) time_ns: u64,
    pub(super) phase: u32,
    pub(super) stream: u32,
    pub(super) category: u8,
    pub(super) allocated: bool,
}

/// The state of every device's allocator as the records describe it.
pub(super) struct Replay<'a> {
    pub(super) rec: &'a Recording,
    /// Context → device slot (`u32::MAX`: no device).
    pub(super) ctx_slot: Vec<u32>,
    pub(super) levels: Vec<MemoryLevels>,
    pub(super) by_cat: Vec<[u64; CATEGORY_COUNT]>,
    pub(super) live: FxHashMap<(u32, u64), Live>,
    pub(super) segments: FxHashMap<(u32, u64), u64>,
    pub(super) mapped: Vec<RangeSet>,
    pub(super) phases: Phases,
    pub(super) closed: Vec<u32>,
}

/// What one replay step did.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) slot: u32,
    pub(super) changed: u8,
    /// The record was found to free something allocated before the recording.
    pub(super) ignored: bool,
}

impl<'a> Replay<'a> {
    pub(super) fn new(rec: &'a Recording, slot_of_device: &dyn Fn(u32) -> u32, slots: usize) -> Replay<'a> {
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
    pub(super) fn allocator(&mut self, index: usize, r: &Record) -> Step {
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

    pub(super) fn live_allocations(&self, slot: u32, names: &[String], phases: &Phases) -> Vec<LiveAllocation> {
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

    pub(super) fn largest_live(&self, slot: u32, n: usize, names: &[String]) -> Vec<LiveAllocation> {
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
    pub(super) fn fragmentation(&self, slot: u32, time_ns: u64) -> Fragmentation {
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

/// Records a free gap `[from, to)` in `f`.
pub(super) fn gap(from: u64, to: u64, f: &mut Fragmentation) {
    if to > from {
        f.free_blocks += 1;
        f.largest_free_block_bytes = f.largest_free_block_bytes.max(to - from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::NO_PHASE;

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
}
