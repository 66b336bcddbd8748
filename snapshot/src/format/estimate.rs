//! The `vramlab_estimate` marker: what a capture made without a GPU
//! (`vramlab estimate`) assumed and modelled, kept in the snapshot so that
//! every view of it can say it is an estimate: its model ([`Estimate`]);
//! `estimate_import.rs` reads it from the pickle's values, `export.rs` writes it back.

use serde::Serialize;
use vramlab_display::format::fmt_bytes;

/// The marker's key at the top of the snapshot dict.
pub const ESTIMATE_KEY: &str = "vramlab_estimate";

/// The version of the marker this reader knows.
pub const ESTIMATE_VERSION: i64 = 1;

/// A snapshot made by running the program with no GPU: its requests were
/// captured, not recorded by PyTorch's allocator, and some were modelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub version: i64,
    /// `torch.__version__` of the Python that ran the program.
    pub torch: String,
    /// The GPU the capture assumed (what the program was told it ran on).
    pub gpu: AssumedGpuInfo,
    /// The requests a GPU makes that tensor-level capture cannot see, each
    /// added by a rule (cuBLAS workspaces, reduction staging, ...).
    pub rules: Vec<ModelledRule>,
    /// Seconds the capture took, and of them the program's start-up
    /// (interpreter and imports, before its first CUDA request).
    pub capture_s: f64,
    pub startup_s: f64,
    /// The command that ran.
    pub argv: Vec<String>,
}

/// The assumed GPU: the properties the capture reported to torch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssumedGpuInfo {
    pub name: String,
    pub total_memory: u64,
    pub sm_count: u64,
    pub major: i64,
    pub minor: i64,
    /// Any further property the capture wrote (cuDNN version, ...), in its order.
    pub other: Vec<(String, Scalar)>,
}

impl AssumedGpuInfo {
    /// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.2 GiB)".
    pub fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, {} SMs, {:.1} GiB)",
            self.name,
            self.major,
            self.minor,
            self.sm_count,
            self.total_memory as f64 / (1u64 << 30) as f64
        )
    }
}

/// A plain value of the marker kept as it was written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// One modelled kind of request: how many the capture added and their bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelledRule {
    pub name: String,
    pub count: u64,
    pub bytes: u64,
    /// Why a GPU makes these requests (the source it follows).
    pub why: String,
    /// Set when the rule only counts requests a GPU makes and adds no bytes
    /// for them (cuDNN's convolution workspaces): the peaks are then a lower
    /// bound, and this says, naming PyTorch's function, why the memory the
    /// allocator may reserve bounds them above.
    pub bound: Option<String>,
}

impl Estimate {
    /// One line: "estimated (no GPU ran): assumed NVIDIA H100 ..., torch 2.11.0",
    /// and where some requests were counted but not sized, the peaks' bounds.
    pub fn headline(&self) -> String {
        let mut s = format!("estimated (no GPU ran): assumed {}, torch {}", self.gpu.describe(), self.torch);
        if !self.unsized_reasons().is_empty() {
            s += &format!(
                "; its peaks are lower bounds (requests counted, not sized), at most {} (the assumed GPU's \
                 memory: an estimate's bound)",
                fmt_bytes(self.gpu.total_memory)
            );
        }
        s
    }

    /// When some requests a GPU makes were counted but not sized (a rule
    /// with a [`ModelledRule::bound`] that fired): the reasons the peaks are
    /// bounded above only by the memory the allocator may reserve. Empty when
    /// every such request is modelled, and the peaks are the estimate's own.
    pub fn unsized_reasons(&self) -> Vec<&str> {
        self.rules.iter().filter(|r| r.count > 0).filter_map(|r| r.bound.as_deref()).collect()
    }
}
