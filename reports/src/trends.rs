//! The report's "Trends" section: this run's headline figures — per suite, the
//! allocated peak of its largest case and the median time of its slowest — over
//! the last runs of the history (`history.sqlite`), with change points, as
//! [`Chart::Trend`](crate::charts::Chart::Trend)s; or the reason there are none.
//! Beside them, the noise floor of this run's times, learned from the
//! history's A/A runs (one build run more than once): which figures a 5 % gate
//! can hold from one run a side, and which need more runs or the A/B mode.

use std::path::Path;

use vramlab_suites::RunResults;

use crate::check::matching;
use crate::history::{History, HistoryError, Series};
use crate::html::{NoiseRow, NoiseView};

/// The threshold the noise floor table is read against (vramlab.toml's default).
pub const NOISE_GATE: f64 = 0.05;

/// Runs a trend chart shows by default.
pub const DEFAULT_TREND_RUNS: usize = 20;
/// At most this many trend charts (those that stepped first when there are more).
pub const MAX_TREND_CHARTS: usize = 12;

/// One trend chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub title: String,
    pub series: Series,
}

/// The section's content: charts, or why there are none.
#[derive(Debug, Clone, PartialEq)]
pub enum Trends {
    Charts(Vec<Trend>),
    NotShown(String),
}

/// This run's headline figures: (history series name, chart title), per suite
/// in run order the allocated peak of the case with the highest one and the
/// median time of the slowest case.
pub fn headline_figures(results: &RunResults) -> Vec<(String, String)> {
    let index = matching::index(results);
    let mut out = Vec::new();
    for suite in &results.suites {
        let cases = || index.iter().filter(|(k, c)| k.suite == suite.name && c.outcome.is_ok());
        if let Some((k, c)) = cases()
            .filter(|(_, c)| c.memory.is_some())
            .max_by_key(|(_, c)| c.memory.as_ref().map(|m| m.peak_allocated_bytes))
        {
            out.push((
                format!("{k} memory.peak_allocated_bytes"),
                format!("{}: peak allocated — {}", suite.name, c.name),
            ));
        }
        if let Some((k, c)) =
            cases().filter(|(_, c)| c.timing.is_some()).max_by(|a, b| median(a.1).total_cmp(&median(b.1)))
        {
            out.push((format!("{k} time"), format!("{}: median time — {}", suite.name, c.name)));
        }
    }
    out
}

fn median(c: &vramlab_suites::CaseResult) -> f64 {
    c.timing.as_ref().map_or(0.0, |t| t.median_ns)
}

/// The trends of `results`' headline figures over the last `last` runs of the
/// history at `history` (which should already hold this run).
pub fn load_trends(results: &RunResults, history: Option<&Path>, last: usize) -> Trends {
    let Some(path) = history else {
        return Trends::NotShown("No trends: no run history was given (`cargo xtask report --history FILE`).".into());
    };
    let h = match History::open_existing(path) {
        Ok(h) => h,
        Err(HistoryError::Missing { .. }) => {
            return Trends::NotShown(format!(
                "No trends yet: there is no run history at {}; every `cargo xtask bench` run appends to it.",
                path.display()
            ));
        }
        Err(e) => return Trends::NotShown(format!("No trends: {e}.")),
    };
    let runs = match h.runs() {
        Ok(n) => n,
        Err(e) => return Trends::NotShown(format!("No trends: {e}.")),
    };
    if runs < 2 {
        return Trends::NotShown(format!(
            "No trends yet: the history at {} holds {runs} run{}; a trend needs at least 2.",
            path.display(),
            if runs == 1 { "" } else { "s" }
        ));
    }
    let figures = headline_figures(results);
    let names: Vec<String> = figures.iter().map(|f| f.0.clone()).collect();
    let series = match h.series_named(&names, last) {
        Ok(s) => s,
        Err(e) => return Trends::NotShown(format!("No trends: {e}.")),
    };
    let mut charts: Vec<(usize, Trend)> = series
        .into_iter()
        .filter(|s| s.points.len() >= 2)
        .filter_map(|s| {
            let at = names.iter().position(|n| *n == s.name)?;
            Some((at, Trend { title: figures[at].1.clone(), series: s }))
        })
        .collect();
    if charts.is_empty() {
        return Trends::NotShown(format!(
            "No trends: none of this run's headline figures was measured in 2 or more of the last {last} runs \
             stored in {}.",
            path.display()
        ));
    }
    if charts.len() > MAX_TREND_CHARTS {
        // Figures that stepped first, then run order.
        charts.sort_by_key(|(at, t)| (t.series.change_points.is_empty(), *at));
        charts.truncate(MAX_TREND_CHARTS);
        charts.sort_by_key(|(at, _)| *at);
    }
    Trends::Charts(charts.into_iter().map(|(_, t)| t).collect())
}

/// The noise floor of `results`' time figures from the history at `history`.
pub fn noise_view(results: &RunResults, history: Option<&Path>) -> NoiseView {
    let none = |note: String| NoiseView { note: Some(note), ..NoiseView::default() };
    let Some(path) = history else { return none("No noise floor: no run history was given.".into()) };
    let floors = match History::open_existing(path).and_then(|h| h.noise_floors(" time", 1000)) {
        Ok(f) => f,
        Err(e) => return none(format!("No noise floor: {e}.")),
    };
    let names: std::collections::HashSet<String> =
        crate::history::figures(results).into_iter().map(|(n, _)| n).filter(|n| n.ends_with(" time")).collect();
    let rows: Vec<NoiseRow> = floors
        .into_iter()
        .filter(|f| names.contains(&f.name))
        .map(|f| NoiseRow {
            figure: f.name.trim_end_matches(" time").to_owned(),
            runs: f.runs,
            builds: f.builds,
            between_run: format!("{:.1} %", f.between_run * 100.0),
            floor: format!("{:.1} %", f.floor * 100.0),
            gate_5: f.floor <= NOISE_GATE,
        })
        .collect();
    if rows.is_empty() {
        return none(
            "No noise floor yet: no build of this run's figures was run twice in the history — `cargo xtask bench --repeat 3` runs one build three times."
                .into(),
        );
    }
    NoiseView { gateable: rows.iter().filter(|r| r.gate_5).count(), rows, note: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("vramlab-trends-{}-{tag}.sqlite", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// The reports' sample run with its matmul case's median at `time_ns`.
    fn run(time_ns: f64) -> RunResults {
        let mut r = crate::tests::sample();
        for s in &mut r.suites {
            for c in &mut s.cases {
                if let Some(t) = &mut c.timing {
                    t.median_ns = time_ns;
                }
            }
        }
        r
    }

    #[test]
    fn the_reason_is_given_when_there_is_no_trend() {
        let r = run(1000.0);
        let Trends::NotShown(why) = load_trends(&r, None, 20) else { panic!("no history given") };
        assert!(why.contains("no run history was given"), "{why}");
        let p = temp("missing");
        let Trends::NotShown(why) = load_trends(&r, Some(&p), 20) else { panic!("missing") };
        assert!(why.contains("there is no run history at") && why.contains("cargo xtask bench"), "{why}");
        let mut h = History::open_or_create(&p).unwrap();
        h.append(&r).unwrap();
        let Trends::NotShown(why) = load_trends(&r, Some(&p), 20) else { panic!("one run") };
        assert!(why.contains("holds 1 run;") && why.contains("at least 2"), "{why}");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn headline_figures_step_where_the_history_steps() {
        let p = temp("step");
        let mut h = History::open_or_create(&p).unwrap();
        for i in 0..25 {
            h.append(&run(if i < 18 { 1000.0 } else { 2000.0 })).unwrap();
        }
        let r = run(2000.0);
        let figures = headline_figures(&r);
        assert!(!figures.is_empty());
        assert!(figures.iter().any(|(n, t)| n.ends_with(" time") && t.contains("median time")), "{figures:?}");
        let Trends::Charts(charts) = load_trends(&r, Some(&p), DEFAULT_TREND_RUNS) else { panic!("25 runs") };
        let time = charts.iter().find(|c| c.series.name.ends_with(" time")).expect("a time trend");
        assert_eq!(time.series.points.len(), 20, "the last 20 runs");
        assert_eq!(time.series.points[0].run_id, 6);
        // Runs 19..25 are slower: the level starts at run 19, index 13 of runs 6..25.
        assert_eq!(time.series.change_points, vec![13]);
        assert_eq!(time.series.points[13].run_id, 19);
        assert!(charts.len() <= MAX_TREND_CHARTS);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn the_page_shows_trend_charts_or_says_why_not() {
        let dir = std::env::temp_dir().join(format!("vramlab-trends-page-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = run(1000.0);
        let files = crate::write_report(&r, &dir, &[], None).unwrap();
        let html = std::fs::read_to_string(&files.index_html).unwrap();
        assert!(html.contains("<h2>Trends</h2>"), "the section is always there");
        assert!(html.contains("No trends: no run history was given"), "and says why it is empty");

        let p = temp("page");
        let mut h = History::open_or_create(&p).unwrap();
        for i in 0..6 {
            h.append(&run(if i < 3 { 1000.0 } else { 3000.0 })).unwrap();
        }
        drop(h);
        let options = crate::ReportOptions { history: Some(&p), trend_runs: 20 };
        let files = crate::write_report_with(&run(3000.0), &dir, &[], None, &options).unwrap();
        let html = std::fs::read_to_string(&files.index_html).unwrap();
        assert!(!html.contains("No trends"), "a history of 6 runs has trends");
        assert!(html.contains("over the last 20 runs"));
        assert!(html.contains("demo: median time — matmul_64"), "the chart's title");
        assert!(html.contains("step at run 4"), "the step from run 4 on is marked in the inline SVG");
        assert!(files.charts.iter().any(|f| f.ends_with("trend-0.svg")) && dir.join("charts/trend-0.png").is_file());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&p);
    }
}
