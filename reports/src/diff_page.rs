//! The page of `cargo xtask diff A B --report DIR`: a self-contained offline
//! `index.html` (minijinja with auto-escaping, `templates/diff.html` through
//! [`crate::html`]'s one environment, the report's CSS inlined) from a
//! [`SnapshotDiff`]: A's and B's memory overlaid on one interactive chart
//! (`lines_view.rs`; the script only where the timelines are given), the peaks before and after with the
//! change, the call paths that gained or lost bytes at the allocated peak
//! (largest change first), and the segments and fragmentation at each reserved
//! peak. Its tables turn into labelled blocks on a narrow screen, so nothing
//! scrolls sideways at 390 px.

use std::path::{Path, PathBuf};

use serde::Serialize;
use vramlab_display::format::{fmt_bytes, fmt_change, fmt_count_change, fmt_relative};
use vramlab_snapshot::{DiffSide, SnapshotDiff};

use crate::lines_view::{Replayed, lines_json, peak_marks};
use crate::replay_page::Fact;
use crate::{ReportError, prepare_out_dir};
use vramlab_replay::timeline::ReplayTimeline;

/// Call-path rows on the page (the rest are counted; `--json` has them all).
pub const MAX_PATH_ROWS: usize = 50;

/// One figure before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FigureRow {
    pub name: String,
    pub before: String,
    pub after: String,
    pub change: String,
    /// "gain", "loss" or "" (for the page's colours).
    pub class: &'static str,
}

fn class(change: i64) -> &'static str {
    match change {
        0 => "",
        c if c > 0 => "gain",
        _ => "loss",
    }
}

fn bytes_row(name: &str, before: u64, after: u64) -> FigureRow {
    let change = after as i128 - before as i128;
    let change = change.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    FigureRow {
        name: name.to_owned(),
        before: fmt_bytes(before),
        after: fmt_bytes(after),
        change: format!("{}{}", fmt_change(change), fmt_relative(before, change)),
        class: class(change),
    }
}

fn count_row(name: &str, before: u64, after: u64) -> FigureRow {
    FigureRow {
        name: name.to_owned(),
        before: before.to_string(),
        after: after.to_string(),
        change: fmt_count_change(before, after),
        class: class((after as i64).saturating_sub(before as i64)),
    }
}

/// The figures compared, in the order the terminal and the page list them.
pub fn figure_rows(d: &SnapshotDiff) -> Vec<FigureRow> {
    let (b, a) = (&d.before, &d.after);
    vec![
        bytes_row("Peak allocated", b.peak_allocated_bytes, a.peak_allocated_bytes),
        bytes_row("Peak reserved", b.peak_reserved_bytes, a.peak_reserved_bytes),
        bytes_row("Requested bytes live at the allocated peak", b.live_requested_bytes, a.live_requested_bytes),
        count_row("Segments at the reserved peak", b.segments_at_peak, a.segments_at_peak),
        bytes_row("Largest segment then", b.largest_segment_bytes, a.largest_segment_bytes),
        bytes_row(
            "Reserved − allocated at the reserved peak (fragmentation)",
            b.fragmentation_at_peak_bytes,
            a.fragmentation_at_peak_bytes,
        ),
        bytes_row("Largest free block then", b.largest_free_block_at_peak_bytes, a.largest_free_block_at_peak_bytes),
        count_row("Segment allocations (cudaMalloc calls)", b.segment_allocs, a.segment_allocs),
        count_row("Out-of-memory errors", b.ooms, a.ooms),
    ]
}

/// The one-sentence answer: how the peaks moved.
pub fn headline(d: &SnapshotDiff) -> String {
    if d.peak_allocated_change_bytes == 0 && d.peak_reserved_change_bytes == 0 {
        return "The peaks did not change: allocated and reserved memory peak at the same bytes.".to_owned();
    }
    let verb = |c: i64| match c {
        0 => "did not change".to_owned(),
        c if c > 0 => format!("rose by {}", fmt_bytes(c.unsigned_abs())),
        c => format!("fell by {}", fmt_bytes(c.unsigned_abs())),
    };
    format!(
        "Peak reserved {}{}, peak allocated {}{}.",
        verb(d.peak_reserved_change_bytes),
        fmt_relative(d.before.peak_reserved_bytes, d.peak_reserved_change_bytes),
        verb(d.peak_allocated_change_bytes),
        fmt_relative(d.before.peak_allocated_bytes, d.peak_allocated_change_bytes),
    )
}

/// What was replayed, per side, for the summary table.
pub fn side_facts(d: &SnapshotDiff) -> Vec<Fact> {
    let side = |s: &DiffSide| {
        let settings = if s.alloc_conf.is_empty() { "PyTorch's defaults".to_owned() } else { s.alloc_conf.clone() };
        let from = if s.settings_from_snapshot { "its own settings" } else { "settings given" };
        let peak = match s.peak_allocated_index {
            Some(i) => format!("allocated peak after entry {i}"),
            None => "allocated peak before the first entry".to_owned(),
        };
        let fidelity = match s.fidelity_agrees {
            Some(true) => "; the replay agrees with the recording",
            Some(false) => "; the replay departs from the recording (see `replay`)",
            None => "",
        };
        format!("{} — device {}, {} entries, {from}: {settings}; {peak}{fidelity}", s.source, s.device, s.entries)
    };
    vec![Fact::new("Before (A)", side(&d.before)), Fact::new("After (B)", side(&d.after))]
}

/// The banner's lines where a side is an estimate (captured with no GPU); `None` when neither is.
pub fn estimate_banner(d: &SnapshotDiff) -> Option<Vec<String>> {
    let lines: Vec<String> = [("A (before)", &d.before), ("B (after)", &d.after)]
        .into_iter()
        .filter_map(|(name, s)| Some(format!("{name}, {}: {}", s.source, s.estimate.as_ref()?)))
        .collect();
    (!lines.is_empty()).then_some(lines)
}

#[derive(Serialize)]
struct PathRow {
    label: String,
    callers: Vec<String>,
    via: Option<String>,
    category: &'static str,
    before: String,
    after: String,
    change: String,
    blocks: String,
    class: &'static str,
}

#[derive(Serialize)]
struct SizeRow {
    size: String,
    before: u64,
    after: u64,
    change: String,
    class: &'static str,
}

/// Writes the diff page into `dir` (created if needed); returns `index.html`'s path.
pub fn write_diff_report(
    dir: &Path,
    d: &SnapshotDiff,
    timelines: Option<(&ReplayTimeline, &ReplayTimeline)>,
) -> Result<PathBuf, ReportError> {
    prepare_out_dir(dir)?;
    let paths: Vec<PathRow> = d
        .paths
        .iter()
        .take(MAX_PATH_ROWS)
        .map(|p| PathRow {
            label: p.label.clone(),
            callers: p.user_frames.iter().skip(1).cloned().collect(),
            via: p.via.clone(),
            category: p.category.name(),
            before: fmt_bytes(p.before_bytes),
            after: fmt_bytes(p.after_bytes),
            change: format!("{}{}", fmt_change(p.change_bytes), fmt_relative(p.before_bytes, p.change_bytes)),
            blocks: format!("{} → {}", p.before_blocks, p.after_blocks),
            class: class(p.change_bytes),
        })
        .collect();
    let left_out = &d.paths[paths.len()..];
    let sizes: Vec<SizeRow> = d
        .segment_sizes
        .iter()
        .map(|s| SizeRow {
            size: fmt_bytes(s.size_bytes),
            before: s.before,
            after: s.after,
            change: fmt_count_change(s.before, s.after),
            class: class((s.after as i64).saturating_sub(s.before as i64)),
        })
        .collect();
    let answer = crate::replay_page::Answer {
        headline: headline(d),
        holders_title: if paths.is_empty() {
            String::new()
        } else {
            "Largest changes at the allocated peak (B − A):".to_owned()
        },
        holders: paths
            .iter()
            .take(crate::replay_page::ANSWER_HOLDERS)
            .map(|p| crate::replay_page::AnswerHolder {
                label: p.label.clone(),
                bytes: p.change.clone(),
                share: format!("{} → {}", p.before, p.after),
            })
            .collect(),
        ..Default::default()
    };
    let ctx = minijinja::context! {
        title => format!("vramlab diff of {} and {}", d.before.source, d.after.source),
        answer => answer,
        estimate => estimate_banner(d),
        version => env!("CARGO_PKG_VERSION"),
        source => format!("{} → {}", d.before.source, d.after.source),
        facts => side_facts(d),
        figures => figure_rows(d),
        paths => paths,
        paths_left_out => left_out.len(),
        paths_left_out_change => fmt_change(left_out.iter().map(|p| p.change_bytes).sum()),
        paths_unchanged => d.paths_unchanged,
        bytes_unchanged => fmt_bytes(d.bytes_unchanged),
        sizes => sizes,
        interactive => timelines.map(overlay).transpose()?,
        js => crate::html::JS,
        css => crate::html::CSS,
    };
    crate::html::write_index(dir, "diff.html", ctx)
}

/// The chart of A's and B's memory overlaid entry by entry, with each one's reserved peak.
fn overlay((a, b): (&ReplayTimeline, &ReplayTimeline)) -> Result<String, ReportError> {
    let replays = [
        Replayed { name: "A".into(), color: "#1f64b4".into(), timeline: a },
        Replayed { name: "B".into(), color: "#d0531c".into(), timeline: b },
    ];
    lines_json(&replays, &peak_marks(&replays), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_of_a_snapshot_against_itself() {
        let bytes = include_bytes!("../../tests/data/snapshots/small_p5.pickle");
        let snap = vramlab_snapshot::read_snapshot(&bytes[..]).unwrap();
        let opts = vramlab_snapshot::SnapshotReplayOptions::default();
        let d = vramlab_snapshot::diff_snapshots(("<a>.pickle", &snap), ("b.pickle", &snap), &opts).unwrap();
        let dir = std::env::temp_dir().join(format!("vramlab-diff-page-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let index = write_diff_report(&dir, &d, None).unwrap();
        let html = std::fs::read_to_string(&index).unwrap();
        assert!(html.contains("The peaks did not change"), "{html}");
        assert!(html.contains("No call path gained or lost bytes"));
        assert!(html.contains("&lt;a&gt;.pickle") && !html.contains("<a>.pickle"), "names are escaped");
        assert!(!html.contains("http://") && !html.contains("<script"), "offline, no script");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
