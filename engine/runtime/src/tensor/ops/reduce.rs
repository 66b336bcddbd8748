//! Reductions: sum, mean, `item` and argmax along the last dimension.

use super::{emit_kernel, rows_cols};
use crate::cpu_kernels::{self as k, Element, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::device::Device;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

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
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::reduce(gpu, op, self, mean);
        }
        let dtype = self.dtype();
        let start = now_ns();
        let value = with_float!(dtype, op, |T| {
            let x = self.host_slice::<T>(op)?;
            if mean { k::mean(x) } else { k::sum(x) }
        });
        let d = dtype.float().expect("float");
        let call = if mean {
            KernelCall::Mean { len: self.numel(), dtype: d }
        } else {
            KernelCall::Sum { len: self.numel(), dtype: d }
        };
        emit_kernel(self.device(), op, "cpu", start, call);
        Tensor::from_slice(&[value], &[], self.device())
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
        let (rows, cols) = rows_cols(OP, self)?;
        let out_shape = &self.shape()[..self.shape().len() - 1];
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::argmax(gpu, OP, self, (rows, cols), out_shape);
        }
        let dtype = self.dtype();
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let x = self.host_slice::<T>(OP)?;
            let out = Tensor::build(out_shape, DType::I64, self.device(), |s| {
                for (o, row) in s.slice_mut::<i64>().iter_mut().zip(x.chunks(cols)) {
                    let mut best = (0usize, row[0].to_f32());
                    for (j, v) in row.iter().enumerate().skip(1) {
                        let v = v.to_f32();
                        if best.1.is_nan() {
                            break;
                        }
                        if v > best.1 || v.is_nan() {
                            best = (j, v);
                        }
                    }
                    *o = best.0 as i64;
                }
                Ok(())
            })?;
            // One read of every element: the cost of a sum.
            let call = KernelCall::Sum { len: rows * cols, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), OP, "cpu", start, call);
            Ok(out)
        })
    }
}
