//! The transfer suite's charts: copy bandwidth by size for each direction,
//! pinned vs pageable host memory, and the overlap cases' copy and compute
//! times alone, one after the other and issued together.

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LineSeries, LinesSpec, Scale, Unit,
};

use crate::charts::{first_reason, median, metric, param, param_f64};
use crate::schema::{CaseResult, SuiteResult};

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (d, dir) in ["h2d", "d2h"].into_iter().enumerate() {
        for mem in ["pageable", "pinned"] {
            let of = || {
                suite
                    .cases
                    .iter()
                    .filter(move |c| param(c, "direction") == Some(dir) && param(c, "host_memory") == Some(mem))
            };
            let mut points: Vec<(f64, f64)> = of()
                .filter(|c| c.outcome.is_ok())
                .filter_map(|c| Some((param_f64(c, "size_bytes")?, metric(c, "bandwidth_gbps")?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(r) = first_reason(of()) {
                notes.push(r);
            }
            if !points.is_empty() {
                lines.push(LineSeries {
                    name: format!("{dir} {mem}"),
                    points,
                    dashed: mem == "pageable",
                    color: d,
                    steps: false,
                });
            }
        }
    }
    let title = "transfer: copy bandwidth by size, pinned vs pageable";
    let bandwidth = if lines.is_empty() {
        ChartSpec::unavailable("bandwidth", title, notes.first().cloned().unwrap_or_else(|| "no copy case ran".into()))
    } else {
        notes.truncate(1);
        let mut spec = LinesSpec::new(
            AxisSpec::new("copy size (log)", Unit::Bytes, Scale::Log),
            AxisSpec::new("bandwidth (GB/s)", Unit::GigabytesPerSecond, Scale::Linear),
            lines,
        );
        spec.notes = notes;
        ChartSpec::lines("bandwidth", title, spec)
    };
    let overlap: Vec<&CaseResult> = suite.cases.iter().filter(|c| c.name.starts_with("overlap/")).collect();
    let mut groups = Vec::new();
    for c in &overlap {
        if !c.outcome.is_ok() {
            continue;
        }
        let mode = c.name.trim_start_matches("overlap/");
        let pct =
            metric(c, "overlap_percent").map(|p| format!(" — {p:.0}% of the shorter one hidden")).unwrap_or_default();
        let bars: Vec<BarSpec> = [
            ("copy alone", metric(c, "copy_alone_ns")),
            ("compute alone", metric(c, "compute_alone_ns")),
            ("copy + compute, one after the other", metric(c, "copy_plus_compute_ns")),
            ("copy and compute issued together", median(c)),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, (l, v))| Some(BarSpec::new(l, v?, i)))
        .collect();
        groups.push(BarGroupSpec { name: format!("{mode}{pct}"), bars });
    }
    let mut out = vec![bandwidth];
    if !overlap.is_empty() {
        let title = "transfer: copy and compute overlap (blocking, non_blocking, side stream)";
        let chart = if groups.is_empty() {
            ChartSpec::unavailable("overlap", title, first_reason(overlap.iter().copied()).unwrap_or_default())
        } else {
            let mut bars = BarsSpec::new(Unit::Nanoseconds, groups);
            bars.notes = first_reason(overlap.iter().copied()).into_iter().collect();
            ChartSpec::bars("overlap", title, bars)
        };
        out.push(chart);
    }
    out
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::schema::Outcome;
    use crate::testing::{case, suite};

    #[test]
    fn a_suite_that_did_not_run_says_why_in_every_chart() {
        let mut c = case("h2d/pinned/1MiB", &[("direction", "h2d".into()), ("host_memory", "pinned".into())], &[]);
        c.outcome = Outcome::NotAvailable { reason: "no GPU here".into() };
        let mut overlap = case("overlap/blocking", &[], &[]);
        overlap.outcome = Outcome::NotAvailable { reason: "no GPU here".into() };
        let charts = charts(&suite("transfer", vec![c, overlap]));
        assert_eq!(charts.len(), 2);
        for chart in charts {
            let ChartKind::Unavailable { reason } = chart.kind else { panic!("{} drew axes without data", chart.name) };
            assert!(reason.contains("no GPU here"), "{reason}");
        }
    }

    #[test]
    fn bandwidth_lines_pair_directions_by_colour_and_memory_by_dash() {
        let c = |dir: &str, mem: &str, size: u64, gbps: f64| {
            case(
                &format!("{dir}/{mem}/{size}"),
                &[("direction", dir.into()), ("host_memory", mem.into()), ("size_bytes", size.into())],
                &[("bandwidth_gbps", gbps)],
            )
        };
        let charts = charts(&suite(
            "transfer",
            vec![c("h2d", "pinned", 2048, 4.0), c("h2d", "pinned", 1024, 2.0), c("d2h", "pageable", 1024, 1.0)],
        ));
        let ChartKind::Lines(lines) = &charts[0].kind else { panic!("a line chart") };
        let got: Vec<_> = lines.series.iter().map(|s| (s.name.as_str(), s.dashed, s.color)).collect();
        assert_eq!(got, [("h2d pinned", false, 0), ("d2h pageable", true, 1)]);
        assert_eq!(lines.series[0].points, [(1024.0, 2.0), (2048.0, 4.0)]);
    }
}
