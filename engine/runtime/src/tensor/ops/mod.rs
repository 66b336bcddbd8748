//! Tensor ops: each checks its operands (the golden rule first, then dtypes
//! and shapes), calls its device's backend once (`crate::backend::Backend`,
//! CPU or CUDA) with the operands' storage, and gives the result its shape.
//! One file per op family; this one holds what they share (the checks, the
//! storage of in-place updates).

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

use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::storage::Storage;
use crate::tensor::value::Tensor;

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

/// The storage of in-place updates.
impl Tensor {
    /// The storage for an in-place float op, after the checks in the order
    /// both backends had them: a float dtype, then the only reference.
    fn inplace_storage(&mut self, op: &'static str) -> Result<&mut Storage> {
        if self.dtype().float().is_none() {
            return Err(TensorError::UnsupportedDType {
                op,
                dtype: self.dtype(),
                reason: "this op computes in floating point",
            });
        }
        self.unique_storage(op)
    }

    /// The storage for an in-place f32 update (optimizer steps).
    fn inplace_f32_storage(&mut self, op: &'static str) -> Result<&mut Storage> {
        need_f32(op, self)?;
        self.unique_storage(op)
    }

    fn unique_storage(&mut self, op: &'static str) -> Result<&mut Storage> {
        let shape = self.shape().to_vec();
        match Arc::get_mut(&mut self.storage) {
            Some(s) => Ok(s),
            None => Err(TensorError::BadShape {
                op,
                shape,
                reason: "an in-place update needs the only reference to the tensor".into(),
            }),
        }
    }
}
