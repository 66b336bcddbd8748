//! What the report asks of the suites' charts, and what their chart code
//! shares. A suite computes its charts — [`ChartSpec`]s of the one chart model,
//! `vramlab_display::chart` — from its own results ([`Suite::charts`]); the
//! runner stores them in [`SuiteResult::charts`], so `results.json` carries
//! them and the report draws any declared chart from the data alone, knowing
//! no suite. [`declared_charts`] is what the report asks: the stored charts,
//! or for a result without any (a file written before suites declared charts),
//! the charts its suite in this build computes from the cases. Also the readers
//! the suites' chart code shares (a case's metric, parameter, median, why it
//! has no numbers).
//!
//! [`Suite::charts`]: crate::Suite::charts

use vramlab_display::chart::ChartSpec;

use crate::schema::{CaseResult, Outcome, SuiteResult};

/// The charts `result` declares: those stored with it, or, for a result that
/// stores none (written before suites declared charts, or by a suite that
/// declares none), those its suite — found by name among this build's suites —
/// computes from the cases. Empty when the suite declares no chart (or is not
/// one of this build's): the report then draws its generic charts.
pub fn declared_charts(result: &SuiteResult) -> Vec<ChartSpec> {
    if !result.charts.is_empty() {
        return result.charts.clone();
    }
    crate::suite_by_name(&result.name).map(|s| s.charts(result)).unwrap_or_default()
}

// ------------------------------------------- reading cases for the charts

/// Metric `name` of `c`, when finite.
pub(crate) fn metric(c: &CaseResult, name: &str) -> Option<f64> {
    c.metrics.get(name).copied().filter(|v| v.is_finite())
}

/// Parameter `name` of `c`, when a string.
pub(crate) fn param<'a>(c: &'a CaseResult, name: &str) -> Option<&'a str> {
    c.params.get(name).and_then(|v| v.as_str())
}

/// Parameter `name` of `c`, when a number.
pub(crate) fn param_f64(c: &CaseResult, name: &str) -> Option<f64> {
    c.params.get(name).and_then(|v| v.as_f64())
}

/// The median time of `c`, when timed.
pub(crate) fn median(c: &CaseResult) -> Option<f64> {
    c.timing.as_ref().map(|t| t.median_ns).filter(|v| v.is_finite())
}

/// The case of `suite` named `name`.
pub(crate) fn case<'a>(suite: &'a SuiteResult, name: &str) -> Option<&'a CaseResult> {
    suite.cases.iter().find(|c| c.name == name)
}

/// Why a case has no numbers, when it has none.
pub(crate) fn why_not(c: &CaseResult) -> Option<String> {
    match &c.outcome {
        Outcome::Ok => None,
        Outcome::NotAvailable { reason } => Some(format!("not available: {reason}")),
        Outcome::Failed { message } => Some(format!("failed: {message}")),
    }
}

/// The first reason among `cases` that did not run, for a chart's note.
pub(crate) fn first_reason<'a>(cases: impl IntoIterator<Item = &'a CaseResult>) -> Option<String> {
    cases.into_iter().find_map(|c| why_not(c).map(|w| format!("{}: {w}", c.name)))
}

/// Distinct values of a parameter, in the order cases list them.
pub(crate) fn distinct<'a>(cases: impl IntoIterator<Item = &'a CaseResult>, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cases {
        if let Some(v) = param(c, name)
            && !out.iter().any(|o| o == v)
        {
            out.push(v.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::suite;

    #[test]
    fn stored_charts_come_first_then_the_suites_own() {
        // No stored charts: the suite of that name computes them from the cases.
        let s = suite("input-pipeline", vec![]);
        let declared = declared_charts(&s);
        assert_eq!(declared.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["throughput"]);
        // Stored charts are the ones drawn.
        let mut s = suite("input-pipeline", vec![]);
        s.charts = vec![ChartSpec::unavailable("mine", "stored", "as stored")];
        assert_eq!(declared_charts(&s), s.charts);
        // A suite this build does not know, or one that declares none, has none.
        assert!(declared_charts(&suite("not-a-suite", vec![])).is_empty());
        assert!(declared_charts(&suite("devices", vec![])).is_empty());
    }
}
