//! Softmax and log-softmax over the last dimension, and their gradients.

use super::{check_pair, rows_cols, same_shape};
use crate::error::Result;
use crate::tensor::value::Tensor;

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
        let rows = rows_cols(op, self)?;
        let out = self.device().backend().softmax(op, self.storage(), rows, log)?;
        Ok(Tensor::from_storage(out, self.shape()))
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
        let rows = rows_cols(op, self)?;
        let out = self.device().backend().softmax_backward(op, self.storage(), gy.storage(), rows, log)?;
        Ok(Tensor::from_storage(out, self.shape()))
    }
}
