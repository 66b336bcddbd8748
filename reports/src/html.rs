//! The offline HTML report (`index.html`): one self-contained page rendered by
//! minijinja with auto-escaping from `templates/report.html`, with its CSS and
//! the timeline script (`templates/*.css|js`, written for the report) inlined
//! and every chart inline as SVG. Nothing is fetched: no CDN, font or script.

use minijinja::{AutoEscape, Environment};
use serde::Serialize;
use vramlab_display::format::{fmt_bytes, fmt_ns};
use vramlab_suites::{CaseResult, Finding, MemoryTimeline, Outcome, RunResults, SuiteResult, Verdict};

use crate::ReportError;
use crate::markdown::verdict_text;
use crate::tidy::params_text;
use crate::units::fmt_metric;

/// File names inside a report folder (the report's, a replay's, a what-if's).
pub const INDEX_HTML: &str = "index.html";
pub const SUMMARY_MD: &str = "summary.md";
pub const TRACE_JSON: &str = "trace.json";
pub const CHARTS_DIR: &str = "charts";

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
/// The page of two results files compared (`results_diff.rs`).
const RESULTS_DIFF_TEMPLATE: &str = include_str!("../templates/results_diff.html");
/// The "who holds the memory" tables the replay and what-if pages include.
const PEAK_TABLE_TEMPLATE: &str = include_str!("../templates/peak_table.html");
/// The pages' stylesheet, inlined into each.
pub(crate) const CSS: &str = include_str!("../templates/report.css");
/// The timeline script (the bench report's and the replay page's), inlined.
pub(crate) const JS: &str = include_str!("../templates/timeline.js");
/// The replay page's allocator state at an entry (`state_view.rs`'s data).
pub(crate) const STATE_JS: &str = include_str!("../templates/state.js");

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
    /// Allocated bytes by category, shown with the timelines (collapsed).
    pub stacks: Vec<ChartView>,
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
    /// As a sentence ([`sentence`]).
    evidence: String,
}

#[derive(Serialize)]
struct CaseRow {
    name: String,
    params: String,
    median: String,
    iqr: String,
    peak: String,
    /// `bench --simulate`: instructions and estimated cycles of the measured region.
    simulated: String,
    metrics: Vec<String>,
    outcome: String,
    class: &'static str,
}

#[derive(Serialize)]
struct SuiteView<'a> {
    name: &'a str,
    /// As a sentence ([`sentence`]).
    description: String,
    finding: Option<FindingView<'a>>,
    /// Without findings: what the cases measured, in one sentence.
    summary: String,
    cases: Vec<CaseRow>,
    /// Some case has simulated figures: the table shows them, and says which figure gates.
    simulated: bool,
    charts: &'a [ChartView],
    stacks: &'a [ChartView],
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

/// A suite's first finding as its section shows it: the badge, then the claim.
#[derive(Serialize)]
struct FindingView<'a> {
    verdict: &'static str,
    class: &'static str,
    claim: &'a str,
    /// As a sentence ([`sentence`]).
    evidence: String,
    /// "(2 more claims in the verdict table)", or empty.
    more: String,
}

/// One verdict's count on the first screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerdictCount {
    pub count: usize,
    /// "hold", "do not hold", … (agreeing with the count).
    pub label: String,
    pub class: &'static str,
}

/// The verdict counts, in the order holds, inconclusive, does not hold, not
/// applicable; every kind listed, zero included, so the sentence reads the same
/// on every run.
pub fn verdict_counts(results: &RunResults) -> Vec<VerdictCount> {
    counts_of(&results.suites.iter().flat_map(|s| &s.findings).collect::<Vec<_>>())
}

fn counts_of(findings: &[&Finding]) -> Vec<VerdictCount> {
    [Verdict::Holds, Verdict::Inconclusive, Verdict::DoesNotHold, Verdict::NotApplicable]
        .into_iter()
        .map(|v| {
            let count = findings.iter().filter(|f| f.verdict == v).count();
            let label = match (v, count) {
                (Verdict::Holds, 1) => "holds",
                (Verdict::Holds, _) => "hold",
                (Verdict::DoesNotHold, 1) => "does not hold",
                (Verdict::DoesNotHold, _) => "do not hold",
                (Verdict::Inconclusive, _) => "inconclusive",
                (Verdict::NotApplicable, _) => "not applicable",
            };
            VerdictCount { count, label: label.to_owned(), class: verdict_class(v) }
        })
        .collect()
}

/// `text` as a sentence on the page: its first letter capitalised where the
/// first word is a plain word (a code name such as `no_grad` or
/// `cudnn.benchmark` keeps its case), and a final period where it has none.
/// The suites write their evidence as clauses ("training 3.00 MiB vs eval
/// 1.00 MiB"); the report shows each as a sentence.
pub fn sentence(text: &str) -> String {
    let text = text.trim();
    let first_word = text.split_whitespace().next().unwrap_or("");
    let plain = first_word.chars().all(|c| c.is_alphabetic() || c == '\'' || c == '-' || c == ',' || c == ':');
    let mut out = String::with_capacity(text.len() + 1);
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if plain && c.is_lowercase() => out.extend(c.to_uppercase()),
        Some(c) => out.push(c),
        None => return out,
    }
    out.push_str(chars.as_str());
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// The first screen's sentence: what was measured, where, and what kind of run.
pub fn headline(results: &RunResults) -> String {
    let e = &results.environment;
    let place = match e
        .gpus
        .iter()
        .find(|g| e.device == format!("cuda:{}", g.index))
        .or_else(|| (e.device.starts_with("cuda") && e.gpus.len() == 1).then(|| &e.gpus[0]))
    {
        Some(g) => format!("{} ({}, {})", g.name, e.device, fmt_bytes(g.memory_bytes)),
        None => {
            let cores = if e.cpu_cores == 1 { "1 core".to_owned() } else { format!("{} cores", e.cpu_cores) };
            let why = match (&e.gpu_unavailable_reason, e.gpus.is_empty()) {
                (Some(r), true) => format!("; no GPU: {r}"),
                _ => String::new(),
            };
            format!("the CPU, {} ({cores}{why})", e.cpu_model)
        }
    };
    let names: Vec<&str> = results.suites.iter().map(|s| s.name.as_str()).collect();
    let suites = match names.len() {
        0 => "no suite".to_owned(),
        1 => format!("1 suite ({})", names[0]),
        n => format!("{n} suites ({})", names.join(", ")),
    };
    let kind = if results.options.quick { "a quick run (fewer samples and sizes)" } else { "a full run" };
    format!("Measured on {place}: {suites}, {kind}.")
}

/// A suite in the table of contents: its link and its verdicts' counts.
#[derive(Serialize)]
struct TocEntry<'a> {
    name: &'a str,
    cases: usize,
    counts: Vec<VerdictCount>,
}

/// The suite's finding in one sentence: its first verdict with the evidence,
/// or, without findings, what its cases measured.
pub fn suite_finding(suite: &SuiteResult) -> String {
    if let Some(f) = suite.findings.first() {
        let more = match suite.findings.len() {
            1 => String::new(),
            2 => " (1 more claim in the verdict table)".to_owned(),
            n => format!(" ({} more claims in the verdict table)", n - 1),
        };
        return sentence(&format!("{} — {}: {}{more}", f.claim, verdict_text(f.verdict), f.evidence));
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

/// A case's row. A case not available for the reason the environment table
/// already gives (`gpu_reason`, no GPU here) points there instead of
/// repeating it on every row.
fn case_row(c: &CaseResult, gpu_reason: Option<&str>) -> CaseRow {
    let (outcome, class) = match &c.outcome {
        Outcome::Ok => ("ok".to_owned(), "ok"),
        Outcome::Failed { message } => (format!("failed: {message}"), "failed"),
        Outcome::NotAvailable { reason } if gpu_reason.is_some_and(|g| !g.is_empty() && reason.contains(g)) => {
            ("not available: no GPU here (why: the environment's GPUs row)".to_owned(), "not-available")
        }
        Outcome::NotAvailable { reason } => (format!("not available: {reason}"), "not-available"),
    };
    CaseRow {
        name: c.name.clone(),
        params: params_text(c).replace(';', "; "),
        median: c.timing.as_ref().map(|t| fmt_ns(t.median_ns)).unwrap_or_default(),
        iqr: c.timing.as_ref().map(|t| fmt_ns(t.iqr_ns)).unwrap_or_default(),
        peak: c.memory.as_ref().map(|m| fmt_bytes(m.peak_allocated_bytes)).unwrap_or_default(),
        simulated: c
            .simulated
            .as_ref()
            .map(|s| format!("{} instr. · {} est. cycles", s.instructions, s.estimated_cycles))
            .unwrap_or_default(),
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
        ("results_diff.html", RESULTS_DIFF_TEMPLATE),
        ("peak_table.html", PEAK_TABLE_TEMPLATE),
    ] {
        env.add_template(name, source).expect("the bundled templates parse");
    }
    env
}

/// Renders page template `template` (see [`environment`]) with `ctx`.
pub(crate) fn render(template: &str, ctx: minijinja::Value) -> Result<String, crate::ReportError> {
    environment()
        .get_template(template)
        .and_then(|t| t.render(ctx))
        .map_err(|e| crate::ReportError::Template { reason: format!("{e:#}") })
}

/// Renders `template` with `ctx` into `dir/index.html`; its path.
pub(crate) fn write_index(
    dir: &std::path::Path,
    template: &str,
    ctx: minijinja::Value,
) -> Result<std::path::PathBuf, crate::ReportError> {
    let html = render(template, ctx)?;
    let index_html = dir.join(INDEX_HTML);
    crate::write_unsynced(&index_html, html.as_bytes())?;
    Ok(index_html)
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
                evidence: sentence(&f.evidence),
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
                description: sentence(&s.description),
                finding: s.findings.first().map(|f| FindingView {
                    verdict: verdict_text(f.verdict),
                    class: verdict_class(f.verdict),
                    claim: &f.claim,
                    evidence: sentence(&f.evidence),
                    more: match s.findings.len() {
                        1 => String::new(),
                        2 => "(1 more claim in the verdict table)".to_owned(),
                        n => format!("({} more claims in the verdict table)", n - 1),
                    },
                }),
                summary: suite_finding(s),
                cases: s.cases.iter().map(|c| case_row(c, e.gpu_unavailable_reason.as_deref())).collect(),
                simulated: s.cases.iter().any(|c| c.simulated.is_some()),
                charts: &x.charts,
                stacks: &x.stacks,
                timelines: &x.timelines,
                csv: &x.csv,
            }
        })
        .collect();
    let toc: Vec<TocEntry> = results
        .suites
        .iter()
        .map(|s| TocEntry {
            name: &s.name,
            cases: s.cases.len(),
            counts: counts_of(&s.findings.iter().collect::<Vec<_>>()).into_iter().filter(|c| c.count > 0).collect(),
        })
        .collect();
    let ctx = minijinja::context! {
        title => "vramlab report",
        headline => headline(results),
        counts => verdict_counts(results),
        toc => toc,
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

#[cfg(test)]
mod tests {
    use vramlab_suites::{Environment, GpuInfo, RunOptions};

    use super::*;

    #[test]
    fn a_case_without_the_gpu_points_to_the_environment_instead_of_repeating_why() {
        let why = "CUDA unavailable: libcuda (the NVIDIA driver) not found";
        let c = CaseResult::new("matmul/gpu", Outcome::NotAvailable { reason: format!("no GPU: {why}") });
        let row = case_row(&c, Some(why));
        assert_eq!(row.outcome, "not available: no GPU here (why: the environment's GPUs row)");
        let other = CaseResult::new("bf16", Outcome::NotAvailable { reason: "no bf16 here".into() });
        assert_eq!(case_row(&other, Some(why)).outcome, "not available: no bf16 here");
        assert_eq!(case_row(&c, None).outcome, format!("not available: no GPU: {why}"));
    }

    fn run(device: &str, gpus: Vec<GpuInfo>, verdicts: &[Verdict]) -> RunResults {
        let finding = |v: &Verdict| Finding { claim: "c".into(), verdict: *v, evidence: "e".into() };
        RunResults {
            schema_version: vramlab_suites::SCHEMA_VERSION,
            vramlab_version: "0".into(),
            started_at: "t".into(),
            options: RunOptions {
                suites: vec![],
                device: device.into(),
                quick: false,
                samples: None,
                seed: 1,
                capacity_bytes: 1,
            },
            environment: Environment {
                cpu_model: "Xeon".into(),
                cpu_cores: 16,
                host_memory_bytes: 1,
                gpu_unavailable_reason: gpus.is_empty().then(|| "no driver".into()),
                gpus,
                device: device.into(),
                os: "linux".into(),
                rustc: None,
                git_commit: None,
            },
            suites: ["memory", "amp"]
                .iter()
                .map(|name| SuiteResult {
                    name: (*name).into(),
                    description: String::new(),
                    device: device.into(),
                    duration_ns: 1,
                    cases: vec![],
                    findings: verdicts.iter().map(finding).collect(),
                    charts: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn the_headline_names_the_gpu_the_suites_and_the_run_kind() {
        let h200 = GpuInfo {
            index: 0,
            name: "NVIDIA H200".into(),
            memory_bytes: 141 << 30,
            compute_capability: None,
            driver_version: None,
            cuda_version: None,
        };
        assert_eq!(
            headline(&run("cuda:0", vec![h200], &[])),
            "Measured on NVIDIA H200 (cuda:0, 141.00 GiB): 2 suites (memory, amp), a full run."
        );
        assert_eq!(
            headline(&run("cpu", vec![], &[])),
            "Measured on the CPU, Xeon (16 cores; no GPU: no driver): 2 suites (memory, amp), a full run."
        );
    }

    #[test]
    fn counts_list_every_verdict_with_a_label_that_agrees() {
        let counts = verdict_counts(&run("cpu", vec![], &[Verdict::Holds, Verdict::DoesNotHold, Verdict::Holds]));
        let text: Vec<String> = counts.iter().map(|c| format!("{} {}", c.count, c.label)).collect();
        assert_eq!(text, ["4 hold", "0 inconclusive", "2 do not hold", "0 not applicable"]);
        let one = verdict_counts(&run("cpu", vec![], &[Verdict::DoesNotHold]));
        assert_eq!((one[2].count, one[2].label.as_str()), (2, "do not hold"));
    }
}
