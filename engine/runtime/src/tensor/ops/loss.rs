//! Losses: cross-entropy (f32 logits against i64 labels) and mean squared
//! error, and their gradients.

use super::{check_pair, need_f32, same_device, same_shape};
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

impl Tensor {
    /// Mean cross-entropy of f32 logits `[rows, classes]` against i64 labels
    /// `[rows]`, as a 0-d f32 tensor.
    pub fn cross_entropy(&self, labels: &Tensor) -> Result<Tensor> {
        const OP: &str = "cross_entropy";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let rows = ce_shape(OP, self, labels)?;
        let out = self.device().backend().cross_entropy(OP, self.storage(), labels.storage(), rows)?;
        Ok(Tensor::from_storage(out, &[]))
    }

    /// The gradient of the mean cross-entropy with respect to the logits, scaled by
    /// the loss gradient `grad_out`.
    pub fn cross_entropy_backward(&self, labels: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "cross_entropy_backward";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let rows = ce_shape(OP, self, labels)?;
        let backend = self.device().backend();
        let out = backend.cross_entropy_backward(OP, self.storage(), labels.storage(), rows, grad_out)?;
        Ok(Tensor::from_storage(out, self.shape()))
    }

    /// Mean squared error against `target`, as a 0-d f32 tensor.
    pub fn mse(&self, target: &Tensor) -> Result<Tensor> {
        const OP: &str = "mse";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        let out = self.device().backend().mse(OP, self.storage(), target.storage())?;
        Ok(Tensor::from_storage(out, &[]))
    }

    /// The gradient of the MSE with respect to `self`, scaled by `grad_out`.
    pub fn mse_backward(&self, target: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "mse_backward";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        let out = self.device().backend().mse_backward(OP, self.storage(), target.storage(), grad_out)?;
        Ok(Tensor::from_storage(out, self.shape()))
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
