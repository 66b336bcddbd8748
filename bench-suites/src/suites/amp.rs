//! `amp`: the same MLP trained the same number of steps on the same batches in
//! float32, in float16 under autocast with a `GradScaler`, and in bfloat16
//! under autocast — step time, peak allocated memory, bytes saved for backward
//! (activations), and how far the loss lands from float32's.
//!
//! Two workloads: `small_batch`, where parameters, gradients and optimizer
//! state outweigh the activations (the guides' MLP at an ordinary batch), and
//! `large_batch`, a narrower MLP at a batch large enough that activations
//! dominate; on a GPU also `wide_layers`, 4096-wide layers whose matrix products
//! dominate the step (the two above are bound by kernel launches there, as an
//! H100 run showed). The guides say mixed precision is faster and uses less memory;
//! both claims are judged from the numbers, not assumed. On the CPU backend
//! half precision is not faster (no native half arithmetic: f16 products
//! convert inside the GEMM, bf16 products are widened to f32 in a workspace,
//! and autocast adds cast kernels), and the peak does not drop where the f32
//! master weights, gradients and optimizer state dominate. What does hold
//! everywhere is that the bytes saved for backward halve; that is a finding of
//! its own.
//!
//! Each (workload, precision) trains on its own private device (`cpu:40` to
//! `cpu:45`, on the run's hub, so the runner's profile of the case is that
//! device's), or on the run's GPU when there is one.

mod charts;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::GIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{AllocatorAction, Event, Subscriber, Tag};
use vramlab_engine::tensor::DType;
use vramlab_train::{self as nn, DataLoader, Dataset, GradScaler, LoaderConfig, LossFn, Module, Sgd, Trainer};

use crate::harness::summarize;
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `amp` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct AmpSuite;

/// The precisions compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precision {
    F32,
    F16,
    BF16,
}

const PRECISIONS: [Precision; 3] = [Precision::F32, Precision::F16, Precision::BF16];

/// First private device index; workload `w`, precision `p` trains on
/// `cpu:(BASE + 3·w + p)`.
const DEVICE_INDEX_BASE: u32 = 40;

const LARGE_LR: f32 = 0.5;

/// Samples in the one step a simulated run trains before the step it counts
/// (see [`train_case`]).
const SIMULATED_WARMUP_BATCH: usize = 8;

impl Precision {
    fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::BF16 => "bf16",
        }
    }

    /// How the case trains, in words.
    fn label(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16 autocast + GradScaler",
            Precision::BF16 => "bf16 autocast",
        }
    }

    fn autocast(self) -> Option<DType> {
        match self {
            Precision::F32 => None,
            Precision::F16 => Some(DType::F16),
            Precision::BF16 => Some(DType::BF16),
        }
    }

    fn index(self) -> u32 {
        match self {
            Precision::F32 => 0,
            Precision::F16 => 1,
            Precision::BF16 => 2,
        }
    }

    fn from_name(name: &str) -> Option<Precision> {
        PRECISIONS.into_iter().find(|p| p.name() == name)
    }
}

/// What is trained, and for how long.
#[derive(Debug, Clone, PartialEq)]
struct Workload {
    /// `small_batch`, `large_batch`, or on a GPU `wide_layers`.
    name: &'static str,
    /// Position among the workloads (for the device index).
    index: u32,
    /// MLP layer sizes, input to classes.
    dims: Vec<usize>,
    batch: usize,
    /// Steps before the timed ones (they train too).
    warmup_steps: usize,
    /// Timed steps (each one sample).
    timed_steps: usize,
    /// Batches in the training set (the loader cycles through them).
    batches: usize,
    /// Held-out samples for the final evaluation.
    eval_samples: usize,
    /// SGD learning rate (momentum 0.9).
    lr: f32,
}

impl Workload {
    fn for_context(ctx: &Context) -> Vec<Workload> {
        let timed = |default: usize| ctx.harness.fixed_samples.unwrap_or(default).max(1);
        let (small, large) = if ctx.quick() {
            // The quick large batch keeps the full run's batch-to-width ratio
            // (8: activations outweigh the parameters' state) at an eighth of its
            // multiply-adds per sample × batch: under `bench --simulate` a step of
            // 2048 × 256² took a minute and a half (valgrind emulates each fused
            // multiply-add of the GEMMs lane by lane).
            ((vec![256, 512, 512, 10], 128, 16), (vec![128, 128, 128, 128, 10], 1024, 12))
        } else {
            ((vec![784, 1024, 1024, 10], 256, 48), (vec![256, 256, 256, 256, 10], 8192, 12))
        };
        let mut workloads = vec![
            Workload {
                name: "small_batch",
                index: 0,
                dims: small.0,
                batch: small.1,
                warmup_steps: 4,
                timed_steps: timed(small.2),
                batches: 32,
                eval_samples: 4 * small.1,
                lr: 0.1,
            },
            Workload {
                name: "large_batch",
                index: 1,
                dims: large.0,
                batch: large.1,
                warmup_steps: 3,
                timed_steps: timed(large.2),
                batches: 4,
                eval_samples: large.1,
                lr: LARGE_LR,
            },
        ];
        // On a GPU the two above are bound by kernel launches; the guides'
        // speedup is from tensor cores on wide matrix products, so the claim is
        // also tried where those dominate the step.
        if !ctx.device.is_cpu() {
            let (width, batch) = if ctx.quick() { (2048, 1024) } else { (4096, 2048) };
            workloads.push(Workload {
                name: "wide_layers",
                index: 2,
                dims: vec![width, width, width, 10],
                batch,
                warmup_steps: 3,
                timed_steps: timed(if ctx.quick() { 8 } else { 12 }),
                batches: 4,
                eval_samples: batch,
                lr: 0.01,
            });
        }
        workloads
    }

    fn steps(&self) -> usize {
        self.warmup_steps + self.timed_steps
    }

    fn label(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        format!("mlp {} batch {}", dims.join("-"), self.batch)
    }
}

/// What an f32 case leaves for the others of its workload to compare with.
#[derive(Debug, Clone, PartialEq)]
struct Reference {
    losses: Vec<f64>,
    eval_loss: f64,
    median_step_ns: f64,
    peak_allocated_bytes: u64,
    activation_bytes: u64,
    saved_bytes: u64,
}

/// f32 references by workload name.
type Shared = Arc<Mutex<HashMap<&'static str, Reference>>>;

impl Suite for AmpSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "amp"
    }

    fn description(&self) -> &'static str {
        "Mixed precision (autocast) is faster and uses less memory: the same MLP trained the same steps on the same \
         batches in f32, f16 with GradScaler and bf16, at a small and a large batch — step time, peak allocated, \
         activation bytes, and the loss against f32"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        cases_for(Workload::for_context(ctx))
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        let on_cpu = ctx.device.is_cpu();
        vec![
            speed_finding(on_cpu, cases),
            memory_finding(on_cpu, cases),
            activation_finding(cases),
            loss_finding(cases),
        ]
    }
}

/// One case per workload and precision, f32 first in each workload.
fn cases_for(workloads: Vec<Workload>) -> Vec<Case> {
    let reference: Shared = Arc::default();
    let mut cases = Vec::new();
    for work in workloads {
        for p in PRECISIONS {
            let (w, r) = (work.clone(), reference.clone());
            cases.push(
                Case::new(format!("{}/{}", work.name, p.name()), move |ctx| train_case(ctx, p, &w, &r))
                    .param("workload", work.name)
                    .param("precision", p.name())
                    .param("model", work.label())
                    .param("steps", work.steps())
                    .param("batch", work.batch),
            );
        }
    }
    cases
}

/// A private host device for the case, or the run's GPU.
fn training_device(ctx: &Context, w: &Workload, p: Precision) -> Result<Device, CaseError> {
    if !ctx.device.is_cpu() {
        ctx.device.empty_cache();
        ctx.device.allocator().reset_peak_stats();
        return Ok(ctx.device.clone());
    }
    let id = DeviceId { kind: DeviceKind::Cpu, index: DEVICE_INDEX_BASE + 3 * w.index + p.index() };
    Ok(Device::host(id, 4 * GIB, AllocatorConfig::default(), &ctx.hooks)?)
}

/// Sums the bytes of allocations tagged `activation` on one device.
#[derive(Debug)]
struct ActivationBytes {
    device: u32,
    bytes: AtomicU64,
}

impl Subscriber for ActivationBytes {
    fn on_event(&self, event: &Event) {
        if let Event::Allocator(a) = event
            && a.action == AllocatorAction::Alloc
            && a.device == self.device
            && a.tag == Some(Tag::Activation)
        {
            self.bytes.fetch_add(a.rounded_bytes, Ordering::Relaxed);
        }
    }
}

/// Trains `w` in precision `p` and measures it.
fn train_case(ctx: &Context, p: Precision, w: &Workload, reference: &Shared) -> Result<CaseOutput, CaseError> {
    let device = training_device(ctx, w, p)?;
    let seed = ctx.seed();
    let classes = *w.dims.last().unwrap_or(&10);
    // Class centres N(0, σ²) per coordinate with σ = 4.8/√dims: centres about
    // 6.8 noise deviations apart whatever the width — learnable, not solved at once.
    let separation = 3.2 / (w.dims[0] as f64).sqrt();
    let data = Dataset::classification(w.batch * w.batches + w.eval_samples, w.dims[0], classes, separation, seed)?;
    let (train, held_out) = data.split(w.batch * w.batches);
    let loader = DataLoader::new(&train, LoaderConfig { seed, drop_last: true, ..LoaderConfig::new(w.batch) })?;
    let eval_loader = DataLoader::new(&held_out, LoaderConfig { shuffle: false, ..LoaderConfig::new(w.batch) })?;

    let mut model = nn::mlp(&w.dims, seed, &device)?;
    let mut opt = Sgd::with_momentum(w.lr, 0.9);
    let mut trainer = Trainer::new(LossFn::CrossEntropy).with_autocast(p.autocast());
    if p == Precision::F16 {
        trainer = trainer.with_scaler(GradScaler::default());
    }

    let counter = Arc::new(ActivationBytes { device: device.id().event_index(), bytes: AtomicU64::new(0) });
    let hub = device.allocator().hooks().clone();
    let subscription = hub.subscribe(counter.clone());
    if ctx.harness.simulated {
        hub.unsubscribe(subscription);
        return simulated_step(&train, seed, &loader, &device, &mut model, &mut opt, &mut trainer);
    }
    let steps = w.steps();
    let mut records = Vec::with_capacity(steps);
    let mut input_bytes = 0;
    let trained = (|| -> Result<(), nn::NnError> {
        let mut epoch = 0;
        while records.len() < steps {
            for batch in loader.epoch(epoch, &device) {
                if records.len() == steps {
                    break;
                }
                let batch = batch?;
                input_bytes = batch.x.allocated_bytes();
                records.push(trainer.step(&mut model, &mut opt, &batch)?);
            }
            epoch += 1;
        }
        Ok(())
    })();
    hub.unsubscribe(subscription);
    trained?;

    let stats = device.memory_stats();
    let peak_allocated = stats.max_memory_allocated();
    let peak_reserved = stats.max_memory_reserved();
    let activation_bytes = counter.bytes.load(Ordering::Relaxed) / w.steps() as u64;
    // Held for backward: the activation allocations, plus — without autocast —
    // the batch itself, which the first Linear saves as it is (under autocast it
    // saves a half-precision copy, which is one of the activation allocations).
    let saved_bytes = activation_bytes + if p.autocast().is_none() { input_bytes } else { 0 };
    // The model as it ends, judged in f32 without autocast on held-out samples
    // (gradients freed first, so the evaluation stays below the training peak).
    model.zero_grad(true)?;
    let mut judge = Trainer::new(LossFn::CrossEntropy);
    judge.measure_kernels = false;
    let eval = judge.evaluate(&mut model, &eval_loader, &device)?;

    let timed = &records[w.warmup_steps.min(records.len())..];
    let timing = summarize(timed.iter().map(|r| r.step_ns as f64).collect(), 1, "host");
    let mut kernel: Vec<f64> = timed.iter().map(|r| r.kernel_ns as f64).collect();
    kernel.sort_by(f64::total_cmp);
    let losses: Vec<f64> = records.iter().map(|r| r.loss).collect();
    let final_loss = losses.last().copied().unwrap_or(f64::NAN);
    let skipped = records.iter().filter(|r| !r.stepped).count();

    let mut out = CaseOutput::timed(timing.clone())
        .metric("steps_count", records.len() as f64)
        .metric("timed_steps_count", timed.len() as f64)
        .metric("kernel_time_median_ns", kernel.get(kernel.len() / 2).copied().unwrap_or(0.0))
        .metric("max_memory_allocated_bytes", peak_allocated as f64)
        .metric("max_memory_reserved_bytes", peak_reserved as f64)
        .metric("activation_per_step_bytes", activation_bytes as f64)
        .metric("saved_for_backward_per_step_bytes", saved_bytes as f64)
        .metric("parameter_bytes", model.parameter_bytes() as f64)
        .metric("first_loss_nats", losses.first().copied().unwrap_or(f64::NAN))
        .metric("final_loss_nats", final_loss)
        .metric("eval_loss_nats", eval.loss)
        .metric("eval_accuracy_percent", eval.accuracy.unwrap_or(0.0) * 100.0)
        .note(format!(
            "{} for {} steps ({} warm-up, then one timed sample per step), SGD lr {} momentum 0.9, cross-entropy; \
             eval loss: the trained model in f32 without autocast on {} held-out samples",
            w.label(),
            records.len(),
            w.warmup_steps,
            w.lr,
            eval.samples
        ));
    if let Some(s) = trainer.scaler.as_ref().map(GradScaler::state) {
        out = out
            .metric("steps_skipped_count", skipped as f64)
            .metric("final_loss_scale_ratio", f64::from(s.scale))
            .note(format!(
                "GradScaler (init scale 65536): {} step(s) skipped for inf/NaN gradients, {} backoff(s), final scale \
                 {}",
                s.steps_skipped, s.backoffs, s.scale
            ));
    }

    let mine = Reference {
        losses,
        eval_loss: eval.loss,
        median_step_ns: timing.median_ns,
        peak_allocated_bytes: peak_allocated,
        activation_bytes,
        saved_bytes,
    };
    Ok(compare_with_f32(out, reference, p, w.name, mine))
}

/// A simulated run's case (`bench --simulate`): one warm-up step, then the
/// first full-batch step counted alone, and nothing else (the evaluation and
/// the comparisons with f32 are the timed run's).
///
/// The warm-up step trains on [`SIMULATED_WARMUP_BATCH`] samples, not a full
/// batch: what a warm-up is for here — the optimizer's momentum, the
/// GradScaler's state, the kernels' lazy set-up — does not depend on the
/// batch, and under callgrind a full-batch step costs a minute and more
/// (valgrind emulates the GEMMs' fused multiply-adds lane by lane). The
/// counted step's activations then take new blocks from the host, a few
/// hundred instructions each against the step's hundreds of millions.
#[allow(clippy::too_many_arguments)]
fn simulated_step(
    train: &Dataset,
    seed: u64,
    loader: &DataLoader,
    device: &Device,
    model: &mut nn::Sequential,
    opt: &mut Sgd,
    trainer: &mut Trainer,
) -> Result<CaseOutput, CaseError> {
    let warmup =
        DataLoader::new(train, LoaderConfig { seed, drop_last: true, ..LoaderConfig::new(SIMULATED_WARMUP_BATCH) })?;
    let small = warmup.epoch(0, device).next().ok_or("the training set has no warm-up batch")??;
    trainer.step(model, opt, &small)?;
    let batch = loader.epoch(0, device).next().ok_or("the training set has no batch")??;
    let ns = crate::harness::in_measured_region(|| trainer.step(model, opt, &batch).map(|_| ()))?;
    Ok(CaseOutput::timed(summarize(vec![ns], 1, "simulated")))
}

/// The f32 case keeps its figures for the workload's other precisions; each
/// of those adds its differences and ratios against them.
fn compare_with_f32(
    out: CaseOutput,
    reference: &Shared,
    p: Precision,
    workload: &'static str,
    mine: Reference,
) -> CaseOutput {
    let mut shared = reference.lock().unwrap_or_else(|e| e.into_inner());
    if p == Precision::F32 {
        shared.insert(workload, mine);
        out
    } else if let Some(r) = shared.get(workload) {
        let final_loss = mine.losses.last().copied().unwrap_or(f64::NAN);
        let max_diff = mine.losses.iter().zip(&r.losses).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        out.metric("final_loss_diff_vs_f32_nats", final_loss - r.losses.last().copied().unwrap_or(f64::NAN))
            .metric("max_loss_diff_vs_f32_nats", max_diff)
            .metric("eval_loss_diff_vs_f32_nats", mine.eval_loss - r.eval_loss)
            .metric("speedup_vs_f32_ratio", ratio(r.median_step_ns, mine.median_step_ns))
            .metric(
                "max_memory_allocated_vs_f32_ratio",
                ratio(mine.peak_allocated_bytes as f64, r.peak_allocated_bytes as f64),
            )
            .metric("activation_vs_f32_ratio", ratio(mine.activation_bytes as f64, r.activation_bytes as f64))
            .metric("saved_for_backward_vs_f32_ratio", ratio(mine.saved_bytes as f64, r.saved_bytes as f64))
    } else {
        out.note("no f32 result to compare with (the f32 case of this workload did not finish)")
    }
}

/// One case's numbers, as the findings read them.
#[derive(Debug, Clone)]
struct Row {
    workload: String,
    precision: Precision,
    median_ns: f64,
    peak_bytes: f64,
    activation_bytes: f64,
    saved_bytes: f64,
    /// Bytes by tag at the profiler's allocated peak (`workspace_bytes`, …).
    at_peak: BTreeMap<String, u64>,
    metrics: BTreeMap<String, f64>,
}

fn rows(cases: &[CaseResult]) -> Vec<Row> {
    cases
        .iter()
        .filter(|c| c.outcome.is_ok())
        .filter_map(|c| {
            Some(Row {
                workload: c.params.get("workload")?.as_str()?.to_owned(),
                precision: Precision::from_name(c.params.get("precision")?.as_str()?)?,
                median_ns: c.timing.as_ref()?.median_ns,
                peak_bytes: *c.metrics.get("max_memory_allocated_bytes")?,
                activation_bytes: *c.metrics.get("activation_per_step_bytes")?,
                saved_bytes: *c.metrics.get("saved_for_backward_per_step_bytes")?,
                at_peak: c.memory.as_ref().map(|m| m.by_category_at_peak_bytes.clone()).unwrap_or_default(),
                metrics: c.metrics.clone(),
            })
        })
        .collect()
}

/// One workload's f32 row and mixed-precision rows.
#[derive(Debug, Clone)]
struct Group {
    workload: String,
    f32: Row,
    mixed: Vec<Row>,
}

/// The workloads that can be compared (in case order), or why none can.
fn groups(cases: &[CaseResult]) -> Result<Vec<Group>, String> {
    let rows = rows(cases);
    let mut names: Vec<String> = Vec::new();
    for r in &rows {
        if !names.contains(&r.workload) {
            names.push(r.workload.clone());
        }
    }
    let groups: Vec<Group> = names
        .into_iter()
        .filter_map(|name| {
            let f32 = rows.iter().find(|r| r.workload == name && r.precision == Precision::F32)?.clone();
            let mixed: Vec<Row> =
                rows.iter().filter(|r| r.workload == name && r.precision != Precision::F32).cloned().collect();
            (!mixed.is_empty()).then_some(Group { workload: name, f32, mixed })
        })
        .collect();
    if groups.is_empty() {
        Err("no workload has both a successful f32 case and a successful mixed-precision case to compare".to_owned())
    } else {
        Ok(groups)
    }
}

/// The verdict on "mixed precision lowers X" from the ratios `mixed / f32`:
/// holds when every one is below `1 − margin`, does not hold when none is,
/// inconclusive when they disagree (it depends on the precision or the size).
fn verdict_from_ratios(ratios: &[f64], margin: f64) -> Verdict {
    if ratios.is_empty() {
        Verdict::Inconclusive
    } else if ratios.iter().all(|&r| r < 1.0 - margin) {
        Verdict::Holds
    } else if ratios.iter().all(|&r| r >= 1.0 - margin) {
        Verdict::DoesNotHold
    } else {
        Verdict::Inconclusive
    }
}

fn speed_finding(on_cpu: bool, cases: &[CaseResult]) -> Finding {
    let claim = "mixed precision (autocast to f16/bf16) makes training steps faster than f32".to_owned();
    let groups = match groups(cases) {
        Ok(g) => g,
        Err(why) => return Finding { claim, verdict: Verdict::Inconclusive, evidence: why },
    };
    // Time ratios mixed / f32: below 1 is faster.
    let mut ratios = Vec::new();
    let mut parts = Vec::new();
    for g in &groups {
        let per = g
            .mixed
            .iter()
            .map(|r| {
                let t = r.median_ns / g.f32.median_ns;
                ratios.push(t);
                format!("{} {:.3} ms ({:.2}x the f32 time)", r.precision.label(), r.median_ns / 1e6, t)
            })
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!("{}: f32 {:.3} ms, {per}", g.workload, g.f32.median_ns / 1e6));
    }
    let verdict = verdict_from_ratios(&ratios, 0.05);
    let mut evidence = format!("median step time — {}", parts.join("; "));
    if !on_cpu && verdict == Verdict::Inconclusive {
        evidence.push_str(
            ". It depends on the size: where a step is a few small products, it is bound by kernel launches and \
             autocast's casts (and the GradScaler's checks) add launches; where wide products dominate, half \
             precision runs them on tensor cores",
        );
    }
    if on_cpu && verdict != Verdict::Holds {
        evidence.push_str(
            ". This ran on the CPU backend, which has no native half-precision arithmetic: f16 matmuls convert to f32 \
             inside the GEMM, bf16 matmuls are widened to f32 in a workspace and rounded back, and autocast adds a \
             cast of every weight and input per step — so half precision costs time here. The guides' speedup comes \
             from GPU tensor cores and halved memory traffic; run on a GPU to test it there",
        );
        // The claim is the guides' about GPUs: CPU numbers do not judge it.
        return Finding { claim, verdict: Verdict::NotApplicable, evidence };
    }
    Finding { claim, verdict, evidence }
}

/// `[at the peak: …]` from the profiler's bytes by tag, when recorded.
fn at_peak(r: &Row) -> String {
    if r.at_peak.is_empty() {
        return String::new();
    }
    let get = |k: &str| r.at_peak.get(k).copied().unwrap_or(0) as f64;
    format!(
        " [at the peak: parameters {}, gradients {}, optimizer state {}, activations {}, workspace {}, temporaries {}]",
        bytes(get("parameter_bytes")),
        bytes(get("gradient_bytes")),
        bytes(get("optimizer_state_bytes")),
        bytes(get("activation_bytes")),
        bytes(get("workspace_bytes")),
        bytes(get("temporary_bytes"))
    )
}

/// A peak as the report's case table writes it (`fmt_bytes`), so the verdict and
/// the table show one figure the same way.
fn bytes(b: f64) -> String {
    vramlab_display::format::fmt_bytes(b as u64)
}

fn memory_finding(on_cpu: bool, cases: &[CaseResult]) -> Finding {
    let claim = "mixed precision lowers the peak memory (max_memory_allocated) of training".to_owned();
    let groups = match groups(cases) {
        Ok(g) => g,
        Err(why) => return Finding { claim, verdict: Verdict::Inconclusive, evidence: why },
    };
    let mut all = Vec::new();
    let mut parts = Vec::new();
    let mut dropped = Vec::new();
    let mut kept = Vec::new();
    for g in &groups {
        let ratios: Vec<f64> = g.mixed.iter().map(|r| r.peak_bytes / g.f32.peak_bytes).collect();
        let per = g
            .mixed
            .iter()
            .zip(&ratios)
            .map(|(r, x)| format!("{} {} ({x:.2}x f32){}", r.precision.label(), bytes(r.peak_bytes), at_peak(r)))
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!("{}: f32 {}{}, {per}", g.workload, bytes(g.f32.peak_bytes), at_peak(&g.f32)));
        for (r, x) in g.mixed.iter().zip(&ratios) {
            let label = format!("{} at {}", r.precision.name(), g.workload);
            if *x < 0.98 { dropped.push(label) } else { kept.push(label) }
        }
        all.extend(ratios);
    }
    let verdict = verdict_from_ratios(&all, 0.02);
    let mut evidence = format!("max_memory_allocated — {}", parts.join("; "));
    if verdict == Verdict::Inconclusive && !dropped.is_empty() {
        evidence.push_str(&format!(
            ". It depends on the size: the peak dropped for {} but not for {}",
            dropped.join(", "),
            kept.join(", ")
        ));
    }
    if !kept.is_empty() {
        evidence.push_str(
            ". Where the peak did not drop, autocast's own costs outweighed what it saved: it keeps f32 master weights, \
             f32 gradients and f32 optimizer state, and adds a half-precision copy of every weight per step, so only \
             the activations shrink — a real drop needs activations to dominate (large batches, long sequences)",
        );
        if on_cpu {
            evidence.push_str(
                "; on the CPU backend the bf16 matmuls also stage their operands through f32 workspaces, so a bf16 \
                 step can peak at or above f32",
            );
        }
    }
    Finding { claim, verdict, evidence }
}

fn activation_finding(cases: &[CaseResult]) -> Finding {
    let claim = "mixed precision halves the bytes saved for backward (activations)".to_owned();
    let groups = match groups(cases) {
        Ok(g) => g,
        Err(why) => return Finding { claim, verdict: Verdict::Inconclusive, evidence: why },
    };
    let mut ratios = Vec::new();
    let mut parts = Vec::new();
    for g in groups.iter().filter(|g| g.f32.saved_bytes > 0.0) {
        let per = g
            .mixed
            .iter()
            .map(|r| {
                let x = r.saved_bytes / g.f32.saved_bytes;
                ratios.push(x);
                format!(
                    "{} {} ({x:.2}x f32; activation allocations {}, {:.2}x)",
                    r.precision.label(),
                    bytes(r.saved_bytes),
                    bytes(r.activation_bytes),
                    r.activation_bytes / g.f32.activation_bytes.max(1.0)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!(
            "{}: f32 {} (activation allocations {}), {per}",
            g.workload,
            bytes(g.f32.saved_bytes),
            bytes(g.f32.activation_bytes)
        ));
    }
    // Half-size saved tensors, plus what stays f32 (the logits the loss saves): at most 0.6.
    let verdict = if ratios.is_empty() {
        Verdict::Inconclusive
    } else if ratios.iter().all(|&r| r <= 0.6) {
        Verdict::Holds
    } else if ratios.iter().all(|&r| r > 0.6) {
        Verdict::DoesNotHold
    } else {
        Verdict::Inconclusive
    };
    Finding {
        claim,
        verdict,
        evidence: format!(
            "bytes held for backward per training step — {}. Under autocast every layer saves its input in 2-byte \
             elements; in f32 the first Linear saves the input batch as it is (counted above), under autocast a \
             half-precision copy of it (an activation allocation), and the loss saves f32 logits either way",
            if parts.is_empty() { "none recorded".to_owned() } else { parts.join("; ") }
        ),
    }
}

fn loss_finding(cases: &[CaseResult]) -> Finding {
    let claim = "mixed precision trains to (nearly) the same loss as f32".to_owned();
    let groups = match groups(cases) {
        Ok(g) => g,
        Err(why) => return Finding { claim, verdict: Verdict::Inconclusive, evidence: why },
    };
    let mut close = Vec::new();
    let mut parts = Vec::new();
    for g in &groups {
        let Some(&f32_loss) = g.f32.metrics.get("final_loss_nats") else { continue };
        // 0.02 nats plus 5% of the f32 loss (bf16 keeps 8 significand bits).
        let tolerance = 0.02 + 0.05 * f32_loss.abs();
        let mut per = Vec::new();
        for r in &g.mixed {
            let (Some(&diff), Some(&max)) =
                (r.metrics.get("final_loss_diff_vs_f32_nats"), r.metrics.get("max_loss_diff_vs_f32_nats"))
            else {
                continue;
            };
            close.push(diff.abs() <= tolerance);
            let eval = r
                .metrics
                .get("eval_loss_diff_vs_f32_nats")
                .map(|e| format!(", held-out loss {}", signed4(*e)))
                .unwrap_or_default();
            let skipped = r
                .metrics
                .get("steps_skipped_count")
                .map(|s| format!(", {s:.0} step(s) skipped by the scaler"))
                .unwrap_or_default();
            per.push(format!(
                "{} {} (largest gap over the run {max:.4}{eval}{skipped})",
                r.precision.label(),
                signed4(diff)
            ));
        }
        parts.push(format!(
            "{}: f32 final loss {f32_loss:.4} nats, tolerance {tolerance:.4}; {}",
            g.workload,
            per.join(", ")
        ));
    }
    let verdict = if close.is_empty() {
        Verdict::Inconclusive
    } else if close.iter().all(|&c| c) {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    };
    Finding {
        claim,
        verdict,
        evidence: format!(
            "final training loss minus f32's, same batches and seed — {}",
            if parts.is_empty() { "no loss differences recorded".to_owned() } else { parts.join("; ") }
        ),
    }
}

/// A signed difference to four decimals, a zero as `+0.0000` (never `-0.0000`
/// for a tiny negative one).
fn signed4(v: f64) -> String {
    let s = format!("{v:+.4}");
    if s == "-0.0000" { "+0.0000".to_owned() } else { s }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::suite::testing::quick_private_context as quick_context;

    use crate::runner::run_suite;
    use crate::suite::NoProgress;

    /// The suite with the quick workloads shrunk to tiny sizes (a debug build
    /// trains them in moments); the large batch still has activations dominate.
    struct TinyAmp;

    impl Suite for TinyAmp {
        fn name(&self) -> &'static str {
            AmpSuite.name()
        }

        fn description(&self) -> &'static str {
            AmpSuite.description()
        }

        fn cases(&self, ctx: &Context) -> Vec<Case> {
            let mut w = Workload::for_context(ctx);
            (w[0].dims, w[0].batch, w[0].batches, w[0].eval_samples) = (vec![32, 64, 64, 10], 32, 8, 64);
            (w[1].dims, w[1].batch, w[1].batches, w[1].eval_samples) = (vec![32, 32, 32, 32, 10], 1024, 2, 256);
            cases_for(w)
        }

        fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
            AmpSuite.findings(ctx, cases)
        }
    }

    #[test]
    fn a_tiny_negative_difference_is_written_as_zero() {
        assert_eq!(signed4(-0.00004), "+0.0000");
        assert_eq!(signed4(-0.0008), "-0.0008");
        assert_eq!(signed4(0.0008), "+0.0008");
    }

    #[test]
    fn workloads_by_mode() {
        let mut ctx = quick_context();
        let quick = Workload::for_context(&ctx);
        assert_eq!(quick.iter().map(|w| w.name).collect::<Vec<_>>(), ["small_batch", "large_batch"]);
        assert_eq!(quick[0].steps(), 4 + 3, "--samples sets the timed steps");
        ctx.options.quick = false;
        ctx.harness.fixed_samples = None;
        let full = Workload::for_context(&ctx);
        assert_eq!(full[0].dims, [784, 1024, 1024, 10], "the guides' MLP");
        assert!(full.iter().all(|w| w.timed_steps >= 10), "at least ten timed samples");
        assert_eq!(full[1].label(), "mlp 256-256-256-256-10 batch 8192");
        assert_eq!(AmpSuite.cases(&ctx).len(), 6);
    }

    #[test]
    fn tiny_run_measures_every_precision_against_f32() {
        let _tuner = crate::suite::testing::tuner_lock();
        let ctx = quick_context();
        let r = run_suite(&TinyAmp, &ctx, &NoProgress);
        assert_eq!(r.name, "amp");
        let names: Vec<&str> = r.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "small_batch/f32",
                "small_batch/f16",
                "small_batch/bf16",
                "large_batch/f32",
                "large_batch/f16",
                "large_batch/bf16"
            ]
        );
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            let t = c.timing.as_ref().unwrap();
            assert_eq!(t.samples_ns.len(), 3, "--samples 3 gives three timed steps");
            assert!(c.metrics["max_memory_allocated_bytes"] >= c.metrics["parameter_bytes"]);
            assert!(c.metrics["activation_per_step_bytes"] > 0.0);
            assert!(c.metrics["final_loss_nats"].is_finite());
            assert!(c.metrics["final_loss_nats"] < c.metrics["first_loss_nats"], "{}: it learns", c.name);
            let memory = c.memory.as_ref().expect("the private device is profiled through the run's hub");
            assert_eq!(memory.peak_allocated_bytes as f64, c.metrics["max_memory_allocated_bytes"], "{}", c.name);
            let f16 = c.params["precision"] == "f16";
            assert_eq!(c.metrics.contains_key("steps_skipped_count"), f16, "{}: only f16 has a scaler", c.name);
            if c.params["precision"] != "f32" {
                let m = &c.metrics;
                // What is saved for backward halves (the f32 logits the loss keeps are the rest).
                assert!(m["saved_for_backward_vs_f32_ratio"] <= 0.6, "{}: {m:?}", c.name);
                assert!(m["activation_vs_f32_ratio"] < 1.0, "{}: {m:?}", c.name);
                assert!(m["final_loss_diff_vs_f32_nats"].abs() < 0.1, "{}: {m:?}", c.name);
                assert!(m["speedup_vs_f32_ratio"] > 0.0);
            }
        }
        assert_eq!(r.cases[0].metrics["steps_count"], 7.0, "4 warm-up + 3 timed");
        let large_f16 = r.cases[4].metrics["max_memory_allocated_vs_f32_ratio"];
        assert!(large_f16 < 0.9, "activations dominate the large batch, so f16 lowers its peak: {large_f16}");
        assert_eq!(r.findings.len(), 4);
        assert_eq!(r.findings[2].verdict, Verdict::Holds, "{}", r.findings[2].evidence);
        assert_eq!(r.findings[3].verdict, Verdict::Holds, "{}", r.findings[3].evidence);
        assert!(
            r.findings[1].evidence.contains("max_memory_allocated — small_batch: f32"),
            "{}",
            r.findings[1].evidence
        );
        // One figure, one value: the report's case table shows each case's profiled peak, the verdict
        // quotes max_memory_allocated; on this device they are one window, so the table's figure is the
        // verdict's.
        for c in &r.cases {
            let shown = vramlab_display::format::fmt_bytes(c.memory.as_ref().unwrap().peak_allocated_bytes);
            assert!(r.findings[1].evidence.contains(&shown), "{}: {shown} not in {}", c.name, r.findings[1].evidence);
        }
        assert!(r.findings[1].evidence.contains("large_batch"), "{}", r.findings[1].evidence);
    }

    #[test]
    fn a_simulated_run_counts_one_full_batch_step_after_a_small_warm_up_and_stops() {
        let _tuner = crate::suite::testing::tuner_lock();
        let mut ctx = quick_context();
        ctx.harness.simulated = true;
        let before = crate::harness::regions_entered();
        let r = run_suite(&TinyAmp, &ctx, &NoProgress);
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            let t = c.timing.as_ref().unwrap();
            assert_eq!((t.samples_ns.len(), t.clock.as_str()), (1, "simulated"), "{}", c.name);
            assert!(!c.metrics.contains_key("eval_loss_nats"), "{}: no evaluation under simulation", c.name);
            let (first, last) = c.simulated.as_ref().and_then(|s| s.regions).expect("the case's region is recorded");
            assert!(first > before && first == last, "{}: one counted step, regions {first}..={last}", c.name);
        }
        // The case's name and parameters are the timed run's (the figures are matched by them).
        assert_eq!(r.cases[0].params["steps"], serde_json::json!(4 + 3));
    }

    fn result(workload: &str, p: Precision, median_ns: f64, peak: f64, act: f64) -> CaseResult {
        let mut params = BTreeMap::new();
        params.insert("workload".into(), workload.into());
        params.insert("precision".into(), p.name().into());
        let mut metrics = BTreeMap::new();
        metrics.insert("max_memory_allocated_bytes".into(), peak);
        metrics.insert("activation_per_step_bytes".into(), act);
        metrics.insert("saved_for_backward_per_step_bytes".into(), act);
        metrics.insert("final_loss_nats".into(), 1.0);
        if p != Precision::F32 {
            metrics.insert("final_loss_diff_vs_f32_nats".into(), 0.01);
            metrics.insert("max_loss_diff_vs_f32_nats".into(), 0.02);
        }
        CaseResult::ok(format!("{workload}/{}", p.name()))
            .with_params(params)
            .with_timing(summarize(vec![median_ns], 1, "host"))
            .with_metrics(metrics)
    }

    #[test]
    fn verdicts_follow_the_numbers() {
        // A GPU-like picture: both faster, less memory, at both sizes.
        let fast = [
            result("small", Precision::F32, 10.0, 100.0, 40.0),
            result("small", Precision::F16, 5.0, 70.0, 20.0),
            result("small", Precision::BF16, 6.0, 72.0, 20.0),
            result("large", Precision::F32, 100.0, 1000.0, 400.0),
            result("large", Precision::F16, 50.0, 600.0, 200.0),
            result("large", Precision::BF16, 60.0, 620.0, 200.0),
        ];
        assert_eq!(speed_finding(false, &fast).verdict, Verdict::Holds);
        assert_eq!(memory_finding(false, &fast).verdict, Verdict::Holds);
        assert_eq!(activation_finding(&fast).verdict, Verdict::Holds);
        assert_eq!(loss_finding(&fast).verdict, Verdict::Holds);
        // The CPU picture: slower everywhere; the peak drops only at the large batch.
        let cpu = [
            result("small", Precision::F32, 10.0, 100.0, 40.0),
            result("small", Precision::F16, 17.0, 115.0, 20.0),
            result("small", Precision::BF16, 12.0, 125.0, 20.0),
            result("large", Precision::F32, 100.0, 1000.0, 400.0),
            result("large", Precision::F16, 200.0, 700.0, 200.0),
            result("large", Precision::BF16, 120.0, 940.0, 200.0),
        ];
        let f = speed_finding(true, &cpu);
        assert_eq!(f.verdict, Verdict::NotApplicable, "a GPU claim is not judged from CPU numbers");
        assert!(f.evidence.contains("f16 autocast + GradScaler 0.000 ms (1.70x the f32 time)"), "{}", f.evidence);
        assert!(f.evidence.contains("CPU backend"), "{}", f.evidence);
        let f = memory_finding(true, &cpu);
        assert_eq!(f.verdict, Verdict::Inconclusive);
        assert!(
            f.evidence.contains("dropped for f16 at large, bf16 at large but not for f16 at small"),
            "{}",
            f.evidence
        );
        assert!(f.evidence.contains("f32 workspaces"), "{}", f.evidence);
        let f = memory_finding(true, &cpu[..3]);
        assert_eq!(f.verdict, Verdict::DoesNotHold, "{}", f.evidence);
        // Precisions disagreeing on speed.
        let mixed = [
            result("small", Precision::F32, 10.0, 100.0, 40.0),
            result("small", Precision::F16, 5.0, 100.0, 30.0),
            result("small", Precision::BF16, 12.0, 100.0, 20.0),
        ];
        assert_eq!(speed_finding(false, &mixed).verdict, Verdict::Inconclusive);
        assert_eq!(activation_finding(&mixed).verdict, Verdict::Inconclusive);
        // Nothing to compare with.
        let f = speed_finding(false, &mixed[1..]);
        assert_eq!(f.verdict, Verdict::Inconclusive);
        assert!(f.evidence.contains("no workload has both"), "{}", f.evidence);
    }
}
