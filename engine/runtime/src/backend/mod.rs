//! The backends behind tensor ops: one trait, [`Backend`], over storage.
//!
//! A tensor op checks its operands (the golden rule first, then dtypes and
//! shapes), asks its device for the backend ([`crate::device::Device::backend`])
//! and calls the method of the op once, with the operands' [`Storage`] and
//! their geometry; the result comes back as storage, and the tensor layer
//! gives it a shape. Two backends implement it, like candle's
//! `BackendStorage`: [`cpu::CpuBackend`] (the CPU kernels of
//! `vramlab-cpu-kernels` on host slices) and [`crate::cuda::CudaBackend`]
//! (NVRTC kernels, cuBLAS, cuDNN). Every method takes its outputs and
//! workspaces from the storage's device allocator under the calling thread's
//! tag, and reports one kernel event per op.
//!
//! Methods that write in place take `&mut Storage`: the tensor layer hands
//! over storage only when the tensor holds the only reference to it. Values
//! are checked by the kernels (`cfg`, `step`, lengths) the same way on both.

pub(crate) mod cpu;
mod select;

use crate::cpu_kernels::{self as k, Conv2dShape, ConvPass, ElementwiseOp, MatmulShape, MaxPool2dShape};
use crate::dtype::DType;
use crate::error::Result;
use crate::storage::Storage;

/// Where a kernel's time went, for callers that want it without subscribing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelTiming {
    pub algorithm: &'static str,
    pub duration_ns: u64,
}

/// `[outer, channels, inner]`: a tensor whose dimension 1 holds the channels.
pub(crate) type ChannelLayout = (usize, usize, usize);
/// `(rows, cols)`: a tensor seen as rows of its last dimension.
pub(crate) type Rows = (usize, usize);

/// The ops of a device, over storage. `op` names the op in errors and events.
pub(crate) trait Backend {
    /// `a op b` elementwise: add, mul, relu_backward (`a` = x, `b` = gy), gelu_backward.
    fn binary(&self, op: &'static str, kind: ElementwiseOp, a: &Storage, b: &Storage) -> Result<Storage>;
    /// `scale` (by `alpha`), `relu` or `gelu`.
    fn unary(&self, op: &'static str, kind: ElementwiseOp, x: &Storage, alpha: f32) -> Result<Storage>;
    /// `y += x` in place.
    fn add_inplace(&self, op: &'static str, y: &mut Storage, x: &Storage) -> Result<()>;
    /// `y *= alpha` in place.
    fn scale_inplace(&self, op: &'static str, y: &mut Storage, alpha: f32) -> Result<()>;
    /// Every element of `y` set to `value` (rounded once to `y`'s dtype).
    fn fill(&self, op: &'static str, y: &mut Storage, value: f64) -> Result<()>;
    /// GradScaler's unscale in place; whether any element was inf or NaN before it.
    fn unscale(&self, op: &'static str, y: &mut Storage, inv_scale: f32) -> Result<bool>;
    /// `x + bias[c]` over `layout`.
    fn add_bias(&self, op: &'static str, x: &Storage, bias: &Storage, layout: ChannelLayout) -> Result<Storage>;
    /// [`add_bias`](Self::add_bias) in place.
    fn add_bias_inplace(&self, op: &'static str, y: &mut Storage, bias: &Storage, layout: ChannelLayout) -> Result<()>;
    /// `gy` summed over every dimension but the channels, as `[channels]`.
    fn bias_grad(&self, op: &'static str, gy: &Storage, layout: ChannelLayout) -> Result<Storage>;
    /// Sum or mean of all elements, as one f32.
    fn reduce(&self, op: &'static str, x: &Storage, mean: bool) -> Result<Storage>;
    /// Index of the first maximum of each row, as i64 (one per row).
    fn argmax(&self, op: &'static str, x: &Storage, rows: Rows) -> Result<Storage>;
    /// Softmax or log-softmax of each row.
    fn softmax(&self, op: &'static str, x: &Storage, rows: Rows, log: bool) -> Result<Storage>;
    /// The gradient of (log-)softmax from its output `y` and `gy`.
    fn softmax_backward(&self, op: &'static str, y: &Storage, gy: &Storage, rows: Rows, log: bool) -> Result<Storage>;
    /// Mean squared error of f32 `p` against `t`, as one f32.
    fn mse(&self, op: &'static str, p: &Storage, t: &Storage) -> Result<Storage>;
    /// `2 · (p − t) · grad_out / n`.
    fn mse_backward(&self, op: &'static str, p: &Storage, t: &Storage, grad_out: f32) -> Result<Storage>;
    /// Mean cross-entropy of f32 logits `(rows, classes)` against i64 labels, as one f32.
    fn cross_entropy(&self, op: &'static str, logits: &Storage, labels: &Storage, rows: Rows) -> Result<Storage>;
    /// Its gradient for the logits, times `grad_out`.
    fn cross_entropy_backward(
        &self,
        op: &'static str,
        logits: &Storage,
        labels: &Storage,
        rows: Rows,
        grad_out: f32,
    ) -> Result<Storage>;
    /// Max pooling: the output and its argmax indices (i64).
    fn max_pool2d(&self, op: &'static str, x: &Storage, shape: MaxPool2dShape) -> Result<(Storage, Storage)>;
    /// The input gradient of max pooling.
    fn max_pool2d_backward(
        &self,
        op: &'static str,
        indices: &Storage,
        gy: &Storage,
        shape: MaxPool2dShape,
    ) -> Result<Storage>;
    /// `x` converted to `dtype` (which differs from its own).
    fn cast(&self, op: &'static str, x: &Storage, dtype: DType) -> Result<Storage>;
    /// One SGD step in place on f32 storage (`momentum` when `cfg.momentum != 0`).
    fn sgd_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        momentum: Option<&mut Storage>,
        cfg: &k::Sgd,
        step: u64,
    ) -> Result<()>;
    /// One Adam step in place on f32 storage.
    fn adam_step(
        &self,
        op: &'static str,
        param: &mut Storage,
        grad: &Storage,
        moments: [&mut Storage; 2],
        cfg: &k::Adam,
        step: u64,
    ) -> Result<()>;
    /// `op(a) · op(b)` for a checked `shape`, with the autotuner's algorithm
    /// (cuBLAS's on a GPU). With `timed`, a GPU waits and reports device time;
    /// untimed GPU products are only queued (0 ns). Host products always run
    /// to completion and report their time.
    fn matmul(&self, a: &Storage, b: &Storage, shape: MatmulShape, timed: bool) -> Result<(Storage, KernelTiming)>;
    /// One conv pass: `a`, `b` are (x, w) forward, (w, gy) backward-data,
    /// (x, gy) backward-weight; timing as for [`matmul`](Self::matmul).
    fn conv2d(
        &self,
        pass: ConvPass,
        shape: Conv2dShape,
        a: &Storage,
        b: &Storage,
        timed: bool,
    ) -> Result<(Storage, KernelTiming)>;
}
