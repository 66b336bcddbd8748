//! A profile's allocator events as a PyTorch memory snapshot
//! ([`Profile::memory_snapshot`]): the device's trace (alloc, frees, segment
//! allocs, frees, maps and unmaps, OOMs, with sizes, addresses, streams and
//! times) and its segments at the end of the recording, rebuilt from the same
//! events. The snapshot is the model of `vramlab_snapshot`, so
//! its writer makes the pickle that pytorch.org/memory_viz and PyTorch's
//! `torch/cuda/_memory_viz.py` read, and vramlab's own replay checks it.
//!
//! Frames: vramlab's engine has no Python stack, so each event carries what it
//! does know as frames, innermost first — the allocation's tag
//! (`tag:activation`) and the open phases (`phase:forward`, then the phases
//! around it) — which is what the viewers group and colour allocations by.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use vramlab_engine::alloc::consts::SMALL_BUFFER;
use vramlab_engine::alloc::{AllocatorConfig, BlockState};
use vramlab_snapshot::{
    Action, AllocatorSettings, Block, Frame, FrameTable, Segment, SegmentType, Snapshot, StackId, TraceEntry,
};

use crate::analysis::{NO_PHASE, Phases};
use crate::error::ProfilerError;
use crate::profile::Profile;
use crate::record::{NO_DEVICE, kind};

/// A live block of the rebuilt end state: rounded and requested size, state, frames.
#[derive(Debug, Clone, Copy)]
struct LiveBlock {
    size: u64,
    requested: u64,
    state: BlockState,
    frames: StackId,
}

/// Frames and stacks, each stored once.
#[derive(Default)]
struct Interner {
    table: FrameTable,
    frames: HashMap<(&'static str, u32), u32>,
    stacks: HashMap<Vec<u32>, StackId>,
}

impl Interner {
    fn new() -> Interner {
        let mut i = Interner::default();
        // Stack 0 is "no frames".
        i.table.stacks.push(Box::new([]));
        i.stacks.insert(Vec::new(), 0);
        i
    }

    /// A frame `kind:name` (`tag:activation`, `phase:forward`); `id` tells names apart cheaply.
    fn frame(&mut self, kind: &'static str, id: u32, name: &str) -> u32 {
        let next = self.table.frames.len() as u32;
        *self.frames.entry((kind, id)).or_insert_with(|| {
            self.table.frames.push(Frame {
                filename: Arc::from("vramlab"),
                line: 0,
                name: Arc::from(format!("{kind}:{name}")),
            });
            next
        })
    }

    fn stack(&mut self, frames: Vec<u32>) -> StackId {
        let next = self.table.stacks.len() as StackId;
        if let Some(&id) = self.stacks.get(&frames) {
            return id;
        }
        self.table.stacks.push(frames.clone().into_boxed_slice());
        self.stacks.insert(frames, next);
        next
    }
}

impl Profile {
    /// The recording of allocator `device` as a PyTorch memory snapshot, the
    /// device as index 0: its trace in recording order and its segments at
    /// the end, with the live blocks (allocated, or freed and waiting for
    /// another stream) and the free gaps between them. `config` is the
    /// allocator's configuration, written as `allocator_settings` (so a replay
    /// runs under the same settings); `None` writes none, which readers take as
    /// PyTorch's defaults — unless the trace maps pages, which only expandable
    /// segments do: then `expandable_segments:True` is written.
    ///
    /// What happened before the recording began is not in the events: blocks
    /// freed without an alloc in the trace are placed before it by the
    /// readers, as for a PyTorch recording started late; segments that were
    /// already reserved and stayed so are not in the end state.
    pub fn memory_snapshot(&self, device: u32, config: Option<&AllocatorConfig>) -> Result<Snapshot, ProfilerError> {
        if self.device(device).is_none() {
            return Err(ProfilerError::UnknownDevice {
                query: "memory_snapshot",
                device,
                known: self.devices.iter().map(|d| d.info.index).collect(),
            });
        }
        let rec = self.recording();
        let mask: Vec<bool> = rec.contexts.iter().map(|c| c.device == device && c.device != NO_DEVICE).collect();
        let mut names = Interner::new();
        let mut phases = Phases::default();
        let mut closed = Vec::new();
        let mut trace = Vec::new();
        let mut segments: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
        // Mapped ranges of expandable segments: start → (end, stream).
        let mut mapped: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
        let mut blocks: HashMap<u64, LiveBlock> = HashMap::new();
        for (i, r) in rec.iter() {
            match r.kind {
                kind::PHASE_BEGIN => {
                    phases.begin(r.c, rec.context(r).thread, r.time_ns);
                    continue;
                }
                kind::PHASE_END => {
                    phases.end(r.c, rec.context(r).thread, r.time_ns, &mut closed);
                    continue;
                }
                _ => {}
            }
            if !r.is_allocator() || !mask[r.ctx as usize] || r.kind == kind::EMPTY_CACHE {
                continue;
            }
            let ctx = rec.context(r);
            let stream = i64::from(ctx.stream);
            let requested = rec.requested(i, r);
            // The frames: the tag (allocations), then the open phases, innermost first.
            let mut stack = Vec::new();
            if r.kind == kind::ALLOC
                && let Some(tag) = r.tag()
            {
                stack.push(names.frame("tag", tag as u32, tag.as_str()));
            }
            let mut phase = phases.current(ctx.thread);
            while phase != NO_PHASE {
                let Some(inst) = phases.instances.get(phase as usize) else { break };
                let name = rec.phases.get(inst.name as usize).map_or("?", String::as_str);
                stack.push(names.frame("phase", inst.name, name));
                phase = inst.parent;
            }
            let mut frames = names.stack(stack);
            let (action, size) = match r.kind {
                kind::ALLOC => {
                    blocks.insert(r.a, LiveBlock { size: r.b, requested, state: BlockState::ActiveAllocated, frames });
                    (Action::Alloc, requested)
                }
                kind::FREE_REQUESTED => {
                    if let Some(b) = blocks.get_mut(&r.a) {
                        b.state = BlockState::ActivePendingFree;
                        frames = b.frames;
                    }
                    (Action::FreeRequested, requested)
                }
                kind::FREE_COMPLETED => {
                    if let Some(b) = blocks.remove(&r.a) {
                        frames = b.frames;
                    }
                    (Action::FreeCompleted, requested)
                }
                kind::SEGMENT_ALLOC => {
                    segments.insert(r.a, (r.b, stream));
                    (Action::SegmentAlloc, r.b)
                }
                kind::SEGMENT_FREE => {
                    segments.remove(&r.a);
                    (Action::SegmentFree, r.b)
                }
                kind::SEGMENT_MAP => {
                    map_range(&mut mapped, r.a, r.a + r.b, stream);
                    (Action::SegmentMap, r.b)
                }
                kind::SEGMENT_UNMAP => {
                    unmap_range(&mut mapped, r.a, r.a + r.b);
                    (Action::SegmentUnmap, r.b)
                }
                // `oom`: the address field holds the device's free bytes.
                _ => (Action::Oom, requested),
            };
            trace.push(TraceEntry { action, addr: r.a, size, stream, time_us: (r.time_ns / 1000) as i64, frames });
        }
        let mut end: Vec<Segment> = segments
            .into_iter()
            .map(|(address, (total_size, stream))| segment(address, total_size, stream, false, &blocks))
            .chain(
                mapped
                    .into_iter()
                    .map(|(address, (end, stream))| segment(address, end - address, stream, true, &blocks)),
            )
            .collect();
        end.sort_by_key(|s| s.address);
        let inferred;
        let config = match config {
            None if trace.iter().any(|e| e.action == Action::SegmentMap) => {
                inferred = AllocatorConfig { expandable_segments: true, ..AllocatorConfig::default() };
                Some(&inferred)
            }
            c => c,
        };
        Ok(Snapshot {
            protocol: 2,
            segments: end,
            device_traces: vec![trace],
            skipped_entries: Vec::new(),
            frames: names.table,
            allocator_settings: config.map(AllocatorSettings::from_config),
            legacy_layout: false,
            host_segments: 0,
            host_trace_entries: 0,
            external_annotations: 0,
            other_keys: Vec::new(),
            estimate: None,
        })
    }
}

/// One segment of the end state: its live blocks in address order, the gaps
/// between them as free (inactive) blocks.
fn segment(address: u64, total_size: u64, stream: i64, is_expandable: bool, live: &HashMap<u64, LiveBlock>) -> Segment {
    let end = address + total_size;
    let mut inside: Vec<(u64, LiveBlock)> =
        live.iter().filter(|(a, _)| (address..end).contains(*a)).map(|(a, b)| (*a, *b)).collect();
    inside.sort_by_key(|b| b.0);
    let mut blocks = Vec::with_capacity(inside.len() * 2 + 1);
    let mut at = address;
    let free = |from: u64, to: u64| Block {
        address: from,
        size: to - from,
        requested_size: 0,
        state: BlockState::Inactive,
        frames: 0,
    };
    for (a, b) in inside {
        if a > at {
            blocks.push(free(at, a));
        }
        blocks.push(Block { address: a, size: b.size, requested_size: b.requested, state: b.state, frames: b.frames });
        at = (a + b.size).min(end);
    }
    if at < end {
        blocks.push(free(at, end));
    }
    // The small pool's segments are 2 MiB (kSmallBuffer); the large pool never makes one that small.
    let segment_type =
        if total_size <= SMALL_BUFFER && !is_expandable { SegmentType::Small } else { SegmentType::Large };
    Segment {
        device: 0,
        address,
        total_size,
        stream,
        segment_type,
        segment_pool_id: (0, 0),
        is_expandable,
        frames: 0,
        blocks,
    }
}

/// Adds `[start, end)` to the mapped ranges, merging it with its neighbours.
fn map_range(mapped: &mut BTreeMap<u64, (u64, i64)>, mut start: u64, mut end: u64, stream: i64) {
    if let Some((&s, &(e, _))) = mapped.range(..=start).next_back()
        && e >= start
    {
        start = s;
        end = end.max(e);
        mapped.remove(&s);
    }
    while let Some((&s, &(e, _))) = mapped.range(start..=end).next() {
        end = end.max(e);
        mapped.remove(&s);
    }
    mapped.insert(start, (end, stream));
}

/// Removes `[start, end)` from the mapped ranges, splitting a range it cuts.
fn unmap_range(mapped: &mut BTreeMap<u64, (u64, i64)>, start: u64, end: u64) {
    let touched: Vec<(u64, (u64, i64))> =
        mapped.range(..end).filter(|(_, (e, _))| *e > start).map(|(s, v)| (*s, *v)).collect();
    for (s, (e, stream)) in touched {
        mapped.remove(&s);
        if s < start {
            mapped.insert(s, (start, stream));
        }
        if e > end {
            mapped.insert(end, (e, stream));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ranges_merge_and_split() {
        let mut m = BTreeMap::new();
        map_range(&mut m, 0, 10, 0);
        map_range(&mut m, 10, 20, 0);
        map_range(&mut m, 30, 40, 0);
        assert_eq!(m.iter().map(|(s, (e, _))| (*s, *e)).collect::<Vec<_>>(), [(0, 20), (30, 40)]);
        unmap_range(&mut m, 5, 15);
        assert_eq!(m.iter().map(|(s, (e, _))| (*s, *e)).collect::<Vec<_>>(), [(0, 5), (15, 20), (30, 40)]);
        map_range(&mut m, 4, 31, 0);
        assert_eq!(m.iter().map(|(s, (e, _))| (*s, *e)).collect::<Vec<_>>(), [(0, 40)]);
    }
}
