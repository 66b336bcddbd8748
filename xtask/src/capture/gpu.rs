//! The GPU a capture assumes ([`AssumedGpu`]): what the fake CUDA runtime reports
//! to torch (name, memory, SM count, compute capability) and what the modelled
//! rules read (the SM count sizes reduction staging). Presets for common cards and
//! a `PRESET,key=value,…` spec to change any field.

use crate::size::parse_size;

use super::error::CaptureError;

/// The GPU a capture assumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumedGpu {
    /// The device name torch reports (`torch.cuda.get_device_name()`).
    pub name: String,
    /// Total device memory in bytes (`cudaDeviceProp::totalGlobalMem`).
    pub total_memory: u64,
    /// Streaming multiprocessors (reduction staging depends on it).
    pub sm_count: u32,
    /// Compute capability, major.
    pub major: u32,
    /// Compute capability, minor.
    pub minor: u32,
}

/// The presets [`AssumedGpu::parse`] knows: spec name, device name, total memory
/// (what `nvidia-smi` shows, in MiB), SMs, compute capability.
const PRESETS: &[(&str, &str, u64, u32, u32, u32)] = &[
    ("h100", "NVIDIA H100 80GB HBM3", 81_559, 132, 9, 0),
    ("h200", "NVIDIA H200", 143_771, 132, 9, 0),
    ("a100", "NVIDIA A100-SXM4-80GB", 81_920, 108, 8, 0),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40_960, 108, 8, 0),
    ("l4", "NVIDIA L4", 23_034, 58, 8, 9),
];

impl AssumedGpu {
    /// The H100 80GB HBM3 (SXM) the fixtures were recorded on: 132 SMs, sm_90.
    pub fn h100() -> Self {
        Self::preset("h100").expect("h100 is a preset")
    }

    fn preset(name: &str) -> Option<Self> {
        PRESETS.iter().find(|p| p.0.eq_ignore_ascii_case(name)).map(|&(_, dev, mib, sms, major, minor)| Self {
            name: dev.to_owned(),
            total_memory: mib << 20,
            sm_count: sms,
            major,
            minor,
        })
    }

    /// Reads a GPU spec: a preset (`h100`, `h200`, `a100`, `a100-40gb`, `l4`), then
    /// any of `name=…`, `memory=SIZE`, `sms=N`, `cc=MAJOR.MINOR`, comma-separated
    /// (`h100,memory=64GiB`); without a preset all four are needed.
    pub fn parse(s: &str) -> Result<Self, CaptureError> {
        let bad = |reason: String| CaptureError::BadGpu { spec: s.to_owned(), reason };
        let mut parts = s.split(',').map(str::trim).filter(|p| !p.is_empty()).peekable();
        let mut gpu = match parts.peek() {
            Some(first) if !first.contains('=') => {
                let first = parts.next().unwrap_or_default();
                Self::preset(first).ok_or_else(|| bad(format!("`{first}` is not a preset ({})", preset_names())))?
            }
            _ => Self { name: String::new(), total_memory: 0, sm_count: 0, major: 0, minor: 0 },
        };
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
            match key.trim() {
                "name" => gpu.name = value.trim().to_owned(),
                "memory" => gpu.total_memory = parse_size(value).map_err(|e| bad(e.to_string()))?.bytes,
                "sms" => {
                    gpu.sm_count = value.trim().parse().map_err(|_| bad(format!("sms `{value}` is not a count")))?
                }
                "cc" => {
                    let (ma, mi) = value.trim().split_once('.').unwrap_or((value.trim(), "0"));
                    gpu.major = ma.parse().map_err(|_| bad(format!("cc `{value}` is not MAJOR.MINOR")))?;
                    gpu.minor = mi.parse().map_err(|_| bad(format!("cc `{value}` is not MAJOR.MINOR")))?;
                }
                other => return Err(bad(format!("unknown key `{other}` (name, memory, sms, cc)"))),
            }
        }
        if gpu.name.is_empty() || gpu.total_memory == 0 || gpu.sm_count == 0 || gpu.major == 0 {
            return Err(bad("name, memory, sms and cc are all needed without a preset".into()));
        }
        if gpu.name.contains(';') || gpu.name.len() > 255 {
            return Err(bad("the name must be under 256 bytes, without `;`".into()));
        }
        Ok(gpu)
    }

    /// The fake runtime's `VRAMLAB_FAKECUDA_GPU`: `NAME;TOTAL;SMS;MAJOR;MINOR`.
    pub(super) fn env_value(&self) -> String {
        format!("{};{};{};{};{}", self.name, self.total_memory, self.sm_count, self.major, self.minor)
    }
}

fn preset_names() -> String {
    PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_overrides_parse() {
        assert_eq!(AssumedGpu::parse("h100").unwrap(), AssumedGpu::h100());
        let g = AssumedGpu::parse("H100, memory=64GiB, sms=114").unwrap();
        assert_eq!((g.total_memory, g.sm_count, g.major), (64 << 30, 114, 9));
        let g = AssumedGpu::parse("name=Test GPU,memory=16GiB,sms=40,cc=8.6").unwrap();
        assert_eq!((g.name.as_str(), g.major, g.minor), ("Test GPU", 8, 6));
    }

    #[test]
    fn bad_specs_say_why() {
        for (spec, why) in [
            ("v100x", "not a preset"),
            ("h100,sms=many", "not a count"),
            ("h100,colour=red", "unknown key"),
            ("name=X,memory=1GiB", "all needed"),
            ("h100,memory=4GB", "ambiguous"),
        ] {
            let e = AssumedGpu::parse(spec).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }
}
