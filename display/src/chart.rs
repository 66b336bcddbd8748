//! Charts as data: the one chart model. A suite declares what shows its claim
//! as [`ChartSpec`]s (stored in `results.json`), the report draws any of them
//! from the data alone, and the replay and what-if pages build theirs from the
//! same types. A chart is lines over linear or log axes ([`LinesSpec`]: series,
//! step lines, reference lines, labelled points, notes), grouped horizontal
//! bars ([`BarsSpec`]), or a chart that could not be drawn and says why. Each
//! value carries its [`Unit`], which writes it as a label ([`Unit::fmt`]) or a
//! tick ([`Unit::tick`]); series pick their colour from [`PALETTE`].

use serde::{Deserialize, Serialize};

use crate::format::{GIB, KIB, MIB, fmt_bytes, fmt_ns};

/// One chart a suite declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartSpec {
    /// The chart's files are named after it (after the suite's name), so it is
    /// unique within the suite: `time-by-size`, `peak`.
    pub name: String,
    pub title: String,
    pub kind: ChartKind,
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

/// The colours of series, bars and coloured points, by index (wrapping
/// around): Tableau's ten, then black and a light blue.
pub const PALETTE: [(u8, u8, u8); 12] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (0, 0, 0),
    (120, 180, 255),
];

/// The palette's colour `i` (wrapping around).
pub fn palette(i: usize) -> (u8, u8, u8) {
    PALETTE[i % PALETTE.len()]
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

impl Unit {
    /// A value as a label beside a bar or a mark.
    pub fn fmt(self, v: f64) -> String {
        match self {
            Unit::Nanoseconds => fmt_ns(v),
            Unit::Bytes => fmt_bytes(v.max(0.0) as u64),
            Unit::GigabytesPerSecond => format!("{} GB/s", sig3(v)),
            Unit::Ratio => format!("{}×", sig3(v)),
            Unit::PerSecond => format!("{}/s", si(v)),
            Unit::Count if v == v.trunc() => format!("{v:.0}"),
            Unit::Count => sig3(v),
            Unit::Flop => format!("{} FLOP", si(v)),
        }
    }

    /// A value as a short tick label: `64 MiB`, `10 µs`, `2×`, `134k`.
    pub fn tick(self, v: f64) -> String {
        match self {
            Unit::Nanoseconds => {
                let (d, u) = match v.abs() {
                    a if a >= 1e9 => (1e9, "s"),
                    a if a >= 1e6 => (1e6, "ms"),
                    a if a >= 1e3 => (1e3, "µs"),
                    _ => (1.0, "ns"),
                };
                format!("{} {u}", sig3(v / d))
            }
            Unit::Bytes => {
                let (d, u) = match v.abs() {
                    a if a >= GIB as f64 => (GIB as f64, "GiB"),
                    a if a >= MIB as f64 => (MIB as f64, "MiB"),
                    a if a >= KIB as f64 => (KIB as f64, "KiB"),
                    _ => (1.0, "B"),
                };
                format!("{} {u}", sig3(v / d))
            }
            Unit::Ratio => format!("{}×", sig3(v)),
            Unit::GigabytesPerSecond => sig3(v),
            Unit::PerSecond | Unit::Count | Unit::Flop => si(v),
        }
    }

    /// Log axes of bytes and counts step by powers of two.
    pub fn binary(self) -> bool {
        matches!(self, Unit::Bytes | Unit::Count)
    }
}

/// Three significant digits, trailing zeros dropped: `2.5`, `120`, `0.0312`.
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() { "0".into() } else { format!("{v}") };
    }
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s }
}

/// SI suffixes (k, M, G, T) for large numbers.
fn si(v: f64) -> String {
    match v.abs() {
        a if a >= 1e12 => format!("{}T", sig3(v / 1e12)),
        a if a >= 1e9 => format!("{}G", sig3(v / 1e9)),
        a if a >= 1e6 => format!("{}M", sig3(v / 1e6)),
        a if a >= 1e4 => format!("{}k", sig3(v / 1e3)),
        _ => sig3(v),
    }
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
    /// Colour index into [`PALETTE`] (lines of one colour belong together).
    #[serde(default)]
    pub color: usize,
    /// A step line: each y held until the next point's x (memory over
    /// time), drawn without markers, as such series have many points.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steps: bool,
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

/// A point drawn large with its label (e.g. the batch that ran out of memory,
/// a peak): in the marks' red, or in the colour of the series it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelledPoint {
    pub x: f64,
    pub y: f64,
    pub label: String,
    /// Colour index into [`PALETTE`]; `None` draws it in the marks' red.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<usize>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(sig3(2.5), "2.5");
        assert_eq!(sig3(120.0), "120");
        assert_eq!(sig3(0.0314159), "0.0314");
        assert_eq!(si(134_299.0), "134k");
        assert_eq!(Unit::Bytes.tick((64u64 << 20) as f64), "64 MiB");
        assert_eq!(Unit::Nanoseconds.tick(10_000.0), "10 µs");
        assert_eq!(Unit::Ratio.fmt(2.0), "2×");
        assert_eq!(Unit::Count.fmt(134_299.0), "134299");
    }

    #[test]
    fn a_chart_round_trips_through_json() {
        let mut lines = LinesSpec::new(
            AxisSpec::new("size (log)", Unit::Bytes, Scale::Log),
            AxisSpec::new("time", Unit::Nanoseconds, Scale::Linear),
            vec![LineSeries {
                name: "a".into(),
                points: vec![(1.0, 2.0), (4.0, 3.0)],
                dashed: true,
                color: 1,
                steps: false,
            }],
        );
        lines.x_marks.push(Marker::new(2.0, "here"));
        lines.points.push(LabelledPoint { x: 4.0, y: 3.0, label: "end".into(), color: None });
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
}
