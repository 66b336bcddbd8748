//! The autotune suite's charts: benchmark mode's candidates per shape (one
//! chart per kind of op) with the chosen algorithm and the heuristic's pick
//! marked, the tuning cost per shape and whether it pays back, and for the
//! first shapes that pay back, total time over calls with the break-even.

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LineSeries, LinesSpec, Marker, Scale, Unit,
};

use super::ALGORITHM_NOTE;
use crate::charts::{case, distinct, first_reason, median, metric, param, why_not};
use crate::schema::{CaseResult, SuiteResult};

fn algorithm(c: &CaseResult) -> Option<&str> {
    c.notes.iter().find_map(|n| n.strip_prefix(ALGORITHM_NOTE))
}

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut out = Vec::new();
    let shapes = distinct(&suite.cases, "shape");
    let mode = |shape: &str, m: &str| case(suite, &format!("{shape}/{m}"));
    // Candidates per shape, one chart per kind of op.
    for (kind, is_kind) in [("convolution", true), ("matmul", false)] {
        let title = format!("autotune: benchmark mode's candidates per {kind} shape (time, log scale)");
        let of_kind: Vec<&String> = shapes
            .iter()
            .filter(|s| {
                mode(s, "benchmark").and_then(|c| param(c, "op")).is_some_and(|op| op.starts_with("conv") == is_kind)
            })
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut groups = Vec::new();
        let mut notes = Vec::new();
        for s in of_kind {
            let Some(bench) = mode(s, "benchmark") else { continue };
            if let Some(w) = why_not(bench) {
                notes.push(format!("{s}: {w}"));
                continue;
            }
            let chosen = algorithm(bench);
            let heuristic = mode(s, "off").and_then(algorithm);
            let mut bars: Vec<BarSpec> = bench
                .metrics
                .iter()
                .filter_map(|(k, v)| {
                    let alg = k.strip_prefix("candidate_")?.strip_suffix("_median_ns")?;
                    let mut mark = Vec::new();
                    if Some(alg) == chosen {
                        mark.push("chosen");
                    }
                    if Some(alg) == heuristic {
                        mark.push("heuristic's pick (off)");
                    }
                    let mut bar = BarSpec::new(alg, *v, usize::from(Some(alg) == chosen));
                    bar.mark = (Some(alg) == chosen).then(|| mark.join(", "));
                    if bar.mark.is_none() && !mark.is_empty() {
                        bar.label = format!("{alg} ({})", mark.join(", "));
                    }
                    Some(bar)
                })
                .collect();
            bars.sort_by(|a, b| a.value.total_cmp(&b.value));
            groups.push(BarGroupSpec { name: s.clone(), bars });
        }
        let name = format!("{kind}-candidates");
        let chart = if groups.is_empty() {
            ChartSpec::unavailable(name, title, notes.join("; "))
        } else {
            let mut bars = BarsSpec::new(Unit::Nanoseconds, groups);
            bars.notes = notes;
            bars.log = true;
            ChartSpec::bars(name, title, bars)
        };
        out.push(chart);
    }
    // Tuning cost and whether it pays back, per shape.
    let mut cost = Vec::new();
    let mut break_even = Vec::new();
    for s in &shapes {
        let Some(bench) = mode(s, "benchmark").filter(|c| c.outcome.is_ok()) else { continue };
        let Some(tuning) = metric(bench, "tuning_ns") else { continue };
        let payback = metric(bench, "payback_calls_count");
        let label = match payback {
            Some(n) => format!("{s}: pays back after {n:.0} calls"),
            None => format!("{s}: never pays back"),
        };
        cost.push(BarSpec::new(label, tuning, usize::from(payback.is_some())));
        let off = mode(s, "off").filter(|c| c.outcome.is_ok()).and_then(median);
        if let (Some(n), Some(off), Some(per_call)) = (payback, off, median(bench)) {
            break_even.push((s.clone(), n, tuning, off, per_call));
        }
    }
    if !cost.is_empty() {
        let mut bars = BarsSpec::new(Unit::Nanoseconds, vec![BarGroupSpec { name: String::new(), bars: cost }]);
        bars.series = vec!["never pays back here".into(), "pays back".into()];
        out.push(ChartSpec::bars("tuning-cost", "autotune: tuning cost per shape (benchmark mode's first call)", bars));
    } else if !shapes.is_empty() {
        let reason = first_reason(&suite.cases).unwrap_or_else(|| "no benchmark-mode case recorded its tuning".into());
        out.push(ChartSpec::unavailable("tuning-cost", "autotune: tuning cost per shape", reason));
    }
    for (s, n, tuning, off, per_call) in break_even.into_iter().take(3) {
        let end = (2.0 * n).max(4.0);
        let calls: Vec<f64> = (0..=20).map(|k| end * k as f64 / 20.0).collect();
        let mut lines = LinesSpec::new(
            AxisSpec::new("calls", Unit::Count, Scale::Linear),
            AxisSpec::new("total time (tuning included)", Unit::Nanoseconds, Scale::Linear),
            vec![
                LineSeries {
                    name: "off (heuristic)".into(),
                    points: calls.iter().map(|&k| (k, k * off)).collect(),
                    dashed: true,
                    color: 0,
                    steps: false,
                },
                LineSeries {
                    name: "benchmark (tuned)".into(),
                    points: calls.iter().map(|&k| (k, tuning + k * per_call)).collect(),
                    dashed: false,
                    color: 1,
                    steps: false,
                },
            ],
        );
        lines.x_marks = vec![Marker::new(n, format!("break-even: {n:.0} calls"))];
        out.push(ChartSpec::lines(
            format!("{s}-break-even"),
            format!("autotune {s}: total time over calls, off vs benchmark"),
            lines,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::testing::{autotune_conv_a, chart};

    #[test]
    fn the_chosen_candidate_is_marked_and_the_break_even_lies_where_the_totals_meet() {
        let s = autotune_conv_a();
        let charts = charts(&s);
        let ChartKind::Bars(c) = chart(&charts, "convolution-candidates") else { panic!("bars") };
        let bars = &c.groups[0].bars;
        assert_eq!((bars[0].label.as_str(), bars[0].mark.as_deref()), ("gemm", Some("chosen")));
        assert_eq!((bars[1].label.as_str(), bars[1].mark.as_deref()), ("direct (heuristic's pick (off))", None));
        let ChartKind::Lines(lines) = chart(&charts, "conv_a-break-even") else { panic!("a line chart") };
        assert_eq!(lines.x_marks, vec![Marker::new(50.0, "break-even: 50 calls")]);
        let at50 = |p: &[(f64, f64)]| p.iter().find(|q| q.0 == 50.0).unwrap().1;
        assert_eq!(at50(&lines.series[0].points), at50(&lines.series[1].points));
        let ChartKind::Bars(cost) = chart(&charts, "tuning-cost") else { panic!("bars") };
        assert_eq!(cost.groups[0].bars[0].label, "conv_a: pays back after 50 calls");
    }
}
