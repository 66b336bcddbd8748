//! The CUDA side of the tensor ops other than matmul and convolution.
//!
//! `tensor::ops` checks every operand first — the golden rule, dtypes, shapes —
//! the same way for both backends, then calls the [`Backend`] method of the op,
//! which for a GPU is a function here over the operands' storage. It takes its
//! outputs from the device's caching allocator ([`Storage::new`], under the
//! calling thread's tag; scratch tagged `workspace`) and launches kernels of
//! `kernels.cu` on the default stream, where PyTorch runs its ops. Each op is
//! one [`CudaBackend::run_kernel`] call, so one kernel event with the device
//! time and the [`KernelCall`] cost of the CPU's event for the same op, however
//! many kernels it takes (a sum is a partial pass and a finishing pass).
//!
//! Two checks the CPU kernels make on values cannot be made without waiting
//! for the device, so the device reports them in the results instead: a class
//! label outside `0..classes` makes its row's loss and gradient NaN (PyTorch
//! raises a device-side assert), and a pooling index outside its window adds
//! nothing to the input gradient.

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use half::{bf16, f16};

use super::backend::CudaBackend;
use super::error::{CudaResult, DriverContext};
use super::kernels::{self, FloatKernel};
use crate::backend::{Backend, ChannelLayout, KernelTiming, Rows};
use crate::cpu_kernels::{
    self as k, Conv2dShape, ConvPass, Element, ElementwiseOp, FloatDType, KernelCall, MatmulShape, MaxPool2dShape,
};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::Tag;
use crate::storage::{Storage, current_tag};

/// The algorithm name of kernel events from this module.
const CUDA: &str = "cuda";
/// ... and of the in-place ops (the CPU's are `cpu_inplace`).
const CUDA_INPLACE: &str = "cuda_inplace";

/// Threads per block of the elementwise and reduction kernels.
const THREADS: u32 = 256;
/// Blocks of a partial-sum pass at most. Fixed, so a sum's reduction tree (and
/// so its bits) depends on the length only, never on the device.
const PARTIAL_BLOCKS: usize = 1024;
/// Blocks of a row kernel at most (each block loops over its rows).
const ROW_BLOCKS: usize = 1 << 16;

/// A kernel argument, passed by value.
#[derive(Debug, Clone, Copy)]
enum Arg {
    Ptr(u64),
    U64(u64),
    U32(u32),
    F32(f32),
    F64(f64),
}

fn ptr(s: &Storage) -> Arg {
    Arg::Ptr(s.addr())
}

fn count(n: usize) -> Arg {
    Arg::U64(n as u64)
}

/// One kernel launch.
#[derive(Debug, Clone)]
struct Launch {
    kernel: &'static str,
    cfg: LaunchConfig,
    args: Vec<Arg>,
}

impl Launch {
    fn new(kernel: &'static str, cfg: LaunchConfig, args: impl Into<Vec<Arg>>) -> Launch {
        Launch { kernel, cfg, args: args.into() }
    }
}

fn grid(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks.max(1) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// Grid-stride kernels over `n` elements: up to 8 blocks of 256 per
/// multiprocessor (a full one), fewer for short tensors.
fn elementwise(q: &impl Queue, n: usize) -> LaunchConfig {
    let cap = (q.multiprocessors().max(1) as usize) * 8;
    grid(n.div_ceil(THREADS as usize).clamp(1, cap), THREADS)
}

/// One block per row of `cols`: a power of two of threads from 32 to 512.
fn per_row(rows: usize, cols: usize) -> LaunchConfig {
    grid(rows.clamp(1, ROW_BLOCKS), cols.next_power_of_two().clamp(32, 512) as u32)
}

/// The partial pass of a sum over `n` elements.
fn partial(n: usize) -> LaunchConfig {
    grid(n.div_ceil(THREADS as usize).clamp(1, PARTIAL_BLOCKS), THREADS)
}

fn single_block() -> LaunchConfig {
    grid(1, THREADS)
}

/// Scratch of `len` doubles from the allocator, tagged `workspace` (stored as
/// i64, the tensors' 8-byte type).
fn scratch_f64(device: &Device, len: usize) -> Result<Storage> {
    Storage::new(device, len, DType::I64, Some(Tag::Workspace))
}

/// The float storage type of `t`, with the CPU's error for i64.
fn float_of(op: &'static str, t: &Storage) -> Result<FloatDType> {
    t.dtype.float().ok_or(TensorError::UnsupportedDType {
        op,
        dtype: t.dtype,
        reason: "this op computes in floating point",
    })
}

/// What an op queues: its kernels, in order, and the kernel event that
/// reports them.
#[derive(Debug)]
pub(crate) struct Plan {
    event: &'static str,
    algorithm: &'static str,
    /// `None`: not reported (casts to or from i64, as on the CPU).
    call: Option<KernelCall>,
    launches: Vec<Launch>,
}

/// Submits the plan of `launches` reported as `event` with `call`.
fn run(
    q: &impl Queue,
    op: &'static str,
    event: &'static str,
    algorithm: &'static str,
    call: Option<KernelCall>,
    launches: impl Into<Vec<Launch>>,
) -> Result<()> {
    q.submit(op, Plan { event, algorithm, call, launches: launches.into() })
}

/// Where plans run: a device's default stream ([`CudaBackend`]), or a
/// recorder in the tests.
pub(crate) trait Queue {
    /// Multiprocessors of the device (grid sizes of elementwise kernels).
    fn multiprocessors(&self) -> u32;
    /// Queues the plan's kernels as one kernel event; errors name `op`.
    fn submit(&self, op: &'static str, plan: Plan) -> Result<()>;
    /// The value of a one-element f32 tensor, once the queued work has run.
    fn read_f32(&self, t: &Storage) -> Result<f32>;
}

impl Queue for CudaBackend {
    fn multiprocessors(&self) -> u32 {
        self.info().multiprocessors
    }

    fn submit(&self, op: &'static str, plan: Plan) -> Result<()> {
        let err = |source| TensorError::Cuda { op, source };
        let functions =
            plan.launches.iter().map(|l| self.function(l.kernel)).collect::<CudaResult<Vec<_>>>().map_err(err)?;
        let launches = &plan.launches;
        match plan.call {
            Some(call) => self.run_kernel(plan.event, plan.algorithm, 0, call, |s| launch_all(s, &functions, launches)),
            None => self.bind().and_then(|()| launch_all(&self.stream(0), &functions, launches)),
        }
        .map_err(err)
    }

    fn read_f32(&self, t: &Storage) -> Result<f32> {
        let host = crate::transfer::copy_to_device(t, &Device::cpu())?;
        Ok(host.slice::<f32>().first().copied().unwrap_or(0.0))
    }
}

impl<Q: Queue + ?Sized> Queue for std::sync::Arc<Q> {
    fn multiprocessors(&self) -> u32 {
        (**self).multiprocessors()
    }
    fn submit(&self, op: &'static str, plan: Plan) -> Result<()> {
        (**self).submit(op, plan)
    }
    fn read_f32(&self, t: &Storage) -> Result<f32> {
        (**self).read_f32(t)
    }
}

fn launch_all(stream: &CudaStream, functions: &[CudaFunction], launches: &[Launch]) -> CudaResult<()> {
    for (f, l) in functions.iter().zip(launches) {
        let mut builder = stream.launch_builder(f);
        for a in &l.args {
            match a {
                Arg::Ptr(v) | Arg::U64(v) => builder.arg(v),
                Arg::U32(v) => builder.arg(v),
                Arg::F32(v) => builder.arg(v),
                Arg::F64(v) => builder.arg(v),
            };
        }
        // SAFETY: every plan passes its kernel's parameters of kernels.cu in
        // order and with their C types (pointers as u64; a test checks this
        // against the source); pointers are live allocations of the tensors
        // named, sized for the counts passed, and those tensors outlive the
        // queueing. The work runs on the stream the allocator frees their
        // blocks for, so a block is reused only by work queued after it.
        unsafe { builder.launch(l.cfg) }.during("launching a kernel")?;
    }
    Ok(())
}

/// `a op b` elementwise: add, mul, relu_backward (`a` = x, `b` = gy) or
/// gelu_backward.
pub(crate) fn binary(
    q: &impl Queue,
    op: &'static str,
    kind: ElementwiseOp,
    a: &Storage,
    b: &Storage,
) -> Result<Storage> {
    let dtype = float_of(op, a)?;
    let kernel = match kind {
        ElementwiseOp::Add => FloatKernel::Add,
        ElementwiseOp::Mul => FloatKernel::Mul,
        ElementwiseOp::ReluBackward => FloatKernel::ReluBackward,
        _ => FloatKernel::GeluBackward,
    };
    let n = a.len;
    let y = Storage::new(&a.device, a.len, a.dtype, current_tag())?;
    let call = KernelCall::Elementwise { op: kind, len: n, channels: 0, dtype };
    let launch = Launch::new(kernel.name(dtype), elementwise(q, n), [ptr(a), ptr(b), ptr(&y), count(n)]);
    run(q, op, kind.name(), CUDA, Some(call), &[launch])?;
    Ok(y)
}

/// `scale` (by `alpha`), `relu` or `gelu`.
pub(crate) fn unary(q: &impl Queue, op: &'static str, kind: ElementwiseOp, x: &Storage, alpha: f32) -> Result<Storage> {
    let dtype = float_of(op, x)?;
    let n = x.len;
    let y = Storage::new(&x.device, x.len, x.dtype, current_tag())?;
    let launch = match kind {
        ElementwiseOp::Scale => {
            Launch::new(FloatKernel::Scale.name(dtype), elementwise(q, n), [ptr(x), ptr(&y), Arg::F32(alpha), count(n)])
        }
        ElementwiseOp::Relu => {
            Launch::new(FloatKernel::Relu.name(dtype), elementwise(q, n), [ptr(x), ptr(&y), count(n)])
        }
        _ => Launch::new(FloatKernel::Gelu.name(dtype), elementwise(q, n), [ptr(x), ptr(&y), count(n)]),
    };
    let call = KernelCall::Elementwise { op: kind, len: n, channels: 0, dtype };
    run(q, op, kind.name(), CUDA, Some(call), &[launch])?;
    Ok(y)
}

/// `y += x` in place (`y` is the only reference to its storage).
pub(crate) fn add_inplace(q: &impl Queue, op: &'static str, y: &Storage, x: &Storage) -> Result<()> {
    let dtype = float_of(op, y)?;
    let n = y.len;
    let call = KernelCall::Elementwise { op: ElementwiseOp::Add, len: n, channels: 0, dtype };
    let launch = Launch::new(FloatKernel::Add.name(dtype), elementwise(q, n), [ptr(y), ptr(x), ptr(y), count(n)]);
    run(q, op, "add", CUDA_INPLACE, Some(call), &[launch])
}

/// `y *= alpha` in place.
pub(crate) fn scale_inplace(q: &impl Queue, op: &'static str, y: &Storage, alpha: f32) -> Result<()> {
    let dtype = float_of(op, y)?;
    let n = y.len;
    let call = KernelCall::Elementwise { op: ElementwiseOp::Scale, len: n, channels: 0, dtype };
    let launch =
        Launch::new(FloatKernel::Scale.name(dtype), elementwise(q, n), [ptr(y), ptr(y), Arg::F32(alpha), count(n)]);
    run(q, op, "scale", CUDA_INPLACE, Some(call), &[launch])
}

/// Every element of `y` set to `value`, rounded once on the host as the CPU's
/// `fill_` rounds it.
pub(crate) fn fill(q: &impl Queue, op: &'static str, y: &Storage, value: f64) -> Result<()> {
    let dtype = float_of(op, y)?;
    let bits = match dtype {
        FloatDType::F32 => <f32 as Element>::from_f64(value).to_bits(),
        FloatDType::F16 => u32::from(<f16 as Element>::from_f64(value).to_bits()),
        FloatDType::BF16 => u32::from(<bf16 as Element>::from_f64(value).to_bits()),
    };
    let n = y.len;
    let call = KernelCall::Elementwise { op: ElementwiseOp::Fill, len: n, channels: 0, dtype };
    let launch = Launch::new(FloatKernel::Fill.name(dtype), elementwise(q, n), [ptr(y), Arg::U32(bits), count(n)]);
    run(q, op, "fill", CUDA_INPLACE, Some(call), &[launch])
}

/// GradScaler's unscale of `y` in place; whether any element was inf or NaN.
/// Reading the flag back waits for the device, as `found_inf.item()` does.
pub(crate) fn unscale(q: &impl Queue, op: &'static str, y: &Storage, inv_scale: f32) -> Result<bool> {
    let dtype = float_of(op, y)?;
    let n = y.len;
    let found = Storage::new(&y.device, 1, DType::F32, Some(Tag::Workspace))?;
    let launches = [
        Launch::new(FloatKernel::Fill.name(FloatDType::F32), grid(1, 32), [ptr(&found), Arg::U32(0), count(1)]),
        Launch::new(
            FloatKernel::Unscale.name(dtype),
            elementwise(q, n),
            [ptr(y), Arg::F32(inv_scale), ptr(&found), count(n)],
        ),
    ];
    let call = KernelCall::Elementwise { op: ElementwiseOp::Scale, len: n, channels: 0, dtype };
    run(q, op, op, CUDA_INPLACE, Some(call), &launches)?;
    Ok(q.read_f32(&found)? != 0.0)
}

/// `x + bias[c]` over `[outer, channels, inner]`.
pub(crate) fn add_bias(
    q: &impl Queue,
    op: &'static str,
    x: &Storage,
    bias: &Storage,
    layout: (usize, usize),
) -> Result<Storage> {
    let y = Storage::new(&x.device, x.len, x.dtype, current_tag())?;
    add_bias_into(q, op, x, bias, &y, layout, CUDA)?;
    Ok(y)
}

/// [`add_bias`] in place (`x` is the only reference to its storage).
pub(crate) fn add_bias_inplace(
    q: &impl Queue,
    op: &'static str,
    x: &Storage,
    bias: &Storage,
    layout: (usize, usize),
) -> Result<()> {
    add_bias_into(q, op, x, bias, x, layout, CUDA_INPLACE)
}

fn add_bias_into(
    q: &impl Queue,
    op: &'static str,
    x: &Storage,
    bias: &Storage,
    y: &Storage,
    (channels, inner): (usize, usize),
    algorithm: &'static str,
) -> Result<()> {
    let dtype = float_of(op, x)?;
    let n = x.len;
    let launch = Launch::new(
        FloatKernel::AddBias.name(dtype),
        elementwise(q, n),
        [ptr(x), ptr(bias), ptr(y), count(n), count(channels), count(inner)],
    );
    let call = KernelCall::Elementwise { op: ElementwiseOp::AddBias, len: n, channels, dtype };
    run(q, op, "add_bias", algorithm, Some(call), &[launch])
}

/// The bias gradient `[channels]`: `gy` summed over every dimension but 1, in f64.
pub(crate) fn bias_grad(
    q: &impl Queue,
    op: &'static str,
    gy: &Storage,
    layout: (usize, usize, usize),
) -> Result<Storage> {
    let dtype = float_of(op, gy)?;
    let (outer, channels, inner) = layout;
    let gb = Storage::new(&gy.device, channels, gy.dtype, current_tag())?;
    let call = Some(KernelCall::BiasGrad { outer, channels, inner, dtype });
    if inner == 1 && channels >= 128 {
        // A linear layer's [rows, channels]: coalesced reads of whole rows, the
        // rows cut into chunks summed by blocks of their own, then each
        // channel's chunks added in order (a tall batch is not one thread's walk).
        let (chunk, chunks) = bias_rows_chunks(outer);
        let parts = scratch_f64(&gy.device, chunks * channels)?;
        let partial = LaunchConfig {
            grid_dim: (channels.div_ceil(BIAS_ROWS_TX as usize) as u32, chunks as u32, 1),
            block_dim: (BIAS_ROWS_TX, BIAS_ROWS_TY, 1),
            shared_mem_bytes: 0,
        };
        let launches = [
            Launch::new(
                FloatKernel::BiasGradRowsPartial.name(dtype),
                partial,
                [ptr(gy), ptr(&parts), count(outer), count(channels), count(chunk)],
            ),
            Launch::new(
                FloatKernel::BiasGradRowsFinish.name(dtype),
                elementwise(q, channels),
                [ptr(&parts), ptr(&gb), count(chunks), count(channels)],
            ),
        ];
        run(q, op, op, CUDA, call, &launches)?;
    } else {
        let args = [ptr(gy), ptr(&gb), count(outer), count(channels), count(inner)];
        let launch = Launch::new(FloatKernel::BiasGrad.name(dtype), grid(channels.clamp(1, ROW_BLOCKS), THREADS), args);
        run(q, op, op, CUDA, call, &[launch])?;
    }
    Ok(gb)
}

/// `bias_grad_rows_partial`'s block shape (kernels.cu's `BIAS_ROWS_TX`, `_TY`).
const BIAS_ROWS_TX: u32 = 32;
const BIAS_ROWS_TY: u32 = 8;

/// Rows per chunk and chunks for `rows` rows: at least 256 rows a chunk (32
/// per row lane), at most 4096 chunks (the grid's second dimension).
fn bias_rows_chunks(rows: usize) -> (usize, usize) {
    let chunk = rows.div_ceil(4096).max(256);
    (chunk, rows.div_ceil(chunk).max(1))
}

/// Sum or mean of all elements as a 0-d f32 tensor (f64 partials per block,
/// then one block adds them in order).
pub(crate) fn reduce(q: &impl Queue, op: &'static str, x: &Storage, mean: bool) -> Result<Storage> {
    let dtype = float_of(op, x)?;
    let n = x.len;
    let cfg = partial(n);
    let parts = scratch_f64(&x.device, cfg.grid_dim.0 as usize)?;
    let out = Storage::new(&x.device, 1, DType::F32, current_tag())?;
    let divisor = if mean { n as f64 } else { 1.0 };
    let launches = [
        Launch::new(FloatKernel::SumPartial.name(dtype), cfg, [ptr(x), count(n), ptr(&parts)]),
        finish(&parts, cfg.grid_dim.0 as usize, divisor, &out),
    ];
    let call = if mean { KernelCall::Mean { len: n, dtype } } else { KernelCall::Sum { len: n, dtype } };
    run(q, op, op, CUDA, Some(call), &launches)?;
    Ok(out)
}

/// `out = (Σ parts[..count]) / divisor`.
fn finish(parts: &Storage, count_: usize, divisor: f64, out: &Storage) -> Launch {
    Launch::new(kernels::REDUCE_FINISH, single_block(), [ptr(parts), count(count_), Arg::F64(divisor), ptr(out)])
}

/// Mean squared error of f32 `p` against `t`, as a 0-d f32 tensor.
pub(crate) fn mse(q: &impl Queue, op: &'static str, p: &Storage, t: &Storage) -> Result<Storage> {
    let n = p.len;
    let cfg = partial(n);
    let parts = scratch_f64(&p.device, cfg.grid_dim.0 as usize)?;
    let out = Storage::new(&p.device, 1, DType::F32, current_tag())?;
    let launches = [
        Launch::new(kernels::MSE_PARTIAL, cfg, [ptr(p), ptr(t), count(n), ptr(&parts)]),
        finish(&parts, cfg.grid_dim.0 as usize, n as f64, &out),
    ];
    run(q, op, op, CUDA, Some(KernelCall::Mse { backward: false, len: n }), &launches)?;
    Ok(out)
}

/// `2 · (p − t) · grad_out / n`.
pub(crate) fn mse_backward(
    q: &impl Queue,
    op: &'static str,
    p: &Storage,
    t: &Storage,
    grad_out: f32,
) -> Result<Storage> {
    let n = p.len;
    let g = Storage::new(&p.device, p.len, DType::F32, current_tag())?;
    let k = 2.0 * grad_out / n as f32;
    let launch =
        Launch::new(kernels::MSE_BACKWARD, elementwise(q, n), [ptr(p), ptr(t), ptr(&g), Arg::F32(k), count(n)]);
    run(q, op, op, CUDA, Some(KernelCall::Mse { backward: true, len: n }), &[launch])?;
    Ok(g)
}

/// The CPU kernel's refusal of zero classes.
fn check_classes(op: &'static str, classes: usize) -> Result<()> {
    if classes == 0 {
        return Err(k::KernelError::InvalidShape { op, reason: "cross-entropy over zero classes".into() }.into());
    }
    Ok(())
}

/// Mean cross-entropy of f32 logits `[rows, classes]` against i64 labels.
pub(crate) fn cross_entropy(
    q: &impl Queue,
    op: &'static str,
    logits: &Storage,
    labels: &Storage,
    (rows, classes): (usize, usize),
) -> Result<Storage> {
    check_classes(op, classes)?;
    let losses = scratch_f64(&logits.device, rows)?;
    let out = Storage::new(&logits.device, 1, DType::F32, current_tag())?;
    let launches = [
        Launch::new(
            kernels::CROSS_ENTROPY_ROWS,
            per_row(rows, classes),
            [ptr(logits), ptr(labels), ptr(&losses), count(rows), count(classes)],
        ),
        finish(&losses, rows, rows as f64, &out),
    ];
    run(q, op, op, CUDA, Some(KernelCall::CrossEntropy { backward: false, rows, classes }), &launches)?;
    Ok(out)
}

/// The gradient of the mean cross-entropy for the logits, times `grad_out`.
pub(crate) fn cross_entropy_backward(
    q: &impl Queue,
    op: &'static str,
    logits: &Storage,
    labels: &Storage,
    (rows, classes): (usize, usize),
    grad_out: f32,
) -> Result<Storage> {
    check_classes(op, classes)?;
    let g = Storage::new(&logits.device, logits.len, DType::F32, current_tag())?;
    let scale = grad_out / rows as f32;
    let launch = Launch::new(
        kernels::CROSS_ENTROPY_BACKWARD,
        per_row(rows, classes),
        [ptr(logits), ptr(labels), ptr(&g), count(rows), count(classes), Arg::F32(scale)],
    );
    run(q, op, op, CUDA, Some(KernelCall::CrossEntropy { backward: true, rows, classes }), &[launch])?;
    Ok(g)
}

/// Softmax or log-softmax over the last dimension of `x` (`[rows, cols]`).
pub(crate) fn softmax(
    q: &impl Queue,
    op: &'static str,
    x: &Storage,
    (rows, cols): (usize, usize),
    log: bool,
) -> Result<Storage> {
    let dtype = float_of(op, x)?;
    let y = Storage::new(&x.device, x.len, x.dtype, current_tag())?;
    let kernel = if log { FloatKernel::LogSoftmax } else { FloatKernel::Softmax };
    let launch = Launch::new(kernel.name(dtype), per_row(rows, cols), [ptr(x), ptr(&y), count(rows), count(cols)]);
    run(q, op, op, CUDA, Some(KernelCall::Softmax { log, backward: false, rows, cols, dtype }), &[launch])?;
    Ok(y)
}

/// The gradient of (log-)softmax from its output `y` and `gy`.
pub(crate) fn softmax_backward(
    q: &impl Queue,
    op: &'static str,
    y: &Storage,
    gy: &Storage,
    (rows, cols): (usize, usize),
    log: bool,
) -> Result<Storage> {
    let dtype = float_of(op, y)?;
    let gx = Storage::new(&y.device, y.len, y.dtype, current_tag())?;
    let kernel = if log { FloatKernel::LogSoftmaxBackward } else { FloatKernel::SoftmaxBackward };
    let args = [ptr(y), ptr(gy), ptr(&gx), count(rows), count(cols)];
    let launch = Launch::new(kernel.name(dtype), per_row(rows, cols), args);
    run(q, op, op, CUDA, Some(KernelCall::Softmax { log, backward: true, rows, cols, dtype }), &[launch])?;
    Ok(gx)
}

/// Index of the first maximum (first NaN) of each row, as i64 `out_shape`.
pub(crate) fn argmax(q: &impl Queue, op: &'static str, x: &Storage, (rows, cols): (usize, usize)) -> Result<Storage> {
    let dtype = float_of(op, x)?;
    let out = Storage::new(&x.device, rows, DType::I64, current_tag())?;
    let args = [ptr(x), ptr(&out), count(rows), count(cols)];
    let launch = Launch::new(FloatKernel::Argmax.name(dtype), per_row(rows, cols), args);
    run(q, op, op, CUDA, Some(KernelCall::Sum { len: rows * cols, dtype }), &[launch])?;
    Ok(out)
}

/// The pooling geometry as the kernels' trailing arguments.
fn pool_args(s: &MaxPool2dShape) -> [Arg; 11] {
    [s.n * s.c, s.h, s.w, s.out_h(), s.out_w(), s.kernel.0, s.kernel.1, s.stride.0, s.stride.1, s.pad.0, s.pad.1]
        .map(count)
}

/// Max pooling: the output and its argmax indices (i64, position in the plane).
pub(crate) fn max_pool2d(
    q: &impl Queue,
    op: &'static str,
    x: &Storage,
    shape: MaxPool2dShape,
) -> Result<(Storage, Storage)> {
    let dtype = float_of(op, x)?;
    let y = Storage::new(&x.device, shape.y_len(), x.dtype, current_tag())?;
    let indices = Storage::new(&x.device, shape.y_len(), DType::I64, current_tag())?;
    let mut args = vec![ptr(x), ptr(&y), ptr(&indices)];
    args.extend(pool_args(&shape));
    let launch = Launch::new(FloatKernel::MaxPool2d.name(dtype), elementwise(q, shape.y_len()), args);
    run(q, op, op, CUDA, Some(KernelCall::MaxPool2d { backward: false, shape, dtype }), &[launch])?;
    Ok((y, indices))
}

/// The input gradient of max pooling from the indices and `gy`, after the
/// checks the CPU kernel makes on them (dtype and lengths).
pub(crate) fn max_pool2d_backward(
    q: &impl Queue,
    op: &'static str,
    indices: &Storage,
    gy: &Storage,
    shape: MaxPool2dShape,
) -> Result<Storage> {
    let dtype = float_of(op, gy)?;
    if indices.dtype != DType::I64 {
        return Err(TensorError::DTypeMismatch { op, lhs: indices.dtype, rhs: DType::I64 });
    }
    for (operand, t) in [("indices", indices), ("gy", gy)] {
        if t.len != shape.y_len() {
            let (expected, actual) = (shape.y_len(), t.len);
            return Err(k::KernelError::LengthMismatch { op: "max_pool2d_backward", operand, expected, actual }.into());
        }
    }
    let gx = Storage::new(&gy.device, shape.x_len(), gy.dtype, current_tag())?;
    let mut args = vec![ptr(indices), ptr(gy), ptr(&gx)];
    args.extend(pool_args(&shape));
    let launch = Launch::new(FloatKernel::MaxPool2dBackward.name(dtype), elementwise(q, shape.x_len()), args);
    run(q, op, op, CUDA, Some(KernelCall::MaxPool2d { backward: true, shape, dtype }), &[launch])?;
    Ok(gx)
}

/// One SGD step in place on f32 `param` (and `momentum`, needed when
/// `cfg.momentum != 0`); `cfg` and `step` already validated.
pub(crate) fn sgd_step(
    q: &impl Queue,
    op: &'static str,
    param: &Storage,
    grad: &Storage,
    momentum: Option<&Storage>,
    cfg: &k::Sgd,
    step: u64,
) -> Result<()> {
    let n = param.len;
    let buf = momentum.map_or(Arg::Ptr(0), ptr);
    let args = [
        ptr(param),
        ptr(grad),
        buf,
        count(n),
        Arg::F32(cfg.lr),
        Arg::F32(cfg.momentum),
        Arg::F32(cfg.dampening),
        Arg::F32(cfg.weight_decay),
        Arg::U32(u32::from(cfg.nesterov)),
        Arg::U32(u32::from(step == 1)),
    ];
    let call = KernelCall::Sgd {
        len: n,
        momentum: cfg.momentum != 0.0,
        weight_decay: cfg.weight_decay != 0.0,
        nesterov: cfg.nesterov,
    };
    run(q, op, op, CUDA, Some(call), &[Launch::new(kernels::SGD_STEP, elementwise(q, n), args)])
}

/// One Adam (AdamW) step in place; `cfg` and `step` already validated. The
/// bias corrections are computed here exactly as the CPU kernel computes them.
pub(crate) fn adam_step(
    q: &impl Queue,
    op: &'static str,
    [param, grad, exp_avg, exp_avg_sq]: [&Storage; 4],
    cfg: &k::Adam,
    step: u64,
) -> Result<()> {
    let n = param.len;
    let t = i32::try_from(step).unwrap_or(i32::MAX);
    let bc1 = 1.0 - f64::from(cfg.beta1).powi(t);
    let bc2 = 1.0 - f64::from(cfg.beta2).powi(t);
    let step_size = (f64::from(cfg.lr) / bc1) as f32;
    let bc2_sqrt = bc2.sqrt() as f32;
    let decay = if cfg.decoupled_weight_decay { 1.0 - cfg.lr * cfg.weight_decay } else { 1.0 };
    let coupled = if cfg.decoupled_weight_decay { 0.0 } else { cfg.weight_decay };
    let args = [
        ptr(param),
        ptr(grad),
        ptr(exp_avg),
        ptr(exp_avg_sq),
        count(n),
        Arg::F32(cfg.beta1),
        Arg::F32(cfg.beta2),
        Arg::F32(cfg.eps),
        Arg::F32(step_size),
        Arg::F32(bc2_sqrt),
        Arg::F32(decay),
        Arg::F32(coupled),
    ];
    let call = KernelCall::Adam { len: n, weight_decay: cfg.weight_decay != 0.0 };
    run(q, op, op, CUDA, Some(call), &[Launch::new(kernels::ADAM_STEP, elementwise(q, n), args)])
}

/// `t` converted to `dtype` (which differs from its own). Float casts are
/// reported as `cast` kernels; casts from or to i64 are not (nor are the CPU's).
pub(crate) fn cast(q: &impl Queue, op: &'static str, t: &Storage, dtype: DType) -> Result<Storage> {
    let Some(kernel) = kernels::cast_kernel(t.dtype, dtype) else {
        unreachable!("the tensor layer casts to the same dtype without a copy")
    };
    let n = t.len;
    let out = Storage::new(&t.device, t.len, dtype, current_tag())?;
    let call = match (t.dtype.float(), dtype.float()) {
        (Some(from), Some(to)) => Some(KernelCall::Cast { from, to, len: n }),
        _ => None,
    };
    run(q, op, "cast", CUDA, call, &[Launch::new(kernel, elementwise(q, n), [ptr(t), ptr(&out), count(n)])])?;
    Ok(out)
}

/// The CUDA backend's tensor ops: the plans above on its default stream,
/// matrix products through cuBLAS ([`super::blas`]), convolutions through
/// cuDNN or im2col ([`super::conv`]).
impl Backend for std::sync::Arc<CudaBackend> {
    fn binary(&self, op: &'static str, kind: ElementwiseOp, a: &Storage, b: &Storage) -> Result<Storage> {
        binary(self, op, kind, a, b)
    }
    fn unary(&self, op: &'static str, kind: ElementwiseOp, x: &Storage, alpha: f32) -> Result<Storage> {
        unary(self, op, kind, x, alpha)
    }
    fn add_inplace(&self, op: &'static str, y: &mut Storage, x: &Storage) -> Result<()> {
        add_inplace(self, op, y, x)
    }
    fn scale_inplace(&self, op: &'static str, y: &mut Storage, alpha: f32) -> Result<()> {
        scale_inplace(self, op, y, alpha)
    }
    fn fill(&self, op: &'static str, y: &mut Storage, value: f64) -> Result<()> {
        fill(self, op, y, value)
    }
    fn unscale(&self, op: &'static str, y: &mut Storage, inv_scale: f32) -> Result<bool> {
        unscale(self, op, y, inv_scale)
    }
    fn add_bias(&self, op: &'static str, x: &Storage, bias: &Storage, layout: ChannelLayout) -> Result<Storage> {
        add_bias(self, op, x, bias, (layout.1, layout.2))
    }
    fn add_bias_inplace(&self, op: &'static str, y: &mut Storage, bias: &Storage, layout: ChannelLayout) -> Result<()> {
        add_bias_inplace(self, op, y, bias, (layout.1, layout.2))
    }
    fn bias_grad(&self, op: &'static str, gy: &Storage, layout: ChannelLayout) -> Result<Storage> {
        bias_grad(self, op, gy, layout)
    }
    fn reduce(&self, op: &'static str, x: &Storage, mean: bool) -> Result<Storage> {
        reduce(self, op, x, mean)
    }
    fn argmax(&self, op: &'static str, x: &Storage, rows: Rows) -> Result<Storage> {
        argmax(self, op, x, rows)
    }
    fn softmax(&self, op: &'static str, x: &Storage, rows: Rows, log: bool) -> Result<Storage> {
        softmax(self, op, x, rows, log)
    }
    fn softmax_backward(&self, op: &'static str, y: &Storage, gy: &Storage, rows: Rows, log: bool) -> Result<Storage> {
        softmax_backward(self, op, y, gy, rows, log)
    }
    fn mse(&self, op: &'static str, p: &Storage, t: &Storage) -> Result<Storage> {
        mse(self, op, p, t)
    }
    fn mse_backward(&self, op: &'static str, p: &Storage, t: &Storage, grad_out: f32) -> Result<Storage> {
        mse_backward(self, op, p, t, grad_out)
    }
    fn cross_entropy(&self, op: &'static str, logits: &Storage, labels: &Storage, rows: Rows) -> Result<Storage> {
        cross_entropy(self, op, logits, labels, rows)
    }
    fn cross_entropy_backward(
        &self,
        op: &'static str,
        logits: &Storage,
        labels: &Storage,
        rows: Rows,
        grad_out: f32,
    ) -> Result<Storage> {
        cross_entropy_backward(self, op, logits, labels, rows, grad_out)
    }
    fn max_pool2d(&self, op: &'static str, x: &Storage, shape: MaxPool2dShape) -> Result<(Storage, Storage)> {
        max_pool2d(self, op, x, shape)
    }
    fn max_pool2d_backward(
        &self,
        op: &'static str,
        indices: &Storage,
        gy: &Storage,
        shape: MaxPool2dShape,
    ) -> Result<Storage> {
        max_pool2d_backward(self, op, indices, gy, shape)
    }
    fn cast(&self, op: &'static str, x: &Storage, dtype: DType) -> Result<Storage> {
        cast(self, op, x, dtype)
    }
    fn sgd_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        momentum: Option<&mut Storage>,
        cfg: &k::Sgd,
        step: u64,
    ) -> Result<()> {
        // The CPU kernel's checks of `cfg` and `step`, on no elements.
        k::sgd_step(cfg, step, &mut [], &[], &mut [])?;
        sgd_step(self, op, param, grad, momentum.as_deref(), cfg, step)
    }
    fn adam_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        [exp_avg, exp_avg_sq]: [&mut Storage; 2],
        cfg: &k::Adam,
        step: u64,
    ) -> Result<()> {
        // The CPU kernel's checks of `cfg` and `step`, on no elements.
        k::adam_step(cfg, step, &mut [], &[], &mut [], &mut [])?;
        adam_step(self, op, [param, grad, exp_avg, exp_avg_sq], cfg, step)
    }
    fn matmul(&self, a: &Storage, b: &Storage, shape: MatmulShape, timed: bool) -> Result<(Storage, KernelTiming)> {
        super::matmul::matmul(self, a, b, shape, timed)
    }
    fn conv2d(
        &self,
        pass: ConvPass,
        shape: Conv2dShape,
        a: &Storage,
        b: &Storage,
        timed: bool,
    ) -> Result<(Storage, KernelTiming)> {
        super::conv::conv_pass(self, pass, shape, a, b, timed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::tensor::Tensor;

    /// The storage the tensor layer hands the backend.
    fn s(t: &Tensor) -> &Storage {
        t.storage()
    }
    use crate::alloc::AllocatorConfig;
    use crate::cuda::kernels::source::{self, Param};
    use crate::device::{DeviceId, DeviceKind};
    use crate::hooks::{Event, EventLog, Hooks, KernelEvent};

    /// Records plans instead of running them.
    #[derive(Debug, Default)]
    struct Recorder {
        plans: Mutex<Vec<Plan>>,
    }

    impl Queue for Recorder {
        fn multiprocessors(&self) -> u32 {
            132
        }
        fn submit(&self, _op: &'static str, plan: Plan) -> Result<()> {
            self.plans.lock().unwrap().push(plan);
            Ok(())
        }
        fn read_f32(&self, _: &Storage) -> Result<f32> {
            Ok(0.0)
        }
    }

    fn host() -> (Device, Arc<EventLog>) {
        let hooks = Hooks::new();
        let log = EventLog::new();
        hooks.subscribe(log.clone());
        let id = DeviceId { kind: DeviceKind::Cpu, index: 7 };
        (Device::host(id, 64 << 20, AllocatorConfig::default(), &hooks).unwrap(), log)
    }

    fn kernel_events(log: &EventLog) -> Vec<KernelEvent> {
        log.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some(k),
                _ => None,
            })
            .collect()
    }

    fn param(a: &Arg) -> Param {
        match a {
            Arg::Ptr(_) => Param::Ptr,
            Arg::U64(_) => Param::U64,
            Arg::U32(_) => Param::U32,
            Arg::F32(_) => Param::F32,
            Arg::F64(_) => Param::F64,
        }
    }

    /// The CPU runs the op (`cpu`) and the recorder takes the CUDA plan of the
    /// same op on the same values (`gpu`): the plan must report what the CPU
    /// reports (name, algorithm, FLOPs and bytes) and launch kernels that
    /// exist, each with the parameters kernels.cu declares, in order and type.
    fn same_report(log: &EventLog, cpu: impl FnOnce(), gpu: impl FnOnce(&Recorder)) -> Vec<Launch> {
        let before = kernel_events(log).len();
        cpu();
        let reported = kernel_events(log)[before..].to_vec();
        let recorder = Recorder::default();
        gpu(&recorder);
        let mut plans = recorder.plans.into_inner().unwrap();
        assert_eq!(plans.len(), 1, "one kernel event per op");
        let plan = plans.pop().unwrap();
        match plan.call {
            Some(call) => {
                assert_eq!(reported.len(), 1, "{}: the CPU reports one kernel", plan.event);
                let e = &reported[0];
                assert_eq!(plan.event, e.name);
                assert_eq!(plan.algorithm, e.algorithm.replace("cpu", "cuda"), "{}", e.name);
                let cost = call.cost();
                assert_eq!((cost.flops, cost.bytes), (e.flops, e.bytes), "{}", e.name);
            }
            None => assert!(reported.is_empty(), "{}: unreported on both", plan.event),
        }
        let signatures = source::kernels(kernels::SOURCE);
        for l in &plan.launches {
            let (_, params) = signatures.iter().find(|(n, _)| n == l.kernel).expect("the kernel exists");
            let passed: Vec<Option<Param>> = l.args.iter().map(|a| Some(param(a))).collect();
            assert_eq!(&passed, params, "arguments of {}", l.kernel);
            // At most two dimensions (x, y), whole warps, within CUDA's limits.
            let (blocks, threads) = (l.cfg.grid_dim.0 * l.cfg.grid_dim.1, l.cfg.block_dim.0 * l.cfg.block_dim.1);
            assert!(blocks >= 1 && threads % 32 == 0 && (32..=1024).contains(&threads), "{}: {:?}", l.kernel, l.cfg);
            assert!((1..=65535).contains(&l.cfg.grid_dim.1), "{}: {:?}", l.kernel, l.cfg);
            assert_eq!((l.cfg.grid_dim.2, l.cfg.block_dim.2), (1, 1), "{}", l.kernel);
        }
        plan.launches
    }

    fn l_dtype(d: DType) -> FloatDType {
        d.float().unwrap()
    }

    fn kernel_names(launches: &[Launch]) -> Vec<&'static str> {
        launches.iter().map(|l| l.kernel).collect()
    }

    #[test]
    fn plans_match_the_cpu_reports_and_the_kernel_signatures() {
        let (d, log) = host();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let a = Tensor::randn(&[4, 6, 5], dtype, 1, &d).unwrap();
            let b = Tensor::randn(&[4, 6, 5], dtype, 2, &d).unwrap();
            let bias = Tensor::randn(&[6], dtype, 3, &d).unwrap();
            type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;
            let binaries: [(ElementwiseOp, &str, Binary); 4] = [
                (ElementwiseOp::Add, "add", Tensor::add),
                (ElementwiseOp::Mul, "mul", Tensor::mul),
                (ElementwiseOp::ReluBackward, "relu_backward", Tensor::relu_backward),
                (ElementwiseOp::GeluBackward, "gelu_backward", Tensor::gelu_backward),
            ];
            for (kind, name, op) in binaries {
                let l = same_report(
                    &log,
                    || drop(op(&a, &b).unwrap()),
                    |q| drop(binary(q, name, kind, s(&a), s(&b)).unwrap()),
                );
                assert_eq!(
                    l[0].kernel,
                    FloatKernel::ALL.iter().find(|k| k.base() == name).unwrap().name(l_dtype(dtype))
                );
            }
            let unaries = [
                (ElementwiseOp::Scale, "scale", 0.5),
                (ElementwiseOp::Relu, "relu", 0.0),
                (ElementwiseOp::Gelu, "gelu", 0.0),
            ];
            for (kind, name, alpha) in unaries {
                let cpu = || {
                    drop(match kind {
                        ElementwiseOp::Scale => a.scale(alpha),
                        ElementwiseOp::Relu => a.relu(),
                        _ => a.gelu(),
                    })
                };
                same_report(&log, cpu, |q| drop(unary(q, name, kind, s(&a), alpha).unwrap()));
            }
            let mut y = a.to(&d).unwrap().scale(1.0).unwrap();
            same_report(&log, || y.add_(&b).unwrap(), |q| add_inplace(q, "add_", s(&a), s(&b)).unwrap());
            same_report(&log, || y.scale_(2.0).unwrap(), |q| scale_inplace(q, "scale_", s(&a), 2.0).unwrap());
            same_report(&log, || y.fill_(0.1).unwrap(), |q| fill(q, "fill_", s(&a), 0.1).unwrap());
            let op = "non_finite_check_and_unscale";
            let l = same_report(
                &log,
                || assert!(!y.unscale_and_check_(0.5).unwrap()),
                |q| {
                    assert!(!unscale(q, op, s(&a), 0.5).unwrap());
                },
            );
            assert_eq!(kernel_names(&l)[0], "fill_f32", "the flag is zeroed first");
            same_report(
                &log,
                || drop(a.add_bias(&bias).unwrap()),
                |q| drop(add_bias(q, "add_bias", s(&a), s(&bias), (6, 5)).unwrap()),
            );
            same_report(
                &log,
                || y.add_bias_(&bias).unwrap(),
                |q| add_bias_inplace(q, "add_bias_", s(&a), s(&bias), (6, 5)).unwrap(),
            );
            same_report(
                &log,
                || drop(a.bias_grad().unwrap()),
                |q| drop(bias_grad(q, "bias_grad", s(&a), (4, 6, 5)).unwrap()),
            );
            let wide = Tensor::randn(&[3, 200], dtype, 4, &d).unwrap();
            let l = same_report(
                &log,
                || drop(wide.bias_grad().unwrap()),
                |q| drop(bias_grad(q, "bias_grad", s(&wide), (3, 200, 1)).unwrap()),
            );
            assert!(l[0].kernel.starts_with("bias_grad_rows_partial_"));
            assert!(l[1].kernel.starts_with("bias_grad_rows_finish_"));
            assert_eq!(l[0].cfg.grid_dim, (200usize.div_ceil(32) as u32, 1, 1));
            assert_eq!(
                (bias_rows_chunks(8192), bias_rows_chunks(1), bias_rows_chunks(1 << 24)),
                ((256, 32), (256, 1), (4096, 4096))
            );
            for mean in [false, true] {
                let op = if mean { "mean" } else { "sum" };
                let cpu = || drop(if mean { a.mean() } else { a.sum() }.unwrap());
                let l = same_report(&log, cpu, |q| drop(reduce(q, op, s(&a), mean).unwrap()));
                assert_eq!(kernel_names(&l)[1], kernels::REDUCE_FINISH);
            }
            for log_ in [false, true] {
                let (op, bop) =
                    if log_ { ("log_softmax", "log_softmax_backward") } else { ("softmax", "softmax_backward") };
                let cpu = || drop(if log_ { a.log_softmax() } else { a.softmax() }.unwrap());
                same_report(&log, cpu, |q| drop(softmax(q, op, s(&a), (24, 5), log_).unwrap()));
                let cpu = || drop(if log_ { a.log_softmax_backward(&b) } else { a.softmax_backward(&b) }.unwrap());
                same_report(&log, cpu, |q| drop(softmax_backward(q, bop, s(&a), s(&b), (24, 5), log_).unwrap()));
            }
            let cpu = || drop(a.argmax().unwrap());
            same_report(&log, cpu, |q| drop(argmax(q, "argmax", s(&a), (24, 5)).unwrap()));
            let x = Tensor::randn(&[2, 3, 6, 5], dtype, 5, &d).unwrap();
            let (py, pi) = x.max_pool2d(2, 2).unwrap();
            let shape = MaxPool2dShape::new(2, 3, 6, 5, 2, 2);
            same_report(
                &log,
                || drop(x.max_pool2d(2, 2).unwrap()),
                |q| drop(max_pool2d(q, "max_pool2d", s(&x), shape).unwrap()),
            );
            let cpu = || drop(Tensor::max_pool2d_backward(&pi, &py, x.shape(), 2, 2).unwrap());
            same_report(&log, cpu, |q| {
                drop(max_pool2d_backward(q, "max_pool2d_backward", s(&pi), s(&py), shape).unwrap())
            });
            for to in [DType::F32, DType::F16, DType::BF16, DType::I64] {
                if to != dtype {
                    let cpu = || drop(a.to_dtype(to).unwrap());
                    let l = same_report(&log, cpu, |q| drop(cast(q, "to_dtype", s(&a), to).unwrap()));
                    assert_eq!(Some(l[0].kernel), kernels::cast_kernel(dtype, to));
                    let back = a.to_dtype(to).unwrap();
                    same_report(
                        &log,
                        || drop(back.to_dtype(dtype).unwrap()),
                        |q| drop(cast(q, "to_dtype", s(&back), dtype).unwrap()),
                    );
                }
            }
        }
    }

    #[test]
    fn f32_only_plans_match_the_cpu() {
        let (d, log) = host();
        let x = Tensor::randn(&[5, 7], DType::F32, 1, &d).unwrap();
        let t = Tensor::randn(&[5, 7], DType::F32, 2, &d).unwrap();
        let labels = Tensor::from_slice(&[0i64, 6, 3, 2, 1], &[5], &d).unwrap();
        same_report(&log, || drop(x.mse(&t).unwrap()), |q| drop(mse(q, "mse", s(&x), s(&t)).unwrap()));
        same_report(
            &log,
            || drop(x.mse_backward(&t, 1.0).unwrap()),
            |q| drop(mse_backward(q, "mse_backward", s(&x), s(&t), 1.0).unwrap()),
        );
        let l = same_report(
            &log,
            || drop(x.cross_entropy(&labels).unwrap()),
            |q| drop(cross_entropy(q, "cross_entropy", s(&x), s(&labels), (5, 7)).unwrap()),
        );
        assert_eq!(kernel_names(&l), [kernels::CROSS_ENTROPY_ROWS, kernels::REDUCE_FINISH]);
        same_report(
            &log,
            || drop(x.cross_entropy_backward(&labels, 1.0).unwrap()),
            |q| drop(cross_entropy_backward(q, "cross_entropy_backward", s(&x), s(&labels), (5, 7), 1.0).unwrap()),
        );
        let mut p = x.scale(1.0).unwrap();
        let mut m = Tensor::zeros(&[5, 7], DType::F32, &d).unwrap();
        let sgd = k::Sgd { lr: 0.1, momentum: 0.9, dampening: 0.0, weight_decay: 0.01, nesterov: true };
        let m2 = m.scale(1.0).unwrap();
        same_report(
            &log,
            || p.sgd_step_(&t, Some(&mut m), &sgd, 1).unwrap(),
            |q| sgd_step(q, "sgd_step", s(&x), s(&t), Some(s(&m2)), &sgd, 1).unwrap(),
        );
        let plain = k::Sgd::new(0.1);
        let l = same_report(
            &log,
            || p.sgd_step_(&t, None, &plain, 3).unwrap(),
            |q| sgd_step(q, "sgd_step", s(&x), s(&t), None, &plain, 3).unwrap(),
        );
        assert!(matches!(l[0].args[2], Arg::Ptr(0)), "no momentum buffer");
        let (mut ea, mut eas) = (m.scale(0.0).unwrap(), m.scale(0.0).unwrap());
        let adam = k::Adam { weight_decay: 0.1, decoupled_weight_decay: true, ..k::Adam::new(1e-3) };
        let (ea2, eas2) = (ea.scale(1.0).unwrap(), eas.scale(1.0).unwrap());
        same_report(
            &log,
            || p.adam_step_(&t, &mut ea, &mut eas, &adam, 2).unwrap(),
            |q| adam_step(q, "adam_step", [s(&x), s(&t), s(&ea2), s(&eas2)], &adam, 2).unwrap(),
        );
    }

    #[test]
    fn checks_the_cpu_kernels_make() {
        let (d, _) = host();
        let q = Recorder::default();
        let x = Tensor::zeros(&[2, 0], DType::F32, &d).unwrap();
        let labels = Tensor::from_slice(&[0i64, 0], &[2], &d).unwrap();
        let err = cross_entropy(&q, "cross_entropy", s(&x), s(&labels), (2, 0)).unwrap_err();
        let cpu = x.cross_entropy(&labels).unwrap_err();
        assert_eq!(err.to_string(), cpu.to_string());
        let shape = MaxPool2dShape::new(1, 1, 4, 4, 2, 2);
        let gy = Tensor::zeros(&[1, 1, 2, 2], DType::F32, &d).unwrap();
        let short = Tensor::from_slice(&[0i64; 3], &[3], &d).unwrap();
        let err = max_pool2d_backward(&q, "max_pool2d_backward", s(&short), s(&gy), shape).unwrap_err();
        let cpu = Tensor::max_pool2d_backward(&short, &gy, &[1, 1, 4, 4], 2, 2).unwrap_err();
        assert_eq!(err.to_string(), cpu.to_string());
        let floats = gy.reshape(&[4]).unwrap();
        let err = max_pool2d_backward(&q, "max_pool2d_backward", s(&floats), s(&gy), shape).unwrap_err();
        let cpu = Tensor::max_pool2d_backward(&floats, &gy, &[1, 1, 4, 4], 2, 2).unwrap_err();
        assert_eq!(err.to_string(), cpu.to_string());
        let ints = Tensor::from_slice(&[1i64, 2], &[2], &d).unwrap();
        assert_eq!(reduce(&q, "sum", s(&ints), false).unwrap_err().to_string(), ints.sum().unwrap_err().to_string());
        assert!(q.plans.lock().unwrap().is_empty(), "nothing queued after a refusal");
    }

    #[test]
    fn grids() {
        let q = Recorder::default();
        assert_eq!(elementwise(&q, 0).grid_dim.0, 1);
        assert_eq!(elementwise(&q, 1000).grid_dim.0, 4);
        assert_eq!(elementwise(&q, 1 << 30).grid_dim.0, 132 * 8);
        assert_eq!(per_row(10, 3).block_dim.0, 32);
        assert_eq!(per_row(10, 100).block_dim.0, 128);
        assert_eq!(per_row(1 << 20, 50_000).block_dim.0, 512);
        assert_eq!(per_row(1 << 20, 50_000).grid_dim.0, 1 << 16);
        assert_eq!(partial(1 << 30).grid_dim.0, 1024);
        assert_eq!(partial(300).grid_dim.0, 2);
    }
}
