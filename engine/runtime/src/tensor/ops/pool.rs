//! 2-d max pooling and its gradient.

use std::sync::Arc;

use super::{emit_kernel, output, same_device};
use crate::cpu_kernels::{self as k, KernelCall, MaxPool2dShape};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

impl Tensor {
    /// Max pooling with a square `kernel` and `stride`; returns the output and the
    /// argmax indices (i64) that the backward pass needs.
    pub fn max_pool2d(&self, kernel: usize, stride: usize) -> Result<(Tensor, Tensor)> {
        const OP: &str = "max_pool2d";
        let shape = pool_shape(OP, self.shape(), kernel, stride)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::max_pool2d(gpu, OP, self, shape);
        }
        let dims = [shape.n, shape.c, shape.out_h(), shape.out_w()];
        let dtype = self.dtype();
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let x = self.host_slice::<T>(OP)?;
            let mut indices = Tensor::zeros(&dims, DType::I64, self.device())?;
            let idx = Arc::get_mut(&mut indices.storage).expect("a new tensor is not shared");
            let y = output::<T>(&dims, self.device(), |y| k::max_pool2d_forward(shape, x, y, idx.slice_mut::<i64>()))?;
            emit_kernel(
                self.device(),
                OP,
                "cpu",
                start,
                KernelCall::MaxPool2d { backward: false, shape, dtype: dtype.float().expect("float") },
            );
            Ok((y, indices))
        })
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
        if let Some(gpu) = gy.device().cuda() {
            return gpu_ops::max_pool2d_backward(gpu, OP, indices, gy, input_shape, shape);
        }
        let dtype = gy.dtype();
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let (i, g) = (indices.host_slice::<i64>(OP)?, gy.host_slice::<T>(OP)?);
            let out = output::<T>(input_shape, gy.device(), |gx| k::max_pool2d_backward(shape, i, g, gx))?;
            emit_kernel(
                gy.device(),
                OP,
                "cpu",
                start,
                KernelCall::MaxPool2d { backward: true, shape, dtype: dtype.float().expect("float") },
            );
            Ok(out)
        })
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
