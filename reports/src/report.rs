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
use vramlab_display::chart::{BarGroupSpec, BarSpec, BarsSpec, Unit};
use vramlab_display::format::{fmt_bytes, fmt_ns};
use vramlab_suites::{
    CaseResult, CategoryStack, MemoryTimeline, Outcome, RunResults, SCHEMA_VERSION, Series, SuiteResult,
    TIMELINE_POINTS,
};

use crate::charts::Chart;
use crate::html::{
    CHARTS_DIR, ChartView, INDEX_HTML, SUMMARY_MD, SuiteExtras, TRACE_JSON, TimelineView, TraceLink, TrendsView,
    render_index_with,
};
use crate::trends::{DEFAULT_TREND_RUNS, Trends, load_trends};

use crate::{ReportError, markdown, suite_charts, tidy, trace, write_unsynced};

/// Timelines shown per suite (the largest peaks first); more would make the page slow.
pub const MAX_TIMELINES_PER_SUITE: usize = 6;
/// Points per series of a memory chart drawn as a file: about one per pixel
/// column of the chart (min/max decimation keeps every peak), where more
/// would only make the SVG and PNG bigger.
pub const DRAWN_POINTS: usize = crate::canvas::WIDTH as usize;
/// Times of a category stack drawn as a file: one per four pixel columns
/// (min/max decimation of the total keeps every peak). A stack's SVG holds each
/// band's top and bottom edge: at one point per column a full CPU run's page was
/// 2.28 MB (1.56 MB of it six stacks), and at one per two columns a run on a
/// quiet machine, whose longer stacks all reached the limit, still 2.19 MB
/// (eight stacks of about 100 KB).
pub const STACK_POINTS: usize = crate::canvas::WIDTH as usize / 4;
/// Points per series of an interactive timeline's data in the page: enough to
/// zoom into, few enough for the page to stay small with dozens of timelines.
pub const PAGE_POINTS: usize = 1000;
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
fn chart_files(dir: &Path, name: &str, chart: &Chart<'_>) -> Result<ChartView, ReportError> {
    let svg_file = format!("{CHARTS_DIR}/{name}.svg");
    let png = format!("{CHARTS_DIR}/{name}.png");
    // The two backends are independent: draw them at the same time.
    let (svg, png_done) = rayon::join(
        || -> Result<String, ReportError> {
            let svg = chart.svg()?;
            write_unsynced(&dir.join(&svg_file), svg.as_bytes())?;
            Ok(svg)
        },
        || chart.write_png(&dir.join(&png)),
    );
    let svg = svg?;
    png_done?;
    // The inline copy drops the XML prolog, if any, and keeps the <svg> element.
    let inline = svg.find("<svg").map_or(svg.clone(), |i| svg[i..].to_owned());
    Ok(ChartView { title: chart.title().to_owned(), svg: inline, png, svg_file })
}

/// One chart file pair to draw, planned before any is drawn so that all of a
/// report's charts are drawn in parallel, whatever suite they belong to.
enum Job<'a> {
    Static(Chart<'a>),
    Stack { title: String, stack: CategoryStack },
    Timeline { title: String, id: String, timeline: MemoryTimeline },
}

struct Planned<'a> {
    suite: usize,
    name: String,
    job: Job<'a>,
}

/// What a drawn job adds to its suite's section.
enum Drawn {
    Static(ChartView),
    /// A category stack: shown with the timelines, collapsed.
    Stack(ChartView),
    Timeline(Box<TimelineView>),
}

/// The charts of one suite, in page order: the suite's claim charts (or,
/// for a suite without its own, median time and peak per case), the category
/// stacks, then the memory timelines.
fn plan_suite<'a>(index: usize, suite: &'a SuiteResult, jobs: &mut Vec<Planned<'a>>) {
    let s = slug(&suite.name);
    let mut push = |name: String, job: Job<'a>| jobs.push(Planned { suite: index, name, job });
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
        push(format!("{s}-unavailable"), Job::Static(chart));
        return;
    }
    match suite_charts::for_suite(suite) {
        Some(charts) => {
            for (name, chart) in charts {
                push(format!("{s}-{}", slug(&name)), Job::Static(chart));
            }
        }
        None => {
            for (what, unit, value) in [
                (
                    "time",
                    Unit::Nanoseconds,
                    &(|c: &CaseResult| Some(c.timing.as_ref()?.median_ns)) as &dyn Fn(&CaseResult) -> Option<f64>,
                ),
                ("peak", Unit::Bytes, &|c: &CaseResult| Some(c.memory.as_ref()?.peak_allocated_bytes as f64)),
            ] {
                let bars: Vec<BarSpec> =
                    ok.iter().filter_map(|c| Some(BarSpec::new(c.name.clone(), value(c)?, 0))).take(MAX_BARS).collect();
                if bars.is_empty() {
                    continue;
                }
                let title = match what {
                    "time" => format!("{}: median time per case", suite.name),
                    _ => format!("{}: peak allocated per case", suite.name),
                };
                let bars = BarsSpec::new(unit, vec![BarGroupSpec { name: String::new(), bars }]);
                let chart = Chart::Bars { title, bars };
                push(format!("{s}-{what}"), Job::Static(chart));
            }
        }
    }
    let mut with_timeline: Vec<(&CaseResult, &MemoryTimeline)> =
        ok.iter().filter_map(|c| Some((*c, c.timeline.as_ref()?))).collect();
    with_timeline.sort_by_key(|(_, t)| std::cmp::Reverse(t.peak_allocated_bytes));
    with_timeline.truncate(MAX_TIMELINES_PER_SUITE);
    // The category stacks of the cases whose timelines are shown; a stack of
    // one band says no more than the timeline, so it needs two or more.
    for (c, _) in &with_timeline {
        if let Some(stack) = c.categories.as_ref().filter(|s| bands(s) > 1) {
            let title = format!("{}: allocated by category", c.name);
            let stack = decimated_stack_to(stack, STACK_POINTS);
            push(format!("{s}-{}-categories", slug(&c.name)), Job::Stack { title, stack });
        }
    }
    for (k, (c, t)) in with_timeline.into_iter().enumerate() {
        let title = format!("{}: memory over time", c.name);
        push(
            format!("{s}-{}-timeline", slug(&c.name)),
            Job::Timeline { title, id: format!("tl-{s}-{k}"), timeline: decimated_to(t, PAGE_POINTS) },
        );
    }
}

/// The categories of a stack that ever hold a byte.
pub fn bands(stack: &CategoryStack) -> usize {
    stack.by_category_bytes.values().filter(|v| v.iter().any(|&b| b > 0)).count()
}

fn draw_job(dir: &Path, p: &Planned<'_>) -> Result<Drawn, ReportError> {
    Ok(match &p.job {
        Job::Static(chart) => Drawn::Static(chart_files(dir, &p.name, chart)?),
        Job::Stack { title, stack } => {
            Drawn::Stack(chart_files(dir, &p.name, &Chart::Categories { title: title.clone(), stack })?)
        }
        Job::Timeline { title, id, timeline: t } => {
            // The page draws this one interactively from its data; the files are linked.
            let drawn = decimated_to(t, DRAWN_POINTS);
            let view = chart_files(dir, &p.name, &Chart::Timeline { title: title.clone(), timeline: &drawn })?;
            Drawn::Timeline(Box::new(TimelineView {
                png: view.png,
                svg_file: view.svg_file,
                id: id.clone(),
                title: title.clone(),
                peak: fmt_bytes(t.peak_allocated_bytes),
                peak_time: fmt_ns(t.peak_time_ns as f64),
                peak_phase: t.peak_phase.clone(),
                data: t.clone(),
            }))
        }
    })
}

fn decimated_series(s: &Series, points: usize) -> Series {
    if s.time_ns.len() <= points {
        return s.clone();
    }
    let d = vramlab_profiler::decimate(&s.time_ns, &s.bytes, points);
    Series {
        time_ns: d.indices.iter().map(|&i| s.time_ns[i]).collect(),
        bytes: d.indices.iter().map(|&i| s.bytes[i]).collect(),
    }
}

/// A timeline with at most [`TIMELINE_POINTS`] points per series (min/max
/// decimation, peaks kept): files written by this build already are; a file
/// from elsewhere with millions of points is cut down before drawing.
pub fn decimated(t: &MemoryTimeline) -> MemoryTimeline {
    decimated_to(t, TIMELINE_POINTS)
}

/// A timeline with at most `points` points per series (min/max decimation, peaks kept).
pub fn decimated_to(t: &MemoryTimeline, points: usize) -> MemoryTimeline {
    MemoryTimeline {
        device: t.device.clone(),
        duration_ns: t.duration_ns,
        allocated: decimated_series(&t.allocated, points),
        reserved: decimated_series(&t.reserved, points),
        active: decimated_series(&t.active, points),
        phases: t.phases.clone(),
        peak_allocated_bytes: t.peak_allocated_bytes,
        peak_time_ns: t.peak_time_ns,
        peak_phase: t.peak_phase.clone(),
        events: t.events,
    }
}

fn decimated_stack(s: &CategoryStack) -> CategoryStack {
    decimated_stack_to(s, TIMELINE_POINTS)
}

/// A category stack with at most `points` times, chosen by min/max decimation of the total.
fn decimated_stack_to(s: &CategoryStack, points: usize) -> CategoryStack {
    if s.time_ns.len() <= points {
        return s.clone();
    }
    let totals: Vec<u64> = (0..s.time_ns.len())
        .map(|i| s.by_category_bytes.values().map(|v| v.get(i).copied().unwrap_or(0)).sum())
        .collect();
    let d = vramlab_profiler::decimate(&s.time_ns, &totals, points);
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
    // Every chart of every suite in parallel: drawing and PNG encoding are
    // most of the time, and one suite (memory, amp) can hold most charts.
    let mut jobs = Vec::new();
    for (i, suite) in results.suites.iter().enumerate() {
        plan_suite(i, suite, &mut jobs);
    }
    let (drawn, csv) = rayon::join(
        || jobs.par_iter().map(|j| draw_job(dir, j)).collect::<Result<Vec<Drawn>, ReportError>>(),
        || results.suites.par_iter().map(|s| tidy::write_suite_csv(dir, s)).collect::<Result<Vec<PathBuf>, _>>(),
    );
    let (drawn, csv) = (drawn?, csv?);
    let mut extras: Vec<SuiteExtras> = results
        .suites
        .iter()
        .map(|s| SuiteExtras { csv: format!("{}.csv", s.name), ..SuiteExtras::default() })
        .collect();
    let mut charts = Vec::with_capacity(2 * drawn.len());
    for (job, d) in jobs.iter().zip(drawn) {
        let x = &mut extras[job.suite];
        let (png, svg) = match d {
            Drawn::Static(v) => {
                let files = (v.png.clone(), v.svg_file.clone());
                x.charts.push(v);
                files
            }
            Drawn::Stack(v) => {
                let files = (v.png.clone(), v.svg_file.clone());
                x.stacks.push(v);
                files
            }
            Drawn::Timeline(v) => {
                let files = (v.png.clone(), v.svg_file.clone());
                x.timelines.push(*v);
                files
            }
        };
        charts.push(dir.join(png));
        charts.push(dir.join(svg));
    }
    let trace = match trace_case(results) {
        Some((s, c)) => {
            let t = decimated(c.timeline.as_ref().expect("trace_case keeps cases with a timeline"));
            let path = dir.join(TRACE_JSON);
            let c = c.clone().with_categories(c.categories.as_ref().map(decimated_stack));
            write_unsynced(&path, trace::case_trace(&s.name, &c, &t).as_bytes())?;
            Some((path, TraceLink { case: format!("{} / {}", s.name, c.name), file: TRACE_JSON.into() }))
        }
        None => None,
    };
    let trends = match load_trends(results, options.history, options.trend_runs) {
        Trends::NotShown(note) => TrendsView {
            charts: Vec::new(),
            note: Some(note),
            runs: options.trend_runs,
            noise: crate::trends::noise_view(results, options.history),
        },
        Trends::Charts(list) => {
            let views = list
                .par_iter()
                .enumerate()
                .map(|(k, t)| {
                    let chart = Chart::Trend { title: t.title.clone(), series: &t.series };
                    chart_files(dir, &format!("trend-{k}"), &chart)
                })
                .collect::<Result<Vec<ChartView>, ReportError>>()?;
            for v in &views {
                charts.push(dir.join(&v.png));
                charts.push(dir.join(&v.svg_file));
            }
            TrendsView {
                charts: views,
                note: None,
                runs: options.trend_runs,
                noise: crate::trends::noise_view(results, options.history),
            }
        }
    };
    let source = source.map(|p| p.display().to_string());
    let html = render_index_with(results, &extras, trace.as_ref().map(|t| &t.1), problems, source.as_deref(), &trends)?;
    let index_html = dir.join(INDEX_HTML);
    write_unsynced(&index_html, html.as_bytes())?;
    let summary_md = dir.join(SUMMARY_MD);
    write_unsynced(&summary_md, markdown::render_summary(results).as_bytes())?;
    Ok(ReportFiles { index_html, summary_md, trace_json: trace.map(|t| t.0), csv, charts })
}
