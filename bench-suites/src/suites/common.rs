//! Helpers the suites share for reading their cases back when they judge a
//! claim: a case by name, a metric of a case that ran, why a case has no
//! numbers, whether one case is faster than another by a margin (judged on
//! the ends of their timing intervals: clear, excluded or unclear).

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

/// How one time compares with another against a margin ("at least 5 % faster").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Margin {
    /// The margin holds even at the unfavourable ends of the intervals: the slow
    /// case's first quartile over the fast one's third quartile reaches it.
    Clear,
    /// The margin fails even at the favourable ends (the slow case's third
    /// quartile over the fast one's first stays under it): not that much faster.
    Excluded,
    /// The intervals straddle the margin: the measurement cannot tell.
    Unclear,
}

/// Whether `fast` is faster than `slow` by `factor` in their metric `key` (a
/// time), judged on the interquartile intervals of their timings when both
/// were timed (each end scaled by the metric over the median, so a per-call
/// metric of a multi-call sample compares alike), on the values otherwise.
pub(crate) fn faster_by(fast: &CaseResult, slow: &CaseResult, key: &str, factor: f64) -> Margin {
    let (Some(&f), Some(&s)) = (fast.metrics.get(key), slow.metrics.get(key)) else { return Margin::Unclear };
    let interval = |c: &CaseResult, v: f64| match &c.timing {
        Some(t) if t.median_ns > 0.0 => (v * t.p25_ns / t.median_ns, v * t.p75_ns / t.median_ns),
        _ => (v, v),
    };
    let ((f_lo, f_hi), (s_lo, s_hi)) = (interval(fast, f), interval(slow, s));
    if s_lo / f_hi >= factor {
        Margin::Clear
    } else if s_hi / f_lo < factor {
        Margin::Excluded
    } else {
        Margin::Unclear
    }
}

/// Whether `fast` is clearly faster than `slow` by `factor` ([`Margin::Clear`]).
pub(crate) fn clearly_faster(fast: &CaseResult, slow: &CaseResult, key: &str, factor: f64) -> bool {
    faster_by(fast, slow, key, factor) == Margin::Clear
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(name: &str, median: f64, p25: f64, p75: f64) -> CaseResult {
        let mut t = crate::harness::summarize(vec![median; 3], 1, "host");
        (t.p25_ns, t.p75_ns) = (p25, p75);
        CaseResult::ok(name).with_timing(t).with_metrics([("t".to_owned(), median)])
    }

    #[test]
    fn a_margin_holds_only_at_the_intervals_unfavourable_ends() {
        // Medians 100 and 110 (10 % apart): with tight quartiles the 5 % margin is clear.
        let fast = timed("f", 100.0, 99.0, 101.0);
        assert_eq!(faster_by(&fast, &timed("s", 110.0, 109.0, 111.0), "t", 1.05), Margin::Clear);
        // Wide quartiles: 106 / 104 < 1.05 at the unfavourable ends, 114 / 96 > 1.05 at the others.
        let wide = timed("f", 100.0, 96.0, 104.0);
        assert_eq!(faster_by(&wide, &timed("s", 110.0, 106.0, 114.0), "t", 1.05), Margin::Unclear);
        // 102 against 100 with tight quartiles: not 5 % faster even at the favourable ends.
        assert_eq!(faster_by(&fast, &timed("s", 102.0, 101.5, 102.5), "t", 1.05), Margin::Excluded);
        assert!(!clearly_faster(&wide, &timed("s", 110.0, 106.0, 114.0), "t", 1.05));
        // Untimed cases compare their values.
        let plain = |v: f64| CaseResult::ok("p").with_metrics([("t".to_owned(), v)]);
        assert_eq!(faster_by(&plain(100.0), &plain(106.0), "t", 1.05), Margin::Clear);
        assert_eq!(faster_by(&plain(100.0), &plain(104.0), "t", 1.05), Margin::Excluded);
        assert_eq!(faster_by(&plain(100.0), &CaseResult::ok("none"), "t", 1.05), Margin::Unclear);
    }
}
