//! The interactive timeline of the what-if and diff pages: several replays'
//! memory lines on one chart (one per setting, or A and B), drawn by
//! `templates/timeline.js`'s `figure[data-stacked]` with no bands: zoom, pan,
//! a hover or tap readout of every line at the cursor, the capacity line and
//! the out-of-memory and peak marks with labels that avoid each other. The x
//! axis counts trace entries (the state after N entries), so replays of one
//! trace line up, and A and B overlay entry by entry.

use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_replay::timeline::ReplayTimeline;

use crate::ReportError;

/// One line: a replay's reserved (or allocated) bytes.
#[derive(Debug, Serialize)]
struct Line {
    name: String,
    color: String,
    x: Vec<f64>,
    v: Vec<u64>,
    dashed: bool,
}

/// A mark on the chart (the fields `timeline.js` reads).
#[derive(Debug, Serialize)]
pub struct LinesMark {
    /// `oom`, `reserved` or `allocated` (its colour).
    pub kind: &'static str,
    /// Entries applied at the mark.
    pub state: u64,
    pub bytes: u64,
    /// An out-of-memory's failed request, drawn as a bar on top of `bytes`.
    pub request: Option<u64>,
    /// The whole label (the mark's title) and the one drawn beside it.
    pub label: String,
    pub short: String,
    /// Its colour where not its kind's (a replay's own, on the diff page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

/// One replay on the chart: its name, colour and timeline.
pub struct Replayed<'a> {
    pub name: String,
    pub color: String,
    pub timeline: &'a ReplayTimeline,
}

#[derive(Debug, Serialize)]
struct Empty {
    x: [f64; 0],
    v: [u64; 0],
}

#[derive(Debug, Serialize)]
struct MarkOut<'a> {
    #[serde(flatten)]
    mark: &'a LinesMark,
    x: f64,
}

#[derive(Debug, Serialize)]
struct LinesData<'a> {
    x: [f64; 0],
    applied: [u64; 0],
    series: [u8; 0],
    other: bool,
    live_blocks: [u8; 0],
    stacks: [u8; 0],
    reserved: Empty,
    allocated: Empty,
    lines: Vec<Line>,
    marks: Vec<MarkOut<'a>>,
    capacity: Option<u64>,
    capacity_label: Option<String>,
    time: Option<&'static str>,
    x_desc: &'static str,
    entries_per_column: u64,
}

/// The reserved line (solid) and the allocated line (dashed) of each replay.
fn lines(replays: &[Replayed<'_>]) -> Vec<Line> {
    let mut out = Vec::new();
    for r in replays {
        let t = r.timeline;
        out.push(Line {
            name: format!("{} reserved", r.name),
            color: r.color.clone(),
            x: t.points.iter().map(|p| p.reserved_ops as f64).collect(),
            v: t.points.iter().map(|p| p.reserved_bytes).collect(),
            dashed: false,
        });
        out.push(Line {
            name: format!("{} allocated", r.name),
            color: r.color.clone(),
            x: t.points.iter().map(|p| p.ops as f64).collect(),
            v: t.points.iter().map(|p| p.allocated_bytes).collect(),
            dashed: true,
        });
    }
    out
}

/// The chart's JSON: `replays` as lines, `marks`, and the capacity with its label.
pub fn lines_json(
    replays: &[Replayed<'_>],
    marks: &[LinesMark],
    capacity: Option<(u64, String)>,
) -> Result<String, ReportError> {
    let data = LinesData {
        x: [],
        applied: [],
        series: [],
        other: false,
        live_blocks: [],
        stacks: [],
        reserved: Empty { x: [], v: [] },
        allocated: Empty { x: [], v: [] },
        lines: lines(replays),
        marks: marks.iter().map(|m| MarkOut { mark: m, x: m.state as f64 }).collect(),
        capacity: capacity.as_ref().map(|c| c.0),
        capacity_label: capacity.map(|c| c.1),
        time: None,
        x_desc: "trace entries applied (the replays line up entry by entry)",
        entries_per_column: 1,
    };
    script_json(&data)
}

/// JSON for a `<script type="application/json">`: `<`, `>` and `&` escaped so
/// nothing in a frame's text can end the element.
pub(crate) fn script_json(value: &impl Serialize) -> Result<String, ReportError> {
    let json = serde_json::to_string(value).map_err(|e| ReportError::Template { reason: e.to_string() })?;
    Ok(json.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026"))
}

/// Each replay's reserved peak as a mark, named by `name`.
pub fn peak_marks(replays: &[Replayed<'_>]) -> Vec<LinesMark> {
    replays
        .iter()
        .filter_map(|r| {
            let p = r.timeline.points.iter().max_by_key(|p| (p.reserved_bytes, std::cmp::Reverse(p.reserved_ops)))?;
            Some(LinesMark {
                kind: "reserved",
                state: p.reserved_ops,
                bytes: p.reserved_bytes,
                request: None,
                label: format!(
                    "{}: peak reserved {} after {} entries",
                    r.name,
                    fmt_bytes(p.reserved_bytes),
                    p.reserved_ops
                ),
                short: format!("{} peak", r.name),
                color: Some(r.color.clone()),
            })
        })
        .collect()
}
