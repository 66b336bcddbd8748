//! Starting and stopping a recording, and marking phases.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use vramlab_engine::hooks::{self, Hooks, SubscriptionId, now_ns};

use crate::analysis::DeviceInfo;
use crate::error::ProfilerError;
use crate::profile::{Profile, RecordingStats};
use crate::record::Recorder;
use crate::sampler::{Sampler, SamplingConfig};

/// What to record: which hubs, which devices, what to sample.
#[derive(Debug, Clone)]
pub struct ProfilerConfig {
    hubs: Vec<Arc<Hooks>>,
    devices: Vec<DeviceInfo>,
    sampling: SamplingConfig,
}

impl Default for ProfilerConfig {
    /// The engine's process-wide hub ([`hooks::global`]), no devices described,
    /// NVML and host sampling every 50 ms.
    fn default() -> Self {
        ProfilerConfig { hubs: vec![hooks::global().clone()], devices: Vec::new(), sampling: SamplingConfig::default() }
    }
}

impl ProfilerConfig {
    /// The default: the global hub, default sampling.
    pub fn new() -> ProfilerConfig {
        ProfilerConfig::default()
    }

    /// Records the events of `hub` only (a standalone allocator's, say).
    pub fn on(hub: Arc<Hooks>) -> ProfilerConfig {
        ProfilerConfig { hubs: vec![hub], ..ProfilerConfig::default() }
    }

    /// Records the events of `hub` as well. Phase events go to the first hub.
    pub fn also_on(mut self, hub: Arc<Hooks>) -> ProfilerConfig {
        if !self.hubs.iter().any(|h| Arc::ptr_eq(h, &hub)) {
            self.hubs.push(hub);
        }
        self
    }

    /// Describes a device (its name, and for CUDA the UUID that NVML samples are
    /// matched by). Devices not described still get timelines, as "device N".
    pub fn device(mut self, info: DeviceInfo) -> ProfilerConfig {
        self.devices.retain(|d| d.index != info.index);
        self.devices.push(info);
        self
    }

    pub fn sampling(mut self, sampling: SamplingConfig) -> ProfilerConfig {
        self.sampling = sampling;
        self
    }

    /// The sampling interval (default 50 ms).
    pub fn sample_interval(mut self, interval: Duration) -> ProfilerConfig {
        self.sampling.interval = interval;
        self
    }

    /// No sampler thread.
    pub fn without_sampling(self) -> ProfilerConfig {
        self.sampling(SamplingConfig::disabled())
    }
}

/// A running recording. [`Profiler::stop`] ends it and returns the [`Profile`];
/// dropping it without stopping ends it too and discards what it recorded.
#[derive(Debug)]
pub struct Profiler {
    recorder: Arc<Recorder>,
    subscriptions: Vec<(Arc<Hooks>, SubscriptionId)>,
    devices: Vec<DeviceInfo>,
    sampler: Option<Sampler>,
    start_ns: u64,
}

impl Profiler {
    /// Subscribes to the configured hubs and starts the sampler thread.
    pub fn start(config: ProfilerConfig) -> Result<Profiler, ProfilerError> {
        if config.hubs.is_empty() {
            return Err(ProfilerError::NoHub);
        }
        let sampler = Sampler::start(&config.sampling)?;
        let recorder = Recorder::new();
        let start_ns = now_ns();
        let subscriptions = config
            .hubs
            .into_iter()
            .map(|hub| {
                let id = hub.subscribe(recorder.clone());
                (hub, id)
            })
            .collect();
        Ok(Profiler { recorder, subscriptions, devices: config.devices, sampler, start_ns })
    }

    /// Marks a phase until the guard is dropped: a [`PhaseEvent`](hooks::PhaseEvent) pair through
    /// the first hub, recorded like every other event (and seen by any other
    /// subscriber). Phases nest per thread.
    pub fn phase(&self, name: impl Into<Arc<str>>) -> PhaseGuard {
        phase(&self.subscriptions[0].0, name)
    }

    /// Records stored so far (a kernel event takes two).
    pub fn records(&self) -> usize {
        self.recorder.records()
    }

    /// Heap bytes of the record storage so far.
    pub fn recording_bytes(&self) -> usize {
        self.recorder.heap_bytes()
    }

    /// Ends the recording: unsubscribes, stops the sampler, and analyses what
    /// was recorded.
    pub fn stop(mut self) -> Profile {
        self.unsubscribe();
        let end_ns = now_ns();
        let samples = self.sampler.take().map(Sampler::finish).unwrap_or_default();
        let state = self.recorder.take();
        let stats = RecordingStats { dropped_events: state.dropped_events, unknown_events: state.unknown_events };
        let recording = state.finish();
        let devices = std::mem::take(&mut self.devices);
        Profile::build(recording, &devices, self.start_ns, end_ns.max(self.start_ns), samples, stats)
    }

    fn unsubscribe(&mut self) {
        for (hub, id) in self.subscriptions.drain(..) {
            hub.unsubscribe(id);
        }
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        self.unsubscribe();
        if let Some(s) = self.sampler.take() {
            s.finish();
        }
    }
}

/// Marks a phase on `hub` until the guard is dropped (for code that has a hub
/// but no [`Profiler`]). When nobody listens on the hub it costs one atomic
/// load and builds no event.
pub fn phase(hub: &Arc<Hooks>, name: impl Into<Arc<str>>) -> PhaseGuard {
    let name = name.into();
    let depth = hooks::phase_begin(hub, &name);
    PhaseGuard { hub: hub.clone(), name, depth, _not_send: PhantomData }
}

/// An open phase; dropping it ends the phase. Not `Send`: a phase ends on the
/// thread it began on.
#[derive(Debug)]
#[must_use = "the phase ends when the guard is dropped"]
pub struct PhaseGuard {
    hub: Arc<Hooks>,
    name: Arc<str>,
    depth: u32,
    _not_send: PhantomData<*const ()>,
}

impl PhaseGuard {
    /// The phase's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The nesting depth (1 for a top-level phase).
    pub fn depth(&self) -> u32 {
        self.depth
    }
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        hooks::phase_end(&self.hub, &self.name, self.depth);
    }
}
