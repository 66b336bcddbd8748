//! The profiler's errors.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What can go wrong while profiling or exporting.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProfilerError {
    /// The configuration named no event hub.
    #[error("profiler start: no event hub to subscribe to (the configuration's hub list is empty)")]
    NoHub,
    /// The sampler thread could not be started.
    #[error("profiler start: could not spawn the sampler thread: {source}")]
    SamplerSpawn {
        #[source]
        source: std::io::Error,
    },
    /// A query named a device the profile does not hold.
    #[error("profile {query}: device {device} is not in this profile (devices: {known:?})")]
    UnknownDevice { query: &'static str, device: u32, known: Vec<u32> },
    /// Writing an export failed.
    #[error("{export} export: writing failed: {source}")]
    Write {
        export: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Serializing an export failed.
    #[error("{export} export: serializing {what} failed: {source}")]
    Json {
        export: &'static str,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Why NVML could not be used (`NVML unavailable: <reason>`).
#[derive(Debug, Clone, Error, PartialEq, Eq, Serialize, Deserialize)]
#[error("NVML unavailable: {reason}")]
pub struct NvmlUnavailable {
    pub reason: String,
}
