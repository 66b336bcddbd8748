//! The offline HTML report (`index.html`): one self-contained page rendered by
//! minijinja with auto-escaping from `templates/report.html`, with its CSS and
//! the timeline script (`templates/*.css|js`, written for the report) inlined
//! and every chart inline as SVG. Nothing is fetched: no CDN, font or script.

use minijinja::{AutoEscape, Environment};
use serde::Serialize;
use vramlab_suites::{CaseResult, MemoryTimeline, Outcome, RunResults, SuiteResult, Verdict};

use crate::ReportError;
use crate::markdown::verdict_text;
use crate::tidy::params_text;
use crate::units::{fmt_bytes, fmt_metric, fmt_ns};

/// The `<head>` every page shares (charset, viewport, title, the CSS inline).
const HEAD: &str = include_str!("../templates/head.html");
/// The replay and what-if pages' title and summary table.
const SUMMARY_TOP: &str = include_str!("../templates/summary_top.html");
const TEMPLATE: &str = include_str!("../templates/report.html");
const REPLAY_TEMPLATE: &str = include_str!("../templates/replay.html");
const WHATIF_TEMPLATE: &str = include_str!("../templates/whatif.html");
/// The index page of `vramlab record` (a row per snapshot written).
const RECORD_TEMPLATE: &str = include_str!("../templates/record.html");
/// The page of two snapshots compared (`diff_page.rs`).
const DIFF_TEMPLATE: &str = include_str!("../templates/diff.html");
/// The "who holds the memory" tables the replay and what-if pages include.
const PEAK_TABLE_TEMPLATE: &str = include_str!("../templates/peak_table.html");
/// The pages' stylesheet, inlined into each.
pub(crate) const CSS: &str = include_str!("../templates/report.css");
const JS: &str = include_str!("../templates/timeline.js");

/// A chart already drawn, as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ChartView {
    pub title: String,
    /// The SVG document (inlined; produced by plotters, which escapes its text).
    pub svg: String,
    /// File names beside `index.html`.
    pub png: String,
    pub svg_file: String,
}

/// An interactive timeline: its data goes into the page as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineView {
    pub id: String,
    pub title: String,
    pub peak: String,
    pub peak_time: String,
    pub peak_phase: Option<String>,
    /// The static chart's files beside `index.html`.
    pub png: String,
    pub svg_file: String,
    pub data: MemoryTimeline,
}

/// What a suite section shows besides its cases.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SuiteExtras {
    pub charts: Vec<ChartView>,
    pub timelines: Vec<TimelineView>,
    pub csv: String,
}

/// The "Trends" section: trend charts, or the note saying why there are none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrendsView {
    pub charts: Vec<ChartView>,
    pub note: Option<String>,
    /// Runs per chart, at most.
    pub runs: usize,
    /// The noise floor of this run's times, from the history's A/A runs.
    pub noise: NoiseView,
}

/// The noise floor table: per time figure, the change two runs of one build
/// exceed 5 % of the time, and whether a 5 % gate holds for it; or why there is none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NoiseView {
    pub rows: Vec<NoiseRow>,
    pub note: Option<String>,
    /// Of `rows`, how many can be gated at 5 % from one run a side.
    pub gateable: usize,
}

/// One row of the noise floor table.
#[derive(Debug, Clone, Serialize)]
pub struct NoiseRow {
    pub figure: String,
    pub runs: usize,
    pub builds: usize,
    /// "3.1 %".
    pub between_run: String,
    pub floor: String,
    pub gate_5: bool,
}

/// The trace file the page links.
#[derive(Debug, Clone, Serialize)]
pub struct TraceLink {
    pub case: String,
    pub file: String,
}

#[derive(Serialize)]
struct VerdictRow<'a> {
    suite: &'a str,
    claim: &'a str,
    verdict: &'static str,
    class: &'static str,
    evidence: &'a str,
}

#[derive(Serialize)]
struct CaseRow {
    name: String,
    params: String,
    median: String,
    iqr: String,
    peak: String,
    metrics: Vec<String>,
    outcome: String,
    class: &'static str,
}

#[derive(Serialize)]
struct SuiteView<'a> {
    name: &'a str,
    description: &'a str,
    finding: String,
    cases: Vec<CaseRow>,
    charts: &'a [ChartView],
    timelines: &'a [TimelineView],
    csv: &'a str,
}

#[derive(Serialize)]
struct EnvView {
    cpu: String,
    host_memory: String,
    gpus: Vec<String>,
    gpu_reason: String,
    device: String,
    os: String,
    commit: String,
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "holds",
        Verdict::DoesNotHold => "does-not-hold",
        Verdict::Inconclusive => "inconclusive",
        Verdict::NotApplicable => "not-applicable",
    }
}

/// The suite's finding in one sentence: its first verdict with the evidence,
/// or, without findings, what its cases measured.
pub fn suite_finding(suite: &SuiteResult) -> String {
    if let Some(f) = suite.findings.first() {
        let more = match suite.findings.len() {
            1 => String::new(),
            n => format!(" ({} more claims in the verdict table)", n - 1),
        };
        return format!("{} — {}: {}{more}", f.claim, verdict_text(f.verdict), f.evidence);
    }
    let ok = suite.cases.iter().filter(|c| c.outcome.is_ok()).count();
    let slowest =
        suite.cases.iter().filter_map(|c| Some((c, c.timing.as_ref()?.median_ns))).max_by(|a, b| a.1.total_cmp(&b.1));
    let biggest =
        suite.cases.iter().filter_map(|c| Some((c, c.memory.as_ref()?.peak_allocated_bytes))).max_by_key(|x| x.1);
    let mut s = format!("{ok} of {} cases ran", suite.cases.len());
    if let Some((c, t)) = slowest {
        s += &format!("; the slowest was {} at {} (median)", c.name, fmt_ns(t));
    }
    if let Some((c, b)) = biggest {
        s += &format!("; the largest peak was {} in {}", fmt_bytes(b), c.name);
    }
    s + "."
}

fn case_row(c: &CaseResult) -> CaseRow {
    let (outcome, class) = match &c.outcome {
        Outcome::Ok => ("ok".to_owned(), "ok"),
        Outcome::Failed { message } => (format!("failed: {message}"), "failed"),
        Outcome::NotAvailable { reason } => (format!("not available: {reason}"), "not-available"),
    };
    CaseRow {
        name: c.name.clone(),
        params: params_text(c).replace(';', "; "),
        median: c.timing.as_ref().map(|t| fmt_ns(t.median_ns)).unwrap_or_default(),
        iqr: c.timing.as_ref().map(|t| fmt_ns(t.iqr_ns)).unwrap_or_default(),
        peak: c.memory.as_ref().map(|m| fmt_bytes(m.peak_allocated_bytes)).unwrap_or_default(),
        metrics: c.metrics.iter().map(|(k, v)| format!("{k} = {}", fmt_metric(k, *v))).collect(),
        outcome,
        class,
    }
}

/// Every page template (the run's report, a replay's and a what-if's) with
/// their shared head and the replay and what-if pages' shared top,
/// auto-escaping on for `.html`.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|name| if name.ends_with(".html") { AutoEscape::Html } else { AutoEscape::None });
    for (name, source) in [
        ("head.html", HEAD),
        ("summary_top.html", SUMMARY_TOP),
        ("report.html", TEMPLATE),
        ("replay.html", REPLAY_TEMPLATE),
        ("whatif.html", WHATIF_TEMPLATE),
        ("record.html", RECORD_TEMPLATE),
        ("diff.html", DIFF_TEMPLATE),
        ("peak_table.html", PEAK_TABLE_TEMPLATE),
    ] {
        env.add_template(name, source).expect("the bundled templates parse");
    }
    env
}

/// Renders the page. `extras` holds one entry per suite of `results`, in order.
pub fn render_index(
    results: &RunResults,
    extras: &[SuiteExtras],
    trace: Option<&TraceLink>,
    problems: &[String],
    source: Option<&str>,
) -> Result<String, ReportError> {
    let none = TrendsView {
        note: Some("No trends: no run history was given (`cargo xtask report --history FILE`).".into()),
        ..TrendsView::default()
    };
    render_index_with(results, extras, trace, problems, source, &none)
}

/// [`render_index`] with the "Trends" section's content.
pub fn render_index_with(
    results: &RunResults,
    extras: &[SuiteExtras],
    trace: Option<&TraceLink>,
    problems: &[String],
    source: Option<&str>,
    trends: &TrendsView,
) -> Result<String, ReportError> {
    let e = &results.environment;
    let env_view = EnvView {
        cpu: format!("{} ({} cores)", e.cpu_model, e.cpu_cores),
        host_memory: fmt_bytes(e.host_memory_bytes),
        gpus: e
            .gpus
            .iter()
            .map(|g| {
                format!(
                    "{}: {} · {} · compute {} · driver {} · CUDA {}",
                    g.index,
                    g.name,
                    fmt_bytes(g.memory_bytes),
                    g.compute_capability.as_deref().unwrap_or("?"),
                    g.driver_version.as_deref().unwrap_or("?"),
                    g.cuda_version.as_deref().unwrap_or("?")
                )
            })
            .collect(),
        gpu_reason: e.gpu_unavailable_reason.clone().unwrap_or_else(|| "none found".into()),
        device: e.device.clone(),
        os: e.os.clone(),
        commit: e.git_commit.clone().unwrap_or_else(|| "unknown".into()),
    };
    let verdicts: Vec<VerdictRow> = results
        .suites
        .iter()
        .flat_map(|s| {
            s.findings.iter().map(move |f| VerdictRow {
                suite: &s.name,
                claim: &f.claim,
                verdict: verdict_text(f.verdict),
                class: verdict_class(f.verdict),
                evidence: &f.evidence,
            })
        })
        .collect();
    let empty = SuiteExtras::default();
    let suites: Vec<SuiteView> = results
        .suites
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let x = extras.get(i).unwrap_or(&empty);
            SuiteView {
                name: &s.name,
                description: &s.description,
                finding: suite_finding(s),
                cases: s.cases.iter().map(case_row).collect(),
                charts: &x.charts,
                timelines: &x.timelines,
                csv: &x.csv,
            }
        })
        .collect();
    let ctx = minijinja::context! {
        title => "vramlab report",
        version => &results.vramlab_version,
        started_at => &results.started_at,
        quick => results.options.quick,
        source => source,
        env => env_view,
        verdicts => verdicts,
        suites => suites,
        trace => trace,
        trends => trends,
        problems => problems,
        css => CSS,
        js => JS,
    };
    environment()
        .get_template("report.html")
        .and_then(|t| t.render(ctx))
        .map_err(|e| ReportError::Template { reason: format!("{e:#}") })
}
