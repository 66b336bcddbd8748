//! 2-d max pooling and its gradient.

use super::same_device;
use crate::cpu_kernels::MaxPool2dShape;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

impl Tensor {
    /// Max pooling with a square `kernel` and `stride`; returns the output and the
    /// argmax indices (i64) that the backward pass needs.
    pub fn max_pool2d(&self, kernel: usize, stride: usize) -> Result<(Tensor, Tensor)> {
        const OP: &str = "max_pool2d";
        let shape = pool_shape(OP, self.shape(), kernel, stride)?;
        let dims = [shape.n, shape.c, shape.out_h(), shape.out_w()];
        let (y, indices) = self.device().backend().max_pool2d(OP, self.storage(), shape)?;
        Ok((Tensor::from_storage(y, &dims), Tensor::from_storage(indices, &dims)))
    }

    /// The gradient of `max_pool2d` with respect to its input.
    pub fn max_pool2d_backward(
        indices: &Tensor,
        gy: &Tensor,
        input_shape: &[usize],
        kernel: usize,
        stride: usize,
    ) -> Result<Tensor> {
        const OP: &str = "max_pool2d_backward";
        same_device(OP, indices, gy)?;
        let shape = pool_shape(OP, input_shape, kernel, stride)?;
        let out = gy.device().backend().max_pool2d_backward(OP, indices.storage(), gy.storage(), shape)?;
        Ok(Tensor::from_storage(out, input_shape))
    }
}

fn pool_shape(op: &'static str, x: &[usize], kernel: usize, stride: usize) -> Result<MaxPool2dShape> {
    if x.len() != 4 || kernel == 0 || stride == 0 || x[2] < kernel || x[3] < kernel {
        return Err(TensorError::BadShape {
            op,
            shape: x.to_vec(),
            reason: format!("expected [n, c, h, w] of at least {kernel}×{kernel}, kernel and stride ≥ 1"),
        });
    }
    Ok(MaxPool2dShape::new(x[0], x[1], x[2], x[3], kernel, stride))
}
