//! `autotune`: `torch.backends.cudnn.benchmark` and `.deterministic`, measured.
//!
//! A few ResNet-like convolution shapes (scaled to run in seconds on a small
//! CPU) and a few matrix products, each run with the autotuner off (the
//! heuristic's choice), in benchmark mode (every candidate timed once per
//! shape, the fastest kept) and in deterministic mode (reproducible algorithms
//! only). Each (shape, mode) is one case: the algorithm chosen, the time per
//! call, and for benchmark mode the tuning cost and the number of calls after
//! which tuning has paid for itself — or "never", when the tuned choice is not
//! faster than the heuristic's.
//!
//! The autotuner is process-wide: every case restores the mode it found (off by
//! default), even when it fails. A benchmark case whose shape is already cached
//! clears the autotuner's in-memory cache so that it measures a cold tuning.
//!
//! Cases of one shape run in order (off, benchmark, deterministic) and share
//! their medians, so the benchmark case can compute the payback against the off
//! case and the deterministic case its cost against both.
//!
//! Under a CPU simulator (`bench --simulate`) each case counts its own call and
//! benchmark mode does not tune: it counts the algorithm the timed run chose.

mod charts;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use vramlab_display::format::fmt_ns;
use vramlab_engine::autotune::{self, TuneMode, TuningKey, TuningRecord};
use vramlab_engine::cpu_kernels::{Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, MatmulAlgo, MatmulShape};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::{Event, EventLog, now_ns};
use vramlab_engine::tensor::{Conv2dOptions, DType, KernelTiming, Tensor, TensorError};

use super::common::{self, Margin};
use crate::harness::measure;
use crate::schema::{CaseResult, Finding, TimingStats, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `autotune` suite.
#[derive(Debug, Clone, Default)]
pub struct AutotuneSuite {
    /// Shapes to run instead of the built-in ones (tests use tiny ones).
    shapes: Option<Vec<Shape>>,
}

/// The note every case starts with: `algorithm: <name>`.
const ALGORITHM_NOTE: &str = "algorithm: ";

/// The note a benchmark case gives about its choice: `choice reproducible: yes|no`.
const REPRODUCIBLE_NOTE: &str = "choice reproducible: ";

/// The note of a case whose timing is another mode's (the same algorithm):
/// `timing shared: <mode> mode ran the same algorithm, …`.
const SHARED_NOTE: &str = "timing shared: ";

/// One case must beat another by this factor to count as faster (5 %: below
/// that, medians of a loaded 2-core machine do not tell them apart).
const FASTER: f64 = 1.05;

/// How `fast` compares with `slow` against the 5 % margin, on their per-call
/// times' interquartile intervals ([`common::faster_by`]).
fn faster_by(fast: &CaseResult, slow: &CaseResult) -> Margin {
    common::faster_by(fast, slow, "time_per_call_ns", FASTER)
}

/// One problem the autotuner chooses an algorithm for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Problem {
    /// A convolution pass (forward, or the weight gradient of training).
    Conv(ConvProblem),
    /// A (batched) matrix product.
    Matmul(MatmulShape),
}

/// A named problem, with what it stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    name: &'static str,
    problem: Problem,
    /// What the shape models, for the case's notes.
    about: &'static str,
}

impl Problem {
    /// The kernel's name, as its events carry it (`conv2d_forward`, `matmul`).
    fn kernel(self) -> &'static str {
        match self {
            Problem::Conv(p) => p.pass.kernel_name(),
            Problem::Matmul(_) => MatmulAlgo::OP,
        }
    }

    /// The op as the autotuner's records name it.
    fn tuner_op(self) -> &'static str {
        match self {
            Problem::Conv(_) => ConvAlgo::OP,
            Problem::Matmul(_) => MatmulAlgo::OP,
        }
    }

    fn options(s: &Conv2dShape) -> Conv2dOptions {
        Conv2dOptions { stride: s.stride, padding: s.pad }
    }

    /// The operands, as tensor shapes.
    fn describe(self) -> String {
        match self {
            Problem::Conv(ConvProblem { pass, shape: s }) => {
                let geometry = format!("stride {} pad {}", s.stride.0, s.pad.0);
                let (x, w) =
                    (format!("[{}, {}, {}, {}]", s.n, s.c, s.h, s.w), format!("[{}, {}, {}, {}]", s.k, s.c, s.r, s.s));
                match pass {
                    ConvPass::Forward => format!("x {x} w {w} {geometry}"),
                    _ => format!(
                        "{} of w {w} from x {x} and gy [{}, {}, {}, {}], {geometry}",
                        pass.kernel_name(),
                        s.n,
                        s.k,
                        s.out_h(),
                        s.out_w()
                    ),
                }
            }
            Problem::Matmul(s) if s.batch == 1 => format!("[{}, {}] · [{}, {}]", s.m, s.k, s.k, s.n),
            Problem::Matmul(s) => format!("[{}, {}, {}] · [{}, {}, {}]", s.batch, s.m, s.k, s.batch, s.k, s.n),
        }
    }

    /// Floating-point operations of one call (every pass of a convolution
    /// does the same multiply-adds).
    fn flops(self) -> f64 {
        match self {
            Problem::Conv(ConvProblem { shape: s, .. }) => {
                2.0 * (s.n * s.k * s.out_h() * s.out_w() * s.c * s.r * s.s) as f64
            }
            Problem::Matmul(s) => 2.0 * (s.batch * s.m * s.n * s.k) as f64,
        }
    }

    /// How the autotuner's key writes the problem (its `Debug` form), so that
    /// this problem's tuning record can be told from others'.
    /// The problem as the autotuner's key holds it (its JSON; on a GPU the
    /// key's problem also carries the math mode, around this).
    fn key_problem(self) -> String {
        match self {
            Problem::Conv(p) => serde_json::to_string(&p),
            Problem::Matmul(shape) => serde_json::to_string(&shape),
        }
        .expect("shapes serialize")
    }

    /// The heuristic's algorithm (what off mode runs).
    fn heuristic(self) -> &'static str {
        match self {
            Problem::Conv(p) => ConvAlgo::heuristic(&p).name(),
            Problem::Matmul(shape) => MatmulAlgo::heuristic(&shape).name(),
        }
    }

    /// Every algorithm the tuner may pick for this op.
    #[cfg(test)]
    fn algorithm_names(self) -> Vec<&'static str> {
        match self {
            Problem::Conv(_) => ConvAlgo::all().iter().map(|a| a.name()).collect(),
            Problem::Matmul(_) => MatmulAlgo::all().iter().map(|a| a.name()).collect(),
        }
    }

    /// Whether `algorithm` (by name) is reproducible for this problem.
    #[cfg(test)]
    fn is_reproducible(self, algorithm: &str) -> bool {
        match self {
            Problem::Conv(p) => ConvAlgo::from_name(algorithm).is_some_and(|a| a.is_reproducible(&p)),
            Problem::Matmul(s) => MatmulAlgo::from_name(algorithm).is_some_and(|a| a.is_reproducible(&s)),
        }
    }
}

/// A convolution problem: `n` images of `c`×`hw`×`hw`, `k` filters of `r`×`r`.
#[allow(clippy::too_many_arguments)]
fn conv(pass: ConvPass, n: usize, c: usize, hw: usize, k: usize, r: usize, stride: usize, pad: usize) -> Problem {
    let shape = Conv2dShape::new(n, c, hw, hw, k, r, r).with_stride(stride, stride).with_padding(pad, pad);
    Problem::Conv(ConvProblem { pass, shape })
}

/// ResNet-50's convolutions at half of ImageNet's resolution (batch 1 in quick
/// mode, 2 otherwise), the weight gradient of one of them (where the fastest
/// algorithm is not reproducible), and matrix products of the kinds where the
/// algorithms differ. Quick mode keeps fewer shapes, and a smaller square product.
fn builtin_shapes(quick: bool) -> Vec<Shape> {
    use ConvPass::{BackwardWeight, Forward};
    let n = if quick { 1 } else { 2 };
    let mut shapes = vec![
        Shape {
            name: "conv_stem_7x7_s2",
            problem: conv(Forward, n, 3, 112, 64, 7, 2, 3),
            about: "ResNet stem: 7×7 stride 2, RGB to 64 channels (224² scaled to 112²)",
        },
        Shape {
            name: "conv_3x3",
            problem: conv(Forward, n, 64, 28, 64, 3, 1, 1),
            about: "ResNet-50 layer1 3×3, 64 channels (56² scaled to 28²)",
        },
        Shape {
            name: "conv_1x1_reduce",
            problem: conv(Forward, n, 256, 28, 64, 1, 1, 0),
            about: "ResNet-50 bottleneck 1×1 reduction, 256 → 64 channels (56² scaled to 28²)",
        },
        Shape {
            name: "conv_3x3_grad_weight",
            problem: conv(BackwardWeight, 2 * n, 64, 28, 64, 3, 1, 1),
            about: "the weight gradient of the layer1 3×3 in training (batch-split is fastest but not reproducible)",
        },
        // 256 in quick mode: under `bench --simulate` each 512³ call costs
        // half a minute (valgrind emulates the GEMM's fused multiply-adds).
        if quick {
            Shape {
                name: "matmul_square_256",
                problem: Problem::Matmul(MatmulShape::new(256, 256, 256)),
                about: "a square product, the case GEMM libraries are tuned for",
            }
        } else {
            Shape {
                name: "matmul_square_512",
                problem: Problem::Matmul(MatmulShape::new(512, 512, 512)),
                about: "a square product, the case GEMM libraries are tuned for",
            }
        },
        Shape {
            name: "matmul_skinny_k16384",
            problem: Problem::Matmul(MatmulShape::new(32, 32, 16_384)),
            about: "a small output with a long reduction, where split-K may help (not reproducible)",
        },
    ];
    if !quick {
        shapes.insert(
            3,
            Shape {
                name: "conv_3x3_s2_downsample",
                problem: conv(Forward, n, 128, 28, 128, 3, 2, 1),
                about: "ResNet-50 layer2 3×3 stride 2, 128 channels (56² scaled to 28²)",
            },
        );
        shapes.push(Shape {
            name: "matmul_batched_64x32",
            problem: Problem::Matmul(MatmulShape::batched(64, 32, 32, 32)),
            about: "many small products (attention heads, say)",
        });
    }
    shapes
}

/// Sets the process-wide autotuner's mode and restores the previous one when
/// dropped (also when the case fails or panics). Guards on other threads wait
/// for this one, so two cases never interleave their modes (and the mode they
/// restore is the one from before either).
struct ModeGuard {
    previous: TuneMode,
    _exclusive: MutexGuard<'static, ()>,
}

impl ModeGuard {
    fn set(mode: TuneMode) -> ModeGuard {
        static EXCLUSIVE: Mutex<()> = Mutex::new(());
        let exclusive = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
        let previous = autotune::global().mode();
        autotune::global().set_mode(mode);
        ModeGuard { previous, _exclusive: exclusive }
    }
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        autotune::global().set_mode(self.previous);
    }
}

fn mode_name(mode: TuneMode) -> &'static str {
    match mode {
        TuneMode::Off => "off",
        TuneMode::Benchmark => "benchmark",
        TuneMode::Deterministic => "deterministic",
    }
}

const MODES: [TuneMode; 3] = [TuneMode::Off, TuneMode::Benchmark, TuneMode::Deterministic];

/// A problem's operands on a device, ready to call.
struct Operands {
    problem: Problem,
    a: Tensor,
    b: Tensor,
}

impl Operands {
    fn new(problem: Problem, device: &Device, seed: u64) -> Result<Operands, TensorError> {
        let (a, b) = match problem {
            Problem::Conv(ConvProblem { pass: ConvPass::Forward, shape: s }) => {
                (vec![s.n, s.c, s.h, s.w], vec![s.k, s.c, s.r, s.s])
            }
            Problem::Conv(ConvProblem { pass: ConvPass::BackwardWeight, shape: s }) => {
                (vec![s.n, s.c, s.h, s.w], vec![s.n, s.k, s.out_h(), s.out_w()])
            }
            Problem::Conv(ConvProblem { pass: ConvPass::BackwardData, shape: s }) => {
                (vec![s.k, s.c, s.r, s.s], vec![s.n, s.k, s.out_h(), s.out_w()])
            }
            Problem::Matmul(s) if s.batch == 1 => (vec![s.m, s.k], vec![s.k, s.n]),
            Problem::Matmul(s) => (vec![s.batch, s.m, s.k], vec![s.batch, s.k, s.n]),
        };
        Ok(Operands {
            problem,
            a: Tensor::randn(&a, DType::F32, seed, device)?,
            b: Tensor::randn(&b, DType::F32, seed.wrapping_add(1), device)?,
        })
    }

    /// One call of the op (the output is dropped, as a training loop would
    /// after its use), with the kernel's own time where the op reports it.
    fn call(&self) -> Result<Option<KernelTiming>, TensorError> {
        match self.problem {
            Problem::Conv(ConvProblem { pass, shape: s }) => {
                let opts = Problem::options(&s);
                match pass {
                    ConvPass::Forward => Ok(Some(self.a.conv2d_timed(&self.b, opts)?.1)),
                    // No timed variant: on a GPU the call only queues the pass, so
                    // wait for it, or the clock would stop at the launch.
                    ConvPass::BackwardWeight => {
                        Tensor::conv2d_backward_weight(&self.a, &self.b, &[s.k, s.c, s.r, s.s], opts)?;
                        self.a.device().synchronize()?;
                        Ok(None)
                    }
                    ConvPass::BackwardData => {
                        Tensor::conv2d_backward_data(&self.a, &self.b, &[s.n, s.c, s.h, s.w], opts)?;
                        self.a.device().synchronize()?;
                        Ok(None)
                    }
                }
            }
            Problem::Matmul(_) => Ok(Some(self.a.matmul_timed(&self.b)?.1)),
        }
    }

    /// The algorithm a call runs, read from the kernel event it emits (ops
    /// without a timed variant report it nowhere else).
    fn probe_algorithm(&self, device: &Device) -> Result<&'static str, CaseError> {
        let hub = device.allocator().hooks();
        let log = EventLog::new();
        let id = hub.subscribe(log.clone());
        let called = self.call();
        hub.unsubscribe(id);
        called?;
        self.algorithm_in(&log)
    }

    /// The algorithm of the last of this op's kernel events in `log`.
    fn algorithm_in(&self, log: &EventLog) -> Result<&'static str, CaseError> {
        log.events()
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::Kernel(k) if k.name == self.problem.kernel() => Some(k.algorithm),
                _ => None,
            })
            .ok_or_else(|| format!("the call emitted no {} kernel event", self.problem.kernel()).into())
    }

    /// Whether `record` is this problem's tuning (f32, this op and shape).
    fn is_tuning_of(&self, record: &TuningRecord) -> bool {
        self.is_choice_for(&record.key)
    }

    /// Whether the autotuner's `key` is this problem's (f32, this op and shape).
    fn is_choice_for(&self, key: &TuningKey) -> bool {
        key.op == self.problem.tuner_op()
            && key.dtype == DType::F32.as_str()
            && key.problem.contains(&self.problem.key_problem())
    }
}

/// What one mode measured for a shape, shared with the later cases of the shape.
#[derive(Debug, Clone)]
struct Measured {
    algorithm: String,
    median_ns: f64,
    p25_ns: f64,
    /// The whole timing and the kernels' median, for a later mode of the shape
    /// that runs the same algorithm: it shares them instead of timing again.
    timing: TimingStats,
    kernel_median_ns: Option<f64>,
}

impl Measured {
    fn of(algorithm: &str, t: &TimingStats, kernel_median_ns: Option<f64>) -> Measured {
        Measured {
            algorithm: algorithm.to_owned(),
            median_ns: t.median_ns,
            p25_ns: t.p25_ns,
            timing: t.clone(),
            kernel_median_ns,
        }
    }
}

/// The earlier mode of `shape` that ran `algorithm`, with what it measured.
fn same_algorithm(shared: &Shared, shape: &'static str, algorithm: &str) -> Option<(&'static str, Measured)> {
    let map = shared.lock().unwrap_or_else(|e| e.into_inner());
    MODES
        .iter()
        .map(|&m| mode_name(m))
        .find_map(|m| map.get(&(shape, m)).filter(|x| x.algorithm == algorithm).map(|x| (m, x.clone())))
}

/// Medians by shape and mode, filled as the cases run.
type Shared = Arc<Mutex<BTreeMap<(&'static str, &'static str), Measured>>>;

fn shared_get(shared: &Shared, shape: &'static str, mode: TuneMode) -> Option<Measured> {
    shared.lock().unwrap_or_else(|e| e.into_inner()).get(&(shape, mode_name(mode))).cloned()
}

/// Runs the first call in benchmark mode, which tunes. When the shape was
/// already tuned in this process, the cache is cleared and the call repeated
/// so that the record is of a cold tuning. Returns the first call's wall time,
/// the tuning record, and whether the cache had to be cleared.
fn tune(ops: &Operands) -> Result<(u64, TuningRecord, bool), CaseError> {
    let tuner = autotune::global();
    for cleared in [false, true] {
        if cleared {
            tuner.clear();
        }
        let before = tuner.records().len();
        let started = now_ns();
        ops.call()?;
        let first_call_ns = now_ns().saturating_sub(started);
        let records = tuner.records();
        let fresh = records.get(before..).unwrap_or(&records);
        if let Some(r) = fresh.iter().rev().find(|r| ops.is_tuning_of(r)) {
            return Ok((first_call_ns, r.clone(), cleared));
        }
    }
    Err("the autotuner did not tune in benchmark mode, even with its cache cleared".into())
}

/// Tuning cost over the time saved per call: the calls after which benchmark
/// mode has paid for itself, when it saves anything.
fn payback_calls(tuning_ns: f64, off_ns: f64, benchmark_ns: f64) -> Option<f64> {
    let saved = off_ns - benchmark_ns;
    (saved > 0.0).then(|| (tuning_ns / saved).ceil())
}

fn run_case(ctx: &Context, shape: Shape, mode: TuneMode, shared: &Shared) -> Result<CaseOutput, CaseError> {
    if !ctx.device.is_cpu() && matches!(shape.problem, Problem::Matmul(_)) {
        return Ok(CaseOutput::not_available(
            "matmul on a GPU is one cuBLAS call whose kernel cuBLAS picks itself, as in PyTorch: \
             cudnn.benchmark has no choice to make for it",
        ));
    }
    if ctx.harness.simulated {
        return simulated_case(ctx, shape, mode);
    }
    let _mode = ModeGuard::set(mode);
    let ops = Operands::new(shape.problem, &ctx.device, ctx.seed())?;
    let tuned = if mode == TuneMode::Benchmark { Some(tune(&ops)?) } else { None };

    let algorithm = ops.probe_algorithm(&ctx.device)?;
    // One kernel, one time: a mode that runs the algorithm an earlier mode of this
    // shape ran (off and deterministic often do) shares that measurement rather
    // than timing the same kernel again, where the machine's state could move it.
    let shared_from = same_algorithm(shared, shape.name, algorithm);
    let (timing, kernel_median) = match &shared_from {
        Some((_, m)) => (m.timing.clone(), m.kernel_median_ns),
        None => {
            let mut kernel_ns = Vec::new();
            let timing = measure(&ctx.harness, || {
                if let Some(t) = ops.call()? {
                    if t.algorithm != algorithm {
                        return Err(
                            format!("the algorithm changed between calls: {algorithm} then {}", t.algorithm).into()
                        );
                    }
                    kernel_ns.push(t.duration_ns);
                }
                Ok::<(), CaseError>(())
            })?;
            kernel_ns.sort_unstable();
            (timing, kernel_ns.get(kernel_ns.len() / 2).map(|&ns| ns as f64))
        }
    };
    let per_call = timing.median_ns;
    shared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((shape.name, mode_name(mode)), Measured::of(algorithm, &timing, kernel_median));

    let heuristic = if ctx.device.is_cpu() { shape.problem.heuristic() } else { "cuDNN heuristic's pick" };
    let mut out = CaseOutput::timed(timing.clone())
        .note(format!("{ALGORITHM_NOTE}{algorithm}"))
        .note(format!("{}: {}", shape.about, shape.problem.describe()))
        .metric("time_per_call_ns", per_call)
        .metric("throughput_gflops", shape.problem.flops() / per_call);
    if let Some(ns) = kernel_median {
        out = out.metric("kernel_median_ns", ns);
    }
    if let Some((from, _)) = &shared_from {
        out = out.note(format!(
            "{SHARED_NOTE}{from} mode ran the same algorithm, {algorithm}, so its timing is shared here: one kernel, \
             one time"
        ));
    }
    let off = shared_get(shared, shape.name, TuneMode::Off);
    let ran = Ran { algorithm, per_call, timing: &timing };
    let out = match (mode, tuned) {
        (TuneMode::Off, _) => {
            out.note("autotuner off (cudnn.benchmark = False): the heuristic's choice, nothing timed")
        }
        (TuneMode::Benchmark, Some(tuned)) => benchmark_notes(out, &ran, tuned, off.as_ref()),
        (TuneMode::Deterministic, _) => deterministic_notes(out, &ran, heuristic, off.as_ref(), shared, shape.name),
        (TuneMode::Benchmark, None) => unreachable!("benchmark cases always tune"),
    };
    Ok(out)
}

/// A case of a simulated run (`bench --simulate`): the call its mode runs,
/// counted, and nothing compared (the comparisons are the timed run's). Each
/// mode counts its own call, none shared, so every case has its figure.
/// Benchmark mode does not tune: it counts the algorithm the timed run chose,
/// which the simulated process preloaded into the autotuner's cache. Tuning
/// under the simulator would time every candidate at the simulator's speed
/// (a quarter of an hour for one shape) and choose by the simulator's clock;
/// without the timed run's choice the case fails rather than count another.
fn simulated_case(ctx: &Context, shape: Shape, mode: TuneMode) -> Result<CaseOutput, CaseError> {
    let _mode = ModeGuard::set(mode);
    let ops = Operands::new(shape.problem, &ctx.device, ctx.seed())?;
    if mode == TuneMode::Benchmark {
        let pinned = autotune::global().cached_choices().into_iter().any(|(key, _)| ops.is_choice_for(&key));
        if !pinned {
            return Err(format!(
                "no benchmark-mode choice of the timed run for {} to count (its benchmark case did not complete)",
                shape.name
            )
            .into());
        }
    }
    // The algorithm from the calls' own kernel events (a probe call would be
    // one more call at the simulator's speed).
    let hub = ctx.device.allocator().hooks();
    let log = EventLog::new();
    let id = hub.subscribe(log.clone());
    let timing = measure(&ctx.harness, || {
        ops.call()?;
        Ok::<(), CaseError>(())
    });
    hub.unsubscribe(id);
    let algorithm = ops.algorithm_in(&log)?;
    let out = CaseOutput::timed(timing?).note(format!("{ALGORITHM_NOTE}{algorithm}"));
    // Benchmark mode's algorithm is the timed run's, chosen by its clock: the
    // gate compares the figures of two runs only where both counted the same.
    Ok(if mode == TuneMode::Benchmark { out.timed_choice(algorithm) } else { out })
}

/// What a case ran: its algorithm, its median time per call and its timing.
struct Ran<'a> {
    algorithm: &'a str,
    per_call: f64,
    timing: &'a TimingStats,
}

/// A benchmark case's tuning figures and notes: the candidates, the choice,
/// and when the tuning pays back against off mode (`off`).
fn benchmark_notes(
    mut out: CaseOutput,
    ran: &Ran<'_>,
    (first_call_ns, record, cleared): (u64, TuningRecord, bool),
    off: Option<&Measured>,
) -> CaseOutput {
    let Ran { algorithm, per_call, timing } = *ran;
    let tuning_ns = record.tuning_ns as f64;
    out = out
        .metric("tuning_ns", tuning_ns)
        .metric("first_call_ns", first_call_ns as f64)
        .metric("candidates_count", record.candidates.len() as f64)
        .metric("tuner_timed_runs_count", autotune::global().timed_runs() as f64);
    for c in &record.candidates {
        out = out.metric(&format!("candidate_{}_median_ns", c.algorithm), c.median_ns as f64);
    }
    let listing: Vec<String> = record
        .candidates
        .iter()
        .map(|c| {
            let flag = if c.reproducible { "" } else { ", not reproducible" };
            format!("{} {}{flag}", c.algorithm, fmt_ns(c.median_ns as f64))
        })
        .collect();
    out = out.note(format!(
            "benchmark mode timed {} candidates (one warm-up and {} timed runs each, medians): {}; chose {} in {} of tuning",
            record.candidates.len(),
            autotune::global().timed_runs(),
            listing.join(", "),
            record.choice,
            fmt_ns(tuning_ns)
        ));
    let reproducible = record.candidates.iter().find(|c| c.algorithm == algorithm).map(|c| c.reproducible);
    if let Some(r) = reproducible {
        out = out.note(format!("{REPRODUCIBLE_NOTE}{}", if r { "yes" } else { "no" }));
    }
    if record.choice != algorithm {
        out = out.note(format!("the tuning record says {} but the calls ran {algorithm}", record.choice));
    }
    if cleared {
        out = out.note(
            "this shape was already tuned in this process: the autotuner's cache was cleared to measure a cold tuning",
        );
    }
    out = match off {
        None => out.note("payback unknown: the off case of this shape did not complete"),
        Some(off) => {
            let saved = off.median_ns - per_call;
            out = out.metric("speedup_vs_off_ratio", off.median_ns / per_call).metric("saved_per_call_ns", saved);
            if off.algorithm == algorithm {
                out.note(format!(
                        "pays back: never — benchmark mode chose the heuristic's own algorithm ({algorithm}), so tuning only costs ({} vs {} per call is noise)",
                        fmt_ns(per_call),
                        fmt_ns(off.median_ns)
                    ))
            } else if let Some(calls) = payback_calls(tuning_ns, off.median_ns, per_call) {
                let noise = if timing.p75_ns >= off.p25_ns {
                    " (the two times' quartiles overlap: the saving is within noise)"
                } else {
                    ""
                };
                out.metric("payback_calls_count", calls).note(format!(
                        "pays back after {calls} calls: {} of tuning over {} saved per call ({} → {}, {} → {algorithm}){noise}",
                        fmt_ns(tuning_ns),
                        fmt_ns(saved),
                        fmt_ns(off.median_ns),
                        fmt_ns(per_call),
                        off.algorithm
                    ))
            } else {
                out.note(format!(
                        "pays back: never — benchmark's choice {algorithm} ({}) is not faster than the heuristic's {} ({}) here",
                        fmt_ns(per_call),
                        off.algorithm,
                        fmt_ns(off.median_ns)
                    ))
            }
        }
    };
    out
}

/// A deterministic case's comparison with off and benchmark mode.
fn deterministic_notes(
    mut out: CaseOutput,
    ran: &Ran<'_>,
    heuristic: &str,
    off: Option<&Measured>,
    shared: &Shared,
    shape: &'static str,
) -> CaseOutput {
    let Ran { algorithm, per_call, .. } = *ran;
    out = out.note(format!(
            "deterministic mode: reproducible algorithms only (the heuristic's {heuristic} when it is one, else the first reproducible candidate)"
        ));
    if let Some(off) = &off {
        out = out.metric("vs_off_ratio", per_call / off.median_ns);
    }
    if let Some(bench) = shared_get(shared, shape, TuneMode::Benchmark) {
        out = out.metric("vs_benchmark_ratio", per_call / bench.median_ns);
        if bench.algorithm != algorithm {
            out = out.note(format!(
                "benchmark mode chose {} instead ({}; this runs {})",
                bench.algorithm,
                fmt_ns(bench.median_ns),
                fmt_ns(per_call)
            ));
        }
    }
    out
}

impl AutotuneSuite {
    fn shapes(&self, ctx: &Context) -> Vec<Shape> {
        self.shapes.clone().unwrap_or_else(|| builtin_shapes(ctx.quick()))
    }
}

impl Suite for AutotuneSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "autotune"
    }

    fn description(&self) -> &'static str {
        "cudnn.benchmark finds faster algorithms, at a one-time tuning cost that pays for itself after some number of calls; cudnn.deterministic restricts the choice to reproducible algorithms"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let shared: Shared = Arc::default();
        let budget = if ctx.quick() { Duration::from_secs(30) } else { Duration::from_secs(60) };
        let mut cases = Vec::new();
        for shape in self.shapes(ctx) {
            for mode in MODES {
                let shared = shared.clone();
                cases.push(
                    Case::new(format!("{}/{}", shape.name, mode_name(mode)), move |ctx| {
                        run_case(ctx, shape, mode, &shared)
                    })
                    .param("shape", shape.name)
                    .param("op", shape.problem.kernel())
                    .param("problem", shape.problem.describe())
                    .param("mode", mode_name(mode))
                    .param("dtype", DType::F32.as_str())
                    .budget(budget),
                );
            }
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        findings(ctx, cases)
    }
}

/// The algorithm a case ran (from its first note).
fn algorithm_of(case: &CaseResult) -> Option<&str> {
    case.notes.iter().find_map(|n| n.strip_prefix(ALGORITHM_NOTE))
}

/// Whether a benchmark case's choice is reproducible (from its note).
fn choice_reproducible(case: &CaseResult) -> Option<bool> {
    case.notes.iter().find_map(|n| n.strip_prefix(REPRODUCIBLE_NOTE)).map(|v| v == "yes")
}

/// The ok case of `shape` in `mode`.
fn find<'a>(cases: &'a [CaseResult], shape: &str, mode: TuneMode) -> Option<&'a CaseResult> {
    cases.iter().find(|c| {
        c.outcome.is_ok()
            && c.params.get("shape").and_then(|v| v.as_str()) == Some(shape)
            && c.params.get("mode").and_then(|v| v.as_str()) == Some(mode_name(mode))
    })
}

fn findings(ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
    let mut shapes: Vec<&str> = Vec::new();
    for c in cases {
        if let Some(s) = c.params.get("shape").and_then(|v| v.as_str())
            && !shapes.contains(&s)
        {
            shapes.push(s);
        }
    }
    let on_cpu = if ctx.device.is_cpu() {
        "On the CPU device these are the engine's CPU algorithms (direct loops, im2col + GEMM, batch-split im2col, Winograd F(2×2,3×3), 1×1 as GEMM; GEMM threaded, batch-parallel or split-K), not cuDNN's or cuBLAS's, timed on this machine. "
    } else {
        ""
    };
    vec![benchmark_finding(cases, &shapes, on_cpu), deterministic_finding(cases, &shapes, on_cpu)]
}

/// The ok case's time per call.
fn per_call(c: &CaseResult) -> Option<f64> {
    c.metrics.get("time_per_call_ns").copied()
}

/// cudnn.benchmark finds faster algorithms: on a shape, benchmark mode is at
/// least 5 % faster than off mode at the ends of their timing intervals.
fn benchmark_finding(cases: &[CaseResult], shapes: &[&str], on_cpu: &str) -> Finding {
    let (mut faster, mut slower, mut same, mut unclear, mut lines) = (0, 0, 0, 0, Vec::new());
    for &s in shapes {
        let (Some(off), Some(bench)) = (find(cases, s, TuneMode::Off), find(cases, s, TuneMode::Benchmark)) else {
            continue;
        };
        let (Some(off_ns), Some(bench_ns)) = (per_call(off), per_call(bench)) else { continue };
        let (off_algo, bench_algo) = (algorithm_of(off).unwrap_or("?"), algorithm_of(bench).unwrap_or("?"));
        let speedup = off_ns / bench_ns;
        let verdict = if off_algo == bench_algo {
            same += 1;
            "the same algorithm, timed once".to_owned()
        } else {
            match (faster_by(bench, off), faster_by(off, bench)) {
                (Margin::Clear, _) => {
                    faster += 1;
                    format!("{speedup:.2}× faster")
                }
                (_, Margin::Clear) => {
                    slower += 1;
                    format!("{:.2}× slower", 1.0 / speedup)
                }
                (Margin::Excluded, _) => {
                    same += 1;
                    format!("{speedup:.2}×: not 5 % faster")
                }
                _ => {
                    unclear += 1;
                    format!("{speedup:.2}×: the timings' spread cannot tell whether it is 5 % faster")
                }
            }
        };
        let tuning = bench.metrics.get("tuning_ns").map(|&t| fmt_ns(t)).unwrap_or_else(|| "?".into());
        let payback = match bench.metrics.get("payback_calls_count") {
            Some(calls) => format!("pays back after {calls} calls"),
            None => "never pays back".into(),
        };
        lines.push(format!(
            "{s}: off {off_algo} {} → benchmark {bench_algo} {} ({verdict}; tuning {tuning}, {payback})",
            fmt_ns(off_ns),
            fmt_ns(bench_ns)
        ));
    }
    let compared = faster + slower + same + unclear;
    let verdict = match (compared, faster, slower, unclear) {
        (0, ..) => Verdict::Inconclusive,
        (_, 0, _, 0) => Verdict::DoesNotHold,
        (_, f, 0, _) if f > 0 => Verdict::Holds,
        _ => Verdict::Inconclusive,
    };
    let summary = if compared == 0 {
        "No shape completed both its off and its benchmark case.".to_owned()
    } else {
        format!(
            "Benchmark mode was at least 5 % faster than off mode on {faster} of {compared} shapes, slower on \
             {slower}, not 5 % faster on {same}, and too spread to tell on {unclear} (the rule compares its slow \
             quartile with off mode's fast one). "
        )
    };
    Finding {
        claim: "cudnn.benchmark finds faster algorithms".into(),
        verdict,
        evidence: format!("{summary}{on_cpu}{}.", lines.join("; ")),
    }
}

/// cudnn.deterministic costs speed: it rules out the fastest algorithm when
/// that one is not reproducible.
fn deterministic_finding(cases: &[CaseResult], shapes: &[&str], on_cpu: &str) -> Finding {
    let (mut excluded, mut untuned, mut unclear_det, mut compared_det, mut det_lines) = (0, 0, 0, 0, Vec::new());
    for &s in shapes {
        let (Some(det), Some(bench)) = (find(cases, s, TuneMode::Deterministic), find(cases, s, TuneMode::Benchmark))
        else {
            continue;
        };
        let (Some(det_ns), Some(bench_ns)) = (per_call(det), per_call(bench)) else { continue };
        compared_det += 1;
        let (det_algo, bench_algo) = (algorithm_of(det).unwrap_or("?"), algorithm_of(bench).unwrap_or("?"));
        let ratio = det_ns / bench_ns;
        let why = if det_algo == bench_algo {
            "the same algorithm, timed once".to_owned()
        } else {
            match faster_by(bench, det) {
                Margin::Excluded => format!("{ratio:.2}×: not 5 % slower"),
                Margin::Unclear => {
                    unclear_det += 1;
                    format!("{ratio:.2}×: the timings' spread cannot tell whether it is 5 % slower")
                }
                Margin::Clear if choice_reproducible(bench) == Some(false) => {
                    excluded += 1;
                    format!(
                        "{ratio:.2}× slower: {bench_algo} is not reproducible, so deterministic mode may not use it"
                    )
                }
                Margin::Clear => {
                    untuned += 1;
                    format!(
                        "{ratio:.2}× slower although {bench_algo} is reproducible: deterministic mode does not time \
                         the candidates, it takes the heuristic's pick"
                    )
                }
            }
        };
        det_lines.push(format!(
            "{s}: deterministic {det_algo} {} vs benchmark {bench_algo} {} ({why})",
            fmt_ns(det_ns),
            fmt_ns(bench_ns)
        ));
    }
    let slower_det = excluded + untuned;
    Finding {
        claim: "cudnn.deterministic = True can make ops slower (it rules out the fastest, non-reproducible algorithms)"
            .into(),
        verdict: match (compared_det, excluded, unclear_det) {
            (0, ..) => Verdict::Inconclusive,
            (_, 0, 0) => Verdict::DoesNotHold,
            (_, 0, _) => Verdict::Inconclusive,
            _ => Verdict::Holds,
        },
        evidence: if compared_det == 0 {
            "No shape completed both its deterministic and its benchmark case.".into()
        } else {
            let those = |n: usize| if n == 1 { "that shape".to_owned() } else { format!("those {n} shapes") };
            let reason = match (excluded, untuned) {
                (0, 0) => "On no shape did it lose the fastest algorithm for not being reproducible.".to_owned(),
                (e, 0) => {
                    format!("The reason is the claim's: on {} the fastest algorithm is not reproducible.", those(e))
                }
                (0, u) => format!(
                    "The reason is not the claim's: on {} the fastest algorithm was reproducible, so deterministic \
                     mode could have run it; it was slower because it does not time the candidates (it takes the \
                     heuristic's pick, as off mode does), which is not the cost the claim names.",
                    those(u)
                ),
                (e, u) => format!(
                    "On {e} of them the reason is the claim's: the fastest algorithm is not reproducible. On {u} the \
                     fastest was reproducible and deterministic mode was slower only for not timing the candidates."
                ),
            };
            format!(
                "Deterministic mode was at least 5 % slower than benchmark mode (comparing its fast quartile with \
                 benchmark's slow one) on {slower_det} of {compared_det} shapes. {reason} {on_cpu}{}.",
                det_lines.join("; ")
            )
        },
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::suite::testing::quick_cpu_context;

    use crate::runner::run_suite;
    use crate::schema::Outcome;
    use crate::suite::NoProgress;

    /// The tests that change the global mode run one at a time, so each can
    /// check that the mode it found is the one left.
    fn serial() -> MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tiny shapes: a debug build runs them in milliseconds.
    fn tiny_suite() -> AutotuneSuite {
        use ConvPass::{BackwardWeight, Forward};
        AutotuneSuite {
            shapes: Some(vec![
                Shape { name: "conv_3x3", problem: conv(Forward, 1, 16, 8, 16, 3, 1, 1), about: "tiny 3×3" },
                Shape { name: "conv_1x1", problem: conv(Forward, 1, 8, 8, 4, 1, 1, 0), about: "tiny 1×1" },
                Shape {
                    name: "conv_grad_weight",
                    problem: conv(BackwardWeight, 2, 4, 8, 4, 3, 1, 1),
                    about: "tiny weight gradient",
                },
                Shape { name: "matmul", problem: Problem::Matmul(MatmulShape::new(8, 8, 512)), about: "tiny skinny" },
            ]),
        }
    }

    #[test]
    fn quick_cpu_run_is_sane_and_restores_the_mode() {
        let _tuner = crate::suite::testing::tuner_lock();
        let _serial = serial();
        let ctx = quick_cpu_context();
        let before = autotune::global().mode();
        let r = run_suite(&tiny_suite(), &ctx, &NoProgress);
        assert_eq!(autotune::global().mode(), before, "the autotuner's mode is restored");
        let shapes = tiny_suite().shapes.unwrap();
        assert_eq!(r.cases.len(), 3 * shapes.len());
        for c in &r.cases {
            let shape = shapes.iter().find(|s| s.name == c.params["shape"]).unwrap();
            assert_eq!(c.outcome, Outcome::Ok, "{}: {:?}", c.name, c.outcome);
            let t = c.timing.as_ref().expect("timed");
            assert_eq!(t.samples_ns.len(), 3);
            assert!(t.median_ns > 0.0);
            for (k, v) in &c.metrics {
                assert!(v.is_finite(), "{}: {k} = {v}", c.name);
                let signed = k == "saved_per_call_ns";
                assert!(signed || *v > 0.0, "{}: {k} = {v}", c.name);
                assert!(["_ns", "_ratio", "_count", "_gflops"].iter().any(|u| k.ends_with(u)), "{k} has no unit");
            }
            let names = shape.problem.algorithm_names();
            let algo = algorithm_of(c).expect("an algorithm note");
            assert!(names.contains(&algo), "{}: {algo} is not one of {names:?}", c.name);
            match c.params["mode"].as_str().unwrap() {
                "off" => {
                    assert_eq!(algo, shape.problem.heuristic(), "off mode runs the heuristic");
                }
                "benchmark" => {
                    assert!(c.metrics["tuning_ns"] > 0.0);
                    assert!(c.metrics["candidates_count"] >= 2.0, "{}", c.name);
                    assert!(
                        c.metrics.contains_key(&format!("candidate_{algo}_median_ns")),
                        "the choice was a candidate"
                    );
                    assert!(c.metrics.contains_key("speedup_vs_off_ratio"));
                    let reproducible = shape.problem.is_reproducible(algo);
                    assert_eq!(choice_reproducible(c), Some(reproducible), "{}", c.name);
                    let payback = c.notes.iter().find(|n| n.starts_with("pays back")).expect("a payback note");
                    assert_eq!(c.metrics.contains_key("payback_calls_count"), !payback.contains("never"), "{payback}");
                }
                "deterministic" => {
                    assert!(shape.problem.is_reproducible(algo), "{}: {algo} is not reproducible", c.name);
                    assert!(c.metrics.contains_key("vs_benchmark_ratio"));
                }
                m => panic!("unknown mode {m}"),
            }
        }
        assert_eq!(r.findings.len(), 2);
        let f = &r.findings[0];
        assert_eq!(f.claim, "cudnn.benchmark finds faster algorithms");
        assert_ne!(f.verdict, Verdict::NotApplicable);
        assert!(f.evidence.contains("CPU algorithms"), "{}", f.evidence);
        assert!(f.evidence.contains("conv_3x3: off"), "{}", f.evidence);
    }

    #[test]
    fn a_failing_case_restores_the_mode() {
        let _tuner = crate::suite::testing::tuner_lock();
        let _serial = serial();
        let before = autotune::global().mode();
        let shape = Shape {
            name: "bad",
            problem: conv(ConvPass::Forward, 1, 2, 2, 2, 5, 1, 0),
            about: "a kernel that does not fit",
        };
        let shared = Shared::default();
        let err = run_case(&quick_cpu_context(), shape, TuneMode::Benchmark, &shared).unwrap_err();
        assert!(!err.to_string().is_empty());
        assert_eq!(autotune::global().mode(), before);
    }

    #[test]
    fn a_simulated_benchmark_case_counts_the_timed_runs_choice_and_never_tunes() {
        let _tuner = crate::suite::testing::tuner_lock();
        let _serial = serial();
        let shape = Shape {
            name: "pinned",
            problem: Problem::Matmul(MatmulShape::new(8, 8, 2_048)),
            about: "a product no other test tunes",
        };
        let mut simulated = quick_cpu_context();
        simulated.harness.simulated = true;
        let is_this = |r: &TuningRecord| r.key.problem.contains(&shape.problem.key_problem());
        let tunings = || autotune::global().records().iter().filter(|r| is_this(r)).count();

        // Before any timed run chose: the case fails, naming why, and tunes nothing.
        let before = tunings();
        let err = run_case(&simulated, shape, TuneMode::Benchmark, &Shared::default()).unwrap_err();
        assert!(err.to_string().contains("no benchmark-mode choice of the timed run for pinned"), "{err}");
        assert_eq!(tunings(), before);

        // The timed run tunes; the simulated case then counts that choice, one call, without tuning.
        let timed = run_case(&quick_cpu_context(), shape, TuneMode::Benchmark, &Shared::default()).unwrap();
        let tuned = tunings();
        let out = run_case(&simulated, shape, TuneMode::Benchmark, &Shared::default()).unwrap();
        assert_eq!(tunings(), tuned, "a simulated case never tunes");
        let algorithm = |notes: &[String]| notes.iter().find(|n| n.starts_with(ALGORITHM_NOTE)).cloned();
        assert_eq!(algorithm(&out.notes), algorithm(&timed.notes));
        // The gate compares two runs' figures only where both counted the same choice.
        let chosen = algorithm(&timed.notes).unwrap();
        assert_eq!(out.timed_choice.as_deref(), chosen.strip_prefix(ALGORITHM_NOTE));
        let timing = out.timing.expect("timed");
        assert_eq!((timing.samples_ns.len(), timing.clock.as_str()), (1, "simulated"));
    }

    #[test]
    fn a_shape_tuned_before_is_tuned_again_from_cold() {
        let _tuner = crate::suite::testing::tuner_lock();
        let _serial = serial();
        let ctx = quick_cpu_context();
        let shape = Shape {
            name: "retuned",
            problem: conv(ConvPass::Forward, 1, 4, 6, 4, 3, 1, 1),
            about: "tiny 3×3 run twice",
        };
        let shared = Shared::default();
        let first = run_case(&ctx, shape, TuneMode::Benchmark, &shared).unwrap();
        let second = run_case(&ctx, shape, TuneMode::Benchmark, &shared).unwrap();
        assert!(first.metrics["tuning_ns"] > 0.0 && second.metrics["tuning_ns"] > 0.0);
        assert!(second.notes.iter().any(|n| n.contains("already tuned")), "{:?}", second.notes);
        assert!(second.notes.iter().any(|n| n.starts_with("payback unknown")), "no off case ran: {:?}", second.notes);
    }

    #[test]
    fn modes_that_run_the_same_algorithm_share_one_timing() {
        let _tuner = crate::suite::testing::tuner_lock();
        let _serial = serial();
        let ctx = quick_cpu_context();
        // A 1×1 forward: off and deterministic both run the heuristic's reproducible choice.
        let shape = Shape { name: "shared", problem: conv(ConvPass::Forward, 1, 8, 8, 4, 1, 1, 0), about: "1×1" };
        let shared = Shared::default();
        let off = run_case(&ctx, shape, TuneMode::Off, &shared).unwrap();
        let det = run_case(&ctx, shape, TuneMode::Deterministic, &shared).unwrap();
        let algo = |o: &CaseOutput| o.notes[0].clone();
        assert_eq!(algo(&off), algo(&det));
        assert_eq!(off.timing, det.timing, "one kernel, one time");
        assert_eq!(det.metrics["vs_off_ratio"], 1.0);
        assert!(
            det.notes.iter().any(|n| n.starts_with("timing shared: off mode ran the same algorithm")),
            "{:?}",
            det.notes
        );
        assert!(!off.notes.iter().any(|n| n.starts_with(SHARED_NOTE)));
    }

    #[test]
    fn payback_is_tuning_cost_over_saving() {
        assert_eq!(payback_calls(1e6, 2e4, 1e4), Some(100.0));
        assert_eq!(payback_calls(1e6, 3e4, 1e4), Some(50.0));
        assert_eq!(payback_calls(1e6, 1e4, 1e4), None, "no saving: never");
        assert_eq!(payback_calls(1e6, 1e4, 2e4), None, "slower: never");
    }

    fn result(shape: &str, mode: TuneMode, algo: &str, ns: f64, extra: &[(&str, f64)]) -> CaseResult {
        let mut metrics: BTreeMap<String, f64> = extra.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        metrics.insert("time_per_call_ns".into(), ns);
        CaseResult::ok(format!("{shape}/{}", mode_name(mode)))
            .with_params([("shape".into(), shape.into()), ("mode".into(), mode_name(mode).into())])
            .with_metrics(metrics)
            .with_notes(vec![format!("{ALGORITHM_NOTE}{algo}")])
            .with_duration_ns(1)
    }

    #[test]
    fn findings_follow_the_evidence() {
        let ctx = quick_cpu_context();
        let faster = vec![
            result("a", TuneMode::Off, "im2col_gemm", 2e6, &[]),
            result("a", TuneMode::Benchmark, "direct", 1e6, &[("tuning_ns", 5e7), ("payback_calls_count", 50.0)]),
            result("a", TuneMode::Deterministic, "im2col_gemm", 2e6, &[]),
            result("b", TuneMode::Off, "gemm_1x1", 1e6, &[]),
            result("b", TuneMode::Benchmark, "gemm_1x1", 1e6, &[("tuning_ns", 5e7)]),
        ];
        let f = findings(&ctx, &faster);
        assert_eq!(f[0].verdict, Verdict::Holds, "{}", f[0].evidence);
        assert!(
            f[0].evidence.contains("faster than off mode on 1 of 2 shapes, slower on 0, not 5 % faster on 1"),
            "{}",
            f[0].evidence
        );
        assert!(f[0].evidence.contains("pays back after 50 calls"), "{}", f[0].evidence);
        assert!(f[0].evidence.contains("never pays back"), "{}", f[0].evidence);
        // Deterministic is 2× slower on a, but benchmark's choice there is
        // reproducible: that is not the cost of determinism, and the evidence says why in words.
        assert_eq!(f[1].verdict, Verdict::DoesNotHold, "{}", f[1].evidence);
        assert!(
            f[1].evidence.starts_with(
                "Deterministic mode was at least 5 % slower than benchmark mode (comparing its fast quartile with \
                 benchmark's slow one) on 1 of 1 shapes. The reason is not the claim's: on that shape the fastest \
                 algorithm was reproducible, so deterministic mode could have run it; it was slower because it does \
                 not time the candidates"
            ),
            "{}",
            f[1].evidence
        );

        let mut split = result("d", TuneMode::Benchmark, "im2col_gemm_batch_split", 1e6, &[("tuning_ns", 5e7)]);
        split.notes.push(format!("{REPRODUCIBLE_NOTE}no"));
        let excluded = [
            faster.clone(),
            vec![
                result("d", TuneMode::Off, "im2col_gemm", 1.5e6, &[]),
                split,
                result("d", TuneMode::Deterministic, "im2col_gemm", 1.5e6, &[]),
            ],
        ]
        .concat();
        let f = findings(&ctx, &excluded);
        assert_eq!(f[1].verdict, Verdict::Holds, "{}", f[1].evidence);
        assert!(
            f[1].evidence.contains(
                "on 2 of 2 shapes. On 1 of them the reason is the claim's: the fastest algorithm is not reproducible."
            ),
            "{}",
            f[1].evidence
        );
        // The margin at the intervals' ends: 2 ms against 1 ms with quartiles of 0.5 to 4 ms
        // cannot tell 5 % apart, so the benchmark claim is inconclusive, not "holds".
        let mut spread = faster.clone();
        for c in spread.iter_mut().take(2) {
            let m = c.metrics["time_per_call_ns"];
            let mut t = crate::harness::summarize(vec![m; 3], 1, "host");
            (t.p25_ns, t.p75_ns) = (m / 2.0, m * 2.0);
            c.timing = Some(t);
        }
        let f = findings(&ctx, &spread);
        assert_eq!(f[0].verdict, Verdict::Inconclusive, "{}", f[0].evidence);
        assert!(f[0].evidence.contains("2.00×: the timings' spread cannot tell whether it is 5 % faster"));

        let never = vec![
            result("a", TuneMode::Off, "im2col_gemm", 1e6, &[]),
            result("a", TuneMode::Benchmark, "direct", 1.5e6, &[("tuning_ns", 5e7)]),
            result("a", TuneMode::Deterministic, "direct", 1.5e6, &[]),
        ];
        let f = findings(&ctx, &never);
        assert_eq!(f[0].verdict, Verdict::DoesNotHold, "{}", f[0].evidence);
        assert!(f[0].evidence.contains("1.50× slower"), "{}", f[0].evidence);
        assert_eq!(f[1].verdict, Verdict::DoesNotHold);

        let mixed = [
            faster.clone(),
            vec![
                result("c", TuneMode::Off, "im2col_gemm", 1e6, &[]),
                result("c", TuneMode::Benchmark, "direct", 2e6, &[("tuning_ns", 5e7)]),
            ],
        ]
        .concat();
        assert_eq!(findings(&ctx, &mixed)[0].verdict, Verdict::Inconclusive);

        let f = findings(&ctx, &[]);
        assert_eq!((f[0].verdict, f[1].verdict), (Verdict::Inconclusive, Verdict::Inconclusive));
    }

    #[test]
    fn builtin_shapes_are_valid_and_named_uniquely() {
        for quick in [true, false] {
            let shapes = builtin_shapes(quick);
            let mut names: Vec<_> = shapes.iter().map(|s| s.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), shapes.len());
            for s in &shapes {
                assert!(s.problem.flops() > 0.0, "{}", s.name);
                assert!(s.problem.algorithm_names().contains(&s.problem.heuristic()));
            }
        }
        assert!(builtin_shapes(true).len() < builtin_shapes(false).len());
    }
}
