//! Helpers the suites share for reading their cases back when they judge a
//! claim: a case by name, a metric of a case that ran, why a case has no
//! numbers, whether one case is clearly faster than another, and memory
//! figures written out in MiB.

use vramlab_engine::alloc::consts::MIB;

use crate::schema::{CaseResult, Outcome};

/// The case named `name`.
pub(crate) fn case<'a>(cases: &'a [CaseResult], name: &str) -> Option<&'a CaseResult> {
    cases.iter().find(|c| c.name == name)
}

/// Metric `key` of case `name`, when that case ran to completion.
pub(crate) fn metric(cases: &[CaseResult], name: &str, key: &str) -> Option<f64> {
    let c = case(cases, name)?;
    if !c.outcome.is_ok() {
        return None;
    }
    c.metrics.get(key).copied()
}

/// Why a needed case has no numbers.
pub(crate) fn missing(cases: &[CaseResult], name: &str) -> String {
    match case(cases, name).map(|c| &c.outcome) {
        None => format!("the {name} case did not run"),
        Some(Outcome::Failed { message }) => format!("the {name} case failed: {message}"),
        Some(Outcome::NotAvailable { reason }) => format!("the {name} case is not available: {reason}"),
        Some(Outcome::Ok) => format!("the {name} case recorded no numbers"),
    }
}

/// Whether `fast` is clearly faster than `slow` by their metric `key` (a time):
/// at least `factor` times, with the timing distributions apart (fast's third
/// quartile below slow's first) when both were timed.
pub(crate) fn clearly_faster(fast: &CaseResult, slow: &CaseResult, key: &str, factor: f64) -> bool {
    let (Some(f), Some(s)) = (fast.metrics.get(key), slow.metrics.get(key)) else { return false };
    let separated = match (&fast.timing, &slow.timing) {
        (Some(f), Some(s)) => f.p75_ns < s.p25_ns,
        _ => true,
    };
    s / f >= factor && separated
}

/// `bytes` in MiB, two decimals, the unit written out.
pub(crate) fn mib(bytes: f64) -> String {
    format!("{:.2} MiB", bytes / MIB as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_writes_the_unit() {
        assert_eq!(mib(3.0 * MIB as f64), "3.00 MiB");
        assert_eq!(mib(1536.0 * 1024.0), "1.50 MiB");
    }
}
