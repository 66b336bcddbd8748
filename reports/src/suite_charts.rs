//! The charts a suite declares ([`ChartSpec`]s of the one chart model:
//! lines over linear or log axes with reference lines and labelled points,
//! grouped horizontal bars, or a chart that says why it has no data), as the
//! report's drawable [`Chart`]s. The suites decide what to show and compute it
//! from their cases (`bench-suites/src/suites/<suite>/charts.rs`); this module
//! knows no suite, metric or parameter name. [`for_suite`] returns `None` for
//! a suite that declares no chart, which then gets the generic charts.
//!
//! [`ChartSpec`]: vramlab_display::chart::ChartSpec

use vramlab_suites::SuiteResult;

use crate::charts::Chart;

/// A chart with the name of its files (without the suite's prefix).
pub type Named = (String, Chart<'static>);

/// The charts `suite` declares — stored with its results or, for results that
/// store none, computed by its suite in this build ([`vramlab_suites::declared_charts`]) —
/// ready to draw; `None` for a suite that declares none.
pub fn for_suite(suite: &SuiteResult) -> Option<Vec<Named>> {
    let declared = vramlab_suites::declared_charts(suite);
    if declared.is_empty() {
        return None;
    }
    Some(declared.into_iter().map(|c| (c.name.clone(), Chart::declared(c))).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use vramlab_suites::testing::{
        async_without_device_events, autotune_conv_a, cpu_vs_gpu_without_gpu, matmul_case as op_case, matmul_crossing,
        memory_sweep as sweep, suite,
    };

    use super::*;
    use crate::plot::line_layout;

    /// The charts the suite of `s`'s name declares for it, drawn.
    fn declared(s: &SuiteResult) -> Vec<Named> {
        for_suite(s).unwrap_or_else(|| panic!("{} declares charts", s.name))
    }

    /// The `<text>` element showing `label`: its x and y.
    pub(crate) fn text_at(svg: &str, label: &str) -> (f64, f64) {
        let i = svg.find(&format!(">\n{label}\n")).unwrap_or_else(|| panic!("no text {label:?} in the SVG"));
        let open = &svg[svg[..i].rfind("<text").expect("a text element")..i];
        (attr(open, "x"), attr(open, "y"))
    }

    pub(crate) fn attr(tag: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let i = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
        tag[i..].split('"').next().unwrap().parse().unwrap()
    }

    fn chart<'a>(charts: &'a [Named], name: &str) -> &'a Chart<'static> {
        &charts.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no chart {name}")).1
    }

    #[test]
    fn crossover_is_marked_where_the_time_lines_cross() {
        // The GPU loses at s0 and s1 and wins from s2 up: at s1 it takes twice the CPU's time, at
        // s2 a tenth, so the lines cross 0.231 of the way in log FLOP from 1e5 to 1e7: 290 kFLOP.
        // The GPU's s2 (the sixth case) records its speedup; s3 lies past the crossing on both.
        let mut cases = matmul_crossing();
        cases[5].metrics.insert("speedup_vs_cpu_ratio".into(), 10.0);
        cases.extend([op_case("cpu", 3, 1e9, 100_000_000.0), op_case("gpu", 3, 1e9, 1_000_000.0)]);
        let charts = declared(&suite("cpu-vs-gpu", cases));
        let Chart::Lines { lines, .. } = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert_eq!(lines.x_marks.len(), 1);
        let crossing = 10f64.powf(5.0 + 2.0 * 2f64.ln() / 20f64.ln());
        assert!((lines.x_marks[0].at - crossing).abs() < 1e-6 * crossing, "{}", lines.x_marks[0].at);
        let svg = chart(&charts, "matmul-time-by-size").svg().unwrap();
        let label = "crossover ≈ 290 kFLOP";
        let (x, _) = text_at(&svg, label);
        let at = f64::from(line_layout(lines).x.px(crossing).unwrap());
        assert_eq!((x - at).abs(), 5.0, "label at {x}, crossover at {at}");
        // Two lines of four markers each.
        assert_eq!(svg.matches("<circle").count(), 8 + 2, "markers plus the legend's");
        let svg = chart(&charts, "speedup").svg().unwrap();
        assert!(svg.contains("\n10×\n") && svg.contains("\n1× (as fast as the CPU)\n"), "{svg}");
    }

    #[test]
    fn a_gpu_that_never_wins_gets_no_crossover_and_gpu_absence_says_why() {
        let cases = vec![op_case("cpu", 0, 1e3, 1_000.0), op_case("gpu", 0, 1e3, 5_000.0)];
        let charts = declared(&suite("cpu-vs-gpu", cases));
        let Chart::Lines { lines, .. } = chart(&charts, "matmul-time-by-size") else { panic!("a line chart") };
        assert!(lines.x_marks.is_empty());
        assert!(lines.notes.iter().any(|n| n.contains("does not win")));
        let charts = declared(&cpu_vs_gpu_without_gpu());
        let Chart::Unavailable { reason, .. } = chart(&charts, "speedup") else { panic!("the speedups need a GPU") };
        assert!(reason.contains("no CUDA driver"), "{reason}");
        let svg = chart(&charts, "matmul-time-by-size").svg().unwrap();
        assert!(svg.contains("GPU side matmul/gpu: not available: no CUDA driver"), "{svg}");
    }

    #[test]
    fn sweep_chart_puts_the_capacity_line_and_the_oom_point_at_their_values() {
        let charts = declared(&suite("memory", vec![sweep()]));
        let chart = chart(&charts, "batch-sweep");
        let Chart::Lines { lines, .. } = chart else { panic!("a line chart") };
        let l = line_layout(lines);
        let svg = chart.svg().unwrap();
        let cap_y = f64::from(l.y.px((4u64 << 20) as f64).unwrap());
        let (_, y) = text_at(&svg, "capacity 4.00 MiB");
        assert_eq!(y, cap_y - 3.0, "the capacity label sits on its line");
        let (x, y) = text_at(&svg, "batch 1024: out of memory");
        assert_eq!((x - f64::from(l.x.px(1024.0).unwrap())).abs(), 10.0);
        assert_eq!(y, cap_y - 8.0, "the OOM point sits on the capacity line");
        let (x, _) = text_at(&svg, "largest batch that fits: 768");
        assert_eq!((x - f64::from(l.x.px(768.0).unwrap())).abs(), 5.0);
        // The fits in batch order, the largest at its exact peak.
        let mib = (1u64 << 20) as f64;
        assert_eq!(lines.series[0].points, vec![(256.0, mib), (512.0, 2.0 * mib), (768.0, 3.0 * mib)]);
        // The capacity is above every fit: the line lies above (smaller y) every marker.
        assert!(lines.series[0].points.iter().all(|p| f64::from(l.y.px(p.1).unwrap()) > cap_y));
    }

    #[test]
    fn autotune_marks_the_chosen_candidate_and_the_break_even() {
        let s = autotune_conv_a();
        let charts = declared(&s);
        let svg = chart(&charts, "convolution-candidates").svg().unwrap();
        assert!(svg.contains("\n1.00 µs — chosen\n"), "{svg}");
        assert!(svg.contains("\ndirect (heuristic&apos;s pick (off))\n"), "{svg}");
        let c = chart(&charts, "conv_a-break-even");
        let Chart::Lines { lines, .. } = c else { panic!("a line chart") };
        // Off costs 2 µs a call, benchmark 50 µs once plus 1 µs a call: equal at 50 calls.
        assert_eq!(lines.x_marks[0].at, 50.0);
        let (x, _) = text_at(&c.svg().unwrap(), "break-even: 50 calls");
        assert_eq!((x - f64::from(line_layout(lines).x.px(50.0).unwrap())).abs(), 5.0);
        let off = &lines.series[0].points;
        let bench = &lines.series[1].points;
        let at50 = |p: &[(f64, f64)]| p.iter().find(|q| q.0 == 50.0).unwrap().1;
        assert_eq!(at50(off), at50(bench));
    }

    #[test]
    fn async_without_device_events_says_why_beside_the_host_clocks() {
        let s = async_without_device_events();
        let svg = chart(&declared(&s), "host-vs-device").svg().unwrap();
        assert!(svg.contains("\n100 ns\n") && svg.contains("\n900 ns\n"), "{svg}");
        assert!(svg.contains("device events (the kernel&apos;s time): not available: the CPU backend runs"), "{svg}");
    }
}
