//! The cpu-vs-gpu suite's charts: per op, CPU and GPU time by size on log
//! axes with the crossover marked where the lines cross (interpolated between
//! the bracketing sizes; or a note on why there is none), and the GPU's
//! speedups over the CPU on a log axis with 1× as the reference.

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LineSeries, LinesSpec, Marker, Scale, Unit,
};

use super::{Crossing, crossover, fmt_flop};
use crate::charts::{distinct, first_reason, median, metric, param, param_f64};
use crate::schema::SuiteResult;

pub(super) fn charts(suite: &SuiteResult) -> Vec<ChartSpec> {
    let mut out = Vec::new();
    let ops = distinct(&suite.cases, "op");
    let side = |op: &str, dev: &str| -> Vec<(f64, f64, String)> {
        let mut v: Vec<(f64, f64, f64, String)> = suite
            .cases
            .iter()
            .filter(|c| param(c, "op") == Some(op) && param(c, "device") == Some(dev) && c.outcome.is_ok())
            .filter_map(|c| {
                let idx = param_f64(c, "size_index").unwrap_or(0.0);
                Some((idx, param_f64(c, "flops")?, median(c)?, param(c, "size").unwrap_or("?").to_owned()))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.into_iter().map(|(_, f, t, l)| (f, t, l)).collect()
    };
    let mut speedups = Vec::new();
    let mut missing_gpu = None;
    for op in &ops {
        let name = format!("{op}-time-by-size");
        let title = format!("{op}: CPU vs GPU time by size");
        let (cpu, gpu) = (side(op, "cpu"), side(op, "gpu"));
        let of_op = || suite.cases.iter().filter(move |c| param(c, "op") == Some(op.as_str()));
        if cpu.is_empty() && gpu.is_empty() {
            let reason = first_reason(of_op()).unwrap_or_else(|| "no case of this op produced a time".into());
            out.push(ChartSpec::unavailable(name, title, reason));
            continue;
        }
        let mut notes = Vec::new();
        let mut x_marks = Vec::new();
        if gpu.is_empty() {
            let reason = first_reason(of_op().filter(|c| param(c, "device") == Some("gpu")))
                .unwrap_or_else(|| "no GPU case ran".into());
            notes.push(format!("GPU side {reason}; no crossover without it."));
            missing_gpu.get_or_insert(reason);
        } else {
            let pairs: Vec<(f64, f64, f64)> =
                cpu.iter().filter_map(|(f, c, _)| gpu.iter().find(|g| g.0 == *f).map(|g| (*f, *c, g.1))).collect();
            let label = |f: f64| cpu.iter().find(|c| c.0 == f).map_or("?", |c| c.2.as_str());
            match crossover(&pairs) {
                Crossing::Below => x_marks.push(Marker::new(
                    pairs[0].0,
                    format!("the GPU wins from {} (every size tried)", label(pairs[0].0)),
                )),
                Crossing::Between { index, flops } => {
                    x_marks.push(Marker::new(flops, format!("crossover ≈ {}", fmt_flop(flops))));
                    notes.push(format!(
                        "The lines cross near {} per call, interpolated on the log axes between {} (the CPU wins) \
                         and {} (the GPU wins from there up).",
                        fmt_flop(flops),
                        label(pairs[index - 1].0),
                        label(pairs[index].0)
                    ));
                }
                Crossing::Never if !pairs.is_empty() => {
                    notes.push("The GPU does not win at the largest size tried.".into())
                }
                Crossing::Never => notes.push("No size ran on both devices.".into()),
            }
        }
        let gpu_name = if gpu.is_empty() { "GPU (not available)" } else { "GPU" };
        let line = |name: &str, pts: &[(f64, f64, String)], color| LineSeries {
            name: name.into(),
            points: pts.iter().map(|p| (p.0, p.1)).collect(),
            dashed: false,
            color,
            steps: false,
        };
        let mut lines = LinesSpec::new(
            AxisSpec::new("work per call (FLOP, log)", Unit::Flop, Scale::Log),
            AxisSpec::new("median time per call (log)", Unit::Nanoseconds, Scale::Log),
            vec![line("CPU", &cpu, 0), line(gpu_name, &gpu, 1)],
        );
        lines.x_marks = x_marks;
        lines.notes = notes;
        out.push(ChartSpec::lines(name, title, lines));
        let bars: Vec<BarSpec> = suite
            .cases
            .iter()
            .filter(|c| param(c, "op") == Some(op.as_str()) && param(c, "device") == Some("gpu"))
            .filter_map(|c| Some(BarSpec::new(param(c, "size")?, metric(c, "speedup_vs_cpu_ratio")?, 0)))
            .collect();
        if !bars.is_empty() {
            speedups.push(BarGroupSpec { name: op.clone(), bars });
        }
    }
    let title = "cpu-vs-gpu: GPU speedup over the CPU (CPU time ÷ GPU time)";
    let speedup = if speedups.is_empty() {
        ChartSpec::unavailable("speedup", title, missing_gpu.unwrap_or_else(|| "no GPU case produced a speedup".into()))
    } else {
        let mut bars = BarsSpec::new(Unit::Ratio, speedups);
        // Ratios on a log axis: 0.05× and 0.7× are as far apart as 1.4× and 20×.
        bars.log = true;
        bars.reference = Some(Marker::new(1.0, "1× (as fast as the CPU)"));
        ChartSpec::bars("speedup", title, bars)
    };
    out.push(speedup);
    out
}

#[cfg(test)]
mod tests {
    use vramlab_display::chart::ChartKind;

    use super::*;
    use crate::testing::{chart, cpu_vs_gpu_without_gpu, matmul_crossing, suite};

    #[test]
    fn the_crossover_is_marked_where_the_lines_cross() {
        // The crossing the cases' doc works out: 290 kFLOP.
        let charts = charts(&suite("cpu-vs-gpu", matmul_crossing()));
        let ChartKind::Lines(lines) = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert_eq!(lines.x_marks.len(), 1);
        let expected = 10f64.powf(5.0 + 2.0 * 2f64.ln() / (2f64.ln() + 10f64.ln()));
        assert!((lines.x_marks[0].at - expected).abs() < 1e-6 * expected, "{:?}", lines.x_marks);
        assert_eq!(lines.x_marks[0].label, "crossover ≈ 290 kFLOP");
        assert_eq!(
            lines.notes,
            ["The lines cross near 290 kFLOP per call, interpolated on the log axes between s1 (the CPU wins) and s2 \
              (the GPU wins from there up)."]
        );
        assert_eq!(lines.series.iter().map(|s| s.points.len()).collect::<Vec<_>>(), [3, 3]);
    }

    #[test]
    fn without_a_gpu_the_speedups_say_why() {
        let charts = charts(&cpu_vs_gpu_without_gpu());
        let ChartKind::Unavailable { reason } = chart(&charts, "speedup") else { panic!("the speedups need a GPU") };
        assert!(reason.contains("no CUDA driver"), "{reason}");
        let ChartKind::Lines(lines) = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert_eq!(lines.notes, ["GPU side matmul/gpu: not available: no CUDA driver; no crossover without it."]);
        assert_eq!(lines.series[1].name, "GPU (not available)");
    }
}
