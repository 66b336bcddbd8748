//! Element types of tensors.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cpu_kernels;

/// A tensor's element type: the three float types the kernels compute with, and
/// i64 for class labels and pooling indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
}

impl DType {
    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
        }
    }

    /// PyTorch's name without `torch.` (`float32`, `bfloat16`, `int64`).
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
        }
    }

    /// The kernels' float type, or `None` for i64.
    pub const fn float(self) -> Option<cpu_kernels::FloatDType> {
        match self {
            DType::F32 => Some(cpu_kernels::FloatDType::F32),
            DType::F16 => Some(cpu_kernels::FloatDType::F16),
            DType::BF16 => Some(cpu_kernels::FloatDType::BF16),
            DType::I64 => None,
        }
    }

    /// Parses `f32`/`float32`, `f16`/`float16`/`half`, `bf16`/`bfloat16`, `i64`/`int64`.
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => DType::F32,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "i64" | "int64" | "long" => DType::I64,
            _ => return None,
        })
    }
}

impl From<cpu_kernels::FloatDType> for DType {
    fn from(d: cpu_kernels::FloatDType) -> DType {
        match d {
            cpu_kernels::FloatDType::F32 => DType::F32,
            cpu_kernels::FloatDType::F16 => DType::F16,
            cpu_kernels::FloatDType::BF16 => DType::BF16,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Runs `f` with the storage type of a float dtype.
macro_rules! with_float {
    ($dtype:expr, $op:expr, |$t:ident| $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::dtype::DType::I64 => {
                return Err($crate::error::TensorError::UnsupportedDType {
                    op: $op,
                    dtype: $crate::dtype::DType::I64,
                    reason: "this op computes in floating point",
                })
            }
        }
    };
}
pub(crate) use with_float;
