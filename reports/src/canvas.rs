//! What every chart of the reports draws on: the canvas' size, the bundled
//! font (DejaVu Sans through `ab_glyph`, no system font library), the chart
//! model's palette as plotters colours, the legend box of the memory charts
//! and the message a chart without data shows instead of empty axes.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// DejaVu Sans (Bitstream Vera / DejaVu licence, see `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

/// Chart size in pixels (the SVG scales to its container).
pub const WIDTH: u32 = 960;
pub const HEIGHT: u32 = 400;

pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in; failing to parse it is a build defect.
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the bundled DejaVu Sans does not parse"));
    });
}

pub(crate) type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Colour `i` of the chart model's palette ([`vramlab_display::chart::PALETTE`]).
pub(crate) fn palette(i: usize) -> RGBColor {
    let (r, g, b) = vramlab_display::chart::palette(i);
    RGBColor(r, g, b)
}

/// The series' labels in a light box at `position`: the legend of every memory chart.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
}

pub(crate) fn draw_message<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    reason: &str,
) -> DrawResult<DB> {
    root.draw(&Text::new(title.to_owned(), (20, 20), (FAMILY, 20).into_font()))?;
    let style = TextStyle::from((FAMILY, 16).into_font()).color(&RGBColor(90, 90, 90));
    // Wrap the reason at about 90 characters a line.
    let mut lines = vec![String::new()];
    for word in format!("No data here: {reason}").split_whitespace() {
        let last = lines.last_mut().expect("one line at least");
        if last.len() + word.len() > 90 {
            lines.push(word.to_owned());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    for (i, line) in lines.iter().enumerate() {
        root.draw(&Text::new(line.clone(), (40, HEIGHT as i32 / 2 - 20 + 22 * i as i32), style.clone()))?;
    }
    Ok(())
}
