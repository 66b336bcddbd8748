//! `devices`: what is here (the guides' `torch.cuda.is_available()`,
//! `device_count()` and `get_device_name()`, and why CUDA is unavailable when it
//! is), the device-mismatch error as a result, and the cost of `.to(device)`
//! round trips by size.
//!
//! Without a GPU the round trips go between `cpu` and `cpu:1`, two host memory
//! spaces: that is a host memory copy, and the findings say so rather than read
//! a GPU link into it.

use std::hint::black_box;

use vramlab_engine::device::{Device, DeviceId, DeviceKind, cuda_probe};
use vramlab_engine::hooks::now_ns;
use vramlab_engine::tensor::{DType, Tensor, TensorError};

use crate::harness::measure;
use crate::schema::{CaseResult, Finding, Outcome, Verdict};
use crate::suite::{Case, CaseOutput, Context, Suite};

/// The `devices` suite.
#[derive(Debug, Clone, Copy, Default)]
pub struct DevicesSuite;

use vramlab_engine::alloc::consts::{GIB, KIB, MIB};

const CLAIM_MISMATCH: &str = "An op whose operands live on different devices fails with an error naming both devices; \
                              nothing is copied silently";
const CLAIM_TO_COST: &str = "Moving a tensor with .to(device) has a fixed cost per call, so small tensors move far \
                             below the bandwidth large ones reach";

/// The round-trip sizes.
fn roundtrip_sizes(quick: bool) -> Vec<u64> {
    if quick { vec![4 * KIB, MIB, 64 * MIB] } else { vec![4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB] }
}

/// `4KiB`, `64MiB`: sizes in case names.
pub(crate) fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= GIB && b.is_multiple_of(GIB) => format!("{}GiB", b / GIB),
        b if b >= MIB && b.is_multiple_of(MIB) => format!("{}MiB", b / MIB),
        b if b >= KIB && b.is_multiple_of(KIB) => format!("{}KiB", b / KIB),
        b => format!("{b}B"),
    }
}

/// GB/s (10⁹ bytes per second) of `bytes` moved in `ns`.
pub(crate) fn gbps(bytes: f64, ns: f64) -> f64 {
    if ns > 0.0 { bytes / ns } else { 0.0 }
}

/// Median of unsorted values (0 for none).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// The device a tensor on `device` is paired with to break the golden rule (and
/// to carry round trips to when `device` is the host): `cpu:1` for `cpu`, `cpu`
/// for anything else.
fn partner(device: &Device) -> Result<Device, TensorError> {
    if device.id() == DeviceId::CPU { Ok(Device::parse("cpu:1")?) } else { Ok(Device::cpu()) }
}

/// Where `.to(device)` round trips go from the host: the run's device, or
/// `cpu:1` when the run's device is the host itself.
fn roundtrip_target(ctx: &Context) -> Result<Device, TensorError> {
    if ctx.device.id() == DeviceId::CPU { Ok(Device::parse("cpu:1")?) } else { Ok(ctx.device.clone()) }
}

impl Suite for DevicesSuite {
    fn name(&self) -> &'static str {
        "devices"
    }

    fn description(&self) -> &'static str {
        "What is here (device_count, get_device_name, is_available, and why CUDA is unavailable when it is), the \
         device-mismatch error as a result, and the cost of .to(device) round trips by size"
    }

    fn cases(&self, ctx: &Context) -> Vec<Case> {
        let mut cases = vec![
            Case::new("is_available", |_| Ok(availability())),
            Case::new("device_properties", |ctx| Ok(properties(&ctx.device))).param("device", ctx.device.to_string()),
            Case::new("device_mismatch", device_mismatch).param("device", ctx.device.to_string()).param(
                "other_device",
                if ctx.device.id() == DeviceId::CPU { "cpu:1".to_owned() } else { "cpu".to_owned() },
            ),
        ];
        let target = if ctx.device.id() == DeviceId::CPU { "cpu:1".to_owned() } else { ctx.device.to_string() };
        for size in roundtrip_sizes(ctx.quick()) {
            cases.push(
                Case::new(format!("to_roundtrip/{}", size_label(size)), move |ctx| roundtrip(ctx, size))
                    .param("size_bytes", size)
                    .param("from", "cpu")
                    .param("to", target.clone()),
            );
        }
        cases
    }

    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding> {
        vec![mismatch_finding(cases), to_cost_finding(ctx, cases)]
    }
}

/// `torch.cuda.is_available()`, `device_count()`, `get_device_name(i)`, and why.
fn availability() -> CaseOutput {
    let probe = cuda_probe();
    let driver_devices = *probe.as_ref().unwrap_or(&0);
    let mut usable = Vec::new();
    let mut unusable_reason = probe.as_ref().err().map(|r| format!("CUDA unavailable: {r}"));
    for i in 0..driver_devices {
        match Device::get(DeviceId::cuda(i)) {
            Ok(d) => usable.push(d),
            Err(e) => {
                unusable_reason.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let (auto, auto_reason) = Device::auto();
    let mut out = CaseOutput::default()
        .metric("cuda_driver_devices_count", f64::from(driver_devices))
        .metric("cuda_usable_devices_count", usable.len() as f64);
    out = match (&probe, usable.is_empty()) {
        (Ok(n), true) => out.note(format!(
            "torch.cuda.is_available() -> False: the driver reports {n} device(s), but none can be used: {}",
            unusable_reason.as_deref().unwrap_or("no reason given")
        )),
        (Err(_), _) => out.note(format!(
            "torch.cuda.is_available() -> False: {}",
            unusable_reason.as_deref().unwrap_or("no reason given")
        )),
        (Ok(_), false) => out.note("torch.cuda.is_available() -> True"),
    };
    out = out.note(format!("torch.cuda.device_count() -> {}", usable.len()));
    for d in &usable {
        out = out.note(format!("torch.cuda.get_device_name({}) -> {}", d.id().index, d.properties().name));
    }
    out.note(format!("Device::auto() picks {auto}{}", auto_reason.map(|r| format!(" ({r})")).unwrap_or_default()))
}

/// What the run's device is: name, memory, compute units, caches.
fn properties(device: &Device) -> CaseOutput {
    let p = device.properties();
    let mut out = CaseOutput::default()
        .metric("memory_capacity_bytes", p.memory_capacity_bytes as f64)
        .metric("compute_units_count", f64::from(p.compute_units))
        .note(format!("device {}: {}", p.id, p.name));
    out = match p.id.kind {
        DeviceKind::Cpu => out.note(format!(
            "compute units are logical cores; the capacity is the allocator's limit for this host device ({})",
            vramlab_display::format::fmt_bytes(p.memory_capacity_bytes)
        )),
        DeviceKind::Cuda => out.note("compute units are streaming multiprocessors"),
    };
    for c in &p.caches {
        out = out.metric(&format!("cache_{}_bytes", c.level.to_ascii_lowercase()), c.size_bytes as f64);
    }
    out
}

/// Breaks the golden rule on purpose: the error is the expected result.
fn device_mismatch(ctx: &Context) -> Result<CaseOutput, crate::suite::CaseError> {
    let other = partner(&ctx.device)?;
    let a = Tensor::randn(&[32, 32], DType::F32, ctx.seed(), &ctx.device)?;
    let b = Tensor::randn(&[32, 32], DType::F32, ctx.seed().wrapping_add(1), &other)?;
    let mut out = CaseOutput::default().note(format!("a on {}, b on {}", a.device(), b.device()));
    let other_before = other.memory_allocated();
    let tries: [(&str, Result<Tensor, TensorError>); 2] = [("a.matmul(&b)", a.matmul(&b)), ("a.add(&b)", a.add(&b))];
    let mut raised = 0u32;
    for (what, result) in tries {
        match result {
            Err(e @ TensorError::DeviceMismatch { .. }) => {
                raised += 1;
                out = out.note(format!("{what}: error: {e}"));
            }
            Err(e) => return Err(format!("{what} failed, but not with the device-mismatch error: {e}").into()),
            Ok(_) => {
                return Err(format!(
                    "{what} with operands on {} and {} succeeded: the golden rule was not enforced",
                    ctx.device, other
                )
                .into());
            }
        }
    }
    let copied = other.memory_allocated().saturating_sub(other_before);
    let fixed = a.matmul(&b.to(&ctx.device)?)?;
    Ok(out
        .metric("mismatch_errors_count", f64::from(raised))
        .metric("ops_tried_count", 2.0)
        .note(format!(
            "the fix: a.matmul(&b.to(&{})) succeeds, giving {:?} on {}",
            ctx.device,
            fixed.shape(),
            fixed.device()
        ))
        .note(if copied == 0 {
            "nothing was allocated on the other device by the failed ops: no silent copy".to_owned()
        } else {
            format!("{copied} bytes appeared on {other} while the failed ops ran (other work may share that device)")
        }))
}

/// Host → device → host with `.to()`, `size` bytes of f32.
fn roundtrip(ctx: &Context, size: u64) -> Result<CaseOutput, crate::suite::CaseError> {
    let host = Device::cpu();
    let target = roundtrip_target(ctx)?;
    let n = (size / 4) as usize;
    let t = Tensor::full(&[n], 1.0, DType::F32, &host)?;
    let (mut there, mut back) = (Vec::new(), Vec::new());
    let stats = measure(&ctx.harness, || {
        let t0 = now_ns();
        let d = t.to(&target)?;
        target.synchronize()?;
        let t1 = now_ns();
        let h = d.to(&host)?;
        host.synchronize()?;
        let t2 = now_ns();
        there.push((t1 - t0) as f64);
        back.push((t2 - t1) as f64);
        black_box(h);
        Ok::<(), TensorError>(())
    })?;
    let (to_ns, back_ns) = (median(&mut there), median(&mut back));
    let bytes = (n * 4) as f64;
    let mut out = CaseOutput::timed(stats.clone())
        .metric("size_bytes", bytes)
        .metric("roundtrip_gbps", gbps(2.0 * bytes, stats.median_ns))
        .metric("to_device_median_ns", to_ns)
        .metric("to_host_median_ns", back_ns)
        .metric("to_device_gbps", gbps(bytes, to_ns))
        .metric("to_host_gbps", gbps(bytes, back_ns));
    if target.is_cpu() {
        out = out.note(format!(
            "no GPU here ({}): the round trip goes cpu -> {target} -> cpu, between two host memory spaces, so \
             this is a host memory copy plus allocator work, not a host-device link",
            ctx.gpu_unavailable.as_deref().unwrap_or("the run targets the cpu")
        ));
        if target != ctx.device {
            // Our own partner device: give its cached segments back.
            drop(t);
            target.empty_cache();
        }
    }
    Ok(out)
}

fn mismatch_finding(cases: &[CaseResult]) -> Finding {
    let claim = CLAIM_MISMATCH.to_owned();
    let Some(case) = cases.iter().find(|c| c.name == "device_mismatch") else {
        return Finding { claim, verdict: Verdict::Inconclusive, evidence: "the mismatch case did not run".into() };
    };
    match &case.outcome {
        Outcome::Ok => {
            let raised = case.metrics.get("mismatch_errors_count").copied().unwrap_or(0.0);
            let tried = case.metrics.get("ops_tried_count").copied().unwrap_or(0.0);
            let first = case.notes.iter().find(|n| n.contains("error:")).cloned().unwrap_or_default();
            if raised > 0.0 && raised == tried {
                Finding {
                    claim,
                    verdict: Verdict::Holds,
                    evidence: format!("{raised} of {tried} mixed-device ops failed with the mismatch error; {first}"),
                }
            } else {
                Finding {
                    claim,
                    verdict: Verdict::Inconclusive,
                    evidence: format!("{raised} of {tried} mixed-device ops raised the mismatch error"),
                }
            }
        }
        Outcome::Failed { message } if message.contains("golden rule was not enforced") => {
            Finding { claim, verdict: Verdict::DoesNotHold, evidence: message.clone() }
        }
        Outcome::Failed { message } => {
            Finding { claim, verdict: Verdict::Inconclusive, evidence: format!("the mismatch case failed: {message}") }
        }
        Outcome::NotAvailable { reason } => {
            Finding { claim, verdict: Verdict::NotApplicable, evidence: reason.clone() }
        }
    }
}

fn to_cost_finding(ctx: &Context, cases: &[CaseResult]) -> Finding {
    let claim = CLAIM_TO_COST.to_owned();
    let mut points: Vec<(f64, f64)> = cases
        .iter()
        .filter(|c| c.name.starts_with("to_roundtrip/") && c.outcome.is_ok())
        .filter_map(|c| Some((*c.metrics.get("size_bytes")?, *c.metrics.get("roundtrip_gbps")?)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let summary =
        points.iter().map(|(s, g)| format!("{}: {g:.2} GB/s", size_label(*s as u64))).collect::<Vec<_>>().join(", ");
    if ctx.device.is_cpu() {
        return Finding {
            claim,
            verdict: Verdict::NotApplicable,
            evidence: format!(
                "no GPU ({}): the round trips went between host memory spaces (cpu and cpu:1), which says nothing \
                 about a host-device link; measured {summary}",
                ctx.gpu_unavailable.as_deref().unwrap_or("the run targets the cpu")
            ),
        };
    }
    match (points.first(), points.last()) {
        (Some(&(small_size, small)), Some(&(large_size, large))) if points.len() >= 2 && large > 0.0 => {
            let ratio = small / large;
            let verdict = if ratio < 0.5 { Verdict::Holds } else { Verdict::DoesNotHold };
            Finding {
                claim,
                verdict,
                evidence: format!(
                    "{} round trips reach {:.0}% of the bandwidth of {} ones ({summary})",
                    size_label(small_size as u64),
                    ratio * 100.0,
                    size_label(large_size as u64)
                ),
            }
        }
        _ => Finding {
            claim,
            verdict: Verdict::Inconclusive,
            evidence: format!("too few round-trip sizes succeeded to compare ({summary})"),
        },
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::suite::testing::quick_cpu_context;

    use crate::runner::run_suite;

    use crate::suite::NoProgress;

    #[test]
    fn labels_and_helpers() {
        assert_eq!(size_label(4 * KIB), "4KiB");
        assert_eq!(size_label(64 * MIB), "64MiB");
        assert_eq!(size_label(1000), "1000B");
        assert_eq!(gbps(2e9, 1e9), 2.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn quick_cpu_run_is_sane() {
        let ctx = quick_cpu_context();
        let r = run_suite(&DevicesSuite, &ctx, &NoProgress);
        assert_eq!(r.name, "devices");
        let names: Vec<_> = r.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "is_available",
                "device_properties",
                "device_mismatch",
                "to_roundtrip/4KiB",
                "to_roundtrip/1MiB",
                "to_roundtrip/64MiB"
            ]
        );
        for c in &r.cases {
            assert!(c.outcome.is_ok(), "{}: {:?}", c.name, c.outcome);
            for (k, v) in &c.metrics {
                assert!(v.is_finite() && *v >= 0.0, "{}: {k} = {v}", c.name);
            }
        }
        let avail = &r.cases[0];
        assert!(avail.notes.iter().any(|n| n.starts_with("torch.cuda.is_available() -> ")), "{:?}", avail.notes);
        assert!(avail.notes.iter().any(|n| n.starts_with("torch.cuda.device_count() -> ")));
        if cuda_probe().is_err() {
            assert_eq!(avail.metrics["cuda_usable_devices_count"], 0.0);
            assert!(avail.notes[0].contains("False: CUDA unavailable"), "{}", avail.notes[0]);
        }
        let props = &r.cases[1];
        assert!(props.metrics["memory_capacity_bytes"] > 0.0);
        assert!(props.metrics["compute_units_count"] >= 1.0);

        let mismatch = &r.cases[2];
        assert_eq!(mismatch.metrics["mismatch_errors_count"], 2.0);
        let errors: Vec<_> = mismatch.notes.iter().filter(|n| n.contains("error:")).collect();
        assert_eq!(errors.len(), 2, "{:?}", mismatch.notes);
        assert!(errors[0].contains("operands are on different devices (lhs on cpu, rhs on cpu:1)"), "{}", errors[0]);
        assert!(errors[0].starts_with("a.matmul(&b): error: matmul:"), "{}", errors[0]);

        for c in &r.cases[3..] {
            let t = c.timing.as_ref().expect("round trips are timed");
            assert_eq!(t.samples_ns.len(), 3);
            assert!(t.median_ns > 0.0);
            for m in ["roundtrip_gbps", "to_device_gbps", "to_host_gbps", "size_bytes"] {
                assert!(c.metrics[m] > 0.0, "{}: {m}", c.name);
            }
            assert!(c.notes.iter().any(|n| n.contains("host memory copy")), "{:?}", c.notes);
        }
        assert_eq!(r.cases[5].metrics["size_bytes"], (64 * MIB) as f64);

        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.findings[0].verdict, Verdict::Holds, "{}", r.findings[0].evidence);
        assert_eq!(r.findings[1].verdict, Verdict::NotApplicable);
        assert!(r.findings[1].evidence.contains("test context"), "{}", r.findings[1].evidence);
    }

    #[test]
    fn findings_read_a_failed_golden_rule_as_does_not_hold() {
        let case = CaseResult::failed(
            "device_mismatch",
            "a.add(&b) with operands on cpu and cpu:1 succeeded: the golden rule was not enforced",
        );
        assert_eq!(mismatch_finding(&[case]).verdict, Verdict::DoesNotHold);
        assert_eq!(mismatch_finding(&[]).verdict, Verdict::Inconclusive);
    }
}
