//! The environment a run records: what this machine is — its processor, memory
//! and GPUs (read from the CUDA driver through the runtime), or why it has none.

use vramlab_engine::alloc::physical_memory_bytes;
use vramlab_engine::cuda::CudaInfo;
use vramlab_engine::device::{Device, cuda_probe};

use crate::schema::{Environment, GpuInfo};

/// Reads the machine: processor, memory, GPUs (or why there are none). The
/// caller adds what only it can know (rustc version, git commit).
pub fn detect(device: &Device) -> Environment {
    let cpu = Device::cpu();
    let p = cpu.properties();
    let (mut gpus, gpu_unavailable_reason) = match cuda_probe() {
        Ok(n) => {
            let (gpus, failures) = open_gpus(n);
            let reason = if gpus.is_empty() {
                Some(format!(
                    "CUDA unavailable: the driver reports {n} device(s) but none opens: {}",
                    failures.join("; ")
                ))
            } else if device.is_cpu() {
                Some("a CUDA driver is present, but the suites ran on the cpu".to_owned())
            } else {
                None
            };
            (gpus, reason)
        }
        Err(reason) => (Vec::new(), Some(format!("CUDA unavailable: {reason}"))),
    };
    // The driver's release number is NVML's to tell; asked only when a GPU
    // opened (NVML comes with the driver).
    if !gpus.is_empty()
        && let Ok(driver) = vramlab_profiler::nvml_driver_version(None)
    {
        for g in &mut gpus {
            g.driver_version = Some(driver.clone());
        }
    }
    Environment {
        cpu_model: p.name.clone(),
        cpu_cores: p.compute_units,
        host_memory_bytes: physical_memory_bytes().unwrap_or(0),
        gpus,
        gpu_unavailable_reason,
        device: device.to_string(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        rustc: None,
        git_commit: None,
    }
}

/// Each of the driver's `n` devices that opens, and why the others did not.
fn open_gpus(n: u32) -> (Vec<GpuInfo>, Vec<String>) {
    let mut gpus = Vec::new();
    let mut failures = Vec::new();
    for i in 0..n {
        match Device::parse(&format!("cuda:{i}")) {
            Ok(d) => match d.cuda() {
                Some(backend) => gpus.push(gpu_info(backend.info())),
                None => failures.push(format!("cuda:{i} has no CUDA backend")),
            },
            Err(e) => failures.push(format!("cuda:{i}: {e}")),
        }
    }
    (gpus, failures)
}

/// What the results keep of what the driver says about a GPU.
fn gpu_info(info: &CudaInfo) -> GpuInfo {
    let (major, minor) = info.compute_capability;
    let v = info.driver_version;
    GpuInfo {
        index: info.ordinal,
        name: info.name.clone(),
        memory_bytes: info.total_memory_bytes,
        compute_capability: Some(format!("{major}.{minor}")),
        // The driver's release number (580.xx) is NVML's to tell (filled in by
        // the caller); the driver API gives the CUDA version it supports.
        driver_version: None,
        cuda_version: (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_recorded_with_its_name_memory_capability_and_cuda_version() {
        let info = CudaInfo {
            ordinal: 1,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            multiprocessors: 132,
            total_memory_bytes: 85_045_346_304,
            l2_cache_bytes: 52_428_800,
            driver_version: 13000,
        };
        let g = gpu_info(&info);
        assert_eq!((g.index, g.name.as_str(), g.memory_bytes), (1, "NVIDIA H100 80GB HBM3", 85_045_346_304));
        assert_eq!(g.compute_capability.as_deref(), Some("9.0"));
        assert_eq!(g.cuda_version.as_deref(), Some("13.0"));
        assert_eq!(gpu_info(&CudaInfo { driver_version: 12080, ..info }).cuda_version.as_deref(), Some("12.8"));
    }

    #[test]
    fn without_a_gpu_the_list_is_empty_and_the_reason_is_given() {
        let env = detect(&Device::cpu());
        match cuda_probe() {
            Err(_) => {
                assert!(env.gpus.is_empty());
                let reason = env.gpu_unavailable_reason.unwrap();
                assert!(reason.starts_with("CUDA unavailable: "), "{reason}");
            }
            Ok(_) => assert!(!env.gpus.is_empty() || env.gpu_unavailable_reason.is_some()),
        }
        assert!(env.cpu_cores >= 1 && !env.cpu_model.is_empty());
    }
}
