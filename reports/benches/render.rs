//! Render time of the report (criterion): a quick-run-sized results file (8
//! suites × 20 cases, each case a 2000-point timeline, as schema v2 writes them)
//! and a file whose one timeline holds 10 million events (decimated before
//! drawing). The 10-million-event file is also left at
//! `target/vramlab-bench/ten_million_events.json` for measuring memory with
//! `/usr/bin/time -v cargo xtask report --from …`. Where a chart's time goes:
//! one 2000-point timeline drawn as SVG, and as PNG (drawing and encoding).

use std::collections::BTreeMap;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_suites::{
    CaseResult, Environment, Finding, MemoryPeaks, MemoryTimeline, PhaseBand, RunOptions, RunResults, SCHEMA_VERSION,
    Series, SuiteResult, Verdict,
};

/// A timeline of `events` allocator events: a saw-tooth of allocations.
fn timeline(events: usize) -> MemoryTimeline {
    let time_ns: Vec<u64> = (0..events as u64).map(|i| i * 100).collect();
    let bytes: Vec<u64> = (0..events as u64).map(|i| ((i % 1000) + (i / 100_000)) << 12).collect();
    let (peak_i, peak) = bytes.iter().enumerate().max_by_key(|(_, b)| **b).map(|(i, b)| (i, *b)).unwrap_or((0, 0));
    MemoryTimeline {
        device: "cpu:0".into(),
        duration_ns: events as u64 * 100,
        reserved: Series { time_ns: vec![0], bytes: vec![peak * 2] },
        active: Series::default(),
        phases: (0..10)
            .map(|k| PhaseBand {
                name: format!("step{k}"),
                path: format!("step{k}"),
                depth: 1,
                start_ns: k * events as u64 * 10,
                end_ns: (k + 1) * events as u64 * 10,
            })
            .collect(),
        peak_allocated_bytes: peak,
        peak_time_ns: time_ns.get(peak_i).copied().unwrap_or(0),
        peak_phase: None,
        events: events as u64,
        allocated: Series { time_ns, bytes },
    }
}

fn results(suites: usize, cases: usize, events: usize) -> RunResults {
    let case = |i: usize| {
        CaseResult::ok(format!("case_{i}"))
            .with_params([("size".into(), serde_json::json!(i))])
            .with_timing(vramlab_suites::harness::summarize((0..20).map(|k| 1000.0 + k as f64).collect(), 1, "host"))
            .with_metrics([("throughput_gflops".into(), i as f64)])
            .with_memory(MemoryPeaks {
                device: "cpu:0".into(),
                peak_allocated_bytes: 1 << 20,
                peak_reserved_bytes: 2 << 20,
                peak_active_bytes: 1 << 20,
                peak_phase: None,
                by_category_at_peak_bytes: BTreeMap::new(),
                allocator_events: events as u64,
            })
            .with_duration_ns(1)
            .with_timeline(timeline(events))
    };
    RunResults {
        schema_version: SCHEMA_VERSION,
        vramlab_version: "bench".into(),
        started_at: "2026-11-24T00:00:00Z".into(),
        options: RunOptions {
            suites: vec![],
            device: "cpu".into(),
            quick: true,
            samples: None,
            seed: 1,
            capacity_bytes: 1,
        },
        environment: Environment {
            cpu_model: "bench".into(),
            cpu_cores: 1,
            host_memory_bytes: 1,
            gpus: vec![],
            gpu_unavailable_reason: Some("bench".into()),
            device: "cpu".into(),
            os: "linux".into(),
            rustc: None,
            git_commit: None,
        },
        suites: (0..suites)
            .map(|s| SuiteResult {
                name: format!("suite{s}"),
                description: "bench".into(),
                device: "cpu".into(),
                duration_ns: 1,
                cases: (0..cases).map(case).collect(),
                findings: vec![Finding { claim: "c".into(), verdict: Verdict::Holds, evidence: "e".into() }],
                charts: vec![],
            })
            .collect(),
    }
}

fn out_dir(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").join("target"));
    target.join("vramlab-bench").join(name)
}

fn render(c: &mut Criterion) {
    let quick = out_dir("quick");
    let quick_json = vramlab_reports::write_results_json(&quick, &results(8, 20, 2000)).expect("written");
    let mut g = c.benchmark_group("report");
    g.sample_size(10);
    g.bench_function("quick_run_8x20_cases", |b| {
        b.iter(|| {
            let l = vramlab_reports::load_results(&quick_json).expect("loads");
            vramlab_reports::write_report(&l.results, &quick.join("report"), &l.problems, None).expect("renders")
        })
    });
    let big = out_dir("ten_million");
    let json = serde_json::to_vec(&results(1, 1, 10_000_000)).expect("serializes");
    std::fs::create_dir_all(&big).expect("folder");
    let big_json = big.join("ten_million_events.json");
    std::fs::write(&big_json, json).expect("written");
    g.bench_function("ten_million_event_timeline", |b| {
        b.iter(|| {
            let l = vramlab_reports::load_results(&big_json).expect("loads");
            vramlab_reports::write_report(&l.results, &big.join("report"), &l.problems, None).expect("renders")
        })
    });
    let t = timeline(2000);
    let chart = vramlab_reports::charts::Chart::Timeline { title: "timeline".into(), timeline: &t };
    g.bench_function("one_timeline_svg", |b| b.iter(|| chart.svg().expect("draws")));
    g.bench_function("one_timeline_png", |b| b.iter(|| chart.png().expect("draws")));
    g.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
