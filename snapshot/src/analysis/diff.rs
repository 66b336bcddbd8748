//! Two snapshots compared (`vramlab diff A B`): each replayed under its own
//! settings (the snapshot's `allocator_settings`, else PyTorch's defaults), then
//! their peaks, who holds the allocated peak by call path
//! ([`crate::analysis::attribution`]'s grouping at each replay's own allocated peak, rows
//! matched by call path), the segments at each reserved peak (count and sizes)
//! and the fragmentation then (reserved − allocated, the largest free block),
//! before and after. [`SnapshotDiff`] is plain data: xtask prints it and wraps it
//! in its versioned JSON document, the reports crate draws its page.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::attribution::{Attribution, Category, Point, PointKind, attribute};
use crate::format::model::Snapshot;
use crate::replay::report::{SnapshotReplayError, SnapshotReplayOptions};
use crate::replay::run::replay_snapshot_timeline;

/// One snapshot's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffSide {
    /// The file, as named on the command line.
    pub source: String,
    pub device: usize,
    /// The settings replayed, in `PYTORCH_CUDA_ALLOC_CONF` syntax ("" = defaults).
    pub alloc_conf: String,
    /// Whether they came from the snapshot (else PyTorch's defaults).
    pub settings_from_snapshot: bool,
    pub entries: u64,
    pub peak_allocated_bytes: u64,
    /// The entry after which allocated memory peaked (`None`: before the first).
    pub peak_allocated_index: Option<u64>,
    pub peak_reserved_bytes: u64,
    /// Requested bytes of the blocks live at the allocated peak (what the call
    /// paths share), and how many blocks.
    pub live_requested_bytes: u64,
    pub live_blocks: u64,
    /// Segments at the reserved peak, and their total size.
    pub segments_at_peak: u64,
    pub segment_bytes_at_peak: u64,
    /// The largest segment then.
    pub largest_segment_bytes: u64,
    /// Segment allocations over the replay (`cudaMalloc` calls or mappings).
    pub segment_allocs: u64,
    /// Reserved − allocated at the reserved peak.
    pub fragmentation_at_peak_bytes: u64,
    /// The largest free block at the reserved peak.
    pub largest_free_block_at_peak_bytes: u64,
    /// Out-of-memory errors of the replay.
    pub ooms: u64,
    /// Whether the replay agrees with the recording (`None`: not checked,
    /// the snapshot has no settings or no final segments to check against).
    pub fidelity_agrees: Option<bool>,
    /// The snapshot is an estimate (captured with no GPU): what it assumed
    /// ([`crate::Estimate::headline`]); `None` for a recording.
    pub estimate: Option<String>,
}

/// One call path's bytes at each side's allocated peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathChange {
    /// The row's name (its innermost frame of the user's code, or the stand-in).
    pub label: String,
    /// The user's frames, innermost first.
    pub user_frames: Vec<String>,
    /// The folded frame the user's code called into, from the side holding more.
    pub via: Option<String>,
    /// The category of the side holding more.
    pub category: Category,
    pub before_bytes: u64,
    pub after_bytes: u64,
    /// `after_bytes − before_bytes`.
    pub change_bytes: i64,
    pub before_blocks: u64,
    pub after_blocks: u64,
}

/// How many segments of one size each side had at its reserved peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentSizeCount {
    pub size_bytes: u64,
    pub before: u64,
    pub after: u64,
}

/// Two snapshots compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotDiff {
    pub before: DiffSide,
    pub after: DiffSide,
    pub peak_allocated_change_bytes: i64,
    pub peak_reserved_change_bytes: i64,
    pub fragmentation_change_bytes: i64,
    /// Call paths whose bytes at the allocated peak changed, largest change
    /// (gain or loss) first.
    pub paths: Vec<PathChange>,
    /// Call paths present at both peaks with the same bytes, and their bytes.
    pub paths_unchanged: u64,
    pub bytes_unchanged: u64,
    /// Segment sizes at each reserved peak, largest size first.
    pub segment_sizes: Vec<SegmentSizeCount>,
}

fn signed(after: u64, before: u64) -> i64 {
    (after as i128 - before as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// One snapshot replayed for the diff: its side and its peak's attribution.
fn side(
    source: &str,
    snapshot: &Snapshot,
    opts: &SnapshotReplayOptions,
) -> Result<(DiffSide, Attribution, BTreeMap<u64, u64>), SnapshotReplayError> {
    let (r, timeline) = replay_snapshot_timeline(snapshot, opts, true)?;
    let point = Point { kind: PointKind::AllocatedPeak, trace_index: r.peak_allocated_index };
    let attribution = attribute(snapshot, r.device, &[point]).pop().unwrap_or(Attribution {
        kind: PointKind::AllocatedPeak,
        trace_index: r.peak_allocated_index,
        time_us: None,
        total_bytes: 0,
        blocks: 0,
        groups: Vec::new(),
        categories: Vec::new(),
        request: None,
        groups_not_listed: 0,
        bytes_not_listed: 0,
    });
    let segments = timeline.peak.as_ref().map(|p| p.segments.as_slice()).unwrap_or_default();
    let mut sizes = BTreeMap::new();
    for s in segments {
        *sizes.entry(s.total_size).or_insert(0) += 1;
    }
    let side = DiffSide {
        source: source.to_owned(),
        device: r.device,
        alloc_conf: r.alloc_conf.clone(),
        settings_from_snapshot: r.settings_from_snapshot,
        entries: r.entries_in_window,
        peak_allocated_bytes: r.peak_allocated_bytes,
        peak_allocated_index: r.peak_allocated_index,
        peak_reserved_bytes: r.peak_reserved_bytes,
        live_requested_bytes: attribution.total_bytes,
        live_blocks: attribution.blocks,
        segments_at_peak: segments.len() as u64,
        segment_bytes_at_peak: segments.iter().map(|s| s.total_size).sum(),
        largest_segment_bytes: segments.iter().map(|s| s.total_size).max().unwrap_or(0),
        segment_allocs: r.segment_allocs,
        fragmentation_at_peak_bytes: r.fragmentation_at_peak_bytes,
        largest_free_block_at_peak_bytes: r.largest_free_block_at_peak_bytes,
        ooms: r.ooms.len() as u64,
        fidelity_agrees: r.fidelity.as_ref().map(|f| f.agrees()),
        estimate: snapshot.estimate.as_ref().map(|e| e.headline()),
    };
    Ok((side, attribution, sizes))
}

/// Replays `before` and `after` (each with its name for the result), in
/// parallel, each under its own settings and with `opts` otherwise (device,
/// window, capacity), and compares them. The error says which failed: 0 for
/// `before`, 1 for `after`.
pub fn diff_snapshots(
    before: (&str, &Snapshot),
    after: (&str, &Snapshot),
    opts: &SnapshotReplayOptions,
) -> Result<SnapshotDiff, (usize, SnapshotReplayError)> {
    let opts = SnapshotReplayOptions { config: None, record: false, ..opts.clone() };
    // The two replays are independent: side by side.
    let (b, a) = std::thread::scope(|scope| {
        let a = scope.spawn(|| side(after.0, after.1, &opts));
        let b = side(before.0, before.1, &opts);
        (b, a.join().expect("the replay of B does not panic"))
    });
    let (b, b_attr, b_sizes) = b.map_err(|e| (0, e))?;
    let (a, a_attr, a_sizes) = a.map_err(|e| (1, e))?;
    Ok(compare(b, &b_attr, &b_sizes, a, &a_attr, &a_sizes))
}

fn compare(
    before: DiffSide,
    b_attr: &Attribution,
    b_sizes: &BTreeMap<u64, u64>,
    after: DiffSide,
    a_attr: &Attribution,
    a_sizes: &BTreeMap<u64, u64>,
) -> SnapshotDiff {
    let mut index: HashMap<(&str, &[String]), usize> = HashMap::new();
    let mut paths: Vec<PathChange> = Vec::new();
    for (is_after, attr) in [(false, b_attr), (true, a_attr)] {
        for g in &attr.groups {
            let k = *index.entry((g.label.as_str(), g.user_frames.as_slice())).or_insert_with(|| {
                paths.push(PathChange {
                    label: g.label.clone(),
                    user_frames: g.user_frames.clone(),
                    via: g.via.clone(),
                    category: g.category,
                    before_bytes: 0,
                    after_bytes: 0,
                    change_bytes: 0,
                    before_blocks: 0,
                    after_blocks: 0,
                });
                paths.len() - 1
            });
            let p = &mut paths[k];
            if is_after {
                if g.bytes > p.before_bytes {
                    p.via = g.via.clone();
                    p.category = g.category;
                }
                p.after_bytes += g.bytes;
                p.after_blocks += g.blocks;
            } else {
                p.before_bytes += g.bytes;
                p.before_blocks += g.blocks;
            }
        }
    }
    for p in &mut paths {
        p.change_bytes = signed(p.after_bytes, p.before_bytes);
    }
    let (unchanged, mut changed): (Vec<PathChange>, Vec<PathChange>) =
        paths.into_iter().partition(|p| p.change_bytes == 0);
    changed.sort_by(|x, y| {
        y.change_bytes.unsigned_abs().cmp(&x.change_bytes.unsigned_abs()).then_with(|| x.label.cmp(&y.label))
    });
    let mut sizes: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (&s, &n) in b_sizes {
        sizes.entry(s).or_default().0 = n;
    }
    for (&s, &n) in a_sizes {
        sizes.entry(s).or_default().1 = n;
    }
    SnapshotDiff {
        peak_allocated_change_bytes: signed(after.peak_allocated_bytes, before.peak_allocated_bytes),
        peak_reserved_change_bytes: signed(after.peak_reserved_bytes, before.peak_reserved_bytes),
        fragmentation_change_bytes: signed(after.fragmentation_at_peak_bytes, before.fragmentation_at_peak_bytes),
        paths: changed,
        paths_unchanged: unchanged.len() as u64,
        bytes_unchanged: unchanged.iter().map(|p| p.before_bytes).sum(),
        segment_sizes: sizes
            .into_iter()
            .rev()
            .map(|(size_bytes, (before, after))| SegmentSizeCount { size_bytes, before, after })
            .collect(),
        before,
        after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &[u8] = include_bytes!("../../../tests/data/snapshots/small_p5.pickle");

    #[test]
    fn a_snapshot_against_itself_changes_nothing() {
        let snap = crate::read_snapshot(SMALL).unwrap();
        let d = diff_snapshots(("a", &snap), ("b", &snap), &SnapshotReplayOptions::default()).unwrap();
        assert_eq!(d.peak_allocated_change_bytes, 0);
        assert_eq!(d.peak_reserved_change_bytes, 0);
        assert_eq!(d.fragmentation_change_bytes, 0);
        assert!(d.paths.is_empty(), "{:?}", d.paths);
        assert!(d.paths_unchanged > 0);
        assert_eq!(d.bytes_unchanged, d.before.live_requested_bytes);
        assert!(d.segment_sizes.iter().all(|s| s.before == s.after));
        assert_eq!(d.before.segments_at_peak, d.segment_sizes.iter().map(|s| s.before).sum::<u64>());
    }

    #[test]
    fn changes_are_signed_and_largest_first() {
        let snap = crate::read_snapshot(SMALL).unwrap();
        let opts = SnapshotReplayOptions::default();
        let (b, b_attr, b_sizes) = side("b", &snap, &opts).unwrap();
        let mut a_attr = b_attr.clone();
        assert!(a_attr.groups.len() >= 2, "the fixture has several call paths");
        a_attr.groups[0].bytes += 1 << 30;
        a_attr.groups[1].bytes -= 10;
        let gone = a_attr.groups.pop().unwrap();
        let d = compare(b.clone(), &b_attr, &b_sizes, b, &a_attr, &b_sizes);
        assert_eq!(d.paths[0].change_bytes, 1 << 30);
        assert_eq!(d.paths[0].label, b_attr.groups[0].label);
        let lost = d.paths.iter().find(|p| p.label == gone.label).unwrap();
        assert_eq!(lost.after_bytes, 0);
        assert_eq!(lost.change_bytes, -(gone.bytes as i64));
        assert!(d.paths.windows(2).all(|w| w[0].change_bytes.abs() >= w[1].change_bytes.abs()));
    }
}
