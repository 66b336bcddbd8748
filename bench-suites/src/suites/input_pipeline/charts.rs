//! The input-pipeline suite's chart: samples per second by number of
//! DataLoader workers, from pageable and from pinned host memory.

use crate::charts::{AxisSpec, ChartSpec, LineSeries, LinesSpec, Scale, Unit, first_reason, metric, param, param_f64};
use crate::schema::SuiteResult;

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for (i, mem) in ["pageable", "pinned"].into_iter().enumerate() {
        let of = || suite.cases.iter().filter(move |c| param(c, "host_memory") == Some(mem));
        let mut points: Vec<(f64, f64)> = of()
            .filter(|c| c.outcome.is_ok())
            .filter_map(|c| Some((param_f64(c, "num_workers")?, metric(c, "samples_per_s")?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        notes.extend(first_reason(of()));
        if !points.is_empty() {
            lines.push(LineSeries { name: format!("{mem} host memory"), points, dashed: mem == "pageable", color: i });
        }
    }
    let title = "input-pipeline: samples per second by number of DataLoader workers";
    let chart = if lines.is_empty() {
        ChartSpec::unavailable("throughput", title, notes.first().cloned().unwrap_or_else(|| "no case ran".into()))
    } else {
        let mut spec = LinesSpec::new(
            AxisSpec::new("num_workers", Unit::Count, Scale::Linear),
            AxisSpec::new("samples per second", Unit::PerSecond, Scale::Linear),
            lines,
        );
        spec.notes = notes;
        ChartSpec::lines("throughput", title, spec)
    };
    vec![chart]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charts::ChartKind;
    use crate::charts::testing::{case, suite};
    use crate::schema::Outcome;

    #[test]
    fn workers_by_throughput_per_host_memory_and_a_missing_side_noted() {
        let c = |mem: &str, workers: u64, rate: f64| {
            case(
                &format!("{mem}/{workers}"),
                &[("host_memory", mem.into()), ("num_workers", workers.into())],
                &[("samples_per_s", rate)],
            )
        };
        let mut pinned = c("pinned", 0, 1.0);
        pinned.outcome = Outcome::NotAvailable { reason: "no GPU".into() };
        let declared = charts(&suite("input-pipeline", vec![c("pageable", 2, 300.0), c("pageable", 0, 100.0), pinned]));
        let ChartKind::Lines(lines) = &declared[0].kind else { panic!("a line chart") };
        assert_eq!(lines.series.len(), 1);
        assert_eq!(lines.series[0].points, [(0.0, 100.0), (2.0, 300.0)]);
        assert_eq!(lines.notes, ["pinned/0: not available: no GPU"]);
        assert!(matches!(charts(&suite("input-pipeline", vec![]))[0].kind, ChartKind::Unavailable { .. }));
    }
}
