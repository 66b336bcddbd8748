//! Draws the chart model's line and bar charts (`vramlab_display::chart`) on
//! our own pixel mapping (plotters' drawing areas and elements, no cartesian
//! chart): a [`LinesSpec`] — lines or step lines over linear or log axes with
//! markers, vertical and horizontal reference lines and labelled points — and
//! a [`BarsSpec`] — horizontal bars in named groups with highlighted bars and
//! a reference value (a log chart has a value axis with tick labels; value
//! texts sit on a white ground over the reference line and the axis ends where
//! the longest of them still fits). Owning the mapping keeps tick labels
//! readable on log axes (binary steps for bytes and counts, decades otherwise)
//! and lets tests check where a mark lies ([`line_layout`], [`bar_layout`]).

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, FontTransform};
use vramlab_display::chart::{AxisSpec, BarSpec, BarsSpec, LineSeries, LinesSpec, Scale, Unit};

use crate::canvas::{DrawResult, FAMILY, HEIGHT, WIDTH, draw_message, palette};

const MARK_RED: RGBColor = RGBColor(200, 30, 30);
const GRID: RGBColor = RGBColor(232, 232, 232);
const NOTE_GRAY: RGBColor = RGBColor(90, 90, 90);
const NOTE_H: i32 = 16;
/// Characters per note line (13 px text over the chart's width).
const NOTE_CHARS: usize = 130;

/// Wraps text at about `width` characters a line.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.chars().count() + word.chars().count() > width {
            lines.push(word.to_owned());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

fn note_lines(notes: &[String]) -> Vec<String> {
    notes.iter().flat_map(|n| wrap(n, NOTE_CHARS)).take(4).collect()
}

/// Where values land along one axis, in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AxisMap {
    /// The axis range (log10 of it on a log axis).
    lo: f64,
    hi: f64,
    log: bool,
    binary: bool,
    /// Pixels of `lo` and `hi`.
    p0: f64,
    p1: f64,
}

impl AxisMap {
    fn new(values: &[f64], axis: &AxisSpec, p0: f64, p1: f64) -> Self {
        let finite = || values.iter().copied().filter(|v| v.is_finite());
        let log = axis.scale == Scale::Log;
        let binary = axis.unit.binary();
        let (lo, hi) = if log {
            let pos: Vec<f64> = finite().filter(|v| *v > 0.0).collect();
            let min = pos.iter().copied().fold(f64::INFINITY, f64::min);
            let max = pos.iter().copied().fold(0.0, f64::max);
            if pos.is_empty() {
                (0.0, 1.0)
            } else if binary {
                let l2 = std::f64::consts::LOG10_2;
                let (a, b) = (min.log2().floor(), max.log2().ceil());
                (a * l2, b.max(a + 1.0) * l2)
            } else {
                let (a, b) = (min.log10().floor(), max.log10().ceil());
                (a, b.max(a + 1.0))
            }
        } else {
            let min = finite().fold(0.0, f64::min);
            let max = finite().fold(0.0, f64::max);
            let hi = if max > 0.0 { max * 1.12 } else { 1.0 };
            (if min < 0.0 { min * 1.12 } else { 0.0 }, hi)
        };
        AxisMap { lo, hi, log, binary, p0, p1 }
    }

    /// The pixel of `v`, or None where a log axis cannot show it (v ≤ 0).
    pub fn px(&self, v: f64) -> Option<i32> {
        if !v.is_finite() || (self.log && v <= 0.0) {
            return None;
        }
        let v = if self.log { v.log10() } else { v };
        let t = (v - self.lo) / (self.hi - self.lo);
        Some((self.p0 + t * (self.p1 - self.p0)).round() as i32)
    }

    fn ticks(&self, unit: Unit) -> Vec<f64> {
        if self.log {
            if self.binary {
                let l2 = std::f64::consts::LOG10_2;
                let (a, b) = ((self.lo / l2).round() as i32, (self.hi / l2).round() as i32);
                let step = ((b - a) as f64 / 8.0).ceil().max(1.0) as i32;
                // Steps of whole binary units where they fit (1 KiB, 1 MiB, …).
                let step = if step > 5 { 10 * ((step + 9) / 10) } else { step };
                let first = if step >= 10 { (a + 9).div_euclid(10) * 10 } else { a };
                (first..=b).step_by(step as usize).map(|e| 2f64.powi(e)).collect()
            } else {
                let (a, b) = (self.lo.round() as i32, self.hi.round() as i32);
                let step = ((b - a) as f64 / 8.0).ceil().max(1.0) as usize;
                let mut t: Vec<f64> = (a..=b).step_by(step).map(|e| 10f64.powi(e)).collect();
                if b - a <= 2 {
                    t.extend((a..b).flat_map(|e| [2.0 * 10f64.powi(e), 5.0 * 10f64.powi(e)]));
                    t.sort_by(f64::total_cmp);
                }
                t
            }
        } else {
            // A 1-2-5 step giving about six ticks, in binary units for bytes.
            let scale = if unit == Unit::Bytes {
                let top = self.hi.abs().max(self.lo.abs());
                [1u64 << 30, 1 << 20, 1 << 10, 1].into_iter().map(|d| d as f64).find(|d| top >= *d).unwrap_or(1.0)
            } else {
                1.0
            };
            let raw = (self.hi - self.lo) / scale / 6.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(raw) * scale;
            // A count (workers, calls) ticks at whole numbers only.
            let step = if unit == Unit::Count { step.max(1.0) } else { step };
            let first = (self.lo / step).ceil() as i64;
            let last = (self.hi / step).floor() as i64;
            (first..=last).map(|k| k as f64 * step).collect()
        }
    }
}

/// Where a line chart's plot and axes lie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineLayout {
    pub x: AxisMap,
    pub y: AxisMap,
    pub left: i32,
    pub right: i32,
    pub top: i32,
    pub bottom: i32,
}

const LEGEND_W: i32 = 190;

/// The plot's pixel mapping of line chart `c` (what [`draw_lines`] uses).
pub fn line_layout(c: &LinesSpec) -> LineLayout {
    let notes = note_lines(&c.notes).len() as i32;
    let left = 84;
    let right = WIDTH as i32 - if c.series.len() > 1 { LEGEND_W } else { 20 };
    let top = 44;
    let bottom = HEIGHT as i32 - 48 - notes * NOTE_H;
    let xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .chain(c.x_marks.iter().map(|m| m.at))
        .chain(c.points.iter().map(|p| p.x))
        .collect();
    let ys: Vec<f64> = c
        .series
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(c.y_marks.iter().map(|m| m.at))
        .chain(c.points.iter().map(|p| p.y))
        .collect();
    // A little room inside the frame so markers at the ends stay whole.
    let x = AxisMap::new(&xs, &c.x, (left + 12) as f64, (right - 12) as f64);
    let y = AxisMap::new(&ys, &c.y, (bottom - 6) as f64, (top + 6) as f64);
    LineLayout { x, y, left, right, top, bottom }
}

fn font(size: i32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font())
}

fn anchored(style: TextStyle<'_>, h: HPos, v: VPos) -> TextStyle<'_> {
    style.pos(Pos::new(h, v))
}

fn draw_notes<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, notes: &[String]) -> DrawResult<DB> {
    let lines = note_lines(notes);
    let y0 = HEIGHT as i32 - 8 - NOTE_H * lines.len() as i32;
    for (i, l) in lines.into_iter().enumerate() {
        root.draw(&Text::new(l, (12, y0 + NOTE_H * i as i32), font(13).color(&NOTE_GRAY)))?;
    }
    Ok(())
}

/// The pixels of `line`'s points; a step line holds each y until the next x.
fn line_pixels(l: &LineLayout, line: &LineSeries) -> Vec<(i32, i32)> {
    let px = |&(x, y): &(f64, f64)| Some((l.x.px(x)?, l.y.px(y)?));
    if !line.steps {
        return line.points.iter().filter_map(px).collect();
    }
    let mut out = Vec::with_capacity(line.points.len() * 2);
    for (i, p) in line.points.iter().enumerate() {
        if i > 0 {
            out.extend(px(&(p.0, line.points[i - 1].1)));
        }
        out.extend(px(p));
    }
    out
}

pub(crate) fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    c: &LinesSpec,
) -> DrawResult<DB> {
    if c.series.iter().all(|l| l.points.is_empty()) && c.points.is_empty() {
        let why =
            if c.notes.is_empty() { "nothing was measured for this chart".to_owned() } else { c.notes.join("; ") };
        return draw_message(root, title, &why);
    }
    let l = line_layout(c);
    root.draw(&Text::new(title.to_owned(), (12, 10), font(20)))?;
    draw_line_axes(root, &l, c)?;
    // Reference lines under the data.
    for m in &c.y_marks {
        let Some(y) = l.y.px(m.at) else { continue };
        root.draw(&DashedPathElement::new([(l.left, y), (l.right, y)], 6, 4, MARK_RED.stroke_width(2)))?;
        let label = anchored(font(13).color(&MARK_RED), HPos::Left, VPos::Bottom);
        root.draw(&Text::new(m.label.clone(), (l.left + 6, y - 3), label))?;
    }
    for (k, m) in c.x_marks.iter().enumerate() {
        let Some(x) = l.x.px(m.at) else { continue };
        root.draw(&DashedPathElement::new([(x, l.top), (x, l.bottom)], 6, 4, MARK_RED.stroke_width(2)))?;
        let h = if x > (l.left + l.right) / 2 { HPos::Right } else { HPos::Left };
        let dx = if matches!(h, HPos::Right) { -5 } else { 5 };
        let label = anchored(font(13).color(&MARK_RED), h, VPos::Bottom);
        root.draw(&Text::new(m.label.clone(), (x + dx, l.bottom - 4 - 16 * k as i32), label))?;
    }
    for line in &c.series {
        let col = palette(line.color);
        let pts = line_pixels(&l, line);
        if line.dashed {
            root.draw(&DashedPathElement::new(pts.clone(), 7, 4, col.stroke_width(2)))?;
        } else {
            root.draw(&PathElement::new(pts.clone(), col.stroke_width(2)))?;
        }
        if !line.steps {
            for p in pts {
                let style = if line.dashed { col.stroke_width(2) } else { col.filled() };
                root.draw(&Circle::new(p, 4, style))?;
            }
        }
    }
    for p in &c.points {
        let (Some(x), Some(y)) = (l.x.px(p.x), l.y.px(p.y)) else { continue };
        let col = p.color.map_or(MARK_RED, palette);
        root.draw(&Cross::new((x, y), 7, col.stroke_width(3)))?;
        let h = if x > (l.left + l.right) / 2 { HPos::Right } else { HPos::Left };
        let dx = if matches!(h, HPos::Right) { -10 } else { 10 };
        let label = anchored(font(13).color(&col), h, VPos::Bottom);
        root.draw(&Text::new(p.label.clone(), (x + dx, y - 8), label))?;
    }
    if c.series.len() > 1 {
        draw_line_legend(root, &l, &c.series)?;
    }
    draw_notes(root, &c.notes)
}

/// The grid, the tick labels, the frame and the axes' descriptions.
fn draw_line_axes<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &LineLayout, c: &LinesSpec) -> DrawResult<DB> {
    for t in l.x.ticks(c.x.unit) {
        let Some(x) = l.x.px(t) else { continue };
        root.draw(&PathElement::new([(x, l.top), (x, l.bottom)], GRID))?;
        let label = anchored(font(13), HPos::Center, VPos::Top);
        root.draw(&Text::new(c.x.unit.tick(t), (x, l.bottom + 5), label))?;
    }
    for t in l.y.ticks(c.y.unit) {
        let Some(y) = l.y.px(t) else { continue };
        root.draw(&PathElement::new([(l.left, y), (l.right, y)], GRID))?;
        let label = anchored(font(13), HPos::Right, VPos::Center);
        root.draw(&Text::new(c.y.unit.tick(t), (l.left - 6, y), label))?;
    }
    root.draw(&Rectangle::new([(l.left, l.top), (l.right, l.bottom)], RGBColor(160, 160, 160)))?;
    let desc = anchored(font(14), HPos::Center, VPos::Top);
    root.draw(&Text::new(c.x.label.clone(), ((l.left + l.right) / 2, l.bottom + 24), desc.clone()))?;
    let ydesc = desc.transform(FontTransform::Rotate270);
    root.draw(&Text::new(c.y.label.clone(), (8, (l.top + l.bottom) / 2), ydesc))
}

/// The legend in the right margin: each series' line (and marker) and name.
fn draw_line_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    l: &LineLayout,
    series: &[LineSeries],
) -> DrawResult<DB> {
    for (i, line) in series.iter().enumerate() {
        let y = l.top + 8 + 20 * i as i32;
        let x = l.right + 12;
        let col = palette(line.color);
        if line.dashed {
            root.draw(&DashedPathElement::new([(x, y), (x + 22, y)], 5, 3, col.stroke_width(2)))?;
        } else {
            root.draw(&PathElement::new([(x, y), (x + 22, y)], col.stroke_width(2)))?;
        }
        if !line.steps {
            let style = if line.dashed { col.stroke_width(2) } else { col.filled() };
            root.draw(&Circle::new((x + 11, y), 4, style))?;
        }
        let mut name = line.name.clone();
        if name.chars().count() > 22 {
            name = name.chars().take(21).collect::<String>() + "…";
        }
        root.draw(&Text::new(name, (x + 28, y), anchored(font(13), HPos::Left, VPos::Center)))?;
    }
    Ok(())
}

/// Where a bar chart's rows and value axis lie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BarLayout {
    /// Pixels where bars start and where the axis ends.
    pub x0: i32,
    pub x1: i32,
    /// The value axis, from 0 (a decade below the smallest value on a log scale).
    pub axis: AxisMap,
    pub top: i32,
    pub row_h: i32,
    /// Where the rows end; a log chart's tick labels sit under it.
    pub bottom: i32,
    /// The size of the bars' text.
    pub text_size: i32,
}

impl BarLayout {
    /// Where a bar of value `v` ends (at least one pixel past its start).
    pub fn px(&self, v: f64) -> i32 {
        self.axis.px(v).unwrap_or(self.x0).clamp(self.x0 + 1, self.x1)
    }

    /// The value axis' ticks inside it, with their pixels (a log chart's axis).
    pub fn ticks(&self, unit: Unit) -> Vec<(f64, i32)> {
        self.axis
            .ticks(unit)
            .into_iter()
            .filter_map(|t| Some((t, self.axis.px(t)?)))
            .filter(|(_, x)| (self.x0..=self.x1).contains(x))
            .collect()
    }
}

/// The width text of `size` px takes, at most (the bundled sans serif's widest
/// common glyphs are about 0.62 of the size): for keeping labels inside the chart.
pub(crate) fn text_width(text: &str, size: i32) -> i32 {
    (text.chars().count() as f64 * f64::from(size) * 0.62).ceil() as i32
}

/// Height of the row of a log bar chart's tick labels.
const AXIS_H: i32 = 22;

/// The rows of bar chart `c`: its bars and its groups' headings.
fn bar_rows(c: &BarsSpec) -> usize {
    c.groups.iter().map(|g| g.bars.len() + usize::from(!g.name.is_empty())).sum()
}

/// The text after a bar: its value, and its mark when it has one.
fn value_text(unit: Unit, b: &BarSpec) -> String {
    match &b.mark {
        Some(m) => format!("{} — {m}", unit.fmt(b.value)),
        None => unit.fmt(b.value),
    }
}

/// Bar chart `c`'s pixel mapping (what [`draw_grouped`] uses). The value axis
/// ends where the longest value text after its bar still fits the canvas.
pub fn bar_layout(c: &BarsSpec) -> BarLayout {
    let notes = note_lines(&c.notes).len() as i32;
    let top = 44 + if c.series.len() > 1 { 20 } else { 0 };
    let axis_h = if c.log { AXIS_H } else { 0 };
    let avail = HEIGHT as i32 - top - 8 - axis_h - notes * NOTE_H;
    let row_h = (avail / bar_rows(c).max(1) as i32).clamp(6, 26);
    let text_size = (row_h - 5).clamp(8, 13);
    let values: Vec<f64> =
        c.groups.iter().flat_map(|g| g.bars.iter().map(|b| b.value)).chain(c.reference.iter().map(|m| m.at)).collect();
    let longest = c.groups.iter().flat_map(|g| &g.bars).map(|b| text_width(&value_text(c.unit, b), text_size)).max();
    let x0 = 300;
    let x1 = (WIDTH as i32 - 12 - longest.unwrap_or(0)).clamp(x0 + 200, WIDTH as i32 - 60);
    let scale = if c.log { Scale::Log } else { Scale::Linear };
    let mut axis = AxisMap::new(&values, &AxisSpec::new("", c.unit, scale), x0 as f64, x1 as f64);
    if !c.log {
        // Bars start at 0 and the longest ends at the axis' end.
        axis.hi = values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max).max(1e-12);
    } else {
        // Room for the smallest bar to show: start a decade below it.
        axis.lo -= if axis.binary { std::f64::consts::LOG10_2 * 3.0 } else { 1.0 };
    }
    let bottom = top + row_h * bar_rows(c) as i32;
    BarLayout { x0, x1, axis, top, row_h, bottom, text_size }
}

pub(crate) fn draw_grouped<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    c: &BarsSpec,
) -> DrawResult<DB> {
    if c.groups.iter().all(|g| g.bars.is_empty()) {
        let why =
            if c.notes.is_empty() { "nothing was measured for this chart".to_owned() } else { c.notes.join("; ") };
        return draw_message(root, title, &why);
    }
    let l = bar_layout(c);
    root.draw(&Text::new(title.to_owned(), (12, 10), font(20)))?;
    if c.series.len() > 1 {
        let mut x = 12;
        for (i, name) in c.series.iter().enumerate() {
            root.draw(&Rectangle::new([(x, 46), (x + 12, 58)], palette(i).filled()))?;
            root.draw(&Text::new(name.clone(), (x + 18, 52), anchored(font(13), HPos::Left, VPos::Center)))?;
            x += 40 + 8 * name.chars().count() as i32;
        }
    }
    let size = l.text_size;
    // A log chart's value axis: grid lines and tick labels under the rows, each label inside the canvas.
    if c.log {
        for (t, x) in l.ticks(c.unit) {
            root.draw(&PathElement::new([(x, l.top), (x, l.bottom)], GRID))?;
            let label = c.unit.tick(t);
            let half = text_width(&label, 12) / 2;
            let cx = x.clamp(half + 2, WIDTH as i32 - half - 2);
            root.draw(&Text::new(label, (cx, l.bottom + 5), anchored(font(12), HPos::Center, VPos::Top)))?;
        }
        root.draw(&PathElement::new([(l.x0, l.bottom), (l.x1, l.bottom)], RGBColor(160, 160, 160)))?;
    }
    // The bars, then the reference line over them, then the value texts on a white
    // ground so the line never strikes one.
    let mut texts = Vec::new();
    let mut y = l.top;
    for g in &c.groups {
        if !g.name.is_empty() {
            let head = TextStyle::from((FAMILY, size + 1, FontStyle::Bold).into_font());
            root.draw(&Text::new(g.name.clone(), (8, y + l.row_h / 2), anchored(head, HPos::Left, VPos::Center)))?;
            y += l.row_h;
        }
        for b in &g.bars {
            let mut name = b.label.clone();
            if name.chars().count() > 40 {
                name = name.chars().take(39).collect::<String>() + "…";
            }
            let mid = y + l.row_h / 2;
            root.draw(&Text::new(name, (24, mid), anchored(font(size), HPos::Left, VPos::Center)))?;
            let w = l.px(b.value);
            let rect = [(l.x0, y + 2), (w.max(l.x0 + 1), y + l.row_h - 2)];
            root.draw(&Rectangle::new(rect, palette(b.series).filled()))?;
            if b.mark.is_some() {
                root.draw(&Rectangle::new(rect, MARK_RED.stroke_width(2)))?;
            }
            texts.push((value_text(c.unit, b), w + 6, mid, b.mark.is_some()));
            y += l.row_h;
        }
    }
    if let Some(m) = &c.reference {
        let x = l.px(m.at);
        root.draw(&DashedPathElement::new([(x, l.top), (x, l.bottom)], 6, 4, MARK_RED.stroke_width(2)))?;
        let label = anchored(font(13).color(&MARK_RED), HPos::Center, VPos::Bottom);
        let half = text_width(&m.label, 13) / 2;
        root.draw(&Text::new(m.label.clone(), (x.clamp(half + 2, WIDTH as i32 - half - 2), l.top - 2), label))?;
    }
    for (text, x, mid, marked) in texts {
        let ground = [(x - 2, mid - size / 2 - 2), (x + text_width(&text, size) + 2, mid + size / 2 + 2)];
        root.draw(&Rectangle::new(ground, WHITE.filled()))?;
        let style = if marked { font(size).color(&MARK_RED) } else { font(size) };
        root.draw(&Text::new(text, (x, mid), anchored(style, HPos::Left, VPos::Center)))?;
    }
    draw_notes(root, &c.notes)
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::{BarGroupSpec, Marker};

    use super::*;
    use crate::charts::Chart;

    #[test]
    fn log_axes_tick_at_powers_and_map_monotonically() {
        let bytes = AxisSpec::new("size", Unit::Bytes, Scale::Log);
        let m = AxisMap::new(&[1024.0, (64u64 << 20) as f64], &bytes, 0.0, 1000.0);
        let t = m.ticks(Unit::Bytes);
        assert!(t.iter().all(|v| v.log2().fract() == 0.0), "{t:?}");
        assert!(t.contains(&1024.0) && t.contains(&((1u64 << 20) as f64)), "{t:?}");
        assert_eq!(m.px(1024.0), Some(0));
        assert_eq!(m.px((64u64 << 20) as f64), Some(1000));
        assert_eq!(m.px(0.0), None);
        let ns = AxisSpec::new("time", Unit::Nanoseconds, Scale::Log);
        let m = AxisMap::new(&[300.0, 4e6], &ns, 0.0, 400.0);
        assert_eq!(m.ticks(Unit::Nanoseconds), vec![100.0, 1e3, 1e4, 1e5, 1e6, 1e7]);
        assert_eq!(m.px(1e4), Some(160));
        let lin = AxisMap::new(&[0.0, 9.0], &AxisSpec::new("n", Unit::Count, Scale::Linear), 0.0, 100.0);
        assert_eq!(lin.ticks(Unit::Count), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        // Workers 0 to 2: whole numbers, not 0.5 steps.
        let few = AxisMap::new(&[0.0, 2.0], &AxisSpec::new("workers", Unit::Count, Scale::Linear), 0.0, 100.0);
        assert_eq!(few.ticks(Unit::Count), vec![0.0, 1.0, 2.0]);
    }
    fn speedups(mark: Option<&str>) -> BarsSpec {
        let bars = [0.05, 0.7, 1.4, 20.0]
            .into_iter()
            .map(|v| BarSpec {
                mark: (v == 20.0).then(|| mark.map(str::to_owned)).flatten(),
                ..BarSpec::new(format!("s{v}"), v, 0)
            })
            .collect();
        BarsSpec {
            unit: Unit::Ratio,
            series: vec![],
            groups: vec![BarGroupSpec { name: "matmul".into(), bars }],
            reference: Some(Marker { at: 1.0, label: "1× (as fast as the CPU)".into() }),
            notes: vec![],
            log: true,
        }
    }

    #[test]
    fn ratio_bars_on_a_log_axis_with_ticks_inside_and_the_1x_line_under_the_labels() {
        let c = speedups(None);
        let l = bar_layout(&c);
        // Log: a tenth and ten times lie as far from 1× on either side.
        let (tenth, one, ten) = (l.px(0.1), l.px(1.0), l.px(10.0));
        assert!(((one - tenth) - (ten - one)).abs() <= 1, "{tenth} {one} {ten}");
        assert!(l.px(0.7) - l.px(0.05) > 2 * (l.px(1.4) - l.px(0.7)), "0.05× and 0.7× look alike");
        // The value axis: decades, labelled, every label inside the canvas.
        let ticks: Vec<f64> = l.ticks(Unit::Ratio).into_iter().map(|t| t.0).collect();
        assert_eq!(ticks, [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]);
        let svg = Chart::Bars { title: "speedup".into(), bars: c.clone() }.svg().unwrap();
        for t in ["0.001×", "0.01×", "0.1×", "1×", "10×", "100×"] {
            let (x, y) = crate::suite_charts::tests::text_at(&svg, t);
            let half = f64::from(text_width(t, 12)) / 2.0;
            assert!(x - half >= 0.0 && x + half <= f64::from(WIDTH), "{t} at {x}");
            assert!(y > f64::from(l.bottom), "{t} under the bars");
        }
        // The 0.7× bar's text starts left of the 1× line and crosses it: a white ground
        // drawn after the line keeps the line off it.
        let (x, _) = crate::suite_charts::tests::text_at(&svg, "0.7×");
        assert!(x < f64::from(one) && x + f64::from(text_width("0.7×", l.text_size)) > f64::from(one));
        let line = svg.rfind("stroke=\"#C81E1E\"").expect("the 1× line");
        let ground = format!("<rect x=\"{}\"", x as i32 - 2);
        let at = svg.find(&ground).expect("a white ground behind 0.7×");
        assert!(at > line && svg[at..].starts_with(&ground) && svg[at..at + 120].contains("#FFFFFF"), "{}", &svg[at..]);
    }

    #[test]
    fn long_value_texts_shorten_the_axis_instead_of_leaving_the_canvas() {
        let c = speedups(Some("chosen, heuristic's pick (off), and a long remark"));
        let l = bar_layout(&c);
        let text = value_text(c.unit, &c.groups[0].bars[3]);
        assert!(l.px(20.0) + 6 + text_width(&text, l.text_size) <= WIDTH as i32, "{text} leaves the canvas");
        assert!(l.x1 < bar_layout(&speedups(None)).x1);
    }
}
