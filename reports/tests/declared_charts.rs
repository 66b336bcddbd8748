//! A new suite gets its charts with no edit to reports: a tiny suite, defined
//! here and in no registry, declares a line chart (log axis, a reference line,
//! a labelled point, a note) and a bar chart from its own results; the runner
//! stores them with its results, `results.json` carries them, and the report —
//! read back from that file — draws them under the suite's name.

use std::path::PathBuf;

use vramlab_display::chart::{
    AxisSpec, BarGroupSpec, BarSpec, BarsSpec, ChartSpec, LabelledPoint, LineSeries, LinesSpec, Marker, Scale, Unit,
};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Hooks;
use vramlab_reports::charts::Chart;
use vramlab_reports::suite_charts::for_suite;
use vramlab_suites::{
    Case, CaseOutput, CaseResult, Context, Environment, Finding, HarnessConfig, NoProgress, RunOptions, RunResults,
    SCHEMA_VERSION, Suite, SuiteResult, run_suite,
};

/// Squares its case's `n` and charts the squares.
struct Squares;

impl Suite for Squares {
    fn name(&self) -> &'static str {
        "squares"
    }

    fn description(&self) -> &'static str {
        "n² grows fast"
    }

    fn cases(&self, _: &Context) -> Vec<Case> {
        (1..=4u32)
            .map(|n| {
                Case::new(format!("n{n}"), move |_| Ok(CaseOutput::default().metric("square_count", f64::from(n * n))))
                    .param("n", n)
                    .without_profiling()
            })
            .collect()
    }

    fn findings(&self, _: &Context, _: &[CaseResult]) -> Vec<Finding> {
        vec![]
    }

    fn charts(&self, result: &SuiteResult) -> Vec<ChartSpec> {
        let points: Vec<(f64, f64)> = result
            .cases
            .iter()
            .filter_map(|c| Some((c.params.get("n")?.as_f64()?, *c.metrics.get("square_count")?)))
            .collect();
        let mut lines = LinesSpec::new(
            AxisSpec::new("n", Unit::Count, Scale::Linear),
            AxisSpec::new("n squared (log)", Unit::Count, Scale::Log),
            vec![LineSeries { name: "n²".into(), points: points.clone(), dashed: false, color: 0, steps: false }],
        );
        lines.y_marks.push(Marker::new(10.0, "ten"));
        lines.points.push(LabelledPoint { x: 4.0, y: 16.0, label: "the largest square".into(), color: None });
        lines.notes.push("squares of 1 to 4".into());
        let bars = BarsSpec::new(
            Unit::Count,
            vec![BarGroupSpec {
                name: String::new(),
                bars: points.iter().map(|&(n, sq)| BarSpec::new(format!("{n}²"), sq, 0)).collect(),
            }],
        );
        vec![
            ChartSpec::lines("growth", "squares: n² by n", lines),
            ChartSpec::bars("values", "squares: each square", bars),
        ]
    }
}

fn context() -> Context {
    let options = RunOptions {
        suites: vec![],
        device: "cpu".into(),
        quick: true,
        samples: Some(3),
        seed: 1,
        capacity_bytes: 1 << 30,
    };
    Context {
        device: Device::cpu(),
        gpu_unavailable: Some("not needed".into()),
        options,
        harness: HarnessConfig::quick(),
        hooks: Hooks::new(),
    }
}

fn run(suite: SuiteResult, options: RunOptions) -> RunResults {
    RunResults {
        schema_version: SCHEMA_VERSION,
        vramlab_version: "0.1.0".into(),
        started_at: "2026-11-24T00:00:00Z".into(),
        options,
        environment: Environment {
            cpu_model: "Test CPU".into(),
            cpu_cores: 2,
            host_memory_bytes: 8 << 30,
            gpus: vec![],
            gpu_unavailable_reason: Some("no GPU".into()),
            device: "cpu".into(),
            os: "linux".into(),
            rustc: None,
            git_commit: None,
        },
        suites: vec![suite],
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramlab-declared-charts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_suite_defined_here_gets_its_declared_charts_drawn_from_its_results_file() {
    let ctx = context();
    let result = run_suite(&Squares, &ctx, &NoProgress);
    assert_eq!(result.charts.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["growth", "values"]);

    // Through results.json: the declared charts are stored there and read back.
    let dir = temp_dir("report");
    let path = vramlab_reports::write_results_json(&dir, &run(result, ctx.options.clone())).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("\"title\":\"squares: n² by n\""), "{json}");
    let loaded = vramlab_reports::load_results(&path).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let suite = &loaded.results.suites[0];

    // The report's renderer draws them as declared.
    let charts = for_suite(suite).expect("the suite declares charts");
    let (name, growth) = &charts[0];
    assert_eq!(name, "growth");
    let Chart::Lines { lines, .. } = growth else { panic!("a line chart") };
    assert_eq!(lines.series[0].points, [(1.0, 1.0), (2.0, 4.0), (3.0, 9.0), (4.0, 16.0)]);
    assert_eq!((lines.y_marks[0].at, lines.points[0].y), (10.0, 16.0));
    let svg = growth.svg().unwrap();
    for text in ["squares: n² by n", "ten", "the largest square", "squares of 1 to 4"] {
        assert!(svg.contains(&format!(">\n{text}\n")), "no {text:?} in the SVG");
    }
    let Chart::Bars { bars, .. } = &charts[1].1 else { panic!("a bar chart") };
    assert_eq!(bars.groups[0].bars.iter().map(|b| b.value).collect::<Vec<_>>(), [1.0, 4.0, 9.0, 16.0]);

    // And the whole report has them as files, under the suite's name.
    let files = vramlab_reports::write_report(&loaded.results, &dir, &[], Some(&path)).unwrap();
    for name in ["squares-growth", "squares-values"] {
        for ext in ["svg", "png"] {
            let file = dir.join(format!("charts/{name}.{ext}"));
            assert!(files.charts.contains(&file), "no {} among {:?}", file.display(), files.charts);
        }
    }
    let index = std::fs::read_to_string(&files.index_html).unwrap();
    assert!(index.contains("squares: each square"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_suite_that_declares_no_chart_gets_the_generic_ones() {
    struct Plain;
    impl Suite for Plain {
        fn name(&self) -> &'static str {
            "plain"
        }
        fn description(&self) -> &'static str {
            "declares no chart"
        }
        fn cases(&self, _: &Context) -> Vec<Case> {
            vec![Case::new("one", |_| Ok(CaseOutput::default().metric("x_count", 1.0))).without_profiling()]
        }
        fn findings(&self, _: &Context, _: &[CaseResult]) -> Vec<Finding> {
            vec![]
        }
    }
    let ctx = context();
    let result = run_suite(&Plain, &ctx, &NoProgress);
    assert!(result.charts.is_empty());
    assert!(for_suite(&result).is_none());
}
