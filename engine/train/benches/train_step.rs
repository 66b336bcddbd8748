//! One training step of the guides' MLP (issue 4's performance item): batch 256,
//! 784→1024→1024→10, float32, SGD with momentum, cross-entropy — `zero_grad`,
//! forward, loss, backward, optimizer step, through `nn::Trainer::step` on a
//! private host device (its own allocator and hooks). Target: under 10% of the
//! step spent outside kernels (framework overhead).
//!
//! Cases (criterion):
//! - `framework`: `Trainer::step` without a kernel clock (nobody subscribed to
//!   the device's hooks, so no event is even built).
//! - `framework_kernel_clock`: the same with the `KernelClock` subscribed, as
//!   the training loop runs by default — what the clock itself costs.
//! - `raw_kernels`: the same step as a hand-written sequence of `cpu_kernels`
//!   calls on preallocated `Vec`s (no tensors, no allocator, no events, same
//!   algorithms): a floor for the framework.
//!
//! Besides criterion's estimates, a bench run prints (1) the share outside
//! kernels measured from the step's own kernel events
//! (`1 − Σ KernelEvent.duration_ns / step wall time`, over 30 steps), with a
//! per-kernel breakdown, and (2) framework against raw kernels in interleaved
//! rounds (`1 − raw / framework`), an estimate that does not rely on the
//! events. `cargo test --benches` runs every case once on a tiny MLP.
//!
//! Run: `cargo bench -p vramlab-engine --bench train_step` (about a minute).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::GIB;
use vramlab_engine::cpu_kernels::{self as k, Algorithm, MatmulAlgo, MatmulShape};
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{Event, Hooks, Subscriber};
use vramlab_engine::tensor::{DType, Tensor, tag_scope};
use vramlab_train::{self as nn, Batch, LossFn, Module, Sequential, Sgd, SgdConfig, Trainer};

/// Whether this is a real `cargo bench` run (criterion gets `--bench`).
fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// (batch, layer sizes).
fn problem() -> (usize, Vec<usize>) {
    if bench_mode() { (256, vec![784, 1024, 1024, 10]) } else { (8, vec![16, 32, 32, 4]) }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

const SGD: SgdConfig = SgdConfig { lr: 0.01, momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: false };

struct Setup {
    device: Device,
    model: Sequential,
    opt: Sgd,
    batch: Batch,
}

fn setup(index: u32) -> Setup {
    let (b, dims) = problem();
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index };
    let device = Device::host(id, 4 * GIB, AllocatorConfig::default(), &hooks).expect("a host device");
    let model = nn::mlp(&dims, 1, &device).unwrap();
    let classes = *dims.last().unwrap();
    let _t = tag_scope(vramlab_engine::hooks::Tag::Input);
    let x = Tensor::randn(&[b, dims[0]], DType::F32, 2, &device).unwrap();
    let labels: Vec<i64> = (0..b).map(|i| (i * 7 % classes) as i64).collect();
    let y = Tensor::from_slice(&labels, &[b], &device).unwrap();
    Setup { device, model, opt: Sgd::new(SGD), batch: Batch { x, y, load_ns: 0 } }
}

/// Matmul FLOPs of one step (forward, and two products per layer backward but
/// the first layer's input gradient, which is skipped).
fn step_flops(b: usize, dims: &[usize]) -> u64 {
    let layers: Vec<u64> = dims.windows(2).map(|w| 2 * (b * w[0] * w[1]) as u64).collect();
    layers.iter().sum::<u64>() * 3 - layers[0]
}

/// The same step as plain kernel calls on preallocated buffers.
struct Raw {
    b: usize,
    dims: Vec<usize>,
    x: Vec<f32>,
    labels: Vec<i64>,
    w: Vec<Vec<f32>>,
    bias: Vec<Vec<f32>>,
    mw: Vec<Vec<f32>>,
    mb: Vec<Vec<f32>>,
    gw: Vec<Vec<f32>>,
    gb: Vec<Vec<f32>>,
    /// Pre-bias products and activations per layer (`h[i]` is layer i's output).
    pre: Vec<Vec<f32>>,
    h: Vec<Vec<f32>>,
    /// Gradient buffers per layer output.
    g: Vec<Vec<f32>>,
    g2: Vec<Vec<f32>>,
    step: u64,
}

impl Raw {
    fn new(setup: &Setup) -> Raw {
        let (b, dims) = problem();
        let params: Vec<Vec<f32>> =
            setup.model.parameters().iter().map(|p| p.data().to_vec::<f32>().unwrap()).collect();
        let (w, bias): (Vec<_>, Vec<_>) = params.chunks(2).map(|c| (c[0].clone(), c[1].clone())).unzip();
        let zeros_like = |v: &[Vec<f32>]| v.iter().map(|x| vec![0.0f32; x.len()]).collect::<Vec<_>>();
        let outs: Vec<Vec<f32>> = dims[1..].iter().map(|&d| vec![0.0f32; b * d]).collect();
        Raw {
            b,
            x: setup.batch.x.to_vec().unwrap(),
            labels: setup.batch.y.to_vec().unwrap(),
            mw: zeros_like(&w),
            mb: zeros_like(&bias),
            gw: zeros_like(&w),
            gb: zeros_like(&bias),
            pre: outs.clone(),
            h: outs.clone(),
            g: outs.clone(),
            g2: outs,
            w,
            bias,
            dims,
            step: 0,
        }
    }

    fn mm(shape: MatmulShape, a: &[f32], b: &[f32], c: &mut [f32]) {
        k::matmul(MatmulAlgo::heuristic(&shape), shape, a, b, c, &mut []).unwrap();
    }

    fn step(&mut self) -> f32 {
        let (b, n) = (self.b, self.dims.len() - 1);
        // Forward.
        for i in 0..n {
            let (fin, fout) = (self.dims[i], self.dims[i + 1]);
            let input = if i == 0 { &self.x } else { &self.h[i - 1] };
            Raw::mm(MatmulShape::new(b, fout, fin).transposed(false, true), input, &self.w[i], &mut self.pre[i]);
            if i + 1 < n {
                k::add_bias(&self.pre[i], &self.bias[i], b, fout, 1, &mut self.g2[i]).unwrap();
                k::relu(&self.g2[i], &mut self.h[i]).unwrap();
            } else {
                k::add_bias(&self.pre[i], &self.bias[i], b, fout, 1, &mut self.h[i]).unwrap();
            }
        }
        let classes = self.dims[n];
        let loss = k::cross_entropy(&self.h[n - 1], &self.labels, b, classes).unwrap();
        k::cross_entropy_backward(&self.h[n - 1], &self.labels, b, classes, 1.0, &mut self.g[n - 1]).unwrap();
        // Backward.
        for i in (0..n).rev() {
            let (fin, fout) = (self.dims[i], self.dims[i + 1]);
            let input = if i == 0 { &self.x } else { &self.h[i - 1] };
            Raw::mm(MatmulShape::new(fout, fin, b).transposed(true, false), &self.g[i], input, &mut self.gw[i]);
            k::bias_grad(&self.g[i], b, fout, 1, &mut self.gb[i]).unwrap();
            if i > 0 {
                Raw::mm(MatmulShape::new(b, fin, fout), &self.g[i], &self.w[i], &mut self.g2[i - 1]);
                k::relu_backward(&self.h[i - 1], &self.g2[i - 1], &mut self.g[i - 1]).unwrap();
            }
        }
        // SGD with momentum.
        self.step += 1;
        for i in 0..n {
            k::sgd_step(&SGD, self.step, &mut self.w[i], &self.gw[i], &mut self.mw[i]).unwrap();
            k::sgd_step(&SGD, self.step, &mut self.bias[i], &self.gb[i], &mut self.mb[i]).unwrap();
        }
        loss
    }
}

/// Kernel time and calls per kernel name (this bench's one thread).
#[derive(Default)]
struct Breakdown(Mutex<HashMap<&'static str, (u64, u64)>>);

impl Subscriber for Breakdown {
    fn on_event(&self, event: &Event) {
        if let Event::Kernel(k) = event {
            let mut m = self.0.lock().unwrap();
            let e = m.entry(k.name).or_default();
            e.0 += k.duration_ns;
            e.1 += 1;
        }
    }
}

/// The raw sequence computes the same step: same loss, same updated parameters.
fn check_raw_matches_framework() {
    let mut s = setup(61);
    let mut raw = Raw::new(&s);
    let mut trainer = Trainer::new(LossFn::CrossEntropy);
    for _ in 0..2 {
        let rec = trainer.step(&mut s.model, &mut s.opt, &s.batch).unwrap();
        let raw_loss = raw.step();
        assert!((rec.loss - f64::from(raw_loss)).abs() <= 1e-5 * rec.loss.abs(), "{} vs {raw_loss}", rec.loss);
    }
    let params = s.model.parameters();
    for (i, p) in params.iter().enumerate() {
        let want = if i % 2 == 0 { &raw.w[i / 2] } else { &raw.bias[i / 2] };
        let got = p.data().to_vec::<f32>().unwrap();
        let err = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(err <= 1e-5, "parameter {i} differs by {err}");
    }
}

fn train_step(c: &mut Criterion) {
    let (b, dims) = problem();
    let id = format!("mlp_{}_b{b}_f32", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join("x"));
    check_raw_matches_framework();
    let mut group = c.benchmark_group("train_step");
    group.sample_size(20).warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Elements(step_flops(b, &dims)));

    let mut s = setup(60);
    let mut plain = Trainer::new(LossFn::CrossEntropy);
    plain.measure_kernels = false;
    group.bench_function(format!("{id}/framework"), |bench| {
        bench.iter(|| black_box(plain.step(&mut s.model, &mut s.opt, &s.batch).unwrap()))
    });
    let mut clocked = Trainer::new(LossFn::CrossEntropy);
    group.bench_function(format!("{id}/framework_kernel_clock"), |bench| {
        bench.iter(|| black_box(clocked.step(&mut s.model, &mut s.opt, &s.batch).unwrap()))
    });
    let mut raw = Raw::new(&s);
    group.bench_function(format!("{id}/raw_kernels"), |bench| bench.iter(|| black_box(raw.step())));
    group.finish();

    if !bench_mode() {
        return;
    }
    // (1) From the step's kernel events.
    let steps = 30;
    let breakdown = Arc::new(Breakdown::default());
    let sub = s.device.allocator().hooks().subscribe(breakdown.clone());
    let records: Vec<_> = (0..steps).map(|_| clocked.step(&mut s.model, &mut s.opt, &s.batch).unwrap()).collect();
    s.device.allocator().hooks().unsubscribe(sub);
    let total_step: u64 = records.iter().map(|r| r.step_ns).sum();
    let total_kernel: u64 = records.iter().map(|r| r.kernel_ns).sum();
    let share = 1.0 - total_kernel as f64 / total_step as f64;
    println!(
        "\ntrain_step {id}: {steps} steps, median {:.2} ms, kernels {:.2} ms/step ({} kernel calls/step); \
         outside kernels {:.2}% (target < 10%)",
        ms(median(records.iter().map(|r| r.step_ns).collect())),
        ms(total_kernel / steps as u64),
        records[0].kernels,
        100.0 * share
    );
    let mut rows: Vec<_> = breakdown.0.lock().unwrap().iter().map(|(n, &(t, c))| (*n, t, c)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (name, t, calls) in rows {
        println!(
            "  {name:<32} {:>3} calls/step {:>8.3} ms/step {:>5.1}% of the step",
            calls / steps as u64,
            ms(t / steps as u64),
            100.0 * t as f64 / total_step as f64
        );
    }
    // (2) Against the raw kernel sequence, interleaved rounds.
    let rounds = 30;
    let (mut fw, mut rw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        black_box(plain.step(&mut s.model, &mut s.opt, &s.batch).unwrap());
        fw.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        black_box(raw.step());
        rw.push(t.elapsed().as_nanos() as u64);
    }
    let (fw, rw) = (median(fw), median(rw));
    println!(
        "  paired ({rounds} rounds, medians): framework {:.2} ms, raw kernels {:.2} ms, framework overhead {:.2}% \
         (1 − raw/framework); {:.1} GFLOP/s",
        ms(fw),
        ms(rw),
        100.0 * (1.0 - rw as f64 / fw as f64),
        step_flops(b, &dims) as f64 / fw as f64
    );
    println!(
        "  memory (allocator): peak allocated {}, parameters {}",
        vramlab_engine::alloc::format_size(s.device.memory_stats().max_memory_allocated()),
        vramlab_engine::alloc::format_size(s.model.parameter_bytes())
    );
}

criterion_group!(benches, train_step);
criterion_main!(benches);
