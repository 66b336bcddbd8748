//! `allocator`: why PyTorch caches device memory, and what watching it costs.
//!
//! - `cached/<size>` times an alloc+free pair through a warm caching allocator
//!   (the block comes from the pool, no device call); `raw/<size>` times the
//!   device's own malloc+free of the segment the caching allocator would need
//!   for that request, on the same raw device memory. Sizes cover the small
//!   pool (≤ 1 MiB, 2 MiB segments) and the large pool (20 MiB segments, and
//!   requests of 10 MiB or more with their own rounded segment). The raw case
//!   reports the ratio to the cached one.
//! - `recording/none` and `recording/profiler` time the same pairs over a mix
//!   of sizes with nobody listening and with vramlab's profiler recording every
//!   event: the cost of recording, per pair and as a ratio, plus what a
//!   recording of a fixed 10 000 pairs holds (`recording_bytes`: the timed
//!   recording's size follows the adaptive sample count, so it is not
//!   reproducible run to run) and the time to analyse the timed one.
//!
//! Every case uses its own allocator and hub over raw device memory of its own
//! — on a GPU run the GPU's (`cuMemAlloc` / `cuMemFree`, what PyTorch's cache
//! saves), else a [`HostMemory`] — so nothing else's blocks or subscribers leak
//! into the numbers; none is profiled by the runner (a recording subscriber is
//! what the recording cases measure).

mod charts;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vramlab_display::format::{fmt_bytes, fmt_ns};
use vramlab_engine::alloc::consts::{GIB, KIB, MIB, SMALL_SIZE};
use vramlab_engine::alloc::{AllocatorConfig, CachingAllocator, HostMemory, RawAllocator, SimulatedMemory};
use vramlab_engine::hooks::{Hooks, now_ns};
use vramlab_profiler::{DeviceInfo, Profiler, ProfilerConfig};

use super::common;
use super::devices::size_label;
use crate::harness::{HarnessConfig, measure};
use crate::schema::{CaseResult, Finding, TimingStats, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `allocator` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocatorSuite;

/// Capacity of each case's private host memory: address space only (segments
/// are never written), enough for the largest request.
const CAPACITY: u64 = 2 * GIB;

/// Requests cycled through by the recording cases: both pools, odd sizes too.
const MIX: [u64; 8] = [512, 4000, 65_536, MIB, 3 * MIB + 17, 8 * MIB, 24 * MIB, 300];

/// A cached pair must beat the raw one by this factor (and their quartiles
/// must not overlap) to count as cheaper.
const CHEAPER: f64 = 1.05;

/// Recording may add at most this much per alloc+free pair to count as cheap:
/// less than launching one GPU kernel (several µs).
const CHEAP_RECORDING_NS: f64 = 1_000.0;

/// Pairs in the fixed recording whose size `recording_bytes` reports.
const FIXED_RECORDING_PAIRS: usize = 10_000;

/// Request sizes of the cached/raw comparison.
fn sizes(quick: bool) -> Vec<u64> {
    if quick { vec![4 * KIB, MIB, 4 * MIB, 64 * MIB] } else { vec![512, 4 * KIB, MIB, 4 * MIB, 16 * MIB, 256 * MIB] }
}

/// A size label as prose writes it, the unit spaced: `4 KiB`, `3 MiB`, `300 B`.
fn spaced(label: &str) -> String {
    match label.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) if i > 0 => format!("{} {}", &label[..i], &label[i..]),
        _ => label.to_owned(),
    }
}

fn pool_of(request: u64) -> &'static str {
    if request <= SMALL_SIZE { "small" } else { "large" }
}

/// The segment the caching allocator reserves for a first request of
/// `request` bytes (asked of an allocator over simulated memory, so the rule
/// is the allocator's own, not a copy of it).
fn segment_for(request: u64) -> Result<u64, CaseError> {
    let probe = CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default())?;
    let a = probe.malloc(request, 0, None)?;
    let reserved = probe.memory_reserved();
    probe.free(a)?;
    Ok(reserved)
}

/// The raw memory the cases allocate from: the run's GPU memory on a GPU run,
/// else a host memory of its own.
fn raw_memory(ctx: &Context) -> Arc<dyn RawAllocator> {
    if ctx.device.is_cpu() {
        Arc::new(HostMemory::with_capacity(CAPACITY))
    } else {
        ctx.device.allocator().raw_memory().clone()
    }
}

/// A fresh caching allocator and hub over [`raw_memory`].
fn private_allocator(ctx: &Context) -> Result<(CachingAllocator, Arc<Hooks>), CaseError> {
    let hub = Hooks::new();
    Ok((CachingAllocator::with_hooks(raw_memory(ctx), AllocatorConfig::default(), hub.clone(), 0)?, hub))
}

/// Medians of earlier cases, by case name.
type Shared = Arc<Mutex<BTreeMap<String, TimingStats>>>;

fn remember(shared: &Shared, name: &str, t: &TimingStats) {
    shared.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_owned(), t.clone());
}

fn recall(shared: &Shared, name: &str) -> Option<TimingStats> {
    shared.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
}

/// A pair through a warm caching allocator: the block is found in the pool.
fn cached_case(ctx: &Context, request: u64, shared: &Shared) -> Result<CaseOutput, CaseError> {
    let (alloc, _hub) = private_allocator(ctx)?;
    let warm = alloc.malloc(request, 0, None)?;
    let block = warm.size();
    alloc.free(warm)?;
    let segment = alloc.memory_reserved();
    let device_mallocs = alloc.stats().num_device_alloc;
    let timing = measure(&ctx.harness, || {
        let a = alloc.malloc(request, 0, None)?;
        black_box(a.addr());
        alloc.free(a)
    })?;
    let during = alloc.stats().num_device_alloc - device_mallocs;
    remember(shared, &format!("cached/{}", size_label(request)), &timing);
    Ok(CaseOutput::timed(timing.clone())
        .metric("pair_ns", timing.median_ns)
        .metric("request_bytes", request as f64)
        .metric("block_bytes", block as f64)
        .metric("segment_bytes", segment as f64)
        .metric("device_mallocs_while_timed_count", during as f64)
        .note(format!(
            "{} request in the {} pool: a {} block of a {} segment, reused from the pool on every pair ({during} device mallocs while timed)",
            spaced(&size_label(request)),
            pool_of(request),
            spaced(&size_label(block)),
            spaced(&size_label(segment))
        )))
}

/// The device's own malloc+free of the segment the cache would need.
fn raw_case(ctx: &Context, request: u64, shared: &Shared) -> Result<CaseOutput, CaseError> {
    let segment = segment_for(request)?;
    let raw = raw_memory(ctx);
    let timing = measure(&ctx.harness, || {
        let addr = raw.malloc(segment)?;
        black_box(addr);
        raw.free(addr, segment);
        Ok::<(), CaseError>(())
    })?;
    remember(shared, &format!("raw/{}", size_label(request)), &timing);
    let mut out = CaseOutput::timed(timing.clone())
        .metric("pair_ns", timing.median_ns)
        .metric("request_bytes", request as f64)
        .metric("segment_bytes", segment as f64)
        .note(format!(
            "the device's malloc+free of the {} segment a {} request needs (no caching allocator)",
            spaced(&size_label(segment)),
            spaced(&size_label(request))
        ));
    if !ctx.device.is_cpu() {
        out = out.note(format!(
            "on {} the raw malloc+free is cuMemAlloc/cuMemFree, which synchronize the device",
            ctx.device
        ));
    }
    if ctx.device.is_cpu() {
        out = out.note(
            "on the CPU device the raw malloc is the system allocator's (glibc: mmap/munmap above its mmap threshold, its own free lists below it; the threshold rises up to 32 MiB after the process frees a mapped block, so segments below 32 MiB may be served from glibc's own cache depending on what ran before; pages are not touched); on a GPU it is cudaMalloc/cudaFree, which synchronize the device",
        );
    }
    match recall(shared, &format!("cached/{}", size_label(request))) {
        Some(cached) => {
            out = out
                .metric("cached_pair_ns", cached.median_ns)
                .metric("raw_over_cached_ratio", timing.median_ns / cached.median_ns)
                .note(format!(
                    "raw {} vs cached {} per pair: {:.1}×",
                    fmt_ns(timing.median_ns),
                    fmt_ns(cached.median_ns),
                    timing.median_ns / cached.median_ns
                ));
        }
        None => out = out.note("no ratio: the cached case of this size did not complete"),
    }
    Ok(out)
}

/// The harness settings for the recording cases: warm-up capped so that the
/// recording (one 32-byte record per event, three events per pair) stays small.
fn recording_harness(h: &HarnessConfig) -> HarnessConfig {
    HarnessConfig { warmup: h.warmup.min(Duration::from_millis(20)), ..h.clone() }
}

/// Pairs over the size mix, with nobody listening or with the profiler recording.
fn recording_case(ctx: &Context, with_profiler: bool, shared: &Shared) -> Result<CaseOutput, CaseError> {
    let (alloc, hub) = private_allocator(ctx)?;
    for &s in &MIX {
        let a = alloc.malloc(s, 0, None)?;
        alloc.free(a)?;
    }
    let profiler = if with_profiler {
        Some(Profiler::start(ProfilerConfig::on(hub.clone()).device(DeviceInfo::cpu(0)).without_sampling())?)
    } else {
        None
    };
    let mut i = 0usize;
    let timed = measure(&recording_harness(&ctx.harness), || {
        let a = alloc.malloc(MIX[i % MIX.len()], 0, None)?;
        black_box(a.addr());
        i += 1;
        alloc.free(a)
    });
    let mut out;
    match profiler {
        None => {
            let timing = timed?;
            remember(shared, "recording/none", &timing);
            out = CaseOutput::timed(timing.clone()).metric("pair_ns", timing.median_ns).note(format!(
                "alloc+free pairs cycling through {} sizes of both pools, no subscriber on the allocator's hub",
                MIX.len()
            ));
        }
        Some(p) => {
            let (records, timed_held) = (p.records(), p.recording_bytes());
            let started = now_ns();
            let profile = p.stop();
            let build_ns = now_ns().saturating_sub(started);
            let timing = timed?;
            // What a recording holds, for a fixed workload: reproducible.
            let fixed = Profiler::start(ProfilerConfig::on(hub.clone()).device(DeviceInfo::cpu(0)).without_sampling())?;
            for j in 0..FIXED_RECORDING_PAIRS {
                alloc.free(alloc.malloc(MIX[j % MIX.len()], 0, None)?)?;
            }
            let held = fixed.recording_bytes();
            drop(fixed.stop());
            let events = profile.devices.iter().map(|d| d.counts.allocator_events).sum::<u64>();
            out = CaseOutput::timed(timing.clone())
                .metric("pair_ns", timing.median_ns)
                .metric("records_count", records as f64)
                .metric("allocator_events_count", events as f64)
                .metric("recording_bytes", held as f64)
                .metric("profile_build_ns", build_ns as f64)
                .note(format!(
                    "the same pairs with vramlab's profiler recording every allocator event ({i} pairs, {records} records, {} held; building the profile took {}); a recording of {FIXED_RECORDING_PAIRS} pairs holds {} (recording_bytes)",
                    fmt_bytes(timed_held as u64),
                    fmt_ns(build_ns as f64),
                    fmt_bytes(held as u64)
                ));
            match recall(shared, "recording/none") {
                Some(none) => {
                    out = out
                        .metric("no_subscriber_pair_ns", none.median_ns)
                        .metric("overhead_per_pair_ns", timing.median_ns - none.median_ns)
                        .metric("overhead_ratio", timing.median_ns / none.median_ns)
                        .note(format!(
                            "recording costs {} per pair ({} vs {}, {:.2}×)",
                            fmt_ns(timing.median_ns - none.median_ns),
                            fmt_ns(timing.median_ns),
                            fmt_ns(none.median_ns),
                            timing.median_ns / none.median_ns
                        ));
                }
                None => out = out.note("no overhead: the no-subscriber case did not complete"),
            }
        }
    }
    Ok(out)
}

impl Suite for AllocatorSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "allocator"
    }

    fn description(&self) -> &'static str {
        "the caching allocator makes allocation cheap (why PyTorch caches device memory), and what recording every allocation costs"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let shared: Shared = Arc::default();
        let mut cases = Vec::new();
        for request in sizes(ctx.quick()) {
            let label = size_label(request);
            for path in ["cached", "raw"] {
                let shared = shared.clone();
                let case = Case::new(format!("{path}/{label}"), move |ctx| match path {
                    "cached" => cached_case(ctx, request, &shared),
                    _ => raw_case(ctx, request, &shared),
                });
                cases.push(
                    case.param("path", path)
                        .param("request_bytes", request)
                        .param("pool", pool_of(request))
                        .budget(Duration::from_secs(30))
                        .without_profiling(),
                );
            }
        }
        for (name, with_profiler) in [("none", false), ("profiler", true)] {
            let shared = shared.clone();
            cases.push(
                Case::new(format!("recording/{name}"), move |ctx| recording_case(ctx, with_profiler, &shared))
                    .param("subscriber", name)
                    .budget(Duration::from_secs(30))
                    .without_profiling(),
            );
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        findings(ctx, cases)
    }
}

fn ok_case<'a>(cases: &'a [CaseResult], name: &str) -> Option<&'a CaseResult> {
    cases.iter().find(|c| c.name == name && c.outcome.is_ok())
}

/// Whether `fast` is clearly faster than `slow`: at least 5 % even at the
/// unfavourable ends of their interquartile intervals ([`common::faster_by`]).
fn clearly_faster(fast: &CaseResult, slow: &CaseResult) -> bool {
    common::clearly_faster(fast, slow, "pair_ns", CHEAPER)
}

fn findings(ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
    let mut labels: Vec<String> = Vec::new();
    for c in cases {
        if let Some(label) = c.name.strip_prefix("cached/")
            && !labels.iter().any(|l| l == label)
        {
            labels.push(label.to_owned());
        }
    }
    let (mut cheaper, mut compared, mut lines) = (0, 0, Vec::new());
    for label in &labels {
        let (Some(cached), Some(raw)) =
            (ok_case(cases, &format!("cached/{label}")), ok_case(cases, &format!("raw/{label}")))
        else {
            continue;
        };
        let (Some(&c), Some(&r)) = (cached.metrics.get("pair_ns"), raw.metrics.get("pair_ns")) else { continue };
        compared += 1;
        let clear = clearly_faster(cached, raw);
        if clear {
            cheaper += 1;
        }
        let segment =
            raw.metrics.get("segment_bytes").map(|&b| spaced(&size_label(b as u64))).unwrap_or_else(|| "?".into());
        lines.push(format!(
            "{} ({} pool, {segment} segment): cached {} vs raw {} ({:.1}×{})",
            spaced(label),
            cached.params.get("pool").and_then(|p| p.as_str()).unwrap_or("?"),
            fmt_ns(c),
            fmt_ns(r),
            r / c,
            if clear { "" } else { ", not clearly cheaper" }
        ));
    }
    let raw_is = if ctx.device.is_cpu() {
        "On the CPU device the raw malloc is the system allocator's: glibc maps and unmaps blocks above its mmap threshold (microseconds per pair) and serves smaller ones from free lists of its own, a cache like PyTorch's; the threshold rises up to 32 MiB after the process frees a mapped block, so below 32 MiB the raw numbers depend on what the process allocated before. On a GPU the raw malloc is cudaMalloc/cudaFree, which also synchronize the device. "
    } else {
        "On the GPU the raw malloc+free is cuMemAlloc/cuMemFree on the run's device, each of which synchronizes it. "
    };
    let mut out = vec![Finding {
        claim: "the caching allocator makes allocation cheap".into(),
        verdict: match (compared, cheaper) {
            (0, _) => Verdict::Inconclusive,
            (n, k) if k == n => Verdict::Holds,
            (_, 0) => Verdict::DoesNotHold,
            _ => Verdict::Inconclusive,
        },
        evidence: if compared == 0 {
            "No size completed both its cached and its raw case.".into()
        } else {
            format!(
                "A cached alloc+free pair was clearly cheaper (at least 5 % cheaper even comparing its slow quartile with the raw pair's fast one) than the device's malloc+free of the segment it needs for {cheaper} of {compared} sizes. {raw_is}{}",
                lines.join("; ")
            )
        },
    }];

    let recording = match (ok_case(cases, "recording/none"), ok_case(cases, "recording/profiler")) {
        (Some(none), Some(rec)) => match (none.metrics.get("pair_ns"), rec.metrics.get("pair_ns")) {
            (Some(&n), Some(&r)) => Some((n, r, rec.metrics.get("recording_bytes").copied())),
            _ => None,
        },
        _ => None,
    };
    out.push(match recording {
        None => Finding {
            claim: "recording every allocation costs little".into(),
            verdict: Verdict::Inconclusive,
            evidence: "The recording cases did not both complete.".into(),
        },
        Some((none, rec, held)) => {
            let overhead = rec - none;
            Finding {
                claim: "recording every allocation costs little".into(),
                verdict: if overhead < CHEAP_RECORDING_NS { Verdict::Holds } else { Verdict::DoesNotHold },
                evidence: format!(
                    "With vramlab's profiler recording, an alloc+free pair took {} against {} with no subscriber: {} more per pair ({:.2}×; the bar is under {} per pair, less than launching one GPU kernel){}.",
                    fmt_ns(rec),
                    fmt_ns(none),
                    fmt_ns(overhead),
                    rec / none,
                    fmt_ns(CHEAP_RECORDING_NS),
                    held.map(|b| format!("; a recording of {FIXED_RECORDING_PAIRS} pairs holds {}", fmt_bytes(b as u64)))
                        .unwrap_or_default()
                ),
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::runner::run_suite;
    use crate::schema::Outcome;
    use crate::suite::NoProgress;
    use crate::suite::testing::quick_cpu_context;

    #[test]
    fn segments_follow_the_allocator_rules() {
        assert_eq!(segment_for(4 * KIB).unwrap(), 2 * MIB, "small pool: 2 MiB segments");
        assert_eq!(segment_for(MIB).unwrap(), 2 * MIB);
        assert_eq!(segment_for(4 * MIB).unwrap(), 20 * MIB, "large requests below 10 MiB: 20 MiB segments");
        assert_eq!(segment_for(64 * MIB).unwrap(), 64 * MIB, "10 MiB and more: rounded to 2 MiB");
        assert_eq!(size_label(3 * MIB + 17), format!("{}B", 3 * MIB + 17));
        assert_eq!(size_label(256 * MIB), "256MiB");
        assert_eq!((pool_of(MIB), pool_of(MIB + 1)), ("small", "large"));
    }

    #[test]
    fn quick_cpu_run_is_sane() {
        let ctx = quick_cpu_context();
        let r = run_suite(&AllocatorSuite, &ctx, &NoProgress);
        assert_eq!(r.cases.len(), 2 * sizes(true).len() + 2);
        for c in &r.cases {
            assert_eq!(c.outcome, Outcome::Ok, "{}: {:?}", c.name, c.outcome);
            assert!(c.memory.is_none(), "{}: not profiled by the runner", c.name);
            let t = c.timing.as_ref().expect("timed");
            assert_eq!(Some(t.samples_ns.len()), ctx.harness.fixed_samples);
            assert!(t.median_ns > 0.0 && t.median_ns == c.metrics["pair_ns"]);
            for (k, v) in &c.metrics {
                assert!(v.is_finite(), "{}: {k} = {v}", c.name);
                assert!(["_ns", "_ratio", "_count", "_bytes"].iter().any(|u| k.ends_with(u)), "{k} has no unit");
                let may_be_zero = k == "device_mallocs_while_timed_count" || k == "overhead_per_pair_ns";
                assert!(may_be_zero || *v > 0.0, "{}: {k} = {v}", c.name);
            }
            if c.name.starts_with("cached/") {
                assert_eq!(c.metrics["device_mallocs_while_timed_count"], 0.0, "{}: served from the cache", c.name);
                assert!(c.metrics["block_bytes"] >= c.metrics["request_bytes"]);
                assert!(c.metrics["segment_bytes"] >= c.metrics["block_bytes"]);
            }
            if c.name.starts_with("raw/") {
                let cached = &r.cases.iter().find(|x| x.name == c.name.replace("raw/", "cached/")).unwrap();
                assert_eq!(c.metrics["segment_bytes"], cached.metrics["segment_bytes"], "the same segment");
                let ratio = c.metrics["raw_over_cached_ratio"];
                assert!((ratio - c.metrics["pair_ns"] / cached.metrics["pair_ns"]).abs() < 1e-9);
            }
        }
        let rec = r.cases.iter().find(|c| c.name == "recording/profiler").unwrap();
        assert!(rec.metrics["records_count"] > 0.0);
        assert!(rec.metrics["allocator_events_count"] >= rec.metrics["records_count"] / 2.0);
        assert!(rec.metrics.contains_key("overhead_ratio"));
        // 3 events per pair, 32 bytes per record at least: the fixed recording's size.
        assert!(rec.metrics["recording_bytes"] >= (FIXED_RECORDING_PAIRS * 2 * 32) as f64);

        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.findings[0].claim, "the caching allocator makes allocation cheap");
        assert!(r.findings[0].evidence.contains("4 KiB (small pool, 2 MiB segment)"), "{}", r.findings[0].evidence);
        assert!(r.findings[0].evidence.contains("glibc"), "{}", r.findings[0].evidence);
        assert!(r.findings[1].evidence.contains("per pair"), "{}", r.findings[1].evidence);
    }

    fn result(name: &str, pair_ns: f64) -> CaseResult {
        CaseResult::ok(name)
            .with_params([("pool".into(), "small".into())])
            .with_metrics([("pair_ns".into(), pair_ns), ("segment_bytes".into(), (2 * MIB) as f64)])
            .with_duration_ns(1)
    }

    #[test]
    fn findings_follow_the_evidence() {
        let ctx = quick_cpu_context();
        let cheap = [result("cached/4KiB", 50.0), result("raw/4KiB", 5_000.0), result("recording/none", 50.0)];
        let f = findings(&ctx, &[&cheap[..], &[result("recording/profiler", 80.0)]].concat());
        assert_eq!(f[0].verdict, Verdict::Holds, "{}", f[0].evidence);
        assert!(f[0].evidence.contains("100.0×"), "{}", f[0].evidence);
        assert_eq!(f[1].verdict, Verdict::Holds, "{}", f[1].evidence);
        assert!(f[1].evidence.contains("30 ns more per pair"), "{}", f[1].evidence);

        let f = findings(&ctx, &[result("cached/4KiB", 50.0), result("raw/4KiB", 49.0)]);
        assert_eq!(f[0].verdict, Verdict::DoesNotHold, "{}", f[0].evidence);
        assert!(f[0].evidence.contains("not clearly cheaper"), "{}", f[0].evidence);
        assert_eq!(f[1].verdict, Verdict::Inconclusive);

        let mixed = [&cheap[..2], &[result("cached/64MiB", 50.0), result("raw/64MiB", 50.0)]].concat();
        assert_eq!(findings(&ctx, &mixed)[0].verdict, Verdict::Inconclusive);

        let slow = [result("recording/none", 50.0), result("recording/profiler", 5_000.0)];
        assert_eq!(findings(&ctx, &slow)[1].verdict, Verdict::DoesNotHold);
        assert_eq!(findings(&ctx, &[])[0].verdict, Verdict::Inconclusive);
    }
}
