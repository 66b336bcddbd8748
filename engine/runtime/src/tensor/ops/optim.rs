//! In-place optimizer steps (SGD, Adam) on f32 parameters.

use super::{emit_kernel, expect_dtype, same_device, same_shape};
use crate::cpu_kernels::{self as k, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError};

/// In-place optimizer updates on f32 parameters.
impl Tensor {
    /// One SGD step on `self` (the parameter) with gradient `grad` (PyTorch's
    /// `torch.optim.SGD` semantics); `step` counts from 1. `momentum` is the
    /// momentum buffer, needed when `cfg.momentum != 0`: plain SGD keeps no
    /// state, as in PyTorch, and passes `None`.
    pub fn sgd_step_(
        &mut self,
        grad: &Tensor,
        mut momentum: Option<&mut Tensor>,
        cfg: &k::Sgd,
        step: u64,
    ) -> Result<()> {
        const OP: &str = "sgd_step";
        same_device(OP, self, grad)?;
        same_shape(OP, self, grad)?;
        match momentum.as_deref() {
            Some(m) => {
                same_device(OP, self, m)?;
                same_shape(OP, self, m)?;
            }
            None if cfg.momentum != 0.0 => {
                return Err(TensorError::BadShape {
                    op: OP,
                    shape: self.shape().to_vec(),
                    reason: "SGD with momentum needs a momentum buffer".into(),
                });
            }
            None => {}
        }
        if let Some(gpu) = self.device().cuda().cloned() {
            expect_dtype(OP, grad, DType::F32)?;
            if let Some(m) = momentum.as_deref_mut() {
                m.check_unique_f32(OP)?;
            }
            self.check_unique_f32(OP)?;
            // The CPU kernel's checks of `cfg` and `step`, on no elements.
            k::sgd_step(cfg, step, &mut [], &[], &mut [])?;
            return gpu_ops::sgd_step(&gpu, OP, self, grad, momentum.as_deref(), cfg, step);
        }
        let start = now_ns();
        let g = grad.host_slice::<f32>(OP)?;
        let m = match momentum {
            Some(m) => m.unique_f32_mut(OP)?,
            None => &mut [],
        };
        let p = self.unique_f32_mut(OP)?;
        k::sgd_step(cfg, step, p, g, m)?;
        let call = KernelCall::Sgd {
            len: self.numel(),
            momentum: cfg.momentum != 0.0,
            weight_decay: cfg.weight_decay != 0.0,
            nesterov: cfg.nesterov,
        };
        emit_kernel(self.device(), OP, "cpu", start, call);
        Ok(())
    }

    /// One Adam step (PyTorch's `torch.optim.Adam`, bias-corrected) on `self` with
    /// gradient `grad` and moment buffers `exp_avg`, `exp_avg_sq`; `step` counts from 1.
    pub fn adam_step_(
        &mut self,
        grad: &Tensor,
        exp_avg: &mut Tensor,
        exp_avg_sq: &mut Tensor,
        cfg: &k::Adam,
        step: u64,
    ) -> Result<()> {
        const OP: &str = "adam_step";
        for other in [grad, &*exp_avg, &*exp_avg_sq] {
            same_device(OP, self, other)?;
            same_shape(OP, self, other)?;
        }
        if let Some(gpu) = self.device().cuda().cloned() {
            expect_dtype(OP, grad, DType::F32)?;
            exp_avg.check_unique_f32(OP)?;
            exp_avg_sq.check_unique_f32(OP)?;
            self.check_unique_f32(OP)?;
            // The CPU kernel's checks of `cfg` and `step`, on no elements.
            k::adam_step(cfg, step, &mut [], &[], &mut [], &mut [])?;
            return gpu_ops::adam_step(&gpu, OP, [&*self, grad, &*exp_avg, &*exp_avg_sq], cfg, step);
        }
        let start = now_ns();
        let g = grad.host_slice::<f32>(OP)?;
        let m = exp_avg.unique_f32_mut(OP)?;
        let v = exp_avg_sq.unique_f32_mut(OP)?;
        let p = self.unique_f32_mut(OP)?;
        k::adam_step(cfg, step, p, g, m, v)?;
        let call = KernelCall::Adam { len: self.numel(), weight_decay: cfg.weight_decay != 0.0 };
        emit_kernel(self.device(), OP, "cpu", start, call);
        Ok(())
    }
}
