//! Recording overhead on a CPU training step (issue 6: "recording overhead on a
//! CPU training step of the engine ≤ 2%").
//!
//! The step is the engine's `train_step` bench's: the guides' MLP, batch 256,
//! 784→1024→1024→10, float32, cross-entropy, SGD with momentum 0.9, through
//! `nn::Trainer::step` (`zero_grad`, forward, loss, backward, optimizer step)
//! on a private host device with its own `Hooks`, so nothing else listens. The
//! trainer's kernel clock is off (`measure_kernels = false`): it would
//! subscribe to the hub itself, and the baseline must have no subscriber.
//!
//! Variants, all on the same device, model and batch:
//! - `no_subscriber`: nobody subscribed (each event site costs one relaxed
//!   atomic load and builds no event);
//! - `profiler`: a `Profiler` recording the hub, without sampling;
//! - `profiler_sampling`: the same with default sampling (every 50 ms; on this
//!   CPU-only path that is the process's resident memory from /proc, and an
//!   NVML attempt at start that fails without the driver).
//!
//! Bounded memory: a recording is stopped and a new one started every
//! [`RECORDING_STEPS`] steps in the criterion cases, and around every block in
//! the interleaved rounds. Starting (subscribe, sampler thread spawn) and
//! stopping (unsubscribe, sampler join, the whole analysis into a `Profile`)
//! happen outside the timed region: they are per-recording costs, not per-step
//! ones. What is timed is the step with the recorder subscribed, including its
//! chunk allocations and name interning, which a fresh recording pays again.
//!
//! A bench run prints, after criterion's three cases:
//! 1. interleaved rounds: each round runs a block of [`BLOCK_STEPS`] steps of
//!    every variant, plus a second `no_subscriber` block (an A/A control that
//!    shows the noise floor), in an order that rotates from round to round;
//!    the overhead is the median over rounds of the per-round ratio
//!    `recording block / mean of the round's two baseline blocks − 1`, with a
//!    bootstrap 95% interval of that median — for the steps' wall time, and
//!    for the CPU time of the process's threads over each block (less
//!    disturbed by other processes; it includes the sampler thread's work);
//! 2. the medians of the individual step times measured inside criterion's
//!    cases (run one after the other, so a shared machine's drifts show there:
//!    trust the interleaved figures over these);
//! 3. the recorder's own work per step, without the step's noise: one step's
//!    event batches captured, then replayed into a `Recorder`;
//! 4. events, records and bytes per step, from the recordings' `Profile`s,
//!    and what starting and stopping a recording costs (untimed above).
//!
//! `cargo test --benches` runs every case once on a tiny MLP.
//!
//! Run: `cargo bench -p vramlab-profiler --bench train_step_overhead`
//! (under a minute once built).

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::GIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{Event, Hooks, Subscriber, Tag};
use vramlab_engine::tensor::{DType, Tensor, tag_scope};
use vramlab_profiler::record::{Record, Recorder};
use vramlab_profiler::{DeviceInfo, Profile, Profiler, ProfilerConfig};
use vramlab_train::{self as nn, Batch, LossFn, Sequential, Sgd, SgdConfig, Trainer};

/// Steps per recording in the criterion cases: then the recording is stopped
/// (untimed) and a new one started, so memory stays bounded however many
/// iterations criterion asks for.
const RECORDING_STEPS: u64 = 32;

/// Steps per variant per interleaved round.
const BLOCK_STEPS: usize = 8;

/// Whether this is a real `cargo bench` run (criterion gets `--bench`).
fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// (batch, layer sizes).
fn problem() -> (usize, Vec<usize>) {
    if bench_mode() { (256, vec![784, 1024, 1024, 10]) } else { (8, vec![16, 32, 32, 4]) }
}

/// Interleaved rounds (the first is a warm-up and is not counted).
fn rounds() -> usize {
    if bench_mode() { 61 } else { 2 }
}

const SGD: SgdConfig = SgdConfig { lr: 0.01, momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: false };

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    NoSubscriber,
    Profiler,
    ProfilerSampling,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::NoSubscriber, Variant::Profiler, Variant::ProfilerSampling];

    fn name(self) -> &'static str {
        match self {
            Variant::NoSubscriber => "no_subscriber",
            Variant::Profiler => "profiler",
            Variant::ProfilerSampling => "profiler_sampling",
        }
    }
}

/// What the recordings of one variant held, summed over recordings.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    recordings: u64,
    steps: u64,
    /// Allocator, kernel, copy and phase events.
    events: u64,
    kernels: u64,
    allocator_events: u64,
    records: u64,
    /// Heap bytes of the record storage at the end of each recording.
    heap_bytes: u64,
    host_samples: u64,
    recorded_ns: u64,
    /// Wall time of `Profiler::start` and of `stop` (unsubscribe, sampler
    /// join, analysis), summed; untimed in the step figures.
    start_ns: u64,
    stop_ns: u64,
}

/// The training step and, for the recording variants, the running recording.
struct Bench {
    device: Device,
    hub: Arc<Hooks>,
    model: Sequential,
    opt: Sgd,
    batch: Batch,
    trainer: Trainer,
    recording: Option<(Variant, Profiler, u64)>,
    totals: [Totals; 3],
}

impl Bench {
    fn new(index: u32) -> Bench {
        let (b, dims) = problem();
        let hub = Hooks::new();
        let id = DeviceId { kind: DeviceKind::Cpu, index };
        let device = Device::host(id, 4 * GIB, AllocatorConfig::default(), &hub).expect("a host device");
        let model = nn::mlp(&dims, 1, &device).unwrap();
        let classes = *dims.last().unwrap();
        let (x, y) = {
            let _t = tag_scope(Tag::Input);
            let x = Tensor::randn(&[b, dims[0]], DType::F32, 2, &device).unwrap();
            let labels: Vec<i64> = (0..b).map(|i| (i * 7 % classes) as i64).collect();
            (x, Tensor::from_slice(&labels, &[b], &device).unwrap())
        };
        let mut trainer = Trainer::new(LossFn::CrossEntropy);
        trainer.measure_kernels = false;
        Bench {
            device,
            hub,
            model,
            opt: Sgd::new(SGD),
            batch: Batch { x, y, load_ns: 0 },
            trainer,
            recording: None,
            totals: [Totals::default(); 3],
        }
    }

    /// One training step, timed.
    fn step(&mut self) -> Duration {
        let t = Instant::now();
        black_box(self.trainer.step(&mut self.model, &mut self.opt, &self.batch).unwrap());
        let elapsed = t.elapsed();
        if let Some((_, _, steps)) = &mut self.recording {
            *steps += 1;
        }
        elapsed
    }

    fn config(&self, variant: Variant) -> ProfilerConfig {
        let config = ProfilerConfig::on(self.hub.clone()).device(DeviceInfo::cpu(self.device.id().event_index()));
        match variant {
            Variant::ProfilerSampling => config, // default sampling: 50 ms
            _ => config.without_sampling(),
        }
    }

    /// Makes `variant`'s state current: stops a recording of another variant
    /// (or one that has reached `max_steps`), starts one if `variant` records.
    fn prepare(&mut self, variant: Variant, max_steps: u64) {
        let keep = matches!(&self.recording, Some((v, _, steps)) if *v == variant && *steps < max_steps);
        if !keep {
            self.stop();
        }
        if variant != Variant::NoSubscriber && self.recording.is_none() {
            let t = Instant::now();
            let profiler = Profiler::start(self.config(variant)).expect("profiler starts");
            self.totals[variant as usize].start_ns += t.elapsed().as_nanos() as u64;
            self.recording = Some((variant, profiler, 0));
        }
        assert_eq!(self.hub.is_active(), variant != Variant::NoSubscriber);
    }

    /// Stops the running recording, if any, and counts what it held.
    fn stop(&mut self) {
        let Some((variant, profiler, steps)) = self.recording.take() else { return };
        let heap_bytes = profiler.recording_bytes() as u64;
        let t0 = Instant::now();
        let profile = profiler.stop();
        let t = &mut self.totals[variant as usize];
        t.stop_ns += t0.elapsed().as_nanos() as u64;
        t.recordings += 1;
        t.steps += steps;
        t.heap_bytes += heap_bytes;
        add_profile(t, &profile);
    }
}

fn add_profile(t: &mut Totals, profile: &Profile) {
    for d in &profile.devices {
        t.allocator_events += d.counts.allocator_events;
        t.kernels += d.counts.kernels;
        t.events += d.counts.allocator_events + d.counts.kernels + d.counts.copies;
    }
    t.events += 2 * profile.phases.len() as u64;
    t.records += profile.records() as u64;
    t.host_samples += profile.samples.host_samples.len() as u64;
    t.recorded_ns += profile.duration_ns();
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A bootstrap 95% interval of the median of `v` (2000 resamples, fixed seed).
fn bootstrap_median_ci(v: &[f64]) -> (f64, f64) {
    let mut rng = vramlab_rng::Rng::new(0xb007_5eed);
    let mut medians: Vec<f64> = (0..2000)
        .map(|_| {
            let sample: Vec<f64> = (0..v.len()).map(|_| v[rng.below(v.len())]).collect();
            median(&sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (medians[50], medians[1949])
}

fn ms(d: f64) -> f64 {
    d * 1e3
}

fn pct(r: f64) -> f64 {
    100.0 * r
}

/// CPU time of the process's live threads, ns: the sum of the first field of
/// `/proc/self/task/*/schedstat` (time on a CPU, ns). Threads that ended are
/// not counted, so it is read while the sampler thread of a recording still
/// runs. `None` where /proc has no schedstat.
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn train_step_overhead(c: &mut Criterion) {
    let (b, dims) = problem();
    let id = format!("mlp_{}_b{b}_f32", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join("x"));
    let mut bench = Bench::new(70);
    // Warm the allocator's cache and the kernels.
    for _ in 0..3 {
        bench.step();
    }

    // Criterion's three cases, one after the other; every step also kept for
    // the medians printed below.
    let mut step_times: [Vec<f64>; 3] = Default::default();
    let mut group = c.benchmark_group("train_step_overhead");
    group.sample_size(20).warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(6));
    group.sampling_mode(SamplingMode::Flat);
    for variant in Variant::ALL {
        let times = &mut step_times[variant as usize];
        group.bench_function(format!("{id}/{}", variant.name()), |bencher| {
            bencher.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    bench.prepare(variant, RECORDING_STEPS);
                    let t = bench.step();
                    times.push(t.as_secs_f64());
                    total += t;
                }
                total
            })
        });
        bench.stop();
    }
    group.finish();

    // Interleaved rounds: one block per variant and a second baseline block,
    // the order rotating; a fresh recording for every recording block. Wall
    // time of the steps, and CPU time of the process's threads over the block
    // (less disturbed by other processes on a shared machine; it includes the
    // sampler thread's work).
    let order = [Variant::NoSubscriber, Variant::Profiler, Variant::NoSubscriber, Variant::ProfilerSampling];
    let mut wall: Vec<[f64; 4]> = Vec::new();
    let mut cpu: Vec<[f64; 4]> = Vec::new();
    for round in 0..rounds() {
        let (mut w, mut c) = ([0.0; 4], [0.0; 4]);
        for k in 0..order.len() {
            let slot = (k + round) % order.len();
            bench.prepare(order[slot], 0);
            let cpu0 = process_cpu_ns();
            let total: Duration = (0..BLOCK_STEPS).map(|_| bench.step()).sum();
            let cpu1 = process_cpu_ns();
            bench.stop();
            w[slot] = total.as_secs_f64() / BLOCK_STEPS as f64;
            c[slot] = cpu0.zip(cpu1).map_or(f64::NAN, |(a, b)| (b - a) as f64 / 1e9 / BLOCK_STEPS as f64);
        }
        if round > 0 {
            wall.push(w);
            cpu.push(c);
        }
    }

    let replay_ns = replay_cost_ns(&mut bench);

    if !bench_mode() {
        assert!(bench.totals[Variant::Profiler as usize].events > 0, "the recorder saw the step's events");
        assert!(replay_ns > 0.0);
        return;
    }

    println!("\ntrain_step_overhead {id} (trainer kernel clock off; private host device and hub)");
    println!(
        "interleaved: {} rounds × {{no_subscriber, profiler, no_subscriber', profiler_sampling}} × {BLOCK_STEPS} steps, \
         order rotating, a fresh recording per block",
        wall.len()
    );
    report_rounds("wall", &wall);
    if cpu.iter().all(|c| c.iter().all(|x| x.is_finite())) {
        report_rounds("cpu ", &cpu);
    }

    let crit: Vec<f64> = step_times.iter().map(|t| median(t)).collect();
    println!(
        "criterion cases (one after the other), median of {} / {} / {} steps: no_subscriber {:.3} ms, \
         profiler {:.3} ms ({:+.2}%), profiler_sampling {:.3} ms ({:+.2}%)",
        step_times[0].len(),
        step_times[1].len(),
        step_times[2].len(),
        ms(crit[0]),
        ms(crit[1]),
        pct(crit[1] / crit[0] - 1.0),
        ms(crit[2]),
        pct(crit[2] / crit[0] - 1.0)
    );
    let base = median(&wall.iter().map(|w| w[0]).collect::<Vec<_>>());
    println!(
        "recorder alone (one step's delivered event batches replayed into a Recorder, fresh every \
         {RECORDING_STEPS} steps): {:.2} µs/step = {:.3}% of the no_subscriber median step",
        replay_ns / 1e3,
        pct(replay_ns / 1e9 / base)
    );

    for variant in [Variant::Profiler, Variant::ProfilerSampling] {
        let t = bench.totals[variant as usize];
        let steps = t.steps.max(1) as f64;
        println!(
            "{}: {} recordings, {} steps: {:.1} events/step ({:.1} allocator, {:.1} kernel), {:.1} records/step, \
             {:.0} bytes/step of records ({} bytes each); storage heap {:.2} MiB per recording (2 MiB chunks); \
             {} host samples ({:.1}/s of recording); per recording (untimed): start {:.0} µs, stop {:.0} µs",
            variant.name(),
            t.recordings,
            t.steps,
            t.events as f64 / steps,
            t.allocator_events as f64 / steps,
            t.kernels as f64 / steps,
            t.records as f64 / steps,
            t.records as f64 * std::mem::size_of::<Record>() as f64 / steps,
            std::mem::size_of::<Record>(),
            t.heap_bytes as f64 / t.recordings.max(1) as f64 / (1 << 20) as f64,
            t.host_samples,
            t.host_samples as f64 / (t.recorded_ns as f64 / 1e9),
            t.start_ns as f64 / t.recordings.max(1) as f64 / 1e3,
            t.stop_ns as f64 / t.recordings.max(1) as f64 / 1e3
        );
    }
}

/// Prints medians and overheads of interleaved rounds: columns no_subscriber,
/// profiler, no_subscriber', profiler_sampling (seconds per step).
fn report_rounds(what: &str, rounds: &[[f64; 4]]) {
    let col = |i: usize| rounds.iter().map(|b| b[i]).collect::<Vec<f64>>();
    let (base, prof, base2, sampled) = (col(0), col(1), col(2), col(3));
    println!(
        "  {what} median per step: no_subscriber {:.3} ms, no_subscriber' {:.3} ms, profiler {:.3} ms, \
         profiler_sampling {:.3} ms",
        ms(median(&base)),
        ms(median(&base2)),
        ms(median(&prof)),
        ms(median(&sampled))
    );
    // Each recording block against the mean of its round's two baseline blocks;
    // the control compares the two baseline blocks.
    let ratio = |x: &[f64]| -> Vec<f64> {
        x.iter().zip(base.iter().zip(&base2)).map(|(x, (a, a2))| x / ((a + a2) / 2.0) - 1.0).collect()
    };
    let control: Vec<f64> = base2.iter().zip(&base).map(|(a2, a)| a2 / a - 1.0).collect();
    let pooled = median(&[base.as_slice(), base2.as_slice()].concat());
    let rows = [
        ("profiler", ratio(&prof), median(&prof) / pooled - 1.0),
        ("profiler_sampling", ratio(&sampled), median(&sampled) / pooled - 1.0),
        ("A/A control", control, median(&base2) / median(&base) - 1.0),
    ];
    for (name, r, of_medians) in rows {
        let (lo, hi) = bootstrap_median_ci(&r);
        println!(
            "  {what} overhead {name:<17}: median of per-round ratios {:+.2}% (bootstrap 95% CI {:+.2}% … {:+.2}%); \
             ratio of medians {:+.2}%",
            pct(median(&r)),
            pct(lo),
            pct(hi),
            pct(of_medians)
        );
    }
}

/// One step's event batches, as the hub delivered them.
#[derive(Default)]
struct Capture(Mutex<Vec<Vec<Event>>>);

impl Subscriber for Capture {
    fn on_event(&self, event: &Event) {
        self.0.lock().unwrap().push(vec![event.clone()]);
    }

    fn on_events(&self, events: &[Event]) {
        self.0.lock().unwrap().push(events.to_vec());
    }
}

/// The recorder's own work per step, ns: one step's delivered batches are
/// captured, then replayed into a [`Recorder`] (a new one every
/// [`RECORDING_STEPS`] steps, untimed) — without the step's noise, and without
/// what the engine does to build and deliver the events.
fn replay_cost_ns(bench: &mut Bench) -> f64 {
    let capture = Arc::new(Capture::default());
    let id = bench.hub.subscribe(capture.clone());
    bench.step();
    bench.hub.unsubscribe(id);
    let batches = std::mem::take(&mut *capture.0.lock().unwrap());
    let steps = if bench_mode() { 20 * RECORDING_STEPS } else { 2 };
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let mut total = Duration::ZERO;
        let mut done = 0;
        while done < steps {
            let recorder = Recorder::new();
            let n = (steps - done).min(RECORDING_STEPS);
            let t = Instant::now();
            for _ in 0..n {
                for batch in &batches {
                    recorder.on_events(black_box(batch));
                }
            }
            total += t.elapsed();
            done += n;
        }
        best = best.min(total.as_nanos() as f64 / steps as f64);
    }
    best
}

criterion_group!(benches, train_step_overhead);
criterion_main!(benches);
