//! 2-d convolution (forward, backward-data, backward-weight) with the
//! autotuner's algorithm.

use std::sync::Arc;

use super::{Conv2dOptions, KernelTiming, check_pair, emit_kernel, workspace};
use crate::autotune;
use crate::cpu_kernels::{self as k, Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, KernelCall};
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

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
/// (w, gy) backward-data, (x, gy) backward-weight.
/// On a GPU, `timed` waits for the pass and reports its device time; untimed
/// passes are only queued (0 ns).
fn conv_pass(
    pass: ConvPass,
    shape: Conv2dShape,
    a: &Tensor,
    b: &Tensor,
    timed: bool,
) -> Result<(Tensor, KernelTiming)> {
    if let Some(backend) = a.device().cuda() {
        return crate::cuda::conv::conv_pass(backend, pass, shape, a, b, timed);
    }
    let op = pass.kernel_name();
    let dtype = a.dtype().float().ok_or(TensorError::UnsupportedDType {
        op,
        dtype: a.dtype(),
        reason: "conv2d needs a float dtype",
    })?;
    let out_dims = match pass {
        ConvPass::Forward => shape.y_dims(),
        ConvPass::BackwardData => shape.x_dims(),
        ConvPass::BackwardWeight => shape.w_dims(),
    };
    let device = a.device().clone();
    let problem = ConvProblem { pass, shape };
    with_float!(a.dtype(), op, |T| {
        let (xa, xb) = (a.host_slice::<T>(op)?, b.host_slice::<T>(op)?);
        let run = |algo: ConvAlgo, out: &mut [T]| -> Result<u64> {
            let mut ws = workspace(&device, algo.workspace_len(&problem, dtype))?;
            let w = ws.slice_mut::<f32>();
            let start = now_ns();
            match pass {
                ConvPass::Forward => k::conv2d_forward(algo, shape, xa, xb, out, w)?,
                ConvPass::BackwardData => k::conv2d_backward_data(algo, shape, xa, xb, out, w)?,
                ConvPass::BackwardWeight => k::conv2d_backward_weight(algo, shape, xa, xb, out, w)?,
            }
            let took = now_ns().saturating_sub(start);
            emit_kernel(&device, op, algo.name(), start, KernelCall::Conv2d { pass, shape, dtype });
            Ok(took)
        };
        let algo = autotune::global().choose(&device, &problem, dtype, |algo| {
            let mut scratch = Tensor::zeros(&out_dims, a.dtype(), &device)?;
            let s = Arc::get_mut(&mut scratch.storage).expect("a new tensor is not shared");
            run(algo, s.slice_mut::<T>())
        })?;
        let mut took = 0;
        let out = Tensor::build(&out_dims, a.dtype(), &device, |s| {
            took = run(algo, s.slice_mut::<T>())?;
            Ok(())
        })?;
        Ok((out, KernelTiming { algorithm: algo.name(), duration_ns: took }))
    })
}
