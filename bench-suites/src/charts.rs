//! Charts as data: what a suite declares to show its claim — the kind (lines
//! over linear or log axes, grouped horizontal bars, or a chart that could not
//! be drawn and says why), the series, the axes' units and scales, reference
//! lines and labelled points, and the notes under the chart. A suite computes
//! its [`ChartSpec`]s from its own results ([`Suite::charts`]); the runner
//! stores them in [`SuiteResult::charts`], so `results.json` carries them and
//! the report draws any declared chart from the data alone, knowing no suite.
//! [`declared_charts`] is what the report asks: the stored charts, or for a
//! result without any (a file written before suites declared charts), the
//! charts its suite in this build computes from the cases. Also the readers
//! the suites' chart code shares (a case's metric, parameter, median, why it
//! has no numbers) and the number formats of chart labels ([`fmt_bytes`],
//! [`fmt_ns`]), which the report uses too.
//!
//! [`Suite::charts`]: crate::Suite::charts

use serde::{Deserialize, Serialize};
use vramlab_engine::alloc::consts::{GIB, KIB, MIB, TIB};

use crate::schema::{CaseResult, Outcome, SuiteResult};

/// One chart a suite declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartSpec {
    /// The chart's files are named after it (after the suite's name), so it is
    /// unique within the suite: `time-by-size`, `peak`.
    pub name: String,
    pub title: String,
    pub kind: ChartKind,
}

/// What the chart draws.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChartKind {
    /// Lines over an x axis.
    Lines(LinesSpec),
    /// Horizontal bars in named groups.
    Bars(BarsSpec),
    /// Nothing to draw here (e.g. the GPU side without a GPU): the reason is
    /// written in the chart area.
    Unavailable { reason: String },
}

/// How an axis (or a bar chart's values) is labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Shown as ns, µs, ms or s.
    Nanoseconds,
    /// Shown in binary units (KiB, MiB, GiB).
    Bytes,
    /// Gigabytes (10⁹ bytes) per second.
    GigabytesPerSecond,
    /// A ratio, shown as `2.5×`.
    Ratio,
    /// Items (samples) per second.
    PerSecond,
    /// A plain count (batch size, workers, calls).
    Count,
    /// Floating-point operations.
    Flop,
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    Linear,
    Log,
}

/// One axis: what it shows (its label), its unit and its scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AxisSpec {
    pub label: String,
    pub unit: Unit,
    pub scale: Scale,
}

impl AxisSpec {
    pub fn new(label: impl Into<String>, unit: Unit, scale: Scale) -> AxisSpec {
        AxisSpec { label: label.into(), unit, scale }
    }
}

/// One line: points `(x, y)` joined in order, each with a marker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed with hollow markers (e.g. the second of a pair).
    #[serde(default)]
    pub dashed: bool,
    /// Colour index into the report's palette (lines of one colour belong together).
    #[serde(default)]
    pub color: usize,
}

/// A reference value on an axis, drawn as a dashed line across the plot with its label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub at: f64,
    pub label: String,
}

impl Marker {
    pub fn new(at: f64, label: impl Into<String>) -> Marker {
        Marker { at, label: label.into() }
    }
}

/// A point drawn large with its label (e.g. the batch that ran out of memory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelledPoint {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

/// Lines over an x axis, with reference lines, labelled points and notes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinesSpec {
    pub x: AxisSpec,
    pub y: AxisSpec,
    pub series: Vec<LineSeries>,
    /// Vertical lines at x values (a crossover, a break-even point).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub x_marks: Vec<Marker>,
    /// Horizontal lines at y values (a capacity).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub y_marks: Vec<Marker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<LabelledPoint>,
    /// Written under the plot (e.g. which side is not available here and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl LinesSpec {
    /// Lines over `x` and `y`, with no marks or notes yet.
    pub fn new(x: AxisSpec, y: AxisSpec, series: Vec<LineSeries>) -> LinesSpec {
        LinesSpec { x, y, series, x_marks: vec![], y_marks: vec![], points: vec![], notes: vec![] }
    }
}

/// One bar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BarSpec {
    pub label: String,
    pub value: f64,
    /// Series index: the bar's colour and legend entry.
    #[serde(default)]
    pub series: usize,
    /// Drawn highlighted with this text after the value (e.g. "chosen").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<String>,
}

impl BarSpec {
    pub fn new(label: impl Into<String>, value: f64, series: usize) -> BarSpec {
        BarSpec { label: label.into(), value, series, mark: None }
    }
}

/// Bars under a group heading (no heading when the name is empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BarGroupSpec {
    pub name: String,
    pub bars: Vec<BarSpec>,
}

/// Horizontal bars in groups, one unit, a legend of series names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BarsSpec {
    pub unit: Unit,
    /// Legend names by series index; no legend when there is at most one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<String>,
    pub groups: Vec<BarGroupSpec>,
    /// A value drawn as a vertical dashed line (e.g. 1× for a speedup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Marker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Bar lengths on a log scale (values spanning decades).
    #[serde(default)]
    pub log: bool,
}

impl BarsSpec {
    /// Bars of `unit` in `groups`, linear, without legend, reference or notes.
    pub fn new(unit: Unit, groups: Vec<BarGroupSpec>) -> BarsSpec {
        BarsSpec { unit, series: vec![], groups, reference: None, notes: vec![], log: false }
    }
}

impl ChartSpec {
    pub fn lines(name: impl Into<String>, title: impl Into<String>, lines: LinesSpec) -> ChartSpec {
        ChartSpec { name: name.into(), title: title.into(), kind: ChartKind::Lines(lines) }
    }

    pub fn bars(name: impl Into<String>, title: impl Into<String>, bars: BarsSpec) -> ChartSpec {
        ChartSpec { name: name.into(), title: title.into(), kind: ChartKind::Bars(bars) }
    }

    pub fn unavailable(name: impl Into<String>, title: impl Into<String>, reason: impl Into<String>) -> ChartSpec {
        ChartSpec { name: name.into(), title: title.into(), kind: ChartKind::Unavailable { reason: reason.into() } }
    }
}

/// The charts `result` declares: those stored with it, or, for a result that
/// stores none (written before suites declared charts, or by a suite that
/// declares none), those its suite — found by name among this build's suites —
/// computes from the cases. Empty when the suite declares no chart (or is not
/// one of this build's): the report then draws its generic charts.
pub fn declared_charts(result: &SuiteResult) -> Vec<ChartSpec> {
    if !result.charts.is_empty() {
        return result.charts.clone();
    }
    crate::suite_by_name(&result.name).map(|s| s.charts(result)).unwrap_or_default()
}

// ------------------------------------------------------------------ formats

/// The binary units [`fmt_bytes`] writes (and `vramlab`'s size arguments
/// accept), each with its size in bytes, smallest first.
pub const BYTE_UNITS: [(&str, u64); 5] = [("B", 1), ("KiB", KIB), ("MiB", MIB), ("GiB", GIB), ("TiB", TIB)];

/// `bytes` in the largest binary unit it reaches, two decimals: `512 B`,
/// `1.50 KiB`, `512.00 MiB`, `24.00 GiB`, `5.00 TiB`. The one byte format of
/// vramlab: chart labels, pages, summaries and the command line use it.
pub fn fmt_bytes(bytes: u64) -> String {
    let (name, unit) = BYTE_UNITS.iter().rev().find(|(_, u)| bytes >= *u).copied().unwrap_or(BYTE_UNITS[0]);
    if unit == 1 { format!("{bytes} B") } else { format!("{:.2} {name}", bytes as f64 / unit as f64) }
}

/// Nanoseconds in the largest fitting unit: `850 ns`, `12.3 µs`, `4.56 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    match ns.abs() {
        v if v < 1e3 => format!("{ns:.0} ns"),
        v if v < 1e6 => format!("{:.2} µs", ns / 1e3),
        v if v < 1e9 => format!("{:.2} ms", ns / 1e6),
        _ => format!("{:.2} s", ns / 1e9),
    }
}

// ------------------------------------------- reading cases for the charts

/// Metric `name` of `c`, when finite.
pub(crate) fn metric(c: &CaseResult, name: &str) -> Option<f64> {
    c.metrics.get(name).copied().filter(|v| v.is_finite())
}

/// Parameter `name` of `c`, when a string.
pub(crate) fn param<'a>(c: &'a CaseResult, name: &str) -> Option<&'a str> {
    c.params.get(name).and_then(|v| v.as_str())
}

/// Parameter `name` of `c`, when a number.
pub(crate) fn param_f64(c: &CaseResult, name: &str) -> Option<f64> {
    c.params.get(name).and_then(|v| v.as_f64())
}

/// The median time of `c`, when timed.
pub(crate) fn median(c: &CaseResult) -> Option<f64> {
    c.timing.as_ref().map(|t| t.median_ns).filter(|v| v.is_finite())
}

/// The case of `suite` named `name`.
pub(crate) fn case<'a>(suite: &'a SuiteResult, name: &str) -> Option<&'a CaseResult> {
    suite.cases.iter().find(|c| c.name == name)
}

/// Why a case has no numbers, when it has none.
pub(crate) fn why_not(c: &CaseResult) -> Option<String> {
    match &c.outcome {
        Outcome::Ok => None,
        Outcome::NotAvailable { reason } => Some(format!("not available: {reason}")),
        Outcome::Failed { message } => Some(format!("failed: {message}")),
    }
}

/// The first reason among `cases` that did not run, for a chart's note.
pub(crate) fn first_reason<'a>(cases: impl IntoIterator<Item = &'a CaseResult>) -> Option<String> {
    cases.into_iter().find_map(|c| why_not(c).map(|w| format!("{}: {w}", c.name)))
}

/// Distinct values of a parameter, in the order cases list them.
pub(crate) fn distinct<'a>(cases: impl IntoIterator<Item = &'a CaseResult>, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cases {
        if let Some(v) = param(c, name)
            && !out.iter().any(|o| o == v)
        {
            out.push(v.to_owned());
        }
    }
    out
}

/// Results to test the suites' chart code on.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;

    use crate::harness::summarize;
    use crate::schema::{CaseResult, Outcome, SuiteResult};

    use super::{ChartKind, ChartSpec};

    pub(crate) fn case(name: &str, params: &[(&str, serde_json::Value)], metrics: &[(&str, f64)]) -> CaseResult {
        CaseResult {
            name: name.into(),
            params: params.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
            outcome: Outcome::Ok,
            timing: None,
            metrics: metrics.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect::<BTreeMap<_, _>>(),
            memory: None,
            notes: vec![],
            duration_ns: 1,
            timeline: None,
            categories: None,
            kernels: Vec::new(),
        }
    }

    pub(crate) fn timed(mut c: CaseResult, ns: f64) -> CaseResult {
        c.timing = Some(summarize(vec![ns; 5], 1, "host"));
        c
    }

    pub(crate) fn suite(name: &str, cases: Vec<CaseResult>) -> SuiteResult {
        SuiteResult {
            name: name.into(),
            description: "test".into(),
            device: "cpu".into(),
            duration_ns: 1,
            cases,
            findings: vec![],
            charts: vec![],
        }
    }

    /// The chart called `name` among `charts`.
    pub(crate) fn chart<'a>(charts: &'a [ChartSpec], name: &str) -> &'a ChartKind {
        &charts.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no chart {name}")).kind
    }
}

#[cfg(test)]
mod tests {
    use super::testing::suite;
    use super::*;

    #[test]
    fn a_chart_round_trips_through_json() {
        let mut lines = LinesSpec::new(
            AxisSpec::new("size (log)", Unit::Bytes, Scale::Log),
            AxisSpec::new("time", Unit::Nanoseconds, Scale::Linear),
            vec![LineSeries { name: "a".into(), points: vec![(1.0, 2.0), (4.0, 3.0)], dashed: true, color: 1 }],
        );
        lines.x_marks.push(Marker::new(2.0, "here"));
        lines.points.push(LabelledPoint { x: 4.0, y: 3.0, label: "end".into() });
        let mut bars = BarsSpec::new(Unit::Ratio, vec![BarGroupSpec { name: "g".into(), bars: vec![] }]);
        bars.reference = Some(Marker::new(1.0, "1×"));
        let specs = vec![
            ChartSpec::lines("l", "lines", lines),
            ChartSpec::bars("b", "bars", bars),
            ChartSpec::unavailable("u", "nothing", "no GPU"),
        ];
        let json = serde_json::to_string(&specs).unwrap();
        assert!(json.contains(r#""kind":{"type":"lines","x":{"label":"size (log)","unit":"bytes","scale":"log"}"#));
        assert!(json.contains(r#""kind":{"type":"unavailable","reason":"no GPU"}"#), "{json}");
        assert_eq!(serde_json::from_str::<Vec<ChartSpec>>(&json).unwrap(), specs);
    }

    #[test]
    fn stored_charts_come_first_then_the_suites_own() {
        // No stored charts: the suite of that name computes them from the cases.
        let s = suite("input-pipeline", vec![]);
        let declared = declared_charts(&s);
        assert_eq!(declared.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["throughput"]);
        // Stored charts are the ones drawn.
        let mut s = suite("input-pipeline", vec![]);
        s.charts = vec![ChartSpec::unavailable("mine", "stored", "as stored")];
        assert_eq!(declared_charts(&s), s.charts);
        // A suite this build does not know, or one that declares none, has none.
        assert!(declared_charts(&suite("not-a-suite", vec![])).is_empty());
        assert!(declared_charts(&suite("devices", vec![])).is_empty());
    }
}
