//! Elementwise ops: binary and unary maps, the bias broadcast and its
//! gradient, and the in-place updates (`add_`, `scale_`, `fill_`, the
//! mixed-precision unscale).

use super::{check_pair, same_shape};
use crate::cpu_kernels::ElementwiseOp;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

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
        let out = self.device().backend().binary(name, op, self.storage(), other.storage())?;
        Ok(Tensor::from_storage(out, self.shape()))
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
        let out = self.device().backend().unary(name, op, self.storage(), alpha)?;
        Ok(Tensor::from_storage(out, self.shape()))
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
/// parameters and the mixed-precision unscale.
impl Tensor {
    /// `x + bias` broadcast over dimension 1: `y[o, c, …] = x[o, c, …] + bias[c]`
    /// for `x` of shape `[n, channels, …]` and `bias` of shape `[channels]`.
    pub fn add_bias(&self, bias: &Tensor) -> Result<Tensor> {
        const OP: &str = "add_bias";
        let layout = check_bias(OP, self, bias)?;
        let out = self.device().backend().add_bias(OP, self.storage(), bias.storage(), layout)?;
        Ok(Tensor::from_storage(out, self.shape()))
    }

    /// [`add_bias`](Self::add_bias) in place (needs the only reference to `self`).
    pub fn add_bias_(&mut self, bias: &Tensor) -> Result<()> {
        const OP: &str = "add_bias_";
        let layout = check_bias(OP, self, bias)?;
        let device = self.device().clone();
        device.backend().add_bias_inplace(OP, self.inplace_storage(OP)?, bias.storage(), layout)
    }

    /// The gradient of [`add_bias`](Self::add_bias) for the bias: the sum of `self`
    /// (the output gradient, `[n, channels, …]`) over every dimension but 1, as
    /// `[channels]`. Accumulated in f64, stored in `self`'s dtype.
    pub fn bias_grad(&self) -> Result<Tensor> {
        const OP: &str = "bias_grad";
        let layout = channel_layout(OP, self)?;
        let out = self.device().backend().bias_grad(OP, self.storage(), layout)?;
        Ok(Tensor::from_storage(out, &[layout.1]))
    }

    /// `self += other` in place (same shape, device and dtype; needs the only
    /// reference to `self`). How gradients accumulate into an existing `.grad`.
    pub fn add_(&mut self, other: &Tensor) -> Result<()> {
        const OP: &str = "add_";
        check_pair(OP, self, other)?;
        same_shape(OP, self, other)?;
        let device = self.device().clone();
        device.backend().add_inplace(OP, self.inplace_storage(OP)?, other.storage())
    }

    /// `self *= alpha` in place (needs the only reference).
    pub fn scale_(&mut self, alpha: f32) -> Result<()> {
        const OP: &str = "scale_";
        let device = self.device().clone();
        device.backend().scale_inplace(OP, self.inplace_storage(OP)?, alpha)
    }

    /// Sets every element to `value` in place (needs the only reference):
    /// `tensor.fill_(value)`, and `zero_grad(set_to_none=False)`'s zeroing.
    pub fn fill_(&mut self, value: f64) -> Result<()> {
        const OP: &str = "fill_";
        let device = self.device().clone();
        device.backend().fill(OP, self.inplace_storage(OP)?, value)
    }

    /// PyTorch's `_amp_foreach_non_finite_check_and_unscale_` for one tensor:
    /// multiplies every element by `inv_scale` in place and returns whether any
    /// element was infinite or NaN before the multiplication (needs the only
    /// reference). What `GradScaler.unscale_` runs on each gradient.
    pub fn unscale_and_check_(&mut self, inv_scale: f32) -> Result<bool> {
        const OP: &str = "non_finite_check_and_unscale";
        let device = self.device().clone();
        device.backend().unscale(OP, self.inplace_storage(OP)?, inv_scale)
    }
}
