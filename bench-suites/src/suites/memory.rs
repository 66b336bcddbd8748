//! `memory`: the guides' memory advice, measured through the caching allocator.
//!
//! - **no_grad** — the peak of a training step against an evaluation of the
//!   same model on the same batch, with and without `no_grad`
//!   (`train_step_peak`, `eval_without_no_grad_peak`, `eval_no_grad_peak`;
//!   each reports `peak_allocated_bytes`, PyTorch's `max_memory_allocated`).
//! - **batch size** — a sweep on a CPU device of the run's capacity (`--capacity`,
//!   default 4 GiB; 256 MiB at most under `--quick`): the batch doubles until a
//!   training step runs out of memory, then bisection narrows the boundary
//!   (its first probe where the measured bytes per sample put it). It reports
//!   the largest batch that fits, the batch that does not, and the
//!   out-of-memory error's numbers.
//! - **empty_cache** — allocated and reserved after a step, after freeing
//!   everything, and after `empty_cache()`.
//! - **fragmentation** — tensors that fill a small device, every other one
//!   freed, then a request twice their size: with PyTorch's default settings it
//!   runs out of memory while much more than it sits reserved but unallocated;
//!   the same sequence under `expandable_segments:True` and under
//!   `max_split_size_mb:20`.
//!
//! Every case runs on its own private CPU device (`cpu:50` to `cpu:57`) with
//! its own allocator, on the run's hub so the runner profiles it; that keeps
//! each case's peaks its own and lets the sweep and the fragmentation case run
//! out of memory at a known capacity, on any machine.

mod charts;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::consts::{GIB, MIB};
use vramlab_engine::alloc::{AllocError, AllocatorConfig, OutOfMemoryError, format_size, physical_memory_bytes};
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{DType, Tensor, TensorError, tag_scope};
use vramlab_rng::Rng;
use vramlab_train::{self as nn, Module, NnError, Optimizer, Sgd};

use super::common::{case, metric, missing};
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `memory` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemorySuite;

/// Private device indices, one per case.
const TRAIN_DEVICE: u32 = 50;
const EVAL_GRAD_DEVICE: u32 = 51;
const EVAL_NO_GRAD_DEVICE: u32 = 52;
const SWEEP_DEVICE: u32 = 53;
const EMPTY_CACHE_DEVICE: u32 = 54;
const FRAGMENTATION_DEVICE: u32 = 55;

/// Capacity of the devices that are not meant to run out (the training,
/// evaluation and empty_cache cases).
const ROOMY: u64 = 4 * GIB;

/// Under `--quick` the sweep's device holds at most this much.
const QUICK_SWEEP_CAPACITY: u64 = 256 * MIB;

/// The allocator settings the fragmentation case compares.
const FRAGMENTATION_CONFIGS: [(&str, &str); 3] = [
    ("default", ""),
    ("expandable_segments", "expandable_segments:True"),
    ("max_split_size_mb", "max_split_size_mb:20"),
];

/// The sizes of everything the suite runs.
#[derive(Debug, Clone, PartialEq)]
struct Sizes {
    /// MLP of the training / evaluation comparison and of the empty_cache case.
    mlp: Vec<usize>,
    batch: usize,
    /// MLP of the batch-size sweep: narrow, so memory (activations) grows with
    /// the batch much faster than compute does and the sweep stays quick.
    sweep_mlp: Vec<usize>,
    sweep_capacity: u64,
    /// The first batch the sweep tries.
    sweep_start: usize,
    /// Bisection stops when the gap between fitting and failing batches is at
    /// most `1/sweep_resolution` of the failing one (or 1).
    sweep_resolution: usize,
    /// Capacity of the fragmentation device.
    fragmentation_capacity: u64,
    /// Size of each tensor of the fragmentation pattern (the request is twice it).
    fragmentation_tensor: u64,
}

impl Sizes {
    fn for_context(ctx: &Context) -> Sizes {
        let quick = ctx.quick();
        let capacity = ctx.options.capacity_bytes.max(16 * MIB);
        Sizes {
            mlp: vec![784, 1024, 1024, 10],
            batch: if quick { 512 } else { 1024 },
            sweep_mlp: vec![64, 64, 64, 64, 64, 10],
            sweep_capacity: if quick { capacity.min(QUICK_SWEEP_CAPACITY) } else { capacity },
            sweep_start: 256,
            sweep_resolution: 32,
            // 200 MiB holds ten 20 MiB segments exactly; 1 GiB is the README's example.
            fragmentation_capacity: if quick { 200 * MIB } else { GIB },
            fragmentation_tensor: 8 * MIB,
        }
    }
}

/// Results the later cases compare with.
#[derive(Debug, Default)]
struct Shared {
    train_peak: Option<u64>,
    eval_grad_peak: Option<u64>,
}

type SharedRef = Arc<Mutex<Shared>>;

impl Suite for MemorySuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn description(&self) -> &'static str {
        "The guides' memory advice: evaluate under no_grad, reduce the batch size on out-of-memory, empty_cache \
         returns cached memory, fragmentation and expandable_segments — measured on capacity-limited CPU devices \
         through the caching allocator"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        cases_for(Sizes::for_context(ctx))
    }

    fn findings(&self, _ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        vec![no_grad_finding(cases), batch_finding(cases), empty_cache_finding(cases), fragmentation_finding(cases)]
    }
}

fn cases_for(sizes: Sizes) -> Vec<Case> {
    let shared: SharedRef = Arc::default();
    let model = label(&sizes.mlp, sizes.batch);
    let mut cases = Vec::new();
    {
        let (s, sh) = (sizes.clone(), shared.clone());
        cases.push(
            Case::new("train_step_peak", move |ctx| train_case(ctx, &s, &sh))
                .param("model", model.clone())
                .param("mode", "train"),
        );
    }
    for grad in [true, false] {
        let (s, sh) = (sizes.clone(), shared.clone());
        let name = if grad { "eval_without_no_grad_peak" } else { "eval_no_grad_peak" };
        cases.push(
            Case::new(name, move |ctx| eval_case(ctx, &s, grad, &sh))
                .param("model", model.clone())
                .param("mode", if grad { "eval_grad_enabled" } else { "eval_no_grad" }),
        );
    }
    {
        let s = sizes.clone();
        cases.push(
            Case::new("batch_size_sweep", move |ctx| sweep_case(ctx, &s))
                .param("model", mlp_label(&sizes.sweep_mlp))
                .param("capacity_bytes", sizes.sweep_capacity)
                .budget(Duration::from_secs(600)),
        );
    }
    {
        let s = sizes.clone();
        cases.push(Case::new("empty_cache", move |ctx| empty_cache_case(ctx, &s)).param("model", model.clone()));
    }
    for (i, (name, config)) in FRAGMENTATION_CONFIGS.into_iter().enumerate() {
        let s = sizes.clone();
        cases.push(
            Case::new(format!("fragmentation/{name}"), move |ctx| fragmentation_case(ctx, &s, i as u32, config))
                .param("allocator_config", if config.is_empty() { "default" } else { config })
                .param("capacity_bytes", sizes.fragmentation_capacity),
        );
    }
    cases
}

/// `mlp 784-1024-1024-10`.
fn mlp_label(dims: &[usize]) -> String {
    let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("mlp {}", dims.join("-"))
}

/// `mlp 784-1024-1024-10 batch 512`.
fn label(dims: &[usize], batch: usize) -> String {
    format!("{} batch {batch}", mlp_label(dims))
}

fn private_device(ctx: &Context, index: u32, capacity: u64, config: AllocatorConfig) -> Result<Device, CaseError> {
    Ok(Device::host(DeviceId { kind: DeviceKind::Cpu, index }, capacity, config, &ctx.hooks)?)
}

/// A batch of `batch` rows for `dims[0]` inputs and `dims.last()` classes,
/// tagged `input`. The rows repeat a block of 256 seeded normal rows, so a huge
/// batch costs a copy, not a random number per element.
fn batch_for(dims: &[usize], batch: usize, seed: u64, device: &Device) -> Result<(Tensor, Tensor), NnError> {
    let width = dims[0];
    let classes = *dims.last().unwrap_or(&10);
    let mut rng = Rng::new(seed);
    let block: Vec<f32> = (0..batch.min(256) * width).map(|_| rng.normal() as f32).collect();
    let values: Vec<f32> = block.iter().copied().cycle().take(batch * width).collect();
    let labels: Vec<i64> = (0..batch).map(|i| (i % classes) as i64).collect();
    let _t = tag_scope(Tag::Input);
    Ok((Tensor::from_slice(&values, &[batch, width], device)?, Tensor::from_slice(&labels, &[batch], device)?))
}

/// One SGD training step: zero_grad(set_to_none), forward, cross-entropy, backward, step.
/// Returns the loss and the bytes the forward left allocated (what it saved for backward).
fn train_step(
    model: &mut nn::Sequential,
    opt: &mut Sgd,
    x: &Tensor,
    y: &Tensor,
    stage: &mut &'static str,
) -> Result<(f64, u64), NnError> {
    let device = x.device().clone();
    *stage = "zero_grad";
    opt.zero_grad(model, true)?;
    let before = device.memory_allocated();
    *stage = "forward";
    let out = model.forward(x)?;
    *stage = "loss";
    let loss = nn::cross_entropy(&out, y)?;
    let held = device.memory_allocated().saturating_sub(before);
    let value = loss.item()?;
    drop(out);
    *stage = "backward";
    loss.backward(model)?;
    *stage = "optimizer step";
    opt.step(model)?;
    Ok((value, held))
}

fn train_case(ctx: &Context, s: &Sizes, shared: &SharedRef) -> Result<CaseOutput, CaseError> {
    let device = private_device(ctx, TRAIN_DEVICE, ROOMY, AllocatorConfig::default())?;
    let mut model = nn::mlp(&s.mlp, ctx.seed(), &device)?;
    let (x, y) = batch_for(&s.mlp, s.batch, ctx.seed(), &device)?;
    let mut opt = Sgd::with_momentum(0.01, 0.9);
    let baseline = device.memory_allocated();
    let mut stage = "";
    // Two steps: the first creates the momentum buffers, the second is a step of
    // a running training loop (buffers present from the start).
    train_step(&mut model, &mut opt, &x, &y, &mut stage)?;
    let (loss, held) = train_step(&mut model, &mut opt, &x, &y, &mut stage)?;
    let stats = device.memory_stats();
    let peak = stats.max_memory_allocated();
    shared.lock().unwrap_or_else(|e| e.into_inner()).train_peak = Some(peak);
    Ok(CaseOutput::default()
        .metric("peak_allocated_bytes", peak as f64)
        .metric("peak_reserved_bytes", stats.max_memory_reserved() as f64)
        .metric("baseline_bytes", baseline as f64)
        .metric("peak_above_baseline_bytes", peak.saturating_sub(baseline) as f64)
        .metric("parameter_bytes", model.parameter_bytes() as f64)
        .metric("input_bytes", (x.allocated_bytes() + y.allocated_bytes()) as f64)
        .metric("gradient_bytes", model.gradient_bytes() as f64)
        .metric("optimizer_state_bytes", opt.state_bytes() as f64)
        .metric("saved_for_backward_bytes", held as f64)
        .metric("loss_nats", loss)
        .note(format!(
            "{}: two SGD steps (momentum 0.9); baseline = parameters + batch; the forward of the second step left {} \
             allocated for backward",
            label(&s.mlp, s.batch),
            format_size(held)
        )))
}

fn eval_case(ctx: &Context, s: &Sizes, grad: bool, shared: &SharedRef) -> Result<CaseOutput, CaseError> {
    let index = if grad { EVAL_GRAD_DEVICE } else { EVAL_NO_GRAD_DEVICE };
    let device = private_device(ctx, index, ROOMY, AllocatorConfig::default())?;
    let mut model = nn::mlp(&s.mlp, ctx.seed(), &device)?;
    let (x, y) = batch_for(&s.mlp, s.batch, ctx.seed(), &device)?;
    let baseline = device.memory_allocated();
    let (loss, held) = {
        let _mode = nn::set_grad_enabled(grad);
        let out = model.forward(&x)?;
        let loss = nn::cross_entropy(&out, &y)?;
        let held = device.memory_allocated().saturating_sub(baseline);
        (loss.item()?, held)
    };
    // A grad-mode forward without a backward keeps its saved tensors until the
    // next forward or until they are cleared (PyTorch frees the graph with the loss).
    model.clear_saved();
    let stats = device.memory_stats();
    let peak = stats.max_memory_allocated();
    let mut out = CaseOutput::default()
        .metric("peak_allocated_bytes", peak as f64)
        .metric("peak_reserved_bytes", stats.max_memory_reserved() as f64)
        .metric("baseline_bytes", baseline as f64)
        .metric("peak_above_baseline_bytes", peak.saturating_sub(baseline) as f64)
        .metric("held_after_forward_bytes", held as f64)
        .metric("loss_nats", loss)
        .note(format!(
            "{}: forward and cross-entropy {}; baseline = parameters + batch",
            label(&s.mlp, s.batch),
            if grad { "with grad mode on (evaluation without no_grad)" } else { "under no_grad" }
        ));
    let mut sh = shared.lock().unwrap_or_else(|e| e.into_inner());
    if grad {
        sh.eval_grad_peak = Some(peak);
    } else {
        out = out.metric("eval_peak_bytes", peak as f64);
        if let Some(train) = sh.train_peak {
            out = out
                .metric("training_peak_bytes", train as f64)
                .metric("training_over_eval_peak_ratio", train as f64 / peak.max(1) as f64);
        }
        if let Some(g) = sh.eval_grad_peak {
            out = out.metric("eval_without_no_grad_peak_bytes", g as f64);
        }
    }
    Ok(out)
}

/// How one batch size went.
#[derive(Debug, Clone)]
enum Trial {
    Fits { peak_allocated: u64, peak_reserved: u64 },
    OutOfMemory { oom: Box<OutOfMemoryError>, stage: &'static str },
}

/// The out-of-memory error inside `e`, if that is what it is.
fn as_oom(e: &NnError) -> Option<&OutOfMemoryError> {
    match e {
        NnError::Tensor(TensorError::Alloc(a)) => a.as_oom(),
        _ => None,
    }
}

/// One training step of the sweep's model at `batch` on an emptied `device`.
fn trial(device: &Device, dims: &[usize], batch: usize, seed: u64) -> Result<Trial, CaseError> {
    device.empty_cache();
    device.allocator().reset_peak_stats();
    let mut stage = "model";
    let result = (|| -> Result<(), NnError> {
        let mut model = nn::mlp(dims, seed, device)?;
        stage = "batch";
        let (x, y) = batch_for(dims, batch, seed, device)?;
        let mut opt = Sgd::with_momentum(0.01, 0.9);
        train_step(&mut model, &mut opt, &x, &y, &mut stage)?;
        Ok(())
    })();
    let stats = device.memory_stats();
    // Everything is dropped: give the segments back, as a new process would start.
    device.empty_cache();
    match result {
        Ok(()) => {
            Ok(Trial::Fits { peak_allocated: stats.max_memory_allocated(), peak_reserved: stats.max_memory_reserved() })
        }
        Err(e) => match as_oom(&e) {
            Some(oom) => Ok(Trial::OutOfMemory { oom: Box::new(oom.clone()), stage }),
            None => Err(e.into()),
        },
    }
}

/// The sweep: doubling until out of memory, then bisection.
#[derive(Debug, Clone, Default)]
struct Sweep {
    /// Every trial in order: (batch, outcome).
    trials: Vec<(usize, Trial)>,
}

impl Sweep {
    fn largest_fit(&self) -> Option<(usize, u64, u64)> {
        self.trials
            .iter()
            .filter_map(|(b, t)| match t {
                Trial::Fits { peak_allocated, peak_reserved } => Some((*b, *peak_allocated, *peak_reserved)),
                Trial::OutOfMemory { .. } => None,
            })
            .max_by_key(|t| t.0)
    }

    fn smallest_oom(&self) -> Option<(usize, &OutOfMemoryError, &'static str)> {
        self.trials
            .iter()
            .filter_map(|(b, t)| match t {
                Trial::OutOfMemory { oom, stage } => Some((*b, oom.as_ref(), *stage)),
                Trial::Fits { .. } => None,
            })
            .min_by_key(|t| t.0)
    }
}

/// Where reserved memory reaches `capacity`, extrapolated from the two largest
/// fitting batches' reserved peaks (memory grows linearly with the batch).
fn estimate_boundary(sweep: &Sweep, capacity: u64) -> Option<usize> {
    let mut fits: Vec<(usize, u64)> = sweep
        .trials
        .iter()
        .filter_map(|(b, t)| match t {
            Trial::Fits { peak_reserved, .. } => Some((*b, *peak_reserved)),
            Trial::OutOfMemory { .. } => None,
        })
        .collect();
    fits.sort_unstable();
    let [.., (b0, r0), (b1, r1)] = fits[..] else { return None };
    if b1 <= b0 || r1 <= r0 {
        return None;
    }
    let per_sample = (r1 - r0) as f64 / (b1 - b0) as f64;
    Some(b1 + (capacity.saturating_sub(r1) as f64 / per_sample) as usize)
}

/// Doubling from `start` until a batch runs out of memory (or `max_batch`),
/// then bisection until the gap is at most `hi / resolution` (or 1).
///
/// With `capacity` known, the bisection first probes the boundary the fitting
/// trials' reserved peaks predict, then a point one resolution step across it,
/// and splits in the middle only if those two did not close the gap: near the
/// capacity every trial fills the device, so each one saved counts.
fn run_sweep(
    start: usize,
    max_batch: usize,
    resolution: usize,
    capacity: Option<u64>,
    mut run: impl FnMut(usize) -> Result<Trial, CaseError>,
) -> Result<Sweep, CaseError> {
    let mut sweep = Sweep::default();
    let mut b = start.max(1);
    let (mut lo, mut hi): (Option<usize>, Option<usize>) = (None, None);
    // Doubling (halving first if even the start does not fit).
    loop {
        let t = run(b)?;
        let fits = matches!(t, Trial::Fits { .. });
        sweep.trials.push((b, t));
        if fits {
            lo = Some(b);
            if hi.is_some() || b >= max_batch {
                break;
            }
            b = (b * 2).min(max_batch);
        } else {
            hi = Some(b);
            if lo.is_some() || b == 1 {
                break;
            }
            b /= 2;
        }
    }
    // Bisection, guided by the estimate for its first two probes.
    if let (Some(mut lo), Some(mut hi)) = (lo, hi) {
        let tolerance = |hi: usize| (hi / resolution.max(1)).max(1);
        let mut guided = capacity.and_then(|c| estimate_boundary(&sweep, c)).map(|e| (e, false));
        while hi - lo > tolerance(hi) {
            let probe = match guided {
                // The estimate itself.
                Some((e, false)) => e.clamp(lo + 1, hi - 1),
                // One step across the boundary from the side the estimate landed on.
                Some((e, true)) if e <= lo => (lo + tolerance(hi)).min(hi - 1),
                Some((_, true)) => hi.saturating_sub(tolerance(hi)).max(lo + 1),
                None => lo + (hi - lo) / 2,
            };
            guided = match guided {
                Some((_, false)) => Some((probe, true)),
                _ => None,
            };
            let t = run(probe)?;
            if matches!(t, Trial::Fits { .. }) {
                lo = probe;
            } else {
                hi = probe;
            }
            sweep.trials.push((probe, t));
        }
    }
    Ok(sweep)
}

fn sweep_case(ctx: &Context, s: &Sizes) -> Result<CaseOutput, CaseError> {
    // The sweep fills the device with real host memory: refuse a capacity the
    // machine cannot back rather than drive it into swap or the OOM killer.
    if let Some(host) = physical_memory_bytes()
        && s.sweep_capacity > host / 4 * 3
    {
        return Ok(CaseOutput::not_available(format!(
            "a {} sweep device needs that much real memory, more than three quarters of this machine's {}; pass a \
             smaller --capacity",
            format_size(s.sweep_capacity),
            format_size(host)
        )));
    }
    let device = private_device(ctx, SWEEP_DEVICE, s.sweep_capacity, AllocatorConfig::default())?;
    // Far beyond any capacity a host can offer for this model (tens of GiB).
    let max_batch = 1 << 26;
    let sweep = run_sweep(s.sweep_start, max_batch, s.sweep_resolution, Some(s.sweep_capacity), |b| {
        trial(&device, &s.sweep_mlp, b, ctx.seed())
    })?;
    let steps: Vec<String> = sweep
        .trials
        .iter()
        .map(|(b, t)| match t {
            Trial::Fits { peak_allocated, .. } => format!("{b} fits (peak {})", format_size(*peak_allocated)),
            Trial::OutOfMemory { oom, stage } => {
                format!("{b} out of memory in {stage} (requested {})", format_size(oom.requested_bytes))
            }
        })
        .collect();
    let mut out = CaseOutput::default()
        .metric("capacity_bytes", s.sweep_capacity as f64)
        .metric("trials_count", sweep.trials.len() as f64)
        .note(format!(
            "{} on a {} CPU device, one SGD training step per batch size, each on an emptied allocator; doubling \
             from {} then bisection to within 1/{} of the failing batch (its first probes where the reserved bytes \
             per sample put the boundary)",
            mlp_label(&s.sweep_mlp),
            format_size(s.sweep_capacity),
            s.sweep_start,
            s.sweep_resolution
        ))
        .note(format!("trials: {}", steps.join("; ")));
    if let Some((b, peak, reserved)) = sweep.largest_fit() {
        out = out
            .metric("largest_fitting_batch_count", b as f64)
            .metric("largest_fitting_peak_allocated_bytes", peak as f64)
            .metric("largest_fitting_peak_reserved_bytes", reserved as f64);
        // Bytes per sample (allocated), between the largest fitting batch and
        // the largest one at most half of it (far apart, so rounding does not matter).
        let fits: Vec<(usize, u64)> = sweep
            .trials
            .iter()
            .filter_map(|(b, t)| match t {
                Trial::Fits { peak_allocated, .. } => Some((*b, *peak_allocated)),
                Trial::OutOfMemory { .. } => None,
            })
            .collect();
        if let Some(&(b0, p0)) = fits.iter().filter(|(x, _)| 2 * x <= b).max_by_key(|(x, _)| *x) {
            out = out.metric("per_sample_bytes", peak.saturating_sub(p0) as f64 / (b - b0) as f64);
        }
    }
    match sweep.smallest_oom() {
        Some((b, oom, stage)) => {
            out = out
                .metric("oom_batch_count", b as f64)
                .metric("oom_requested_bytes", oom.requested_bytes as f64)
                .metric("oom_segment_bytes", oom.segment_bytes as f64)
                .metric("oom_total_bytes", oom.total_bytes as f64)
                .metric("oom_free_bytes", oom.free_bytes as f64)
                .metric("oom_allocated_bytes", oom.allocated_bytes as f64)
                .metric("oom_reserved_unallocated_bytes", oom.reserved_unallocated_bytes as f64)
                .note(format!("batch {b} ran out of memory in {stage}: {oom}"));
        }
        None => out = out.note(format!("no batch up to {max_batch} ran out of memory")),
    }
    Ok(out)
}

fn empty_cache_case(ctx: &Context, s: &Sizes) -> Result<CaseOutput, CaseError> {
    let device = private_device(ctx, EMPTY_CACHE_DEVICE, ROOMY, AllocatorConfig::default())?;
    let mut out = CaseOutput::default();
    let record = |out: CaseOutput, stage: &str| {
        out.metric(&format!("{stage}_allocated_bytes"), device.memory_allocated() as f64)
            .metric(&format!("{stage}_reserved_bytes"), device.memory_reserved() as f64)
    };
    {
        let mut model = nn::mlp(&s.mlp, ctx.seed(), &device)?;
        let (x, y) = batch_for(&s.mlp, s.batch, ctx.seed(), &device)?;
        let mut opt = Sgd::with_momentum(0.01, 0.9);
        let mut stage = "";
        train_step(&mut model, &mut opt, &x, &y, &mut stage)?;
        out = record(out, "after_step");
        // With the model, batch and optimizer alive, only wholly free segments go.
        device.empty_cache();
        out = record(out, "after_step_empty_cache");
        train_step(&mut model, &mut opt, &x, &y, &mut stage)?;
        out = record(out, "after_second_step");
    }
    out = record(out, "after_free");
    device.empty_cache();
    out = record(out, "after_empty_cache");
    let m = |k: &str| out.metrics.get(k).copied().unwrap_or(0.0);
    let released = m("after_free_reserved_bytes") - m("after_empty_cache_reserved_bytes");
    Ok(out.clone().metric("released_by_empty_cache_bytes", released).note(format!(
        "{}: a training step, empty_cache with the model alive, a second step, then model, batch and optimizer \
             dropped, then empty_cache",
        label(&s.mlp, s.batch)
    )))
}

fn fragmentation_case(ctx: &Context, s: &Sizes, offset: u32, config: &str) -> Result<CaseOutput, CaseError> {
    let cfg = AllocatorConfig::parse(config)?;
    let device = private_device(ctx, FRAGMENTATION_DEVICE + offset, s.fragmentation_capacity, cfg)?;
    let elems = (s.fragmentation_tensor / 4) as usize;
    // Two tensors per 20 MiB segment (the large pool's segment for requests
    // under 10 MiB), as many as the device's capacity holds segments.
    let planned = 2 * (s.fragmentation_capacity / (20 * MIB)) as usize;
    let _t = tag_scope(Tag::Activation);
    let mut tensors: Vec<Option<Tensor>> = Vec::with_capacity(planned);
    let mut fill_oom = None;
    for _ in 0..planned {
        match Tensor::zeros(&[elems], DType::F32, &device) {
            Ok(t) => tensors.push(Some(t)),
            Err(TensorError::Alloc(e)) if e.is_out_of_memory() => {
                fill_oom = e.as_oom().cloned();
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let allocated_count = tensors.len();
    // Free every other tensor (the first of each pair).
    for t in tensors.iter_mut().step_by(2) {
        *t = None;
    }
    let freed = allocated_count.div_ceil(2);
    let before = (device.memory_allocated(), device.memory_reserved(), device.allocator().largest_free_block());
    let info = device.allocator().mem_info();
    let request = 2 * s.fragmentation_tensor;
    let mut out = CaseOutput::default()
        .metric("capacity_bytes", s.fragmentation_capacity as f64)
        .metric("tensor_bytes", s.fragmentation_tensor as f64)
        .metric("tensors_planned_count", planned as f64)
        .metric("tensors_allocated_count", allocated_count as f64)
        .metric("tensors_freed_count", freed as f64)
        .metric("allocated_before_request_bytes", before.0 as f64)
        .metric("reserved_before_request_bytes", before.1 as f64)
        .metric("reserved_unallocated_before_request_bytes", before.1.saturating_sub(before.0) as f64)
        .metric("largest_free_block_bytes", before.2 as f64)
        .metric("device_free_before_request_bytes", info.free_bytes as f64)
        .metric("request_bytes", request as f64);
    if let Some(oom) = &fill_oom {
        out = out.note(format!("filling stopped after {allocated_count} of {planned} tensors: {oom}"));
    }
    let result = Tensor::zeros(&[2 * elems], DType::F32, &device);
    let stats = device.memory_stats();
    out = out.metric("peak_reserved_bytes", stats.max_memory_reserved() as f64);
    match result {
        Ok(t) => {
            out = out
                .metric("oom_count", 0.0)
                .metric("reserved_after_request_bytes", device.memory_reserved() as f64)
                .note(format!(
                    "the {} request fit; reserved {} at the end",
                    format_size(request),
                    format_size(device.memory_reserved())
                ));
            drop(t);
        }
        Err(TensorError::Alloc(AllocError::OutOfMemory(oom))) => {
            out = out
                .metric("oom_count", 1.0)
                .metric("oom_requested_bytes", oom.requested_bytes as f64)
                .metric("oom_free_bytes", oom.free_bytes as f64)
                .metric("oom_allocated_bytes", oom.allocated_bytes as f64)
                .metric("oom_reserved_unallocated_bytes", oom.reserved_unallocated_bytes as f64)
                .note(oom.to_string());
        }
        Err(e) => return Err(e.into()),
    }
    drop(tensors);
    device.empty_cache();
    Ok(out.note(format!(
        "{} tensors of {} on a {} device ({}), every other one freed, then one of {}",
        allocated_count,
        format_size(s.fragmentation_tensor),
        format_size(s.fragmentation_capacity),
        if config.is_empty() { "PyTorch's default allocator settings" } else { config },
        format_size(request)
    )))
}

// ---------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------

fn no_grad_finding(cases: &[CaseResult]) -> Finding {
    let claim =
        "evaluating under no_grad saves memory: its peak is below a training step's on the same batch".to_owned();
    let (Some(train), Some(eval)) = (
        metric(cases, "train_step_peak", "peak_allocated_bytes"),
        metric(cases, "eval_no_grad_peak", "peak_allocated_bytes"),
    ) else {
        let name = if metric(cases, "train_step_peak", "peak_allocated_bytes").is_none() {
            "train_step_peak"
        } else {
            "eval_no_grad_peak"
        };
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: missing(cases, name) };
    };
    let base = metric(cases, "eval_no_grad_peak", "baseline_bytes").unwrap_or(0.0);
    let grad = metric(cases, "eval_without_no_grad_peak", "peak_allocated_bytes");
    let saved = metric(cases, "train_step_peak", "saved_for_backward_bytes");
    let mut evidence = format!(
        "peak allocated: training step {} vs no_grad evaluation {} ({:.2}x); parameters + batch alone are {}",
        fmt_bytes(train as u64),
        fmt_bytes(eval as u64),
        train / eval.max(1.0),
        fmt_bytes(base as u64)
    );
    if let Some(g) = grad {
        evidence.push_str(&format!(
            "; the same evaluation without no_grad peaks at {} — its forward keeps every activation for a backward \
             that never comes",
            fmt_bytes(g as u64)
        ));
    }
    if let Some(s) = saved {
        evidence.push_str(&format!(
            "; a training forward holds {} for backward, plus gradients and optimizer state",
            fmt_bytes(s as u64)
        ));
    }
    let verdict = if eval < train && grad.is_none_or(|g| eval <= g) { Verdict::Holds } else { Verdict::DoesNotHold };
    Finding { claim, verdict, evidence }
}

fn batch_finding(cases: &[CaseResult]) -> Finding {
    let claim = "reducing the batch size fixes an out-of-memory error: memory grows with the batch, and a smaller \
                 batch fits where a larger one does not"
        .to_owned();
    let name = "batch_size_sweep";
    let Some(c) = case(cases, name).filter(|c| c.outcome.is_ok()) else {
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: missing(cases, name) };
    };
    let m = |k: &str| c.metrics.get(k).copied();
    let capacity = m("capacity_bytes").unwrap_or(0.0);
    match (m("largest_fitting_batch_count"), m("oom_batch_count")) {
        (Some(fit), Some(oom)) if fit < oom => {
            let mut evidence = format!(
                "on a {} device: batch {fit:.0} fits (peak allocated {}, reserved {}), batch {oom:.0} runs out of \
                 memory (requested {}; {} allocated, {} reserved but unallocated, {} free on the device)",
                fmt_bytes(capacity as u64),
                fmt_bytes(m("largest_fitting_peak_allocated_bytes").unwrap_or(0.0) as u64),
                fmt_bytes(m("largest_fitting_peak_reserved_bytes").unwrap_or(0.0) as u64),
                fmt_bytes(m("oom_requested_bytes").unwrap_or(0.0) as u64),
                fmt_bytes(m("oom_allocated_bytes").unwrap_or(0.0) as u64),
                fmt_bytes(m("oom_reserved_unallocated_bytes").unwrap_or(0.0) as u64),
                fmt_bytes(m("oom_free_bytes").unwrap_or(0.0) as u64),
            );
            let (requested, cached, free) = (
                m("oom_requested_bytes").unwrap_or(0.0),
                m("oom_reserved_unallocated_bytes").unwrap_or(0.0),
                m("oom_free_bytes").unwrap_or(0.0),
            );
            if cached > 0.0 && cached + free >= requested {
                evidence.push_str(&format!(
                    "; cached plus free memory ({}) exceeded the request, but no piece of it was large enough, so \
                     fragmentation also decides where the boundary lies",
                    fmt_bytes((cached + free) as u64)
                ));
            }
            if let Some(per) = m("per_sample_bytes") {
                evidence.push_str(&format!(
                    "; each sample costs about {:.0} bytes, so the batch that fits scales with the capacity",
                    per
                ));
            }
            evidence.push_str(&format!(" ({:.0} trials: doubling, then bisection)", m("trials_count").unwrap_or(0.0)));
            Finding { claim, verdict: Verdict::Holds, evidence }
        }
        (None, Some(oom)) => Finding {
            claim,
            verdict: Verdict::DoesNotHold,
            evidence: format!(
                "even batch {oom:.0}, the smallest tried, ran out of memory on a {} device",
                fmt_bytes(capacity as u64)
            ),
        },
        (Some(fit), None) => Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!(
                "no batch ran out of memory on the {} device (largest tried {fit:.0}), so there was nothing to fix",
                fmt_bytes(capacity as u64)
            ),
        },
        _ => Finding { claim, verdict: Verdict::Inconclusive, evidence: "the sweep recorded no boundary".into() },
    }
}

fn empty_cache_finding(cases: &[CaseResult]) -> Finding {
    let claim =
        "the caching allocator keeps freed memory reserved until empty_cache() returns it to the device".to_owned();
    let name = "empty_cache";
    let Some(c) = case(cases, name).filter(|c| c.outcome.is_ok()) else {
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: missing(cases, name) };
    };
    let m = |k: &str| c.metrics.get(k).copied().unwrap_or(0.0);
    let (alloc_free, res_free) = (m("after_free_allocated_bytes"), m("after_free_reserved_bytes"));
    let (alloc_empty, res_empty) = (m("after_empty_cache_allocated_bytes"), m("after_empty_cache_reserved_bytes"));
    let evidence = format!(
        "after a training step: allocated {}, reserved {}; empty_cache with the model alive: reserved {} (only wholly \
         free segments go); after a second step and freeing everything: allocated {}, reserved {}; after \
         empty_cache: allocated {}, reserved {}",
        fmt_bytes(m("after_step_allocated_bytes") as u64),
        fmt_bytes(m("after_step_reserved_bytes") as u64),
        fmt_bytes(m("after_step_empty_cache_reserved_bytes") as u64),
        fmt_bytes(alloc_free as u64),
        fmt_bytes(res_free as u64),
        fmt_bytes(alloc_empty as u64),
        fmt_bytes(res_empty as u64)
    );
    let verdict = if res_free > alloc_free && res_empty <= alloc_empty && res_empty < res_free {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    };
    Finding { claim, verdict, evidence }
}

fn fragmentation_finding(cases: &[CaseResult]) -> Finding {
    let claim = "fragmentation can cause an out-of-memory error while memory sits reserved but unallocated; \
                 expandable_segments:True avoids it"
        .to_owned();
    let (default, expandable) = ("fragmentation/default", "fragmentation/expandable_segments");
    let (Some(d), Some(e)) =
        (case(cases, default).filter(|c| c.outcome.is_ok()), case(cases, expandable).filter(|c| c.outcome.is_ok()))
    else {
        let name = if case(cases, default).is_some_and(|c| c.outcome.is_ok()) { expandable } else { default };
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: missing(cases, name) };
    };
    let get = |c: &CaseResult, k: &str| c.metrics.get(k).copied().unwrap_or(0.0);
    let request = get(d, "request_bytes");
    let describe = |c: &CaseResult| -> String {
        if get(c, "oom_count") > 0.0 {
            format!(
                "out of memory with {} reserved but unallocated (largest free block {}, {} free on the device)",
                fmt_bytes(get(c, "oom_reserved_unallocated_bytes") as u64),
                fmt_bytes(get(c, "largest_free_block_bytes") as u64),
                fmt_bytes(get(c, "oom_free_bytes") as u64)
            )
        } else {
            format!("fits (reserved {} afterwards)", fmt_bytes(get(c, "reserved_after_request_bytes") as u64))
        }
    };
    let mut evidence = format!(
        "{:.0} tensors of {} on a {} device, every other one freed, then a {} request — default settings: {}; \
         expandable_segments:True: {}",
        get(d, "tensors_allocated_count"),
        fmt_bytes(get(d, "tensor_bytes") as u64),
        fmt_bytes(get(d, "capacity_bytes") as u64),
        fmt_bytes(request as u64),
        describe(d),
        describe(e)
    );
    if let Some(m) = case(cases, "fragmentation/max_split_size_mb").filter(|c| c.outcome.is_ok()) {
        evidence.push_str(&format!("; max_split_size_mb:20: {}", describe(m)));
        if get(m, "oom_count") > 0.0 {
            evidence.push_str(&format!(
                " (max_split_size_mb keeps cached blocks of at least that size from being carved up for smaller \
                 requests and frees them first on an out-of-memory; every freed block here is {}, below it, so it \
                 changes nothing)",
                fmt_bytes(get(m, "tensor_bytes") as u64)
            ));
        }
    }
    let default_fragmented = get(d, "oom_count") > 0.0 && get(d, "oom_reserved_unallocated_bytes") >= request;
    let expandable_fits = get(e, "oom_count") == 0.0;
    let verdict = match (default_fragmented, expandable_fits) {
        (true, true) => Verdict::Holds,
        (false, _) | (_, false) => Verdict::DoesNotHold,
    };
    Finding { claim, verdict, evidence }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::testing::quick_private_context as quick_context;

    use crate::runner::run_suite;

    use crate::suite::NoProgress;

    /// The suite at tiny sizes: a small MLP, a 24 MiB sweep device, a 100 MiB
    /// fragmentation device.
    struct TinyMemory;

    impl Suite for TinyMemory {
        fn name(&self) -> &'static str {
            MemorySuite.name()
        }

        fn description(&self) -> &'static str {
            MemorySuite.description()
        }

        fn cases(&self, ctx: &Context) -> Vec<Case> {
            let s = Sizes {
                mlp: vec![64, 256, 256, 10],
                batch: 256,
                sweep_mlp: vec![16, 16, 16, 10],
                sweep_capacity: 24 * MIB,
                sweep_start: 64,
                sweep_resolution: 16,
                fragmentation_capacity: 100 * MIB,
                ..Sizes::for_context(ctx)
            };
            cases_for(s)
        }

        fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
            MemorySuite.findings(ctx, cases)
        }
    }

    #[test]
    fn sizes_by_mode() {
        let mut ctx = quick_context();
        let quick = Sizes::for_context(&ctx);
        assert_eq!(quick.sweep_capacity, QUICK_SWEEP_CAPACITY);
        assert_eq!(quick.fragmentation_capacity, 200 * MIB);
        ctx.options.quick = false;
        ctx.options.capacity_bytes = 8 * GIB;
        let full = Sizes::for_context(&ctx);
        assert_eq!(full.sweep_capacity, 8 * GIB, "--capacity sets the sweep's device");
        assert_eq!(full.fragmentation_capacity, GIB);
        let names: Vec<String> = MemorySuite.cases(&ctx).into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "train_step_peak",
                "eval_without_no_grad_peak",
                "eval_no_grad_peak",
                "batch_size_sweep",
                "empty_cache",
                "fragmentation/default",
                "fragmentation/expandable_segments",
                "fragmentation/max_split_size_mb"
            ]
        );
    }

    #[test]
    fn sweep_doubles_then_bisects() {
        // Fits up to 1000.
        let fake = |b: usize| -> Result<Trial, CaseError> {
            if b <= 1000 {
                Ok(Trial::Fits { peak_allocated: b as u64 * 10, peak_reserved: b as u64 * 12 })
            } else {
                let oom = OutOfMemoryError {
                    device: "cpu".into(),
                    stream: 0,
                    requested_bytes: b as u64,
                    rounded_bytes: b as u64,
                    segment_bytes: b as u64,
                    total_bytes: 10_000,
                    free_bytes: 0,
                    allowed_bytes: None,
                    allocated_bytes: 0,
                    reserved_unallocated_bytes: 0,
                    private_pool_cached_bytes: 0,
                };
                Ok(Trial::OutOfMemory { oom: Box::new(oom), stage: "forward" })
            }
        };
        let s = run_sweep(64, 1 << 20, 1000, None, fake).unwrap();
        let batches: Vec<usize> = s.trials.iter().map(|t| t.0).collect();
        assert_eq!(&batches[..6], [64, 128, 256, 512, 1024, 768]);
        assert_eq!(s.largest_fit().unwrap().0, 1000, "{batches:?}");
        assert_eq!(s.smallest_oom().unwrap().0, 1001, "bisection to a gap of one: {batches:?}");
        // A coarser resolution stops earlier.
        let s = run_sweep(64, 1 << 20, 8, None, fake).unwrap();
        let (fit, oom) = (s.largest_fit().unwrap().0, s.smallest_oom().unwrap().0);
        assert!(fit <= 1000 && oom > 1000 && oom - fit <= oom / 8, "{fit} {oom}");
        // The start does not fit: halving.
        let s = run_sweep(4096, 1 << 20, 1000, None, fake).unwrap();
        assert_eq!(s.trials.iter().map(|t| t.0).take(4).collect::<Vec<_>>(), [4096, 2048, 1024, 512]);
        assert_eq!(s.largest_fit().unwrap().0, 1000);
        // Nothing runs out of memory up to the limit.
        let s = run_sweep(64, 512, 8, Some(12_000), fake).unwrap();
        assert!(s.smallest_oom().is_none());
        assert_eq!(s.largest_fit().unwrap().0, 512);

        // Guided: 12 reserved bytes a sample on a 12000-byte device puts the
        // boundary at 1000; the estimate and one step above it settle it.
        let s = run_sweep(64, 1 << 20, 1000, Some(12_000), fake).unwrap();
        let batches: Vec<usize> = s.trials.iter().map(|t| t.0).collect();
        assert_eq!(batches, [64, 128, 256, 512, 1024, 1000, 1001]);
        // A wrong estimate (the device looks larger) costs trials, not correctness.
        for capacity in [20_000, 6_000, 0] {
            let s = run_sweep(64, 1 << 20, 1000, Some(capacity), fake).unwrap();
            let batches: Vec<usize> = s.trials.iter().map(|t| t.0).collect();
            assert_eq!(s.largest_fit().unwrap().0, 1000, "{capacity}: {batches:?}");
            assert_eq!(s.smallest_oom().unwrap().0, 1001, "{capacity}: {batches:?}");
        }
    }

    #[test]
    fn tiny_run_holds_every_claim() {
        let _tuner = crate::suite::testing::tuner_lock();
        let ctx = quick_context();
        let r = run_suite(&TinyMemory, &ctx, &NoProgress);
        assert_eq!(r.name, "memory");
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            assert!(c.metrics.values().all(|v| v.is_finite()), "{}: {:?}", c.name, c.metrics);
        }
        let m = |case: &str, key: &str| metric(&r.cases, case, key).unwrap_or_else(|| panic!("{case}: {key}"));

        // no_grad: training > evaluation without no_grad > evaluation under no_grad.
        let train = m("train_step_peak", "peak_allocated_bytes");
        let eval = m("eval_no_grad_peak", "peak_allocated_bytes");
        let eval_grad = m("eval_without_no_grad_peak", "peak_allocated_bytes");
        assert!(train > eval_grad && eval_grad > eval, "train {train}, eval with grad {eval_grad}, no_grad {eval}");
        assert_eq!(m("eval_no_grad_peak", "training_peak_bytes"), train);
        assert_eq!(m("eval_no_grad_peak", "eval_peak_bytes"), eval);
        assert!(m("eval_no_grad_peak", "training_over_eval_peak_ratio") > 1.0);
        // Under no_grad only the logits (256 × 10 f32) and the loss (one 512-byte block) remain.
        assert_eq!(m("eval_no_grad_peak", "held_after_forward_bytes"), (256 * 10 * 4 + 512) as f64);
        assert!(m("eval_without_no_grad_peak", "held_after_forward_bytes") > 0.0);
        // The runner's profile of the case is its private device's.
        let profiled = r.cases.iter().find(|c| c.name == "train_step_peak").unwrap().memory.as_ref().unwrap();
        assert_eq!(profiled.peak_allocated_bytes as f64, train);
        assert!(profiled.device.ends_with("50"), "{}", profiled.device);

        // The sweep found a boundary inside the device, with the OOM's numbers.
        let fit = m("batch_size_sweep", "largest_fitting_batch_count");
        let oom = m("batch_size_sweep", "oom_batch_count");
        assert!(fit >= 64.0 && oom > fit && oom - fit <= (oom / 16.0).max(1.0), "{fit} {oom}");
        assert!(m("batch_size_sweep", "largest_fitting_peak_reserved_bytes") <= (24 * MIB) as f64);
        assert_eq!(m("batch_size_sweep", "oom_total_bytes"), (24 * MIB) as f64);
        assert!(m("batch_size_sweep", "oom_requested_bytes") > m("batch_size_sweep", "oom_free_bytes"));
        assert!(m("batch_size_sweep", "per_sample_bytes") > 0.0);

        // empty_cache: memory stays reserved after the free, then goes.
        assert_eq!(m("empty_cache", "after_free_allocated_bytes"), 0.0);
        assert!(m("empty_cache", "after_free_reserved_bytes") > 0.0);
        assert_eq!(m("empty_cache", "after_empty_cache_reserved_bytes"), 0.0);
        assert!(
            m("empty_cache", "after_step_empty_cache_reserved_bytes") >= m("empty_cache", "after_step_allocated_bytes")
        );

        // Fragmentation: 10 tensors of 8 MiB in five 20 MiB segments of a 100 MiB
        // device, 5 freed; 16 MiB fails by default with 60 MiB reserved but
        // unallocated, and fits with expandable segments (in a fifth 20 MiB page).
        assert_eq!(m("fragmentation/default", "tensors_allocated_count"), 10.0);
        assert_eq!(m("fragmentation/default", "oom_count"), 1.0);
        assert_eq!(m("fragmentation/default", "oom_reserved_unallocated_bytes"), (60 * MIB) as f64);
        assert_eq!(m("fragmentation/default", "largest_free_block_bytes"), (8 * MIB) as f64);
        assert_eq!(m("fragmentation/expandable_segments", "oom_count"), 0.0);
        assert_eq!(m("fragmentation/expandable_segments", "reserved_after_request_bytes"), (100 * MIB) as f64);
        assert_eq!(m("fragmentation/max_split_size_mb", "oom_count"), 1.0);

        assert_eq!(r.findings.len(), 4);
        for f in &r.findings {
            assert_eq!(f.verdict, Verdict::Holds, "{}: {}", f.claim, f.evidence);
        }
        assert!(r.findings[1].evidence.contains("runs out of memory"), "{}", r.findings[1].evidence);
        assert!(r.findings[3].evidence.contains("max_split_size_mb:20"), "{}", r.findings[3].evidence);
    }

    #[test]
    fn findings_say_why_when_cases_are_missing() {
        let failed = CaseResult::failed("batch_size_sweep", "boom");
        let f = batch_finding(std::slice::from_ref(&failed));
        assert_eq!(f.verdict, Verdict::Inconclusive);
        assert!(f.evidence.contains("failed: boom"), "{}", f.evidence);
        let f = no_grad_finding(&[]);
        assert_eq!(f.verdict, Verdict::Inconclusive);
        assert!(f.evidence.contains("did not run"), "{}", f.evidence);
        assert_eq!(fragmentation_finding(&[]).verdict, Verdict::Inconclusive);
        assert_eq!(empty_cache_finding(&[]).verdict, Verdict::Inconclusive);
    }
}
