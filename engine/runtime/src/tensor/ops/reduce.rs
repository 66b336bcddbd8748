//! Reductions: sum, mean, `item` and argmax along the last dimension.

use super::rows_cols;
use crate::device::Device;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

impl Tensor {
    /// Sum of all elements, as a 0-d f32 tensor (accumulated in f32 or wider).
    pub fn sum(&self) -> Result<Tensor> {
        self.reduce(false)
    }

    /// Mean of all elements, as a 0-d f32 tensor.
    pub fn mean(&self) -> Result<Tensor> {
        self.reduce(true)
    }

    fn reduce(&self, mean: bool) -> Result<Tensor> {
        let op = if mean { "mean" } else { "sum" };
        let out = self.device().backend().reduce(op, self.storage(), mean)?;
        Ok(Tensor::from_storage(out, &[]))
    }

    /// The single value of a 1-element tensor, as f64 (`tensor.item()`).
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(TensorError::BadShape {
                op: "item",
                shape: self.shape().to_vec(),
                reason: "item needs exactly one element".into(),
            });
        }
        if !self.device().is_cpu() {
            // `tensor.item()` on a GPU: a copy to the host, which waits for the device.
            return self.to(&Device::cpu())?.item();
        }
        Ok(self.to_f64_vec()?[0])
    }

    /// The index of the largest element along the last dimension, as i64 with the
    /// last dimension removed (`tensor.argmax(dim=-1)`; the first maximum wins,
    /// NaN counts as the maximum as in PyTorch).
    pub fn argmax(&self) -> Result<Tensor> {
        const OP: &str = "argmax";
        let rows = rows_cols(OP, self)?;
        let out_shape = &self.shape()[..self.shape().len() - 1];
        let out = self.device().backend().argmax(OP, self.storage(), rows)?;
        Ok(Tensor::from_storage(out, out_shape))
    }
}
