//! vramlab's reports: everything that turns results into files — the run's
//! versioned JSON, one tidy CSV per suite ([`tidy`]), charts ([`charts`]), the
//! offline HTML page ([`html`]), `summary.md` ([`markdown`]) and a Perfetto
//! trace ([`trace`]), put together by [`report`]; the pages of a replay and a
//! what-if ([`replay_page`]); bench cases' recordings as PyTorch memory
//! snapshots ([`memory_snapshot`]); the regression check against
//! a baseline ([`check`]), the run history ([`history`]), and the file stores
//! of engine parts that persist state ([`FileTuningStore`]). Every file is
//! written atomically (to a temporary file, then renamed), so an interrupted
//! run keeps every suite that finished and never leaves a half-written file.
//!
//! Files:
//! - `src/lib.rs` — this map, `results.json` (write, strict read)
//! - `src/files.rs` — the atomic writers, the output folder and its logs, `ReportError`
//! - `src/report.rs` — the whole report into one folder: charts planned then drawn in parallel, the lenient reader
//! - `src/html.rs` — the pages through minijinja (one environment, auto-escaping); the report folder's file names
//! - `src/markdown.rs` — `summary.md`
//! - `src/tidy.rs` — the tidy per-suite CSV
//! - `src/trace.rs` — `trace.json` (Perfetto) of a case or of replays
//! - `src/units.rs` — a metric name's unit and its value written with it
//! - `src/canvas.rs` — what every chart draws on: size, font, the palette in plotters' colours, "no data here"
//! - `src/charts.rs` — the `Chart` kinds as SVG and PNG; memory timelines and category stacks
//! - `src/plot.rs` — draws the chart model's line charts and grouped bars on our own pixel mapping
//! - `src/suite_charts.rs` — the charts a suite declares, as `Chart`s
//! - `src/trend_chart.rs` — the trend chart (a figure over the history's runs, change points marked)
//! - `src/trends.rs` — the report's Trends section
//! - `src/replay_page.rs` — the replay and what-if pages (memory charts of the chart model, the segment map)
//! - `src/replay_doc.rs` — the replay's document model: what `replay` prints, its `--json`, the page's facts
//!   and its answer card
//! - `src/state_view.rs` — the replay page's allocator state at a chosen entry: the replay's
//!   `StateHistory` as compact JSON for `templates/state.js`
//! - `src/lines_view.rs` — the what-if and diff pages' interactive chart: several replays' lines, marks
//! - `src/diff_page.rs` — the page of two snapshots compared
//! - `src/results_diff.rs` — two results files compared case by case, and its page
//! - `src/peak_table.rs` — the "who holds the memory" tables
//! - `src/record.rs` — `vramlab record`'s hook folder and index page
//! - `src/memory_snapshot.rs` — bench cases' snapshots as pickle files
//! - `src/callgrind.rs` — callgrind's profiles read back: a simulated run's figures per case (`bench --simulate`)
//! - `src/history.rs` — the run history in SQLite, change points, noise floors
//! - `src/stores.rs` — `FileTuningStore`, the autotuner's cache in a file
//! - `src/testing.rs` — the headless chromium the browser tests drive (the `testing` feature only)
//! - `src/check/` — the regression check: `mod.rs` (`compare_runs`), `model.rs` (its types), `runs.rs` (run
//!   sets, their files, machine differences), `matching.rs`, `figures.rs`, `judge.rs`, `output.rs` (the
//!   pipeline's steps), `stats.rs` (bootstrap, t, BH), `config.rs` (`vramlab.toml`), `export.rs` (other
//!   tools' formats), `memory.rs` (the memory gate of PyTorch programs: snapshot figures per rank and
//!   device), `tests.rs` (synthetic runs)
//! - `templates/` — the pages' templates, CSS, the interactive timeline script (`timeline.js`) and the
//!   replay page's allocator state at an entry (`state.js`)
//! - `tests/suite_charts.rs` — every suite's charts from a real full CPU run
//! - `tests/declared_charts.rs` — a suite defined in the test gets its charts with no edit to reports
//! - `benches/check.rs`, `benches/render.rs` — criterion: the check, and the report's render time

pub mod callgrind;
pub mod canvas;
pub mod charts;
pub mod check;
pub mod diff_page;
mod files;
pub mod history;
pub mod html;
mod lines_view;
pub mod markdown;
pub mod memory_snapshot;
pub mod peak_table;
mod plot;
pub mod record;
pub mod replay_doc;
pub mod replay_page;
pub mod report;
pub mod results_diff;
mod state_view;
mod stores;
pub mod suite_charts;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tidy;
pub mod trace;
pub mod trend_chart;
pub mod trends;
pub mod units;

use std::path::{Path, PathBuf};

use vramlab_suites::RunResults;

pub(crate) use files::write_unsynced;
pub use files::{ReportError, create_log, prepare_out_dir, write_atomic};
pub use markdown::render_summary;
pub use report::{ReportFiles, ReportOptions, load_results, write_report, write_report_with};
pub use stores::FileTuningStore;
pub use tidy::write_suite_csv;

/// The run's JSON file name inside the output folder.
pub const RESULTS_JSON: &str = "results.json";

/// Writes the run's JSON (`results.json`) into `dir`; returns its path.
/// Compact (no indentation: a third of the pretty form's size), and kernel
/// slices kept only for the case whose trace the report writes
/// ([`report::trace_case`]): the others' were most of a GPU run's file and
/// nothing reads them.
pub fn write_results_json(dir: &Path, results: &RunResults) -> Result<PathBuf, ReportError> {
    let path = dir.join(RESULTS_JSON);
    let kept = report::trace_case(results).map(|(s, c)| (s.name.as_str(), c.name.as_str()));
    let unread = |s: &vramlab_suites::SuiteResult, c: &vramlab_suites::CaseResult| {
        !c.kernels.is_empty() && kept != Some((s.name.as_str(), c.name.as_str()))
    };
    let json = if results.suites.iter().any(|s| s.cases.iter().any(|c| unread(s, c))) {
        let mut slim = results.clone();
        for (s, slim_s) in results.suites.iter().zip(&mut slim.suites) {
            for (c, slim_c) in s.cases.iter().zip(&mut slim_s.cases) {
                if unread(s, c) {
                    slim_c.kernels = Vec::new();
                }
            }
        }
        serde_json::to_vec(&slim)
    } else {
        serde_json::to_vec(results)
    }
    .map_err(|source| ReportError::Json { what: "the run's results".into(), source })?;
    write_atomic(&path, &json)?;
    Ok(path)
}

/// Reads a run's JSON back, checking it is results of a version this build
/// reads (version 1 files read without timelines); strict: any part that does
/// not parse is an error (see [`load_results`] for the lenient reader).
pub fn read_results_json(path: &Path) -> Result<RunResults, ReportError> {
    let loaded = load_results(path)?;
    match loaded.problems.first() {
        Some(p) => Err(ReportError::NotResults { path: path.to_path_buf(), reason: p.clone() }),
        None => Ok(loaded.results),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fs;

    use super::*;
    use vramlab_suites::{CaseResult, Environment, RunOptions, SCHEMA_VERSION, SuiteResult};

    pub(crate) fn sample() -> RunResults {
        let case = CaseResult::ok("matmul_64")
            .with_params([("size".into(), serde_json::json!(64)), ("dtype".into(), serde_json::json!("f32"))])
            .with_timing(vramlab_suites::harness::summarize(vec![10.0, 12.0, 11.0], 1, "host"))
            .with_metrics([("throughput_gflops".into(), 1.5)])
            .with_duration_ns(5);
        let failed = CaseResult::failed("broken, with \"quotes\"", "it broke, badly").with_duration_ns(5);
        RunResults {
            schema_version: SCHEMA_VERSION,
            vramlab_version: "0.1.0".into(),
            started_at: "2026-11-21T00:00:00Z".into(),
            options: RunOptions {
                suites: vec![],
                device: "cpu".into(),
                quick: true,
                samples: None,
                seed: 1,
                capacity_bytes: 1 << 32,
            },
            environment: Environment {
                cpu_model: "test".into(),
                cpu_cores: 2,
                host_memory_bytes: 1,
                gpus: vec![],
                gpu_unavailable_reason: Some("none".into()),
                device: "cpu".into(),
                os: "linux".into(),
                rustc: None,
                git_commit: None,
            },
            suites: vec![SuiteResult {
                name: "demo".into(),
                description: "d".into(),
                device: "cpu".into(),
                duration_ns: 1,
                cases: vec![case, failed],
                findings: vec![],
                charts: vec![],
            }],
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vramlab-reports-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn json_round_trips_and_leaves_no_temporary() {
        let dir = temp_dir("json");
        let r = sample();
        let path = write_results_json(&dir, &r).unwrap();
        assert_eq!(read_results_json(&path).unwrap(), r);
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(RESULTS_JSON)]);
        fs::write(&path, b"{}").unwrap();
        assert!(matches!(read_results_json(&path), Err(ReportError::NotResults { .. })));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn kernel_slices_are_kept_only_for_the_traced_case() {
        let dir = temp_dir("kernels");
        let mut r = sample();
        let slice = vramlab_suites::KernelSlice {
            name: "matmul".into(),
            algorithm: String::new(),
            device: "cpu:0".into(),
            stream: 0,
            start_ns: 0,
            duration_ns: 5,
        };
        let mut traced = r.suites[0].cases[0].clone().with_timeline(vramlab_suites::MemoryTimeline::default());
        let mut other = r.suites[0].cases[0].clone();
        other.name = "untraced".into();
        traced.kernels = vec![slice.clone()];
        other.kernels = vec![slice];
        r.suites[0].cases = vec![traced, other];
        let path = write_results_json(&dir, &r).unwrap();
        let back = read_results_json(&path).unwrap();
        assert_eq!(back.suites[0].cases[0].kernels.len(), 1, "the traced case keeps its kernels");
        assert!(back.suites[0].cases[1].kernels.is_empty(), "no trace reads the other's");
        assert!(!fs::read_to_string(&path).unwrap().contains("\n  "), "compact");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn csv_is_tidy_one_row_per_case_and_metric() {
        let dir = temp_dir("csv");
        let r = sample();
        let path = write_suite_csv(&dir, &r.suites[0]).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        // The whole file, as a person opening it sees it.
        assert_eq!(
            text,
            "suite,case,device,dtype,params,outcome,metric,value,unit,samples,median,iqr\n\
             demo,matmul_64,cpu,f32,dtype=f32;size=64,ok,time,11.0,ns,3,11.0,1.0\n\
             demo,matmul_64,cpu,f32,dtype=f32;size=64,ok,throughput_gflops,1.5,GFLOP/s,,,\n\
             demo,\"broken, with \"\"quotes\"\"\",cpu,,,\"failed: it broke, badly\",,,,,,\n"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
