//! The input-pipeline suite's chart: samples per second by number of
//! DataLoader workers, from pageable and from pinned host memory, with the
//! knee of the pageable sweep marked (the fewest workers within 5 % of the best).

use vramlab_display::chart::{AxisSpec, ChartSpec, LineSeries, LinesSpec, Marker, Scale, Unit};

use super::{knee, workers_text};
use crate::charts::{first_reason, metric, param, param_f64};
use crate::schema::SuiteResult;

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    let mut knee_at = None;
    for (i, mem) in ["pageable", "pinned"].into_iter().enumerate() {
        let of = || suite.cases.iter().filter(move |c| param(c, "host_memory") == Some(mem));
        let mut points: Vec<(f64, f64)> = of()
            .filter(|c| c.outcome.is_ok())
            .filter_map(|c| Some((param_f64(c, "num_workers")?, metric(c, "samples_per_s")?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        notes.extend(first_reason(of()));
        if mem == "pageable" {
            let rates: Vec<(usize, f64)> = points.iter().map(|p| (p.0 as usize, p.1)).collect();
            knee_at = knee(&rates).filter(|_| rates.len() > 2).map(|k| k.0);
        }
        if !points.is_empty() {
            lines.push(LineSeries {
                name: format!("{mem} host memory"),
                points,
                dashed: mem == "pageable",
                color: i,
                steps: false,
            });
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
        if let Some(k) = knee_at {
            spec.x_marks.push(Marker::new(k as f64, format!("knee: {} (within 5 % of the best)", workers_text(k))));
        }
        ChartSpec::lines("throughput", title, spec)
    };
    vec![chart]
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::schema::Outcome;
    use crate::testing::{case, suite};

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
        assert!(lines.x_marks.is_empty(), "two counts make no knee");
        assert!(matches!(charts(&suite("input-pipeline", vec![]))[0].kind, ChartKind::Unavailable { .. }));
        // 0, 1, 2, 4 workers: 4 is best, 2 within 5 % of it.
        let sweep =
            vec![c("pageable", 0, 100.0), c("pageable", 1, 150.0), c("pageable", 2, 190.0), c("pageable", 4, 195.0)];
        let declared = charts(&suite("input-pipeline", sweep));
        let ChartKind::Lines(lines) = &declared[0].kind else { panic!("a line chart") };
        assert_eq!(lines.x_marks, [Marker::new(2.0, "knee: 2 workers (within 5 % of the best)")]);
    }
}
