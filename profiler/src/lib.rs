//! vramlab's profiler: one recording of the engine's events answers the
//! questions people bring to `torch.cuda.memory_allocated()`,
//! `max_memory_allocated()`, `nvidia-smi` and PyTorch's memory-snapshot viewer.
//!
//! ```
//! use vramlab_engine::alloc::{AllocatorConfig, CachingAllocator, SimulatedMemory};
//! use vramlab_engine::hooks::{Hooks, Tag};
//! use vramlab_profiler::{DeviceInfo, Profiler, ProfilerConfig};
//! use std::sync::Arc;
//!
//! let hub = Hooks::new();
//! let alloc = CachingAllocator::with_hooks(
//!     Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default(), hub.clone(), 0,
//! ).unwrap();
//! let profiler = Profiler::start(
//!     ProfilerConfig::on(hub).device(DeviceInfo::simulated(0)).without_sampling(),
//! ).unwrap();
//! {
//!     let _step = profiler.phase("forward");
//!     let a = alloc.malloc(3 << 20, 0, Some(Tag::Activation)).unwrap();
//!     alloc.free(a).unwrap();
//! }
//! let profile = profiler.stop();
//! let device = profile.device(0).unwrap();
//! assert_eq!(device.peak_allocated.bytes, 3 << 20);
//! assert_eq!(device.peak_reserved.bytes, 20 << 20); // one 20 MiB segment
//! assert_eq!(device.peak_allocated.phase.as_deref(), Some("forward"));
//! ```
//!
//! # Recording
//!
//! [`Profiler::start`] subscribes a recorder to one or more engine event hubs
//! ([`vramlab_engine::hooks`]) — allocator, kernel, copy and phase events alike
//! — and starts a sampler thread; [`Profiler::stop`] returns the [`Profile`].
//! Phases are nested named scopes ([`Profiler::phase`], or [`phase`] with just a
//! hub) emitted as events through the hub, so other subscribers see them too.
//!
//! Storage is compact: every event is one packed 32-byte record (kernels take
//! two) in 2 MiB chunks, with devices/streams/threads, kernel names and phase
//! names interned — no allocation per event, 10 million events in 320 MB. See
//! [`record`] for the layout.
//!
//! # What a profile answers
//!
//! - [`Profile::timeline`]: allocated, reserved, active and requested bytes per
//!   device as step series ([`Timeline`]); [`Profile::timeline_decimated`] the
//!   same in a few thousand points by min/max [`decimate`]ion that never loses
//!   a peak.
//! - [`DeviceProfile`]: the peaks of each counter with their time and phase;
//!   at the allocated peak the live allocations by size (size, category, the
//!   phase that made them), bytes by [`Category`], and the [`Fragmentation`]
//!   picture; an [`OomReport`] for each out-of-memory, with the largest free
//!   block against the failed request.
//! - [`Profile::categories`]: allocated bytes by category over time — exact,
//!   since the engine tags its tensors; they sum to allocated at every point.
//! - [`Profile::phase_peaks`], [`Profile::kernels`] (calls, total, mean and
//!   median device time, GFLOP/s, GB/s per kernel and algorithm),
//!   [`Profile::copies`].
//! - [`Samples`]: NVML readings of every GPU (memory used, busy shares, power,
//!   energy, temperature, clocks, this process's memory) and the process's
//!   resident memory, at a configurable interval (default 50 ms). Without the
//!   NVIDIA driver: [`NvmlStatus::Unavailable`] with the reason, no samples.
//! - [`Reconciliation`]: allocator reserved against driver-reported and
//!   per-process memory: the untracked bytes.
//!
//! # Export
//!
//! [`Profile::write_chrome_trace`] writes Chrome Trace Event JSON (Perfetto,
//! `chrome://tracing`); the [`Profile`] serializes with serde (whole, records
//! as columns), and [`Profile::summary`] gives a bounded [`ProfileSummary`]
//! for results files. [`Profile::memory_snapshot`] gives a device's allocator
//! events as a PyTorch memory snapshot (for pytorch.org/memory_viz).
//!
//! # Semantics
//!
//! The counters follow PyTorch: allocated bytes rise on `alloc` and fall on
//! `free_requested`; active and requested bytes fall on `free_completed`;
//! reserved bytes follow segment allocs, frees, maps and unmaps. The series
//! cover what was allocated while recording: frees of blocks or segments
//! allocated before [`Profiler::start`] are counted
//! ([`EventCounts::unmatched_frees`]) and left out.
//!
//! # Files
//!
//! - `src/lib.rs` — this map, the public API (re-exports)
//! - `src/profiler.rs` — `Profiler::start`/`stop` and phase guards
//! - `src/record.rs` — the recording: packed 32-byte records in fixed chunks, interned names
//! - `src/analysis/` — built at `stop()`: `types.rs` (the answers as data), `levels.rs` (how a record
//!   moves the counters), `state.rs` (the replayed allocator state and phases), `passes.rs` (the first
//!   pass: peaks, OOMs, phase peaks, kernel and copy tables; the second: snapshots at the peaks)
//! - `src/profile.rs` — the `Profile` and the questions it answers
//! - `src/timeline.rs` — step series, memory categories, min/max decimation
//! - `src/sampler.rs` — NVML and host memory sampling, reconciliation
//! - `src/chrome.rs` — Chrome trace export
//! - `src/snapshot.rs` — a device's records as a PyTorch memory snapshot, in the snapshot crate's
//!   `Snapshot` model (`vramlab_snapshot`), so its pickle writer and replay apply
//! - `src/error.rs` — the profiler's errors
//! - `tests/` — timelines and categories against the allocator, phases, sampling, the Chrome trace,
//!   the snapshot (`common/mod.rs`: shared helpers)
//! - `benches/record.rs`, `benches/train_step_overhead.rs` — criterion: recording cost, overhead on a step

mod analysis;
mod chrome;
mod error;
mod profile;
mod profiler;
pub mod record;
mod sampler;
mod snapshot;
mod timeline;

pub use analysis::{
    CopyStats, DeviceInfo, DeviceProfile, EventCounts, Fragmentation, KernelStats, LiveAllocation, MAX_OOM_REPORTS,
    MemoryLevels, OOM_LIVE_ALLOCATIONS, OomCause, OomReport, Peak, PeakSnapshot, PhasePeak, PhaseSpan,
    ProfiledDeviceKind,
};
pub use chrome::{ChromeTraceOptions, HOST_PID};
pub use error::{NvmlUnavailable, ProfilerError};
pub use profile::{
    DeviceSummary, KernelRun, Profile, ProfileSummary, Reconciliation, RecordingStats, SummaryOptions, UntrackedBasis,
};
pub use profiler::{PhaseGuard, Profiler, ProfilerConfig, phase};
pub use sampler::{
    DEFAULT_SAMPLE_INTERVAL, GpuSample, HostSample, HostStatus, NvmlDevice, NvmlStatus, Samples, SamplingConfig,
    nvml_driver_version, probe_nvml, process_resident_bytes,
};
pub use timeline::{
    Bucket, ByCategory, CATEGORY_COUNT, Category, CategoryTimeline, Decimation, StepSeries, Timeline, decimate,
};
