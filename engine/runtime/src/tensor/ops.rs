//! Tensor ops over the CPU kernels: operand checks (the golden rule first),
//! outputs and workspaces from the device's allocator, the autotuner's choice
//! of algorithm, and one kernel event per kernel call.

use std::sync::Arc;

use half::{bf16, f16};

use super::{DType, Pod, Result, Storage, Tensor, TensorError, with_float};
use crate::autotune;
use crate::cpu_kernels::{
    self as k, Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, Element, ElementwiseOp, KernelCall, MatmulAlgo,
    MatmulShape, MaxPool2dShape,
};
use crate::cuda::ops as gpu_ops;
use crate::device::Device;
use crate::hooks::{Event, KernelEvent, Tag, now_ns};

/// Where a kernel's time went, for callers that want it without subscribing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelTiming {
    pub algorithm: &'static str,
    pub duration_ns: u64,
}

/// Stride and padding of a convolution (dilation 1, one group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conv2dOptions {
    pub stride: (usize, usize),
    pub padding: (usize, usize),
}

impl Conv2dOptions {
    pub fn new(stride: usize, padding: usize) -> Conv2dOptions {
        Conv2dOptions { stride: (stride, stride), padding: (padding, padding) }
    }
}

fn same_device(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.device() == b.device() {
        Ok(())
    } else {
        Err(TensorError::DeviceMismatch { op, lhs: a.device().id(), rhs: b.device().id() })
    }
}

fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() == b.dtype() { Ok(()) } else { Err(TensorError::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() }) }
}

fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() == b.shape() {
        Ok(())
    } else {
        Err(TensorError::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
            reason: "elementwise ops need equal shapes".into(),
        })
    }
}

/// The golden rule and equal dtypes: the checks every two-operand op makes
/// first, on any device.
fn check_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    same_device(op, a, b)?;
    same_dtype(op, a, b)
}

fn need_f32(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() == DType::F32 {
        Ok(())
    } else {
        Err(TensorError::UnsupportedDType {
            op,
            dtype: t.dtype(),
            reason: "this op runs in float32 (autocast keeps it there)",
        })
    }
}

/// Sends a kernel event to the device's hub when anybody listens.
fn emit_kernel(device: &Device, name: &'static str, algorithm: &'static str, start_ns: u64, call: KernelCall) {
    let hooks = device.allocator().hooks();
    if hooks.is_active() {
        let duration_ns = now_ns().saturating_sub(start_ns);
        let cost = call.cost();
        hooks.emit(&Event::Kernel(KernelEvent {
            name,
            algorithm,
            device: device.id().event_index(),
            stream: 0,
            start_ns,
            duration_ns,
            launch_ns: duration_ns,
            flops: cost.flops,
            bytes: cost.bytes,
        }));
    }
}

/// A scratch buffer of f32 from the device's allocator, tagged `workspace`.
fn workspace(device: &Device, len: usize) -> Result<Storage> {
    Storage::new(device, len, DType::F32, Some(Tag::Workspace))
}

/// A new output tensor whose storage `fill` writes.
fn output<T: Pod>(
    shape: &[usize],
    device: &Device,
    fill: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Tensor> {
    Tensor::build(shape, T::DTYPE, device, |s| Ok(fill(s.slice_mut::<T>())?))
}

/// Runs an elementwise kernel producing one output shaped like `like`.
fn unary<T: Pod + Element>(
    op: ElementwiseOp,
    like: &Tensor,
    f: impl FnOnce(&mut [T]) -> std::result::Result<(), k::KernelError>,
) -> Result<Tensor> {
    let start = now_ns();
    let out = output::<T>(like.shape(), like.device(), f)?;
    let dtype = like.dtype().float().expect("float op");
    emit_kernel(
        like.device(),
        op.name(),
        "cpu",
        start,
        KernelCall::Elementwise { op, len: like.numel(), channels: 0, dtype },
    );
    Ok(out)
}

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

    /// Matrix product `[m, k] · [k, n]`, or batched `[b, m, k] · [b, k, n]`.
    /// The algorithm comes from the autotuner.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Ok(self.matmul_impl(other, false, false, false)?.0)
    }

    /// [`matmul`](Self::matmul) with the algorithm chosen and its time.
    pub fn matmul_timed(&self, other: &Tensor) -> Result<(Tensor, KernelTiming)> {
        self.matmul_impl(other, false, false, true)
    }

    /// `op(a) · op(b)` where `op` transposes the last two dimensions of an operand
    /// whose flag is set: `a` is stored `[k, m]` (or `[b, k, m]`) when `trans_a`, `b`
    /// is stored `[n, k]` (or `[b, n, k]`) when `trans_b`. No copy is made: the
    /// kernel reads the operands with swapped strides. A linear layer's forward is
    /// `x · wᵀ` (`trans_b`), its weight gradient `gyᵀ · x` (`trans_a`).
    pub fn matmul_transposed(&self, other: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
        Ok(self.matmul_impl(other, trans_a, trans_b, false)?.0)
    }

    /// [`matmul_transposed`](Self::matmul_transposed) with the algorithm chosen and its time.
    pub fn matmul_transposed_timed(
        &self,
        other: &Tensor,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<(Tensor, KernelTiming)> {
        self.matmul_impl(other, trans_a, trans_b, true)
    }

    /// The matrix products. On a GPU, `timed` waits for the product and reports
    /// its device time; untimed products are only queued (0 ns). Host products
    /// always run to completion and report their time.
    fn matmul_impl(&self, other: &Tensor, trans_a: bool, trans_b: bool, timed: bool) -> Result<(Tensor, KernelTiming)> {
        const OP: &str = "matmul";
        check_pair(OP, self, other)?;
        let (a, b) = (self.shape(), other.shape());
        let bad = |reason: &str| TensorError::ShapeMismatch {
            op: OP,
            lhs: a.to_vec(),
            rhs: b.to_vec(),
            reason: reason.to_owned(),
        };
        // (rows, cols) of op(a) and op(b) from the last two stored dimensions.
        let mk = |d: &[usize], t: bool| if t { (d[1], d[0]) } else { (d[0], d[1]) };
        let (shape, out_shape) = match (a.len(), b.len()) {
            (2, 2) => {
                let ((m, k), (kb, n)) = (mk(a, trans_a), mk(b, trans_b));
                if k != kb {
                    return Err(bad("inner dimensions differ"));
                }
                (MatmulShape::new(m, n, k), vec![m, n])
            }
            (3, 3) => {
                let ((m, k), (kb, n)) = (mk(&a[1..], trans_a), mk(&b[1..], trans_b));
                if a[0] != b[0] || k != kb {
                    return Err(bad("inner dimensions differ"));
                }
                (MatmulShape::batched(a[0], m, n, k), vec![a[0], m, n])
            }
            _ => return Err(bad("expected two 2-d or two 3-d tensors")),
        };
        let shape = shape.transposed(trans_a, trans_b);
        let dtype = self.dtype().float().ok_or(TensorError::UnsupportedDType {
            op: OP,
            dtype: self.dtype(),
            reason: "matmul needs a float dtype",
        })?;
        if let Some(backend) = self.device().cuda() {
            return crate::cuda::blas::matmul(backend, self, other, shape, &out_shape, timed);
        }
        let device = self.device().clone();
        with_float!(self.dtype(), OP, |T| {
            let (a, b) = (self.host_slice::<T>(OP)?, other.host_slice::<T>(OP)?);
            let run = |algo: MatmulAlgo, c: &mut [T]| -> Result<u64> {
                let ws_len = algo.workspace_len(&shape, dtype);
                let mut ws = workspace(&device, ws_len)?;
                let start = now_ns();
                k::matmul(algo, shape, a, b, c, ws.slice_mut::<f32>())?;
                let took = now_ns().saturating_sub(start);
                emit_kernel(&device, OP, algo.name(), start, KernelCall::Matmul { shape, dtype });
                Ok(took)
            };
            let algo = autotune::global().choose(&device, &shape, dtype, |algo| {
                let mut scratch = Tensor::zeros(&out_shape, self.dtype(), &device)?;
                let s = Arc::get_mut(&mut scratch.storage).expect("a new tensor is not shared");
                run(algo, s.slice_mut::<T>())
            })?;
            let mut took = 0;
            let out = Tensor::build(&out_shape, self.dtype(), &device, |s| {
                took = run(algo, s.slice_mut::<T>())?;
                Ok(())
            })?;
            Ok((out, KernelTiming { algorithm: algo.name(), duration_ns: took }))
        })
    }

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
        let (rows, cols) = rows_cols(op, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::softmax(gpu, op, self, (rows, cols), log);
        }
        let dtype = self.dtype();
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let x = self.host_slice::<T>(op)?;
            let out = output::<T>(self.shape(), self.device(), |y| {
                if log { k::log_softmax(x, rows, cols, y) } else { k::softmax(x, rows, cols, y) }
            })?;
            let call = KernelCall::Softmax { log, backward: false, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), op, "cpu", start, call);
            Ok(out)
        })
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
        let (rows, cols) = rows_cols(op, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::softmax_backward(gpu, op, self, gy, (rows, cols), log);
        }
        let dtype = self.dtype();
        with_float!(dtype, op, |T| {
            let start = now_ns();
            let (y, g) = (self.host_slice::<T>(op)?, gy.host_slice::<T>(op)?);
            let out = output::<T>(self.shape(), self.device(), |gx| {
                if log {
                    k::log_softmax_backward(y, g, rows, cols, gx)
                } else {
                    k::softmax_backward(y, g, rows, cols, gx)
                }
            })?;
            let call = KernelCall::Softmax { log, backward: true, rows, cols, dtype: dtype.float().expect("float") };
            emit_kernel(self.device(), op, "cpu", start, call);
            Ok(out)
        })
    }

    /// Mean cross-entropy of f32 logits `[rows, classes]` against i64 labels
    /// `[rows]`, as a 0-d f32 tensor.
    pub fn cross_entropy(&self, labels: &Tensor) -> Result<Tensor> {
        const OP: &str = "cross_entropy";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let (rows, classes) = ce_shape(OP, self, labels)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::cross_entropy(gpu, OP, self, labels, (rows, classes));
        }
        let start = now_ns();
        let loss = k::cross_entropy(self.host_slice::<f32>(OP)?, labels.host_slice::<i64>(OP)?, rows, classes)?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::CrossEntropy { backward: false, rows, classes });
        Tensor::from_slice(&[loss], &[], self.device())
    }

    /// The gradient of the mean cross-entropy with respect to the logits, scaled by
    /// the loss gradient `grad_out`.
    pub fn cross_entropy_backward(&self, labels: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "cross_entropy_backward";
        same_device(OP, self, labels)?;
        need_f32(OP, self)?;
        let (rows, classes) = ce_shape(OP, self, labels)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::cross_entropy_backward(gpu, OP, self, labels, (rows, classes), grad_out);
        }
        let start = now_ns();
        let (x, l) = (self.host_slice::<f32>(OP)?, labels.host_slice::<i64>(OP)?);
        let out = output::<f32>(self.shape(), self.device(), |g| {
            k::cross_entropy_backward(x, l, rows, classes, grad_out, g)
        })?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::CrossEntropy { backward: true, rows, classes });
        Ok(out)
    }

    /// Mean squared error against `target`, as a 0-d f32 tensor.
    pub fn mse(&self, target: &Tensor) -> Result<Tensor> {
        const OP: &str = "mse";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::mse(gpu, OP, self, target);
        }
        let start = now_ns();
        let loss = k::mse(self.host_slice::<f32>(OP)?, target.host_slice::<f32>(OP)?)?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::Mse { backward: false, len: self.numel() });
        Tensor::from_slice(&[loss], &[], self.device())
    }

    /// The gradient of the MSE with respect to `self`, scaled by `grad_out`.
    pub fn mse_backward(&self, target: &Tensor, grad_out: f32) -> Result<Tensor> {
        const OP: &str = "mse_backward";
        check_pair(OP, self, target)?;
        same_shape(OP, self, target)?;
        need_f32(OP, self)?;
        if let Some(gpu) = self.device().cuda() {
            return gpu_ops::mse_backward(gpu, OP, self, target, grad_out);
        }
        let start = now_ns();
        let (p, t) = (self.host_slice::<f32>(OP)?, target.host_slice::<f32>(OP)?);
        let out = output::<f32>(self.shape(), self.device(), |g| k::mse_backward(p, t, grad_out, g))?;
        emit_kernel(self.device(), OP, "cpu", start, KernelCall::Mse { backward: true, len: self.numel() });
        Ok(out)
    }

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

/// (rows, last dim) of a tensor of at least one dimension.
fn rows_cols(op: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape().split_last() {
        Some((&cols, rest)) if cols > 0 => Ok((rest.iter().product(), cols)),
        _ => Err(TensorError::BadShape {
            op,
            shape: t.shape().to_vec(),
            reason: "needs at least one non-empty dimension".into(),
        }),
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

/// Converts to `dtype` (a copy; the same tensor when the dtype already matches).
pub(super) fn cast(t: &Tensor, dtype: DType) -> Result<Tensor> {
    const OP: &str = "to_dtype";
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    if let Some(gpu) = t.device().cuda() {
        return gpu_ops::cast(gpu, OP, t, dtype);
    }
    let (Some(from), Some(to)) = (t.dtype().float(), dtype.float()) else {
        return cast_int(t, dtype);
    };
    let start = now_ns();
    let out = with_float!(t.dtype(), OP, |S| {
        let src = t.host_slice::<S>(OP)?;
        match dtype {
            DType::F32 => output::<f32>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::F16 => output::<f16>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::BF16 => output::<bf16>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::I64 => unreachable!("handled by cast_int"),
        }
    });
    emit_kernel(t.device(), "cast", "cpu", start, KernelCall::Cast { len: t.numel(), from, to });
    Ok(out)
}

/// Casts to or from i64 (through f64, truncating toward zero like PyTorch).
fn cast_int(t: &Tensor, dtype: DType) -> Result<Tensor> {
    let values = t.to_f64_vec()?;
    match dtype {
        DType::I64 => Tensor::from_slice(&values.iter().map(|&v| v as i64).collect::<Vec<_>>(), t.shape(), t.device()),
        DType::F32 => Tensor::from_slice(&values.iter().map(|&v| v as f32).collect::<Vec<_>>(), t.shape(), t.device()),
        // One rounding (`Element::from_f64`), as the CUDA kernels round.
        DType::F16 => Tensor::from_slice(
            &values.iter().map(|&v| <f16 as Element>::from_f64(v)).collect::<Vec<_>>(),
            t.shape(),
            t.device(),
        ),
        DType::BF16 => Tensor::from_slice(
            &values.iter().map(|&v| <bf16 as Element>::from_f64(v)).collect::<Vec<_>>(),
            t.shape(),
            t.device(),
        ),
    }
}

/// `t`'s dtype is `dtype` (the error reading it as `dtype` gives on the host).
fn expect_dtype(op: &'static str, t: &Tensor, dtype: DType) -> Result<()> {
    if t.dtype() == dtype { Ok(()) } else { Err(TensorError::DTypeMismatch { op, lhs: t.dtype(), rhs: dtype }) }
}

/// In-place optimizer updates on f32 parameters.
impl Tensor {
    /// The checks of an in-place update on a GPU: `self` holds the only
    /// reference to its storage (as `unique_slice_mut` demands on the host).
    fn check_unique(&mut self, op: &'static str) -> Result<()> {
        if self.is_unique() {
            Ok(())
        } else {
            Err(TensorError::BadShape {
                op,
                shape: self.shape().to_vec(),
                reason: "an in-place update needs the only reference to the tensor".into(),
            })
        }
    }

    /// The checks of an in-place float op on a GPU, in the host's order: a float
    /// dtype, then the only reference.
    fn check_inplace(&mut self, op: &'static str) -> Result<()> {
        if self.dtype().float().is_none() {
            return Err(TensorError::UnsupportedDType {
                op,
                dtype: self.dtype(),
                reason: "this op computes in floating point",
            });
        }
        self.check_unique(op)
    }

    /// [`check_unique`](Self::check_unique) for f32 (`unique_f32_mut`'s checks).
    fn check_unique_f32(&mut self, op: &'static str) -> Result<()> {
        need_f32(op, self)?;
        self.check_unique(op)
    }

    fn unique_f32_mut(&mut self, op: &'static str) -> Result<&mut [f32]> {
        need_f32(op, self)?;
        self.check_host(op)?;
        let shape = self.shape().to_vec();
        match Arc::get_mut(&mut self.storage) {
            Some(s) => Ok(s.slice_mut::<f32>()),
            None => Err(TensorError::BadShape {
                op,
                shape,
                reason: "an in-place update needs the only reference to the tensor".into(),
            }),
        }
    }

    /// One SGD step on `self` (the parameter) with gradient `grad` and momentum
    /// buffer `momentum` (PyTorch's `torch.optim.SGD` semantics); `step` counts from 1.
    pub fn sgd_step_(&mut self, grad: &Tensor, momentum: &mut Tensor, cfg: &k::Sgd, step: u64) -> Result<()> {
        const OP: &str = "sgd_step";
        for other in [grad, &*momentum] {
            same_device(OP, self, other)?;
            same_shape(OP, self, other)?;
        }
        if let Some(gpu) = self.device().cuda().cloned() {
            expect_dtype(OP, grad, DType::F32)?;
            momentum.check_unique_f32(OP)?;
            self.check_unique_f32(OP)?;
            // The CPU kernel's checks of `cfg` and `step`, on no elements.
            k::sgd_step(cfg, step, &mut [], &[], &mut [])?;
            return gpu_ops::sgd_step(&gpu, OP, self, grad, Some(&*momentum), cfg, step);
        }
        let start = now_ns();
        let g = grad.host_slice::<f32>(OP)?;
        let m = momentum.unique_f32_mut(OP)?;
        let p = self.unique_f32_mut(OP)?;
        k::sgd_step(cfg, step, p, g, m)?;
        let call = KernelCall::Sgd {
            len: self.numel(),
            momentum: cfg.momentum != 0.0,
            weight_decay: cfg.weight_decay != 0.0,
            nesterov: cfg.nesterov,
        };
        emit_kernel(self.device(), OP, "cpu", start, call);
        Ok(())
    }

    /// One Adam step (PyTorch's `torch.optim.Adam`, bias-corrected) on `self` with
    /// gradient `grad` and moment buffers `exp_avg`, `exp_avg_sq`; `step` counts from 1.
    pub fn adam_step_(
        &mut self,
        grad: &Tensor,
        exp_avg: &mut Tensor,
        exp_avg_sq: &mut Tensor,
        cfg: &k::Adam,
        step: u64,
    ) -> Result<()> {
        const OP: &str = "adam_step";
        for other in [grad, &*exp_avg, &*exp_avg_sq] {
            same_device(OP, self, other)?;
            same_shape(OP, self, other)?;
        }
        if let Some(gpu) = self.device().cuda().cloned() {
            expect_dtype(OP, grad, DType::F32)?;
            exp_avg.check_unique_f32(OP)?;
            exp_avg_sq.check_unique_f32(OP)?;
            self.check_unique_f32(OP)?;
            // The CPU kernel's checks of `cfg` and `step`, on no elements.
            k::adam_step(cfg, step, &mut [], &[], &mut [], &mut [])?;
            return gpu_ops::adam_step(&gpu, OP, [&*self, grad, &*exp_avg, &*exp_avg_sq], cfg, step);
        }
        let start = now_ns();
        let g = grad.host_slice::<f32>(OP)?;
        let m = exp_avg.unique_f32_mut(OP)?;
        let v = exp_avg_sq.unique_f32_mut(OP)?;
        let p = self.unique_f32_mut(OP)?;
        k::adam_step(cfg, step, p, g, m, v)?;
        let call = KernelCall::Adam { len: self.numel(), weight_decay: cfg.weight_decay != 0.0 };
        emit_kernel(self.device(), OP, "cpu", start, call);
        Ok(())
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
    /// The elements for an in-place update; needs the only reference to the storage.
    fn unique_slice_mut<T: Pod>(&mut self, op: &'static str) -> Result<&mut [T]> {
        self.check_host(op)?;
        if T::DTYPE != self.dtype() {
            return Err(TensorError::DTypeMismatch { op, lhs: self.dtype(), rhs: T::DTYPE });
        }
        let shape = self.shape().to_vec();
        match Arc::get_mut(&mut self.storage) {
            Some(s) => Ok(s.slice_mut::<T>()),
            None => Err(TensorError::BadShape {
                op,
                shape,
                reason: "an in-place update needs the only reference to the tensor".into(),
            }),
        }
    }

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

    /// One SGD step like [`sgd_step_`](Self::sgd_step_), but with the momentum
    /// buffer optional: plain SGD (`cfg.momentum == 0`) keeps no state, as in PyTorch.
    pub fn sgd_update_(&mut self, grad: &Tensor, momentum: Option<&mut Tensor>, cfg: &k::Sgd, step: u64) -> Result<()> {
        const OP: &str = "sgd_step";
        if let Some(m) = momentum {
            return self.sgd_step_(grad, m, cfg, step);
        }
        same_device(OP, self, grad)?;
        same_shape(OP, self, grad)?;
        if cfg.momentum != 0.0 {
            return Err(TensorError::BadShape {
                op: OP,
                shape: self.shape().to_vec(),
                reason: "SGD with momentum needs a momentum buffer".into(),
            });
        }
        if let Some(gpu) = self.device().cuda().cloned() {
            expect_dtype(OP, grad, DType::F32)?;
            self.check_unique_f32(OP)?;
            k::sgd_step(cfg, step, &mut [], &[], &mut [])?;
            return gpu_ops::sgd_step(&gpu, OP, self, grad, None, cfg, step);
        }
        let start = now_ns();
        let g = grad.host_slice::<f32>(OP)?;
        let p = self.unique_f32_mut(OP)?;
        k::sgd_step(cfg, step, p, g, &mut [])?;
        let call = KernelCall::Sgd {
            len: self.numel(),
            momentum: false,
            weight_decay: cfg.weight_decay != 0.0,
            nesterov: cfg.nesterov,
        };
        emit_kernel(self.device(), OP, "cpu", start, call);
        Ok(())
    }
}
