//! `transfer`: host-to-device and device-to-host bandwidth by size, from
//! pageable and from pinned host memory; blocking vs `non_blocking` copies
//! overlapped with compute, on the default stream and on a side stream (a
//! `non_blocking` copy on the default stream frees the host, but the device
//! still runs it in order with the kernels on that stream; overlapping it with
//! compute takes a second stream, as in PyTorch).
//!
//! On the CPU the "device" is host memory: a host-to-device copy is a memcpy
//! between two host buffers, pinned and pageable buffers are not expected to
//! differ, and the synchronous backend cannot overlap a copy with compute. The
//! cases measure and record that honestly; the findings never read a GPU
//! effect into CPU numbers.

mod charts;

use std::hint::black_box;

use vramlab_engine::tensor::{DType, HostBuffer, Tensor, TensorError};

use super::devices::{gbps, size_label};
use crate::harness::measure;
use crate::schema::{CaseResult, Finding, Verdict};
use crate::suite::{Case, CaseError, CaseOutput, Context, Suite};

/// The `transfer` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct TransferSuite;

// Element counts are usize: the workspace's constants (vramlab_engine::alloc::consts), as usize.
const KIB: usize = vramlab_engine::alloc::consts::KIB as usize;
const MIB: usize = vramlab_engine::alloc::consts::MIB as usize;

const CLAIM_PINNED_H2D: &str = "Copies from pinned (page-locked) host memory to the device are faster than from \
                                pageable memory";
const CLAIM_PINNED_D2H: &str = "Copies from the device into pinned host memory are faster than into pageable memory";
const CLAIM_OVERLAP: &str = "A non_blocking copy from pinned memory overlaps with compute; a blocking copy does not";

/// Whether a pinned buffer is faster only counts when it is this much faster.
const PINNED_MARGIN: f64 = 1.10;

fn sizes(quick: bool) -> Vec<usize> {
    if quick { vec![64 * KIB, 4 * MIB, 16 * MIB] } else { vec![64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB] }
}

/// Direction of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    HostToDevice,
    DeviceToHost,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::HostToDevice => "h2d",
            Dir::DeviceToHost => "d2h",
        }
    }
}

fn memory_name(pinned: bool) -> &'static str {
    if pinned { "pinned" } else { "pageable" }
}

/// Why there is no GPU, when the run's device is the host.
fn no_gpu(ctx: &Context) -> Option<String> {
    ctx.device.is_cpu().then(|| ctx.gpu_unavailable.clone().unwrap_or_else(|| "the run targets the cpu".to_owned()))
}

/// The process's page-locking limit from /proc/self/limits ("Max locked memory"), in bytes.
fn memlock_limit() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line.split_whitespace().nth(3)?;
    Some(match soft.parse::<u64>() {
        Ok(b) => format!("{b} bytes"),
        Err(_) => soft.to_owned(),
    })
}

/// A host buffer of `bytes` with every page written (a fresh zeroed buffer
/// reads from the shared zero page, which would flatter every copy).
fn host_buffer(bytes: usize, pinned: bool) -> HostBuffer {
    let mut buf = if pinned { HostBuffer::pinned(bytes) } else { HostBuffer::pageable(bytes) };
    buf.as_bytes_mut().fill(0x3c);
    buf
}

impl Suite for TransferSuite {
    fn charts(&self, result: &crate::schema::SuiteResult) -> Vec<vramlab_display::chart::ChartSpec> {
        charts::charts(result)
    }

    fn name(&self) -> &'static str {
        "transfer"
    }

    fn description(&self) -> &'static str {
        "Host-to-device and device-to-host bandwidth by size from pageable and pinned memory, and blocking vs \
         non_blocking copies overlapped with compute"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let mut cases = Vec::new();
        for dir in [Dir::HostToDevice, Dir::DeviceToHost] {
            for pinned in [false, true] {
                for size in sizes(ctx.quick()) {
                    cases.push(
                        Case::new(
                            format!("{}/{}/{}", dir.name(), memory_name(pinned), size_label(size as u64)),
                            move |ctx| copy_case(ctx, dir, pinned, size),
                        )
                        .param("direction", dir.name())
                        .param("host_memory", memory_name(pinned))
                        .param("size_bytes", size),
                    );
                }
            }
        }
        for mode in [CopyMode::Blocking, CopyMode::NonBlocking, CopyMode::SideStream] {
            cases.push(
                Case::new(format!("overlap/{}", mode.name()), move |ctx| overlap_case(ctx, mode))
                    .param("non_blocking", mode != CopyMode::Blocking)
                    .param("stream", if mode == CopyMode::SideStream { "side" } else { "default" })
                    .param("host_memory", "pinned"),
            );
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        let no_gpu = no_gpu(ctx);
        let no_gpu = no_gpu.as_deref();
        vec![
            pinned_finding(no_gpu, cases, Dir::HostToDevice),
            pinned_finding(no_gpu, cases, Dir::DeviceToHost),
            overlap_finding(no_gpu, cases),
        ]
    }
}

fn copy_case(ctx: &Context, dir: Dir, pinned: bool, size: usize) -> Result<CaseOutput, CaseError> {
    let device = &ctx.device;
    let n = size / 4;
    let mut buf = host_buffer(n * 4, pinned);
    let stats = match dir {
        Dir::HostToDevice => measure(&ctx.harness, || {
            let t = Tensor::from_host(&buf, &[n], DType::F32, device, false)?;
            device.synchronize()?;
            black_box(t);
            Ok::<(), TensorError>(())
        })?,
        Dir::DeviceToHost => {
            let t = Tensor::full(&[n], 1.0, DType::F32, device)?;
            measure(&ctx.harness, || {
                t.copy_to_host(&mut buf, false)?;
                device.synchronize()?;
                Ok::<(), TensorError>(())
            })?
        }
    };
    let bytes = (n * 4) as f64;
    let mut out = CaseOutput::timed(stats.clone())
        .metric("size_bytes", bytes)
        .metric("bandwidth_gbps", gbps(bytes, stats.median_ns));
    if pinned {
        let locked = buf.is_page_locked();
        out = out.metric("page_locked_bytes", if locked { buf.len() as f64 } else { 0.0 });
        out = out.note(if locked {
            "the pinned buffer's pages were locked in memory".to_owned()
        } else {
            format!(
                "the pinned buffer could not be page-locked (the process may lock {}), so it is ordinary memory here",
                memlock_limit().unwrap_or_else(|| "an unknown amount".to_owned())
            )
        });
    }
    if let Some(reason) = no_gpu(ctx) {
        out = out.note(format!(
            "no GPU ({reason}): the device is host memory, so this copy is a memcpy between two host buffers; pinned \
             and pageable buffers are not expected to differ here"
        ));
    }
    Ok(out)
}

/// How the overlap cases copy the next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyMode {
    /// `to(device)`: the host waits for the copy.
    Blocking,
    /// `to(device, non_blocking=True)` on the default stream.
    NonBlocking,
    /// The same on a side stream, which the default stream waits for before
    /// using the batch (`wait_stream` + `record_stream`).
    SideStream,
}

impl CopyMode {
    fn name(self) -> &'static str {
        match self {
            CopyMode::Blocking => "blocking",
            CopyMode::NonBlocking => "non_blocking",
            CopyMode::SideStream => "side_stream",
        }
    }
}

/// Rows and columns of the copied batch (4 MiB of f32).
const BATCH: [usize; 2] = [1024, 1024];

/// Width of the weight each batch is multiplied with, chosen so that compute
/// and copy take times of the same order on the device (a GPU multiplies about
/// a hundred times faster than it copies from the host, a CPU the other way).
fn out_features(device: &vramlab_engine::device::Device) -> usize {
    if device.is_cpu() { 16 } else { 2048 }
}

/// One training-loop-like step: copy the next batch while computing on the current one.
fn overlap_case(ctx: &Context, mode: CopyMode) -> Result<CaseOutput, CaseError> {
    let device = &ctx.device;
    let n = BATCH[0] * BATCH[1];
    let buf = host_buffer(n * 4, true);
    let out_features = out_features(device);
    let w = Tensor::randn(&[BATCH[1], out_features], DType::F32, ctx.seed(), device)?;
    let side = if mode == CopyMode::SideStream { device.create_stream()? } else { 0 };
    let copy = || match mode {
        CopyMode::Blocking => Tensor::from_host(&buf, &BATCH, DType::F32, device, false),
        CopyMode::NonBlocking => Tensor::from_host(&buf, &BATCH, DType::F32, device, true),
        CopyMode::SideStream => Tensor::from_host_on_stream(&buf, &BATCH, DType::F32, device, side),
    };
    // The default stream waits for the side stream's copy before it uses the batch.
    let hand_over = |t: &Tensor| -> Result<(), TensorError> {
        if mode == CopyMode::SideStream {
            device.wait_stream(0, side)?;
            t.record_stream(0);
        }
        Ok(())
    };
    let copy_alone = measure(&ctx.harness, || {
        let t = copy()?;
        device.synchronize()?;
        black_box(t);
        Ok::<(), TensorError>(())
    })?;
    let mut current = copy()?;
    hand_over(&current)?;
    device.synchronize()?;
    let compute_alone = measure(&ctx.harness, || {
        let y = current.matmul(&w)?;
        device.synchronize()?;
        black_box(y);
        Ok::<(), TensorError>(())
    })?;
    let both = measure(&ctx.harness, || {
        let next = copy()?;
        let y = current.matmul(&w)?;
        hand_over(&next)?;
        device.synchronize()?;
        current = next;
        black_box(y);
        Ok::<(), TensorError>(())
    })?;
    let (c, k, b) = (copy_alone.median_ns, compute_alone.median_ns, both.median_ns);
    let hidden = ((c + k - b) / c.min(k).max(1.0) * 100.0).clamp(0.0, 100.0);
    let mut out = CaseOutput::timed(both)
        .metric("copy_alone_ns", c)
        .metric("compute_alone_ns", k)
        .metric("copy_plus_compute_ns", c + k)
        .metric("overlap_percent", hidden)
        .metric("batch_bytes", (n * 4) as f64)
        .metric("page_locked_bytes", if buf.is_page_locked() { buf.len() as f64 } else { 0.0 })
        .note(format!(
            "each step copies a {:?} f32 batch ({}) {} and multiplies the previous batch by a [{}, {out_features}] \
             weight; overlap_percent is the share of the shorter of copy and compute hidden by running them together",
            BATCH,
            size_label((n * 4) as u64),
            match mode {
                CopyMode::Blocking => "blocking",
                CopyMode::NonBlocking => "with non_blocking=true on the default stream",
                CopyMode::SideStream => "with non_blocking=true on a side stream",
            },
            BATCH[1]
        ));
    if let Some(reason) = no_gpu(ctx) {
        out = out.note(format!(
            "no GPU ({reason}): the CPU backend completes every copy before returning, so non_blocking cannot \
             overlap anything here; any overlap measured is noise"
        ));
    }
    Ok(out)
}

/// (size, pageable GB/s, pinned GB/s, pinned page-locked) per size where both ran.
fn pinned_pairs(cases: &[CaseResult], dir: Dir) -> Vec<(f64, f64, f64, bool)> {
    let get = |pinned: bool, size: f64| {
        cases.iter().find(|c| {
            c.outcome.is_ok()
                && c.params.get("direction").and_then(|v| v.as_str()) == Some(dir.name())
                && c.params.get("host_memory").and_then(|v| v.as_str()) == Some(memory_name(pinned))
                && c.metrics.get("size_bytes") == Some(&size)
        })
    };
    let mut sizes: Vec<f64> = cases
        .iter()
        .filter(|c| c.params.get("direction").and_then(|v| v.as_str()) == Some(dir.name()))
        .filter_map(|c| c.metrics.get("size_bytes").copied())
        .collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|s| {
            let (pageable, pinned) = (get(false, s)?, get(true, s)?);
            Some((
                s,
                *pageable.metrics.get("bandwidth_gbps")?,
                *pinned.metrics.get("bandwidth_gbps")?,
                pinned.metrics.get("page_locked_bytes").is_some_and(|&b| b > 0.0),
            ))
        })
        .collect()
}

/// The verdict on pinned memory for `dir`; `no_gpu` is why there is no GPU, when there is none.
fn pinned_finding(no_gpu: Option<&str>, cases: &[CaseResult], dir: Dir) -> Finding {
    let claim = match dir {
        Dir::HostToDevice => CLAIM_PINNED_H2D,
        Dir::DeviceToHost => CLAIM_PINNED_D2H,
    }
    .to_owned();
    let pairs = pinned_pairs(cases, dir);
    let summary = pairs
        .iter()
        .map(|(s, pageable, pinned, locked)| {
            format!(
                "{}: pageable {pageable:.2} GB/s, pinned {pinned:.2} GB/s{}",
                size_label(*s as u64),
                if *locked { "" } else { " (not page-locked)" }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(reason) = no_gpu {
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!(
                "no GPU ({reason}): the device is host memory, where pinned and pageable buffers are not expected to \
                 differ; measured {summary}"
            ),
        };
    }
    // The largest size whose pinned buffer really was page-locked.
    let Some(&(size, pageable, pinned, _)) = pairs.iter().rev().find(|p| p.3) else {
        return Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!("no pinned buffer could be page-locked, so nothing pinned was measured: {summary}"),
        };
    };
    let ratio = if pageable > 0.0 { pinned / pageable } else { 0.0 };
    Finding {
        claim,
        verdict: if ratio >= PINNED_MARGIN { Verdict::Holds } else { Verdict::DoesNotHold },
        evidence: format!("at {}, pinned is {ratio:.2}x pageable ({summary})", size_label(size as u64)),
    }
}

fn overlap_finding(no_gpu: Option<&str>, cases: &[CaseResult]) -> Finding {
    let claim = CLAIM_OVERLAP.to_owned();
    let get = |name: &str| {
        cases
            .iter()
            .find(|c| c.name == name && c.outcome.is_ok())
            .and_then(|c| c.metrics.get("overlap_percent").copied())
    };
    let (blocking, non_blocking, side) =
        (get("overlap/blocking"), get("overlap/non_blocking"), get("overlap/side_stream"));
    let fmt = |v: Option<f64>| v.map_or_else(|| "not measured".to_owned(), |p| format!("{p:.0} %"));
    let summary = format!(
        "overlap: blocking {}, non_blocking on the default stream {}, non_blocking on a side stream {}",
        fmt(blocking),
        fmt(non_blocking),
        fmt(side)
    );
    if let Some(reason) = no_gpu {
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!(
                "no GPU ({reason}): the CPU backend runs synchronously, so no copy can overlap compute; {summary}"
            ),
        };
    }
    let locked = cases
        .iter()
        .find(|c| c.name == "overlap/side_stream")
        .is_some_and(|c| c.metrics.get("page_locked_bytes").is_some_and(|&b| b > 0.0));
    let overlaps = |v: f64, b: f64| v >= 25.0 && v >= b + 10.0;
    match (blocking, non_blocking, side) {
        (Some(_), _, Some(_)) if !locked => Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!("the batch buffer could not be page-locked; {summary}"),
        },
        (Some(b), nb, Some(sb)) => {
            let caveat = match nb {
                Some(nb) if overlaps(nb, b) => "; on the default stream it overlaps too".to_owned(),
                Some(_) => "; on the default stream it does not: the copy runs in order with the kernels there, so \
                            overlap takes a side stream"
                    .to_owned(),
                None => String::new(),
            };
            Finding {
                claim,
                verdict: if overlaps(sb, b) { Verdict::Holds } else { Verdict::DoesNotHold },
                evidence: format!("{summary}{caveat}"),
            }
        }
        _ => Finding { claim, verdict: Verdict::Inconclusive, evidence: summary },
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::suite::testing::quick_cpu_context;

    use crate::runner::run_suite;

    use crate::suite::NoProgress;

    #[test]
    fn quick_cpu_run_is_sane() {
        let ctx = quick_cpu_context();
        let r = run_suite(&TransferSuite, &ctx, &NoProgress);
        assert_eq!(r.name, "transfer");
        assert_eq!(r.cases.len(), 4 * sizes(true).len() + 3);
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            let t = c.timing.as_ref().unwrap();
            assert!(t.median_ns > 0.0, "{}", c.name);
            for (k, v) in &c.metrics {
                assert!(v.is_finite() && *v >= 0.0, "{}: {k} = {v}", c.name);
            }
            assert!(c.notes.iter().any(|n| n.contains("test context")), "{}: {:?}", c.name, c.notes);
            if c.name.starts_with("h2d/") || c.name.starts_with("d2h/") {
                assert!(c.metrics["bandwidth_gbps"] > 0.0, "{}", c.name);
                let pinned = c.params["host_memory"] == "pinned";
                assert_eq!(c.metrics.contains_key("page_locked_bytes"), pinned, "{}", c.name);
                if pinned {
                    assert!(c.notes.iter().any(|n| n.contains("page-locked") || n.contains("locked in memory")));
                }
            } else {
                for m in ["copy_alone_ns", "compute_alone_ns", "copy_plus_compute_ns"] {
                    assert!(c.metrics[m] > 0.0, "{}: {m}", c.name);
                }
                assert!((0.0..=100.0).contains(&c.metrics["overlap_percent"]));
            }
        }
        assert_eq!(r.findings.len(), 3);
        for f in &r.findings {
            assert_eq!(f.verdict, Verdict::NotApplicable, "{}: {}", f.claim, f.evidence);
            assert!(f.evidence.contains("test context"), "{}", f.evidence);
        }
        assert!(r.findings[0].evidence.contains("16MiB: pageable"), "{}", r.findings[0].evidence);
    }

    fn copy_result(dir: Dir, pinned: bool, size: f64, gbps: f64, locked: bool) -> CaseResult {
        let mut params = std::collections::BTreeMap::new();
        params.insert("direction".into(), dir.name().into());
        params.insert("host_memory".into(), memory_name(pinned).into());
        let mut metrics = std::collections::BTreeMap::new();
        metrics.insert("size_bytes".into(), size);
        metrics.insert("bandwidth_gbps".into(), gbps);
        if pinned {
            metrics.insert("page_locked_bytes".into(), if locked { size } else { 0.0 });
        }
        CaseResult::ok(format!("{}/{}/{size}", dir.name(), memory_name(pinned)))
            .with_params(params)
            .with_metrics(metrics)
    }

    #[test]
    fn pinned_verdicts_on_a_gpu_need_locked_pages() {
        let cases = vec![
            copy_result(Dir::HostToDevice, false, 1e6, 10.0, false),
            copy_result(Dir::HostToDevice, true, 1e6, 20.0, true),
            copy_result(Dir::HostToDevice, false, 1e8, 10.0, false),
            copy_result(Dir::HostToDevice, true, 1e8, 10.0, false),
        ];
        assert_eq!(pinned_pairs(&cases, Dir::HostToDevice).len(), 2);
        assert_eq!(pinned_finding(Some("no driver"), &cases, Dir::HostToDevice).verdict, Verdict::NotApplicable);
        // With a GPU, the largest size whose pinned buffer was locked decides.
        let f = pinned_finding(None, &cases, Dir::HostToDevice);
        assert_eq!(f.verdict, Verdict::Holds, "{}", f.evidence);
        assert!(f.evidence.contains("pinned is 2.00x pageable"), "{}", f.evidence);
        let unlocked: Vec<_> = cases.iter().filter(|c| c.metrics["size_bytes"] > 1e7).cloned().collect();
        assert_eq!(pinned_finding(None, &unlocked, Dir::HostToDevice).verdict, Verdict::Inconclusive);
        assert_eq!(pinned_finding(None, &cases, Dir::DeviceToHost).verdict, Verdict::Inconclusive);
        assert_eq!(overlap_finding(None, &[]).verdict, Verdict::Inconclusive);
    }

    fn overlap_result(name: &str, percent: f64) -> CaseResult {
        let mut metrics = std::collections::BTreeMap::new();
        metrics.insert("overlap_percent".into(), percent);
        metrics.insert("page_locked_bytes".into(), 4e6);
        CaseResult::ok(name).with_metrics(metrics)
    }

    #[test]
    fn overlap_verdict_follows_the_side_stream_and_says_what_the_default_stream_did() {
        let cases = vec![
            overlap_result("overlap/blocking", 2.0),
            overlap_result("overlap/non_blocking", 4.0),
            overlap_result("overlap/side_stream", 80.0),
        ];
        let f = overlap_finding(None, &cases);
        assert_eq!(f.verdict, Verdict::Holds, "{}", f.evidence);
        assert!(f.evidence.contains("on the default stream it does not"), "{}", f.evidence);
        assert!(f.evidence.contains("side stream 80 %"), "{}", f.evidence);
        let mut no_side = cases.clone();
        no_side[2] = overlap_result("overlap/side_stream", 5.0);
        assert_eq!(overlap_finding(None, &no_side).verdict, Verdict::DoesNotHold);
        assert_eq!(overlap_finding(Some("no driver"), &cases).verdict, Verdict::NotApplicable);
    }
}
