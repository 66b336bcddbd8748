//! Runs suites: each case isolated (a failure, a panic or an overrun is recorded
//! and the run goes on), its memory recorded by the profiler. A
//! [`SnapshotSink`] given to [`run_suite_with`] receives the cases' recordings
//! as PyTorch memory snapshots (`cargo xtask bench --export-snapshot`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use vramlab_engine::hooks::now_ns;
use vramlab_profiler::{DeviceInfo, Profiler, ProfilerConfig};
use vramlab_snapshot::Snapshot;

use crate::schema::{
    CaseResult, CategoryStack, KernelSlice, MAX_KERNEL_SLICES, MemoryPeaks, MemoryTimeline, Outcome, PhaseBand, Series,
    SimulatedCpu, SuiteResult, TIMELINE_POINTS,
};
use crate::suite::{Case, CaseOutput, Context, Progress, Suite};

/// Receives the recordings of profiled cases as PyTorch memory snapshots.
pub trait SnapshotSink: Sync {
    /// Whether the snapshot of `suite`'s case `case` is wanted (built only then).
    fn wants(&self, suite: &str, case: &str) -> bool;
    /// The case's recording on the device its results describe (the one with
    /// the highest allocated peak), as that device's snapshot; `case` is its
    /// finished result.
    fn case_snapshot(&self, suite: &str, case: &CaseResult, snapshot: Snapshot);
}

/// Runs every case of `suite` and returns its results (never fails: failures
/// are results).
pub fn run_suite(suite: &dyn Suite, ctx: &Context, progress: &dyn Progress) -> SuiteResult {
    run_suite_with(suite, ctx, progress, None)
}

/// [`run_suite`], handing each profiled case's recording to `sink` as a
/// memory snapshot when it wants it.
pub fn run_suite_with(
    suite: &dyn Suite,
    ctx: &Context,
    progress: &dyn Progress,
    sink: Option<&dyn SnapshotSink>,
) -> SuiteResult {
    let started = now_ns();
    let cases = match catch_unwind(AssertUnwindSafe(|| suite.cases(ctx))) {
        Ok(c) => c,
        Err(panic) => {
            let failed = CaseResult::failed("setup", format!("the suite's setup panicked: {}", panic_message(&panic)));
            return SuiteResult {
                name: suite.name().into(),
                description: suite.description().into(),
                device: ctx.device.to_string(),
                duration_ns: now_ns() - started,
                cases: vec![failed],
                findings: vec![],
                charts: vec![],
            };
        }
    };
    progress.suite_started(suite.name(), cases.len());
    let mut results = Vec::with_capacity(cases.len());
    for (i, case) in cases.into_iter().enumerate() {
        progress.case_started(suite.name(), &case.name, i);
        let result = run_case(case, ctx, suite.name(), sink);
        progress.case_finished(suite.name(), &result);
        results.push(result);
    }
    let findings = catch_unwind(AssertUnwindSafe(|| suite.findings(ctx, &results))).unwrap_or_default();
    let mut result = SuiteResult {
        name: suite.name().into(),
        description: suite.description().into(),
        device: ctx.device.to_string(),
        duration_ns: now_ns() - started,
        cases: results,
        findings,
        charts: vec![],
    };
    // A chart that panics is left out, like findings: the results stay whole.
    result.charts = catch_unwind(AssertUnwindSafe(|| suite.charts(&result))).unwrap_or_default();
    progress.suite_finished(suite.name());
    result
}

fn run_case(case: Case, ctx: &Context, suite: &str, sink: Option<&dyn SnapshotSink>) -> CaseResult {
    let Case { name, params, budget, profile, run } = case;
    let profiler = if profile {
        let hub = ctx.device.allocator().hooks().clone();
        let index = ctx.device.id().event_index();
        let info = match ctx.device.id() {
            id if id.kind == vramlab_engine::device::DeviceKind::Cuda => DeviceInfo::cuda(index, id.index, None),
            _ => DeviceInfo::cpu(index),
        };
        let mut cfg = ProfilerConfig::on(hub).device(info).without_sampling();
        if !std::sync::Arc::ptr_eq(ctx.device.allocator().hooks(), &ctx.hooks) {
            cfg = cfg.also_on(ctx.hooks.clone());
        }
        Profiler::start(cfg).ok()
    } else {
        None
    };
    let started = now_ns();
    let regions_before = crate::harness::regions_entered();
    let outcome = catch_unwind(AssertUnwindSafe(|| run(ctx)));
    let regions_after = crate::harness::regions_entered();
    // A GPU's queued work belongs to this case, and its kernel events are
    // emitted once the device has run them: wait before stopping the profiler.
    let synchronized = ctx.device.synchronize();
    let duration_ns = now_ns() - started;
    let profile = profiler.map(|p| p.stop());
    let (memory, timeline, categories) = match &profile {
        Some(profile) => case_memory(profile, ctx),
        None => (None, None, None),
    };
    let kernels = profile.as_ref().map(|p| case_kernels(p, ctx)).unwrap_or_default();
    let mut result = CaseResult::ok(name)
        .with_params(params)
        .with_memory(memory)
        .with_duration_ns(duration_ns)
        .with_timeline(timeline)
        .with_categories(categories)
        .with_kernels(kernels);
    if ctx.harness.simulated && regions_after > regions_before {
        // The callgrind dumps these regions wrote are the case's; whoever runs
        // this process under callgrind reads them (`bench --simulate`).
        result.simulated =
            Some(SimulatedCpu { regions: Some((regions_before + 1, regions_after)), ..SimulatedCpu::default() });
    }
    match outcome {
        Ok(Ok(CaseOutput { not_available: Some(reason), .. })) => result.outcome = Outcome::NotAvailable { reason },
        Ok(Ok(out)) => {
            if let Some(counted) = result.simulated.as_mut() {
                counted.timed_choice = out.timed_choice;
            }
            result.timing = out.timing;
            result.metrics = out.metrics;
            result.notes = out.notes;
            // Under a CPU simulator the wall time is the simulator's, not the case's.
            if duration_ns > budget.as_nanos() as u64 && !ctx.harness.simulated {
                result.outcome = Outcome::Failed {
                    message: format!(
                        "exceeded its time budget: took {:.1} s, budget {:.1} s",
                        duration_ns as f64 / 1e9,
                        budget.as_secs_f64()
                    ),
                };
            }
        }
        Ok(Err(e)) => result.outcome = Outcome::Failed { message: e.to_string() },
        Err(panic) => result.outcome = Outcome::Failed { message: format!("panicked: {}", panic_message(&panic)) },
    }
    if let (Outcome::Ok, Err(e)) = (&result.outcome, synchronized) {
        // The case's own work failed on the device after it returned.
        result.outcome = Outcome::Failed { message: format!("the device failed while finishing the case's work: {e}") };
    }
    if let (Some(sink), Some(profile)) = (sink, &profile)
        && sink.wants(suite, &result.name)
        && let Some(d) = busiest_device(profile)
    {
        // The allocator's settings are known for the run's device; a suite's
        // private device is written without them (PyTorch's defaults).
        let config = (d == ctx.device.id().event_index()).then(|| ctx.device.allocator().config());
        if let Ok(snapshot) = profile.memory_snapshot(d, config.as_ref()) {
            sink.case_snapshot(suite, &result, snapshot);
        }
    }
    result
}

/// Names a device from its event index, as `DeviceId::event_index` numbers them
/// (devices the profiler was not told about are the suites' private ones).
fn device_name(index: u32, ctx: &Context) -> String {
    match index {
        i if i == ctx.device.id().event_index() => ctx.device.to_string(),
        i if i < 1024 => format!("cpu:{i}"),
        i => format!("cuda:{}", i - 1024),
    }
}

/// The case's first [`MAX_KERNEL_SLICES`] kernel runs, times relative to the
/// recording's start.
fn case_kernels(profile: &vramlab_profiler::Profile, ctx: &Context) -> Vec<KernelSlice> {
    profile
        .kernel_runs(MAX_KERNEL_SLICES)
        .into_iter()
        .map(|k| KernelSlice {
            name: k.name,
            algorithm: k.algorithm,
            device: device_name(k.device, ctx),
            stream: k.stream,
            start_ns: k.start_ns.saturating_sub(profile.start_ns),
            duration_ns: k.duration_ns,
        })
        .collect()
}

/// The device a case's memory figures describe: of those with allocator
/// events, the one with the highest allocated peak.
fn busiest_device(profile: &vramlab_profiler::Profile) -> Option<u32> {
    profile
        .devices
        .iter()
        .filter(|d| d.counts.allocator_events > 0)
        .max_by_key(|d| d.peak_allocated.bytes)
        .map(|d| d.info.index)
}

/// The case's memory from its recording: the peaks, the decimated timeline
/// (with phase spans) and, when its allocations are tagged, the category stack.
fn case_memory(
    profile: &vramlab_profiler::Profile,
    ctx: &Context,
) -> (Option<MemoryPeaks>, Option<MemoryTimeline>, Option<CategoryStack>) {
    let Some(d) =
        profile.devices.iter().filter(|d| d.counts.allocator_events > 0).max_by_key(|d| d.peak_allocated.bytes)
    else {
        return (None, None, None);
    };
    let peaks = (|| {
        let d =
            profile.devices.iter().filter(|d| d.counts.allocator_events > 0).max_by_key(|d| d.peak_allocated.bytes)?;
        let by_category = match serde_json::to_value(d.peak_by_category) {
            Ok(serde_json::Value::Object(m)) => m.into_iter().filter_map(|(k, v)| Some((k, v.as_u64()?))).collect(),
            _ => Default::default(),
        };
        let device = device_name(d.info.index, ctx);
        Some(MemoryPeaks {
            device,
            peak_allocated_bytes: d.peak_allocated.bytes,
            peak_reserved_bytes: d.peak_reserved.bytes,
            peak_active_bytes: d.peak_active.bytes,
            peak_phase: d.peak_allocated.phase.clone(),
            by_category_at_peak_bytes: by_category,
            allocator_events: d.counts.allocator_events,
        })
    })();
    let Some(peaks) = peaks else { return (None, None, None) };
    let t0 = profile.start_ns;
    let rel = |t: u64| t.saturating_sub(t0);
    let series = |s: &vramlab_profiler::StepSeries| Series {
        time_ns: s.time_ns.iter().map(|&t| rel(t)).collect(),
        bytes: s.bytes.clone(),
    };
    let timeline = profile.timeline_decimated(d.info.index, TIMELINE_POINTS).ok().map(|t| MemoryTimeline {
        device: peaks.device.clone(),
        duration_ns: rel(t.end_ns),
        allocated: series(&t.allocated_bytes),
        reserved: series(&t.reserved_bytes),
        active: series(&t.active_bytes),
        phases: profile
            .phases
            .iter()
            .map(|p| PhaseBand {
                name: p.name.clone(),
                path: p.path.clone(),
                depth: p.depth,
                start_ns: rel(p.start_ns),
                end_ns: rel(p.end_ns),
            })
            .collect(),
        peak_allocated_bytes: d.peak_allocated.bytes,
        peak_time_ns: rel(d.peak_allocated.time_ns),
        peak_phase: d.peak_allocated.phase.clone(),
        events: d.counts.allocator_events,
    });
    // The stack is drawn only where allocations carry tags: some category other
    // than `untagged` was non-zero at the peak.
    let tagged = peaks.by_category_at_peak_bytes.iter().any(|(k, &v)| k != "untagged" && v > 0);
    let categories = if tagged {
        profile.categories_decimated(d.info.index, TIMELINE_POINTS).ok().map(|c| {
            let mut by_category_bytes = std::collections::BTreeMap::new();
            for cat in vramlab_profiler::Category::ALL {
                let v: Vec<u64> = c.by_category.iter().map(|b| b.get(cat)).collect();
                if v.iter().any(|&b| b > 0) {
                    by_category_bytes.insert(cat.as_str().to_owned(), v);
                }
            }
            CategoryStack { time_ns: c.time_ns.iter().map(|&t| rel(t)).collect(), by_category_bytes }
        })
    } else {
        None
    };
    (Some(peaks), timeline, categories)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use vramlab_snapshot::{self as snapshot, Action, SnapshotReplayOptions};

    use super::*;
    use crate::NoProgress;
    use crate::schema::Finding;
    use crate::suite::testing::quick_private_context;

    /// The memory suite with only its training-step case.
    struct OneCase(&'static str);

    impl Suite for OneCase {
        fn name(&self) -> &'static str {
            "memory"
        }
        fn description(&self) -> &'static str {
            "one case of the memory suite"
        }
        fn cases(&self, ctx: &Context) -> Vec<Case> {
            let memory = crate::suite_by_name("memory").expect("the memory suite");
            // These tests are about what a case records, not its time: a debug
            // build on a loaded machine once took 60.3 s of the case's 60 s budget.
            memory
                .cases(ctx)
                .into_iter()
                .filter(|c| c.name == self.0)
                .map(|c| c.budget(Duration::from_secs(3600)))
                .collect()
        }
        fn findings(&self, _: &Context, _: &[CaseResult]) -> Vec<Finding> {
            Vec::new()
        }
    }

    #[derive(Default)]
    struct Collect(Mutex<Vec<(String, CaseResult, Snapshot)>>);

    impl SnapshotSink for Collect {
        fn wants(&self, _: &str, case: &str) -> bool {
            case == "train_step_peak"
        }
        fn case_snapshot(&self, suite: &str, case: &CaseResult, snapshot: Snapshot) {
            self.0.lock().unwrap().push((suite.to_owned(), case.clone(), snapshot));
        }
    }

    #[test]
    fn a_profiled_case_becomes_a_snapshot_that_replays_faithfully() {
        let _tuner = crate::suite::testing::tuner_lock();
        let ctx = quick_private_context();
        let sink = Collect::default();
        let result = run_suite_with(&OneCase("train_step_peak"), &ctx, &NoProgress, Some(&sink));
        assert_eq!(result.cases.len(), 1);
        assert!(result.cases[0].outcome.is_ok(), "{:?}", result.cases[0].outcome);
        let got = sink.0.into_inner().unwrap();
        assert_eq!(got.len(), 1, "one snapshot for the one wanted case");
        let (suite, case, snap) = &got[0];
        assert_eq!((suite.as_str(), case.name.as_str()), ("memory", "train_step_peak"));
        let memory = case.memory.as_ref().expect("the case is profiled");
        let allocs = snap.device_traces[0].iter().filter(|e| e.action == Action::Alloc).count() as u64;
        assert!(
            allocs > 0 && allocs * 2 <= memory.allocator_events,
            "{allocs} allocs of {} events",
            memory.allocator_events
        );

        // Through the pickle and vramlab's reader, then the replay: the same
        // segment events and end state, the peak the results report.
        let mut bytes = Vec::new();
        snapshot::write_snapshot(snap, &mut bytes).unwrap();
        let back = snapshot::read_snapshot(&bytes[..]).unwrap();
        let r = snapshot::replay_snapshot(&back, &SnapshotReplayOptions::default()).unwrap();
        let f = r.fidelity.as_ref().expect("checked");
        assert!(f.agrees(), "{f:?}");
        assert!(f.recorded_segment_events > 0);
        assert_eq!(r.peak_allocated_bytes, memory.peak_allocated_bytes);
        assert_eq!(r.peak_reserved_bytes, memory.peak_reserved_bytes);
        // Allocations carry their tags as frames.
        let tagged = back.device_traces[0]
            .iter()
            .filter(|e| e.action == Action::Alloc)
            .any(|e| back.frames.stack(e.frames).any(|f| f.name.starts_with("tag:")));
        assert!(tagged, "the training step tags its tensors");
    }

    #[test]
    fn no_sink_and_unwanted_cases_build_nothing() {
        let ctx = quick_private_context();
        let sink = Collect::default();
        let result = run_suite_with(&OneCase("eval_no_grad_peak"), &ctx, &NoProgress, Some(&sink));
        assert_eq!(result.cases.len(), 1);
        assert!(sink.0.into_inner().unwrap().is_empty());
    }
}
