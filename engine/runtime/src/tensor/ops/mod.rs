//! Tensor ops over the CPU kernels: operand checks (the golden rule first),
//! outputs and workspaces from the device's allocator, the autotuner's choice
//! of algorithm, and one kernel event per kernel call. One file per op family;
//! this one holds what they share (the checks, kernel events, outputs).

mod cast;
mod conv;
mod elementwise;
mod loss;
mod matmul;
mod optim;
mod pool;
mod reduce;
mod softmax;

use std::sync::Arc;

use super::{DType, Pod, Result, Storage, Tensor, TensorError};
use crate::cpu_kernels::{self as k, Element, ElementwiseOp, KernelCall};
use crate::device::Device;
use crate::hooks::{Event, KernelEvent, Tag, now_ns};

pub(super) use cast::cast;

/// Where a kernel's time went, for callers that want it without subscribing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelTiming {
    pub algorithm: &'static str,
    pub duration_ns: u64,
}

/// Stride and padding of a convolution (dilation 1, one group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conv2dOptions {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Conv2dOptions {
    pub fn new(stride: usize, padding: usize) -> Conv2dOptions {
        Conv2dOptions { stride: (stride, stride), padding: (padding, padding) }
    }
}

fn same_device(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.device() == b.device() {
        Ok(())
    } else {
        Err(TensorError::DeviceMismatch { op, lhs: a.device().id(), rhs: b.device().id() })
    }
}

fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() == b.dtype() { Ok(()) } else { Err(TensorError::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() }) }
}

fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() == b.shape() {
        Ok(())
    } else {
        Err(TensorError::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
            reason: "elementwise ops need equal shapes".into(),
        })
    }
}

/// The golden rule and equal dtypes: the checks every two-operand op makes
/// first, on any device.
fn check_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    same_device(op, a, b)?;
    same_dtype(op, a, b)
}

fn need_f32(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() == DType::F32 {
        Ok(())
    } else {
        Err(TensorError::UnsupportedDType {
            op,
            dtype: t.dtype(),
            reason: "this op runs in float32 (autocast keeps it there)",
        })
    }
}

/// Sends a kernel event to the device's hub when anybody listens.
fn emit_kernel(device: &Device, name: &'static str, algorithm: &'static str, start_ns: u64, call: KernelCall) {
    let hooks = device.allocator().hooks();
    if hooks.is_active() {
        let duration_ns = now_ns().saturating_sub(start_ns);
        let cost = call.cost();
        hooks.emit(&Event::Kernel(KernelEvent {
            name,
            algorithm,
            device: device.id().event_index(),
            stream: 0,
            start_ns,
            duration_ns,
            launch_ns: duration_ns,
            flops: cost.flops,
            bytes: cost.bytes,
        }));
    }
}

/// A scratch buffer of f32 from the device's allocator, tagged `workspace`.
fn workspace(device: &Device, len: usize) -> Result<Storage> {
    Storage::new(device, len, DType::F32, Some(Tag::Workspace))
}

/// A new output tensor whose storage `fill` writes.
fn output<T: Pod>(
    shape: &[usize],
    device: &Device,
    fill: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Tensor> {
    Tensor::build(shape, T::DTYPE, device, |s| Ok(fill(s.slice_mut::<T>())?))
}

/// Runs an elementwise kernel producing one output shaped like `like`.
fn unary<T: Pod + Element>(
    op: ElementwiseOp,
    like: &Tensor,
    f: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Tensor> {
    let start = now_ns();
    let out = output::<T>(like.shape(), like.device(), f)?;
    let dtype = like.dtype().float().expect("float op");
    emit_kernel(
        like.device(),
        op.name(),
        "cpu",
        start,
        KernelCall::Elementwise { op, len: like.numel(), channels: 0, dtype },
    );
    Ok(out)
}

/// (rows, last dim) of a tensor of at least one dimension.
fn rows_cols(op: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape().split_last() {
        Some((&cols, rest)) if cols > 0 => Ok((rest.iter().product(), cols)),
        _ => Err(TensorError::BadShape {
            op,
            shape: t.shape().to_vec(),
            reason: "needs at least one non-empty dimension".into(),
        }),
    }
}

/// `t`'s dtype is `dtype` (the error reading it as `dtype` gives on the host).
fn expect_dtype(op: &'static str, t: &Tensor, dtype: DType) -> Result<()> {
    if t.dtype() == dtype { Ok(()) } else { Err(TensorError::DTypeMismatch { op, lhs: t.dtype(), rhs: dtype }) }
}

/// The checks and slices of in-place updates.
impl Tensor {
    /// The checks of an in-place update on a GPU: `self` holds the only
    /// reference to its storage (as `unique_slice_mut` demands on the host).
    fn check_unique(&mut self, op: &'static str) -> Result<()> {
        if self.is_unique() {
            Ok(())
        } else {
            Err(TensorError::BadShape {
                op,
                shape: self.shape().to_vec(),
                reason: "an in-place update needs the only reference to the tensor".into(),
            })
        }
    }

    /// The checks of an in-place float op on a GPU, in the host's order: a float
    /// dtype, then the only reference.
    fn check_inplace(&mut self, op: &'static str) -> Result<()> {
        if self.dtype().float().is_none() {
            return Err(TensorError::UnsupportedDType {
                op,
                dtype: self.dtype(),
                reason: "this op computes in floating point",
            });
        }
        self.check_unique(op)
    }

    /// [`check_unique`](Self::check_unique) for f32 (`unique_f32_mut`'s checks).
    fn check_unique_f32(&mut self, op: &'static str) -> Result<()> {
        need_f32(op, self)?;
        self.check_unique(op)
    }

    fn unique_f32_mut(&mut self, op: &'static str) -> Result<&mut [f32]> {
        need_f32(op, self)?;
        self.check_host(op)?;
        let shape = self.shape().to_vec();
        match Arc::get_mut(&mut self.storage) {
            Some(s) => Ok(s.slice_mut::<f32>()),
            None => Err(TensorError::BadShape {
                op,
                shape,
                reason: "an in-place update needs the only reference to the tensor".into(),
            }),
        }
    }

    /// The elements for an in-place update; needs the only reference to the storage.
    fn unique_slice_mut<T: Pod>(&mut self, op: &'static str) -> Result<&mut [T]> {
        self.check_host(op)?;
        if T::DTYPE != self.dtype() {
            return Err(TensorError::DTypeMismatch { op, lhs: self.dtype(), rhs: T::DTYPE });
        }
        let shape = self.shape().to_vec();
        match Arc::get_mut(&mut self.storage) {
            Some(s) => Ok(s.slice_mut::<T>()),
            None => Err(TensorError::BadShape {
                op,
                shape,
                reason: "an in-place update needs the only reference to the tensor".into(),
            }),
        }
    }
}
