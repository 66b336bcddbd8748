//! A run in the formats of tools teams already run: Bencher Metric Format JSON
//! (`{benchmark: {measure: {value, lower_value?, upper_value?}}}`,
//! bencher.dev/docs/reference/bencher-metric-format) and github-action-benchmark's
//! `customSmallerIsBetter` JSON (`[{name, unit, value, range?, extra?}]`). Only
//! smaller-is-better figures go out: each timed case's median and every memory
//! figure (the ones the check gates).

use serde::Serialize;
use serde_json::{Map, Value, json};
use vramlab_suites::{Outcome, RunResults};

use super::matching;

/// The export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Bencher Metric Format.
    Bmf,
    /// github-action-benchmark, `tool: customSmallerIsBetter`.
    Gab,
}

impl Format {
    /// The file name an export is written to.
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Bmf => "bmf.json",
            Format::Gab => "gab.json",
        }
    }
}

/// Bencher Metric Format: one benchmark per case (`suite/case {params} (device)`),
/// measure `latency` (median ns; lower/upper: the first and third quartiles) and
/// one measure per memory figure.
pub fn bmf(run: &RunResults) -> Value {
    let mut out = Map::new();
    for (key, c) in matching::index(run) {
        if !c.outcome.is_ok() {
            continue;
        }
        let mut measures = Map::new();
        if let Some(t) = &c.timing {
            measures.insert(
                "latency".into(),
                json!({"value": t.median_ns, "lower_value": t.p25_ns, "upper_value": t.p75_ns}),
            );
        }
        for (name, v) in matching::memory_figures(c) {
            measures.insert(name.replace("memory.", "").replace(['.', '_'], "-"), json!({ "value": v }));
        }
        if !measures.is_empty() {
            out.insert(key.to_string(), Value::Object(measures));
        }
    }
    Value::Object(out)
}

/// One github-action-benchmark entry.
#[derive(Debug, Clone, Serialize)]
struct GabEntry {
    name: String,
    unit: &'static str,
    value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<String>,
}

/// github-action-benchmark `customSmallerIsBetter`: an entry per timed case
/// (`ns`, range ± half the interquartile range) and per memory figure
/// (`bytes`, or `count` for counts).
pub fn gab(run: &RunResults) -> Value {
    let mut out = Vec::new();
    for (key, c) in matching::index(run) {
        if !matches!(c.outcome, Outcome::Ok) {
            continue;
        }
        if let Some(t) = &c.timing {
            out.push(GabEntry {
                name: format!("{key} time"),
                unit: "ns",
                value: t.median_ns,
                range: Some(format!("± {:.1}", t.iqr_ns / 2.0)),
                extra: Some(format!("{} samples, {} iterations each", t.samples_ns.len(), t.iterations_per_sample)),
            });
        }
        for (name, v) in matching::memory_figures(c) {
            out.push(GabEntry {
                unit: if name.ends_with("_bytes") { "bytes" } else { "count" },
                name: format!("{key} {name}"),
                value: v,
                range: None,
                extra: None,
            });
        }
    }
    serde_json::to_value(out).unwrap_or(Value::Array(Vec::new()))
}

/// The export as pretty JSON text.
pub fn render(format: Format, run: &RunResults) -> String {
    let v = match format {
        Format::Bmf => bmf(run),
        Format::Gab => gab(run),
    };
    serde_json::to_string_pretty(&v).unwrap_or_default()
}
