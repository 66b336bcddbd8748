//! The result of a recording and the questions it answers.

use serde::{Deserialize, Serialize};

use crate::analysis::{
    self, CH_ACTIVE, CH_ALLOCATED, CH_REQUESTED, CH_RESERVED, CopyStats, DeviceInfo, DeviceProfile, KernelStats,
    LiveAllocation, MemoryLevels, PhasePeak, PhaseSpan, ProfiledDeviceKind,
};
use crate::error::ProfilerError;
use crate::record::{NO_DEVICE, Recording, thread_name};
use crate::sampler::Samples;
use crate::timeline::{ByCategory, CATEGORY_COUNT, CategoryTimeline, StreamDecimator, Timeline};

/// Counts about the recording itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingStats {
    /// Events dropped because more than 65,535 (device, stream, thread)
    /// combinations appeared.
    pub dropped_events: u64,
    /// Events of kinds this version of the profiler does not know.
    pub unknown_events: u64,
}

/// How the untracked bytes of a [`Reconciliation`] were computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UntrackedBasis {
    /// NVML's per-process used memory minus the allocator's reserved bytes.
    NvmlProcessUsed,
    /// The growth of the driver's device-wide used memory since the first
    /// sample, minus the growth of reserved bytes (NVML did not list this
    /// process; other processes' changes count too).
    DriverUsedSinceStart,
    /// The process's resident memory minus the allocator's reserved bytes (the
    /// CPU device: the difference is the program, its heap and libraries —
    /// and reserved host memory not yet touched counts negative).
    HostResident,
}

/// The allocator's view of a device against the outside view: what the
/// process holds that the allocator did not reserve (CUDA context, library
/// handles, other allocators).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    pub device: u32,
    /// The NVML device it was matched to (by UUID), for GPUs.
    pub nvml_index: Option<u32>,
    /// The sample compared: the one where the outside view was highest.
    pub time_ns: u64,
    pub allocator_reserved_bytes: u64,
    /// Device memory used by all processes (NVML).
    pub driver_used_bytes: Option<u64>,
    /// This process's device memory (NVML per-process).
    pub nvml_process_used_bytes: Option<u64>,
    /// The process's resident memory (host).
    pub host_resident_bytes: Option<u64>,
    pub basis: UntrackedBasis,
    pub untracked_bytes: i64,
    /// The largest untracked value over all samples.
    pub max_untracked_bytes: i64,
    pub samples: u64,
}

/// One kernel run, as recorded (see [`Profile::kernel_runs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRun {
    pub name: String,
    pub algorithm: String,
    /// The device's event index (see `DeviceInfo::index`).
    pub device: u32,
    pub stream: u32,
    /// Start on the recording's clock (for a GPU, the host time of the launch).
    pub start_ns: u64,
    /// Time it ran: device time on a GPU, wall time on the CPU.
    pub duration_ns: u64,
}

/// Everything one recording answers. It serializes whole (the records as
/// columns); [`Profile::summary`] gives the bounded form for results files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Every device of the recording, by index.
    pub devices: Vec<DeviceProfile>,
    /// Every phase instance, in the order they began.
    pub phases: Vec<PhaseSpan>,
    /// Each phase's peak on each device.
    pub phase_peaks: Vec<PhasePeak>,
    /// The kernel table, the most total time first.
    pub kernels: Vec<KernelStats>,
    pub copies: Vec<CopyStats>,
    pub samples: Samples,
    /// Computed when samples exist for a device (NVML for a CUDA device
    /// matched by UUID, resident memory for the CPU device).
    pub reconciliation: Vec<Reconciliation>,
    /// Recording thread index → name.
    pub thread_names: Vec<(u32, String)>,
    pub stats: RecordingStats,
    /// Phase ends with no matching begin (the phase began before the recording).
    pub unmatched_phase_ends: u64,
    recording: Recording,
}

impl Profile {
    pub(crate) fn build(
        mut recording: Recording,
        devices: &[DeviceInfo],
        start_ns: u64,
        end_ns: u64,
        samples: Samples,
        stats: RecordingStats,
    ) -> Profile {
        let a = analysis::analyze(&mut recording, devices, end_ns);
        let mut threads: Vec<u32> = recording.contexts.iter().map(|c| c.thread).collect();
        threads.sort_unstable();
        threads.dedup();
        let thread_names = threads.into_iter().map(|t| (t, thread_name(t))).collect();
        let mut p = Profile {
            start_ns,
            end_ns,
            devices: a.devices,
            phases: a.phases,
            phase_peaks: a.phase_peaks,
            kernels: a.kernels,
            copies: a.copies,
            samples,
            reconciliation: Vec::new(),
            thread_names,
            stats,
            unmatched_phase_ends: a.unmatched_phase_ends,
            recording,
        };
        p.reconciliation = p.reconcile();
        p
    }

    /// Builds a profile from events directly (no hub, no sampler): for tests,
    /// imports and tools that already hold the events.
    pub fn from_events<'a>(
        events: impl IntoIterator<Item = &'a vramlab_engine::hooks::Event>,
        devices: &[DeviceInfo],
    ) -> Profile {
        let mut state = crate::record::RecorderState::default();
        let thread = crate::record::thread_index();
        let mut first = u64::MAX;
        let mut last = 0;
        for e in events {
            state.record(thread, e);
            if let Some(t) = event_time(e) {
                first = first.min(t);
                last = last.max(t);
            }
        }
        let stats = RecordingStats { dropped_events: state.dropped_events, unknown_events: state.unknown_events };
        let start = if first == u64::MAX { 0 } else { first };
        Profile::build(state.finish(), devices, start, last.max(start), Samples::default(), stats)
    }

    /// The raw recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// Records in the recording (a kernel event takes two).
    pub fn records(&self) -> usize {
        self.recording.len()
    }

    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// The first `max` kernel runs of the recording, in recording order (the
    /// kernel table aggregates them; a trace needs each one).
    pub fn kernel_runs(&self, max: usize) -> Vec<KernelRun> {
        use crate::record::kind;
        let rec = &self.recording;
        let mut out = Vec::new();
        let mut i = 0;
        while i < rec.len() && out.len() < max {
            let r = rec.get(i);
            i += 1;
            if r.kind != kind::KERNEL {
                continue;
            }
            let ctx = rec.context(r);
            let duration_ns = if i < rec.len() && rec.get(i).kind == kind::KERNEL_CONT {
                i += 1;
                rec.get(i - 1).time_ns
            } else {
                0
            };
            let k = rec.kernels.get(r.c as usize);
            out.push(KernelRun {
                name: k.map_or_else(|| "kernel".to_owned(), |k| k.name.clone()),
                algorithm: k.map_or_else(String::new, |k| k.algorithm.clone()),
                device: ctx.device,
                stream: ctx.stream,
                start_ns: r.time_ns,
                duration_ns,
            });
        }
        out
    }

    /// The device with this index.
    pub fn device(&self, index: u32) -> Option<&DeviceProfile> {
        self.devices.iter().find(|d| d.info.index == index)
    }

    fn check_device(&self, query: &'static str, device: u32) -> Result<&DeviceProfile, ProfilerError> {
        self.device(device).ok_or_else(|| ProfilerError::UnknownDevice {
            query,
            device,
            known: self.devices.iter().map(|d| d.info.index).collect(),
        })
    }

    /// Which contexts belong to `device`.
    fn context_mask(&self, device: u32) -> Vec<bool> {
        self.recording.contexts.iter().map(|c| c.device == device && c.device != NO_DEVICE).collect()
    }

    /// Replays the device's allocator records through the counters, calling
    /// `f(time_ns, changed, levels, categories)` after each record that changed any.
    fn walk(
        &self,
        query: &'static str,
        device: u32,
        mut f: impl FnMut(u64, u8, &MemoryLevels, &[u64; CATEGORY_COUNT]),
    ) -> Result<(), ProfilerError> {
        self.check_device(query, device)?;
        let mask = self.context_mask(device);
        let mut lv = MemoryLevels::default();
        let mut cats = [0u64; CATEGORY_COUNT];
        let rec = &self.recording;
        for (i, r) in rec.iter() {
            if !r.is_allocator() || !mask[r.ctx as usize] {
                continue;
            }
            let changed = analysis::apply_levels(&mut lv, &mut cats, rec, i, r);
            if changed != 0 {
                f(r.time_ns, changed, &lv, &cats);
            }
        }
        Ok(())
    }

    /// The device's allocated, reserved, active and requested bytes over time,
    /// at full resolution (one point per change, plus the start and the end).
    pub fn timeline(&self, device: u32) -> Result<Timeline, ProfilerError> {
        let mut t = Timeline { device, start_ns: self.start_ns, end_ns: self.end_ns, ..Timeline::default() };
        for s in [&mut t.allocated_bytes, &mut t.reserved_bytes, &mut t.active_bytes, &mut t.requested_bytes] {
            s.push(self.start_ns, 0);
        }
        let mut last_time = self.start_ns;
        self.walk("timeline", device, |time, changed, lv, _| {
            last_time = last_time.max(time);
            if changed & CH_ALLOCATED != 0 {
                t.allocated_bytes.push(time, lv.allocated_bytes);
            }
            if changed & CH_RESERVED != 0 {
                t.reserved_bytes.push(time, lv.reserved_bytes);
            }
            if changed & CH_ACTIVE != 0 {
                t.active_bytes.push(time, lv.active_bytes);
            }
            if changed & CH_REQUESTED != 0 {
                t.requested_bytes.push(time, lv.requested_bytes);
            }
        })?;
        let t_end = self.end_ns.max(last_time);
        for s in [&mut t.allocated_bytes, &mut t.reserved_bytes, &mut t.active_bytes, &mut t.requested_bytes] {
            let last = s.last_bytes();
            s.push(t_end, last);
        }
        t.end_ns = t_end;
        Ok(t)
    }

    /// The device's timeline with every series decimated to at most
    /// `max_points` points by min/max decimation (peaks kept), computed in one
    /// streaming pass: memory proportional to the output, whatever the
    /// recording's length.
    pub fn timeline_decimated(&self, device: u32, max_points: usize) -> Result<Timeline, ProfilerError> {
        let (t0, t1) = (self.start_ns, self.end_ns);
        let mut ds: [StreamDecimator<()>; 4] = std::array::from_fn(|_| StreamDecimator::new(t0, t1, max_points));
        for d in ds.iter_mut() {
            d.push(t0, 0, ());
        }
        let mut last = MemoryLevels::default();
        let mut last_time = t0;
        self.walk("timeline", device, |time, changed, lv, _| {
            last_time = last_time.max(time);
            last = *lv;
            let values = [lv.allocated_bytes, lv.reserved_bytes, lv.active_bytes, lv.requested_bytes];
            for (k, bit) in [CH_ALLOCATED, CH_RESERVED, CH_ACTIVE, CH_REQUESTED].into_iter().enumerate() {
                if changed & bit != 0 {
                    ds[k].push(time, values[k], ());
                }
            }
        })?;
        let t_end = t1.max(last_time);
        let values = [last.allocated_bytes, last.reserved_bytes, last.active_bytes, last.requested_bytes];
        for (d, v) in ds.iter_mut().zip(values) {
            d.push(t_end, v, ());
        }
        let [a, r, ac, rq] = ds;
        Ok(Timeline {
            device,
            start_ns: t0,
            end_ns: t_end,
            allocated_bytes: a.finish_series(),
            reserved_bytes: r.finish_series(),
            active_bytes: ac.finish_series(),
            requested_bytes: rq.finish_series(),
        })
    }

    /// Allocated bytes by category over time, at full resolution: one row per
    /// change of allocated bytes (plus the start and the end); the categories
    /// sum to the allocated bytes at every row.
    pub fn categories(&self, device: u32) -> Result<CategoryTimeline, ProfilerError> {
        let mut out = CategoryTimeline { device, ..CategoryTimeline::default() };
        out.time_ns.push(self.start_ns);
        out.allocated_bytes.push(0);
        out.by_category.push(ByCategory::default());
        let mut last = (0, [0u64; CATEGORY_COUNT], self.start_ns);
        self.walk("categories", device, |time, changed, lv, cats| {
            if changed & CH_ALLOCATED != 0 {
                out.time_ns.push(time);
                out.allocated_bytes.push(lv.allocated_bytes);
                out.by_category.push(ByCategory::from_array(*cats));
                last = (lv.allocated_bytes, *cats, last.2.max(time));
            }
        })?;
        out.time_ns.push(self.end_ns.max(last.2));
        out.allocated_bytes.push(last.0);
        out.by_category.push(ByCategory::from_array(last.1));
        Ok(out)
    }

    /// [`Profile::categories`] as at most `max_points` whole rows, chosen by
    /// min/max decimation of the allocated total (rows stay exact, the peak row
    /// is kept), in one streaming pass.
    pub fn categories_decimated(&self, device: u32, max_points: usize) -> Result<CategoryTimeline, ProfilerError> {
        let (t0, t1) = (self.start_ns, self.end_ns);
        let mut d: StreamDecimator<[u64; CATEGORY_COUNT]> = StreamDecimator::new(t0, t1, max_points);
        d.push(t0, 0, [0; CATEGORY_COUNT]);
        let mut last = (0, [0u64; CATEGORY_COUNT], t0);
        self.walk("categories", device, |time, changed, lv, cats| {
            if changed & CH_ALLOCATED != 0 {
                d.push(time, lv.allocated_bytes, *cats);
                last = (lv.allocated_bytes, *cats, last.2.max(time));
            }
        })?;
        d.push(t1.max(last.2), last.0, last.1);
        let kept = d.finish();
        Ok(CategoryTimeline {
            device,
            time_ns: kept.iter().map(|k| k.time_ns).collect(),
            allocated_bytes: kept.iter().map(|k| k.value).collect(),
            by_category: kept.iter().map(|k| ByCategory::from_array(k.payload)).collect(),
        })
    }

    /// The live allocations at the device's allocated peak, largest first.
    pub fn live_at_peak(&self, device: u32) -> Result<&[LiveAllocation], ProfilerError> {
        let d = self.check_device("live allocations", device)?;
        Ok(d.at_peak_allocated.as_ref().map_or(&[][..], |s| &s.live_allocations[..]))
    }

    /// The NVML device matched to `device` by UUID, if any.
    pub fn nvml_device(&self, device: u32) -> Option<&crate::sampler::NvmlDevice> {
        let ProfiledDeviceKind::Cuda { uuid: Some(uuid), .. } = &self.device(device)?.info.kind else {
            return None;
        };
        match &self.samples.nvml {
            crate::sampler::NvmlStatus::Available { devices, .. } => {
                devices.iter().find(|n| n.uuid.as_deref().is_some_and(|u| same_uuid(u, uuid)))
            }
            _ => None,
        }
    }

    /// The NVML samples of the GPU matched to `device` by UUID (empty when
    /// none matched or NVML was unavailable).
    pub fn gpu_samples(&self, device: u32) -> Vec<&crate::sampler::GpuSample> {
        match self.nvml_device(device) {
            Some(n) => self.samples.gpu.iter().filter(|s| s.nvml_index == n.nvml_index).collect(),
            None => Vec::new(),
        }
    }

    fn reconcile(&self) -> Vec<Reconciliation> {
        let mut out = Vec::new();
        for d in &self.devices {
            match &d.info.kind {
                ProfiledDeviceKind::Cuda { .. } => {
                    let Some(nd) = self.nvml_device(d.info.index) else {
                        continue;
                    };
                    let samples = self.gpu_samples(d.info.index);
                    if samples.is_empty() {
                        continue;
                    }
                    let Ok(t) = self.timeline(d.info.index) else { continue };
                    let reserved = &t.reserved_bytes;
                    let first = samples[0];
                    let first_reserved = reserved.value_at(first.time_ns);
                    let mut best: Option<(u64, Reconciliation)> = None;
                    let mut max_untracked = i64::MIN;
                    for s in &samples {
                        let r = reserved.value_at(s.time_ns);
                        let (basis, outside, untracked) = match (s.process_used_bytes, s.driver_used_bytes) {
                            (Some(p), _) => (UntrackedBasis::NvmlProcessUsed, p, p as i64 - r as i64),
                            (None, Some(u)) => {
                                let base = first.driver_used_bytes.unwrap_or(u);
                                let grown = u as i64 - base as i64;
                                (UntrackedBasis::DriverUsedSinceStart, u, grown - (r as i64 - first_reserved as i64))
                            }
                            (None, None) => continue,
                        };
                        max_untracked = max_untracked.max(untracked);
                        if best.as_ref().is_none_or(|(o, _)| outside > *o) {
                            best = Some((
                                outside,
                                Reconciliation {
                                    device: d.info.index,
                                    nvml_index: Some(nd.nvml_index),
                                    time_ns: s.time_ns,
                                    allocator_reserved_bytes: r,
                                    driver_used_bytes: s.driver_used_bytes,
                                    nvml_process_used_bytes: s.process_used_bytes,
                                    host_resident_bytes: None,
                                    basis,
                                    untracked_bytes: untracked,
                                    max_untracked_bytes: 0,
                                    samples: samples.len() as u64,
                                },
                            ));
                        }
                    }
                    if let Some((_, mut r)) = best {
                        r.max_untracked_bytes = max_untracked;
                        out.push(r);
                    }
                }
                ProfiledDeviceKind::Cpu if !self.samples.host_samples.is_empty() => {
                    let Ok(t) = self.timeline(d.info.index) else { continue };
                    let reserved = &t.reserved_bytes;
                    let mut best: Option<Reconciliation> = None;
                    let mut max_untracked = i64::MIN;
                    for s in &self.samples.host_samples {
                        let r = reserved.value_at(s.time_ns);
                        let untracked = s.resident_bytes as i64 - r as i64;
                        max_untracked = max_untracked.max(untracked);
                        if best.as_ref().is_none_or(|b| s.resident_bytes > b.host_resident_bytes.unwrap_or(0)) {
                            best = Some(Reconciliation {
                                device: d.info.index,
                                nvml_index: None,
                                time_ns: s.time_ns,
                                allocator_reserved_bytes: r,
                                driver_used_bytes: None,
                                nvml_process_used_bytes: None,
                                host_resident_bytes: Some(s.resident_bytes),
                                basis: UntrackedBasis::HostResident,
                                untracked_bytes: untracked,
                                max_untracked_bytes: 0,
                                samples: self.samples.host_samples.len() as u64,
                            });
                        }
                    }
                    if let Some(mut r) = best {
                        r.max_untracked_bytes = max_untracked;
                        out.push(r);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The bounded form for results files and reports: every series decimated
    /// to at most `options.max_points` points (peaks kept) and the live
    /// allocations at each peak cut to the largest `options.max_live_allocations`.
    pub fn summary(&self, options: &SummaryOptions) -> ProfileSummary {
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let mut profile = d.clone();
                let mut live_allocations_total = 0;
                if let Some(s) = profile.at_peak_allocated.as_mut() {
                    live_allocations_total = s.live_allocations.len() as u64;
                    s.live_allocations.truncate(options.max_live_allocations);
                }
                let index = d.info.index;
                DeviceSummary {
                    timeline: self.timeline_decimated(index, options.max_points).unwrap_or_default(),
                    categories: self.categories_decimated(index, options.max_points).unwrap_or_default(),
                    live_allocations_total,
                    profile,
                }
            })
            .collect();
        ProfileSummary {
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            records: self.recording.len() as u64,
            devices,
            phase_peaks: self.phase_peaks.clone(),
            kernels: self.kernels.clone(),
            copies: self.copies.clone(),
            samples: self.samples.clone(),
            reconciliation: self.reconciliation.clone(),
            stats: self.stats,
        }
    }
}

fn event_time(e: &vramlab_engine::hooks::Event) -> Option<u64> {
    use vramlab_engine::hooks::Event;
    match e {
        Event::Allocator(a) => Some(a.time_ns),
        Event::Kernel(k) => Some(k.start_ns.saturating_add(k.duration_ns)),
        Event::Copy(c) => Some(c.start_ns.saturating_add(c.duration_ns)),
        Event::Phase(p) => Some(p.time_ns),
        _ => None,
    }
}

/// Whether two GPU UUIDs name the same device (`GPU-` prefix and case ignored).
fn same_uuid(a: &str, b: &str) -> bool {
    fn norm(s: &str) -> String {
        let s = s.trim();
        let s = s.strip_prefix("GPU-").or_else(|| s.strip_prefix("gpu-")).unwrap_or(s);
        s.to_ascii_lowercase()
    }
    norm(a) == norm(b)
}

/// Bounds for [`Profile::summary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryOptions {
    /// Points per series (at least 4).
    pub max_points: usize,
    /// Live allocations listed at each peak.
    pub max_live_allocations: usize,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions { max_points: 2000, max_live_allocations: 50 }
    }
}

/// One device in a [`ProfileSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub profile: DeviceProfile,
    /// How many allocations were live at the peak (the profile lists the largest).
    pub live_allocations_total: u64,
    pub timeline: Timeline,
    pub categories: CategoryTimeline,
}

/// A profile in bounded size: what results files and reports carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    pub start_ns: u64,
    pub end_ns: u64,
    pub records: u64,
    pub devices: Vec<DeviceSummary>,
    pub phase_peaks: Vec<PhasePeak>,
    pub kernels: Vec<KernelStats>,
    pub copies: Vec<CopyStats>,
    pub samples: Samples,
    pub reconciliation: Vec<Reconciliation>,
    pub stats: RecordingStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::DeviceInfo;
    use crate::sampler::{GpuSample, NvmlDevice, NvmlStatus};
    use vramlab_engine::hooks::{AllocatorAction, AllocatorEvent, Event};

    fn segment(time_ns: u64, action: AllocatorAction, bytes: u64) -> Event {
        Event::Allocator(AllocatorEvent {
            action,
            time_ns,
            device: 0,
            stream: 0,
            addr: 1 << 30,
            requested_bytes: bytes,
            rounded_bytes: bytes,
            tag: None,
        })
    }

    fn gpu(time_ns: u64, driver: u64, process: Option<u64>) -> GpuSample {
        GpuSample {
            time_ns,
            nvml_index: 1,
            driver_used_bytes: Some(driver),
            process_used_bytes: process,
            ..GpuSample::default()
        }
    }

    fn nvml_device(nvml_index: u32, uuid: &str) -> NvmlDevice {
        NvmlDevice { nvml_index, uuid: Some(uuid.into()), name: None, pci_bus_id: None, memory_total_bytes: None }
    }

    #[test]
    fn kernel_runs_are_listed_in_order_and_capped() {
        use vramlab_engine::hooks::KernelEvent;
        let kernel = |name: &'static str, start_ns, duration_ns| {
            Event::Kernel(KernelEvent {
                name,
                algorithm: "gemm",
                device: 0,
                stream: 1,
                start_ns,
                duration_ns,
                launch_ns: 1,
                flops: 0,
                bytes: 0,
            })
        };
        let events = [segment(5, AllocatorAction::SegmentAlloc, 1000), kernel("matmul", 10, 20), kernel("relu", 40, 5)];
        let p = Profile::from_events(&events, &[DeviceInfo::cpu(0)]);
        let runs = p.kernel_runs(10);
        let got: Vec<(&str, u32, u64, u64)> =
            runs.iter().map(|k| (k.name.as_str(), k.stream, k.start_ns, k.duration_ns)).collect();
        assert_eq!(got, [("matmul", 1, 10, 20), ("relu", 1, 40, 5)]);
        assert_eq!(runs[0].algorithm, "gemm");
        assert_eq!(p.kernel_runs(1).len(), 1);
    }

    #[test]
    fn reconciliation_matches_nvml_devices_by_uuid() {
        let events =
            [segment(100, AllocatorAction::SegmentAlloc, 1000), segment(300, AllocatorAction::SegmentFree, 1000)];
        let devices = [DeviceInfo::cuda(0, 0, Some("GPU-AAAA".into()))];
        let mut p = Profile::from_events(&events, &devices);
        p.samples.nvml = NvmlStatus::Available {
            driver_version: None,
            nvml_version: None,
            devices: vec![nvml_device(0, "GPU-bbbb"), nvml_device(1, "GPU-aaaa")],
        };
        // Per-process memory known: untracked = process used − reserved.
        p.samples.gpu = vec![gpu(50, 5000, Some(300)), gpu(200, 6000, Some(1500)), gpu(400, 5000, Some(300))];
        assert_eq!(p.nvml_device(0).map(|n| n.nvml_index), Some(1));
        assert_eq!(p.gpu_samples(0).len(), 3);
        let r = p.reconcile();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].time_ns, r[0].allocator_reserved_bytes, r[0].untracked_bytes), (200, 1000, 500));
        assert_eq!(r[0].basis, UntrackedBasis::NvmlProcessUsed);
        assert_eq!(r[0].max_untracked_bytes, 500);

        // Without per-process numbers: the driver's growth minus reserved's growth.
        p.samples.gpu = vec![gpu(50, 5000, None), gpu(200, 6300, None)];
        let r = p.reconcile();
        assert_eq!(r[0].basis, UntrackedBasis::DriverUsedSinceStart);
        assert_eq!(r[0].untracked_bytes, 300);

        // Another UUID: no match, no reconciliation.
        p.devices[0].info = DeviceInfo::cuda(0, 0, Some("GPU-cccc".into()));
        assert!(p.reconcile().is_empty());
        assert!(p.gpu_samples(0).is_empty());
    }

    #[test]
    fn uuids_compare_loosely() {
        assert!(same_uuid("GPU-ABCD-1234", "abcd-1234"));
        assert!(!same_uuid("GPU-abcd", "GPU-abce"));
    }
}
