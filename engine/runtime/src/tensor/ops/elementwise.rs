//! Elementwise ops: binary and unary maps, the bias broadcast and its
//! gradient, and the in-place updates (`add_`, `scale_`, `fill_`, the
//! mixed-precision unscale).

use super::{check_pair, emit_kernel, output, same_shape, unary};
use crate::cpu_kernels::{self as k, Element, ElementwiseOp, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

impl Tensor {
    /// `a + b` (same shape, device and dtype).
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary("add", ElementwiseOp::Add, other)
    }

    /// `a * b` elementwise.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary("mul", ElementwiseOp::Mul, other)
    }

    /// The gradient of `relu` at `self` given the output gradient `gy`.
    pub fn relu_backward(&self, gy: &Tensor) -> Result<Tensor> {
        self.binary("relu_backward", ElementwiseOp::ReluBackward, gy)
    }

    /// The gradient of `gelu` at `self` given `gy`.
    pub fn gelu_backward(&self, gy: &Tensor) -> Result<Tensor> {
        self.binary("gelu_backward", ElementwiseOp::GeluBackward, gy)
    }

    fn binary(&self, name: &'static str, op: ElementwiseOp, other: &Tensor) -> Result<Tensor> {
        check_pair(name, self, other)?;
        same_shape(name, self, other)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::binary(gpu, name, op, self, other);
        }
        with_float!(self.dtype(), name, |T| {
            let (a, b) = (self.host_slice::<T>(name)?, other.host_slice::<T>(name)?);
            unary::<T>(op, self, |y| match op {
                ElementwiseOp::Add => k::add(a, b, y),
                ElementwiseOp::Mul => k::mul(a, b, y),
                ElementwiseOp::ReluBackward => k::relu_backward(a, b, y),
                _ => k::gelu_backward(a, b, y),
            })
        })
    }

    /// `alpha * a`.
    pub fn scale(&self, alpha: f32) -> Result<Tensor> {
        self.unary_op("scale", ElementwiseOp::Scale, alpha)
    }

    /// `max(a, 0)`.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary_op("relu", ElementwiseOp::Relu, 0.0)
    }

    /// GELU (the kernels' formula; see `cpu_kernels::activation`).
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary_op("gelu", ElementwiseOp::Gelu, 0.0)
    }

    fn unary_op(&self, name: &'static str, op: ElementwiseOp, alpha: f32) -> Result<Tensor> {
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::unary(gpu, name, op, self, alpha);
        }
        with_float!(self.dtype(), name, |T| {
            let x = self.host_slice::<T>(name)?;
            unary::<T>(op, self, |y| match op {
                ElementwiseOp::Scale => k::scale(x, alpha, y),
                ElementwiseOp::Relu => k::relu(x, y),
                _ => k::gelu(x, y),
            })
        })
    }
}

/// Elements per parallel task of the in-place loops below, and the length from
/// which they go parallel (the kernels' own thresholds).
const INPLACE_CHUNK: usize = 1 << 14;
const INPLACE_PAR_THRESHOLD: usize = 1 << 16;

/// `y[i] = f(y[i])` in place, computed in f32.
fn map_inplace<T: Element>(y: &mut [T], f: impl Fn(f32) -> f32 + Sync) {
    let serial = |c: &mut [T]| match T::as_f32_mut(c) {
        Some(cf) => cf.iter_mut().for_each(|v| *v = f(*v)),
        None => c.iter_mut().for_each(|v| *v = T::from_f32(f(v.to_f32()))),
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(INPLACE_CHUNK).for_each(serial);
    } else {
        serial(y);
    }
}

/// `y[i] = f(y[i], x[i])` in place, computed in f32. Lengths already match.
fn zip_inplace<T: Element>(y: &mut [T], x: &[T], f: impl Fn(f32, f32) -> f32 + Sync) {
    let serial = |(c, xc): (&mut [T], &[T])| match (T::as_f32_mut(c), T::as_f32(xc)) {
        (Some(cf), Some(xf)) => cf.iter_mut().zip(xf).for_each(|(v, &w)| *v = f(*v, w)),
        _ => c.iter_mut().zip(xc).for_each(|(v, w)| *v = T::from_f32(f(v.to_f32(), w.to_f32()))),
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(INPLACE_CHUNK).zip(x.par_chunks(INPLACE_CHUNK)).for_each(serial);
    } else {
        serial((y, x));
    }
}

/// `y[o, c, i] += bias[c]` in place over `[outer, channels, inner]`.
fn add_bias_inplace<T: Element>(y: &mut [T], bias: &[T], channels: usize, inner: usize) {
    if y.is_empty() || channels == 0 || inner == 0 {
        return;
    }
    let b: Vec<f32> = bias.iter().map(|v| v.to_f32()).collect();
    // Whole rows (inner = 1) or whole planes per task, so each task knows its channels.
    let unit = if inner == 1 { channels } else { inner };
    let units_per_task = (INPLACE_CHUNK / unit).max(1);
    let task = |(t, c): (usize, &mut [T])| {
        for (u, part) in c.chunks_mut(unit).enumerate() {
            if inner == 1 {
                match T::as_f32_mut(part) {
                    Some(pf) => pf.iter_mut().zip(&b).for_each(|(v, &bv)| *v += bv),
                    None => part.iter_mut().zip(&b).for_each(|(v, &bv)| *v = T::from_f32(v.to_f32() + bv)),
                }
            } else {
                let bv = b[(t * units_per_task + u) % channels];
                match T::as_f32_mut(part) {
                    Some(pf) => pf.iter_mut().for_each(|v| *v += bv),
                    None => part.iter_mut().for_each(|v| *v = T::from_f32(v.to_f32() + bv)),
                }
            }
        }
    };
    if y.len() >= INPLACE_PAR_THRESHOLD {
        use rayon::prelude::*;
        y.par_chunks_mut(units_per_task * unit).enumerate().for_each(task);
    } else {
        y.chunks_mut(units_per_task * unit).enumerate().for_each(task);
    }
}

/// `[outer, channels, inner]` of a tensor whose dimension 1 holds the channels
/// (`[n, features]` for a linear layer, `[n, c, h, w]` for a convolution).
fn channel_layout(op: &'static str, t: &Tensor) -> Result<(usize, usize, usize)> {
    match t.shape() {
        [outer, channels, rest @ ..] => Ok((*outer, *channels, rest.iter().product())),
        shape => Err(TensorError::BadShape {
            op,
            shape: shape.to_vec(),
            reason: "needs at least 2 dimensions: [batch, channels, …]".into(),
        }),
    }
}

fn check_bias(op: &'static str, t: &Tensor, bias: &Tensor) -> Result<(usize, usize, usize)> {
    check_pair(op, t, bias)?;
    let layout = channel_layout(op, t)?;
    if bias.shape() != [layout.1] {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: t.shape().to_vec(),
            rhs: bias.shape().to_vec(),
            reason: format!("the bias must be [{}], one value per channel (dimension 1)", layout.1),
        });
    }
    Ok(layout)
}

/// Ops for training: bias broadcasts, in-place updates of gradients and
/// parameters, the mixed-precision unscale, and argmax for accuracy.
impl Tensor {
    /// `x + bias` broadcast over dimension 1: `y[o, c, …] = x[o, c, …] + bias[c]`
    /// for `x` of shape `[n, channels, …]` and `bias` of shape `[channels]`.
    pub fn add_bias(&self, bias: &Tensor) -> Result<Tensor> {
        const OP: &str = "add_bias";
        let (outer, channels, inner) = check_bias(OP, self, bias)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::add_bias(gpu, OP, self, bias, (channels, inner));
        }
        with_float!(self.dtype(), OP, |T| {
            let (x, b) = (self.host_slice::<T>(OP)?, bias.host_slice::<T>(OP)?);
            let start = now_ns();
            let out = output::<T>(self.shape(), self.device(), |y| k::add_bias(x, b, outer, channels, inner, y))?;
            let dtype = self.dtype().float().expect("float");
            let call = KernelCall::Elementwise { op: ElementwiseOp::AddBias, len: self.numel(), channels, dtype };
            emit_kernel(self.device(), OP, "cpu", start, call);
            Ok(out)
        })
    }

    /// [`add_bias`](Self::add_bias) in place (needs the only reference to `self`).
    pub fn add_bias_(&mut self, bias: &Tensor) -> Result<()> {
        const OP: &str = "add_bias_";
        let (_, channels, inner) = check_bias(OP, self, bias)?;
        if let Some(gpu) = self.device().cuda().cloned() {
            self.check_inplace(OP)?;
            return gpu_ops::add_bias_inplace(&gpu, OP, self, bias, (channels, inner));
        }
        let (len, device) = (self.numel(), self.device().clone());
        let dtype = self.dtype();
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let b = bias.host_slice::<T>(OP)?;
            add_bias_inplace(self.unique_slice_mut::<T>(OP)?, b, channels, inner);
            let call = KernelCall::Elementwise {
                op: ElementwiseOp::AddBias,
                len,
                channels,
                dtype: dtype.float().expect("float"),
            };
            emit_kernel(&device, "add_bias", "cpu_inplace", start, call);
            Ok(())
        })
    }

    /// The gradient of [`add_bias`](Self::add_bias) for the bias: the sum of `self`
    /// (the output gradient, `[n, channels, …]`) over every dimension but 1, as
    /// `[channels]`. Accumulated in f64, stored in `self`'s dtype.
    pub fn bias_grad(&self) -> Result<Tensor> {
        const OP: &str = "bias_grad";
        let (outer, channels, inner) = channel_layout(OP, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::bias_grad(gpu, OP, self, (outer, channels, inner));
        }
        let dtype = self.dtype();
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let gy = self.host_slice::<T>(OP)?;
            let out = output::<T>(&[channels], self.device(), |gb| k::bias_grad(gy, outer, channels, inner, gb))?;
            let call = KernelCall::BiasGrad { outer, channels, inner, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), OP, "cpu", start, call);
            Ok(out)
        })
    }

    /// `self += other` in place (same shape, device and dtype; needs the only
    /// reference to `self`). How gradients accumulate into an existing `.grad`.
    pub fn add_(&mut self, other: &Tensor) -> Result<()> {
        const OP: &str = "add_";
        check_pair(OP, self, other)?;
        same_shape(OP, self, other)?;
        if let Some(gpu) = self.device().cuda().cloned() {
            self.check_inplace(OP)?;
            return gpu_ops::add_inplace(&gpu, OP, self, other);
        }
        let (len, device, dtype) = (self.numel(), self.device().clone(), self.dtype());
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let x = other.host_slice::<T>(OP)?;
            zip_inplace(self.unique_slice_mut::<T>(OP)?, x, |a, b| a + b);
            let call = KernelCall::Elementwise {
                op: ElementwiseOp::Add,
                len,
                channels: 0,
                dtype: dtype.float().expect("float"),
            };
            emit_kernel(&device, "add", "cpu_inplace", start, call);
            Ok(())
        })
    }

    /// `self *= alpha` in place (needs the only reference).
    pub fn scale_(&mut self, alpha: f32) -> Result<()> {
        const OP: &str = "scale_";
        if let Some(gpu) = self.device().cuda().cloned() {
            self.check_inplace(OP)?;
            return gpu_ops::scale_inplace(&gpu, OP, self, alpha);
        }
        let (len, device, dtype) = (self.numel(), self.device().clone(), self.dtype());
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            map_inplace(self.unique_slice_mut::<T>(OP)?, |v| alpha * v);
            let call = KernelCall::Elementwise {
                op: ElementwiseOp::Scale,
                len,
                channels: 0,
                dtype: dtype.float().expect("float"),
            };
            emit_kernel(&device, "scale", "cpu_inplace", start, call);
            Ok(())
        })
    }

    /// Sets every element to `value` in place (needs the only reference):
    /// `tensor.fill_(value)`, and `zero_grad(set_to_none=False)`'s zeroing.
    pub fn fill_(&mut self, value: f64) -> Result<()> {
        const OP: &str = "fill_";
        if let Some(gpu) = self.device().cuda().cloned() {
            self.check_inplace(OP)?;
            return gpu_ops::fill(&gpu, OP, self, value);
        }
        let (len, device, dtype) = (self.numel(), self.device().clone(), self.dtype());
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let v = <T as Element>::from_f64(value);
            let y = self.unique_slice_mut::<T>(OP)?;
            if y.len() >= INPLACE_PAR_THRESHOLD {
                use rayon::prelude::*;
                y.par_chunks_mut(INPLACE_CHUNK).for_each(|c| c.fill(v));
            } else {
                y.fill(v);
            }
            let call = KernelCall::Elementwise {
                op: ElementwiseOp::Fill,
                len,
                channels: 0,
                dtype: dtype.float().expect("float"),
            };
            emit_kernel(&device, "fill", "cpu_inplace", start, call);
            Ok(())
        })
    }

    /// PyTorch's `_amp_foreach_non_finite_check_and_unscale_` for one tensor:
    /// multiplies every element by `inv_scale` in place and returns whether any
    /// element was infinite or NaN before the multiplication (needs the only
    /// reference). What `GradScaler.unscale_` runs on each gradient.
    pub fn unscale_and_check_(&mut self, inv_scale: f32) -> Result<bool> {
        const OP: &str = "non_finite_check_and_unscale";
        if let Some(gpu) = self.device().cuda().cloned() {
            self.check_inplace(OP)?;
            return gpu_ops::unscale(&gpu, OP, self, inv_scale);
        }
        let (len, device, dtype) = (self.numel(), self.device().clone(), self.dtype());
        with_float!(dtype, OP, |T| {
            let start = now_ns();
            let y = self.unique_slice_mut::<T>(OP)?;
            let chunk = |c: &mut [T]| -> bool {
                let mut found = false;
                match T::as_f32_mut(c) {
                    Some(cf) => cf.iter_mut().for_each(|v| {
                        found |= !v.is_finite();
                        *v *= inv_scale;
                    }),
                    None => c.iter_mut().for_each(|v| {
                        let f = v.to_f32();
                        found |= !f.is_finite();
                        *v = T::from_f32(f * inv_scale);
                    }),
                }
                found
            };
            let found = if y.len() >= INPLACE_PAR_THRESHOLD {
                use rayon::prelude::*;
                y.par_chunks_mut(INPLACE_CHUNK).map(chunk).reduce(|| false, |a, b| a || b)
            } else {
                chunk(y)
            };
            let call = KernelCall::Elementwise {
                op: ElementwiseOp::Scale,
                len,
                channels: 0,
                dtype: dtype.float().expect("float"),
            };
            emit_kernel(&device, OP, "cpu_inplace", start, call);
            Ok(found)
        })
    }
}
