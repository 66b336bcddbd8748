//! Softmax and log-softmax over the last dimension, and their gradients.

use super::{check_pair, emit_kernel, output, rows_cols, same_shape};
use crate::cpu_kernels::{self as k, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

impl Tensor {
    /// Softmax over the last dimension.
    pub fn softmax(&self) -> Result<Tensor> {
        self.softmax_impl(false)
    }

    /// Log-softmax over the last dimension.
    pub fn log_softmax(&self) -> Result<Tensor> {
        self.softmax_impl(true)
    }

    fn softmax_impl(&self, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        let (rows, cols) = rows_cols(op, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::softmax(gpu, op, self, (rows, cols), log);
        }
        let dtype = self.dtype();
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let x = self.host_slice::<T>(op)?;
            let out = output::<T>(self.shape(), self.device(), |y| {
                if log { k::log_softmax(x, rows, cols, y) } else { k::softmax(x, rows, cols, y) }
            })?;
            let call = KernelCall::Softmax { log, backward: false, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), op, "cpu", start, call);
            Ok(out)
        })
    }

    /// The gradient of softmax (`self` is the softmax output) given `gy`.
    pub fn softmax_backward(&self, gy: &Tensor) -> Result<Tensor> {
        self.softmax_backward_impl(gy, false)
    }

    /// The gradient of log-softmax (`self` is its output) given `gy`.
    pub fn log_softmax_backward(&self, gy: &Tensor) -> Result<Tensor> {
        self.softmax_backward_impl(gy, true)
    }

    fn softmax_backward_impl(&self, gy: &Tensor, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax_backward" } else { "softmax_backward" };
        check_pair(op, self, gy)?;
        same_shape(op, self, gy)?;
        let (rows, cols) = rows_cols(op, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::softmax_backward(gpu, op, self, gy, (rows, cols), log);
        }
        let dtype = self.dtype();
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let (y, g) = (self.host_slice::<T>(op)?, gy.host_slice::<T>(op)?);
            let out = output::<T>(self.shape(), self.device(), |gx| {
                if log {
                    k::log_softmax_backward(y, g, rows, cols, gx)
                } else {
                    k::softmax_backward(y, g, rows, cols, gx)
                }
            })?;
            let call = KernelCall::Softmax { log, backward: true, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), op, "cpu", start, call);
            Ok(out)
        })
    }
}
