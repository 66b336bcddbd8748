//! The "who holds the memory" tables of the replay, what-if and diff pages:
//! each attributed point (the allocated peak, an out-of-memory) of
//! `vramlab_snapshot::attribute` as rows a template shows — the user's call
//! path first, bytes, share, blocks, the category (and whether it was tagged or
//! inferred), and the full stacks behind a `<details>` — rendered by
//! `templates/peak_table.html`, which the pages include.

use serde::Serialize;
use vramlab_snapshot::{Attribution, CategorySource, PointKind};

use vramlab_display::format::fmt_bytes;

/// Rows a page lists per point; the rest are summed in one line.
pub const MAX_ROWS: usize = 25;

#[derive(Debug, Clone, Serialize)]
pub struct FrameView {
    pub text: String,
    /// Inside torch, a package, the standard library, `<built-in>` or C++.
    pub folded: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackView {
    pub bytes: String,
    pub blocks: u64,
    pub frames: Vec<FrameView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RowView {
    /// The innermost frame of the user's code, or what stands in for it.
    pub label: String,
    /// The user's frames that called it, innermost first (after the label's).
    pub callers: Vec<String>,
    /// The library frame the user's line called into.
    pub via: Option<String>,
    pub folded_frames: u64,
    pub no_frames: bool,
    pub bytes: String,
    pub share: String,
    pub blocks: u64,
    pub category: &'static str,
    /// "inferred", "tagged" or "".
    pub category_source: &'static str,
    pub stacks: Vec<StackView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CategoryView {
    pub name: &'static str,
    pub bytes: String,
    pub share: String,
    pub blocks: u64,
    pub tagged: bool,
}

/// One attributed point as a page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PointView {
    /// `peak` or `oom`: the section's id suffix.
    pub kind: &'static str,
    pub title: String,
    pub time_us: Option<i64>,
    pub total: String,
    pub blocks: u64,
    /// For an out-of-memory: the failed request and its call path.
    pub request: Option<String>,
    pub rows: Vec<RowView>,
    pub rows_left_out: usize,
    pub bytes_left_out: String,
    pub categories: Vec<CategoryView>,
    pub categories_inferred: bool,
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// The views of attributed points, in order.
pub fn views(points: &[Attribution]) -> Vec<PointView> {
    points.iter().map(view).collect()
}

fn view(a: &Attribution) -> PointView {
    let rows: Vec<RowView> = a
        .groups
        .iter()
        .take(MAX_ROWS)
        .map(|g| RowView {
            label: g.label.clone(),
            callers: g.user_frames.iter().skip(1).cloned().collect(),
            via: g.via.clone(),
            folded_frames: g.folded_frames,
            no_frames: g.no_frames.is_some(),
            bytes: fmt_bytes(g.bytes),
            share: percent(g.share),
            blocks: g.blocks,
            category: g.category.name(),
            category_source: match g.category_source {
                CategorySource::Tagged => "tagged",
                CategorySource::Inferred => "inferred",
                CategorySource::Unknown => "",
            },
            stacks: g
                .stacks
                .iter()
                .map(|s| StackView {
                    bytes: fmt_bytes(s.bytes),
                    blocks: s.blocks,
                    frames: s
                        .frames
                        .iter()
                        .map(|f| FrameView { text: f.text.clone(), folded: f.kind.folded() })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let left: u64 = a.groups.iter().skip(MAX_ROWS).map(|g| g.bytes).sum::<u64>() + a.bytes_not_listed;
    PointView {
        kind: match a.kind {
            PointKind::AllocatedPeak => "peak",
            PointKind::OutOfMemory => "oom",
        },
        title: a.title(),
        time_us: a.time_us,
        total: fmt_bytes(a.total_bytes),
        blocks: a.blocks,
        request: a.request.as_ref().map(|r| format!("{} from {}", fmt_bytes(r.bytes), r.label)),
        rows_left_out: a.groups.len().saturating_sub(MAX_ROWS) + a.groups_not_listed as usize,
        bytes_left_out: fmt_bytes(left),
        rows,
        categories: a
            .categories
            .iter()
            .map(|c| CategoryView {
                name: c.category.name(),
                bytes: fmt_bytes(c.bytes),
                share: percent(c.share),
                blocks: c.blocks,
                tagged: c.tagged_bytes == c.bytes && c.bytes > 0,
            })
            .collect(),
        categories_inferred: a.categories_inferred(),
    }
}
