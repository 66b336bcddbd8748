//! Losses: cross-entropy (f32 logits against i64 labels) and mean squared
//! error, and their gradients.

use super::{check_pair, emit_kernel, need_f32, output, same_device, same_shape};
use crate::cpu_kernels::{self as k, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError};

impl Tensor {
    /// Mean cross-entropy of f32 logits `[rows, classes]` against i64 labels
    /// `[rows]`, as a 0-d f32 tensor.
    pub fn cross_entropy(&self, labels: &Tensor) -> Result<Tensor> {
        const OP: &str = "cross_entropy";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let (rows, classes) = ce_shape(OP, self, labels)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::cross_entropy(gpu, OP, self, labels, (rows, classes));
        }
        let start = now_ns();
        let loss = k::cross_entropy(self.host_slice::<f32>(OP)?, labels.host_slice::<i64>(OP)?, rows, classes)?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::CrossEntropy { backward: false, rows, classes });
        Tensor::from_slice(&[loss], &[], self.device())
    }

    /// The gradient of the mean cross-entropy with respect to the logits, scaled by
    /// the loss gradient `grad_out`.
    pub fn cross_entropy_backward(&self, labels: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "cross_entropy_backward";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let (rows, classes) = ce_shape(OP, self, labels)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::cross_entropy_backward(gpu, OP, self, labels, (rows, classes), grad_out);
        }
        let start = now_ns();
        let (x, l) = (self.host_slice::<f32>(OP)?, labels.host_slice::<i64>(OP)?);
        let out = output::<f32>(self.shape(), self.device(), |g| {
            k::cross_entropy_backward(x, l, rows, classes, grad_out, g)
        })?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::CrossEntropy { backward: true, rows, classes });
        Ok(out)
    }

    /// Mean squared error against `target`, as a 0-d f32 tensor.
    pub fn mse(&self, target: &Tensor) -> Result<Tensor> {
        const OP: &str = "mse";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::mse(gpu, OP, self, target);
        }
        let start = now_ns();
        let loss = k::mse(self.host_slice::<f32>(OP)?, target.host_slice::<f32>(OP)?)?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::Mse { backward: false, len: self.numel() });
        Tensor::from_slice(&[loss], &[], self.device())
    }

    /// The gradient of the MSE with respect to `self`, scaled by `grad_out`.
    pub fn mse_backward(&self, target: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "mse_backward";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::mse_backward(gpu, OP, self, target, grad_out);
        }
        let start = now_ns();
        let (p, t) = (self.host_slice::<f32>(OP)?, target.host_slice::<f32>(OP)?);
        let out = output::<f32>(self.shape(), self.device(), |g| k::mse_backward(p, t, grad_out, g))?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::Mse { backward: true, len: self.numel() });
        Ok(out)
    }
}

fn ce_shape(op: &'static str, logits: &Tensor, labels: &Tensor) -> Result<(usize, usize)> {
    let (x, l) = (logits.shape(), labels.shape());
    if x.len() != 2 || l != [x[0]] || labels.dtype() != DType::I64 {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: x.to_vec(),
            rhs: l.to_vec(),
            reason: "expected logits [rows, classes] and int64 labels [rows]".into(),
        });
    }
    Ok((x[0], x[1]))
}
