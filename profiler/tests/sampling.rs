//! The sampler: NVML absence is reported, never a panic; the host's resident
//! memory is sampled as the CPU device's counterpart.

mod common;

use std::time::Duration;

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::hooks::Hooks;
use vramlab_profiler::{
    DeviceInfo, HostStatus, NvmlStatus, Profiler, ProfilerConfig, SamplingConfig, UntrackedBasis, probe_nvml,
};

#[test]
fn missing_nvml_library_is_reported_not_fatal() {
    let hub = Hooks::new();
    let sampling = SamplingConfig {
        interval: Duration::from_millis(2),
        nvml: true,
        host: false,
        nvml_library: Some("/nonexistent/vramlab/libnvidia-ml.so.1".into()),
    };
    let profiler = Profiler::start(ProfilerConfig::on(hub).sampling(sampling)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let profile = profiler.stop();
    let NvmlStatus::Unavailable { reason } = &profile.samples.nvml else {
        panic!("expected NVML to be unavailable, got {:?}", profile.samples.nvml)
    };
    assert!(!reason.is_empty());
    assert!(profile.samples.nvml.to_string().starts_with("NVML unavailable: "), "{}", profile.samples.nvml);
    assert!(profile.samples.gpu.is_empty());
    assert!(profile.reconciliation.is_empty());
    assert_eq!(profile.samples.host, HostStatus::Disabled);

    let err = probe_nvml(Some("/nonexistent/vramlab/libnvidia-ml.so.1".as_ref())).unwrap_err();
    assert!(err.to_string().starts_with("NVML unavailable: "), "{err}");
}

#[test]
fn system_nvml_is_either_sampled_or_explained() {
    // On this project's CI there is no NVIDIA driver: NVML is unavailable and
    // says why. On a GPU machine it is available and samples every GPU.
    let hub = Hooks::new();
    let sampling = SamplingConfig { interval: Duration::from_millis(5), host: false, ..SamplingConfig::default() };
    let profiler = Profiler::start(ProfilerConfig::on(hub).sampling(sampling)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let profile = profiler.stop();
    match &profile.samples.nvml {
        NvmlStatus::Unavailable { reason } => {
            println!("skipped NVML samples: NVML unavailable: {reason}");
            assert!(profile.samples.gpu.is_empty());
        }
        NvmlStatus::Available { devices, .. } => {
            if !devices.is_empty() {
                assert!(profile.samples.gpu.len() >= 2 * devices.len(), "one sample at start, one at stop");
            }
            for s in &profile.samples.gpu {
                assert!(devices.iter().any(|d| d.nvml_index == s.nvml_index));
            }
        }
        NvmlStatus::Disabled => panic!("NVML sampling was asked for"),
    }
}

#[test]
fn host_samples_reconcile_the_cpu_device() {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, None, AllocatorConfig::default(), 0);
    let sampling = SamplingConfig { interval: Duration::from_millis(2), nvml: false, ..SamplingConfig::default() };
    let profiler = Profiler::start(ProfilerConfig::on(hub).device(DeviceInfo::cpu(0)).sampling(sampling)).unwrap();
    let a = alloc.malloc(common::MIB, 0, None).unwrap();
    std::thread::sleep(Duration::from_millis(12));
    let profile = profiler.stop();
    assert_eq!(profile.samples.nvml, NvmlStatus::Disabled);
    if cfg!(target_os = "linux") {
        assert_eq!(profile.samples.host, HostStatus::Available);
        assert!(profile.samples.host_samples.len() >= 2);
        assert!(profile.samples.host_samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert_eq!(profile.samples.interval_ns, 2_000_000);
        let r = &profile.reconciliation[0];
        assert_eq!(r.device, 0);
        assert_eq!(r.basis, UntrackedBasis::HostResident);
        let resident = r.host_resident_bytes.unwrap();
        assert_eq!(r.untracked_bytes, resident as i64 - r.allocator_reserved_bytes as i64);
        assert!(r.max_untracked_bytes >= r.untracked_bytes);
    }
    alloc.free(a).unwrap();
}

#[test]
fn sampling_can_be_switched_off() {
    let profiler = Profiler::start(ProfilerConfig::on(Hooks::new()).without_sampling()).unwrap();
    let profile = profiler.stop();
    assert_eq!(profile.samples.nvml, NvmlStatus::Disabled);
    assert_eq!(profile.samples.host, HostStatus::Disabled);
    assert!(profile.samples.gpu.is_empty() && profile.samples.host_samples.is_empty());
}
