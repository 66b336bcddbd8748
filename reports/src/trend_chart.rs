//! The trend chart (`Chart::Trend`): one figure over the runs of the history,
//! a point per run (x: the run's id), the points joined, each change point
//! marked by a red vertical line at the run where the new level starts, with
//! "step at run N" written beside it. The y axis is in the figure's unit
//! (binary bytes for `_bytes`, ns/µs/ms/s for times).

use plotters::coord::Shift;
use plotters::prelude::*;
use vramlab_display::format::{fmt_bytes, fmt_ns};

use crate::canvas::FAMILY;
use crate::history::Series;

/// The change-point mark's colour (`#C81E1E` in the SVG).
pub const STEP_COLOR: RGBColor = RGBColor(200, 30, 30);
const LINE_COLOR: RGBColor = RGBColor(31, 100, 180);

/// How a figure's values read: time (ns), bytes, or a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrendUnit {
    Nanoseconds,
    Bytes,
    Plain,
}

impl TrendUnit {
    /// The unit of a history series, from its name (`… time`, `…_ns`, `…_bytes`).
    pub fn of(series_name: &str) -> TrendUnit {
        if series_name.ends_with(" time") || series_name.ends_with("_ns") {
            TrendUnit::Nanoseconds
        } else if series_name.ends_with("_bytes") {
            TrendUnit::Bytes
        } else {
            TrendUnit::Plain
        }
    }

    /// A value in words, exact enough for a label.
    pub fn fmt(self, v: f64) -> String {
        match self {
            TrendUnit::Nanoseconds => fmt_ns(v),
            TrendUnit::Bytes => fmt_bytes(v.max(0.0) as u64),
            TrendUnit::Plain => format!("{v:.4}"),
        }
    }

    /// The axis divisor and its name for values up to `max`.
    fn axis(self, max: f64) -> (f64, &'static str) {
        match self {
            TrendUnit::Bytes => match max {
                m if m >= (1u64 << 30) as f64 => ((1u64 << 30) as f64, "GiB"),
                m if m >= (1u64 << 20) as f64 => ((1u64 << 20) as f64, "MiB"),
                m if m >= 1024.0 => (1024.0, "KiB"),
                _ => (1.0, "bytes"),
            },
            TrendUnit::Nanoseconds => match max {
                m if m >= 1e9 => (1e9, "s"),
                m if m >= 1e6 => (1e6, "ms"),
                m if m >= 1e3 => (1e3, "µs"),
                _ => (1.0, "ns"),
            },
            TrendUnit::Plain => (1.0, "value"),
        }
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws `series` (at least one point) with its change points.
pub fn draw_trend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, series: &Series) -> DrawResult<DB> {
    let unit = TrendUnit::of(&series.name);
    let values: Vec<f64> = series.points.iter().map(|p| p.value).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (div, unit_name) = unit.axis(hi.abs().max(lo.abs()));
    // A flat series gets a band of ±10 % (or ±1) around its value.
    let pad = if hi > lo { (hi - lo) * 0.15 } else { (hi.abs() * 0.1).max(1.0) };
    let (y0, y1) = ((lo - pad) / div, (hi + pad) / div);
    let first = series.points.first().map_or(0, |p| p.run_id) as f64;
    let last = series.points.last().map_or(0, |p| p.run_id) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((first - 0.5)..(last + 0.5), y0..y1)?;
    // Runs are integers: only whole-number ticks are labelled.
    let run_label = |x: &f64| if x.fract() == 0.0 { format!("{x:.0}") } else { String::new() };
    chart
        .configure_mesh()
        .x_desc("run")
        .y_desc(match unit {
            TrendUnit::Bytes => format!("memory ({unit_name})"),
            TrendUnit::Nanoseconds => format!("time ({unit_name})"),
            TrendUnit::Plain => unit_name.to_owned(),
        })
        .x_labels(series.points.len().clamp(2, 12))
        .x_label_formatter(&run_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()?;
    let points: Vec<(f64, f64)> = series.points.iter().map(|p| (p.run_id as f64, p.value / div)).collect();
    chart.draw_series(LineSeries::new(points.clone(), LINE_COLOR.stroke_width(2)))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, LINE_COLOR.filled())))?;
    for &i in &series.change_points {
        let Some(p) = series.points.get(i) else { continue };
        let x = p.run_id as f64;
        chart.draw_series(std::iter::once(PathElement::new([(x, y0), (x, y1)], STEP_COLOR.stroke_width(2))))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("step at run {}: {}", p.run_id, unit.fmt(p.value)),
            (x, y1 - (y1 - y0) * 0.04),
            (FAMILY, 13).into_font().color(&STEP_COLOR),
        )))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charts::Chart;
    use crate::history::{Point, change_points};

    fn series(name: &str, values: &[f64]) -> Series {
        let points: Vec<Point> = values
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                run_id: i as i64 + 1,
                started_at: format!("2026-11-{:02}T00:00:00Z", i + 1),
                git_commit: None,
                environment: "test".into(),
                value,
            })
            .collect();
        Series { name: name.into(), change_points: change_points(values), points }
    }

    fn attr(line: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let i = line.find(&key).unwrap() + key.len();
        line[i..].split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_step_in_memory_is_marked_at_its_run() {
        // 20 MiB for runs 1–8, then 22 MiB for runs 9–12: the step starts at run 9.
        let mut v = vec![20.0 * 1048576.0; 8];
        v.extend([22.0 * 1048576.0; 4]);
        let s = series("memory/frag (cpu) memory.peak_allocated_bytes", &v);
        assert_eq!(s.change_points, vec![8]);
        let svg = Chart::Trend { title: "memory: peak allocated".into(), series: &s }.svg().unwrap();
        assert!(svg.contains("memory: peak allocated"));
        assert!(svg.contains("step at run 9: 22.00 MiB"), "the mark names the run and the new level");
        for run in ["\n1\n", "\n12\n"] {
            assert!(svg.contains(run), "runs are labelled on the x axis: {run:?}");
        }
        assert!(svg.contains("\nmemory (MiB)\n"), "the y axis is in MiB");
        // One point per run, in order, the last four higher (smaller y) than the first eight.
        let circles: Vec<(f64, f64)> =
            svg.lines().filter(|l| l.contains("<circle")).map(|l| (attr(l, "cx"), attr(l, "cy"))).collect();
        assert_eq!(circles.len(), 12);
        assert!(circles.windows(2).all(|w| w[1].0 > w[0].0), "left to right");
        assert!(circles[..8].iter().all(|c| (c.1 - circles[0].1).abs() < 0.5));
        assert!(circles[8..].iter().all(|c| c.1 < circles[0].1 - 10.0));
        // The red mark is a vertical line through the 9th point.
        let mark = svg.lines().find(|l| l.contains("<polyline") && l.contains("#C81E1E")).expect("the step mark");
        let pts = mark.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        let xs: Vec<f64> = pts.split_whitespace().map(|p| p.split(',').next().unwrap().parse().unwrap()).collect();
        assert_eq!(xs.len(), 2);
        assert!((xs[0] - xs[1]).abs() < 0.5, "vertical");
        assert!((xs[0] - circles[8].0).abs() < 1.0, "at run 9: {} vs {}", xs[0], circles[8].0);
    }

    #[test]
    fn a_flat_series_has_no_mark_and_times_read_in_time_units() {
        let s = series("allocator/cached (cpu) time", &[1500.0, 1500.0, 1500.0]);
        assert!(s.change_points.is_empty());
        let svg = Chart::Trend { title: "t".into(), series: &s }.svg().unwrap();
        assert!(!svg.contains("#C81E1E") && !svg.contains("step at run"));
        assert!(svg.contains("\ntime (µs)\n"), "1.5 µs reads in µs");
        assert_eq!(svg.lines().filter(|l| l.contains("<circle")).count(), 3);
    }

    #[test]
    fn units_from_names() {
        assert_eq!(TrendUnit::of("a/b (cpu) time"), TrendUnit::Nanoseconds);
        assert_eq!(TrendUnit::of("a/b (cpu) memory.peak_reserved_bytes"), TrendUnit::Bytes);
        assert_eq!(TrendUnit::of("a/b (cpu) bandwidth_gbps"), TrendUnit::Plain);
    }
}
