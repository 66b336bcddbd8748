//! Live memory over a device's trace, stacked by call path, for the replay
//! page's interactive timeline (like memory_viz's Active Memory Timeline, but
//! one band per call path of the user's code rather than one per block): the
//! live blocks' requested bytes grouped as the peak table groups them
//! ([`crate::attribute`]: the user's frames, library frames folded), the
//! [`PathTimeline::series`] largest call paths (by their own highest live
//! bytes) kept and the rest summed as "other".
//!
//! Downsampled to at most [`MAX_COLUMNS`] columns of consecutive entries;
//! each column is the state after the entry where the total live bytes are
//! highest within it, so the stack's top keeps every peak (and every column
//! still sums). States the caller pins (the page's marks: the replay's peaks
//! and out-of-memory errors) are columns of their own, so the hover at a mark
//! shows the state at that very entry. Each band keeps its largest blocks'
//! stacks for the hover, and, per column, its largest block live there (the
//! block under the cursor: its size, its `alloc` and free entries, its stack).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::attribution::{
    Classifier, GroupKey, Live, NoFrames, StackFrame, describe_key, frame_kind, frame_text, free_action, live_at_start,
};
use super::band_split::{BandSplit, SplitInput, split_bands};
use crate::format::model::{Action, Snapshot, StackId, TraceEntry};

/// Columns kept at most (the page draws one or more per pixel at full width
/// and still has detail when zoomed in 8×).
pub const MAX_COLUMNS: usize = 8192;
/// Call paths with a band of their own; the rest are one "other" band.
pub const TOP_PATHS: usize = 12;
/// Largest blocks (with their stacks) kept per band.
pub const BLOCKS_PER_PATH: usize = 3;
/// Distinct blocks the columns' live blocks name at most (the block under the
/// cursor): past that, a column's band names none (−2), so a page stays small.
pub const MAX_LIVE_BLOCKS: usize = 32_768;
/// Folded frames (torch, packages, the standard library, C++) kept per
/// stack, innermost first; the rest are counted. The user's are all kept.
pub const FRAMES_PER_STACK: usize = 40;

/// One block of a band, for the hover: its size, when it was made, its stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathBlock {
    /// Requested bytes.
    pub bytes: u64,
    /// The `alloc` entry; `None` when live before the recording began.
    pub entry: Option<u64>,
    /// Innermost first: the user's, and the first [`FRAMES_PER_STACK`] folded ones.
    pub frames: Vec<StackFrame>,
    /// Folded frames beyond those kept.
    pub frames_left_out: u64,
}

/// One band of the stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathSeries {
    /// The innermost frame of the user's code, or what stands in for it
    /// (as the peak table's row label); "other" for the rest.
    pub label: String,
    /// The user's frames, innermost first.
    pub user_frames: Vec<String>,
    /// The band's highest live bytes over the trace.
    pub peak_bytes: u64,
    /// The largest blocks ever made on this call path ([`BLOCKS_PER_PATH`]).
    pub largest_blocks: Vec<PathBlock>,
    /// Live bytes at each column.
    pub bytes: Vec<u64>,
    /// Per column: the band's largest block live at the column's state, an
    /// index into [`PathTimeline::blocks`]; −1 where none is live, −2 where
    /// [`MAX_LIVE_BLOCKS`] others were kept first.
    pub live_block: Vec<i32>,
    /// The band split by its next frames (the page's drill-down); `None`
    /// where its blocks never part, or the page's budget of changes is spent.
    pub split: Option<BandSplit>,
}

/// A block live at some column, for the hover: the block under the cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveBlock {
    /// Requested bytes.
    pub bytes: u64,
    /// The `alloc` entry; `None` when live before the recording began.
    pub entry: Option<u64>,
    /// The entry that freed it; `None` when still live at the end.
    pub freed: Option<u64>,
    /// Its stack: an index into [`PathTimeline::stacks`].
    pub stack: u32,
}

/// A stack of [`PathTimeline::stacks`]: the user's frames, folded frames up
/// to [`FRAMES_PER_STACK`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockStack {
    pub frames: Vec<StackFrame>,
    pub frames_left_out: u64,
}

/// The stacked timeline of one device's trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathTimeline {
    /// Per column: entries applied at its state (0: before the first entry),
    /// in order; the state is after entry `applied − 1`.
    pub applied: Vec<u64>,
    /// Per column: the entry's `time_us` (the first entry's for column 0).
    pub time_us: Vec<i64>,
    /// Largest bands first; "other" (when there is more) last.
    pub series: Vec<PathSeries>,
    /// Entries per column (the last may hold fewer); 1 when every state is kept.
    pub entries_per_column: u64,
    /// The trace's entries.
    pub entries: u64,
    /// Call paths in all (with a band of their own or not).
    pub paths: u64,
    /// The blocks [`PathSeries::live_block`] names.
    pub blocks: Vec<LiveBlock>,
    /// Their stacks, each once.
    pub stacks: Vec<BlockStack>,
}

/// The key of a live block, as the peak table decides it.
fn block_key(c: &mut Classifier<'_>, frames: StackId, alloc: Option<usize>) -> usize {
    if frames == 0 || c.snapshot.frames.stack(frames).next().is_none() {
        let why = NoFrames::of(alloc.is_some(), c.has_stacks);
        return c.key(GroupKey::NoFrames(why));
    }
    c.info(frames).key
}

/// The stacked live memory of `device`'s trace; `None` without that device.
/// `pins`: states (entries applied, as [`PathTimeline::applied`] counts them)
/// that get a column of their own.
pub fn path_timeline(snapshot: &Snapshot, device: usize, pins: &[u64]) -> Option<PathTimeline> {
    let trace = snapshot.device_traces.get(device)?;
    let free = free_action(trace);
    let mut c = Classifier::new(snapshot);
    let mut start_blocks: Vec<(u64, Live)> = live_at_start(snapshot, device, free).into_iter().collect();
    start_blocks.sort_by_key(|(a, _)| *a);
    let paths = PathPeaks::of(&mut c, trace, free, &start_blocks);
    let bands = Bands::of(&paths.peak);
    let mut pins = pins.to_vec();
    pins.sort_unstable();
    let columns = Columns::of(trace, free, &start_blocks, &paths, &bands, &pins);
    let time_of = |applied: usize| trace.get(applied.saturating_sub(1)).map_or(0, |e| e.time_us);
    let time_us = columns.applied.iter().map(|&a| time_of(a as usize)).collect();
    let splits = split_bands(&SplitInput {
        snapshot,
        trace,
        free,
        start_blocks: &start_blocks,
        start_keys: &paths.start_keys,
        keys: &paths.keys,
        band_of: &bands.band_of,
        key_of: &c.keys,
        bands: bands.count,
        other: bands.other,
        applied: &columns.applied,
    });
    let mut series = bands.series(snapshot, &c, &paths, columns.bytes);
    for ((s, top), split) in series.iter_mut().zip(columns.tops.top).zip(splits) {
        s.live_block = top;
        s.split = split;
    }
    let mut stack_index: HashMap<StackId, u32> = HashMap::default();
    let mut stacks = Vec::new();
    let blocks = columns
        .tops
        .blocks
        .iter()
        .map(|b| {
            let stack = *stack_index.entry(b.frames).or_insert_with(|| {
                let p = path_block(snapshot, &(b.size, b.alloc, b.frames));
                stacks.push(BlockStack { frames: p.frames, frames_left_out: p.frames_left_out });
                stacks.len() as u32 - 1
            });
            LiveBlock { bytes: b.size, entry: b.alloc.map(|a| a as u64), freed: b.freed.map(|f| f as u64), stack }
        })
        .collect();
    Some(PathTimeline {
        applied: columns.applied,
        time_us,
        series,
        entries_per_column: columns.per as u64,
        entries: trace.len() as u64,
        paths: bands.order.len() as u64,
        blocks,
        stacks,
    })
}

/// A block for the hover: (requested bytes, its `alloc` entry, its stack).
type BlockNote = (u64, Option<usize>, StackId);

/// Pass 1 over the trace: each block's call path (its key), and per key the
/// live bytes as the trace goes, their highest, and the largest blocks.
#[derive(Default)]
struct PathPeaks {
    cur: Vec<u64>,
    peak: Vec<u64>,
    largest: Vec<Vec<BlockNote>>,
    /// The key of each block live at the start, in address order.
    start_keys: Vec<usize>,
    /// The key of each `alloc` entry (`u32::MAX` for the other entries).
    keys: Vec<u32>,
}

impl PathPeaks {
    fn of(c: &mut Classifier<'_>, trace: &[TraceEntry], free: Action, start_blocks: &[(u64, Live)]) -> PathPeaks {
        let mut p = PathPeaks { start_keys: Vec::with_capacity(start_blocks.len()), ..PathPeaks::default() };
        let mut live: HashMap<u64, (u64, usize)> = HashMap::default();
        for (addr, b) in start_blocks {
            let k = block_key(c, b.frames, None);
            p.note(k, *b);
            live.insert(*addr, (b.size, k));
            p.start_keys.push(k);
        }
        p.keys = vec![u32::MAX; trace.len()];
        for (i, e) in trace.iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    let k = block_key(c, e.frames, Some(i));
                    p.keys[i] = k as u32;
                    if let Some((size, old)) = live.insert(e.addr, (e.size, k)) {
                        p.cur[old] -= size;
                    }
                    p.note(k, Live { size: e.size, frames: e.frames, alloc: Some(i) });
                }
                a if a == free => {
                    if let Some((size, k)) = live.remove(&e.addr) {
                        p.cur[k] -= size;
                    }
                }
                _ => {}
            }
        }
        p
    }

    /// Block `b` made live on key `k`.
    fn note(&mut self, k: usize, b: Live) {
        if self.cur.len() <= k {
            self.cur.resize(k + 1, 0);
            self.peak.resize(k + 1, 0);
            self.largest.resize(k + 1, Vec::new());
        }
        self.cur[k] += b.size;
        self.peak[k] = self.peak[k].max(self.cur[k]);
        let l = &mut self.largest[k];
        if l.len() < BLOCKS_PER_PATH || l.last().is_some_and(|x| x.0 < b.size) {
            // Distinct stacks only: a loop's same-sized blocks are one line.
            if !l.iter().any(|x| x.2 == b.frames && x.0 >= b.size) {
                l.retain(|x| x.2 != b.frames);
                l.push((b.size, b.alloc, b.frames));
                l.sort_by_key(|x| std::cmp::Reverse(x.0));
                l.truncate(BLOCKS_PER_PATH);
            }
        }
    }
}

/// The bands: the keys with the highest peaks, one band each, and the rest
/// in one "other" band.
struct Bands {
    /// The keys that were ever live, highest peak first.
    order: Vec<usize>,
    /// The band of each key.
    band_of: Vec<usize>,
    count: usize,
    /// Whether there is an "other" band (the last).
    other: bool,
}

impl Bands {
    fn of(peak: &[u64]) -> Bands {
        let mut order: Vec<usize> = (0..peak.len()).filter(|&k| peak[k] > 0).collect();
        order.sort_by(|&a, &b| peak[b].cmp(&peak[a]).then(a.cmp(&b)));
        let other = order.len() > TOP_PATHS;
        let count = order.len().min(TOP_PATHS) + usize::from(other);
        let mut band_of = vec![count.saturating_sub(1); peak.len()];
        for (band, &k) in order.iter().take(TOP_PATHS).enumerate() {
            band_of[k] = band;
        }
        Bands { order, band_of, count, other }
    }

    /// The bands as series, their live bytes at each column given (`bytes`, by band).
    fn series(
        &self,
        snapshot: &Snapshot,
        c: &Classifier<'_>,
        paths: &PathPeaks,
        mut bytes: Vec<Vec<u64>>,
    ) -> Vec<PathSeries> {
        let block = |b: &BlockNote| path_block(snapshot, b);
        let mut series: Vec<PathSeries> = self
            .order
            .iter()
            .take(TOP_PATHS)
            .zip(bytes.iter_mut())
            .map(|(&k, b)| {
                let (label, user_frames) = describe_key(&c.keys[k]);
                PathSeries {
                    label,
                    user_frames,
                    peak_bytes: paths.peak[k],
                    largest_blocks: paths.largest[k].iter().map(block).collect(),
                    bytes: std::mem::take(b),
                    live_block: Vec::new(),
                    split: None,
                }
            })
            .collect();
        if self.other {
            let rest = &self.order[TOP_PATHS..];
            let mut blocks: Vec<_> = rest.iter().flat_map(|&k| paths.largest[k].iter().copied()).collect();
            blocks.sort_by_key(|x| std::cmp::Reverse(x.0));
            blocks.truncate(BLOCKS_PER_PATH);
            let b = std::mem::take(&mut bytes[self.count - 1]);
            series.push(PathSeries {
                label: format!("other ({} call paths)", rest.len()),
                user_frames: Vec::new(),
                peak_bytes: b.iter().copied().max().unwrap_or(0),
                largest_blocks: blocks.iter().map(block).collect(),
                bytes: b,
                live_block: Vec::new(),
                split: None,
            });
        }
        series
    }
}

/// A band's block for the hover: every frame of the user's, folded frames up
/// to [`FRAMES_PER_STACK`].
fn path_block(snapshot: &Snapshot, &(size, alloc, frames): &BlockNote) -> PathBlock {
    let (mut kept, mut folded, mut left) = (Vec::new(), 0usize, 0u64);
    for f in snapshot.frames.stack(frames) {
        let kind = frame_kind(f);
        if kind.folded() {
            if folded == FRAMES_PER_STACK {
                left += 1;
                continue;
            }
            folded += 1;
        }
        kept.push(StackFrame { text: frame_text(f), kind });
    }
    PathBlock { bytes: size, entry: alloc.map(|a| a as u64), frames: kept, frames_left_out: left }
}

/// Pass 2 over the trace: the columns, each the state where the live total
/// is highest among its entries.
struct Columns {
    /// Per column, the entries applied at its state.
    applied: Vec<u64>,
    /// Per band, its live bytes at each column.
    bytes: Vec<Vec<u64>>,
    /// Entries per column.
    per: usize,
    /// Per band and column, its largest live block.
    tops: Tops,
}

/// A live block as [`Tops`] tracks it.
#[derive(Clone, Copy)]
struct Tracked {
    size: u64,
    addr: u64,
    alloc: Option<usize>,
    frames: StackId,
    freed: Option<usize>,
}

/// Each band's largest live block as the trace goes, and per column the one
/// live at the column's state.
struct Tops {
    /// Per band, its live blocks by (size, address).
    live: Vec<BTreeSet<(u64, u64)>>,
    /// Per band, per column: an index into `blocks`, −1 for none.
    top: Vec<Vec<i32>>,
    blocks: Vec<Tracked>,
    /// Blocks in `blocks` by (address, `alloc` entry or `usize::MAX`).
    index: HashMap<(u64, usize), u32>,
    /// Blocks freed during the open column before any column named them.
    freed_here: HashMap<(u64, usize), usize>,
}

impl Tops {
    fn new(bands: usize) -> Tops {
        Tops {
            live: vec![BTreeSet::new(); bands],
            top: vec![Vec::new(); bands],
            blocks: Vec::new(),
            index: HashMap::default(),
            freed_here: HashMap::default(),
        }
    }

    /// The largest live block per band now, with its details from `live`.
    fn now(&self, live: &HashMap<u64, (u64, usize, Option<usize>, StackId)>) -> Vec<Option<Tracked>> {
        self.live
            .iter()
            .map(|set| {
                let &(size, addr) = set.last()?;
                let &(_, _, alloc, frames) = live.get(&addr)?;
                Some(Tracked { size, addr, alloc, frames, freed: None })
            })
            .collect()
    }

    /// Block (`size`, `addr`, `alloc`) of `band` freed (or replaced) at entry `i`.
    fn free(&mut self, band: usize, size: u64, addr: u64, alloc: Option<usize>, i: usize) {
        self.live[band].remove(&(size, addr));
        let key = (addr, alloc.unwrap_or(usize::MAX));
        match self.index.get(&key) {
            Some(&t) => self.blocks[t as usize].freed = Some(i),
            None => {
                self.freed_here.insert(key, i);
            }
        }
    }

    /// A column whose state's largest blocks are `tops`.
    fn push(&mut self, tops: &[Option<Tracked>]) {
        for (band, t) in tops.iter().enumerate() {
            let at = match t {
                None => -1,
                Some(t) => {
                    let key = (t.addr, t.alloc.unwrap_or(usize::MAX));
                    match self.index.get(&key) {
                        Some(&i) => i as i32,
                        None if self.blocks.len() >= MAX_LIVE_BLOCKS => -2,
                        None => {
                            self.index.insert(key, self.blocks.len() as u32);
                            self.blocks.push(Tracked { freed: self.freed_here.get(&key).copied(), ..*t });
                            self.blocks.len() as i32 - 1
                        }
                    }
                }
            };
            self.top[band].push(at);
        }
    }
}

impl Columns {
    fn of(
        trace: &[TraceEntry],
        free: Action,
        start_blocks: &[(u64, Live)],
        paths: &PathPeaks,
        bands: &Bands,
        pins: &[u64],
    ) -> Columns {
        let band_of = &bands.band_of;
        let states = trace.len() + 1;
        let per = states.div_ceil(MAX_COLUMNS).max(1);
        let columns = states.div_ceil(per);
        let mut applied = Vec::with_capacity(columns);
        let mut bytes: Vec<Vec<u64>> = vec![Vec::with_capacity(columns); bands.count];
        let mut now = vec![0u64; bands.count];
        let mut total = 0u64;
        let mut tops = Tops::new(bands.count);
        let mut live: HashMap<u64, (u64, usize, Option<usize>, StackId)> = HashMap::default();
        for ((addr, b), k) in start_blocks.iter().zip(&paths.start_keys) {
            live.insert(*addr, (b.size, band_of[*k], b.alloc, b.frames));
            tops.live[band_of[*k]].insert((b.size, *addr));
            now[band_of[*k]] += b.size;
            total += b.size;
        }
        let mut best: Option<(u64, usize)> = None;
        let mut best_bytes = now.clone();
        let mut best_tops = Vec::new();
        for state in 0..states {
            if state > 0 {
                let i = state - 1;
                let e = &trace[i];
                match e.action {
                    Action::Alloc => {
                        let band = band_of[paths.keys[i] as usize];
                        if let Some((size, old, alloc, _)) = live.insert(e.addr, (e.size, band, Some(i), e.frames)) {
                            now[old] -= size;
                            total -= size;
                            tops.free(old, size, e.addr, alloc, i);
                        }
                        tops.live[band].insert((e.size, e.addr));
                        now[band] += e.size;
                        total += e.size;
                    }
                    a if a == free => {
                        if let Some((size, band, alloc, _)) = live.remove(&e.addr) {
                            now[band] -= size;
                            total -= size;
                            tops.free(band, size, e.addr, alloc, i);
                        }
                    }
                    _ => {}
                }
            }
            let mut push = |at: usize, values: &[u64], top: &[Option<Tracked>], tops: &mut Tops| {
                applied.push(at as u64);
                for (band, v) in bytes.iter_mut().zip(values) {
                    band.push(*v);
                }
                tops.push(top);
            };
            if pins.binary_search(&(state as u64)).is_ok() {
                // A pinned state: the column so far, then the state itself.
                if let Some((_, at)) = best.take() {
                    push(at, &best_bytes, &best_tops, &mut tops);
                }
                push(state, &now, &tops.now(&live), &mut tops);
                tops.freed_here.clear();
            } else if best.is_none_or(|(b, _)| total > b) {
                best = Some((total, state));
                best_bytes.copy_from_slice(&now);
                best_tops = tops.now(&live);
            }
            if ((state + 1) % per == 0 || state + 1 == states)
                && let Some((_, at)) = best.take()
            {
                push(at, &best_bytes, &best_tops, &mut tops);
                tops.freed_here.clear();
            }
        }
        Columns { applied, bytes, per, tops }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Snapshot {
        let path = format!("{}/../tests/data/torch-snapshots/{name}", env!("CARGO_MANIFEST_DIR"));
        crate::read_snapshot_file(std::path::Path::new(&path)).expect("the fixture reads")
    }

    #[test]
    fn columns_sum_to_the_live_bytes_and_keep_the_peak() {
        let snap = fixture("transformer-default.pickle");
        let device = (0..snap.device_traces.len()).max_by_key(|&d| snap.device_traces[d].len()).unwrap();
        let t = path_timeline(&snap, device, &[]).unwrap();
        assert_eq!(t.entries, snap.device_traces[device].len() as u64);
        assert_eq!(t.applied.len(), t.time_us.len());
        assert!(t.series.iter().all(|s| s.bytes.len() == t.applied.len()));
        assert!(t.series.len() <= TOP_PATHS + 1 && !t.series.is_empty());
        // The stack's highest column is the recording's requested peak, at
        // the entry requested_peak_index names.
        let totals: Vec<u64> = (0..t.applied.len()).map(|c| t.series.iter().map(|s| s.bytes[c]).sum()).collect();
        let top = *totals.iter().max().unwrap();
        let at = totals.iter().position(|&v| v == top).unwrap();
        let peak_index = crate::requested_peak_index(&snap, device);
        let attributed = crate::attribute(
            &snap,
            device,
            &[crate::Point { kind: crate::PointKind::AllocatedPeak, trace_index: peak_index }],
        );
        assert_eq!(top, attributed[0].total_bytes, "the stack's top at the peak is the peak table's total");
        assert_eq!(t.applied[at], peak_index.map_or(0, |i| i + 1));
        // The largest band is the peak table's first row's call path or larger.
        assert!(t.series[0].peak_bytes >= attributed[0].groups[0].bytes);
        let first = &t.series[0];
        assert!(!first.largest_blocks.is_empty() && !first.largest_blocks[0].frames.is_empty(), "a stack to hover");
        assert!(first.largest_blocks.windows(2).all(|w| w[0].bytes >= w[1].bytes));
        // The block under the cursor: each column's is live at its state and no larger than its band there.
        let mut named = 0;
        for s in &t.series {
            assert_eq!(s.live_block.len(), t.applied.len());
            for (c, &b) in s.live_block.iter().enumerate() {
                assert!(b >= -1, "under MAX_LIVE_BLOCKS every block is kept");
                if b < 0 {
                    assert_eq!(s.bytes[c], 0, "a band with live bytes names a block");
                    continue;
                }
                named += 1;
                let block = &t.blocks[b as usize];
                let state = t.applied[c];
                assert!(block.entry.is_none_or(|e| e < state) && block.freed.is_none_or(|f| f >= state));
                assert!(block.bytes <= s.bytes[c] && (block.stack as usize) < t.stacks.len());
            }
        }
        assert!(named > 0);
    }

    #[test]
    fn a_pinned_state_is_a_column_of_its_own() {
        // 9052 entries: two to a column.
        let snap = fixture("../torch-2.11-h200/resnet50-amp.pickle");
        let device = (0..snap.device_traces.len()).max_by_key(|&d| snap.device_traces[d].len()).unwrap();
        let whole = path_timeline(&snap, device, &[]).unwrap();
        assert_eq!(whole.entries_per_column, 2);
        let n = snap.device_traces[device].len() as u64;
        // Pin states that are not columns of the whole timeline.
        let pins: Vec<u64> = (1..n).filter(|s| !whole.applied.contains(s)).step_by(97).take(5).collect();
        assert!(!pins.is_empty());
        let t = path_timeline(&snap, device, &pins).unwrap();
        assert!(t.applied.windows(2).all(|w| w[0] < w[1]), "columns in order");
        for p in &pins {
            let c = t.applied.iter().position(|a| a == p).expect("the pinned state is a column");
            // Its live bytes are the state's: the requested bytes of the blocks live after entry p − 1.
            let total: u64 = t.series.iter().map(|s| s.bytes[c]).sum();
            let at = crate::attribute(
                &snap,
                device,
                &[crate::Point { kind: crate::PointKind::AllocatedPeak, trace_index: Some(p - 1) }],
            );
            assert_eq!(total, at[0].total_bytes, "state {p}");
        }
    }

    #[test]
    fn a_missing_device_has_no_timeline() {
        let snap = fixture("mlp-default.pickle");
        assert!(path_timeline(&snap, 99, &[]).is_none());
    }
}
