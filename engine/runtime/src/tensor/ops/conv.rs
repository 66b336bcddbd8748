//! 2-d convolution (forward, backward-data, backward-weight) with the
//! autotuner's algorithm.

use super::{Conv2dOptions, check_pair};
use crate::backend::KernelTiming;
use crate::cpu_kernels::{Conv2dShape, ConvPass};
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

impl Tensor {
    /// 2-d convolution, NCHW input `[n, c, h, w]` and weight `[k, c, r, s]`.
    /// The algorithm comes from the autotuner.
    pub fn conv2d(&self, weight: &Tensor, opts: Conv2dOptions) -> Result<Tensor> {
        Ok(self.conv2d_impl(weight, opts, false)?.0)
    }

    /// [`conv2d`](Self::conv2d) with the algorithm chosen and its time (on a GPU,
    /// waits for the convolution and reports its device time).
    pub fn conv2d_timed(&self, weight: &Tensor, opts: Conv2dOptions) -> Result<(Tensor, KernelTiming)> {
        self.conv2d_impl(weight, opts, true)
    }

    fn conv2d_impl(&self, weight: &Tensor, opts: Conv2dOptions, timed: bool) -> Result<(Tensor, KernelTiming)> {
        let shape = conv_shape("conv2d", self.shape(), weight.shape(), opts)?;
        check_pair("conv2d", self, weight)?;
        conv_pass(ConvPass::Forward, shape, self, weight, timed)
    }

    /// The gradient of `conv2d` with respect to its input, from the weight and `gy`.
    /// `input_shape` is the forward input's shape.
    pub fn conv2d_backward_data(
        weight: &Tensor,
        gy: &Tensor,
        input_shape: &[usize],
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        let shape = conv_shape("conv2d_backward_data", input_shape, weight.shape(), opts)?;
        check_pair("conv2d_backward_data", weight, gy)?;
        expect_shape("conv2d_backward_data", gy, &shape.y_dims())?;
        Ok(conv_pass(ConvPass::BackwardData, shape, weight, gy, false)?.0)
    }

    /// The gradient of `conv2d` with respect to its weight, from the input and `gy`.
    pub fn conv2d_backward_weight(
        input: &Tensor,
        gy: &Tensor,
        weight_shape: &[usize],
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        let shape = conv_shape("conv2d_backward_weight", input.shape(), weight_shape, opts)?;
        check_pair("conv2d_backward_weight", input, gy)?;
        expect_shape("conv2d_backward_weight", gy, &shape.y_dims())?;
        Ok(conv_pass(ConvPass::BackwardWeight, shape, input, gy, false)?.0)
    }
}

/// Conv shape from NCHW input and KCRS weight dims.
fn conv_shape(op: &'static str, x: &[usize], w: &[usize], opts: Conv2dOptions) -> Result<Conv2dShape> {
    if x.len() != 4 || w.len() != 4 || x[1] != w[1] {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: x.to_vec(),
            rhs: w.to_vec(),
            reason: "expected input [n, c, h, w] and weight [k, c, r, s] with the same c".into(),
        });
    }
    let mut s = Conv2dShape::new(x[0], x[1], x[2], x[3], w[0], w[2], w[3]);
    s.stride = opts.stride;
    s.pad = opts.padding;
    if opts.stride.0 == 0 || opts.stride.1 == 0 || x[2] + 2 * opts.padding.0 < w[2] || x[3] + 2 * opts.padding.1 < w[3]
    {
        return Err(TensorError::BadShape {
            op,
            shape: x.to_vec(),
            reason: "the kernel does not fit the padded input (or stride is 0)".into(),
        });
    }
    Ok(s)
}

fn expect_shape(op: &'static str, t: &Tensor, dims: &[usize]) -> Result<()> {
    if t.shape() == dims {
        Ok(())
    } else {
        Err(TensorError::ShapeMismatch {
            op,
            lhs: t.shape().to_vec(),
            rhs: dims.to_vec(),
            reason: "gradient shape differs from the output's".into(),
        })
    }
}

trait ConvDims {
    fn y_dims(&self) -> [usize; 4];
    fn x_dims(&self) -> [usize; 4];
    fn w_dims(&self) -> [usize; 4];
}

impl ConvDims for Conv2dShape {
    fn y_dims(&self) -> [usize; 4] {
        let oh = (self.h + 2 * self.pad.0 - self.r) / self.stride.0 + 1;
        let ow = (self.w + 2 * self.pad.1 - self.s) / self.stride.1 + 1;
        [self.n, self.k, oh, ow]
    }
    fn x_dims(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    fn w_dims(&self) -> [usize; 4] {
        [self.k, self.c, self.r, self.s]
    }
}

/// One conv pass with the autotuner's algorithm: `a`, `b` are (x, w) forward,
/// (w, gy) backward-data, (x, gy) backward-weight (see `Backend::conv2d` for `timed`).
fn conv_pass(
    pass: ConvPass,
    shape: Conv2dShape,
    a: &Tensor,
    b: &Tensor,
    timed: bool,
) -> Result<(Tensor, KernelTiming)> {
    let out_dims = match pass {
        ConvPass::Forward => shape.y_dims(),
        ConvPass::BackwardData => shape.x_dims(),
        ConvPass::BackwardWeight => shape.w_dims(),
    };
    let (out, timing) = a.device().backend().conv2d(pass, shape, a.storage(), b.storage(), timed)?;
    Ok((Tensor::from_storage(out, &out_dims), timing))
}
