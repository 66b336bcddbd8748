//! Naming a device: `DeviceKind`, `DeviceId` (`cpu`, `cpu:N`, `cuda:N`, parsed
//! and printed as PyTorch writes them) and `DeviceError`, why a device could
//! not be had.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::alloc::{AllocError, ConfigError};
use crate::cuda::CudaError;

/// The kind of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// A device's identity: kind and index (`cpu`, `cpu:1`, `cuda:0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceId {
    pub kind: DeviceKind,
    pub index: u32,
}

impl DeviceId {
    pub const CPU: DeviceId = DeviceId { kind: DeviceKind::Cpu, index: 0 };

    pub fn cuda(index: u32) -> DeviceId {
        DeviceId { kind: DeviceKind::Cuda, index }
    }

    /// The index events carry for this device: CPU devices count from 0, CUDA
    /// devices from 1024, so one hub can tell them apart.
    pub fn event_index(self) -> u32 {
        match self.kind {
            DeviceKind::Cpu => self.index,
            DeviceKind::Cuda => 1024 + self.index,
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.index) {
            (DeviceKind::Cpu, 0) => f.write_str("cpu"),
            (DeviceKind::Cpu, i) => write!(f, "cpu:{i}"),
            (DeviceKind::Cuda, i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceId {
    type Err = DeviceError;

    /// Parses `cpu`, `cpu:N`, `cuda` (= `cuda:0`) and `cuda:N`.
    fn from_str(s: &str) -> Result<DeviceId, DeviceError> {
        let text = s.trim();
        let bad = |reason: &str| DeviceError::Parse { input: s.to_owned(), reason: reason.to_owned() };
        let (kind, index) = match text.split_once(':') {
            Some((k, i)) => (k, Some(i)),
            None => (text, None),
        };
        let kind = match kind.to_ascii_lowercase().as_str() {
            "cpu" => DeviceKind::Cpu,
            "cuda" | "gpu" => DeviceKind::Cuda,
            "" => return Err(bad("expected cpu, cuda or cuda:N")),
            other => return Err(bad(&format!("unknown device type '{other}'; expected cpu, cuda or cuda:N"))),
        };
        let index = match index {
            None => 0,
            Some(i) => i.parse::<u32>().map_err(|_| bad(&format!("'{i}' is not a device index (0, 1, 2, …)")))?,
        };
        Ok(DeviceId { kind, index })
    }
}

/// Why a device could not be had.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("bad device '{input}': {reason}")]
    Parse { input: String, reason: String },
    /// No usable CUDA: the driver library is missing or reports no device.
    #[error("CUDA unavailable: {reason}")]
    CudaUnavailable { reason: String },
    #[error("{requested} requested but {present} CUDA device{s} present", s = if *present == 1 { " is" } else { "s are" })]
    NoSuchCudaDevice { requested: DeviceId, present: u32 },
    #[error("PYTORCH_CUDA_ALLOC_CONF: {0}")]
    AllocConf(ConfigError),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error("{device}: {source}")]
    Cuda { device: DeviceId, source: CudaError },
}
