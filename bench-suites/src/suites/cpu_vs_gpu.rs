//! `cpu-vs-gpu`: matmul, an elementwise op, conv2d and a full MLP training step
//! over sizes from tiny to large, on the CPU and (where there is one) the GPU:
//! time, throughput, speedup, and the crossover size below which the GPU loses
//! (the guides' "tiny model" pitfall).
//!
//! Without a GPU the CPU side runs and the GPU side is one case per op, marked
//! not available with the reason.

mod charts;

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};

use vramlab_engine::device::Device;
use vramlab_engine::tensor::{Conv2dOptions, DType, Tensor, TensorError};
use vramlab_train::{self as nn, Module, Optimizer};

use crate::harness::measure;
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `cpu-vs-gpu` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuVsGpuSuite;

/// The operations compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Matmul,
    Elementwise,
    Conv2d,
    MlpStep,
}

const OPS: [Op; 4] = [Op::Matmul, Op::Elementwise, Op::Conv2d, Op::MlpStep];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Matmul => "matmul",
            Op::Elementwise => "add",
            Op::Conv2d => "conv2d",
            Op::MlpStep => "mlp_train_step",
        }
    }

    fn from_name(name: &str) -> Option<Op> {
        OPS.into_iter().find(|o| o.name() == name)
    }
}

/// The shape of one workload.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dims {
    /// `[n, n] · [n, n]`.
    Matmul { n: usize },
    /// `a + b` over `n` f32 elements.
    Elementwise { n: usize },
    /// 3×3 convolution, padding 1: input `[n, c, h, w]`, `k` filters.
    Conv { n: usize, c: usize, hw: usize, k: usize },
    /// A training step (forward, MSE loss, backward, SGD) of an MLP
    /// `input → hidden → hidden → output` on a batch.
    Mlp { batch: usize, input: usize, hidden: usize, output: usize },
}

impl Dims {
    fn op(self) -> Op {
        match self {
            Dims::Matmul { .. } => Op::Matmul,
            Dims::Elementwise { .. } => Op::Elementwise,
            Dims::Conv { .. } => Op::Conv2d,
            Dims::Mlp { .. } => Op::MlpStep,
        }
    }

    fn label(self) -> String {
        match self {
            Dims::Matmul { n } => format!("{n}x{n}x{n}"),
            Dims::Elementwise { n } => format!("{n}"),
            Dims::Conv { n, c, hw, k } => format!("n{n}_c{c}_{hw}x{hw}_k{k}"),
            Dims::Mlp { batch, input, hidden, output } => format!("b{batch}_{input}-{hidden}-{hidden}-{output}"),
        }
    }

    /// Floating-point operations of one iteration.
    fn flops(self) -> f64 {
        match self {
            Dims::Matmul { n } => 2.0 * (n as f64).powi(3),
            Dims::Elementwise { n } => n as f64,
            Dims::Conv { n, c, hw, k } => 2.0 * (n * k * c * 9 * hw * hw) as f64,
            Dims::Mlp { batch, input, hidden, output } => {
                // The matmuls: forward 2·b·Σ(in·out); backward the same for the weight
                // gradients and again for the input gradients, which the first layer skips.
                let macs = (input * hidden + hidden * hidden + hidden * output) as f64;
                2.0 * batch as f64 * (3.0 * macs - (input * hidden) as f64)
            }
        }
    }

    /// Bytes an iteration reads and writes at least (elementwise: the memory-bound case).
    fn bytes(self) -> Option<f64> {
        match self {
            Dims::Elementwise { n } => Some(12.0 * n as f64),
            _ => None,
        }
    }
}

/// Sizes from tiny to large, per op.
fn workloads(quick: bool) -> Vec<Dims> {
    let mut w = Vec::new();
    let matmul: &[usize] = if quick { &[8, 64, 512] } else { &[8, 32, 128, 512, 1024] };
    w.extend(matmul.iter().map(|&n| Dims::Matmul { n }));
    let elementwise: &[usize] =
        if quick { &[1 << 10, 1 << 16, 1 << 22] } else { &[1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24] };
    w.extend(elementwise.iter().map(|&n| Dims::Elementwise { n }));
    let conv: &[(usize, usize, usize, usize)] = if quick {
        &[(1, 3, 8, 8), (1, 16, 32, 16), (4, 32, 32, 32)]
    } else {
        &[(1, 3, 8, 8), (1, 16, 32, 16), (8, 32, 32, 32), (16, 64, 56, 64)]
    };
    w.extend(conv.iter().map(|&(n, c, hw, k)| Dims::Conv { n, c, hw, k }));
    let mlp: &[(usize, usize, usize, usize)] = if quick {
        &[(8, 32, 32, 10), (64, 256, 256, 10)]
    } else {
        &[(8, 32, 32, 10), (32, 128, 128, 10), (64, 784, 512, 10), (256, 784, 1024, 10)]
    };
    w.extend(mlp.iter().map(|&(batch, input, hidden, output)| Dims::Mlp { batch, input, hidden, output }));
    w
}

/// CPU medians (ns) by op and size index, for the GPU cases' speedups.
type Medians = Arc<Mutex<HashMap<(Op, usize), f64>>>;

/// The GPU to compare with, or why there is none.
fn gpu(ctx: &Context) -> Result<Device, String> {
    if ctx.device.is_cpu() {
        Err(ctx.gpu_unavailable.clone().unwrap_or_else(|| "the run targets the cpu".to_owned()))
    } else {
        Ok(ctx.device.clone())
    }
}

impl Suite for CpuVsGpuSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "cpu-vs-gpu"
    }

    fn description(&self) -> &'static str {
        "The GPU beats the CPU except for tiny work: matmul, an elementwise add, conv2d and an MLP training step from \
         tiny to large on every available device — time, GFLOP/s, speedup and the crossover size"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let work = workloads(ctx.quick());
        let cpu_medians: Medians = Arc::default();
        let mut cases = Vec::new();
        let cpu = Device::cpu();
        for (_, index, dims) in indexed(&work) {
            cases.push(op_case(dims, index, &cpu, "cpu", None, cpu_medians.clone()));
        }
        match gpu(ctx) {
            Err(reason) => {
                for op in OPS {
                    let reason = format!("no GPU: {reason}");
                    cases.push(
                        Case::new(format!("{}/gpu", op.name()), move |_| Ok(CaseOutput::not_available(reason)))
                            .param("op", op.name())
                            .param("device", "gpu"),
                    );
                }
            }
            Ok(gpu) => {
                let gpu_medians: Medians = Arc::default();
                for (_, index, dims) in indexed(&work) {
                    let speedup = Some(cpu_medians.clone());
                    cases.push(op_case(dims, index, &gpu, "gpu", speedup, gpu_medians.clone()));
                }
                for op in OPS {
                    let sizes: Vec<Dims> = work.iter().copied().filter(|d| d.op() == op).collect();
                    let (cpu_m, gpu_m) = (cpu_medians.clone(), gpu_medians.clone());
                    cases.push(
                        Case::new(format!("{}/crossover", op.name()), move |_| {
                            Ok(crossover_case(op, &sizes, &cpu_m, &gpu_m))
                        })
                        .param("op", op.name())
                        .without_profiling(),
                    );
                }
            }
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        let no_gpu = gpu(ctx).err();
        OPS.into_iter().map(|op| finding(no_gpu.as_deref(), op, cases)).collect()
    }
}

/// The workloads with their op and index among that op's sizes.
fn indexed(work: &[Dims]) -> Vec<(Op, usize, Dims)> {
    let mut counts: HashMap<Op, usize> = HashMap::new();
    work.iter()
        .map(|&d| {
            let i = counts.entry(d.op()).or_default();
            *i += 1;
            (d.op(), *i - 1, d)
        })
        .collect()
}

fn op_case(
    dims: Dims,
    index: usize,
    device: &Device,
    side: &'static str,
    cpu: Option<Medians>,
    store: Medians,
) -> Case {
    let op = dims.op();
    let device = device.clone();
    let name = format!("{}/{side}/{}", op.name(), dims.label());
    Case::new(name, move |ctx| {
        let out = run_op(ctx, dims, &device)?;
        if let Some(t) = &out.timing {
            store.lock().unwrap_or_else(|e| e.into_inner()).insert((op, index), t.median_ns);
        }
        let Some(cpu) = cpu else { return Ok(out) };
        let cpu_ns = cpu.lock().unwrap_or_else(|e| e.into_inner()).get(&(op, index)).copied();
        let gpu_ns = out.timing.as_ref().map_or(0.0, |t| t.median_ns);
        Ok(match cpu_ns {
            Some(c) if gpu_ns > 0.0 => out.metric("speedup_vs_cpu_ratio", c / gpu_ns),
            _ => out,
        })
    })
    .param("op", op.name())
    .param("device", side)
    .param("size", dims.label())
    .param("size_index", index)
    .param("flops", dims.flops())
}

/// Builds the operands on `device` and times one op (synchronized).
fn run_op(ctx: &Context, dims: Dims, device: &Device) -> Result<CaseOutput, CaseError> {
    let seed = ctx.seed();
    let stats = match dims {
        Dims::Matmul { n } => {
            let a = Tensor::randn(&[n, n], DType::F32, seed, device)?;
            let b = Tensor::randn(&[n, n], DType::F32, seed + 1, device)?;
            measure(&ctx.harness, || sync(device, a.matmul(&b)?))?
        }
        Dims::Elementwise { n } => {
            let a = Tensor::randn(&[n], DType::F32, seed, device)?;
            let b = Tensor::randn(&[n], DType::F32, seed + 1, device)?;
            measure(&ctx.harness, || sync(device, a.add(&b)?))?
        }
        Dims::Conv { n, c, hw, k } => {
            let x = Tensor::randn(&[n, c, hw, hw], DType::F32, seed, device)?;
            let w = Tensor::randn(&[k, c, 3, 3], DType::F32, seed + 1, device)?;
            let opts = Conv2dOptions::new(1, 1);
            measure(&ctx.harness, || sync(device, x.conv2d(&w, opts)?))?
        }
        Dims::Mlp { batch, input, hidden, output } => {
            let mut model = nn::mlp(&[input, hidden, hidden, output], seed, device)?;
            let mut opt = nn::Sgd::with_momentum(0.01, 0.9);
            let x = Tensor::randn(&[batch, input], DType::F32, seed + 1, device)?;
            let target = Tensor::randn(&[batch, output], DType::F32, seed + 2, device)?;
            measure(&ctx.harness, || {
                opt.zero_grad(&mut model, true)?;
                let y = model.forward(&x)?;
                let loss = nn::mse(&y, &target)?;
                loss.backward(&mut model)?;
                opt.step(&mut model)?;
                device.synchronize().map_err(vramlab_engine::tensor::TensorError::from)?;
                Ok::<(), nn::NnError>(())
            })?
        }
    };
    let flops = dims.flops();
    let mut out = CaseOutput::timed(stats.clone())
        .metric("throughput_gflops", if stats.median_ns > 0.0 { flops / stats.median_ns } else { 0.0 });
    if let Dims::Mlp { .. } = dims {
        out = out.note(
            "one step: zero_grad(set_to_none), forward, MSE loss, backward, SGD (momentum 0.9); GFLOP/s counts the \
             matmuls only",
        );
    }
    if let Some(bytes) = dims.bytes() {
        out = out.metric("bandwidth_gbps", if stats.median_ns > 0.0 { bytes / stats.median_ns } else { 0.0 });
    }
    Ok(out)
}

/// Waits for the device, then drops the result.
fn sync(device: &Device, t: Tensor) -> Result<(), TensorError> {
    device.synchronize()?;
    black_box(t);
    Ok(())
}

/// Where the GPU starts winning for good, from `pairs` of (FLOP per call, CPU
/// ns, GPU ns) by increasing size.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Crossing {
    /// The GPU wins at every size tried: the lines cross below the smallest.
    Below,
    /// The CPU wins (or ties) at `pairs[index - 1]` and the GPU at `index` and
    /// every larger size; the time lines cross at `flops` between the two.
    Between { index: usize, flops: f64 },
    /// The GPU does not win at the largest size (or no size ran on both).
    Never,
}

/// The crossing of the CPU's and the GPU's time lines, interpolated between
/// the last size the CPU wins and the first from which the GPU always wins:
/// on log axes (as the chart draws them) each line is straight between two
/// sizes, so the crossing is where log(CPU time ÷ GPU time) reaches zero,
/// linear in log FLOP.
fn crossover(pairs: &[(f64, f64, f64)]) -> Crossing {
    match pairs.iter().rposition(|&(_, cpu, gpu)| gpu >= cpu) {
        None if pairs.is_empty() => Crossing::Never,
        None => Crossing::Below,
        Some(i) if i + 1 < pairs.len() => {
            let ((f0, c0, g0), (f1, c1, g1)) = (pairs[i], pairs[i + 1]);
            let (r0, r1) = ((c0 / g0).ln(), (c1 / g1).ln());
            let t = if r1 > r0 && r0.is_finite() && r1.is_finite() { (-r0 / (r1 - r0)).clamp(0.0, 1.0) } else { 1.0 };
            let flops = if f0 > 0.0 && f1 > 0.0 { (f0.ln() + t * (f1.ln() - f0.ln())).exp() } else { f1 };
            Crossing::Between { index: i + 1, flops }
        }
        Some(_) => Crossing::Never,
    }
}

/// FLOP with an SI prefix, three significant digits: `8.39 MFLOP`, `512 FLOP`.
fn fmt_flop(f: f64) -> String {
    let (d, p) =
        [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")].into_iter().find(|(d, _)| f >= *d).unwrap_or((1.0, ""));
    let v = f / d;
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {p}FLOP")
}

fn crossover_case(op: Op, sizes: &[Dims], cpu: &Medians, gpu: &Medians) -> CaseOutput {
    let (cpu, gpu) =
        (cpu.lock().unwrap_or_else(|e| e.into_inner()).clone(), gpu.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let pairs: Vec<(f64, f64, f64)> = sizes
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((d.flops(), *cpu.get(&(op, i))?, *gpu.get(&(op, i))?)))
        .collect();
    if pairs.is_empty() {
        return CaseOutput::not_available(format!("no size of {} ran on both devices", op.name()));
    }
    let wins = pairs.iter().filter(|&&(_, c, g)| g < c).count();
    let out =
        CaseOutput::default().metric("gpu_wins_count", wins as f64).metric("sizes_compared_count", pairs.len() as f64);
    match crossover(&pairs) {
        Crossing::Below => out
            .metric("crossover_flop_count", pairs[0].0)
            .note(format!("the GPU wins at every size tried, from {} per call up", fmt_flop(pairs[0].0))),
        Crossing::Between { index, flops } => out.metric("crossover_flop_count", flops).note(format!(
            "the CPU wins at {} per call and the GPU from {} up; the time lines cross near {} (interpolated on log \
             axes)",
            fmt_flop(pairs[index - 1].0),
            fmt_flop(pairs[index].0),
            fmt_flop(flops)
        )),
        Crossing::Never => out.note("the GPU does not win at the largest size tried"),
    }
}

/// The verdict on `op`; `no_gpu` is why there is no GPU, when there is none.
fn finding(no_gpu: Option<&str>, op: Op, cases: &[CaseResult]) -> Finding {
    let claim = format!(
        "{}: the GPU is faster than the CPU except for tiny work, where launch and transfer overheads dominate",
        op.name()
    );
    let side = |c: &CaseResult, s: &str| {
        c.params.get("op").and_then(|v| v.as_str()).and_then(Op::from_name) == Some(op)
            && c.params.get("device").and_then(|v| v.as_str()) == Some(s)
    };
    let timed = |s: &str| -> Vec<(usize, String, f64, f64)> {
        let mut v: Vec<_> = cases
            .iter()
            .filter(|c| side(c, s) && c.outcome.is_ok())
            .filter_map(|c| {
                let t = c.timing.as_ref()?;
                let i = c.params.get("size_index")?.as_u64()? as usize;
                let label = c.params.get("size")?.as_str()?.to_owned();
                Some((i, label, c.params.get("flops")?.as_f64()?, t.median_ns))
            })
            .collect();
        v.sort_by_key(|x| x.0);
        v
    };
    let cpu = timed("cpu");
    let describe = |v: &[(usize, String, f64, f64)]| {
        v.iter()
            .map(|(_, l, f, ns)| format!("{l}: {:.3} ms, {:.2} GFLOP/s", ns / 1e6, f / ns))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if let Some(reason) = no_gpu {
        let cpu_side = if cpu.is_empty() {
            let why = cases
                .iter()
                .find(|c| side(c, "cpu"))
                .and_then(|c| match &c.outcome {
                    crate::schema::Outcome::NotAvailable { reason } => Some(reason.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| "no cpu case succeeded".to_owned());
            format!("the cpu side did not run either: {why}")
        } else {
            format!("the cpu side ran: {}", describe(&cpu))
        };
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!("no GPU to compare with ({reason}); {cpu_side}"),
        };
    }
    let gpu_side = timed("gpu");
    let pairs: Vec<(f64, f64, f64)> =
        cpu.iter().filter_map(|(i, _, f, c)| gpu_side.iter().find(|g| g.0 == *i).map(|g| (*f, *c, g.3))).collect();
    let labels: Vec<&str> =
        cpu.iter().filter(|(i, ..)| gpu_side.iter().any(|g| g.0 == *i)).map(|(_, l, ..)| l.as_str()).collect();
    if pairs.len() < 2 {
        return Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!("only {} size(s) ran on both devices", pairs.len()),
        };
    }
    let speedups =
        pairs.iter().zip(&labels).map(|((_, c, g), l)| format!("{l}: {:.2}x", c / g)).collect::<Vec<_>>().join(", ");
    match crossover(&pairs) {
        Crossing::Below => Finding {
            claim,
            verdict: Verdict::Holds,
            evidence: format!(
                "the GPU won at every size tried, so the crossover lies below {} (speedups: {speedups})",
                labels[0]
            ),
        },
        Crossing::Between { index, flops } => Finding {
            claim,
            verdict: Verdict::Holds,
            evidence: format!(
                "the CPU wins up to {} and the GPU from {} up; the time lines cross near {} per call, interpolated \
                 between the two (speedups: {speedups})",
                labels[index - 1],
                labels[index],
                fmt_flop(flops)
            ),
        },
        Crossing::Never => Finding {
            claim,
            verdict: Verdict::DoesNotHold,
            evidence: format!(
                "the GPU does not win even at the largest size, {} (speedups: {speedups})",
                labels[labels.len() - 1]
            ),
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

    #[test]
    fn crossover_is_where_the_gpu_starts_winning_for_good() {
        // (flops, cpu ns, gpu ns)
        assert_eq!(crossover(&[(1.0, 9.0, 5.0), (2.0, 9.0, 5.0)]), Crossing::Below);
        assert_eq!(crossover(&[(1.0, 9.0, 5.0), (2.0, 1.0, 5.0)]), Crossing::Never);
        assert_eq!(crossover(&[]), Crossing::Never);
        // Loses at 1 and 2 (a tie counts as a loss), wins from 3 up.
        let Crossing::Between { index, .. } = crossover(&[(1.0, 1.0, 5.0), (2.0, 5.0, 5.0), (3.0, 9.0, 5.0)]) else {
            panic!("a crossing")
        };
        assert_eq!(index, 2);
        let Crossing::Between { index, .. } = crossover(&[(1.0, 9.0, 5.0), (2.0, 1.0, 5.0), (3.0, 9.0, 5.0)]) else {
            panic!("a crossing")
        };
        assert_eq!(index, 2);
    }

    #[test]
    fn crossover_is_interpolated_in_log_flop_between_the_bracketing_sizes() {
        // CPU 2x faster at 1 MFLOP, GPU 8x faster at 1 GFLOP: log ratios -ln 2 and +3 ln 2,
        // so the lines cross a quarter of the way in log FLOP: 10^(6 + 3/4) = 5.62 MFLOP.
        let pairs = [(1e3, 1.0, 50.0), (1e6, 1e3, 2e3), (1e9, 8e5, 1e5), (1e12, 1e9, 1e6)];
        let Crossing::Between { index, flops } = crossover(&pairs) else { panic!("a crossing") };
        assert_eq!(index, 2);
        assert!((flops - 10f64.powf(6.75)).abs() < 1.0, "{flops}");
        assert_eq!(fmt_flop(flops), "5.62 MFLOP");
        // A tie at the last CPU win: the lines meet right there.
        let Crossing::Between { flops, .. } = crossover(&[(1e3, 5.0, 5.0), (1e6, 9.0, 1.0)]) else { panic!() };
        assert!((flops - 1e3).abs() < 1e-6, "{flops}");
        assert_eq!(fmt_flop(512.0), "512 FLOP");
        assert_eq!(fmt_flop(268e6), "268 MFLOP");
    }

    #[test]
    fn flop_counts() {
        assert_eq!(Dims::Matmul { n: 4 }.flops(), 128.0);
        assert_eq!(Dims::Conv { n: 1, c: 2, hw: 3, k: 4 }.flops(), 2.0 * 4.0 * 2.0 * 9.0 * 9.0);
        assert_eq!(Dims::Elementwise { n: 10 }.bytes(), Some(120.0));
        let mlp = Dims::Mlp { batch: 1, input: 2, hidden: 3, output: 4 };
        // forward 2·(6 + 9 + 12), weight grads the same, input grads without the first layer's 6.
        assert_eq!(mlp.flops(), 2.0 * 27.0 + 2.0 * 27.0 + 2.0 * 21.0);
    }

    #[test]
    fn quick_cpu_run_is_sane() {
        let ctx = quick_cpu_context();
        let r = run_suite(&CpuVsGpuSuite, &ctx, &NoProgress);
        assert_eq!(r.name, "cpu-vs-gpu");
        let work = workloads(true);
        assert_eq!(r.cases.len(), work.len() + OPS.len());
        for c in &r.cases {
            let device = c.params["device"].as_str().unwrap();
            match (&c.outcome, device) {
                (Outcome::Ok, "cpu") => {
                    let t = c.timing.as_ref().unwrap();
                    assert!(t.median_ns > 0.0, "{}", c.name);
                    assert!(c.metrics["throughput_gflops"] > 0.0, "{}", c.name);
                }
                (Outcome::NotAvailable { reason }, "gpu") => {
                    assert!(reason.contains("test context"), "{reason}");
                }
                (o, d) => panic!("{} on {d}: {o:?}", c.name),
            }
        }
        assert!(r.cases.iter().any(|c| c.name == "matmul/cpu/512x512x512" && c.outcome.is_ok()));
        assert!(
            r.cases
                .iter()
                .filter(|c| c.params["op"] == "add")
                .all(|c| c.metrics.get("bandwidth_gbps").is_none_or(|&g| g > 0.0))
        );
        assert_eq!(r.findings.len(), 4);
        for f in &r.findings {
            assert_eq!(f.verdict, Verdict::NotApplicable, "{}", f.claim);
            assert!(f.evidence.contains("test context"), "{}", f.evidence);
        }
        assert!(r.findings[0].evidence.contains("the cpu side ran: 8x8x8"), "{}", r.findings[0].evidence);
    }

    fn result(op: Op, device: &str, index: usize, flops: f64, median_ns: f64) -> CaseResult {
        let mut params = std::collections::BTreeMap::new();
        params.insert("op".into(), op.name().into());
        params.insert("device".into(), device.into());
        params.insert("size_index".into(), index.into());
        params.insert("size".into(), format!("s{index}").into());
        params.insert("flops".into(), flops.into());
        CaseResult::ok(format!("{}/{device}/s{index}", op.name()))
            .with_params(params)
            .with_timing(crate::harness::summarize(vec![median_ns], 1, "host"))
    }

    #[test]
    fn findings_with_a_gpu_name_the_crossover() {
        let cases = vec![
            result(Op::Matmul, "cpu", 0, 1e3, 1e3),
            result(Op::Matmul, "cpu", 1, 1e6, 1e5),
            result(Op::Matmul, "cpu", 2, 1e9, 1e8),
            result(Op::Matmul, "gpu", 0, 1e3, 1e4),
            result(Op::Matmul, "gpu", 1, 1e6, 1e4),
            result(Op::Matmul, "gpu", 2, 1e9, 1e6),
        ];
        let f = finding(None, Op::Matmul, &cases);
        assert_eq!(f.verdict, Verdict::Holds, "{}", f.evidence);
        // CPU 10x faster at 1 kFLOP, GPU 10x faster at 1 MFLOP: the lines cross halfway, at 31.6 kFLOP.
        assert!(
            f.evidence.starts_with(
                "the CPU wins up to s0 and the GPU from s1 up; the time lines cross near 31.6 kFLOP per call, \
                 interpolated between the two (speedups: s0: 0.10x"
            ),
            "{}",
            f.evidence
        );
        let mut slow_gpu = cases.clone();
        slow_gpu[5] = result(Op::Matmul, "gpu", 2, 1e9, 1e9);
        assert_eq!(finding(None, Op::Matmul, &slow_gpu).verdict, Verdict::DoesNotHold);
        let f = finding(Some("no driver"), Op::Matmul, &cases);
        assert_eq!(f.verdict, Verdict::NotApplicable);
        assert!(f.evidence.contains("no driver"), "{}", f.evidence);
    }
}
