//! The whole report of a run, written into one folder (by default
//! `target/vramlab/report/`): `index.html`, `summary.md`, one tidy CSV per
//! suite, a PNG and an SVG per chart under `charts/`, and `trace.json`; with a
//! run history, trend charts of the run's headline figures. Also
//! reads a results file leniently: what parses is rendered, and what does not
//! is listed as a problem naming the file.

use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::Value;
use vramlab_suites::{
    CaseResult, CategoryStack, MemoryTimeline, Outcome, RunResults, SCHEMA_VERSION, Series, SuiteResult,
    TIMELINE_POINTS,
};

use crate::charts::{BarUnit, Chart};
use crate::html::{ChartView, SuiteExtras, TimelineView, TraceLink, TrendsView, render_index_with};
use crate::trends::{DEFAULT_TREND_RUNS, Trends, load_trends};
use crate::units::{fmt_bytes, fmt_ns};
use crate::{ReportError, markdown, tidy, trace, write_atomic};

/// File names inside the report folder.
pub const INDEX_HTML: &str = "index.html";
pub const SUMMARY_MD: &str = "summary.md";
pub const TRACE_JSON: &str = "trace.json";
pub const CHARTS_DIR: &str = "charts";

/// Timelines shown per suite (the largest peaks first); more would make the page slow.
pub const MAX_TIMELINES_PER_SUITE: usize = 6;
/// Bars per bar chart (the first cases in run order).
pub const MAX_BARS: usize = 40;

/// A results file as read for a report: the run, what was wrong with the file
/// (parts left out; empty when nothing was) and notes (an older version).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub results: RunResults,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

/// Reads `path` for a report. A file that is not JSON, not vramlab results, or
/// of a schema version this build does not read is an error; a version 1 file
/// renders without timelines (with a note); a suite or case that does not
/// parse is left out and named as a problem while the rest renders.
pub fn load_results(path: &Path) -> Result<Loaded, ReportError> {
    let bytes = fs::read(path).map_err(|source| ReportError::Io { path: path.to_path_buf(), source })?;
    let not = |reason: String| ReportError::NotResults { path: path.to_path_buf(), reason };
    #[derive(serde::Deserialize)]
    struct Head {
        schema_version: Option<u64>,
    }
    let head: Head = serde_json::from_slice(&bytes).map_err(|e| {
        not(if e.is_eof() { format!("the JSON ends early (truncated file?): {e}") } else { format!("not JSON: {e}") })
    })?;
    let version = head.schema_version.ok_or_else(|| not("no schema_version field".into()))?;
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    match version {
        v if v == u64::from(SCHEMA_VERSION) => {}
        1 => notes.push(format!(
            "{}: schema version 1 (this build writes {SCHEMA_VERSION}); it has no memory timelines, so none are drawn",
            path.display()
        )),
        other => {
            return Err(not(format!(
                "schema version {other}; this build reads versions 1 to {SCHEMA_VERSION} — render it with the vramlab \
                 that wrote it"
            )));
        }
    }
    // The common case, typed and in one pass (a 10-million-point file stays small in memory).
    if let Ok(mut results) = serde_json::from_slice::<RunResults>(&bytes) {
        results.schema_version = SCHEMA_VERSION;
        return Ok(Loaded { results, problems, notes });
    }
    let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| not(format!("not JSON: {e}")))?;
    // Suites one by one, so a damaged suite does not hide the others.
    let suites = v.get_mut("suites").map(Value::take).unwrap_or(Value::Array(vec![]));
    let mut head: RunResults = serde_json::from_value({
        let mut o = v;
        o["suites"] = Value::Array(vec![]);
        o
    })
    .map_err(|e| not(format!("the run's header does not parse: {e}")))?;
    head.schema_version = SCHEMA_VERSION;
    for (i, s) in suites.as_array().into_iter().flatten().enumerate() {
        match serde_json::from_value::<SuiteResult>(s.clone()) {
            Ok(suite) => head.suites.push(suite),
            Err(e) => {
                let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
                problems.push(format!(
                    "{}: suite #{} ({name}) does not parse and is left out: {e}",
                    path.display(),
                    i + 1
                ));
            }
        }
    }
    Ok(Loaded { results: head, problems, notes })
}

/// What [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    pub index_html: PathBuf,
    pub summary_md: PathBuf,
    pub trace_json: Option<PathBuf>,
    pub csv: Vec<PathBuf>,
    /// Every chart's PNG and SVG.
    pub charts: Vec<PathBuf>,
}

fn slug(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    out.truncate(80);
    out
}

/// Draws a chart to `charts/{name}.svg|png` under `dir` and returns its view.
fn chart_files(dir: &Path, name: &str, chart: &Chart<'_>, files: &mut Vec<PathBuf>) -> Result<ChartView, ReportError> {
    let svg = chart.svg()?;
    let svg_file = format!("{CHARTS_DIR}/{name}.svg");
    let png = format!("{CHARTS_DIR}/{name}.png");
    write_atomic(&dir.join(&svg_file), svg.as_bytes())?;
    chart.write_png(&dir.join(&png))?;
    files.push(dir.join(&png));
    files.push(dir.join(&svg_file));
    // The inline copy drops the XML prolog, if any, and keeps the <svg> element.
    let inline = svg.find("<svg").map_or(svg.clone(), |i| svg[i..].to_owned());
    Ok(ChartView { title: chart.title().to_owned(), svg: inline, png, svg_file })
}

fn suite_charts(dir: &Path, suite: &SuiteResult, files: &mut Vec<PathBuf>) -> Result<SuiteExtras, ReportError> {
    let mut x = SuiteExtras { csv: format!("{}.csv", suite.name), ..SuiteExtras::default() };
    let s = slug(&suite.name);
    let ok: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.outcome.is_ok()).collect();
    if ok.is_empty() {
        let reason = suite
            .cases
            .iter()
            .find_map(|c| match &c.outcome {
                Outcome::NotAvailable { reason } => Some(reason.clone()),
                Outcome::Failed { message } => Some(format!("every case failed, e.g. {}: {message}", c.name)),
                Outcome::Ok => None,
            })
            .unwrap_or_else(|| "the suite has no cases".into());
        let chart = Chart::Unavailable { title: format!("{}: no measurements", suite.name), reason };
        x.charts.push(chart_files(dir, &format!("{s}-unavailable"), &chart, files)?);
        return Ok(x);
    }
    let times: Vec<(String, f64)> =
        ok.iter().filter_map(|c| Some((c.name.clone(), c.timing.as_ref()?.median_ns))).take(MAX_BARS).collect();
    if !times.is_empty() {
        let chart = Chart::Bars {
            title: format!("{}: median time per case", suite.name),
            unit: BarUnit::Nanoseconds,
            bars: times,
        };
        x.charts.push(chart_files(dir, &format!("{s}-time"), &chart, files)?);
    }
    let peaks: Vec<(String, f64)> = ok
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.memory.as_ref()?.peak_allocated_bytes as f64)))
        .take(MAX_BARS)
        .collect();
    if !peaks.is_empty() {
        let chart = Chart::Bars {
            title: format!("{}: peak allocated per case", suite.name),
            unit: BarUnit::Bytes,
            bars: peaks,
        };
        x.charts.push(chart_files(dir, &format!("{s}-peak"), &chart, files)?);
    }
    for c in ok.iter().filter(|c| c.categories.is_some()).take(MAX_TIMELINES_PER_SUITE) {
        if let Some(stack) = &c.categories.as_ref().map(decimated_stack) {
            let chart = Chart::Categories { title: format!("{}: allocated by category", c.name), stack };
            x.charts.push(chart_files(dir, &format!("{s}-{}-categories", slug(&c.name)), &chart, files)?);
        }
    }
    let mut with_timeline: Vec<(&CaseResult, &MemoryTimeline)> =
        ok.iter().filter_map(|c| Some((*c, c.timeline.as_ref()?))).collect();
    with_timeline.sort_by_key(|(_, t)| std::cmp::Reverse(t.peak_allocated_bytes));
    for (k, (c, t)) in with_timeline.into_iter().take(MAX_TIMELINES_PER_SUITE).enumerate() {
        let t = &decimated(t);
        let title = format!("{}: memory over time", c.name);
        // The page draws this one interactively from its data; the files are linked.
        let chart = Chart::Timeline { title: title.clone(), timeline: t };
        let view = chart_files(dir, &format!("{s}-{}-timeline", slug(&c.name)), &chart, files)?;
        x.timelines.push(TimelineView {
            png: view.png,
            svg_file: view.svg_file,
            id: format!("tl-{s}-{k}"),
            title,
            peak: fmt_bytes(t.peak_allocated_bytes),
            peak_time: fmt_ns(t.peak_time_ns as f64),
            peak_phase: t.peak_phase.clone(),
            data: t.clone(),
        });
    }
    Ok(x)
}

fn decimated_series(s: &Series) -> Series {
    if s.time_ns.len() <= TIMELINE_POINTS {
        return s.clone();
    }
    let d = vramlab_profiler::decimate(&s.time_ns, &s.bytes, TIMELINE_POINTS);
    Series {
        time_ns: d.indices.iter().map(|&i| s.time_ns[i]).collect(),
        bytes: d.indices.iter().map(|&i| s.bytes[i]).collect(),
    }
}

/// A timeline with at most [`TIMELINE_POINTS`] points per series (min/max
/// decimation, peaks kept): files written by this build already are; a file
/// from elsewhere with millions of points is cut down before drawing.
pub fn decimated(t: &MemoryTimeline) -> MemoryTimeline {
    MemoryTimeline {
        device: t.device.clone(),
        duration_ns: t.duration_ns,
        allocated: decimated_series(&t.allocated),
        reserved: decimated_series(&t.reserved),
        active: decimated_series(&t.active),
        phases: t.phases.clone(),
        peak_allocated_bytes: t.peak_allocated_bytes,
        peak_time_ns: t.peak_time_ns,
        peak_phase: t.peak_phase.clone(),
        events: t.events,
    }
}

fn decimated_stack(s: &CategoryStack) -> CategoryStack {
    if s.time_ns.len() <= TIMELINE_POINTS {
        return s.clone();
    }
    let totals: Vec<u64> = (0..s.time_ns.len())
        .map(|i| s.by_category_bytes.values().map(|v| v.get(i).copied().unwrap_or(0)).sum())
        .collect();
    let d = vramlab_profiler::decimate(&s.time_ns, &totals, TIMELINE_POINTS);
    CategoryStack {
        time_ns: d.indices.iter().map(|&i| s.time_ns[i]).collect(),
        by_category_bytes: s
            .by_category_bytes
            .iter()
            .map(|(k, v)| (k.clone(), d.indices.iter().map(|&i| v.get(i).copied().unwrap_or(0)).collect()))
            .collect(),
    }
}

/// The case whose trace the report writes: the memory suite's training step,
/// else the first case with a category stack, else the largest timeline.
pub fn trace_case(results: &RunResults) -> Option<(&SuiteResult, &CaseResult)> {
    let all = || {
        results.suites.iter().flat_map(|s| s.cases.iter().map(move |c| (s, c))).filter(|(_, c)| c.timeline.is_some())
    };
    all()
        .find(|(s, c)| s.name == "memory" && c.name == "train_step_peak")
        .or_else(|| all().find(|(_, c)| c.categories.is_some()))
        .or_else(|| all().max_by_key(|(_, c)| c.timeline.as_ref().map_or(0, |t| t.peak_allocated_bytes)))
}

/// What a report shows beyond the results file.
#[derive(Debug, Clone, Copy)]
pub struct ReportOptions<'a> {
    /// The run history (`history.sqlite`) the trends are read from; `None`: no trends.
    pub history: Option<&'a Path>,
    /// Runs per trend chart.
    pub trend_runs: usize,
}

impl Default for ReportOptions<'_> {
    fn default() -> Self {
        ReportOptions { history: None, trend_runs: DEFAULT_TREND_RUNS }
    }
}

/// Writes the full report of `results` into `dir`. `problems` (from
/// [`load_results`]) are listed at the top of the page; `source` names the
/// results file. No trends: see [`write_report_with`].
pub fn write_report(
    results: &RunResults,
    dir: &Path,
    problems: &[String],
    source: Option<&Path>,
) -> Result<ReportFiles, ReportError> {
    write_report_with(results, dir, problems, source, &ReportOptions::default())
}

/// [`write_report`] with a "Trends" section: the run's headline figures over
/// the last `options.trend_runs` runs of `options.history` (trend charts under
/// `charts/trend-N.svg|png`), or the reason there are none.
pub fn write_report_with(
    results: &RunResults,
    dir: &Path,
    problems: &[String],
    source: Option<&Path>,
    options: &ReportOptions<'_>,
) -> Result<ReportFiles, ReportError> {
    fs::create_dir_all(dir.join(CHARTS_DIR)).map_err(|source| ReportError::Io { path: dir.to_path_buf(), source })?;
    // Suites in parallel: drawing and PNG encoding are most of the time.
    let per_suite: Vec<(SuiteExtras, PathBuf, Vec<PathBuf>)> = results
        .suites
        .par_iter()
        .map(|suite| {
            let mut files = Vec::new();
            let extras = suite_charts(dir, suite, &mut files)?;
            Ok((extras, tidy::write_suite_csv(dir, suite)?, files))
        })
        .collect::<Result<_, ReportError>>()?;
    let mut charts = Vec::new();
    let mut extras = Vec::with_capacity(per_suite.len());
    let mut csv = Vec::with_capacity(per_suite.len());
    for (x, c, files) in per_suite {
        extras.push(x);
        csv.push(c);
        charts.extend(files);
    }
    let trace = match trace_case(results) {
        Some((s, c)) => {
            let t = decimated(c.timeline.as_ref().expect("trace_case keeps cases with a timeline"));
            let path = dir.join(TRACE_JSON);
            let c = CaseResult { categories: c.categories.as_ref().map(decimated_stack), ..c.clone() };
            write_atomic(&path, trace::case_trace(&s.name, &c, &t).as_bytes())?;
            Some((path, TraceLink { case: format!("{} / {}", s.name, c.name), file: TRACE_JSON.into() }))
        }
        None => None,
    };
    let trends = match load_trends(results, options.history, options.trend_runs) {
        Trends::NotShown(note) => TrendsView { charts: Vec::new(), note: Some(note), runs: options.trend_runs },
        Trends::Charts(list) => {
            let mut views = Vec::with_capacity(list.len());
            for (k, t) in list.iter().enumerate() {
                let chart = Chart::Trend { title: t.title.clone(), series: &t.series };
                views.push(chart_files(dir, &format!("trend-{k}"), &chart, &mut charts)?);
            }
            TrendsView { charts: views, note: None, runs: options.trend_runs }
        }
    };
    let source = source.map(|p| p.display().to_string());
    let html = render_index_with(results, &extras, trace.as_ref().map(|t| &t.1), problems, source.as_deref(), &trends)?;
    let index_html = dir.join(INDEX_HTML);
    write_atomic(&index_html, html.as_bytes())?;
    let summary_md = dir.join(SUMMARY_MD);
    write_atomic(&summary_md, markdown::render_summary(results).as_bytes())?;
    Ok(ReportFiles { index_html, summary_md, trace_json: trace.map(|t| t.0), csv, charts })
}
