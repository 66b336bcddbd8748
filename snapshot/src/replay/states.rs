//! The allocator's state at every entry of chosen windows of the trace, as
//! the replay had it ([`StateHistory`]): the segment map memory_viz lets one
//! step through, taken from the replayed allocator itself
//! (`CachingAllocator::snapshot`, the segments PyTorch's would have) and
//! kept compactly: a keyframe (every block of every segment) at each
//! window's first state, then per entry only the blocks that changed. Made
//! by `run.rs`'s `replay_snapshot_states`; [`StateHistory::state_at`] rebuilds
//! the segments at any state it holds, and `replay_snapshot_state_at` takes
//! them from a replay stopped there (the check of the history).

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use vramlab_allocator::{BlockState, CachingAllocator, PoolKind, SegmentInfo};

/// States (entries applied) a history keeps by default: a trace up to this
/// long is kept whole; a longer one in windows around the pinned states and
/// spread over the trace, this many states in all.
pub const STATE_BUDGET: u64 = 40_000;
/// States kept on each side of a pinned state in a trace too long to keep whole.
pub const PIN_WINDOW: u64 = 256;
/// Windows spread evenly over a trace too long to keep whole.
pub const SPREAD_WINDOWS: u64 = 32;

/// A segment of a history: where it lies and what it is. One entry per
/// distinct (address, stream, pool, expandable): a segment freed and another
/// made at the same address later is a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct StateSegment {
    pub address: u64,
    pub stream: u32,
    pub small: bool,
    pub expandable: bool,
}

/// A block: its segment (an index into [`StateHistory::segments`]), its
/// offset in it, its size and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateBlock {
    pub segment: u32,
    pub offset: u64,
    pub size: u64,
    pub state: BlockState,
}

/// What changed at one state: a block gone (`None`) or now as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockChange {
    pub segment: u32,
    pub offset: u64,
    pub now: Option<(u64, BlockState)>,
}

/// Consecutive states: every block at the first, then the changes at each next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateWindow {
    /// Entries applied at the keyframe (0: before the first entry).
    pub start: u64,
    pub keyframe: Vec<StateBlock>,
    /// The changes at states `start + 1`, `start + 2`, …
    pub changes: Vec<Vec<BlockChange>>,
}

impl StateWindow {
    /// The last state the window holds.
    pub fn end(&self) -> u64 {
        self.start + self.changes.len() as u64
    }
}

/// The allocator's state over chosen windows of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateHistory {
    /// The trace's entries (states run from 0 to this).
    pub entries: u64,
    pub segments: Vec<StateSegment>,
    /// In order, not overlapping.
    pub windows: Vec<StateWindow>,
}

/// A segment rebuilt at a state: its place and its blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentAt {
    pub address: u64,
    pub total_size: u64,
    pub stream: u32,
    pub small: bool,
    pub expandable: bool,
    /// (offset, size, state)
    pub blocks: Vec<(u64, u64, BlockState)>,
}

impl SegmentAt {
    /// The allocator's own segments, in the form [`StateHistory::state_at`] gives.
    pub fn of(segments: &[SegmentInfo]) -> Vec<SegmentAt> {
        let mut out: Vec<SegmentAt> = segments
            .iter()
            .map(|s| SegmentAt {
                address: s.address,
                total_size: s.total_size,
                stream: s.stream,
                small: s.pool == PoolKind::Small,
                expandable: s.is_expandable,
                blocks: s.blocks.iter().map(|b| (b.address - s.address, b.size, b.state)).collect(),
            })
            .collect();
        out.sort_by_key(|s| s.address);
        out
    }
}

impl StateHistory {
    /// Whether the history holds the state after `ops` entries.
    pub fn holds(&self, ops: u64) -> bool {
        self.windows.iter().any(|w| w.start <= ops && ops <= w.end())
    }

    /// The segments after `ops` entries, by address; `None` where the history
    /// does not hold that state.
    pub fn state_at(&self, ops: u64) -> Option<Vec<SegmentAt>> {
        let w = self.windows.iter().find(|w| w.start <= ops && ops <= w.end())?;
        let mut blocks: Blocks = w.keyframe.iter().map(|b| ((b.segment, b.offset), (b.size, b.state))).collect();
        for changes in &w.changes[..(ops - w.start) as usize] {
            for c in changes {
                match c.now {
                    Some(b) => blocks.insert((c.segment, c.offset), b),
                    None => blocks.remove(&(c.segment, c.offset)),
                };
            }
        }
        let mut by_segment: HashMap<u32, Vec<(u64, u64, BlockState)>> = HashMap::default();
        for ((seg, offset), (size, state)) in blocks {
            by_segment.entry(seg).or_default().push((offset, size, state));
        }
        let mut out: Vec<SegmentAt> = by_segment
            .into_iter()
            .map(|(seg, mut blocks)| {
                blocks.sort_by_key(|b| b.0);
                let s = self.segments[seg as usize];
                SegmentAt {
                    address: s.address,
                    total_size: blocks.iter().map(|b| b.1).sum(),
                    stream: s.stream,
                    small: s.small,
                    expandable: s.expandable,
                    blocks,
                }
            })
            .collect();
        out.sort_by_key(|s| s.address);
        Some(out)
    }
}

/// The windows (first and last state, inclusive) a history of a trace of
/// `entries` keeps within `budget` states: the whole trace when it fits; else
/// [`PIN_WINDOW`] states on each side of every pinned state and the rest of
/// the budget in [`SPREAD_WINDOWS`] windows spread evenly, merged where they meet.
pub fn state_windows(entries: u64, pins: &[u64], budget: u64) -> Vec<(u64, u64)> {
    if entries < budget {
        return vec![(0, entries)];
    }
    let mut w: Vec<(u64, u64)> =
        pins.iter().map(|&p| (p.saturating_sub(PIN_WINDOW), (p + PIN_WINDOW).min(entries))).collect();
    let pinned = w.len() as u64 * (2 * PIN_WINDOW + 1);
    let each = budget.saturating_sub(pinned) / SPREAD_WINDOWS;
    if each > 0 {
        let gap = entries / SPREAD_WINDOWS;
        w.extend((0..SPREAD_WINDOWS).map(|k| (k * gap, (k * gap + each - 1).min(entries))));
    }
    w.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in w {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Blocks by (segment, offset): their size and state.
type Blocks = HashMap<(u32, u64), (u64, BlockState)>;

/// Takes the allocator's state at the states of chosen windows, while a replay walks.
pub(crate) struct StateRecorder {
    windows: Vec<(u64, u64)>,
    /// Blocks at the last state taken, by (segment, offset), and that state.
    prev: Option<(u64, Blocks)>,
    ids: HashMap<StateSegment, u32>,
    pub(crate) history: StateHistory,
}

impl StateRecorder {
    pub(crate) fn new(entries: u64, windows: Vec<(u64, u64)>) -> StateRecorder {
        StateRecorder {
            windows,
            prev: None,
            ids: HashMap::default(),
            history: StateHistory { entries, ..StateHistory::default() },
        }
    }

    /// Forgets every state taken (the replay starts again, from another start).
    pub(crate) fn restart(&mut self) {
        *self = StateRecorder::new(self.history.entries, std::mem::take(&mut self.windows));
    }

    /// The state after `ops` entries, when a window asks for it.
    pub(crate) fn at(&mut self, ops: u64, allocator: &CachingAllocator) {
        if !self.windows.iter().any(|&(a, b)| a <= ops && ops <= b) {
            return;
        }
        let mut now: Blocks = HashMap::default();
        for s in allocator.snapshot() {
            let key = StateSegment {
                address: s.address,
                stream: s.stream,
                small: s.pool == PoolKind::Small,
                expandable: s.is_expandable,
            };
            let n = self.ids.len() as u32;
            let id = *self.ids.entry(key).or_insert_with(|| {
                self.history.segments.push(key);
                n
            });
            for b in &s.blocks {
                now.insert((id, b.address - s.address), (b.size, b.state));
            }
        }
        match self.prev.take() {
            Some((last, prev)) if last + 1 == ops => {
                let mut changes: Vec<BlockChange> = now
                    .iter()
                    .filter(|(k, v)| prev.get(k) != Some(v))
                    .map(|(&(segment, offset), &b)| BlockChange { segment, offset, now: Some(b) })
                    .chain(prev.keys().filter(|k| !now.contains_key(k)).map(|&(segment, offset)| BlockChange {
                        segment,
                        offset,
                        now: None,
                    }))
                    .collect();
                changes.sort_by_key(|c| (c.segment, c.offset));
                self.history.windows.last_mut().expect("a window began").changes.push(changes);
            }
            _ => {
                let mut keyframe: Vec<StateBlock> = now
                    .iter()
                    .map(|(&(segment, offset), &(size, state))| StateBlock { segment, offset, size, state })
                    .collect();
                keyframe.sort_by_key(|b| (b.segment, b.offset));
                self.history.windows.push(StateWindow { start: ops, keyframe, changes: Vec::new() });
            }
        }
        self.prev = Some((ops, now));
    }
}
