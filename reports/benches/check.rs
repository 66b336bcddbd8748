//! The regression check's and the history's cost at full-run size, on runs
//! shaped like a full `cargo xtask bench` (108 cases, 92 of them timed with 176
//! samples each, ~10 memory figures per case): `compare` of one run against one
//! (memory judged, times not: one run a side cannot tell the noise between
//! runs); `compare_runs` of a baseline of 3 runs against 2 and of an A/B sitting
//! of 5 pairs (the hierarchical bootstrap over runs then samples, 2000
//! resamples); `History::trends` over 1000 stored runs of that shape; and the
//! report's Trends section (`trends::load_trends`) over the same history.
//!
//! Run: `cargo bench -p vramlab-reports --bench check`.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_reports::check::{CheckConfig, CompareOptions, Design, Labels, RunSet, compare, compare_runs};
use vramlab_reports::history::History;
use vramlab_rng::Rng;
use vramlab_suites::harness::summarize;
use vramlab_suites::{CaseResult, Environment, MemoryPeaks, RunOptions, RunResults, SuiteResult};

/// A run shaped like a full run on this machine, its times drawn around `scale`.
fn full_run(seed: u64, scale: f64) -> RunResults {
    let mut rng = Rng::new(seed);
    let cases: Vec<CaseResult> = (0..108)
        .map(|i| {
            let timed = i < 92;
            let center = 1000.0 * (1 + i % 17) as f64 * scale;
            let samples: Vec<f64> = (0..176).map(|_| center * (1.0 + 0.2 * (rng.uniform() - 0.5))).collect();
            let metrics: BTreeMap<String, f64> = (0..5)
                .map(|m| (format!("figure{m}_bytes"), (m * 2097152) as f64))
                .chain((0..2).map(|m| (format!("other{m}_gbps"), 1.5)))
                .collect();
            CaseResult::ok(format!("case{i}/{}", i * 7))
                .with_params([("size".into(), serde_json::json!(i))])
                .with_timing(timed.then(|| summarize(samples, 1, "host")))
                .with_metrics(metrics)
                .with_memory(MemoryPeaks {
                    device: "cpu".into(),
                    peak_allocated_bytes: 1 << 20,
                    peak_reserved_bytes: 2 << 20,
                    peak_active_bytes: 1 << 20,
                    peak_phase: None,
                    by_category_at_peak_bytes: BTreeMap::from([("activation".into(), 1 << 20)]),
                    allocator_events: 10,
                })
                .with_duration_ns(1)
        })
        .collect();
    RunResults {
        schema_version: vramlab_suites::SCHEMA_VERSION,
        vramlab_version: "0.1.0".into(),
        started_at: "2026-11-24T00:00:00Z".into(),
        options: RunOptions {
            suites: vec![],
            device: "cpu".into(),
            quick: false,
            samples: None,
            seed: 42,
            capacity_bytes: 4 << 30,
        },
        environment: Environment {
            cpu_model: "bench".into(),
            cpu_cores: 2,
            host_memory_bytes: 1 << 34,
            gpus: vec![],
            gpu_unavailable_reason: None,
            device: "cpu".into(),
            os: "linux".into(),
            rustc: None,
            git_commit: Some(format!("{seed:012x}")),
        },
        suites: (0..8)
            .map(|s| SuiteResult {
                name: format!("suite{s}"),
                description: String::new(),
                device: "cpu".into(),
                duration_ns: 1,
                cases: cases.iter().skip(s).step_by(8).cloned().collect(),
                findings: vec![],
                charts: vec![],
            })
            .collect(),
    }
}

fn check_full_runs(c: &mut Criterion) {
    let (old, new) = (full_run(1, 1.0), full_run(2, 1.1));
    let cfg = CheckConfig::default();
    let mut g = c.benchmark_group("check");
    g.sample_size(10);
    g.bench_function("compare_one_full_run_against_one", |b| {
        b.iter(|| black_box(compare(&old, &new, &cfg, false, Labels::default())))
    });
    // Runs of one build share a commit, so the sets are what `--repeat` makes.
    let set = |seeds: std::ops::Range<u64>, scale: f64, commit: &str| {
        let runs = seeds
            .map(|s| {
                let mut r = full_run(s, scale);
                r.environment.git_commit = Some(commit.into());
                r
            })
            .collect();
        RunSet::new(runs).expect("runs")
    };
    let (base3, new2) = (set(10..13, 1.0, "base"), set(20..22, 1.1, "new"));
    let runs = CompareOptions { force_times: false, design: Design::Runs, known_noise: None };
    g.bench_function("compare_runs_3_against_2_full_runs_2000_resamples", |b| {
        b.iter(|| black_box(compare_runs(&base3, &new2, &cfg, runs.clone(), Labels::default())))
    });
    let (a5, b5) = (set(30..35, 1.0, "base"), set(40..45, 1.1, "new"));
    let pairs = CompareOptions { force_times: false, design: Design::Pairs, known_noise: None };
    g.bench_function("compare_ab_5_pairs_of_full_runs_2000_resamples", |b| {
        b.iter(|| black_box(compare_runs(&a5, &b5, &cfg, pairs.clone(), Labels::default())))
    });
    g.finish();
}

fn history_1000_runs(c: &mut Criterion) {
    let path = std::env::temp_dir().join(format!("vramlab-bench-history-{}.sqlite", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut h = History::open_or_create(&path).unwrap();
    for i in 0..1000 {
        h.append(&full_run(i, 1.0 + if i >= 700 { 0.3 } else { 0.0 })).unwrap();
    }
    drop(h);
    let h = History::open_existing(&path).unwrap();
    let mut g = c.benchmark_group("history");
    g.sample_size(10);
    g.bench_function("trends_one_figure_over_1000_runs", |b| {
        b.iter(|| black_box(h.trends(Some("suite3/case3/21 * time"), 1000).unwrap()))
    });
    g.bench_function("trends_every_figure_over_1000_runs", |b| b.iter(|| black_box(h.trends(None, 1000).unwrap())));
    // The report's Trends section: the headline figures over the last 20 runs.
    let last = full_run(999, 1.3);
    g.bench_function("report_trends_over_1000_runs", |b| {
        b.iter(|| black_box(vramlab_reports::trends::load_trends(&last, Some(&path), 20)))
    });
    g.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, check_full_runs, history_1000_runs);
criterion_main!(benches);
