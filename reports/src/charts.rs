//! Charts drawn with plotters, each as an SVG string (inlined in the HTML
//! report) and a PNG file (bitmap backend). Text uses DejaVu Sans, bundled into
//! the binary through `ab_glyph` — no system font library. A chart without data
//! says so in its area instead of drawing empty axes. The kinds: memory
//! timelines and category stacks (plotters' cartesian charts), and two drawn
//! on our own pixel mapping so every mark sits exactly where tests expect it:
//! line charts (linear or log axes, markers, vertical and horizontal reference
//! lines, labelled points) and grouped horizontal bars (highlighted bars, a
//! reference value).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use vramlab_display::chart::{BarsSpec, ChartKind, ChartSpec, LinesSpec};
use vramlab_display::format::fmt_bytes;
use vramlab_suites::{CategoryStack, MemoryTimeline};

use crate::canvas::{DrawResult, FAMILY, HEIGHT, WIDTH, draw_legend, draw_message, palette, register_font};
use crate::plot::{draw_grouped, draw_lines};
use crate::{ReportError, write_unsynced};

/// What a chart shows; drawn to any plotters backend.
#[derive(Debug, Clone)]
pub enum Chart<'a> {
    /// Allocated and reserved bytes over time, phase bands, the peak marked.
    Timeline { title: String, timeline: &'a MemoryTimeline },
    /// Allocated bytes by category, stacked.
    Categories { title: String, stack: &'a CategoryStack },
    /// Lines over x (linear or log axes) with markers and reference lines,
    /// as the chart model has them.
    Lines { title: String, lines: LinesSpec },
    /// Horizontal bars in named groups (e.g. median time per case), as the
    /// chart model has them.
    Bars { title: String, bars: BarsSpec },
    /// No data here: the reason is written in the chart area.
    Unavailable { title: String, reason: String },
    /// A figure over the runs of the history, change points marked (`trend_chart.rs`).
    Trend { title: String, series: &'a crate::history::Series },
}

impl Chart<'_> {
    /// A chart of the model, drawn as it declares.
    pub fn declared(spec: ChartSpec) -> Chart<'static> {
        let title = spec.title;
        match spec.kind {
            ChartKind::Lines(lines) => Chart::Lines { title, lines },
            ChartKind::Bars(bars) => Chart::Bars { title, bars },
            ChartKind::Unavailable { reason } => Chart::Unavailable { title, reason },
        }
    }

    /// The chart as an SVG document.
    pub fn svg(&self) -> Result<String, ReportError> {
        register_font();
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw(&root).map_err(|reason| ReportError::Chart { chart: self.title().to_owned(), reason })?;
            root.present().map_err(|e| ReportError::Chart { chart: self.title().to_owned(), reason: e.to_string() })?;
        }
        Ok(out)
    }

    /// The chart as a PNG file at `path` (replaced whole, never half-written).
    pub fn write_png(&self, path: &Path) -> Result<(), ReportError> {
        let err =
            |reason: String| ReportError::Chart { chart: format!("{} ({})", self.title(), path.display()), reason };
        write_unsynced(path, &self.png().map_err(err)?)
    }

    /// The chart as PNG bytes: drawn into an RGB buffer, then encoded by the
    /// `png` crate with zlib's default level and no row filter. Its `Fast`
    /// mode (fdeflate, with the Sub filter) wrote a memory timeline in about
    /// 300 KB where zlib level 6 unfiltered takes about 30 KB: flat colours
    /// repeat along rows, which the filter hid from the compressor.
    pub fn png(&self) -> Result<Vec<u8>, String> {
        register_font();
        let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(|e| e.to_string())?;
        }
        let mut out = Vec::with_capacity(64 << 10);
        let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Default);
        encoder.set_filter(png::FilterType::NoFilter);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
        Ok(out)
    }

    pub fn title(&self) -> &str {
        match self {
            Chart::Timeline { title, .. }
            | Chart::Categories { title, .. }
            | Chart::Lines { title, .. }
            | Chart::Bars { title, .. }
            | Chart::Unavailable { title, .. }
            | Chart::Trend { title, .. } => title,
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match self {
            Chart::Timeline { title, timeline } => draw_timeline(root, title, timeline),
            Chart::Categories { title, stack } => draw_categories(root, title, stack),
            Chart::Lines { title, lines } => draw_lines(root, title, lines),
            Chart::Bars { title, bars } => draw_grouped(root, title, bars),
            Chart::Unavailable { title, reason } => draw_message(root, title, reason),
            Chart::Trend { title, series } => crate::trend_chart::draw_trend(root, title, series),
        }
        .map_err(|e| e.to_string())
    }
}

/// A unit for a byte axis: divisor and suffix (binary).
fn byte_unit(max: u64) -> (f64, &'static str) {
    match max {
        m if m >= 1 << 30 => ((1u64 << 30) as f64, "GiB"),
        m if m >= 1 << 20 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 1 << 10 => (1024.0, "KiB"),
        _ => (1.0, "B"),
    }
}

/// A unit for a time axis: divisor and suffix.
fn time_unit(max_ns: u64) -> (f64, &'static str) {
    match max_ns {
        m if m >= 10_000_000_000 => (1e9, "s"),
        m if m >= 10_000_000 => (1e6, "ms"),
        m if m >= 10_000 => (1e3, "µs"),
        _ => (1.0, "ns"),
    }
}

/// Step points: each value held until the next time.
fn steps(time_ns: &[u64], bytes: &[u64], tdiv: f64, bdiv: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(time_ns.len() * 2);
    for i in 0..time_ns.len().min(bytes.len()) {
        let t = time_ns[i] as f64 / tdiv;
        if i > 0 {
            out.push((t, bytes[i - 1] as f64 / bdiv));
        }
        out.push((t, bytes[i] as f64 / bdiv));
    }
    out
}

const PHASE_COLORS: [RGBColor; 4] =
    [RGBColor(222, 235, 247), RGBColor(253, 235, 210), RGBColor(229, 245, 224), RGBColor(239, 229, 245)];

/// A chart whose axes are both `f64` ranges.
type TimeChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// The axes every chart of memory over time shares: a caption, time from 0 to
/// `x.0` along x, bytes from 0 to `y.0` up y, each with its description.
fn time_axes<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: (f64, &str),
    y: (f64, &str),
) -> Result<TimeChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 20))
        .margin(12)
        // Room for the last time label, centred on the plot's right edge.
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x.0, 0f64..y.0)?;
    chart
        .configure_mesh()
        .x_desc(x.1)
        .y_desc(y.1)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    Ok(chart)
}

fn draw_timeline<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, t: &MemoryTimeline) -> DrawResult<DB> {
    let max_bytes = t.reserved.bytes.iter().chain(&t.allocated.bytes).copied().max().unwrap_or(0).max(1);
    let (bdiv, bunit) = byte_unit(max_bytes);
    let (tdiv, tunit) = time_unit(t.duration_ns);
    let x_max = (t.duration_ns.max(1) as f64) / tdiv;
    let y_max = max_bytes as f64 / bdiv * 1.12;
    let mut chart = time_axes(root, title, (x_max, &format!("time ({tunit})")), (y_max, &format!("memory ({bunit})")))?;
    // Top-level phases as bands, named at their top.
    for (k, p) in t.phases.iter().filter(|p| p.depth == 1).enumerate() {
        let (x0, x1) = (p.start_ns as f64 / tdiv, p.end_ns as f64 / tdiv);
        let color = PHASE_COLORS[k % PHASE_COLORS.len()];
        chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x1, y_max)], color.filled())))?;
        chart.draw_series(std::iter::once(Text::new(
            p.name.clone(),
            (x0, y_max * 0.985),
            (FAMILY, 12).into_font().color(&RGBColor(90, 90, 90)),
        )))?;
    }
    let reserved = palette(1);
    let allocated = palette(0);
    chart
        .draw_series(LineSeries::new(
            steps(&t.reserved.time_ns, &t.reserved.bytes, tdiv, bdiv),
            reserved.stroke_width(2),
        ))?
        .label("reserved")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], reserved.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            steps(&t.allocated.time_ns, &t.allocated.bytes, tdiv, bdiv),
            allocated.stroke_width(2),
        ))?
        .label("allocated")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], allocated.stroke_width(2)));
    let peak = (t.peak_time_ns as f64 / tdiv, t.peak_allocated_bytes as f64 / bdiv);
    let red = RGBColor(200, 30, 30);
    chart.draw_series(std::iter::once(Circle::new(peak, 5, red.filled())))?;
    chart.draw_series(std::iter::once(Text::new(
        format!("peak {}", fmt_bytes(t.peak_allocated_bytes)),
        (peak.0, peak.1 + y_max * 0.05),
        (FAMILY, 13).into_font().color(&red),
    )))?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn draw_categories<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    s: &CategoryStack,
) -> DrawResult<DB> {
    let n = s.time_ns.len();
    let totals: Vec<u64> =
        (0..n).map(|i| s.by_category_bytes.values().map(|v| v.get(i).copied().unwrap_or(0)).sum()).collect();
    let max_bytes = totals.iter().copied().max().unwrap_or(0).max(1);
    let (bdiv, bunit) = byte_unit(max_bytes);
    let (tdiv, tunit) = time_unit(s.time_ns.last().copied().unwrap_or(1));
    let x_max = s.time_ns.last().copied().unwrap_or(1).max(1) as f64 / tdiv;
    let y_max = max_bytes as f64 / bdiv * 1.1;
    let mut chart =
        time_axes(root, title, (x_max, &format!("time ({tunit})")), (y_max, &format!("allocated ({bunit})")))?;
    // Draw cumulative sums from the top down so each band covers the ones below.
    let cats: Vec<(&String, &Vec<u64>)> = s.by_category_bytes.iter().collect();
    let mut cumulative = vec![0u64; n];
    let mut layers = Vec::new();
    for (name, v) in &cats {
        for (i, c) in cumulative.iter_mut().enumerate() {
            *c += v.get(i).copied().unwrap_or(0);
        }
        layers.push((name.to_string(), cumulative.clone()));
    }
    for (k, (name, top)) in layers.iter().enumerate().rev() {
        let color = palette(k);
        chart
            .draw_series(AreaSeries::new(steps(&s.time_ns, top, tdiv, bdiv), 0.0, color.mix(0.85)).border_style(color))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

#[cfg(test)]
pub(crate) mod tests {
    use vramlab_suites::{PhaseBand, Series};

    use super::*;

    pub(crate) fn known_timeline() -> MemoryTimeline {
        MemoryTimeline {
            device: "cpu:0".into(),
            duration_ns: 10_000_000,
            allocated: Series {
                time_ns: vec![0, 2_000_000, 5_000_000, 8_000_000],
                bytes: vec![0, 1 << 20, 3 << 20, 0],
            },
            reserved: Series { time_ns: vec![0, 2_000_000, 8_000_000], bytes: vec![0, 4 << 20, 4 << 20] },
            active: Series::default(),
            phases: vec![PhaseBand {
                name: "forward".into(),
                path: "forward".into(),
                depth: 1,
                start_ns: 1_000_000,
                end_ns: 6_000_000,
            }],
            peak_allocated_bytes: 3 << 20,
            peak_time_ns: 5_000_000,
            peak_phase: Some("forward".into()),
            events: 4,
        }
    }

    #[test]
    fn timeline_svg_marks_the_peak_at_its_value() {
        let t = known_timeline();
        let svg = Chart::Timeline { title: "t".into(), timeline: &t }.svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60]);
        assert!(svg.contains("peak 3.00 MiB"));
        // The y axis runs 0..4 MiB * 1.12 over the plot; the marker's circle sits
        // at 3 MiB: find it and check its height against the axis labels' scale.
        let circle = svg.lines().find(|l| l.contains("<circle")).expect("a peak marker");
        let cy: f64 = attr(circle, "cy");
        let cx: f64 = attr(circle, "cx");
        // The plot spans from the label "0" of the y axis to the top margin:
        // with a 4.48 MiB axis, 3 MiB lies at 3/4.48 of the plot's height.
        let (top, bottom) = plot_y_extent(&svg);
        let frac = (bottom - cy) / (bottom - top);
        assert!((frac - 3.0 / 4.48).abs() < 0.02, "peak at {frac} of the height");
        let (left, right) = plot_x_extent(&svg);
        let xfrac = (cx - left) / (right - left);
        assert!((xfrac - 0.5).abs() < 0.02, "peak at {xfrac} of the width");
    }

    fn attr(line: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let i = line.find(&key).unwrap() + key.len();
        line[i..].split('"').next().unwrap().parse().unwrap()
    }

    /// The plot area is the background rectangle of the phase band: it spans the
    /// y range from 0 to the axis top.
    fn plot_y_extent(svg: &str) -> (f64, f64) {
        let band = svg.lines().find(|l| l.contains("<rect") && l.contains("#DEEBF7")).expect("the phase band");
        let y = attr(band, "y");
        (y, y + attr(band, "height"))
    }

    fn plot_x_extent(svg: &str) -> (f64, f64) {
        // The band covers 1..6 ms of a 10 ms axis.
        let band = svg.lines().find(|l| l.contains("<rect") && l.contains("#DEEBF7")).expect("the phase band");
        let (x, w) = (attr(band, "x"), attr(band, "width"));
        let unit = w / 5.0;
        (x - unit, x - unit + 10.0 * unit)
    }

    #[test]
    fn png_decodes_at_the_declared_size() {
        let t = known_timeline();
        let dir = std::env::temp_dir().join(format!("vramlab-charts-{}", std::process::id()));
        let path = dir.join("t.png");
        Chart::Timeline { title: "t".into(), timeline: &t }.write_png(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, at offsets 16 and 20.
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), WIDTH);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), HEIGHT);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unavailable_chart_says_why() {
        let svg = Chart::Unavailable { title: "GPU".into(), reason: "no CUDA driver".into() }.svg().unwrap();
        assert!(svg.contains("No data here: no CUDA driver"));
        assert!(!svg.contains("<polyline"));
    }
}
