//! vramlab's reports: everything that turns results into files. Today: the run's
//! versioned JSON and one CSV per suite, each written atomically (to a temporary
//! file, then renamed), so an interrupted run keeps every suite that finished and
//! never leaves a half-written file; the regression check against a baseline
//! (`check`) and the run history (`history`).

pub mod check;
pub mod history;
mod stores;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;
use vramlab_suites::{Outcome, RunResults, SuiteResult};

pub use stores::FileTuningStore;

/// The run's JSON file name inside the output folder.
pub const RESULTS_JSON: &str = "results.json";

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serializing {what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing CSV {path}: {source}")]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error("reading {path}: not vramlab results ({reason})")]
    NotResults { path: PathBuf, reason: String },
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, then a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let io = |source| ReportError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    let mut f = fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    fs::rename(&tmp, path).map_err(io)
}

/// Makes `dir` (and its parents) and checks that files can be written into
/// it, so a run finds out before it measures rather than after.
pub fn prepare_out_dir(dir: &Path) -> Result<(), ReportError> {
    let io = |source| ReportError::Io { path: dir.to_path_buf(), source };
    fs::create_dir_all(dir).map_err(io)?;
    let probe = dir.join(".vramlab-write-test");
    fs::write(&probe, b"").map_err(io)?;
    let _ = fs::remove_file(probe);
    Ok(())
}

/// Writes the run's JSON (`results.json`) into `dir`; returns its path.
pub fn write_results_json(dir: &Path, results: &RunResults) -> Result<PathBuf, ReportError> {
    let path = dir.join(RESULTS_JSON);
    let json = serde_json::to_vec_pretty(results)
        .map_err(|source| ReportError::Json { what: "the run's results".into(), source })?;
    write_atomic(&path, &json)?;
    Ok(path)
}

/// Reads a run's JSON back, checking it is results of a version this build reads.
pub fn read_results_json(path: &Path) -> Result<RunResults, ReportError> {
    let bytes = fs::read(path).map_err(|source| ReportError::Io { path: path.to_path_buf(), source })?;
    let results: RunResults = serde_json::from_slice(&bytes)
        .map_err(|e| ReportError::NotResults { path: path.to_path_buf(), reason: e.to_string() })?;
    if results.schema_version != vramlab_suites::SCHEMA_VERSION {
        return Err(ReportError::NotResults {
            path: path.to_path_buf(),
            reason: format!(
                "schema version {} (this build reads {})",
                results.schema_version,
                vramlab_suites::SCHEMA_VERSION
            ),
        });
    }
    Ok(results)
}

/// Writes `{suite}.csv` into `dir`: one row per case with its parameters, outcome,
/// timing summary, metrics and memory peaks; returns its path.
pub fn write_suite_csv(dir: &Path, suite: &SuiteResult) -> Result<PathBuf, ReportError> {
    let path = dir.join(format!("{}.csv", suite.name));
    let params: BTreeSet<&str> = suite.cases.iter().flat_map(|c| c.params.keys().map(String::as_str)).collect();
    let metrics: BTreeSet<&str> = suite.cases.iter().flat_map(|c| c.metrics.keys().map(String::as_str)).collect();
    let mut header = vec!["suite", "case", "outcome", "message"];
    header.extend(params.iter().copied());
    header.extend([
        "median_ns",
        "p25_ns",
        "p75_ns",
        "iqr_ns",
        "min_ns",
        "samples",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
    ]);
    header.extend(metrics.iter().copied());
    let csv_err = |source| ReportError::Csv { path: path.clone(), source };
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).map_err(csv_err)?;
    for c in &suite.cases {
        let (outcome, message) = match &c.outcome {
            Outcome::Ok => ("ok", String::new()),
            Outcome::Failed { message } => ("failed", message.clone()),
            Outcome::NotAvailable { reason } => ("not_available", reason.clone()),
        };
        let mut row = vec![suite.name.clone(), c.name.clone(), outcome.to_owned(), message];
        for p in &params {
            row.push(match c.params.get(*p) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            });
        }
        let t = c.timing.as_ref();
        let num = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_default();
        row.push(num(t.map(|t| t.median_ns)));
        row.push(num(t.map(|t| t.p25_ns)));
        row.push(num(t.map(|t| t.p75_ns)));
        row.push(num(t.map(|t| t.iqr_ns)));
        row.push(num(t.map(|t| t.min_ns)));
        row.push(t.map(|t| t.samples_ns.len().to_string()).unwrap_or_default());
        row.push(c.memory.as_ref().map(|m| m.peak_allocated_bytes.to_string()).unwrap_or_default());
        row.push(c.memory.as_ref().map(|m| m.peak_reserved_bytes.to_string()).unwrap_or_default());
        for m in &metrics {
            row.push(c.metrics.get(*m).map(|v| v.to_string()).unwrap_or_default());
        }
        w.write_record(&row).map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| ReportError::Io { path: path.clone(), source: e.into_error() })?;
    write_atomic(&path, &bytes)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use vramlab_suites::{CaseResult, Environment, RunOptions, SCHEMA_VERSION};

    fn sample() -> RunResults {
        let case = CaseResult {
            name: "matmul_64".into(),
            params: BTreeMap::from([
                ("size".into(), serde_json::json!(64)),
                ("dtype".into(), serde_json::json!("f32")),
            ]),
            outcome: Outcome::Ok,
            timing: Some(vramlab_suites::harness::summarize(vec![10.0, 12.0, 11.0], 1, "host")),
            metrics: BTreeMap::from([("throughput_gflops".into(), 1.5)]),
            memory: None,
            notes: vec![],
            duration_ns: 5,
        };
        let failed = CaseResult {
            name: "broken, with \"quotes\"".into(),
            outcome: Outcome::Failed { message: "it broke, badly".into() },
            timing: None,
            metrics: BTreeMap::new(),
            params: BTreeMap::new(),
            ..case.clone()
        };
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
    fn csv_has_a_row_per_case_with_quoting() {
        let dir = temp_dir("csv");
        let r = sample();
        let path = write_suite_csv(&dir, &r.suites[0]).unwrap();
        let mut rd = csv::Reader::from_path(&path).unwrap();
        let headers = rd.headers().unwrap().clone();
        assert_eq!(&headers[0], "suite");
        assert!(headers.iter().any(|h| h == "throughput_gflops"));
        assert!(headers.iter().any(|h| h == "size"));
        let rows: Vec<_> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        let median = headers.iter().position(|h| h == "median_ns").unwrap();
        assert_eq!(&rows[0][median], "11.0");
        assert_eq!(&rows[1][1], "broken, with \"quotes\"");
        assert_eq!(&rows[1][2], "failed");
        assert_eq!(&rows[1][3], "it broke, badly");
        let _ = fs::remove_dir_all(&dir);
    }
}
