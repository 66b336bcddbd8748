//! The environment a run records: what this machine is.

use vramlab_engine::alloc::physical_memory_bytes;
use vramlab_engine::device::{Device, cuda_probe};

use crate::schema::Environment;

/// Reads the machine: processor, memory, GPUs (or why there are none). The
/// caller adds what only it can know (rustc version, git commit).
pub fn detect(device: &Device) -> Environment {
    let cpu = Device::cpu();
    let p = cpu.properties();
    let gpu_unavailable_reason = match cuda_probe() {
        Ok(_) if device.is_cpu() => Some("a CUDA driver is present, but the suites ran on the cpu".to_owned()),
        Ok(_) => None,
        Err(reason) => Some(format!("CUDA unavailable: {reason}")),
    };
    Environment {
        cpu_model: p.name.clone(),
        cpu_cores: p.compute_units,
        host_memory_bytes: physical_memory_bytes().unwrap_or(0),
        gpus: Vec::new(),
        gpu_unavailable_reason,
        device: device.to_string(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        rustc: None,
        git_commit: None,
    }
}
