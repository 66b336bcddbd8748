//! One tidy CSV per suite: one row per case × metric, columns `suite, case,
//! device, dtype, params, outcome, metric, value, unit, samples, median, iqr`.
//! A case's time is the metric `time` (ns, with its sample count, median and
//! IQR); its memory peaks are `peak_allocated` / `peak_reserved` (bytes); a case
//! that failed or does not apply has one row with an empty metric and its
//! message in `outcome`.

use std::path::{Path, PathBuf};

use vramlab_suites::{CaseResult, Outcome, SuiteResult};

use crate::{ReportError, units, write_unsynced};

/// The header of every suite CSV.
pub const HEADER: [&str; 12] =
    ["suite", "case", "device", "dtype", "params", "outcome", "metric", "value", "unit", "samples", "median", "iqr"];

/// The case's parameters as `key=value` pairs joined by `;` (strings unquoted).
pub fn params_text(case: &CaseResult) -> String {
    case.params
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            v => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn param(case: &CaseResult, key: &str) -> Option<String> {
    case.params.get(key).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    })
}

/// The suite's CSV as bytes.
pub fn suite_csv(suite: &SuiteResult) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(HEADER)?;
    for c in &suite.cases {
        let device = param(c, "device").or_else(|| c.memory.as_ref().map(|m| m.device.clone()));
        let base = [
            suite.name.clone(),
            c.name.clone(),
            device.unwrap_or_else(|| suite.device.clone()),
            param(c, "dtype").unwrap_or_default(),
            params_text(c),
        ];
        let outcome = match &c.outcome {
            Outcome::Ok => "ok".to_owned(),
            Outcome::Failed { message } => format!("failed: {message}"),
            Outcome::NotAvailable { reason } => format!("not_available: {reason}"),
        };
        let mut row = |metric: &str, value: String, unit: &str, samples: String, median: String, iqr: String| {
            let mut r: Vec<String> = base.to_vec();
            r.extend([outcome.clone(), metric.to_owned(), value, unit.to_owned(), samples, median, iqr]);
            w.write_record(&r)
        };
        let mut rows = 0;
        if let Some(t) = &c.timing {
            row(
                "time",
                format!("{:.1}", t.median_ns),
                "ns",
                t.samples_ns.len().to_string(),
                format!("{:.1}", t.median_ns),
                format!("{:.1}", t.iqr_ns),
            )?;
            rows += 1;
        }
        for (name, v) in &c.metrics {
            row(name, v.to_string(), units::metric_unit(name), String::new(), String::new(), String::new())?;
            rows += 1;
        }
        if let Some(m) = &c.memory {
            for (name, v) in [("peak_allocated", m.peak_allocated_bytes), ("peak_reserved", m.peak_reserved_bytes)] {
                row(name, v.to_string(), "bytes", String::new(), String::new(), String::new())?;
                rows += 1;
            }
        }
        if rows == 0 {
            row("", String::new(), "", String::new(), String::new(), String::new())?;
        }
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// Writes `{suite}.csv` into `dir`; returns its path.
pub fn write_suite_csv(dir: &Path, suite: &SuiteResult) -> Result<PathBuf, ReportError> {
    let path = dir.join(format!("{}.csv", suite.name));
    let bytes = suite_csv(suite).map_err(|source| ReportError::Csv { path: path.clone(), source })?;
    write_unsynced(&path, &bytes)?;
    Ok(path)
}
