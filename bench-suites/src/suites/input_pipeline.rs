//! `input-pipeline`: the guides' `DataLoader(num_workers=2, pin_memory=True)`
//! advice. The same training loop (an MLP on 28×28 images whose every sample
//! goes through a seeded crop + noise + normalisation transform) for
//! `num_workers` ∈ {0, 1, 2, 4, … up to the cores} × pinned staging off/on (the
//! finding names the knee: the fewest workers within 5 % of the best); per case the step
//! time, samples/s, the share of wall time spent in `data_wait` phases (the
//! loader's own phase events), the device's busy share from its kernel events,
//! and the host memory the loader holds (worker queues, dataset copy, staging).
//!
//! On the CPU backend the workers' effect is real (they take load off the
//! training thread); pinned staging is not expected to matter there (the
//! "device" is host memory), and the pinned finding says so.

mod charts;

use std::sync::{Arc, Mutex};

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::GIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{Event, Subscriber};
use vramlab_train::{self as nn, Augment, DataLoader, Dataset, LoaderConfig, LossFn, Sgd, Trainer};

use crate::harness::measure;
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `input-pipeline` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct InputPipelineSuite;

const CLAIM_WORKERS: &str = "DataLoader workers (num_workers > 0) speed up an input-bound training loop";
const CLAIM_PINNED: &str = "pin_memory=True speeds up the host-to-device copy of each batch";

/// The private host device's index (distinct from the other suites').
const DEVICE_INDEX: u32 = 15;
/// A speedup counts when it is at least this large.
const MARGIN: f64 = 1.10;
/// Pinned staging speeds the loop up when its median gain is at least this large.
const PINNED_MARGIN: f64 = 1.05;

/// (batch, batches per epoch, hidden width, transform rounds).
fn size(quick: bool) -> (usize, usize, usize, u32) {
    if quick { (32, 4, 128, 2) } else { (128, 16, 512, 3) }
}

/// A worker count is at the knee when its samples/s are within this share of the best.
const KNEE_WITHIN: f64 = 0.05;

fn worker_counts() -> Vec<usize> {
    sweep(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// 0, 1, 2, 4, … doubling up to `cores`, and `cores` itself: enough counts to
/// see where throughput stops growing.
fn sweep(cores: usize) -> Vec<usize> {
    let mut w = vec![0];
    let mut n = 1;
    while n < cores {
        w.push(n);
        n *= 2;
    }
    w.push(cores.max(1));
    w
}

/// The knee of a sweep of (workers, samples/s): the fewest workers within
/// [`KNEE_WITHIN`] of the best rate, with that rate.
fn knee(s: &[(usize, f64)]) -> Option<(usize, f64)> {
    let best = s.iter().map(|x| x.1).filter(|v| v.is_finite()).fold(f64::NAN, f64::max);
    s.iter().copied().filter(|x| x.1 >= best * (1.0 - KNEE_WITHIN)).min_by_key(|x| x.0)
}

/// "1 worker", "4 workers".
fn workers_text(n: usize) -> String {
    if n == 1 { "1 worker".to_owned() } else { format!("{n} workers") }
}

/// Sums `data_wait` spans and kernel time on one device while subscribed.
#[derive(Debug, Default)]
struct Waits {
    device: u32,
    /// (open data_wait begin, total data_wait ns, total kernel ns, kernel events).
    state: Mutex<(u64, u64, u64, u64)>,
}

impl Subscriber for Waits {
    fn on_event(&self, event: &Event) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Phase(p) if &*p.name == "data_wait" => {
                if p.begin {
                    s.0 = p.time_ns;
                } else {
                    s.1 += p.time_ns.saturating_sub(s.0);
                }
            }
            Event::Kernel(k) if k.device == self.device => {
                s.2 += k.duration_ns;
                s.3 += 1;
            }
            _ => {}
        }
    }
}

fn run_case(ctx: &Context, workers: usize, pinned: bool) -> Result<CaseOutput, CaseError> {
    let (b, batches, hidden, rounds) = size(ctx.quick());
    let device = if ctx.device.is_cpu() {
        Device::host(
            DeviceId { kind: DeviceKind::Cpu, index: DEVICE_INDEX },
            4 * GIB,
            AllocatorConfig::default(),
            &ctx.hooks,
        )?
    } else {
        ctx.device.clone()
    };
    let data = Arc::new(Dataset::images(b * batches, [1, 28, 28], 10, 0.5, ctx.seed())?);
    let cfg = LoaderConfig {
        seed: ctx.seed(),
        num_workers: workers,
        pin_memory: pinned,
        persistent_workers: true,
        transform: Some(Arc::new(Augment::with_rounds(rounds))),
        ..LoaderConfig::new(b)
    };
    let loader = DataLoader::shared(data, cfg)?;
    let mut model = nn::mlp(&[784, hidden, hidden, 10], ctx.seed(), &device)?;
    let mut opt = Sgd::with_momentum(0.01, 0.9);
    let mut trainer = Trainer::new(LossFn::CrossEntropy);
    let mut e = 0u64;
    let mut epoch = |trainer: &mut Trainer| -> Result<(), nn::NnError> {
        e += 1;
        for batch in loader.epoch(e, &device) {
            trainer.step(&mut model, &mut opt, &batch?)?;
        }
        device.synchronize().map_err(|e| nn::NnError::Invalid { what: "synchronize", reason: e.to_string() })?;
        Ok(())
    };
    let timing = measure(&ctx.harness, || epoch(&mut trainer))?;
    if ctx.harness.simulated {
        // A simulated run keeps only the counted epoch's figures: the listened
        // epoch below (the timed run's wait and busy shares) would cost minutes more.
        loader.shutdown_workers();
        return Ok(CaseOutput::timed(timing));
    }
    // One more epoch, listened to, for the wait and busy shares.
    let waits = Arc::new(Waits { device: device.id().event_index(), ..Waits::default() });
    let hub = device.allocator().hooks().clone();
    let id = hub.subscribe(waits.clone());
    let t0 = vramlab_engine::hooks::now_ns();
    let listened = epoch(&mut trainer);
    let wall_ns = vramlab_engine::hooks::now_ns().saturating_sub(t0).max(1) as f64;
    hub.unsubscribe(id);
    listened?;
    let (_, wait_ns, kernel_ns, kernels) = *waits.state.lock().unwrap_or_else(|e| e.into_inner());
    let memory = loader.epoch(0, &device).memory();
    loader.shutdown_workers();
    let epoch_ns = timing.median_ns;
    let mut out = CaseOutput::timed(timing)
        .metric("step_time_ns", epoch_ns / batches as f64)
        .metric("samples_per_s", (b * batches) as f64 / (epoch_ns / 1e9))
        .metric("data_wait_percent", 100.0 * wait_ns as f64 / wall_ns)
        .metric("loader_host_bytes", memory.total_bytes() as f64)
        .metric("worker_batches_bytes", memory.worker_batches_bytes as f64)
        .metric("staging_bytes", memory.staging_bytes as f64)
        .metric("page_locked_bytes", memory.page_locked_bytes as f64)
        .note(format!(
            "batch {b}, {batches} batches per epoch, MLP 784-{hidden}-{hidden}-10, Augment ({rounds} noise + \
             normalisation rounds, crop padding 2) per sample"
        ));
    if kernels > 0 {
        out = out.metric("device_busy_percent", (100.0 * kernel_ns as f64 / wall_ns).min(100.0));
    }
    if let Some(reason) = &ctx.gpu_unavailable {
        out = out.note(format!("CPU backend ({reason}): the device is host memory"));
    }
    Ok(out)
}

impl Suite for InputPipelineSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "input-pipeline"
    }

    fn description(&self) -> &'static str {
        "DataLoader workers keep an input-bound loop fed; pinned memory speeds the host-to-device copy of each batch"
    }

    fn cases(&self, _ctx: &Context) -> Vec<Case> {
        let mut cases = Vec::new();
        for workers in worker_counts() {
            for pinned in [false, true] {
                let memory = if pinned { "pinned" } else { "pageable" };
                cases.push(
                    Case::new(format!("workers_{workers}/{memory}"), move |ctx: &Context| {
                        run_case(ctx, workers, pinned)
                    })
                    .param("num_workers", workers)
                    .param("host_memory", memory)
                    .without_profiling(),
                );
            }
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        let no_gpu = ctx
            .device
            .is_cpu()
            .then(|| ctx.gpu_unavailable.clone().unwrap_or_else(|| "the run targets the cpu".to_owned()));
        vec![workers_finding(cases), pinned_finding(no_gpu.as_deref(), cases)]
    }
}

/// (workers, samples/s, data-wait %) of the ok cases with `memory`, by workers.
fn series(cases: &[CaseResult], memory: &str) -> Vec<(usize, f64, f64)> {
    let mut v: Vec<(usize, f64, f64)> = cases
        .iter()
        .filter(|c| c.outcome.is_ok() && c.params.get("host_memory").and_then(|m| m.as_str()) == Some(memory))
        .filter_map(|c| {
            let w = c.params.get("num_workers")?.as_u64()? as usize;
            Some((w, *c.metrics.get("samples_per_s")?, *c.metrics.get("data_wait_percent")?))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

fn workers_finding(cases: &[CaseResult]) -> Finding {
    let claim = CLAIM_WORKERS.to_owned();
    let s = series(cases, "pageable");
    let Some(&(0, base, wait0)) = s.first() else {
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: "the 0-worker case did not run".into() };
    };
    let listing: Vec<String> = s
        .iter()
        .map(|(w, sps, wait)| format!("{} {sps:.0} samples/s ({wait:.0} % waiting for data)", workers_text(*w)))
        .collect();
    let (best_w, best) = s.iter().map(|x| (x.0, x.1)).fold((0, base), |a, x| if x.1 > a.1 { x } else { a });
    let rates: Vec<(usize, f64)> = s.iter().map(|x| (x.0, x.1)).collect();
    let knee = match knee(&rates) {
        Some((w, _)) if w == best_w => format!("; the knee is the best itself, {}", workers_text(w)),
        Some((w, sps)) => format!(
            "; the knee is {} ({sps:.0} samples/s, within {:.0} % of the best): more workers add less than that",
            workers_text(w),
            100.0 * KNEE_WITHIN
        ),
        None => String::new(),
    };
    let evidence = format!(
        "{}; the best is {} at {:.2}x the 0-worker samples/s{knee}",
        listing.join(", "),
        workers_text(best_w),
        best / base
    );
    if wait0 < 20.0 {
        return Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!(
                "with 0 workers the loop waited for data only {wait0:.0} % of the time (not input-bound); {evidence}"
            ),
        };
    }
    let verdict = if best >= base * MARGIN { Verdict::Holds } else { Verdict::DoesNotHold };
    Finding { claim, verdict, evidence }
}

fn pinned_finding(no_gpu: Option<&str>, cases: &[CaseResult]) -> Finding {
    let claim = CLAIM_PINNED.to_owned();
    let (pageable, pinned) = (series(cases, "pageable"), series(cases, "pinned"));
    let ratios: Vec<String> = pageable
        .iter()
        .filter_map(|(w, a, _)| pinned.iter().find(|p| p.0 == *w).map(|(_, b, _)| (w, b / a)))
        .map(|(w, r)| format!("{}: pinned {r:.2}x pageable samples/s", workers_text(*w)))
        .collect();
    let summary = if ratios.is_empty() { "no pinned/pageable pair ran".to_owned() } else { ratios.join(", ") };
    if let Some(reason) = no_gpu {
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!(
                "no GPU ({reason}): on the CPU backend the host-to-device copy is a memcpy between host buffers, so \
                 pinned staging cannot speed it up; {summary}"
            ),
        };
    }
    let mut r: Vec<f64> =
        pageable.iter().filter_map(|(w, a, _)| pinned.iter().find(|p| p.0 == *w).map(|(_, b, _)| b / a)).collect();
    if r.is_empty() {
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: summary };
    }
    r.sort_by(f64::total_cmp);
    let median = r[r.len() / 2];
    // The rule: pinned speeds the loop up when the median gain is at least 5 %; a gain
    // under that is within run-to-run noise, and no gain at all does not hold.
    let verdict = if median >= PINNED_MARGIN {
        Verdict::Holds
    } else if median > 1.0 {
        Verdict::Inconclusive
    } else {
        Verdict::DoesNotHold
    };
    let rule = format!("the rule asks a median of at least {PINNED_MARGIN:.2}x");
    Finding { claim, verdict, evidence: format!("{summary} (median {median:.2}x; {rule})") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::run_suite;
    use crate::suite::NoProgress;
    use crate::suite::testing::quick_cpu_context;

    #[test]
    fn quick_cpu_run_measures_every_case_and_says_why_pinned_does_not_apply() {
        let ctx = quick_cpu_context();
        let r = run_suite(&InputPipelineSuite, &ctx, &NoProgress);
        assert_eq!(r.name, "input-pipeline");
        assert_eq!(r.cases.len(), 2 * worker_counts().len());
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            assert!(c.metrics["samples_per_s"] > 0.0, "{}", c.name);
            assert!((0.0..=100.0).contains(&c.metrics["data_wait_percent"]), "{}", c.name);
            assert!(c.metrics["data_wait_percent"] > 0.0, "{}: data_wait phases seen", c.name);
            let workers = c.params["num_workers"].as_u64().unwrap();
            assert_eq!(c.metrics["worker_batches_bytes"] > 0.0, workers > 0, "{}", c.name);
            let pinned = c.params["host_memory"] == "pinned";
            let (b, ..) = size(true);
            let staging = (b * (784 * 4 + 8)) as f64 * if pinned { 2.0 } else { 1.0 };
            assert_eq!(c.metrics["staging_bytes"], staging, "{}", c.name);
        }
        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.findings[1].verdict, Verdict::NotApplicable);
        assert!(r.findings[1].evidence.contains("test context"), "{}", r.findings[1].evidence);
        assert!(r.findings[0].evidence.contains("0 workers"), "{}", r.findings[0].evidence);
    }

    fn result(workers: usize, memory: &str, sps: f64, wait: f64) -> CaseResult {
        let mut params = std::collections::BTreeMap::new();
        params.insert("num_workers".into(), workers.into());
        params.insert("host_memory".into(), memory.into());
        let mut metrics = std::collections::BTreeMap::new();
        metrics.insert("samples_per_s".into(), sps);
        metrics.insert("data_wait_percent".into(), wait);
        CaseResult::ok(format!("workers_{workers}/{memory}")).with_params(params).with_metrics(metrics)
    }

    #[test]
    fn the_sweep_doubles_up_to_the_cores_and_the_knee_is_the_fewest_within_5_percent() {
        assert_eq!(sweep(1), [0, 1]);
        assert_eq!(sweep(2), [0, 1, 2]);
        assert_eq!(sweep(16), [0, 1, 2, 4, 8, 16]);
        assert_eq!(sweep(12), [0, 1, 2, 4, 8, 12]);
        // Best 1000/s at 16; 4 workers reach 960 (within 5 %), 2 workers 900 (not).
        let s = [(0, 100.0), (1, 500.0), (2, 900.0), (4, 960.0), (8, 990.0), (16, 1000.0)];
        assert_eq!(knee(&s), Some((4, 960.0)));
        assert_eq!(knee(&[]), None);
        assert_eq!(workers_text(1), "1 worker");
    }

    #[test]
    fn verdicts_follow_the_speedup_and_name_the_knee() {
        let cases = vec![
            result(0, "pageable", 100.0, 50.0),
            result(1, "pageable", 150.0, 20.0),
            result(2, "pageable", 185.0, 5.0),
            result(4, "pageable", 190.0, 5.0),
        ];
        let f = workers_finding(&cases);
        assert_eq!(f.verdict, Verdict::Holds, "{}", f.evidence);
        assert_eq!(
            f.evidence,
            "0 workers 100 samples/s (50 % waiting for data), 1 worker 150 samples/s (20 % waiting for data), 2 \
             workers 185 samples/s (5 % waiting for data), 4 workers 190 samples/s (5 % waiting for data); the best \
             is 4 workers at 1.90x the 0-worker samples/s; the knee is 2 workers (185 samples/s, within 5 % of the \
             best): more workers add less than that"
        );
        let flat = vec![result(0, "pageable", 100.0, 50.0), result(2, "pageable", 101.0, 40.0)];
        assert_eq!(workers_finding(&flat).verdict, Verdict::DoesNotHold);
        let compute_bound = vec![result(0, "pageable", 100.0, 3.0), result(2, "pageable", 101.0, 1.0)];
        assert_eq!(workers_finding(&compute_bound).verdict, Verdict::Inconclusive);
        assert_eq!(workers_finding(&[]).verdict, Verdict::Inconclusive);
        let pairs = vec![result(0, "pageable", 100.0, 50.0), result(0, "pinned", 120.0, 40.0)];
        assert_eq!(pinned_finding(None, &pairs).verdict, Verdict::Holds);
        let small = vec![result(0, "pageable", 100.0, 50.0), result(0, "pinned", 103.0, 40.0)];
        let f = pinned_finding(None, &small);
        assert_eq!(f.verdict, Verdict::Inconclusive);
        assert_eq!(
            f.evidence,
            "0 workers: pinned 1.03x pageable samples/s (median 1.03x; the rule asks a median of at least 1.05x)"
        );
        assert_eq!(pinned_finding(Some("no driver"), &pairs).verdict, Verdict::NotApplicable);
    }
}
