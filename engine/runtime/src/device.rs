//! Devices: what the guides call `torch.device`. A device owns one caching
//! allocator (every byte of every tensor on it comes from there) and reports
//! its properties.
//!
//! `cpu` is always present. `cpu:N` for N ≥ 1 are further host devices with
//! allocators of their own — separate memory spaces on the host, so the
//! "never mix devices in one op" rule can be shown and tested on any machine.
//! `cuda` / `cuda:N` are looked up at run time ([`cuda_probe`]); their
//! allocator sits on `cuMemAlloc` ([`crate::cuda::memory`]) and takes its
//! configuration from `PYTORCH_CUDA_ALLOC_CONF`, as PyTorch's does.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::alloc::consts::GIB;
use crate::alloc::{AllocatorConfig, CachingAllocator, HostMemory, MemoryStats, StreamId, physical_memory_bytes};
use crate::cuda::CudaBackend;
pub use crate::device_id::{DeviceError, DeviceId, DeviceKind};
use crate::hooks;

/// What a device is, for reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProperties {
    pub id: DeviceId,
    /// The processor's or GPU's name.
    pub name: String,
    /// Memory the device's allocator may reserve (allocator source: the
    /// configured capacity for host devices).
    pub memory_capacity_bytes: u64,
    /// Logical cores (CPU) or multiprocessors (GPU).
    pub compute_units: u32,
    /// Cache sizes by level, largest level last (`L1d`, `L2`, `L3`).
    pub caches: Vec<CacheInfo>,
}

/// One level of the processor's cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheInfo {
    /// `L1d`, `L1i`, `L2`, `L3`.
    pub level: String,
    pub size_bytes: u64,
}

/// A device: its identity, properties and caching allocator. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    id: DeviceId,
    properties: DeviceProperties,
    allocator: CachingAllocator,
    cuda: Option<Arc<CudaBackend>>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.inner.id)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.id, f)
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Device {}

/// Capacity of host devices made without an explicit one: the machine's memory.
fn default_host_capacity() -> u64 {
    physical_memory_bytes().unwrap_or(16 * GIB)
}

fn registry() -> &'static Mutex<HashMap<DeviceId, Device>> {
    static REGISTRY: OnceLock<Mutex<HashMap<DeviceId, Device>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    /// The process-wide device `id` (created on first use, with the default
    /// allocator config and, for host devices, the machine's memory as capacity).
    pub fn get(id: DeviceId) -> Result<Device, DeviceError> {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = reg.get(&id) {
            return Ok(d.clone());
        }
        let device = match id.kind {
            DeviceKind::Cpu => Device::host(id, default_host_capacity(), AllocatorConfig::default(), hooks::global())?,
            DeviceKind::Cuda => {
                let config = match std::env::var("PYTORCH_CUDA_ALLOC_CONF") {
                    Ok(text) if !text.trim().is_empty() => {
                        AllocatorConfig::parse(&text).map_err(DeviceError::AllocConf)?
                    }
                    _ => AllocatorConfig::default(),
                };
                Device::cuda_with(id.index, config, hooks::global())?
            }
        };
        reg.insert(id, device.clone());
        Ok(device)
    }

    /// Parses and gets a device: `Device::parse("cuda:1")`.
    pub fn parse(spec: &str) -> Result<Device, DeviceError> {
        Device::get(spec.parse()?)
    }

    /// The process-wide `cpu` device.
    pub fn cpu() -> Device {
        Device::get(DeviceId::CPU).expect("the cpu device can always be created")
    }

    /// cuda:0 when a usable GPU exists, else cpu, with the reason CUDA was not
    /// chosen (for reports).
    pub fn auto() -> (Device, Option<String>) {
        match Device::get(DeviceId::cuda(0)) {
            Ok(d) => (d, None),
            Err(e) => (Device::cpu(), Some(e.to_string())),
        }
    }

    /// A private host device — not registered, with its own allocator — of
    /// `capacity_bytes` and allocator `config`, emitting to `hooks`. Suites use
    /// these to run out of memory at a chosen size.
    pub fn host(
        id: DeviceId,
        capacity_bytes: u64,
        config: AllocatorConfig,
        hooks: &Arc<hooks::Hooks>,
    ) -> Result<Device, DeviceError> {
        assert_eq!(id.kind, DeviceKind::Cpu, "Device::host makes host devices");
        let raw = Arc::new(HostMemory::with_capacity(capacity_bytes));
        let allocator = CachingAllocator::with_hooks(raw, config, hooks.clone(), id.event_index())?;
        let (name, compute_units, caches) = host_cpu_info();
        let properties = DeviceProperties { id, name, memory_capacity_bytes: capacity_bytes, compute_units, caches };
        Ok(Device { inner: Arc::new(DeviceInner { id, properties, allocator, cuda: None }) })
    }

    /// A private device on CUDA device `index` — not registered, with its own
    /// caching allocator of `config` over the GPU's memory, emitting to `hooks`.
    /// Suites use these to compare allocator settings side by side.
    pub fn cuda_with(index: u32, config: AllocatorConfig, hooks: &Arc<hooks::Hooks>) -> Result<Device, DeviceError> {
        let present = cuda_probe().map_err(|reason| DeviceError::CudaUnavailable { reason })?;
        let id = DeviceId::cuda(index);
        if index >= present {
            return Err(DeviceError::NoSuchCudaDevice { requested: id, present });
        }
        let backend = CudaBackend::new(index, hooks.clone(), id.event_index())
            .map_err(|source| DeviceError::Cuda { device: id, source })?;
        let allocator = CachingAllocator::with_hooks(backend.memory(), config, hooks.clone(), id.event_index())?;
        let info = backend.info();
        let properties = DeviceProperties {
            id,
            name: info.name.clone(),
            memory_capacity_bytes: info.total_memory_bytes,
            compute_units: info.multiprocessors,
            caches: vec![CacheInfo { level: "L2".into(), size_bytes: info.l2_cache_bytes }],
        };
        Ok(Device { inner: Arc::new(DeviceInner { id, properties, allocator, cuda: Some(backend) }) })
    }

    /// The CUDA backend of a GPU device; `None` for host devices.
    pub fn cuda(&self) -> Option<&Arc<CudaBackend>> {
        self.inner.cuda.as_ref()
    }

    pub fn id(&self) -> DeviceId {
        self.inner.id
    }

    pub fn kind(&self) -> DeviceKind {
        self.inner.id.kind
    }

    pub fn is_cpu(&self) -> bool {
        self.inner.id.kind == DeviceKind::Cpu
    }

    pub fn properties(&self) -> &DeviceProperties {
        &self.inner.properties
    }

    /// The device's caching allocator.
    pub fn allocator(&self) -> &CachingAllocator {
        &self.inner.allocator
    }

    /// `torch.cuda.memory_allocated(device)`.
    pub fn memory_allocated(&self) -> u64 {
        self.inner.allocator.memory_allocated()
    }

    /// `torch.cuda.memory_reserved(device)`.
    pub fn memory_reserved(&self) -> u64 {
        self.inner.allocator.memory_reserved()
    }

    /// `torch.cuda.memory_stats(device)`.
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.allocator.stats()
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&self) {
        self.inner.allocator.empty_cache()
    }

    /// `torch.cuda.memory_summary(device)`.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        self.inner.allocator.memory_summary(abbreviated)
    }

    /// A new stream (`torch.cuda.Stream()`), non-blocking with respect to the
    /// default stream 0. Host devices run everything in order on the calling
    /// thread: they have only stream 0.
    pub fn create_stream(&self) -> Result<StreamId, DeviceError> {
        match &self.inner.cuda {
            Some(b) => b.streams().create().map_err(|source| DeviceError::Cuda { device: self.id(), source }),
            None => Ok(0),
        }
    }

    /// Makes stream `waiter` wait (on the device, not the host) for the work
    /// queued on `producer` so far (`waiter.wait_stream(producer)`).
    pub fn wait_stream(&self, waiter: StreamId, producer: StreamId) -> Result<(), DeviceError> {
        match &self.inner.cuda {
            Some(b) if waiter != producer => b
                .record_event(producer)
                .and_then(|e| e.wait_on(waiter))
                .map_err(|source| DeviceError::Cuda { device: self.id(), source }),
            _ => Ok(()),
        }
    }

    /// Waits for the device's queued work (`torch.cuda.synchronize`) and emits
    /// the kernel events that waited on it. Host devices run synchronously, so
    /// there is nothing to wait for.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        match &self.inner.cuda {
            Some(b) => b.synchronize().map_err(|source| DeviceError::Cuda { device: self.id(), source }),
            None => Ok(()),
        }
    }
}

/// The processor's model name, logical cores and caches (Linux: /proc and /sys;
/// elsewhere the name is "unknown CPU" and the caches are empty).
fn host_cpu_info() -> (String, u32, Vec<CacheInfo>) {
    static INFO: OnceLock<(String, u32, Vec<CacheInfo>)> = OnceLock::new();
    INFO.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let name = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let mut caches = Vec::new();
        for i in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok().map(|s| s.trim().to_owned());
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size")) else {
                continue;
            };
            let size_bytes = parse_cache_size(&size);
            let suffix = match kind.as_str() {
                "Data" => "d",
                "Instruction" => "i",
                _ => "",
            };
            if let Some(size_bytes) = size_bytes {
                caches.push(CacheInfo { level: format!("L{level}{suffix}"), size_bytes });
            }
        }
        (name, cores, caches)
    })
    .clone()
}

/// `48K`, `2048K`, `32M` as sysfs writes cache sizes.
fn parse_cache_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        b'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Looks for a usable CUDA driver: loads `libcuda`, initializes it, checks its
/// version and counts devices. `Err` says why CUDA is unavailable
/// ("libcuda (the NVIDIA driver) not found (searched …)").
pub fn cuda_probe() -> Result<u32, String> {
    match crate::cuda::probe() {
        Ok(0) => Err("the NVIDIA driver reports no CUDA device".to_owned()),
        Ok(n) => Ok(n),
        // The callers say "CUDA unavailable: …" themselves.
        Err(e) => {
            let text = e.to_string();
            Err(text.strip_prefix("unavailable: ").map(str::to_owned).unwrap_or(text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_known_answers() {
        assert_eq!("cpu".parse::<DeviceId>().unwrap(), DeviceId::CPU);
        assert_eq!("cuda".parse::<DeviceId>().unwrap(), DeviceId::cuda(0));
        assert_eq!(" CUDA:3 ".parse::<DeviceId>().unwrap(), DeviceId::cuda(3));
        assert_eq!("cpu:2".parse::<DeviceId>().unwrap(), DeviceId { kind: DeviceKind::Cpu, index: 2 });
        for id in [DeviceId::CPU, DeviceId::cuda(0), DeviceId::cuda(7), DeviceId { kind: DeviceKind::Cpu, index: 1 }] {
            assert_eq!(id.to_string().parse::<DeviceId>().unwrap(), id);
        }
    }

    #[test]
    fn parse_errors_name_the_input() {
        for (input, needle) in [
            ("tpu", "unknown device type 'tpu'"),
            ("cuda:x", "'x' is not a device index"),
            ("cuda:-1", "'-1' is not a device index"),
            ("", "expected cpu, cuda or cuda:N"),
        ] {
            let err = input.parse::<DeviceId>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
            assert!(err.contains(&format!("'{input}'")), "{input}: {err}");
        }
    }

    #[test]
    fn no_such_device_message() {
        let e = DeviceError::NoSuchCudaDevice { requested: DeviceId::cuda(3), present: 1 };
        assert_eq!(e.to_string(), "cuda:3 requested but 1 CUDA device is present");
        let e = DeviceError::NoSuchCudaDevice { requested: DeviceId::cuda(3), present: 2 };
        assert_eq!(e.to_string(), "cuda:3 requested but 2 CUDA devices are present");
    }

    #[test]
    fn cpu_devices_are_shared_and_distinct() {
        let a = Device::cpu();
        let b = Device::parse("cpu").unwrap();
        assert_eq!(a, b);
        let c = Device::parse("cpu:1").unwrap();
        assert_ne!(a, c);
        assert!(a.properties().memory_capacity_bytes > 0);
        assert!(a.properties().compute_units >= 1);
    }

    #[test]
    fn cuda_absence_is_a_typed_error_not_a_panic() {
        match Device::parse("cuda:0") {
            Ok(d) => assert_eq!(d.kind(), DeviceKind::Cuda),
            Err(DeviceError::CudaUnavailable { reason }) => assert!(!reason.is_empty()),
            Err(DeviceError::NoSuchCudaDevice { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
        let (auto, why) = Device::auto();
        if auto.is_cpu() {
            assert!(why.unwrap().starts_with("CUDA unavailable"));
        }
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("48K"), Some(48 * 1024));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }
}
