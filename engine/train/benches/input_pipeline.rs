//! The DataLoader's performance items (issue 15), on a private host device:
//!
//! - `loader_batch_b256`: one batch of 256 784-float samples from a
//!   0-worker, no-transform loader (gather, staging, copy to the device,
//!   `data_wait` phase) against `mlp_step_b256`, one training step of the
//!   b256 784→1024→1024→10 MLP. Target: the loader under 5 % of the step.
//! - `input_bound/workers_{0,2}`: an epoch of an input-bound loop — each batch
//!   loaded with an [`Augment`] transform calibrated to cost about as much as
//!   the step, then the step — with 0 and 2 workers. Target: 2 workers give at
//!   least 1.6× the 0-worker samples/s on a 2-core machine.
//!
//! Besides criterion's estimates, a bench run prints both ratios measured in
//! interleaved rounds (robust to a machine whose load drifts), and the load
//! average. `cargo test --benches` runs every case once on a tiny problem.
//!
//! Run: `cargo bench -p vramlab-train --bench input_pipeline` (about two minutes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::GIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::Hooks;
use vramlab_train::{
    self as nn, Augment, DataLoader, Dataset, LoaderConfig, LossFn, Sequential, Sgd, SgdConfig, Trainer,
};

/// Whether this is a real `cargo bench` run (criterion gets `--bench`).
fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// (batch, layer sizes, batches per input-bound epoch).
fn problem() -> (usize, Vec<usize>, usize) {
    if bench_mode() { (256, vec![784, 1024, 1024, 10], 8) } else { (8, vec![16, 32, 32, 4], 2) }
}

const SGD: SgdConfig = SgdConfig { lr: 0.01, momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: false };

struct Setup {
    device: Device,
    model: Sequential,
    opt: Sgd,
    trainer: Trainer,
    data: Arc<Dataset>,
}

fn setup(index: u32) -> Setup {
    let (b, dims, batches) = problem();
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index };
    let device = Device::host(id, 4 * GIB, AllocatorConfig::default(), &hooks).expect("a host device");
    let model = nn::mlp(&dims, 1, &device).unwrap();
    let classes = *dims.last().unwrap();
    let data = Dataset::classification(b * batches, dims[0], classes, 1.0, 3).unwrap();
    Setup { device, model, opt: Sgd::new(SGD), trainer: Trainer::new(LossFn::CrossEntropy), data: Arc::new(data) }
}

/// One epoch: load each batch, step on it. Returns the wall time.
fn epoch(s: &mut Setup, loader: &DataLoader<'_>, e: u64) -> Duration {
    let t = Instant::now();
    for batch in loader.epoch(e, &s.device) {
        let batch = batch.unwrap();
        s.trainer.step(&mut s.model, &mut s.opt, &batch).unwrap();
    }
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Loading alone: one 0-worker epoch of `loader`, no steps.
fn load_only(s: &Setup, loader: &DataLoader<'_>) -> Duration {
    let t = Instant::now();
    for batch in loader.epoch(0, &s.device) {
        batch.unwrap();
    }
    t.elapsed()
}

/// `Augment` rounds whose cost per batch is about one step (1 to 64).
fn calibrate(s: &mut Setup) -> u32 {
    let (b, ..) = problem();
    let plain = DataLoader::shared(s.data.clone(), LoaderConfig::new(b)).unwrap();
    let steps = median((0..3).map(|e| epoch(s, &plain, e)).collect()).saturating_sub(load_only(s, &plain));
    let one = LoaderConfig { transform: Some(Arc::new(Augment::with_rounds(1))), ..LoaderConfig::new(b) };
    let one = DataLoader::shared(s.data.clone(), one).unwrap();
    let per_round = median((0..3).map(|_| load_only(s, &one)).collect()).max(Duration::from_micros(1));
    ((steps.as_secs_f64() / per_round.as_secs_f64()).round() as u32).clamp(1, 64)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn input_pipeline(c: &mut Criterion) {
    let (b, ..) = problem();
    let mut s = setup(90);

    // Loader overhead: 0 workers, no transform, one batch.
    let plain = DataLoader::shared(s.data.clone(), LoaderConfig::new(b)).unwrap();
    let mut g = c.benchmark_group("input_pipeline");
    g.sample_size(10).measurement_time(Duration::from_secs(if bench_mode() { 8 } else { 1 }));
    g.bench_function("loader_batch_b256", |bench| {
        let mut it = plain.epoch(0, &s.device);
        bench.iter(|| match it.next() {
            Some(batch) => batch.unwrap(),
            None => {
                it = plain.epoch(0, &s.device);
                it.next().unwrap().unwrap()
            }
        })
    });
    let batch = plain.epoch(0, &s.device).next().unwrap().unwrap();
    g.bench_function("mlp_step_b256", |bench| bench.iter(|| s.trainer.step(&mut s.model, &mut s.opt, &batch).unwrap()));

    // Input-bound epochs.
    let rounds = calibrate(&mut s);
    let loader = |workers| {
        let cfg = LoaderConfig {
            num_workers: workers,
            transform: Some(Arc::new(Augment::with_rounds(rounds))),
            ..LoaderConfig::new(b)
        };
        DataLoader::shared(s.data.clone(), cfg).unwrap()
    };
    let (l0, l2) = (loader(0), loader(2));
    for (name, l) in [("input_bound/workers_0", &l0), ("input_bound/workers_2", &l2)] {
        g.bench_function(name, |bench| bench.iter(|| epoch(&mut s, l, 0)));
    }
    g.finish();
    println!("input_pipeline: {rounds} Augment rounds per sample");

    // Interleaved rounds: the ratios criterion's separate runs estimate.
    let n = if bench_mode() { 9 } else { 1 };
    let (mut loads, mut steps, mut e0, mut e2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..n {
        let t = Instant::now();
        let mut count = 0u32;
        for batch in plain.epoch(r, &s.device) {
            batch.unwrap();
            count += 1;
        }
        loads.push(t.elapsed() / count);
        let t = Instant::now();
        s.trainer.step(&mut s.model, &mut s.opt, &batch).unwrap();
        steps.push(t.elapsed());
        e0.push(epoch(&mut s, &l0, r));
        e2.push(epoch(&mut s, &l2, r));
    }
    let (load, step, e0, e2) = (median(loads), median(steps), median(e0), median(e2));
    println!(
        "input_pipeline: loader batch {:.3} ms vs MLP step {:.2} ms: loader overhead {:.2} % of a step (target < 5 %)",
        load.as_secs_f64() * 1e3,
        step.as_secs_f64() * 1e3,
        100.0 * load.as_secs_f64() / step.as_secs_f64()
    );
    println!(
        "input_pipeline: input-bound epoch ({rounds} Augment rounds ≈ one step per batch): 0 workers {:.1} ms, 2 \
         workers {:.1} ms: 2 workers give {:.2}x the samples/s (target ≥ 1.6x); load average {}",
        e0.as_secs_f64() * 1e3,
        e2.as_secs_f64() * 1e3,
        e0.as_secs_f64() / e2.as_secs_f64(),
        loadavg()
    );
}

criterion_group!(benches, input_pipeline);
criterion_main!(benches);
