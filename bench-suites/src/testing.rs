//! Results to test chart code on, shared by the suites' own chart tests (what
//! a suite declares) and the report's (how it is drawn): a case, a timed case,
//! a suite of cases, a declared chart by name, and the case sets of the
//! cpu-vs-gpu, memory, autotune and async suites' charts. Compiled for this
//! crate's tests and, with the `testing` feature, for other crates' tests.

use vramlab_display::chart::{ChartKind, ChartSpec};

use crate::harness::summarize;
use crate::schema::{CaseResult, Outcome, SuiteResult};

/// A case `name` that ran, with `params` and `metrics`, taking 1 ns.
pub fn case(name: &str, params: &[(&str, serde_json::Value)], metrics: &[(&str, f64)]) -> CaseResult {
    CaseResult::ok(name)
        .with_params(params.iter().map(|(k, v)| ((*k).to_owned(), v.clone())))
        .with_metrics(metrics.iter().map(|(k, v)| ((*k).to_owned(), *v)))
        .with_duration_ns(1)
}

/// `c` with five host-clock samples of `ns` each.
pub fn timed(mut c: CaseResult, ns: f64) -> CaseResult {
    c.timing = Some(summarize(vec![ns; 5], 1, "host"));
    c
}

/// A suite `name` on the CPU with `cases`, no findings and no stored charts.
pub fn suite(name: &str, cases: Vec<CaseResult>) -> SuiteResult {
    SuiteResult {
        name: name.into(),
        description: "test".into(),
        device: "cpu".into(),
        duration_ns: 1,
        cases,
        findings: vec![],
        charts: vec![],
    }
}

/// The chart called `name` among `charts`.
pub fn chart<'a>(charts: &'a [ChartSpec], name: &str) -> &'a ChartKind {
    &charts.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no chart {name}")).kind
}

/// A cpu-vs-gpu matmul case on `dev` at size `s{i}` of `flops`, timed at `ns`.
pub fn matmul_case(dev: &str, i: usize, flops: f64, ns: f64) -> CaseResult {
    let size = format!("s{i}");
    timed(
        case(
            &format!("matmul/{dev}/{size}"),
            &[
                ("op", "matmul".into()),
                ("device", dev.into()),
                ("size", size.into()),
                ("size_index", i.into()),
                ("flops", flops.into()),
            ],
            &[],
        ),
        ns,
    )
}

/// Matmuls at s0, s1 and s2 (1 k, 100 k and 10 MFLOP) on the CPU, then the
/// same on the GPU: the GPU loses at s0 and s1 (at s1 it takes twice the CPU's
/// time) and wins at s2 (a tenth), so on log axes the lines cross ln 2 / (ln 2
/// + ln 10) = 0.231 of the way from 1e5 to 1e7 FLOP: 10^(5 + 2 × 0.231) = 290 kFLOP.
pub fn matmul_crossing() -> Vec<CaseResult> {
    vec![
        matmul_case("cpu", 0, 1e3, 1_000.0),
        matmul_case("cpu", 1, 1e5, 10_000.0),
        matmul_case("cpu", 2, 1e7, 1_000_000.0),
        matmul_case("gpu", 0, 1e3, 5_000.0),
        matmul_case("gpu", 1, 1e5, 20_000.0),
        matmul_case("gpu", 2, 1e7, 100_000.0),
    ]
}

/// The cpu-vs-gpu suite with one CPU matmul (1 kFLOP in 1 µs) and a GPU side
/// that was not available: "no CUDA driver".
pub fn cpu_vs_gpu_without_gpu() -> SuiteResult {
    let mut gpu = case("matmul/gpu", &[("op", "matmul".into()), ("device", "gpu".into())], &[]);
    gpu.outcome = Outcome::NotAvailable { reason: "no CUDA driver".into() };
    suite("cpu-vs-gpu", vec![matmul_case("cpu", 0, 1e3, 1_000.0), gpu])
}

/// The memory suite's batch-size sweep on a 4 MiB device: 256, 512 and 768
/// fit (peaks 1, 2 and 3 MiB), 1024 runs out of memory.
pub fn memory_sweep() -> CaseResult {
    let mib = (1u64 << 20) as f64;
    let mut c = case(
        "batch_size_sweep",
        &[("capacity_bytes", (4u64 << 20).into())],
        &[
            ("capacity_bytes", 4.0 * mib),
            ("oom_batch_count", 1024.0),
            ("largest_fitting_batch_count", 768.0),
            ("largest_fitting_peak_allocated_bytes", 3.0 * mib),
        ],
    );
    c.notes.push(
        "trials: 256 fits (peak 1.00 MiB); 512 fits (peak 2.00 MiB); 1024 out of memory in forward (requested 4.00 \
         MiB); 768 fits (peak 3.00 MiB)"
            .into(),
    );
    c
}

/// The autotune suite on one shape, `conv_a`: off (the heuristic's `direct`,
/// 2 µs a call) and benchmark (`gemm`, 1 µs a call after 50 µs of tuning,
/// paying back after 50 calls).
pub fn autotune_conv_a() -> SuiteResult {
    let shape = |mode: &str, ns: f64, alg: &str, metrics: &[(&str, f64)]| {
        let mut c = timed(
            case(
                &format!("conv_a/{mode}"),
                &[("shape", "conv_a".into()), ("op", "conv2d_forward".into()), ("mode", mode.into())],
                metrics,
            ),
            ns,
        );
        c.notes.push(format!("algorithm: {alg}"));
        c
    };
    suite(
        "autotune",
        vec![
            shape("off", 2_000.0, "direct", &[]),
            shape(
                "benchmark",
                1_000.0,
                "gemm",
                &[
                    ("candidate_direct_median_ns", 2_000.0),
                    ("candidate_gemm_median_ns", 1_000.0),
                    ("tuning_ns", 50_000.0),
                    ("payback_calls_count", 50.0),
                ],
            ),
        ],
    )
}

/// The async suite on the CPU: the host clock at 100 ns unsynchronized and
/// 900 ns synchronized (an 8x8x8 matmul), device events not available.
pub fn async_without_device_events() -> SuiteResult {
    let mut events = case("device_events", &[], &[]);
    events.outcome = Outcome::NotAvailable { reason: "the CPU backend runs synchronously".into() };
    suite(
        "async",
        vec![
            timed(case("host_clock/no_sync", &[("shape", "8x8x8".into())], &[]), 100.0),
            timed(case("host_clock/synchronized", &[], &[]), 900.0),
            events,
        ],
    )
}
