//! `async`: one op timed three ways — by a host clock without synchronizing,
//! by a host clock with a synchronize after each call, and by device events —
//! so the pitfall (GPU calls return before the work is done, and an
//! unsynchronized host clock times only the launch) is visible as numbers.
//!
//! The CPU backend runs synchronously: both host timings measure the whole
//! work, and there are no device events; the device-event case says so.

mod charts;

use std::hint::black_box;
use std::sync::{Arc, Mutex};

use vramlab_engine::device::Device;
use vramlab_engine::hooks::{Event, Subscriber};
use vramlab_engine::tensor::{DType, Tensor, TensorError};

use crate::harness::{measure, measure_each, summarize};
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `async` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncTimingSuite;

const CLAIM: &str = "Timing GPU work with a host clock and no synchronize measures the launch, not the work: \
                     synchronize first or use device events";

const CPU_SYNCHRONOUS: &str = "the CPU backend runs synchronously: there is no queue to outrun";

const NO_SYNC: &str = "host_clock/no_sync";
const SYNC: &str = "host_clock/synchronized";
const EVENTS: &str = "device_events";

/// Side of the square matmul timed: large enough that the work dwarfs a launch.
fn matmul_n(ctx: &Context) -> usize {
    match (ctx.device.is_cpu(), ctx.quick()) {
        (true, true) => 256,
        (true, false) => 512,
        (false, true) => 2048,
        (false, false) => 4096,
    }
}

/// Medians (ns) of the cases run so far, by case name.
type Medians = Arc<Mutex<Vec<(&'static str, f64)>>>;

fn recorded(medians: &Medians, name: &str) -> Option<f64> {
    medians.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(n, _)| *n == name).map(|m| m.1)
}

impl Suite for AsyncTimingSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "async"
    }

    fn description(&self) -> &'static str {
        "One op timed by a host clock without synchronization, with it, and by device events: the asynchronous \
         timing pitfall made visible"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let n = matmul_n(ctx);
        let medians: Medians = Arc::default();
        let (m1, m2, m3) = (medians.clone(), medians.clone(), medians);
        let shape = |case: Case| {
            case.param("op", "matmul").param("shape", format!("{n}x{n}x{n}")).param("flops", 2.0 * (n as f64).powi(3))
        };
        vec![
            shape(Case::new(NO_SYNC, move |ctx| host_clock(ctx, n, false, &m1))).param("synchronize", false),
            shape(Case::new(SYNC, move |ctx| host_clock(ctx, n, true, &m2))).param("synchronize", true),
            shape(Case::new(EVENTS, move |ctx| device_events(ctx, n, &m3))),
        ]
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        let no_gpu = ctx
            .device
            .is_cpu()
            .then(|| ctx.gpu_unavailable.clone().unwrap_or_else(|| "the run targets the cpu".to_owned()));
        vec![finding(no_gpu.as_deref(), cases)]
    }
}

fn operands(ctx: &Context, n: usize) -> Result<(Tensor, Tensor), TensorError> {
    Ok((
        Tensor::randn(&[n, n], DType::F32, ctx.seed(), &ctx.device)?,
        Tensor::randn(&[n, n], DType::F32, ctx.seed().wrapping_add(1), &ctx.device)?,
    ))
}

fn host_clock(ctx: &Context, n: usize, synchronize: bool, medians: &Medians) -> Result<CaseOutput, CaseError> {
    let device = &ctx.device;
    let (a, b) = operands(ctx, n)?;
    let stats = if synchronize {
        measure(&ctx.harness, || {
            let y = a.matmul(&b)?;
            device.synchronize()?;
            black_box(y);
            Ok::<(), TensorError>(())
        })?
    } else {
        // Each call is made to an idle device, as the pitfall's `t0; y = f(x);
        // t1` is: back to back, the launch queue would fill and the host would
        // wait for the device, timing the work after all.
        measure_each(
            &ctx.harness,
            || device.synchronize().map_err(TensorError::from),
            || {
                black_box(a.matmul(&b)?);
                Ok::<(), TensorError>(())
            },
        )?
    };
    // Whatever is still queued must not spill into the next case.
    device.synchronize()?;
    let flops = 2.0 * (n as f64).powi(3);
    let median = stats.median_ns;
    let name = if synchronize { SYNC } else { NO_SYNC };
    medians.lock().unwrap_or_else(|e| e.into_inner()).push((name, median));
    let mut out =
        CaseOutput::timed(stats).metric("apparent_throughput_gflops", if median > 0.0 { flops / median } else { 0.0 });
    if synchronize {
        if let Some(no_sync) = recorded(medians, NO_SYNC).filter(|&v| v > 0.0) {
            out = out.metric("synchronized_over_unsynchronized_ratio", median / no_sync);
        }
        out = out.note("device.synchronize() after every call: the clock stops when the work is done");
    } else {
        out = out.note(
            "no synchronize after the call (the device is idle before it, waited for outside the clock): the clock \
             stops when the call returns, which on a GPU is after the launch",
        );
    }
    if device.is_cpu() {
        out = out.note(format!(
            "{CPU_SYNCHRONOUS}; every call returns only when its work is done, so both host timings measure the work"
        ));
    }
    Ok(out)
}

/// Collects the durations the backend reports for one kernel on one device.
struct KernelTimes {
    device: u32,
    name: &'static str,
    durations_ns: Mutex<Vec<f64>>,
    /// Host time each launch took (the call returning, not the kernel running).
    launches_ns: Mutex<Vec<f64>>,
}

impl Subscriber for KernelTimes {
    fn on_event(&self, event: &Event) {
        if let Event::Kernel(k) = event
            && k.device == self.device
            && k.name == self.name
        {
            self.durations_ns.lock().unwrap_or_else(|e| e.into_inner()).push(k.duration_ns as f64);
            self.launches_ns.lock().unwrap_or_else(|e| e.into_inner()).push(k.launch_ns as f64);
        }
    }
}

fn device_events(ctx: &Context, n: usize, medians: &Medians) -> Result<CaseOutput, CaseError> {
    let device: &Device = &ctx.device;
    if device.is_cpu() {
        return Ok(CaseOutput::not_available(CPU_SYNCHRONOUS));
    }
    let (a, b) = operands(ctx, n)?;
    // Warm up (the autotuner's choice, the allocator's cache), then listen.
    black_box(a.matmul(&b)?);
    device.synchronize()?;
    let times = Arc::new(KernelTimes {
        device: device.id().event_index(),
        name: "matmul",
        durations_ns: Mutex::new(Vec::new()),
        launches_ns: Mutex::new(Vec::new()),
    });
    let hooks = device.allocator().hooks().clone();
    let id = hooks.subscribe(times.clone());
    let samples = ctx.harness.fixed_samples.unwrap_or(ctx.harness.min_samples).max(1);
    let run = (|| {
        for _ in 0..samples {
            black_box(a.matmul(&b)?);
            device.synchronize()?;
        }
        Ok::<(), TensorError>(())
    })();
    hooks.unsubscribe(id);
    run?;
    let durations = std::mem::take(&mut *times.durations_ns.lock().unwrap_or_else(|e| e.into_inner()));
    if durations.is_empty() {
        return Ok(CaseOutput::not_available(format!(
            "the {device} backend reported no kernel events with device times"
        )));
    }
    let mut launches = std::mem::take(&mut *times.launches_ns.lock().unwrap_or_else(|e| e.into_inner()));
    launches.sort_by(f64::total_cmp);
    let launch_median = launches.get(launches.len() / 2).copied().unwrap_or(0.0);
    let stats = summarize(durations, 1, "device_events");
    let median = stats.median_ns;
    let mut out = CaseOutput::timed(stats)
        .metric("launch_median_ns", launch_median)
        .metric("throughput_gflops", if median > 0.0 { 2.0 * (n as f64).powi(3) / median } else { 0.0 })
        .note(
            "the kernel's own time between device events, without launch or synchronization overhead; \
               launch_median_ns is the host time the launch call took",
        );
    if let Some(sync) = recorded(medians, SYNC).filter(|_| median > 0.0) {
        out = out.metric("synchronized_host_over_device_ratio", sync / median);
    }
    if let Some(no_sync) = recorded(medians, NO_SYNC).filter(|_| median > 0.0) {
        out = out.metric("unsynchronized_host_over_device_ratio", no_sync / median);
    }
    Ok(out)
}

/// The verdict; `no_gpu` is why there is no GPU, when there is none.
fn finding(no_gpu: Option<&str>, cases: &[CaseResult]) -> Finding {
    let claim = CLAIM.to_owned();
    let median = |name: &str| {
        cases.iter().find(|c| c.name == name && c.outcome.is_ok()).and_then(|c| c.timing.as_ref()).map(|t| t.median_ns)
    };
    let (no_sync, sync, events) = (median(NO_SYNC), median(SYNC), median(EVENTS));
    let ms = |v: Option<f64>| v.map_or_else(|| "not measured".to_owned(), |ns| format!("{:.3} ms", ns / 1e6));
    let summary = format!(
        "host clock without synchronize {}, with synchronize {}, device events {}",
        ms(no_sync),
        ms(sync),
        ms(events)
    );
    if let Some(reason) = no_gpu {
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!("no GPU ({reason}); {CPU_SYNCHRONOUS}, so both host timings measure the work: {summary}"),
        };
    }
    match (no_sync, sync) {
        (Some(a), Some(b)) if b > 0.0 => Finding {
            claim,
            verdict: if a < 0.5 * b { Verdict::Holds } else { Verdict::DoesNotHold },
            evidence: format!(
                "the unsynchronized clock reads {:.0}% of the synchronized one; {summary}",
                a / b * 100.0
            ),
        },
        _ => Finding { claim, verdict: Verdict::Inconclusive, evidence: summary },
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
    fn quick_cpu_run_is_sane() {
        let ctx = quick_cpu_context();
        let r = run_suite(&AsyncTimingSuite, &ctx, &NoProgress);
        assert_eq!(r.name, "async");
        let names: Vec<_> = r.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [NO_SYNC, SYNC, EVENTS]);
        for c in &r.cases[..2] {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            let t = c.timing.as_ref().unwrap();
            assert_eq!(t.clock, "host");
            assert!(t.median_ns > 0.0);
            assert!(c.metrics["apparent_throughput_gflops"] > 0.0);
            assert!(c.notes.iter().any(|n| n.contains("runs synchronously")), "{:?}", c.notes);
        }
        assert!(r.cases[1].metrics["synchronized_over_unsynchronized_ratio"] > 0.0);
        assert_eq!(r.cases[2].outcome, Outcome::NotAvailable { reason: CPU_SYNCHRONOUS.into() });
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].verdict, Verdict::NotApplicable);
        assert!(r.findings[0].evidence.contains("test context"), "{}", r.findings[0].evidence);
        assert!(r.findings[0].evidence.contains("device events not measured"), "{}", r.findings[0].evidence);
    }

    #[test]
    fn gpu_verdicts() {
        let timed = |name: &str, ns: f64| CaseResult::ok(name).with_timing(summarize(vec![ns], 1, "host"));
        let pitfall = [timed(NO_SYNC, 5e3), timed(SYNC, 1e6), timed(EVENTS, 9e5)];
        assert_eq!(finding(None, &pitfall).verdict, Verdict::Holds);
        let no_pitfall = [timed(NO_SYNC, 1e6), timed(SYNC, 1e6)];
        assert_eq!(finding(None, &no_pitfall).verdict, Verdict::DoesNotHold);
        assert_eq!(finding(None, &[]).verdict, Verdict::Inconclusive);
    }
}
