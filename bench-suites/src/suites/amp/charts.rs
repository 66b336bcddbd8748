//! The amp suite's charts: per workload, the median training-step time and
//! the peak allocated of each precision (f32, f16 with a GradScaler, bf16).

use vramlab_display::chart::{BarGroupSpec, BarSpec, BarsSpec, ChartSpec, Unit};

use crate::charts::{distinct, first_reason, median, metric, param};
use crate::schema::{CaseResult, SuiteResult};

const PRECISIONS: [&str; 3] = ["f32", "f16", "bf16"];

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let workloads = distinct(&suite.cases, "workload");
    let per = |value: &dyn Fn(&CaseResult) -> Option<f64>| -> Vec<BarGroupSpec> {
        workloads
            .iter()
            .map(|w| {
                let bars = suite
                    .cases
                    .iter()
                    .filter(|c| param(c, "workload") == Some(w.as_str()) && c.outcome.is_ok())
                    .filter_map(|c| {
                        let p = param(c, "precision")?;
                        let series = PRECISIONS.iter().position(|x| *x == p).unwrap_or(PRECISIONS.len());
                        Some(BarSpec::new(p, value(c)?, series))
                    })
                    .collect();
                BarGroupSpec { name: w.clone(), bars }
            })
            .collect()
    };
    let notes: Vec<String> = first_reason(&suite.cases).into_iter().collect();
    let chart = |name: &str, title: &str, unit, groups: Vec<BarGroupSpec>| {
        if groups.iter().all(|g| g.bars.is_empty()) {
            let reason = first_reason(&suite.cases).unwrap_or_else(|| "no case produced this measurement".into());
            return ChartSpec::unavailable(name, title, reason);
        }
        let mut bars = BarsSpec::new(unit, groups);
        bars.series = vec!["f32".into(), "f16 autocast + GradScaler".into(), "bf16 autocast".into()];
        bars.notes = notes.clone();
        ChartSpec::bars(name, title, bars)
    };
    vec![
        chart("step-time", "amp: median training-step time per precision", Unit::Nanoseconds, per(&median)),
        chart(
            "peak",
            "amp: max_memory_allocated per precision",
            Unit::Bytes,
            per(&|c| metric(c, "max_memory_allocated_bytes")),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::schema::Outcome;
    use crate::testing::{case, chart, suite, timed};

    #[test]
    fn precisions_keep_their_series_and_a_missing_one_is_noted() {
        let c = |p: &str, ns: f64, peak: f64| {
            timed(
                case(
                    &format!("mlp/{p}"),
                    &[("workload", "mlp".into()), ("precision", p.into())],
                    &[("max_memory_allocated_bytes", peak)],
                ),
                ns,
            )
        };
        let mut bf16 = c("bf16", 1.0, 1.0);
        bf16.outcome = Outcome::NotAvailable { reason: "no bf16 here".into() };
        let charts = charts(&suite("amp", vec![c("f32", 300.0, 4096.0), c("f16", 200.0, 2048.0), bf16]));
        let ChartKind::Bars(time) = chart(&charts, "step-time") else { panic!("bars") };
        let bars: Vec<_> = time.groups[0].bars.iter().map(|b| (b.label.as_str(), b.value, b.series)).collect();
        assert_eq!(bars, [("f32", 300.0, 0), ("f16", 200.0, 1)]);
        assert_eq!(time.notes, ["mlp/bf16: not available: no bf16 here"]);
        let ChartKind::Bars(peak) = chart(&charts, "peak") else { panic!("bars") };
        assert_eq!(peak.groups[0].bars[1].value, 2048.0);
    }
}
