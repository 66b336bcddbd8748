//! A band of the stacked timeline split by its next frames (the page's
//! drill-down): the frames inward of the band's call path (toward the
//! allocation, as memory_viz's per-block stacks show them) that all its
//! blocks share are its common path; the first frame where they part names
//! each part (Python frames first; where those never part, every frame). The
//! "other" band splits by the call paths it sums. The [`SPLIT_PARTS`] parts
//! reaching the most bytes are kept, the rest summed as one; each part's live
//! bytes at every column of the timeline, written as changes (column, bytes),
//! at most [`MAX_SPLIT_CHANGES`] over all bands.

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::attribution::{FrameKind, GroupKey, Live, frame_kind, frame_text};
use crate::format::model::{Action, Snapshot, StackId, TraceEntry};

/// Parts kept per band; the rest are one part.
pub const SPLIT_PARTS: usize = 6;
/// Levels of splits: a band's parts, their parts, and theirs.
pub const SPLIT_DEPTH: usize = 3;
/// Changes (column, bytes) kept over all bands' parts.
pub const MAX_SPLIT_CHANGES: usize = 150_000;

/// One part of a split band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SplitPart {
    /// The frame where its blocks part from the others', or what stands for it.
    pub label: String,
    pub peak_bytes: u64,
    /// (column, live bytes from that column on), where they change; 0 before the first.
    pub changes: Vec<(u32, u64)>,
    /// The part split further by its own next frames (up to [`SPLIT_DEPTH`] levels).
    pub split: Option<Box<BandSplit>>,
}

/// A band split by its next frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BandSplit {
    /// The frames inward of the call path that every block of the band goes through, outermost first.
    pub common: Vec<String>,
    /// Largest first; "other frames" (the rest) last where there is more.
    pub parts: Vec<SplitPart>,
}

/// A block over the trace: its key, stack, size, and the states it is live in.
struct Span {
    key: usize,
    frames: StackId,
    size: u64,
    /// Live from this state (entries applied) on …
    from: u64,
    /// … through this one (`u64::MAX`: to the end).
    to: u64,
}

/// What the split needs of the timeline: the keys of the blocks and of the bands.
pub(crate) struct SplitInput<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) trace: &'a [TraceEntry],
    pub(crate) free: Action,
    pub(crate) start_blocks: &'a [(u64, Live)],
    pub(crate) start_keys: &'a [usize],
    /// The key of each `alloc` entry.
    pub(crate) keys: &'a [u32],
    pub(crate) band_of: &'a [usize],
    /// The keys themselves (user frames, or what stands for them).
    pub(crate) key_of: &'a [GroupKey],
    pub(crate) bands: usize,
    /// Whether the last band is "other".
    pub(crate) other: bool,
    pub(crate) applied: &'a [u64],
}

/// Every block's span, in the order the trace makes them.
fn spans(inp: &SplitInput<'_>) -> Vec<Span> {
    let mut out = Vec::new();
    let mut live: HashMap<u64, usize> = HashMap::default();
    for ((addr, b), &k) in inp.start_blocks.iter().zip(inp.start_keys) {
        live.insert(*addr, out.len());
        out.push(Span { key: k, frames: b.frames, size: b.size, from: 0, to: u64::MAX });
    }
    for (i, e) in inp.trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                if let Some(old) = live.insert(e.addr, out.len()) {
                    out[old].to = i as u64;
                }
                let key = inp.keys[i] as usize;
                out.push(Span { key, frames: e.frames, size: e.size, from: i as u64 + 1, to: u64::MAX });
            }
            a if a == inp.free => {
                if let Some(old) = live.remove(&e.addr) {
                    out[old].to = i as u64;
                }
            }
            _ => {}
        }
    }
    out
}

/// The frames inward of the innermost user frame, outermost first (Python ones
/// only, unless `all`), without `nn.Module`'s call wrappers (`_call_impl`),
/// which every module call goes through.
fn inward(snapshot: &Snapshot, frames: StackId, all: bool) -> Vec<String> {
    let stack: Vec<_> = snapshot.frames.stack(frames).collect();
    let user = stack.iter().position(|f| frame_kind(f) == FrameKind::User).unwrap_or(stack.len());
    stack[..user]
        .iter()
        .rev()
        .filter(|f| all || frame_kind(f) != FrameKind::Native)
        .filter(|f| !(f.filename.ends_with("torch/nn/modules/module.py") && f.name.contains("call_impl")))
        .map(|f| frame_text(f))
        .collect()
}

/// The common path of `chains` and each chain's part label; `None` where they never part.
fn parting(chains: &HashMap<StackId, Vec<String>>) -> Option<(Vec<String>, HashMap<StackId, String>)> {
    let first = chains.values().next()?;
    let mut d = 0;
    while d < first.len() && chains.values().all(|c| c.get(d) == Some(&first[d])) {
        d += 1;
    }
    let label = |c: &Vec<String>| c.get(d).cloned().unwrap_or_else(|| "(no frame further in)".to_owned());
    let labels: HashMap<StackId, String> = chains.iter().map(|(&s, c)| (s, label(c))).collect();
    let mut distinct: Vec<&String> = labels.values().collect();
    distinct.sort();
    distinct.dedup();
    (distinct.len() > 1).then(|| (first[..d].to_vec(), labels))
}

/// Each block's part label and the common path (`by_key`: the call paths of the "other" band); `None` where it does not split.
fn labels(inp: &SplitInput<'_>, spans: &[&Span], by_key: bool) -> Option<(Vec<String>, Vec<String>)> {
    if by_key {
        let label = |s: &&Span| match &inp.key_of[s.key] {
            GroupKey::User(frames) => frames[0].clone(),
            GroupKey::Other(l) => l.clone(),
            GroupKey::NoFrames(why) => why.describe().to_owned(),
        };
        return Some((Vec::new(), spans.iter().map(label).collect()));
    }
    if !matches!(inp.key_of[spans.first()?.key], GroupKey::User(_)) {
        return None;
    }
    for all in [false, true] {
        let mut chains: HashMap<StackId, Vec<String>> = HashMap::default();
        for s in spans {
            chains.entry(s.frames).or_insert_with(|| inward(inp.snapshot, s.frames, all));
        }
        if let Some((common, by_stack)) = parting(&chains) {
            return Some((common, spans.iter().map(|s| by_stack[&s.frames].clone()).collect()));
        }
    }
    None
}

/// Live bytes per column of blocks `spans` (sizes, spans) by part `part_of`, for `parts` parts.
fn columns(applied: &[u64], spans: &[&Span], part_of: &[usize], parts: usize) -> Vec<Vec<u64>> {
    let n = applied.len();
    let mut diff = vec![vec![0i64; n + 1]; parts];
    for (s, &p) in spans.iter().zip(part_of) {
        let a = applied.partition_point(|&x| x < s.from);
        let b = applied.partition_point(|&x| x <= s.to);
        if a < b {
            diff[p][a] += s.size as i64;
            diff[p][b] -= s.size as i64;
        }
    }
    diff.into_iter()
        .map(|d| {
            let mut v = 0i64;
            d[..n]
                .iter()
                .map(|x| {
                    v += x;
                    v as u64
                })
                .collect()
        })
        .collect()
}

/// The split of blocks `spans` at `level` (1: a band's), within `budget` changes.
fn split(inp: &SplitInput<'_>, spans: &[&Span], level: usize, by_key: bool, budget: &mut usize) -> Option<BandSplit> {
    let (common, labels) = labels(inp, spans, by_key)?;
    let mut index: HashMap<&str, usize> = HashMap::default();
    let ids: Vec<usize> = labels
        .iter()
        .map(|l| {
            let n = index.len();
            *index.entry(l.as_str()).or_insert(n)
        })
        .collect();
    // Each distinct label's live bytes per column; the largest parts kept, the rest one part.
    let all = columns(inp.applied, spans, &ids, index.len());
    let peak: Vec<u64> = all.iter().map(|v| v.iter().copied().max().unwrap_or(0)).collect();
    let mut order: Vec<usize> = (0..index.len()).collect();
    order.sort_by(|&a, &b| peak[b].cmp(&peak[a]).then(a.cmp(&b)));
    let kept = order.len().min(SPLIT_PARTS);
    let mut part_of = vec![kept; index.len()];
    for (p, &i) in order[..kept].iter().enumerate() {
        part_of[i] = p;
    }
    let mut names: Vec<String> = vec![String::new(); index.len()];
    for (l, &i) in &index {
        names[i] = (*l).to_owned();
    }
    let mut parts: Vec<(String, Vec<u64>)> =
        order[..kept].iter().map(|&i| (names[i].clone(), all[i].clone())).collect();
    if order.len() > kept {
        let mut rest = vec![0u64; inp.applied.len()];
        for &i in &order[kept..] {
            rest.iter_mut().zip(&all[i]).for_each(|(r, v)| *r += v);
        }
        parts.push((format!("other frames ({} more)", order.len() - kept), rest));
    }
    let mut out = Vec::with_capacity(parts.len());
    for (label, v) in parts {
        let mut changes = Vec::new();
        let mut last = 0;
        for (c, &b) in v.iter().enumerate() {
            if b != last {
                changes.push((c as u32, b));
                last = b;
            }
        }
        *budget = budget.checked_sub(changes.len())?;
        out.push(SplitPart { label, peak_bytes: v.iter().copied().max().unwrap_or(0), changes, split: None });
    }
    // Each named part split further, as long as the budget lasts.
    for (p, part) in out.iter_mut().enumerate().take(kept) {
        if level < SPLIT_DEPTH {
            let mine: Vec<&Span> = spans.iter().zip(&ids).filter(|(_, i)| part_of[**i] == p).map(|(s, _)| *s).collect();
            let mut left = *budget;
            if let Some(sub) = split(inp, &mine, level + 1, false, &mut left) {
                part.split = Some(Box::new(sub));
                *budget = left;
            }
        }
    }
    Some(BandSplit { common, parts: out })
}

/// Each band's split (`None` where it does not split or the page's budget is spent).
pub(crate) fn split_bands(inp: &SplitInput<'_>) -> Vec<Option<BandSplit>> {
    let spans = spans(inp);
    let mut by_band: Vec<Vec<&Span>> = vec![Vec::new(); inp.bands];
    for s in &spans {
        by_band[inp.band_of[s.key]].push(s);
    }
    let mut budget = MAX_SPLIT_CHANGES;
    by_band
        .iter()
        .enumerate()
        .map(|(band, spans)| {
            let mut left = budget;
            let s = split(inp, spans, 1, inp.other && band == inp.bands - 1, &mut left)?;
            budget = left;
            Some(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::path_timeline;

    /// A part's live bytes at each of `columns` columns, from its changes.
    fn expand(changes: &[(u32, u64)], columns: usize) -> Vec<u64> {
        let mut v = vec![0; columns];
        let mut at = 0;
        let mut now = 0;
        for (c, slot) in v.iter_mut().enumerate() {
            while at < changes.len() && changes[at].0 as usize == c {
                now = changes[at].1;
                at += 1;
            }
            *slot = now;
        }
        v
    }

    #[test]
    fn a_bands_parts_sum_to_it_at_every_column_and_part_where_its_stacks_do() {
        for name in ["transformer-default", "cnn-default", "../torch-2.11-h200/resnet50-amp"] {
            let path = format!("{}/../tests/data/torch-snapshots/{name}.pickle", env!("CARGO_MANIFEST_DIR"));
            let snap = crate::read_snapshot_file(std::path::Path::new(&path)).unwrap();
            let device = snap.busiest_device().unwrap();
            let t = path_timeline(&snap, device, &[]).unwrap();
            let mut split = 0;
            for s in &t.series {
                let Some(sp) = &s.split else { continue };
                split += 1;
                check(name, &s.label, sp, &s.bytes, t.applied.len());
                if name == "transformer-default" && split == 1 {
                    let mut sp = sp;
                    let mut level = 1;
                    loop {
                        let labels: Vec<&str> = sp.parts.iter().map(|p| p.label.as_str()).collect();
                        println!("level {level}: via {:?}: {labels:?}", sp.common);
                        let Some(next) = sp.parts[0].split.as_deref() else { break };
                        sp = next;
                        level += 1;
                    }
                }
            }
            assert!(split > 0, "{name}: some band splits");
        }
    }

    /// The parts of `sp` sum to `bytes` at every column, and so do their own parts.
    fn check(name: &str, label: &str, sp: &super::BandSplit, bytes: &[u64], columns: usize) {
        assert!(sp.parts.len() >= 2 && sp.parts.len() <= super::SPLIT_PARTS + 1, "{name}: {label}");
        let parts: Vec<Vec<u64>> = sp.parts.iter().map(|p| expand(&p.changes, columns)).collect();
        for c in 0..columns {
            let sum: u64 = parts.iter().map(|p| p[c]).sum();
            assert_eq!(sum, bytes[c], "{name}: {label} at column {c}");
        }
        for (p, v) in sp.parts.iter().zip(&parts) {
            assert_eq!(p.peak_bytes, v.iter().copied().max().unwrap(), "{name}: {}", p.label);
            assert!(!p.label.is_empty());
            if let Some(sub) = &p.split {
                check(name, &p.label, sub, v, columns);
            }
        }
        // Named parts are the frames where the stacks part, largest first.
        let named: Vec<u64> =
            sp.parts.iter().filter(|p| !p.label.starts_with("other frames")).map(|p| p.peak_bytes).collect();
        assert!(named.windows(2).all(|w| w[0] >= w[1]), "{name}: {named:?}");
    }
}
