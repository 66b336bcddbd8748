//! The pages of `cargo xtask replay --report DIR` and `cargo xtask whatif
//! --report DIR`: a self-contained offline `index.html` (minijinja with
//! auto-escaping, `templates/replay.html` and `templates/whatif.html`, the
//! report's CSS inlined, every chart inline as SVG), a PNG and an SVG per chart
//! under `charts/`, and `trace.json` (Perfetto). The replay page shows the
//! memory over the replay with its peak, the segments at the reserved peak (a
//! map and a table) and each out-of-memory's fragmentation figures; the what-if
//! page the memory under each setting, the table of figures and the
//! recommendation. The data comes from the allocator's replays
//! ([`ReplayTimeline`]); the memory charts are line charts of the one chart
//! model (`vramlab_display::chart`: step lines in its palette, the peaks and
//! out-of-memory errors as labelled points, the capacity as a reference line),
//! drawn by [`crate::plot`]; their x axis counts trace ops, or, on the replay
//! page of a snapshot whose entries have times, is the trace's `time_us` since
//! the first entry ([`XAxis`]), each mark naming its entry index. The segment
//! map is drawn here.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::{BlockState, PoolKind, SegmentInfo};
use vramlab_replay::timeline::{OomState, ReplayTimeline, TimelinePoint};
use vramlab_snapshot::{
    Attribution, BandSplit, PathTimeline, SPREAD_WINDOWS, STATE_BUDGET, StateHistory, state_windows,
};

use vramlab_display::chart::{AxisSpec, LabelledPoint, LineSeries, LinesSpec, Marker, Scale, Unit, palette};

use crate::canvas::{self, DrawResult, FAMILY, HEIGHT, WIDTH, register_font};
use crate::html::{CHARTS_DIR, INDEX_HTML, TRACE_JSON};
use crate::lines_view::{LinesMark, Replayed, lines_json, script_json};
use crate::plot::draw_lines;
use crate::state_view::{StatePin, state_json};
use crate::{ReportError, prepare_out_dir, trace, write_unsynced};

/// Segments drawn in the segment map (in address order); the table lists up to
/// [`MAX_SEGMENT_ROWS`].
pub const MAX_SEGMENTS_DRAWN: usize = 64;
/// Height of a segment's row in the segment map, in pixels.
const SEGMENT_ROW_PX: u32 = 16;
/// Rows of the segment table.
pub const MAX_SEGMENT_ROWS: usize = 500;
/// Out-of-memory rows on a page.
pub const MAX_OOM_ROWS: usize = 100;

/// One line of a page's summary table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact {
    pub name: String,
    pub value: String,
}

impl Fact {
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Fact {
        Fact { name: name.into(), value: value.into() }
    }
}

/// A statistic the replayed trace cannot determine, for the replay page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatNote {
    /// The `torch.cuda.memory_stats()` key.
    pub key: String,
    /// The replay's value as shown: "at least N" (a lower bound) or "not known from the trace".
    pub value: String,
    pub reason: String,
}

/// What `cargo xtask replay --report` shows.
#[derive(Debug, Clone)]
pub struct ReplayPage<'a> {
    /// The trace's name as the user gave it.
    pub source: String,
    /// What an op is, plural, for the x axis: `trace ops`, `trace entries`.
    pub unit: String,
    /// The replay's settings and figures, in order.
    pub facts: Vec<Fact>,
    /// Statistics the trace cannot determine (snapshot replays), shown apart from the replay's figures.
    pub stat_notes: Vec<StatNote>,
    pub timeline: &'a ReplayTimeline,
    /// The simulated device's memory (or the per-process limit), drawn on the chart; `None` is unlimited.
    pub capacity_bytes: Option<u64>,
    /// Who holds the memory at the allocated peak and at each out-of-memory
    /// (snapshots; empty for a vramlab trace, which has no stacks).
    pub attribution: &'a [Attribution],
    /// Each trace entry's `time_us`, by entry index (snapshots): the chart's x
    /// axis is then time since the first entry, when they grow with the index
    /// ([`XAxis::for_entries`]); `None` counts ops.
    pub entry_times_us: Option<&'a [i64]>,
    /// Live memory stacked by call path (snapshots), for the interactive
    /// timeline; without it the timeline has the replay's lines alone. Made
    /// with [`mark_states`] pinned, so the hover at a mark is at its entry.
    pub paths: Option<&'a PathTimeline>,
    /// What the replay's document adds (`replay_doc::doc_view`): the answer
    /// card, the limit (given or inferred, with its range), how far short each
    /// recorded OOM was and the releases.
    pub doc: Option<DocView>,
    /// The allocator's state over the replay (snapshots,
    /// `vramlab_snapshot::replay_snapshot_states` in the windows of
    /// [`state_windows_for`]), for the state at a chosen entry; `None`: the
    /// page shows the segments at the reserved peak alone.
    pub states: Option<&'a StateHistory>,
}

/// The windows of states the replay page keeps of a trace of `entries`:
/// every state of a trace up to [`STATE_BUDGET`] entries, else windows around
/// the page's marks ([`mark_states`]) and spread over the trace.
pub fn state_windows_for(t: &ReplayTimeline, entries: u64) -> Vec<(u64, u64)> {
    state_windows(entries, &mark_states(t), STATE_BUDGET)
}

/// Out-of-memory errors the state view offers to jump to.
const STATE_OOM_PINS: usize = 10;

/// The state view's data and what the page says of it.
fn state_context(page: &ReplayPage<'_>) -> Result<Option<minijinja::Value>, ReportError> {
    let Some(h) = page.states else { return Ok(None) };
    let t = page.timeline;
    let mut pins: Vec<StatePin> = Vec::new();
    if let Some(p) = allocated_peak(t) {
        pins.push(StatePin { label: "allocated peak".into(), state: p.ops });
    }
    if let Some(p) = &t.peak {
        pins.push(StatePin { label: "reserved peak".into(), state: p.ops });
    }
    for o in t.ooms.iter().take(STATE_OOM_PINS) {
        pins.push(StatePin { label: format!("OOM at entry {}", o.index), state: o.index + 1 });
    }
    let first = t.peak.as_ref().map_or(h.entries, |p| p.ops);
    let last = t.points.last().map_or(h.entries, |p| p.ops);
    let json = script_json(&state_json(h, &pins, first, last))?;
    let held: u64 = h.windows.iter().map(|w| w.end() - w.start + 1).sum();
    Ok(Some(minijinja::context! {
        json => json,
        partial => held < h.entries + 1,
        entries => grouped(h.entries),
        held => grouped(held),
        spread => SPREAD_WINDOWS,
    }))
}

/// `n` with its thousands grouped, as the page's script writes entries: 12,345.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The replay page's parts that come from the replay's document.
#[derive(Debug, Clone, Default)]
pub struct DocView {
    /// The snapshot is an estimate: the banner's lines (`replay_doc::estimate_lines`).
    pub estimate: Option<Vec<String>>,
    pub answer: Option<Answer>,
    /// The limit in words, and as the capacity line's label.
    pub limit: Option<String>,
    pub limit_label: Option<String>,
    /// The releases of cached memory, in words.
    pub releases: Option<String>,
    /// (trace index, bytes short) of each recorded failed request made again and refused.
    pub short_bytes: Vec<(u64, u64)>,
}

/// The answer a page gives on its first screen: the out-of-memory (the
/// request, the limit, how far short, who holds the memory) or the peak and
/// who holds it, and the recommendation where there is one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub headline: String,
    pub lines: Vec<String>,
    /// "Top holders at the out-of-memory", over [`Answer::holders`].
    pub holders_title: String,
    pub holders: Vec<AnswerHolder>,
    pub recommendation: Option<String>,
}

/// One of the top call paths holding the memory, on the answer card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerHolder {
    pub label: String,
    pub bytes: String,
    pub share: String,
}

/// Call paths the answer card names.
pub const ANSWER_HOLDERS: usize = 3;

/// The top holders of `a` for the answer card.
pub fn answer_holders(a: &Attribution) -> Vec<AnswerHolder> {
    a.groups
        .iter()
        .take(ANSWER_HOLDERS)
        .map(|g| AnswerHolder {
            label: g.label.clone(),
            bytes: fmt_bytes(g.bytes),
            share: format!("{:.0} %", g.share * 100.0),
        })
        .collect()
}

/// The x axis of a timeline chart: ops (trace ops or entries), or the trace's
/// time since the first entry, in ms or s.
#[derive(Debug, Clone, Copy)]
pub enum XAxis<'a> {
    Ops,
    Time {
        /// `time_us` by entry index.
        times_us: &'a [i64],
        /// The time of the chart's first point.
        t0_us: i64,
        /// Microseconds per axis unit (1000 for ms, 1e6 for s).
        div: f64,
        unit: &'static str,
    },
}

impl<'a> XAxis<'a> {
    /// Time, when the entries have times (not all equal, never going back);
    /// else ops. `first_ops` is the timeline's first point.
    pub fn for_entries(times_us: Option<&'a [i64]>, first_ops: u64, last_ops: u64) -> XAxis<'a> {
        let Some(times_us) = times_us.filter(|t| !t.is_empty()) else { return XAxis::Ops };
        let at = |ops: u64| times_us[(ops.saturating_sub(1) as usize).min(times_us.len() - 1)];
        let (t0, t1) = (at(first_ops), at(last_ops));
        if t1 <= t0 || !times_us.windows(2).all(|w| w[0] <= w[1]) {
            return XAxis::Ops;
        }
        let (div, unit) = if t1 - t0 < 10_000_000 { (1e3, "ms") } else { (1e6, "s") };
        XAxis::Time { times_us, t0_us: t0, div, unit }
    }

    /// The x coordinate of the state after `ops` ops (entry `ops − 1`).
    fn x(&self, ops: u64) -> f64 {
        match *self {
            XAxis::Ops => ops as f64,
            XAxis::Time { times_us, t0_us, div, .. } => {
                let i = (ops.saturating_sub(1) as usize).min(times_us.len() - 1);
                (times_us[i] - t0_us) as f64 / div
            }
        }
    }

    /// The x of the state after `ops` ops on a chart: ops, or nanoseconds since the first entry.
    fn chart_x(&self, ops: u64) -> f64 {
        match *self {
            XAxis::Ops => ops as f64,
            XAxis::Time { div, .. } => self.x(ops) * div * 1e3,
        }
    }

    /// The axis of a chart: ops counted, or time in ns (its ticks write their unit).
    fn chart_axis(&self, unit: &str) -> AxisSpec {
        match self {
            XAxis::Ops => AxisSpec::new(unit, Unit::Count, Scale::Linear),
            XAxis::Time { .. } => AxisSpec::new(
                "time since the first entry; marks give the entry index",
                Unit::Nanoseconds,
                Scale::Linear,
            ),
        }
    }

    /// The axis's description.
    fn desc(&self, unit: &str) -> String {
        match self {
            XAxis::Ops => unit.to_owned(),
            XAxis::Time { unit: u, .. } => format!("time since the first entry ({u}); marks give the entry index"),
        }
    }

    /// The sentence the page says about the axis, for a time axis.
    pub fn note(&self) -> Option<String> {
        match self {
            XAxis::Ops => None,
            XAxis::Time { t0_us, unit, .. } => Some(format!(
                "The x axis is the trace's time (time_us) since the first entry, {t0_us}, in {unit}; each mark gives its entry index, and the tables below count trace entries."
            )),
        }
    }

    fn is_time(&self) -> bool {
        matches!(self, XAxis::Time { .. })
    }

    /// [`XAxis::x`] rounded to the microsecond (or the op), for the page's data.
    fn x_rounded(&self, ops: u64) -> f64 {
        match *self {
            XAxis::Ops => ops as f64,
            XAxis::Time { div, .. } => (self.x(ops) * div).round() / div,
        }
    }
}

/// One setting of `cargo xtask whatif --report`.
#[derive(Debug, Clone)]
pub struct WhatifSetting<'a> {
    /// `recorded: …` or the `PYTORCH_CUDA_ALLOC_CONF` string.
    pub name: String,
    pub recommended: bool,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// Reserved − allocated at the reserved peak, and the largest free block then.
    pub fragmentation_at_peak_bytes: u64,
    pub largest_free_block_at_peak_bytes: u64,
    pub segment_allocs: u64,
    /// Where it ran out of memory, in words; `None` when it fits.
    pub oom: Option<String>,
    /// The recording's failed request made again under this setting: served
    /// (with what to spare) or failed (how far short); "-" without one.
    pub recorded_oom: String,
    pub timeline: &'a ReplayTimeline,
}

/// What `cargo xtask whatif --report` shows.
#[derive(Debug, Clone)]
pub struct WhatifPage<'a> {
    /// The snapshot is an estimate: the banner's lines (`replay_doc::estimate_lines`).
    pub estimate: Option<Vec<String>>,
    pub source: String,
    pub unit: String,
    pub facts: Vec<Fact>,
    /// The first is the recorded setting.
    pub settings: Vec<WhatifSetting<'a>>,
    /// The recommendation, in sentences (`--sweep` or several settings).
    pub recommendation: Vec<String>,
    /// Who holds the memory at the recording's allocated peak (and at the
    /// recorded settings' out-of-memory).
    pub attribution: &'a [Attribution],
    /// The memory a setting may reserve (the capacity, or the per-process
    /// limit under it); `None` is unlimited.
    pub capacity_bytes: Option<u64>,
    /// That limit in words (given, or inferred with its range) and as the
    /// chart's label ([`limit_text`], [`limit_label`]); `None`: the capacity's size.
    pub limit: Option<String>,
    pub limit_label: Option<String>,
    /// The recorded settings' releases of cached memory (before an OOM among them), in words.
    pub releases: Option<String>,
}

/// The sentence under the settings table for a setting that reserves more
/// than the limit and is not refused for it: PyTorch would do the same.
fn over_limit_note(number: usize, reserved: u64, limit: u64) -> String {
    format!(
        "#{number} reserves {}, {} above the {} limit, without an out-of-memory there: PyTorch would too. Its \
         alloc_block (c10/cuda/CUDACachingAllocator.cpp) checks total_allocated_memory + alloc_size against \
         allowed_memory_maximum once, before try_allocate_expandable_block maps the request; map_block then maps \
         whole pages (ExpandableSegment::map rounds the range out to 2 MiB in the small pool, 20 MiB in the large) \
         and adds that page-rounded size to total_allocated_memory, so an expandable segment may end past the limit.",
        fmt_bytes(reserved),
        fmt_bytes(reserved - limit),
        fmt_bytes(limit)
    )
}

/// The files a page was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageFiles {
    pub index_html: PathBuf,
    pub trace_json: PathBuf,
    /// Every PNG and SVG under `charts/`.
    pub charts: Vec<PathBuf>,
}

// ----- charts -----

/// The replay's lines: colours of the chart model's palette.
const ALLOCATED: usize = 0;
const RESERVED: usize = 1;
const FREE: RGBColor = RGBColor(222, 226, 230);

/// What a mark on a timeline marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkKind {
    ReservedPeak,
    AllocatedPeak,
    Oom,
}

/// A marked point of a timeline with its label.
#[derive(Debug, Clone)]
struct Mark {
    kind: MarkKind,
    ops: u64,
    bytes: u64,
    label: String,
}

impl Mark {
    /// The mark on a chart over `x`: a peak in its line's colour, an out-of-memory in the marks' red.
    fn point(&self, x: &XAxis<'_>) -> LabelledPoint {
        let color = match self.kind {
            MarkKind::ReservedPeak => Some(RESERVED),
            MarkKind::AllocatedPeak => Some(ALLOCATED),
            MarkKind::Oom => None,
        };
        LabelledPoint { x: x.chart_x(self.ops), y: self.bytes as f64, label: self.label.clone(), color }
    }
}

#[derive(Debug, Clone)]
enum PageChart<'a> {
    /// A memory chart of the chart model.
    Lines {
        title: String,
        lines: LinesSpec,
    },
    Segments {
        title: String,
        segments: &'a [SegmentInfo],
    },
}

impl PageChart<'_> {
    fn title(&self) -> &str {
        match self {
            PageChart::Lines { title, .. } | PageChart::Segments { title, .. } => title,
        }
    }

    /// Width and height in pixels: the segment map grows with its rows.
    fn size(&self) -> (u32, u32) {
        match self {
            PageChart::Lines { .. } => (WIDTH, HEIGHT),
            PageChart::Segments { segments, .. } => {
                let rows = segments.len().clamp(1, MAX_SEGMENTS_DRAWN) as u32;
                (WIDTH, 36 + 8 + rows * SEGMENT_ROW_PX + 36)
            }
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match self {
            PageChart::Lines { title, lines } => draw_lines(root, title, lines),
            PageChart::Segments { title, segments } => draw_segments(root, title, segments),
        }
        .map_err(|e| e.to_string())
    }

    /// Draws the chart into `dir/charts/NAME.{png,svg}`; returns its view.
    fn write(&self, dir: &Path, name: &str, files: &mut Vec<PathBuf>) -> Result<ChartView, ReportError> {
        register_font();
        let err = |reason: String| ReportError::Chart { chart: self.title().to_owned(), reason };
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, self.size()).into_drawing_area();
            self.draw(&root).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))?;
        }
        let png = dir.join(CHARTS_DIR).join(format!("{name}.png"));
        {
            let root = BitMapBackend::new(&png, self.size()).into_drawing_area();
            self.draw(&root).map_err(err)?;
            root.present().map_err(|e| err(format!("{}: {e}", png.display())))?;
        }
        let svg_path = dir.join(CHARTS_DIR).join(format!("{name}.svg"));
        write_unsynced(&svg_path, svg.as_bytes())?;
        files.push(png);
        files.push(svg_path);
        Ok(ChartView {
            title: self.title().to_owned(),
            svg,
            png: format!("{CHARTS_DIR}/{name}.png"),
            svg_file: format!("{CHARTS_DIR}/{name}.svg"),
        })
    }
}

/// A step line of `t`'s reserved (or allocated) bytes over `x`.
fn memory_line(name: String, color: usize, t: &ReplayTimeline, reserved: bool, x: &XAxis<'_>) -> LineSeries {
    let value =
        |p: &TimelinePoint| if reserved { (p.reserved_ops, p.reserved_bytes) } else { (p.ops, p.allocated_bytes) };
    let points = t.points.iter().map(value).map(|(ops, v)| (x.chart_x(ops), v as f64)).collect();
    LineSeries { name, points, dashed: false, color, steps: true }
}

/// A memory chart over `x` with `series`, the capacity (or per-process limit)
/// as a reference line, and `marks`.
fn memory_chart(
    title: String,
    x_axis: AxisSpec,
    series: Vec<LineSeries>,
    marks: Vec<LabelledPoint>,
    capacity: Option<(u64, String)>,
) -> PageChart<'static> {
    let mut lines = LinesSpec::new(x_axis, AxisSpec::new("memory", Unit::Bytes, Scale::Linear), series);
    lines.y_marks = capacity.map(|(c, label)| Marker::new(c as f64, label)).into_iter().collect();
    lines.points = marks;
    PageChart::Lines { title, lines }
}

fn draw_segments<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    segments: &[SegmentInfo],
) -> DrawResult<DB> {
    let (title_area, area) = root.split_vertically(36);
    title_area.draw(&Text::new(title.to_owned(), (12, 8), (FAMILY, 20).into_font()))?;
    let shown = &segments[..segments.len().min(MAX_SEGMENTS_DRAWN)];
    if shown.is_empty() {
        area.draw(&Text::new("No segments.".to_owned(), (40, 60), (FAMILY, 16).into_font()))?;
        return Ok(());
    }
    let label_w = 110i32;
    let rows = shown.len() as i32;
    let row_h = SEGMENT_ROW_PX as i32;
    let width = (WIDTH as i32 - label_w - 20) as f64;
    let largest = shown.iter().map(|s| s.total_size).max().unwrap_or(1).max(1) as f64;
    let small = (FAMILY, (row_h - 4).clamp(8, 13)).into_font();
    let x_of = |offset: u64| label_w + ((offset as f64 / largest) * width).round() as i32;
    for (i, s) in shown.iter().enumerate() {
        let y = 4 + i as i32 * row_h;
        area.draw(&Text::new(fmt_bytes(s.total_size), (6, y + (row_h - 13).max(0) / 2), small.clone()))?;
        for b in &s.blocks {
            let (x0, x1) = (x_of(b.address - s.address), x_of(b.address - s.address + b.size));
            let color = match b.state {
                BlockState::ActiveAllocated => canvas::palette(ALLOCATED),
                BlockState::ActivePendingFree => canvas::palette(RESERVED),
                BlockState::Inactive => FREE,
            };
            let (top, bottom) = (y + 1, y + row_h - 1);
            area.draw(&Rectangle::new([(x0, top), (x1.max(x0 + 1), bottom)], color.filled()))?;
            if x1 - x0 >= 3 && row_h >= 5 {
                area.draw(&Rectangle::new([(x0, top), (x1, bottom)], WHITE.stroke_width(1)))?;
            }
        }
    }
    let y = 4 + rows * row_h + 6;
    let mut x = label_w;
    let legend = [
        ("allocated", canvas::palette(ALLOCATED)),
        ("freed, waiting on a stream", canvas::palette(RESERVED)),
        ("free (cached)", FREE),
    ];
    for (name, color) in legend {
        area.draw(&Rectangle::new([(x, y), (x + 14, y + 12)], color.filled()))?;
        area.draw(&Text::new(name.to_owned(), (x + 18, y), (FAMILY, 13).into_font()))?;
        x += 40 + 7 * name.len() as i32;
    }
    Ok(())
}

// ----- the pages -----

/// A chart already drawn, as a page shows it.
#[derive(Debug, Clone, Serialize)]
struct ChartView {
    title: String,
    svg: String,
    png: String,
    svg_file: String,
}

#[derive(Debug, Clone, Serialize)]
struct SegmentRow {
    address: String,
    pool: &'static str,
    stream: u32,
    size: String,
    allocated: String,
    free: String,
    blocks_allocated: usize,
    blocks_free: usize,
    largest_free: String,
}

#[derive(Debug, Clone, Serialize)]
struct OomRow {
    at: String,
    device: u32,
    requested: String,
    reserved: String,
    allocated: String,
    unallocated: String,
    largest_free: String,
    fits_somewhere: bool,
    /// How far short a recorded OOM made again was ("-" where not known).
    short: String,
    message: String,
}

#[derive(Debug, Clone, Serialize)]
struct SettingRow {
    /// The group's number on the charts, and its colour.
    number: usize,
    color: String,
    /// The settings with these identical results.
    names: Vec<String>,
    recommended: bool,
    peak_reserved: String,
    peak_allocated: String,
    /// Capacity − peak reserved: what more could be reserved before running out.
    headroom: String,
    fragmentation: String,
    largest_free: String,
    segment_allocs: u64,
    oom: Option<String>,
    recorded_oom: String,
}

fn segment_row(s: &SegmentInfo) -> SegmentRow {
    let free: Vec<u64> = s.blocks.iter().filter(|b| b.state == BlockState::Inactive).map(|b| b.size).collect();
    SegmentRow {
        address: format!("{:#x}", s.address),
        pool: match s.pool {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        },
        stream: s.stream,
        size: fmt_bytes(s.total_size),
        allocated: fmt_bytes(s.allocated_size),
        free: fmt_bytes(free.iter().sum()),
        blocks_allocated: s.blocks.len() - free.len(),
        blocks_free: free.len(),
        largest_free: fmt_bytes(free.iter().copied().max().unwrap_or(0)),
    }
}

/// Where an out-of-memory happened, in words.
pub fn oom_place(o: &OomState) -> String {
    match o.line {
        Some(line) => format!("op {} (line {line})", o.index),
        None => format!("entry {}", o.index),
    }
}

fn oom_row(o: &OomState, doc: Option<&DocView>) -> OomRow {
    let short = doc.and_then(|d| d.short_bytes.iter().find(|(i, _)| *i == o.index)).map(|&(_, b)| b);
    OomRow {
        short: short.map_or_else(|| "-".to_owned(), fmt_bytes),
        at: oom_place(o),
        device: o.device,
        requested: fmt_bytes(o.requested_bytes),
        reserved: fmt_bytes(o.reserved_bytes),
        allocated: fmt_bytes(o.allocated_bytes),
        unallocated: fmt_bytes(o.reserved_unallocated_bytes),
        largest_free: fmt_bytes(o.largest_free_block_bytes),
        fits_somewhere: o.reserved_unallocated_bytes >= o.requested_bytes,
        message: o.message.clone(),
    }
}

/// The first point where allocated memory is highest.
fn allocated_peak(t: &ReplayTimeline) -> Option<&TimelinePoint> {
    let max = t.points.iter().map(|p| p.allocated_bytes).max().filter(|&m| m > 0)?;
    t.points.iter().find(|p| p.allocated_bytes == max)
}

/// The peak and OOM marks of a timeline's chart: the reserved peak, the
/// allocated peak, and the first three out-of-memory errors.
fn marks(t: &ReplayTimeline, x: &XAxis<'_>) -> Vec<Mark> {
    let mut marks: Vec<Mark> = t
        .peak
        .iter()
        .map(|p| Mark {
            kind: MarkKind::ReservedPeak,
            ops: p.ops,
            bytes: p.reserved_bytes,
            label: format!("peak reserved {}", fmt_bytes(p.reserved_bytes)),
        })
        .collect();
    marks.extend(allocated_peak(t).map(|p| Mark {
        kind: MarkKind::AllocatedPeak,
        ops: p.ops,
        bytes: p.allocated_bytes,
        label: format!("peak allocated {}", fmt_bytes(p.allocated_bytes)),
    }));
    marks.extend(t.ooms.iter().take(3).map(|o| Mark {
        kind: MarkKind::Oom,
        ops: o.index + 1,
        bytes: o.reserved_bytes,
        label: format!("OOM: {}", fmt_bytes(o.requested_bytes)),
    }));
    if x.is_time() {
        for m in &mut marks {
            m.label += &format!(" · entry {}", m.ops.saturating_sub(1));
        }
    }
    marks
}

/// The memory over a replay: reserved and allocated, with the peaks and the
/// first out-of-memory errors marked.
fn timeline_chart(
    title: String,
    unit: &str,
    x: XAxis<'_>,
    t: &ReplayTimeline,
    capacity: Option<(u64, String)>,
) -> PageChart<'static> {
    let series = vec![
        memory_line("reserved".into(), RESERVED, t, true, &x),
        memory_line("allocated".into(), ALLOCATED, t, false, &x),
    ];
    let marks = marks(t, &x).iter().map(|m| m.point(&x)).collect();
    memory_chart(title, x.chart_axis(unit), series, marks, capacity)
}

// ----- the interactive timeline (templates/timeline.js, figure[data-stacked]) -----

/// Marks the interactive timeline draws at most (out-of-memory errors beyond are counted in the table).
const MAX_INTERACTIVE_OOMS: usize = 100;

#[derive(Debug, Serialize)]
struct StackedLine {
    x: Vec<f64>,
    v: Vec<u64>,
    /// Each point's state (entries applied), for the allocation-order axis; empty when x already counts them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ops: Vec<u64>,
}

#[derive(Debug, Serialize)]
struct StackedBlock {
    bytes: u64,
    entry: Option<u64>,
    /// `[text, folded]`, innermost first.
    frames: Vec<(String, bool)>,
    left_out: u64,
}

#[derive(Debug, Serialize)]
struct StackedSeries<'a> {
    label: &'a str,
    frames: &'a [String],
    v: &'a [u64],
    blocks: Vec<StackedBlock>,
    /// Per column, the band's largest live block there (into `StackedData::live_blocks`), −1 for none.
    live: &'a [i32],
    /// The band split by its next frames (the drill-down), parts' bytes as (column, bytes) changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    split: Option<&'a BandSplit>,
}

/// A block live at a column (the block under the cursor): bytes, `alloc`
/// entry, free entry, stack (into `StackedData::stacks`).
#[derive(Debug, Serialize)]
struct StackedLiveBlock(u64, Option<u64>, Option<u64>, u32);

/// A stack of the live blocks: `[text, folded]` innermost first, and the folded frames left out.
#[derive(Debug, Serialize)]
struct StackedStack(Vec<(String, bool)>, u64);

#[derive(Debug, Serialize)]
struct StackedMark {
    /// `allocated`, `reserved` or `oom`.
    kind: &'static str,
    x: f64,
    /// Entries applied at the mark's state (the entry is `state − 1`): the
    /// column of the same state is the hover's at the mark.
    state: u64,
    bytes: u64,
    /// An out-of-memory's failed request, drawn as a bar on top of `bytes`.
    request: Option<u64>,
    label: String,
    short: String,
}

/// The states (entries applied) the interactive timeline marks: the peaks and
/// the out-of-memory errors it draws. Pin them in the page's
/// [`PathTimeline`] (`vramlab_snapshot::path_timeline`) so the hover at a mark
/// shows the state at that entry.
pub fn mark_states(t: &ReplayTimeline) -> Vec<u64> {
    let peaks = t.peak.iter().map(|p| p.ops).chain(allocated_peak(t).map(|p| p.ops));
    peaks.chain(t.ooms.iter().take(MAX_INTERACTIVE_OOMS).map(|o| o.index + 1)).collect()
}

/// What the page's script draws: the stacked columns (x in axis units), the
/// replay's lines, the marks and the capacity.
#[derive(Debug, Serialize)]
struct StackedData<'a> {
    x: Vec<f64>,
    applied: &'a [u64],
    series: Vec<StackedSeries<'a>>,
    /// Whether the last series is "other".
    other: bool,
    live_blocks: Vec<StackedLiveBlock>,
    stacks: Vec<StackedStack>,
    reserved: StackedLine,
    allocated: StackedLine,
    marks: Vec<StackedMark>,
    capacity: Option<u64>,
    /// The capacity line's label: "capacity 1.00 GiB", or an inferred limit with its range.
    capacity_label: Option<String>,
    /// `ms` or `s` for a time axis; `None` counts ops.
    time: Option<&'static str>,
    x_desc: String,
    entries_per_column: u64,
}

/// The legend of the interactive timeline's bands.
#[derive(Debug, Clone, Serialize)]
struct BandView {
    label: String,
    callers: String,
    peak: String,
    color: &'static str,
}

/// The colours of `timeline.js`'s bands (the last for "other").
const BAND_COLORS: [&str; 13] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6",
    "#8cd17d", "#d4a6c8", "#bab0ac",
];

fn stacked_data<'a>(page: &'a ReplayPage<'a>, x: &XAxis<'_>, marks: &[Mark]) -> StackedData<'a> {
    let t = page.timeline;
    let line = |reserved: bool| StackedLine {
        x: t.points.iter().map(|p| x.x_rounded(if reserved { p.reserved_ops } else { p.ops })).collect(),
        v: t.points.iter().map(|p| if reserved { p.reserved_bytes } else { p.allocated_bytes }).collect(),
        ops: if x.is_time() {
            t.points.iter().map(|p| if reserved { p.reserved_ops } else { p.ops }).collect()
        } else {
            Vec::new()
        },
    };
    let (applied, xs, series, other, per) = match page.paths {
        Some(p) => (
            p.applied.as_slice(),
            p.applied.iter().map(|&a| x.x_rounded(a)).collect(),
            p.series
                .iter()
                .map(|s| StackedSeries {
                    label: &s.label,
                    frames: &s.user_frames,
                    v: &s.bytes,
                    blocks: s
                        .largest_blocks
                        .iter()
                        .map(|b| StackedBlock {
                            bytes: b.bytes,
                            entry: b.entry,
                            frames: b.frames.iter().map(|f| (f.text.clone(), f.kind.folded())).collect(),
                            left_out: b.frames_left_out,
                        })
                        .collect(),
                    live: &s.live_block,
                    split: s.split.as_ref(),
                })
                .collect(),
            p.series.last().is_some_and(|s| s.label.starts_with("other (")),
            p.entries_per_column,
        ),
        None => (&[][..], Vec::new(), Vec::new(), false, 1),
    };
    let live_blocks = page.paths.map_or_else(Vec::new, |p| {
        p.blocks.iter().map(|b| StackedLiveBlock(b.bytes, b.entry, b.freed, b.stack)).collect()
    });
    let stacks = page.paths.map_or_else(Vec::new, |p| {
        p.stacks
            .iter()
            .map(|s| {
                StackedStack(s.frames.iter().map(|f| (f.text.clone(), f.kind.folded())).collect(), s.frames_left_out)
            })
            .collect()
    });
    let entry = |ops: u64| if x.is_time() { String::new() } else { format!(" after {ops}") };
    let marks = marks
        .iter()
        .filter(|m| m.kind != MarkKind::Oom)
        .map(|m| {
            let reserved = m.kind == MarkKind::ReservedPeak;
            StackedMark {
                kind: if reserved { "reserved" } else { "allocated" },
                x: x.x_rounded(m.ops),
                state: m.ops,
                bytes: m.bytes,
                request: None,
                label: m.label.clone(),
                short: format!("{} peak{}", if reserved { "reserved" } else { "allocated" }, entry(m.ops)),
            }
        })
        .chain(t.ooms.iter().take(MAX_INTERACTIVE_OOMS).map(|o| StackedMark {
            kind: "oom",
            x: x.x_rounded(o.index + 1),
            state: o.index + 1,
            bytes: o.reserved_bytes,
            request: Some(o.requested_bytes),
            label: format!(
                "out of memory at {}: {} requested with {} reserved",
                oom_place(o),
                fmt_bytes(o.requested_bytes),
                fmt_bytes(o.reserved_bytes)
            ),
            short: "OOM".into(),
        }))
        .collect();
    StackedData {
        x: xs,
        applied,
        series,
        other,
        live_blocks,
        stacks,
        reserved: line(true),
        allocated: line(false),
        marks,
        capacity: page.capacity_bytes,
        capacity_label: page
            .doc
            .as_ref()
            .and_then(|d| d.limit_label.clone())
            .or_else(|| page.capacity_bytes.map(|c| format!("capacity {}", fmt_bytes(c)))),
        time: match x {
            XAxis::Time { unit, .. } => Some(unit),
            XAxis::Ops => None,
        },
        x_desc: x.desc(&page.unit),
        entries_per_column: per,
    }
}

fn band_views(paths: Option<&PathTimeline>) -> Vec<BandView> {
    let Some(p) = paths else { return Vec::new() };
    let n = p.series.len();
    let other = p.series.last().is_some_and(|s| s.label.starts_with("other ("));
    p.series
        .iter()
        .enumerate()
        .map(|(k, s)| BandView {
            label: s.label.clone(),
            callers: s.user_frames.iter().skip(1).cloned().collect::<Vec<_>>().join(" ← "),
            peak: fmt_bytes(s.peak_bytes),
            color: if other && k == n - 1 { BAND_COLORS[12] } else { BAND_COLORS[k % 12] },
        })
        .collect()
}

/// Creates `dir` and checks it is writable: the error names it.
fn prepare(dir: &Path) -> Result<(), ReportError> {
    prepare_out_dir(dir)?;
    std::fs::create_dir_all(dir.join(CHARTS_DIR))
        .map_err(|source| ReportError::Io { path: dir.join(CHARTS_DIR), source })
}

/// Writes the replay page into `dir` (created if needed).
pub fn write_replay_report(dir: &Path, page: &ReplayPage<'_>) -> Result<PageFiles, ReportError> {
    prepare(dir)?;
    let t = page.timeline;
    let mut files = Vec::new();
    let first = t.points.first().map_or(0, |p| p.ops);
    let last = t.points.last().map_or(0, |p| p.ops);
    let x = XAxis::for_entries(page.entry_times_us, first, last);
    let capacity = page.capacity_bytes.map(|c| {
        (
            c,
            page.doc
                .as_ref()
                .and_then(|d| d.limit_label.clone())
                .unwrap_or_else(|| format!("capacity {}", fmt_bytes(c))),
        )
    });
    let chart = timeline_chart("Memory over the replay".into(), &page.unit, x, t, capacity);
    let interactive = script_json(&stacked_data(page, &x, &marks(t, &x)))?;
    let timeline = chart.write(dir, "timeline", &mut files)?;
    let segments = match &t.peak {
        Some(p) => {
            let more = if p.segments.len() > MAX_SEGMENTS_DRAWN {
                format!(" (the first {MAX_SEGMENTS_DRAWN} of {}, by address)", p.segments.len())
            } else {
                String::new()
            };
            let chart =
                PageChart::Segments { title: format!("Segments at the reserved peak{more}"), segments: &p.segments };
            Some(chart.write(dir, "segments", &mut files)?)
        }
        None => None,
    };
    let peak = t.peak.as_ref().map(|p| {
        minijinja::context! {
            ops => p.ops,
            reserved => fmt_bytes(p.reserved_bytes),
            allocated => fmt_bytes(p.allocated_bytes),
            unallocated => fmt_bytes(p.reserved_bytes.saturating_sub(p.allocated_bytes)),
            largest_free => fmt_bytes(p.largest_free_block_bytes),
            segments => p.segments.len(),
            rows => p.segments.iter().take(MAX_SEGMENT_ROWS).map(segment_row).collect::<Vec<_>>(),
            rows_left_out => p.segments.len().saturating_sub(MAX_SEGMENT_ROWS),
        }
    });
    let ooms: Vec<OomRow> = t.ooms.iter().take(MAX_OOM_ROWS).map(|o| oom_row(o, page.doc.as_ref())).collect();
    let ooms_left_out = (t.ooms.len() - ooms.len()) as u64 + t.ooms_not_recorded;
    let ctx = minijinja::context! {
        title => format!("vramlab replay of {}", page.source),
        version => env!("CARGO_PKG_VERSION"),
        source => &page.source,
        unit => &page.unit,
        ops_per_point => t.ops_per_point,
        x_note => x.note(),
        facts => &page.facts,
        stat_notes => &page.stat_notes,
        attribution => crate::peak_table::views(page.attribution),
        timeline => timeline,
        interactive => interactive,
        bands => band_views(page.paths),
        paths => page.paths.map(|p| minijinja::context! {
            shown => p.series.len(),
            all => p.paths,
            entries => p.entries,
            per_column => p.entries_per_column,
        }),
        capacity => page.doc.as_ref().and_then(|d| d.limit.clone()).or_else(|| page.capacity_bytes.map(fmt_bytes)),
        answer => page.doc.as_ref().and_then(|d| d.answer.clone()),
        estimate => page.doc.as_ref().and_then(|d| d.estimate.clone()),
        releases => page.doc.as_ref().and_then(|d| d.releases.clone()),
        js => crate::html::JS,
        states => state_context(page)?,
        state_js => crate::html::STATE_JS,
        segments => segments,
        peak => peak,
        ooms => ooms,
        ooms_left_out => ooms_left_out,
        trace => TRACE_JSON,
        css => crate::html::CSS,
    };
    let html = crate::html::render("replay.html", ctx)?;
    let index_html = dir.join(INDEX_HTML);
    let trace_json = dir.join(TRACE_JSON);
    write_unsynced(&trace_json, trace::replay_trace(&page.unit, &[(page.source.as_str(), t)]).as_bytes())?;
    write_unsynced(&index_html, html.as_bytes())?;
    Ok(PageFiles { index_html, trace_json, charts: files })
}

/// Settings whose replays came out the same: every figure and the whole timeline.
fn same_result(a: &WhatifSetting<'_>, b: &WhatifSetting<'_>) -> bool {
    a.peak_reserved_bytes == b.peak_reserved_bytes
        && a.peak_allocated_bytes == b.peak_allocated_bytes
        && a.fragmentation_at_peak_bytes == b.fragmentation_at_peak_bytes
        && a.largest_free_block_at_peak_bytes == b.largest_free_block_at_peak_bytes
        && a.segment_allocs == b.segment_allocs
        && a.oom == b.oom
        && a.timeline.points == b.timeline.points
        && a.timeline.ooms.len() == b.timeline.ooms.len()
}

/// The settings grouped by identical results, in the order of their first member.
fn result_groups(settings: &[WhatifSetting<'_>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (k, s) in settings.iter().enumerate() {
        match groups.iter_mut().find(|g| same_result(&settings[g[0]], s)) {
            Some(g) => g.push(k),
            None => groups.push(vec![k]),
        }
    }
    groups
}

/// Colour `i` of the chart model's palette as `#rrggbb`.
fn hex(i: usize) -> String {
    let (r, g, b) = palette(i);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The groups' first out-of-memory marks on the overlay, one per entry: the
/// groups that run out at the same entry share a mark ("#1 OOM", "#1, #3
/// OOM", "OOM under 6 settings"), at the highest reserved bytes among them.
fn merged_ooms(page: &WhatifPage<'_>, groups: &[Vec<usize>]) -> Vec<LabelledPoint> {
    let mut at: Vec<(u64, u64, Vec<usize>, usize)> = Vec::new();
    for (g, members) in groups.iter().enumerate() {
        let Some(o) = page.settings[members[0]].timeline.ooms.first() else { continue };
        let settings = members.len();
        match at.iter_mut().find(|(index, ..)| *index == o.index) {
            Some((_, reserved, gs, n)) => {
                *reserved = (*reserved).max(o.reserved_bytes);
                gs.push(g);
                *n += settings;
            }
            None => at.push((o.index, o.reserved_bytes, vec![g], settings)),
        }
    }
    at.into_iter()
        .map(|(index, reserved, gs, settings)| {
            let numbers: Vec<String> = gs.iter().map(|g| format!("#{}", g + 1)).collect();
            let label = if gs.len() <= 3 {
                format!("{} OOM", numbers.join(", "))
            } else {
                format!("OOM under {settings} settings")
            };
            let color = (gs.len() == 1).then_some(gs[0]);
            LabelledPoint { x: (index + 1) as f64, y: reserved as f64, label, color }
        })
        .collect()
}

/// The what-if page's answer card: the recommendation, or what the recorded
/// settings do, and who holds the memory.
fn whatif_answer(page: &WhatifPage<'_>, rows: &[SettingRow]) -> Answer {
    let recorded = &rows[0];
    let mut answer = Answer {
        headline: match (&page.recommendation.first(), &recorded.oom) {
            (Some(r), _) => (*r).clone(),
            (None, Some(oom)) => format!("The recorded settings run out of memory {oom}."),
            (None, None) => format!("The recorded settings peak at {} reserved.", recorded.peak_reserved),
        },
        ..Answer::default()
    };
    if page.estimate.is_some() {
        answer.headline = format!("Estimated: {}", answer.headline);
    }
    if let Some(limit) = &page.limit {
        answer.lines.push(format!("Limit: {limit}."));
    } else if let Some(c) = page.capacity_bytes {
        answer.lines.push(format!("Capacity: {}.", fmt_bytes(c)));
    }
    if recorded.recorded_oom != "-" {
        answer
            .lines
            .push(format!("The recording's failed request under the recorded settings: {}.", recorded.recorded_oom));
    }
    let fit = rows.iter().filter(|r| r.oom.is_none()).count();
    answer.lines.push(format!("{fit} of the {} distinct result(s) fit.", rows.len()));
    let a = page
        .attribution
        .iter()
        .find(|a| a.kind == vramlab_snapshot::PointKind::OutOfMemory)
        .or_else(|| page.attribution.first());
    if let Some(a) = a {
        answer.holders_title = format!("Top holders at {} ({} requested):", a.title(), fmt_bytes(a.total_bytes));
        answer.holders = answer_holders(a);
    }
    answer
}

/// The what-if page's interactive chart: each group's reserved (solid) and
/// allocated (dashed) bytes in its colour, its first out-of-memory marked.
fn whatif_interactive(
    page: &WhatifPage<'_>,
    groups: &[Vec<usize>],
    capacity: Option<(u64, String)>,
) -> Result<String, ReportError> {
    let replays: Vec<Replayed<'_>> = groups
        .iter()
        .enumerate()
        .map(|(g, members)| Replayed {
            name: format!("#{}", g + 1),
            color: hex(g),
            timeline: page.settings[members[0]].timeline,
        })
        .collect();
    let marks: Vec<LinesMark> = groups
        .iter()
        .enumerate()
        .filter_map(|(g, members)| {
            let o = page.settings[members[0]].timeline.ooms.first()?;
            Some(LinesMark {
                kind: "oom",
                state: o.index + 1,
                bytes: o.reserved_bytes,
                request: Some(o.requested_bytes),
                label: format!(
                    "#{}: out of memory at entry {}, {} requested with {} reserved",
                    g + 1,
                    o.index,
                    fmt_bytes(o.requested_bytes),
                    fmt_bytes(o.reserved_bytes)
                ),
                short: format!("#{} OOM", g + 1),
                color: None,
            })
        })
        .collect();
    lines_json(&replays, &marks, capacity)
}

/// Writes the what-if page into `dir` (created if needed). Settings with
/// identical results (every figure and the whole timeline) are one row and one
/// chart, which names them all.
pub fn write_whatif_report(dir: &Path, page: &WhatifPage<'_>) -> Result<PageFiles, ReportError> {
    prepare(dir)?;
    let mut files = Vec::new();
    let groups = result_groups(&page.settings);
    let series = groups
        .iter()
        .enumerate()
        .map(|(g, members)| {
            memory_line(format!("#{}", g + 1), g, page.settings[members[0]].timeline, true, &XAxis::Ops)
        })
        .collect();
    let capacity = page
        .capacity_bytes
        .map(|c| (c, page.limit_label.clone().unwrap_or_else(|| format!("capacity {}", fmt_bytes(c)))));
    let ooms = merged_ooms(page, &groups);
    let interactive = whatif_interactive(page, &groups, capacity.clone())?;
    let title = "Reserved memory under each setting".to_owned();
    let overlay = memory_chart(title, XAxis::Ops.chart_axis(&page.unit), series, ooms, capacity.clone())
        .write(dir, "reserved", &mut files)?;
    let mut per_setting = Vec::with_capacity(groups.len());
    for (g, members) in groups.iter().enumerate() {
        let s = &page.settings[members[0]];
        let title = format!(
            "#{} {}",
            g + 1,
            members.iter().map(|&k| page.settings[k].name.as_str()).collect::<Vec<_>>().join(" · ")
        );
        let chart = timeline_chart(title, &page.unit, XAxis::Ops, s.timeline, capacity.clone()).write(
            dir,
            &format!("setting-{g}"),
            &mut files,
        )?;
        per_setting.push(chart);
    }
    let rows: Vec<SettingRow> = groups
        .iter()
        .enumerate()
        .map(|(g, members)| {
            let s = &page.settings[members[0]];
            SettingRow {
                number: g + 1,
                color: hex(g),
                names: members.iter().map(|&k| page.settings[k].name.clone()).collect(),
                recommended: members.iter().any(|&k| page.settings[k].recommended),
                peak_reserved: fmt_bytes(s.peak_reserved_bytes),
                peak_allocated: fmt_bytes(s.peak_allocated_bytes),
                headroom: match (&s.oom, page.capacity_bytes) {
                    (Some(_), _) => "none: out of memory".to_owned(),
                    (None, Some(c)) if s.peak_reserved_bytes > c => {
                        format!("{} over (see below)", fmt_bytes(s.peak_reserved_bytes - c))
                    }
                    (None, Some(c)) => fmt_bytes(c - s.peak_reserved_bytes),
                    (None, None) => "unlimited device".to_owned(),
                },
                fragmentation: fmt_bytes(s.fragmentation_at_peak_bytes),
                largest_free: fmt_bytes(s.largest_free_block_at_peak_bytes),
                segment_allocs: s.segment_allocs,
                oom: s.oom.clone(),
                recorded_oom: s.recorded_oom.clone(),
            }
        })
        .collect();
    let over_limit: Vec<String> = groups
        .iter()
        .enumerate()
        .filter_map(|(g, members)| {
            let s = &page.settings[members[0]];
            let c = page.capacity_bytes.filter(|&c| s.peak_reserved_bytes > c)?;
            Some(over_limit_note(g + 1, s.peak_reserved_bytes, c))
        })
        .collect();
    let answer = whatif_answer(page, &rows);
    let grouped = groups.iter().filter(|g| g.len() > 1).count();
    let ctx = minijinja::context! {
        title => format!("vramlab what-if of {}", page.source),
        version => env!("CARGO_PKG_VERSION"),
        source => &page.source,
        facts => &page.facts,
        rows => rows,
        recommendation => &page.recommendation,
        attribution => crate::peak_table::views(page.attribution),
        capacity => page.limit.clone().or_else(|| page.capacity_bytes.map(fmt_bytes)),
        over_limit => over_limit,
        answer => answer,
        estimate => &page.estimate,
        releases => &page.releases,
        grouped => grouped,
        settings_tried => page.settings.len(),
        overlay => overlay,
        interactive => interactive,
        js => crate::html::JS,
        charts => per_setting,
        trace => TRACE_JSON,
        css => crate::html::CSS,
    };
    let html = crate::html::render("whatif.html", ctx)?;
    let runs: Vec<(&str, &ReplayTimeline)> = page.settings.iter().map(|s| (s.name.as_str(), s.timeline)).collect();
    let index_html = dir.join(INDEX_HTML);
    let trace_json = dir.join(TRACE_JSON);
    write_unsynced(&trace_json, trace::replay_trace(&page.unit, &runs).as_bytes())?;
    write_unsynced(&index_html, html.as_bytes())?;
    Ok(PageFiles { index_html, trace_json, charts: files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_x_axis_is_time_where_the_entries_have_times() {
        let times = [1_000_000i64, 1_000_500, 1_002_000, 1_004_000];
        let x = XAxis::for_entries(Some(&times), 0, 4);
        assert!(x.is_time());
        assert_eq!(x.x(0), 0.0, "before the first entry: its time");
        assert_eq!(x.x(3), 2.0, "after entry 2: 2 ms in");
        assert_eq!(x.x(9), 4.0, "past the end: the last entry");
        assert!(x.desc("trace entries").contains("(ms)"));
        assert!(x.note().unwrap().contains("1000000"));
        let long = [0i64, 60_000_000];
        assert!(XAxis::for_entries(Some(&long), 0, 2).desc("e").contains("(s)"));
        assert!(!XAxis::for_entries(Some(&[5, 5, 5]), 0, 3).is_time(), "no times: entries");
        assert!(!XAxis::for_entries(Some(&[5, 9, 7]), 0, 3).is_time(), "times going back: entries");
        assert!(!XAxis::for_entries(None, 0, 3).is_time());
        assert!(!XAxis::for_entries(Some(&[]), 0, 3).is_time());
    }
    use vramlab_replay::{ReplayOptions, replay_with_timeline};

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vramlab-replay-page-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// The README's example: 102 × 8 MiB, every other one freed, then 16 MiB on 1 GiB.
    fn fragmentation() -> ReplayTimeline {
        let trace = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/traces/fragmentation.jsonl"))
            .expect("the README's example trace");
        let opts = ReplayOptions { capacity_bytes: Some(1 << 30), ..Default::default() };
        replay_with_timeline(&trace, &opts).unwrap().1
    }

    #[test]
    fn the_replay_page_shows_the_timeline_segments_and_oom_figures() {
        let t = fragmentation();
        let dir = temp_dir("frag");
        let page = ReplayPage {
            source: "runs/<b>frag</b> & co.jsonl".into(),
            unit: "trace ops".into(),
            facts: vec![Fact::new("simulated device", "1.00 GiB"), Fact::new("allocator <config>", "default")],
            stat_notes: vec![StatNote {
                key: "num_sync_all_streams".into(),
                value: "at least 59".into(),
                reason: "empty_cache() calls that release nothing leave no trace entry".into(),
            }],
            timeline: &t,
            capacity_bytes: None,
            attribution: &[],
            entry_times_us: None,
            paths: None,
            doc: None,
            states: None,
        };
        let files = write_replay_report(&dir, &page).unwrap();
        let html = std::fs::read_to_string(&files.index_html).unwrap();
        // Escaped wherever the name appears; never as markup.
        assert!(html.contains("runs&#x2f;&lt;b&gt;frag&lt;&#x2f;b&gt; &amp; co.jsonl"), "the name is escaped");
        assert!(!html.contains("<b>frag"));
        assert!(html.contains("allocator &lt;config&gt;"));
        // A statistic the trace cannot tell, apart, as a lower bound.
        assert!(html.contains(
            "<tr><td><code>num_sync_all_streams</code></td><td class=\"num\">at least 59</td><td>empty_cache() calls \
             that release nothing leave no trace entry</td></tr>"
        ));
        // The timeline, with the reserved peak in words and on the chart.
        assert!(html.contains("Memory over the replay"));
        assert!(html.contains("Reserved memory peaks at 1020.00 MiB after 101 trace ops, with 808.00 MiB allocated."));
        assert!(html.contains("peak reserved 1020.00 MiB"), "the chart marks the peak");
        // The segment table: 51 segments of 20 MiB; 50 hold two 8 MiB blocks, the last one.
        assert_eq!(html.matches("<td class=\"num\">20.00 MiB</td><td class=\"num\">16.00 MiB</td>").count(), 50);
        assert_eq!(html.matches("<td class=\"num\">20.00 MiB</td><td class=\"num\">8.00 MiB</td>").count(), 1);
        assert!(html.contains("<tr><th>Largest free block</th><td>12.00 MiB</td></tr>"));
        // The OOM's fragmentation figures: request, reserved, allocated, reserved
        // but unallocated, largest free block.
        assert!(html.contains(
            "<td>op 153 (line 154)</td><td class=\"num\">0</td><td class=\"num\">16.00 MiB</td><td class=\"num\">-</td>\
             <td class=\"num\">1020.00 MiB</td><td class=\"num\">408.00 MiB</td><td class=\"num\">612.00 MiB</td>\
             <td class=\"num\">8.00 MiB</td>"
        ));
        assert!(html.contains("<strong>Fragmentation:</strong>"));
        // The interactive timeline's data: the replay's lines, both peaks and the OOM marked at its op.
        let data = html.split("<script type=\"application/json\" id=\"memory-data\">").nth(1).unwrap();
        let data: serde_json::Value = serde_json::from_str(&data[..data.find("</script>").unwrap()]).unwrap();
        assert_eq!(data["reserved"]["v"].as_array().unwrap().len(), t.points.len());
        let kinds: Vec<(&str, f64)> = data["marks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["kind"].as_str().unwrap(), m["x"].as_f64().unwrap()))
            .collect();
        // The allocated peak (816 MiB) comes one op after the reserved one: the 102nd block fits a cached segment.
        assert_eq!(kinds, [("reserved", 101.0), ("allocated", 102.0), ("oom", 154.0)], "{kinds:?}");
        // Each mark names its state, the failed request rides on the OOM's, and they are the states to pin.
        let states: Vec<u64> = data["marks"].as_array().unwrap().iter().map(|m| m["state"].as_u64().unwrap()).collect();
        assert_eq!(states, [101, 102, 154]);
        assert_eq!(mark_states(&t), states);
        assert_eq!(data["marks"][2]["request"], 16u64 << 20);
        assert!(data["series"].as_array().unwrap().is_empty(), "a vramlab trace has no stacks");
        assert_eq!(data["time"], serde_json::Value::Null, "x counts ops");
        // Offline: nothing is fetched.
        assert!(!html.contains(" src="), "no external script, image or font");
        // The only url() is the chart's own clip path, inside the page.
        assert!(!html.contains("@import") && html.matches("url(").count() == html.matches("url(#").count());
        assert!(html.contains("<svg"));
        for name in ["timeline.png", "timeline.svg", "segments.png", "segments.svg"] {
            let path = dir.join(CHARTS_DIR).join(name);
            assert!(files.charts.contains(&path), "{name}");
            assert!(std::fs::metadata(&path).unwrap().len() > 100, "{name}");
        }
        // The Perfetto trace: counters for every point, the peak and the OOM.
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&files.trace_json).unwrap()).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let reserved = ev.iter().filter(|e| e["ph"] == "C" && e["name"] == "reserved_bytes").count();
        assert_eq!(reserved, t.points.len());
        let oom = ev.iter().find(|e| e["name"] == "out of memory").expect("the OOM");
        assert_eq!(oom["ph"], "i");
        assert_eq!(oom["args"]["line"], 154);
        assert_eq!(oom["args"]["reserved_unallocated_bytes"], 612u64 << 20);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_whatif_page_has_the_table_the_charts_and_the_recommendation() {
        let t = fragmentation();
        let dir = temp_dir("whatif");
        let setting = |name: &str, recommended, oom: Option<&str>| WhatifSetting {
            name: name.into(),
            recommended,
            peak_reserved_bytes: 1020 << 20,
            peak_allocated_bytes: 816 << 20,
            fragmentation_at_peak_bytes: 212 << 20,
            largest_free_block_at_peak_bytes: 12 << 20,
            segment_allocs: 51,
            oom: oom.map(str::to_owned),
            recorded_oom: "-".into(),
            timeline: &t,
        };
        let page = WhatifPage {
            estimate: None,
            source: "snap.pickle".into(),
            unit: "trace entries".into(),
            facts: vec![Fact::new("capacity", "1.00 GiB")],
            settings: vec![
                setting("recorded: PyTorch defaults", false, Some("at entry 153: alloc of 16.00 MiB")),
                setting("expandable_segments:True", true, None),
                setting("max_split_size_mb:128", false, None),
            ],
            recommendation: vec!["Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into()],
            attribution: &[],
            capacity_bytes: Some(1 << 30),
            limit: None,
            limit_label: None,
            releases: None,
        };
        let files = write_whatif_report(&dir, &page).unwrap();
        let html = std::fs::read_to_string(&files.index_html).unwrap();
        assert!(html.contains("<strong>Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True</strong>"));
        // Identical results are one row, which names both settings and says so.
        assert!(html.contains(
            "<code>expandable_segments:True</code><br><code>max_split_size_mb:128</code> <span class=\"hint\">(2 \
             settings, identical results)</span> <span class=\"verdict holds\">recommended</span>"
        ));
        assert!(html.contains("3 settings tried; settings with identical results"));
        assert!(html.contains("<td>at entry 153: alloc of 16.00 MiB</td>"));
        // Headroom: the capacity (1 GiB) minus the peak reserved (1020 MiB); none for the setting that ran out.
        assert!(html.contains(
            "<td class=\"num\">4.00 MiB</td><td class=\"num\">212.00 MiB</td><td class=\"num\">12.00 MiB</td>\
             <td class=\"num\">51</td><td>-</td><td>no</td>"
        ));
        assert!(html.contains("<td class=\"num\">none: out of memory</td>"));
        assert!(html.contains("Reserved memory under each setting"));
        // The capacity line and the OOM point on the charts.
        assert!(html.contains("capacity 1.00 GiB"));
        assert!(html.contains("#1 OOM"));
        // The overlay interactive (its data: two lines per group, the recorded settings' OOM marked),
        // and one static chart per group of settings besides, each as PNG and SVG.
        assert_eq!(html.matches("<figure class=\"chart static\">").count(), 2);
        let data = html.split("<script type=\"application/json\" id=\"overlay-data\">").nth(1).unwrap();
        let data: serde_json::Value = serde_json::from_str(&data[..data.find("</script>").unwrap()]).unwrap();
        let lines: Vec<&str> = data["lines"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
        assert_eq!(lines, ["#1 reserved", "#1 allocated", "#2 reserved", "#2 allocated"]);
        assert_eq!(data["marks"][0]["short"], "#1 OOM");
        assert_eq!(data["marks"][0]["state"], 154);
        assert_eq!(data["capacity"], 1u64 << 30);
        assert_eq!(files.charts.len(), 6);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&files.trace_json).unwrap()).unwrap();
        let names: Vec<&str> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "recorded: PyTorch defaults (x: trace entries)",
                "expandable_segments:True (x: trace entries)",
                "max_split_size_mb:128 (x: trace entries)"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_folder_is_an_error_naming_it() {
        let dir = temp_dir("unwritable");
        std::fs::write(&dir, b"a file, not a folder").unwrap();
        let t = ReplayTimeline::default();
        let page = ReplayPage {
            source: "x".into(),
            unit: "trace ops".into(),
            facts: vec![],
            stat_notes: vec![],
            timeline: &t,
            capacity_bytes: None,
            attribution: &[],
            entry_times_us: None,
            paths: None,
            doc: None,
            states: None,
        };
        let err = write_replay_report(&dir.join("report"), &page).unwrap_err();
        assert!(matches!(err, ReportError::Io { .. }), "{err}");
        assert!(err.to_string().contains(&*dir.to_string_lossy()), "{err}");
        let _ = std::fs::remove_file(&dir);
    }
}
