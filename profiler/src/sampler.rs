//! Samples from the outside: an NVML thread for NVIDIA GPUs and the process's
//! resident memory for the host, at a fixed interval, on the engine's clock.
//!
//! NVML is loaded at run time (`libnvidia-ml.so.1`, through nvml-wrapper). On a
//! machine without the NVIDIA driver the sampler records why —
//! `NVML unavailable: <reason>` — and takes no GPU samples; nothing panics.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde::{Deserialize, Serialize};
use vramlab_engine::hooks::now_ns;

use crate::error::{NvmlUnavailable, ProfilerError};

/// The default sampling interval.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(50);

/// What to sample and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplingConfig {
    pub interval: Duration,
    /// Sample NVIDIA GPUs through NVML.
    pub nvml: bool,
    /// Sample the process's resident memory (the CPU device's counterpart).
    pub host: bool,
    /// Load NVML from this file instead of the system's `libnvidia-ml.so.1`.
    pub nvml_library: Option<PathBuf>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig { interval: DEFAULT_SAMPLE_INTERVAL, nvml: true, host: true, nvml_library: None }
    }
}

impl SamplingConfig {
    /// No sampler thread at all.
    pub fn disabled() -> SamplingConfig {
        SamplingConfig { nvml: false, host: false, ..SamplingConfig::default() }
    }

    /// Whether anything is sampled.
    pub fn is_enabled(&self) -> bool {
        self.nvml || self.host
    }
}

/// An NVML device as seen at the start of sampling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlDevice {
    pub nvml_index: u32,
    /// `GPU-xxxxxxxx-…`; the key that matches it to a CUDA device.
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub memory_total_bytes: Option<u64>,
}

/// Whether NVML could be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum NvmlStatus {
    /// Not asked for.
    Disabled,
    /// NVML could not be loaded or initialized; no GPU samples.
    Unavailable {
        reason: String,
    },
    Available {
        driver_version: Option<String>,
        nvml_version: Option<String>,
        devices: Vec<NvmlDevice>,
    },
}

impl std::fmt::Display for NvmlStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlStatus::Disabled => f.write_str("NVML sampling disabled"),
            NvmlStatus::Unavailable { reason } => write!(f, "NVML unavailable: {reason}"),
            NvmlStatus::Available { driver_version, devices, .. } => write!(
                f,
                "NVML available: driver {}, {} device{}",
                driver_version.as_deref().unwrap_or("unknown"),
                devices.len(),
                if devices.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

/// One NVML reading of one GPU. Each field is `None` where the GPU or driver
/// does not support the query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub time_ns: u64,
    pub nvml_index: u32,
    /// Device memory in use by all processes, as the driver reports it.
    pub driver_used_bytes: Option<u64>,
    pub driver_total_bytes: Option<u64>,
    /// Share of the last sample period in which one or more kernels ran.
    pub gpu_busy_percent: Option<u32>,
    /// Share of the last sample period in which device memory was being read
    /// or written (NVML's "memory utilization"). This is memory-controller
    /// activity, **not** how much memory is occupied.
    pub memory_busy_percent: Option<u32>,
    pub power_milliwatts: Option<u32>,
    /// Energy counter since the driver was loaded.
    pub energy_millijoules: Option<u64>,
    pub temperature_celsius: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// Device memory used by this process (NVML per-process accounting; `None`
    /// when NVML does not list this process, e.g. in a PID namespace).
    pub process_used_bytes: Option<u64>,
}

/// Whether host sampling worked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum HostStatus {
    Disabled,
    Unavailable { reason: String },
    Available,
}

/// The process's resident memory at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSample {
    pub time_ns: u64,
    /// Resident set size (`VmRSS` in `/proc/self/status`).
    pub resident_bytes: u64,
}

/// Everything the sampler recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Samples {
    pub interval_ns: u64,
    pub nvml: NvmlStatus,
    pub gpu: Vec<GpuSample>,
    pub host: HostStatus,
    pub host_samples: Vec<HostSample>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            interval_ns: 0,
            nvml: NvmlStatus::Disabled,
            gpu: Vec::new(),
            host: HostStatus::Disabled,
            host_samples: Vec::new(),
        }
    }
}

/// The process's resident memory, from `/proc/self/status`.
pub fn process_resident_bytes() -> std::io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_vm_rss(&status).ok_or_else(|| std::io::Error::other("no VmRSS line in /proc/self/status"))
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    let unit = parts.next().unwrap_or("kB");
    let factor = match unit {
        "kB" | "KB" | "KiB" => 1024,
        "mB" | "MB" | "MiB" => 1024 * 1024,
        "B" => 1,
        _ => return None,
    };
    Some(value * factor)
}

fn init_nvml(library: Option<&Path>) -> Result<Nvml, NvmlUnavailable> {
    let result = match library {
        Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
        None => Nvml::init(),
    };
    result.map_err(|e| NvmlUnavailable { reason: e.to_string() })
}

/// Loads NVML and lists its devices, without sampling (for `xtask env`).
pub fn probe_nvml(library: Option<&Path>) -> Result<Vec<NvmlDevice>, NvmlUnavailable> {
    let nvml = init_nvml(library)?;
    Ok(list_devices(&nvml))
}

/// The NVIDIA driver's release (`580.159.04`), as NVML reports it: what the
/// CUDA driver API cannot tell (it gives the CUDA version supported).
pub fn nvml_driver_version(library: Option<&Path>) -> Result<String, NvmlUnavailable> {
    let nvml = init_nvml(library)?;
    nvml.sys_driver_version().map_err(|e| NvmlUnavailable { reason: e.to_string() })
}

fn list_devices(nvml: &Nvml) -> Vec<NvmlDevice> {
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            Some(NvmlDevice {
                nvml_index: i,
                uuid: d.uuid().ok(),
                name: d.name().ok(),
                pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
                memory_total_bytes: d.memory_info().ok().map(|m| m.total),
            })
        })
        .collect()
}

fn sample_gpu(nvml: &Nvml, index: u32, pid: u32) -> Option<GpuSample> {
    let d = nvml.device_by_index(index).ok()?;
    let time_ns = now_ns();
    let memory = d.memory_info().ok();
    let utilization = d.utilization_rates().ok();
    let mut process_used: Option<u64> = None;
    for list in [d.running_compute_processes(), d.running_graphics_processes()].into_iter().flatten() {
        for p in list.iter().filter(|p| p.pid == pid) {
            if let UsedGpuMemory::Used(bytes) = p.used_gpu_memory {
                // A process appears once per context type; they share memory,
                // so take the largest rather than the sum.
                process_used = Some(process_used.map_or(bytes, |b: u64| b.max(bytes)));
            }
        }
    }
    Some(GpuSample {
        time_ns,
        nvml_index: index,
        driver_used_bytes: memory.as_ref().map(|m| m.used),
        driver_total_bytes: memory.as_ref().map(|m| m.total),
        gpu_busy_percent: utilization.as_ref().map(|u| u.gpu),
        memory_busy_percent: utilization.as_ref().map(|u| u.memory),
        power_milliwatts: d.power_usage().ok(),
        energy_millijoules: d.total_energy_consumption().ok(),
        temperature_celsius: d.temperature(TemperatureSensor::Gpu).ok(),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        memory_clock_mhz: d.clock_info(Clock::Memory).ok(),
        process_used_bytes: process_used,
    })
}

/// The running sampler thread.
#[derive(Debug)]
pub(crate) struct Sampler {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Samples>,
}

impl Sampler {
    /// Starts the thread (`None` when nothing is to be sampled).
    pub(crate) fn start(config: &SamplingConfig) -> Result<Option<Sampler>, ProfilerError> {
        if !config.is_enabled() {
            return Ok(None);
        }
        let (tx, rx) = mpsc::channel();
        let config = config.clone();
        let handle = std::thread::Builder::new()
            .name("vramlab-sampler".into())
            .spawn(move || run(&config, &rx))
            .map_err(|source| ProfilerError::SamplerSpawn { source })?;
        Ok(Some(Sampler { stop: tx, handle }))
    }

    /// Stops the thread (after one last sample) and returns what it recorded.
    pub(crate) fn finish(self) -> Samples {
        let _ = self.stop.send(());
        match self.handle.join() {
            Ok(samples) => samples,
            Err(_) => Samples {
                nvml: NvmlStatus::Unavailable { reason: "the sampler thread panicked".into() },
                host: HostStatus::Unavailable { reason: "the sampler thread panicked".into() },
                ..Samples::default()
            },
        }
    }
}

fn run(config: &SamplingConfig, stop: &mpsc::Receiver<()>) -> Samples {
    let interval = config.interval.max(Duration::from_millis(1));
    let mut out = Samples { interval_ns: interval.as_nanos() as u64, ..Samples::default() };
    let mut nvml_devices: Vec<u32> = Vec::new();
    let nvml = if config.nvml {
        match init_nvml(config.nvml_library.as_deref()) {
            Ok(nvml) => {
                let devices = list_devices(&nvml);
                nvml_devices = devices.iter().map(|d| d.nvml_index).collect();
                out.nvml = NvmlStatus::Available {
                    driver_version: nvml.sys_driver_version().ok(),
                    nvml_version: nvml.sys_nvml_version().ok(),
                    devices,
                };
                Some(nvml)
            }
            Err(e) => {
                out.nvml = NvmlStatus::Unavailable { reason: e.reason };
                None
            }
        }
    } else {
        None
    };
    if config.host {
        out.host = match process_resident_bytes() {
            Ok(_) => HostStatus::Available,
            Err(e) => HostStatus::Unavailable { reason: format!("cannot read /proc/self/status: {e}") },
        };
    }
    let host = out.host == HostStatus::Available;
    let pid = std::process::id();

    let take = |out: &mut Samples| {
        if let Some(nvml) = &nvml {
            for &i in &nvml_devices {
                if let Some(s) = sample_gpu(nvml, i, pid) {
                    out.gpu.push(s);
                }
            }
        }
        if host && let Ok(resident_bytes) = process_resident_bytes() {
            out.host_samples.push(HostSample { time_ns: now_ns(), resident_bytes });
        }
    };

    let start = Instant::now();
    let mut tick: u32 = 0;
    loop {
        take(&mut out);
        tick = tick.saturating_add(1);
        // The next tick on the grid start + k·interval (skipping missed ones).
        let elapsed = start.elapsed();
        let mut next = interval.saturating_mul(tick);
        if next <= elapsed {
            tick = (elapsed.as_nanos() / interval.as_nanos()) as u32 + 1;
            next = interval.saturating_mul(tick);
        }
        match stop.recv_timeout(next - elapsed) {
            Err(RecvTimeoutError::Timeout) => continue,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                take(&mut out);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads: 1\n";
        assert_eq!(parse_vm_rss(status), Some(1024 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn reads_own_resident_memory() {
        if cfg!(target_os = "linux") {
            assert!(process_resident_bytes().unwrap() > 0);
        }
    }

    #[test]
    fn status_messages() {
        let s = NvmlStatus::Unavailable { reason: "libnvidia-ml.so.1: cannot open".into() };
        assert_eq!(s.to_string(), "NVML unavailable: libnvidia-ml.so.1: cannot open");
    }
}
