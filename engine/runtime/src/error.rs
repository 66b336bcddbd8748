//! The error of tensor operations, whatever the backend: [`TensorError`].

use thiserror::Error;

use crate::alloc::AllocError;
use crate::cpu_kernels::KernelError;
use crate::device::{DeviceError, DeviceId};
use crate::dtype::DType;

/// Why a tensor operation failed. Every variant names the op.
#[derive(Debug, Error)]
pub enum TensorError {
    /// The golden rule: every operand of an op must be on one device.
    #[error(
        "{op}: operands are on different devices (lhs on {lhs}, rhs on {rhs}); move one of them with \
         .to(&device) so both are on the same device — vramlab never copies silently"
    )]
    DeviceMismatch { op: &'static str, lhs: DeviceId, rhs: DeviceId },
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not fit: {reason}")]
    ShapeMismatch { op: &'static str, lhs: Vec<usize>, rhs: Vec<usize>, reason: String },
    #[error("{op}: bad shape {shape:?}: {reason}")]
    BadShape { op: &'static str, shape: Vec<usize>, reason: String },
    #[error("{op}: dtypes differ ({lhs} and {rhs}); convert one with .to_dtype()")]
    DTypeMismatch { op: &'static str, lhs: DType, rhs: DType },
    #[error("{op}: {dtype} tensors are not supported here ({reason})")]
    UnsupportedDType { op: &'static str, dtype: DType, reason: &'static str },
    /// Reading values needs host memory.
    #[error(
        "{op}: the tensor is on {device}; reading its values needs host memory — move it first with .to(&Device::cpu())"
    )]
    NotOnHost { op: &'static str, device: DeviceId },
    #[error("{op}: {len} values given for shape {shape:?} ({expected} needed)")]
    DataLength { op: &'static str, shape: Vec<usize>, len: usize, expected: usize },
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{op}: {source}")]
    Cuda { op: &'static str, source: crate::cuda::CudaError },
}

pub type Result<T> = std::result::Result<T, TensorError>;
