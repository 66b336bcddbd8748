//! In-place optimizer steps (SGD, Adam) on f32 parameters.

use super::{expect_dtype, same_device, same_shape};
use crate::cpu_kernels as k;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

/// In-place optimizer updates on f32 parameters.
impl Tensor {
    /// One SGD step on `self` (the parameter) with gradient `grad` (PyTorch's
    /// `torch.optim.SGD` semantics); `step` counts from 1. `momentum` is the
    /// momentum buffer, needed when `cfg.momentum != 0`: plain SGD keeps no
    /// state, as in PyTorch, and passes `None`.
    pub fn sgd_step_(&mut self, grad: &Tensor, momentum: Option<&mut Tensor>, cfg: &k::Sgd, step: u64) -> Result<()> {
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
        expect_dtype(OP, grad, DType::F32)?;
        let momentum = match momentum {
            Some(m) => Some(m.inplace_f32_storage(OP)?),
            None => None,
        };
        let device = self.device().clone();
        device.backend().sgd_step(OP, self.inplace_f32_storage(OP)?, grad.storage(), momentum, cfg, step)
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
        expect_dtype(OP, grad, DType::F32)?;
        let moments = [exp_avg.inplace_f32_storage(OP)?, exp_avg_sq.inplace_f32_storage(OP)?];
        let device = self.device().clone();
        device.backend().adam_step(OP, self.inplace_f32_storage(OP)?, grad.storage(), moments, cfg, step)
    }
}
