//! The guides' training loop as a helper: per step `zero_grad`, forward (under
//! autocast when asked), loss, backward (through the GradScaler when there is
//! one), optimizer step; evaluation under `no_grad`. Every step is timed, and
//! the time spent inside kernels is summed from the device's kernel events, so
//! the share outside kernels (framework overhead) is
//! `1 − kernel_ns / step_ns` ([`StepRecord::outside_kernel_share`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

use super::functional::correct_count;
use super::mode::{no_grad, set_autocast};
use super::{Batch, DataLoader, GradScaler, LossFn, Module, Optimizer, Result};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::{Event, Hooks, Subscriber, SubscriptionId, now_ns};
use vramlab_engine::tensor::DType;

/// A subscriber that sums the durations of the kernel events emitted on one
/// thread (the one that created it), ignoring everything else — so other
/// threads using the same device do not count.
#[derive(Debug)]
pub struct KernelTimer {
    thread: ThreadId,
    total_ns: AtomicU64,
    kernels: AtomicU64,
}

impl KernelTimer {
    /// A timer for kernels launched by the calling thread.
    pub fn for_current_thread() -> Arc<KernelTimer> {
        Arc::new(KernelTimer {
            thread: std::thread::current().id(),
            total_ns: AtomicU64::new(0),
            kernels: AtomicU64::new(0),
        })
    }

    /// Kernel time so far, ns.
    pub fn total_ns(&self) -> u64 {
        self.total_ns.load(Ordering::Relaxed)
    }

    /// Kernel calls so far.
    pub fn kernels(&self) -> u64 {
        self.kernels.load(Ordering::Relaxed)
    }
}

impl Subscriber for KernelTimer {
    fn on_event(&self, event: &Event) {
        if let Event::Kernel(k) = event
            && std::thread::current().id() == self.thread
        {
            self.total_ns.fetch_add(k.duration_ns, Ordering::Relaxed);
            self.kernels.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn on_events(&self, events: &[Event]) {
        // Allocator batches carry no kernel events: skip them without a thread lookup.
        if events.iter().any(|e| matches!(e, Event::Kernel(_))) {
            events.iter().for_each(|e| self.on_event(e));
        }
    }
}

/// A [`KernelTimer`] subscribed to a hub until dropped.
#[derive(Debug)]
pub struct KernelClock {
    timer: Arc<KernelTimer>,
    hooks: Arc<Hooks>,
    id: SubscriptionId,
}

impl KernelClock {
    /// Starts summing the kernels this thread runs on `device`.
    pub fn attach(device: &Device) -> KernelClock {
        let hooks = device.allocator().hooks().clone();
        let timer = KernelTimer::for_current_thread();
        let id = hooks.subscribe(timer.clone());
        KernelClock { timer, hooks, id }
    }

    /// Kernel time since attaching, ns.
    pub fn total_ns(&self) -> u64 {
        self.timer.total_ns()
    }

    /// Kernel calls since attaching.
    pub fn kernels(&self) -> u64 {
        self.timer.kernels()
    }

    fn is_on(&self, device: &Device) -> bool {
        Arc::ptr_eq(&self.hooks, device.allocator().hooks())
    }
}

impl Drop for KernelClock {
    fn drop(&mut self) {
        self.hooks.unsubscribe(self.id);
    }
}

/// One training step, as measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRecord {
    pub epoch: u64,
    /// Index within the epoch.
    pub step: usize,
    /// The (unscaled) loss.
    pub loss: f64,
    pub batch_size: usize,
    /// Rows whose argmax matched the label (classification only).
    pub correct: Option<usize>,
    /// Host gather and host-to-device copy of the batch, ns.
    pub load_ns: u64,
    /// `zero_grad` → forward → loss → backward → optimizer step (and scaler
    /// update), wall time, ns.
    pub step_ns: u64,
    /// Time inside kernels during the step, from kernel events, ns (0 when not measured).
    pub kernel_ns: u64,
    /// Kernel calls during the step.
    pub kernels: u64,
    /// Whether the optimizer stepped (false when the GradScaler skipped it).
    pub stepped: bool,
    /// The GradScaler's scale after the step's update.
    pub scale: Option<f32>,
}

impl StepRecord {
    pub fn accuracy(&self) -> Option<f64> {
        self.correct.map(|c| c as f64 / self.batch_size.max(1) as f64)
    }

    /// Step time outside kernels (framework overhead), ns.
    pub fn outside_kernels_ns(&self) -> u64 {
        self.step_ns.saturating_sub(self.kernel_ns)
    }

    /// The share of the step spent outside kernels, in [0, 1].
    pub fn outside_kernel_share(&self) -> f64 {
        if self.step_ns == 0 { 0.0 } else { self.outside_kernels_ns() as f64 / self.step_ns as f64 }
    }
}

/// One epoch's steps and totals.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochReport {
    pub epoch: u64,
    pub steps: Vec<StepRecord>,
    /// Wall time of the epoch, loading included, ns.
    pub wall_ns: u64,
}

impl EpochReport {
    /// Sample-weighted mean training loss.
    pub fn mean_loss(&self) -> f64 {
        let n: usize = self.steps.iter().map(|s| s.batch_size).sum();
        self.steps.iter().map(|s| s.loss * s.batch_size as f64).sum::<f64>() / n.max(1) as f64
    }

    /// Training accuracy over the epoch (classification only).
    pub fn accuracy(&self) -> Option<f64> {
        let correct: Option<usize> = self.steps.iter().map(|s| s.correct).sum();
        let n: usize = self.steps.iter().map(|s| s.batch_size).sum();
        correct.map(|c| c as f64 / n.max(1) as f64)
    }
}

/// Loss and accuracy of an evaluation pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalReport {
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub samples: usize,
    pub wall_ns: u64,
}

/// The training loop: loss function, autocast dtype, optional GradScaler,
/// `zero_grad` mode, and kernel timing.
#[derive(Debug)]
pub struct Trainer {
    pub loss: LossFn,
    /// Forward and loss run under `autocast(dtype)` when set.
    pub autocast: Option<DType>,
    pub scaler: Option<GradScaler>,
    /// `zero_grad(set_to_none)` before each step (PyTorch's default: true).
    pub set_to_none: bool,
    /// Subscribe to the device's hooks to measure kernel time (default true).
    pub measure_kernels: bool,
    clock: Option<KernelClock>,
}

impl Trainer {
    pub fn new(loss: LossFn) -> Trainer {
        Trainer { loss, autocast: None, scaler: None, set_to_none: true, measure_kernels: true, clock: None }
    }

    /// Runs forward and loss under `autocast(dtype)` (`None`: full precision).
    pub fn with_autocast(mut self, dtype: Option<DType>) -> Trainer {
        self.autocast = dtype;
        self
    }

    /// Scales losses and steps through `scaler` (float16 training).
    pub fn with_scaler(mut self, scaler: GradScaler) -> Trainer {
        self.scaler = Some(scaler);
        self
    }

    fn clock(&mut self, device: &Device) -> Option<&KernelClock> {
        if !self.measure_kernels {
            return None;
        }
        if !self.clock.as_ref().is_some_and(|c| c.is_on(device)) {
            self.clock = Some(KernelClock::attach(device));
        }
        self.clock.as_ref()
    }

    /// One training step on a batch already on the device.
    pub fn step(&mut self, model: &mut dyn Module, opt: &mut dyn Optimizer, batch: &Batch) -> Result<StepRecord> {
        let (k0, n0) = self.clock(batch.x.device()).map_or((0, 0), |c| (c.total_ns(), c.kernels()));
        let t0 = now_ns();
        opt.zero_grad(model, self.set_to_none)?;
        let (output, loss) = {
            let _ac = set_autocast(self.autocast)?;
            let output = model.forward(&batch.x)?;
            let loss = self.loss.compute(&output, &batch.y)?;
            (output, loss)
        };
        let loss_value = loss.item()?;
        let (stepped, scale) = match &mut self.scaler {
            Some(scaler) => {
                scaler.scale(loss)?.backward(model)?;
                let stepped = scaler.step(opt, model)?;
                scaler.update();
                (stepped, Some(scaler.get_scale()))
            }
            None => {
                loss.backward(model)?;
                opt.step(model)?;
                (true, None)
            }
        };
        let step_ns = now_ns().saturating_sub(t0);
        let (kernel_ns, kernels) = self.clock.as_ref().map_or((0, 0), |c| (c.total_ns() - k0, c.kernels() - n0));
        let correct = match self.loss {
            LossFn::CrossEntropy => Some(correct_count(&output, &batch.y)?.0),
            LossFn::Mse => None,
        };
        Ok(StepRecord {
            epoch: 0,
            step: 0,
            loss: loss_value,
            batch_size: batch.len(),
            correct,
            load_ns: batch.load_ns,
            step_ns,
            kernel_ns,
            kernels,
            stepped,
            scale,
        })
    }

    /// One epoch over `loader` (batches copied to `device`).
    pub fn epoch(
        &mut self,
        model: &mut dyn Module,
        opt: &mut dyn Optimizer,
        loader: &DataLoader<'_>,
        epoch: u64,
        device: &Device,
    ) -> Result<EpochReport> {
        let t0 = now_ns();
        let mut steps = Vec::with_capacity(loader.len());
        for (i, batch) in loader.epoch(epoch, device).enumerate() {
            let batch = batch?;
            let mut rec = self.step(model, opt, &batch)?;
            rec.epoch = epoch;
            rec.step = i;
            steps.push(rec);
        }
        Ok(EpochReport { epoch, steps, wall_ns: now_ns().saturating_sub(t0) })
    }

    /// Mean loss and accuracy over `loader` under `no_grad` (and autocast when set).
    pub fn evaluate(&mut self, model: &mut dyn Module, loader: &DataLoader<'_>, device: &Device) -> Result<EvalReport> {
        let t0 = now_ns();
        let _ng = no_grad();
        let (mut loss_sum, mut correct, mut samples) = (0.0, 0usize, 0usize);
        for batch in loader.epoch(0, device) {
            let batch = batch?;
            let (output, loss) = {
                let _ac = set_autocast(self.autocast)?;
                let output = model.forward(&batch.x)?;
                let loss = self.loss.compute(&output, &batch.y)?;
                (output, loss)
            };
            loss_sum += loss.item()? * batch.len() as f64;
            samples += batch.len();
            if self.loss == LossFn::CrossEntropy {
                correct += correct_count(&output, &batch.y)?.0;
            }
        }
        Ok(EvalReport {
            loss: loss_sum / samples.max(1) as f64,
            accuracy: (self.loss == LossFn::CrossEntropy).then(|| correct as f64 / samples.max(1) as f64),
            samples,
            wall_ns: now_ns().saturating_sub(t0),
        })
    }
}
