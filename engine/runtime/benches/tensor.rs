//! Tensor-level performance (issue 3's performance items), through the public
//! `Tensor` API, so the allocator, the autotuner and the kernel-event hooks are in
//! the loop:
//!
//! - `tensor_matmul_f32_1024`: `Tensor::matmul` 1024³ with the autotuner `off` and
//!   in `benchmark` mode (tuned before timing), against the `gemm` crate called
//!   directly on preallocated buffers (same row-major layout, same rayon pool).
//!   Target: the tensor path within 10% of `gemm` direct. numpy's figure for the
//!   same product comes from `python3 scripts/numpy_matmul.py`.
//! - `tensor_conv2d_<shape>`: ResNet-like forward convolutions: every applicable
//!   algorithm alone (the kernel function with a preallocated workspace), the
//!   autotuned choice (`Tensor::conv2d` in `benchmark` mode after the tuning call)
//!   and the heuristic (`off`). Target: autotuned at least as fast as the best
//!   single algorithm.
//!
//! Besides criterion's estimates, each group prints a *paired* summary: the
//! variants timed in interleaved rounds (see [`paired`]), so load that drifts
//! during the run (other builds on the machine) hits them alike, with medians and
//! ratios. Each group also tunes its shape from scratch five times and prints the
//! autotuner's records (every candidate's median, the choice, `tuning_ns`) and the
//! cost of tuning a new shape: the first `benchmark`-mode call minus a
//! steady-state call. Those extras run only under `cargo bench`; `cargo test
//! --benches` runs every case once on tiny shapes.
//!
//! Run: `cargo bench -p vramlab-engine --bench tensor` (about 3 minutes on 2
//! cores; filter with a trailing `-- matmul` or `-- conv2d`). Throughput is in
//! elements/s where one element is one nominal FLOP, so `Gelem/s` reads as GFLOP/s.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use vramlab_engine::autotune::{self, TuneMode, TuningRecord};
use vramlab_engine::cpu_kernels::{
    self as k, Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, KernelCall, conv2d_forward,
};
use vramlab_engine::device::Device;
use vramlab_engine::tensor::{Conv2dOptions, DType, Tensor};

/// Whether this is a real `cargo bench` run (criterion gets `--bench`), not a
/// `cargo test` smoke run.
fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Criterion options that take a value (the value is not a filter).
const VALUE_OPTIONS: &[&str] = &[
    "--save-baseline",
    "--baseline",
    "--baseline-lenient",
    "--load-baseline",
    "--color",
    "--output-format",
    "--plotting-backend",
    "--format",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--profile-time",
];

/// Whether the extras of `group` should run: bench mode, and the group matches the
/// positional filter if there is one (a substring test; criterion's own filter is a
/// regex, so a regex filter may run the extras of a group it skips).
fn extras_wanted(group: &str) -> bool {
    if !bench_mode() {
        return false;
    }
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if VALUE_OPTIONS.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    filters.is_empty() || filters.iter().any(|f| group.contains(f.as_str()) || f.contains(group))
}

/// A named closure that runs one case once.
type Variant<'a> = (String, Box<dyn FnMut() + 'a>);

/// Runs the variants in interleaved rounds — so load that drifts during the run
/// hits them alike — and returns each variant's median in ns. Within a round each
/// variant runs twice in a row and only the second run is timed: every timed run
/// then follows a run of itself (warm caches, its own allocator blocks reused), as
/// in criterion's back-to-back iterations, instead of inheriting whatever the
/// previous variant left in the caches. The starting variant rotates per round.
fn paired(rounds: usize, variants: &mut [Variant<'_>]) -> Vec<u64> {
    let n = variants.len();
    let mut samples = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        for i in 0..n {
            let v = (i + round) % n;
            (variants[v].1)();
            let start = Instant::now();
            (variants[v].1)();
            samples[v].push(start.elapsed().as_nanos() as u64);
        }
    }
    samples.into_iter().map(median).collect()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    if v.is_empty() { 0 } else { v[v.len() / 2] }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn gflops(flops: u64, ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { flops as f64 / ns as f64 }
}

/// The newest tuning record of `op`.
fn last_record(op: &str) -> Option<TuningRecord> {
    autotune::global().records().into_iter().rev().find(|r| r.op == op)
}

fn print_record(rep: usize, r: &TuningRecord) {
    let cands: Vec<String> = r.candidates.iter().map(|c| format!("{} {:.2}", c.algorithm, ms(c.median_ns))).collect();
    println!(
        "  tuning {rep}: choice {:<24} tuning_ns {:>6.1} ms | candidate medians (ms): {}",
        r.choice,
        ms(r.tuning_ns),
        cands.join(", ")
    );
}

/// Tunes `op` from scratch `reps` times in benchmark mode (the cache cleared before
/// each) through `call`, which runs the op once and returns the algorithm it used.
/// With `report`, prints each tuning record and the tuning cost: the first call's
/// time minus a steady-state call's, and the tuner's own `tuning_ns`. The last
/// choice stays cached; returns it. Leaves the mode `off`.
fn tune(op: &str, reps: usize, report: bool, mut call: impl FnMut() -> &'static str) -> &'static str {
    let tuner = autotune::global();
    tuner.set_mode(TuneMode::Benchmark);
    let (mut firsts, mut tunings) = (Vec::new(), Vec::new());
    let mut choices: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut chosen = "";
    for rep in 0..reps {
        tuner.clear();
        let start = Instant::now();
        chosen = call();
        firsts.push(start.elapsed().as_nanos() as u64);
        *choices.entry(chosen).or_default() += 1;
        if let Some(r) = last_record(op) {
            if report {
                print_record(rep + 1, &r);
            }
            tunings.push(r.tuning_ns);
        }
    }
    if report {
        let steady = median(
            (0..5)
                .map(|_| {
                    let start = Instant::now();
                    call();
                    start.elapsed().as_nanos() as u64
                })
                .collect(),
        );
        let first = median(firsts);
        let counts: Vec<String> = choices.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
        println!(
            "  tuning cost, median of {reps} tunings: first call {:.1} ms - steady-state call {:.1} ms = {:.1} ms; \
             tuning_ns {:.1} ms (range {:.1}..{:.1}); {} timed runs + 1 warm-up per candidate; choices: {}",
            ms(first),
            ms(steady),
            ms(first.saturating_sub(steady)),
            ms(median(tunings.clone())),
            ms(tunings.iter().copied().min().unwrap_or(0)),
            ms(tunings.iter().copied().max().unwrap_or(0)),
            tuner.timed_runs(),
            counts.join(", ")
        );
    }
    tuner.set_mode(TuneMode::Off);
    chosen
}

/// Alignment of the buffers the direct calls use: the caching allocator hands out
/// 512-byte-aligned blocks, so the direct calls get the same alignment as tensor
/// data (a large `Vec<f32>` from glibc is only 16-byte aligned). Measured on a
/// Zen 5 machine the difference was within noise; the point is to compare like
/// with like.
const ALIGN_BYTES: usize = 512;

/// An f32 buffer whose first element sits on an [`ALIGN_BYTES`] boundary.
struct Aligned {
    raw: Vec<f32>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn zeros(len: usize) -> Aligned {
        let raw = vec![0.0f32; len + ALIGN_BYTES / size_of::<f32>()];
        let start = raw.as_ptr().align_offset(ALIGN_BYTES);
        assert!(start < ALIGN_BYTES / size_of::<f32>());
        Aligned { raw, start, len }
    }

    fn copy_of(values: &[f32]) -> Aligned {
        let mut buf = Aligned::zeros(values.len());
        buf.copy_from_slice(values);
        buf
    }
}

impl std::ops::Deref for Aligned {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.raw[self.start..][..self.len]
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.raw[self.start..][..self.len]
    }
}

// ---------------------------------------------------------------------------------
// matmul

/// `out = a · b` for row-major n×n f32 through `gemm::gemm`, threaded on rayon's
/// global pool exactly as the engine's `gemm_rayon` algorithm is.
fn gemm_direct(n: usize, a: &[f32], b: &[f32], out: &mut [f32]) {
    assert!(a.len() == n * n && b.len() == n * n && out.len() == n * n);
    let s = n as isize;
    // SAFETY: three distinct n×n row-major buffers of exactly n² elements (checked
    // above); `out` is uniquely borrowed so it aliases neither input.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            out.as_mut_ptr(),
            1,
            s,
            false,
            a.as_ptr(),
            1,
            s,
            b.as_ptr(),
            1,
            s,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
    }
}

fn tensor_matmul(c: &mut Criterion) {
    const GROUP: &str = "tensor_matmul_f32_1024";
    let n: usize = if bench_mode() { 1024 } else { 64 };
    let device = Device::cpu();
    let ta = Tensor::randn(&[n, n], DType::F32, 1, &device).unwrap();
    let tb = Tensor::randn(&[n, n], DType::F32, 2, &device).unwrap();
    let a = Aligned::copy_of(&ta.to_vec::<f32>().unwrap());
    let b = Aligned::copy_of(&tb.to_vec::<f32>().unwrap());
    let mut out = Aligned::zeros(n * n);
    let flops = 2 * (n as u64).pow(3);
    let tuner = autotune::global();

    let extras = extras_wanted(GROUP);
    if extras {
        println!("{GROUP}: {} rayon threads", rayon::current_num_threads());
    }
    // Tune now, so the benchmark-mode case below times only a cached choice.
    let reps = if extras { 5 } else { 1 };
    let tuned = tune("matmul", reps, extras, || ta.matmul_timed(&tb).unwrap().1.algorithm);
    let (_, heuristic) = ta.matmul_timed(&tb).unwrap();
    if extras {
        println!("  heuristic (off): {} | autotuned (benchmark), last tuning: {tuned}", heuristic.algorithm);
    }

    let mut group = c.benchmark_group(GROUP);
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(flops));
    group.bench_function("gemm_crate_direct", |bench| {
        bench.iter(|| {
            gemm_direct(n, black_box(&a), black_box(&b), &mut out);
            black_box(&out);
        })
    });
    for (label, mode) in [("tensor_off", TuneMode::Off), ("tensor_benchmark", TuneMode::Benchmark)] {
        group.bench_function(label, |bench| {
            tuner.set_mode(mode);
            bench.iter(|| black_box(black_box(&ta).matmul(black_box(&tb)).unwrap()))
        });
    }
    group.finish();

    if extras {
        let mut variants: Vec<Variant<'_>> = vec![
            (
                "gemm_crate_direct".into(),
                Box::new(|| {
                    gemm_direct(n, black_box(&a), black_box(&b), &mut out);
                    black_box(&out);
                }),
            ),
            (
                "tensor_off".into(),
                Box::new(|| {
                    tuner.set_mode(TuneMode::Off);
                    black_box(ta.matmul(&tb).unwrap());
                }),
            ),
            (
                format!("tensor_benchmark ({tuned})"),
                Box::new(|| {
                    tuner.set_mode(TuneMode::Benchmark);
                    black_box(ta.matmul(&tb).unwrap());
                }),
            ),
        ];
        let rounds = 21;
        let med = paired(rounds, &mut variants);
        println!("{GROUP} paired ({rounds} interleaved rounds, warm, median per variant):");
        for ((name, _), &m) in variants.iter().zip(&med) {
            println!(
                "  {name:<34} {:>8.2} ms {:>7.1} GFLOP/s  ratio to gemm direct {:.3}",
                ms(m),
                gflops(flops, m),
                m as f64 / med[0] as f64
            );
        }
    }
    tuner.set_mode(TuneMode::Off);
}

// ---------------------------------------------------------------------------------
// conv2d

/// ResNet-like forward convolutions at batch 8 (tiny stand-ins under `cargo test`).
fn conv_cases() -> Vec<(&'static str, Conv2dShape)> {
    if !bench_mode() {
        return vec![
            ("smoke_3x3", Conv2dShape::new(1, 4, 8, 8, 4, 3, 3).with_padding(1, 1)),
            ("smoke_1x1", Conv2dShape::new(1, 8, 8, 8, 4, 1, 1)),
        ];
    }
    vec![
        ("n8_c64_56x56_k64_3x3_p1", Conv2dShape::new(8, 64, 56, 56, 64, 3, 3).with_padding(1, 1)),
        ("n8_c256_56x56_k64_1x1", Conv2dShape::new(8, 256, 56, 56, 64, 1, 1)),
        ("n8_c128_28x28_k128_3x3_p1", Conv2dShape::new(8, 128, 28, 28, 128, 3, 3).with_padding(1, 1)),
    ]
}

fn tensor_conv2d(c: &mut Criterion) {
    let device = Device::cpu();
    let tuner = autotune::global();
    for (label, shape) in conv_cases() {
        let group_name = format!("tensor_conv2d_{label}");
        let extras = extras_wanted(&group_name);
        assert_eq!(shape.stride.0, shape.stride.1);
        assert_eq!(shape.pad.0, shape.pad.1);
        let opts = Conv2dOptions::new(shape.stride.0, shape.pad.0);
        let problem = ConvProblem { pass: ConvPass::Forward, shape };
        let flops = KernelCall::Conv2d { pass: ConvPass::Forward, shape, dtype: k::FloatDType::F32 }.cost().flops;
        let x = Tensor::randn(&[shape.n, shape.c, shape.h, shape.w], DType::F32, 3, &device).unwrap();
        let w = Tensor::randn(&[shape.k, shape.c, shape.r, shape.s], DType::F32, 4, &device).unwrap();
        let xv = Aligned::copy_of(&x.to_vec::<f32>().unwrap());
        let wv = Aligned::copy_of(&w.to_vec::<f32>().unwrap());
        let algos = ConvAlgo::candidates(&problem);

        if extras {
            println!(
                "{group_name}: {:.2} GFLOP nominal | candidates: {}",
                flops as f64 / 1e9,
                algos.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            );
        }
        // Tuning cost of a new shape, and the choice the benchmark-mode case times.
        let reps = if extras { 5 } else { 1 };
        let tuned = tune("conv2d", reps, extras, || x.conv2d_timed(&w, opts).unwrap().1.algorithm);
        let (_, heuristic) = x.conv2d_timed(&w, opts).unwrap();
        let record = last_record("conv2d");
        if extras {
            println!("  heuristic (off): {} | autotuned (benchmark), last tuning: {tuned}", heuristic.algorithm);
        }

        let mut group = c.benchmark_group(&group_name);
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(flops));
        let mut y = Aligned::zeros(shape.y_len());
        let mut workspaces: Vec<Aligned> =
            algos.iter().map(|a| Aligned::zeros(a.workspace_len(&problem, k::FloatDType::F32))).collect();
        for (&algo, ws) in algos.iter().zip(workspaces.iter_mut()) {
            group.bench_function(BenchmarkId::new("kernel", algo.name()), |bench| {
                bench.iter(|| {
                    conv2d_forward(algo, shape, black_box(&xv), black_box(&wv), &mut y, ws).unwrap();
                    black_box(&y);
                })
            });
        }
        for (id, mode) in [("autotuned", TuneMode::Benchmark), ("heuristic", TuneMode::Off)] {
            group.bench_function(BenchmarkId::new("tensor", id), |bench| {
                tuner.set_mode(mode);
                bench.iter(|| black_box(black_box(&x).conv2d(black_box(&w), opts).unwrap()))
            });
        }
        group.finish();

        if extras {
            // Candidates more than twice as slow as the best when tuning cannot be
            // the best single algorithm: leave them out of the paired rounds.
            let best_tuned = record.as_ref().and_then(|r| r.candidates.iter().map(|c| c.median_ns).min());
            let contenders: Vec<(ConvAlgo, &mut Aligned)> = algos
                .iter()
                .copied()
                .zip(workspaces.iter_mut())
                .filter(|(a, _)| {
                    let tuned_ns = record
                        .as_ref()
                        .and_then(|r| r.candidates.iter().find(|c| c.algorithm == a.name()))
                        .map(|c| c.median_ns);
                    match (tuned_ns, best_tuned) {
                        (Some(t), Some(b)) => t <= 2 * b,
                        _ => true,
                    }
                })
                .collect();
            let names: Vec<&str> = contenders.iter().map(|(a, _)| a.name()).collect();
            let mut outputs: Vec<Aligned> = contenders.iter().map(|_| Aligned::zeros(shape.y_len())).collect();
            let (xv, wv) = (&xv, &wv);
            let mut variants: Vec<Variant<'_>> = Vec::new();
            for ((algo, ws), y) in contenders.into_iter().zip(outputs.iter_mut()) {
                variants.push((
                    format!("kernel/{}", algo.name()),
                    Box::new(move || {
                        conv2d_forward(algo, shape, black_box(xv), black_box(wv), y, ws).unwrap();
                        black_box(&*y);
                    }),
                ));
            }
            let n_single = variants.len();
            for (id, mode, algo) in
                [("autotuned", TuneMode::Benchmark, tuned), ("heuristic", TuneMode::Off, heuristic.algorithm)]
            {
                let (x, w) = (&x, &w);
                variants.push((
                    format!("tensor/{id} ({algo})"),
                    Box::new(move || {
                        tuner.set_mode(mode);
                        black_box(x.conv2d(w, opts).unwrap());
                    }),
                ));
            }
            let rounds = 15;
            let med = paired(rounds, &mut variants);
            let best = med[..n_single].iter().copied().min().unwrap_or(0);
            let best_name = names[med[..n_single].iter().position(|&m| m == best).unwrap_or(0)];
            println!(
                "{group_name} paired ({rounds} interleaved rounds, warm, median per variant; best single: {best_name}):"
            );
            for ((name, _), &m) in variants.iter().zip(&med) {
                println!(
                    "  {name:<44} {:>9.2} ms {:>7.1} GFLOP/s  ratio to best single {:.3}",
                    ms(m),
                    gflops(flops, m),
                    m as f64 / best.max(1) as f64
                );
            }
        }
        tuner.set_mode(TuneMode::Off);
    }
}

criterion_group!(benches, tensor_matmul, tensor_conv2d);
criterion_main!(benches);
