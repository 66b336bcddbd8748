//! The allocator suite's charts: alloc + free latency by request size from
//! the cached pool and from raw device malloc, and the cached pair with and
//! without a recording subscriber (the overhead noted).

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LineSeries, LinesSpec, Scale, Unit,
};
use vramlab_display::format::fmt_ns;

use crate::charts::{first_reason, median, metric, param, param_f64};
use crate::schema::{CaseResult, SuiteResult};

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (i, path) in ["cached", "raw"].into_iter().enumerate() {
        let of = || suite.cases.iter().filter(move |c| param(c, "path") == Some(path));
        let mut points: Vec<(f64, f64)> = of()
            .filter(|c| c.outcome.is_ok())
            .filter_map(|c| Some((param_f64(c, "request_bytes")?, median(c)?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        notes.extend(first_reason(of()));
        if !points.is_empty() {
            let name = if path == "cached" { "cached (from the pool)" } else { "raw device malloc + free" };
            lines.push(LineSeries { name: name.into(), points, dashed: path == "raw", color: i, steps: false });
        }
    }
    let title = "allocator: alloc + free latency by size, cached vs raw";
    let latency = if lines.is_empty() {
        ChartSpec::unavailable("latency", title, notes.first().cloned().unwrap_or_else(|| "no latency case ran".into()))
    } else {
        let mut spec = LinesSpec::new(
            AxisSpec::new("request size (log)", Unit::Bytes, Scale::Log),
            AxisSpec::new("median time per alloc + free pair (log)", Unit::Nanoseconds, Scale::Log),
            lines,
        );
        spec.notes = notes;
        ChartSpec::lines("latency", title, spec)
    };
    let mut out = vec![latency];
    let rec: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("recording/")).collect();
    if !rec.is_empty() {
        let title = "allocator: cached alloc + free with and without recording";
        let bars: Vec<BarSpec> = rec
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let who = param(c, "subscriber").unwrap_or("?");
                let label = if who == "none" { "no subscriber".to_owned() } else { format!("recording ({who})") };
                Some(BarSpec::new(label, median(c)?, i))
            })
            .collect();
        let overhead = rec.iter().find_map(|c| metric(c, "overhead_per_pair_ns"));
        let chart = if bars.is_empty() {
            ChartSpec::unavailable("recording", title, first_reason(rec.iter().copied()).unwrap_or_default())
        } else {
            let mut spec = BarsSpec::new(Unit::Nanoseconds, vec![BarGroupSpec { name: String::new(), bars }]);
            spec.notes = overhead.map(|o| format!("recording adds {} per pair", fmt_ns(o))).into_iter().collect();
            ChartSpec::bars("recording", title, spec)
        };
        out.push(chart);
    }
    out
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::testing::{case, chart, suite, timed};

    #[test]
    fn cached_and_raw_are_two_lines_and_the_recording_overhead_is_noted() {
        let c = |path: &str, bytes: u64, ns: f64| {
            timed(case(&format!("{path}/{bytes}"), &[("path", path.into()), ("request_bytes", bytes.into())], &[]), ns)
        };
        let rec = |who: &str, ns: f64, metrics: &[(&str, f64)]| {
            timed(case(&format!("recording/{who}"), &[("subscriber", who.into())], metrics), ns)
        };
        let charts = charts(&suite(
            "allocator",
            vec![
                c("cached", 4096, 50.0),
                c("cached", 512, 40.0),
                c("raw", 512, 4_000.0),
                rec("none", 40.0, &[]),
                rec("profiler", 90.0, &[("overhead_per_pair_ns", 50.0)]),
            ],
        ));
        let ChartKind::Lines(lines) = chart(&charts, "latency") else { panic!("a line chart") };
        assert_eq!(lines.series[0].points, [(512.0, 40.0), (4096.0, 50.0)]);
        assert!(lines.series[1].dashed);
        let ChartKind::Bars(bars) = chart(&charts, "recording") else { panic!("bars") };
        let labels: Vec<&str> = bars.groups[0].bars.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["no subscriber", "recording (profiler)"]);
        assert_eq!(bars.notes, ["recording adds 50 ns per pair"]);
    }
}
