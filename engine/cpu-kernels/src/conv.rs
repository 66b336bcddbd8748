//! 2-D convolution (cross-correlation, as in PyTorch) over NCHW, with backward
//! passes for the data and the weights, and several real algorithms.
//!
//! Layouts: input `x` is `[n, c, h, w]`, weight `w` is `[k, c, r, s]`, output `y` is
//! `[n, k, out_h, out_w]`; `out = (in + 2·pad − kernel) / stride + 1`. Dilation 1,
//! one group. Bias is separate: [`crate::add_bias`] /
//! [`crate::bias_grad`] with `inner = out_h·out_w`.
//!
//! | algorithm | applies to | forward | backward data | backward weight |
//! |---|---|---|---|---|
//! | [`ConvAlgo::Direct`] | all | reproducible | reproducible | reproducible |
//! | [`ConvAlgo::Im2colGemm`] | all | reproducible | reproducible | reproducible |
//! | [`ConvAlgo::Im2colGemmBatchSplit`] | all | reproducible | reproducible | **not** reproducible |
//! | [`ConvAlgo::Winograd`] | 3×3, stride 1 (backward data: pad ≤ 2) | reproducible | reproducible | — |
//! | [`ConvAlgo::Gemm1x1`] | 1×1, stride 1, pad 0 | reproducible | reproducible | reproducible |
//!
//! f16/bf16 operands are widened to f32 in the workspace, convolved in f32 and
//! rounded once.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use gemm::Parallelism;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::algorithm::Algorithm;
use super::element::{Element, FloatDType};
use super::error::{KernelError, Result, check_len, check_workspace, checked_product};
use super::gemm_call::{MatRef, gemm};
use super::par::{staging_len_for, via_f32};

/// The shape of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dShape {
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    pub h: usize,
    pub w: usize,
    /// Output channels (filters).
    pub k: usize,
    /// Kernel height.
    pub r: usize,
    /// Kernel width.
    pub s: usize,
    /// (vertical, horizontal).
    pub stride: (usize, usize),
    /// Zero padding on each side, (vertical, horizontal).
    pub pad: (usize, usize),
}

impl Conv2dShape {
    /// Stride 1, no padding.
    pub const fn new(n: usize, c: usize, h: usize, w: usize, k: usize, r: usize, s: usize) -> Self {
        Conv2dShape { n, c, h, w, k, r, s, stride: (1, 1), pad: (0, 0) }
    }

    /// The same convolution with another stride.
    pub const fn with_stride(self, sh: usize, sw: usize) -> Self {
        Conv2dShape { stride: (sh, sw), ..self }
    }

    /// The same convolution with another padding.
    pub const fn with_padding(self, ph: usize, pw: usize) -> Self {
        Conv2dShape { pad: (ph, pw), ..self }
    }

    /// Output height (0 when the kernel does not fit).
    pub const fn out_h(&self) -> usize {
        out_dim(self.h, self.r, self.stride.0, self.pad.0)
    }
    /// Output width (0 when the kernel does not fit).
    pub const fn out_w(&self) -> usize {
        out_dim(self.w, self.s, self.stride.1, self.pad.1)
    }
    /// Elements of `x` (and of its gradient).
    pub const fn x_len(&self) -> usize {
        self.n * self.c * self.h * self.w
    }
    /// Elements of the weight (and of its gradient).
    pub const fn w_len(&self) -> usize {
        self.k * self.c * self.r * self.s
    }
    /// Elements of `y` (and of its gradient).
    pub const fn y_len(&self) -> usize {
        self.n * self.k * self.out_h() * self.out_w()
    }

    fn validate(&self, op: &'static str) -> Result<()> {
        let bad = |reason: String| Err(KernelError::InvalidShape { op, reason });
        if self.r == 0 || self.s == 0 || self.stride.0 == 0 || self.stride.1 == 0 {
            return bad(format!("kernel {}×{} and stride {:?} must be positive", self.r, self.s, self.stride));
        }
        if self.h + 2 * self.pad.0 < self.r || self.w + 2 * self.pad.1 < self.s {
            return bad(format!(
                "a {}×{} kernel does not fit a {}×{} input padded by {:?}",
                self.r, self.s, self.h, self.w, self.pad
            ));
        }
        checked_product(op, &[self.n, self.c, self.h + 2 * self.pad.0, self.w + 2 * self.pad.1])?;
        checked_product(op, &[self.k, self.c, self.r, self.s, self.h.max(1), self.w.max(1)])?;
        checked_product(op, &[self.n, self.k, self.out_h(), self.out_w()])?;
        Ok(())
    }

    fn dims(&self) -> Dims {
        Dims {
            n: self.n,
            c: self.c,
            h: self.h,
            w: self.w,
            k: self.k,
            r: self.r,
            s: self.s,
            sh: self.stride.0,
            sw: self.stride.1,
            ph: self.pad.0,
            pw: self.pad.1,
            oh: self.out_h(),
            ow: self.out_w(),
        }
    }
}

const fn out_dim(size: usize, kernel: usize, stride: usize, pad: usize) -> usize {
    let padded = size + 2 * pad;
    if stride == 0 || kernel == 0 || padded < kernel { 0 } else { (padded - kernel) / stride + 1 }
}

/// Which of the three convolution computations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvPass {
    /// `y = conv(x, w)`.
    Forward,
    /// `gx` from `gy` and `w`.
    BackwardData,
    /// `gw` from `x` and `gy`.
    BackwardWeight,
}

impl ConvPass {
    /// Every pass.
    pub const ALL: [ConvPass; 3] = [ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeight];

    /// The kernel's name (`conv2d_forward`, `conv2d_backward_data`, `conv2d_backward_weight`).
    pub const fn kernel_name(self) -> &'static str {
        match self {
            ConvPass::Forward => "conv2d_forward",
            ConvPass::BackwardData => "conv2d_backward_data",
            ConvPass::BackwardWeight => "conv2d_backward_weight",
        }
    }
}

/// What a convolution algorithm is chosen for: a pass over a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvProblem {
    pub pass: ConvPass,
    pub shape: Conv2dShape,
}

/// How a convolution is computed. See the module docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvAlgo {
    /// Nested loops, parallel over output planes (forward), input planes (backward
    /// data) or filter slices (backward weight). No workspace.
    Direct,
    /// Per image, unfold the input into a `[c·r·s, out_h·out_w]` matrix and multiply
    /// by the weight with a multithreaded `gemm`; backward data multiplies by the
    /// transposed weight and folds back (col2im); backward weight accumulates over
    /// the batch in image order.
    Im2colGemm,
    /// im2col + GEMM with the batch split across threads, each running
    /// single-threaded `gemm`s with its own unfold buffer. Backward weight adds the
    /// per-thread partial gradients as threads finish, in completion order: not
    /// reproducible.
    Im2colGemmBatchSplit,
    /// Winograd F(2×2, 3×3): 4×4 input tiles and filters transformed, 16 GEMMs over
    /// channels, 2×2 outputs per tile (2.25× fewer multiplications). Backward data
    /// is the same transform on the flipped, transposed filters.
    Winograd,
    /// A 1×1 stride-1 convolution is a plain matrix product per image.
    Gemm1x1,
}

impl ConvAlgo {
    /// Why it does not apply, or `None`.
    fn not_applicable(self, p: &ConvProblem) -> Option<String> {
        let s = &p.shape;
        match self {
            ConvAlgo::Direct | ConvAlgo::Im2colGemm | ConvAlgo::Im2colGemmBatchSplit => None,
            ConvAlgo::Winograd => {
                if (s.r, s.s) != (3, 3) || s.stride != (1, 1) {
                    Some(format!("needs a 3×3 kernel with stride 1, got {}×{} stride {:?}", s.r, s.s, s.stride))
                } else if p.pass == ConvPass::BackwardWeight {
                    Some("no Winograd backward-weight kernel".into())
                } else if p.pass == ConvPass::BackwardData && (s.pad.0 > 2 || s.pad.1 > 2) {
                    Some(format!("backward data needs padding ≤ 2, got {:?}", s.pad))
                } else {
                    None
                }
            }
            ConvAlgo::Gemm1x1 => {
                if (s.r, s.s) != (1, 1) || s.stride != (1, 1) || s.pad != (0, 0) {
                    Some(format!(
                        "needs a 1×1 kernel with stride 1 and no padding, got {}×{} stride {:?} pad {:?}",
                        s.r, s.s, s.stride, s.pad
                    ))
                } else {
                    None
                }
            }
        }
    }
}

/// Threads that [`ConvAlgo::Im2colGemmBatchSplit`] splits a batch of `n` over.
fn batch_slots(n: usize) -> usize {
    rayon::current_num_threads().min(n).max(1)
}

impl Algorithm for ConvAlgo {
    type Problem = ConvProblem;
    const OP: &'static str = "conv2d";

    fn all() -> &'static [Self] {
        &[ConvAlgo::Direct, ConvAlgo::Im2colGemm, ConvAlgo::Im2colGemmBatchSplit, ConvAlgo::Winograd, ConvAlgo::Gemm1x1]
    }

    fn name(self) -> &'static str {
        match self {
            ConvAlgo::Direct => "direct",
            ConvAlgo::Im2colGemm => "im2col_gemm",
            ConvAlgo::Im2colGemmBatchSplit => "im2col_gemm_batch_split",
            ConvAlgo::Winograd => "winograd_f2x3",
            ConvAlgo::Gemm1x1 => "gemm_1x1",
        }
    }

    fn is_applicable(self, p: &ConvProblem) -> bool {
        self.not_applicable(p).is_none()
    }

    fn is_reproducible(self, p: &ConvProblem) -> bool {
        !(self == ConvAlgo::Im2colGemmBatchSplit && p.pass == ConvPass::BackwardWeight)
    }

    fn workspace_len(self, p: &ConvProblem, dtype: FloatDType) -> usize {
        let s = &p.shape;
        let staging = staging_len_for(dtype, s.x_len(), s.w_len(), s.y_len());
        let col = s.c * s.r * s.s * s.out_h() * s.out_w();
        let own = match self {
            ConvAlgo::Direct | ConvAlgo::Gemm1x1 => 0,
            ConvAlgo::Im2colGemm => col,
            ConvAlgo::Im2colGemmBatchSplit => {
                let partial = if p.pass == ConvPass::BackwardWeight { s.w_len() } else { 0 };
                batch_slots(s.n) * (col + partial)
            }
            ConvAlgo::Winograd => match p.pass {
                ConvPass::BackwardData => 9 * s.k * s.c + winograd_workspace(&flipped_dims(&s.dims())),
                _ => winograd_workspace(&s.dims()),
            },
        };
        staging + own
    }

    fn heuristic(p: &ConvProblem) -> Self {
        let s = &p.shape;
        if ConvAlgo::Gemm1x1.is_applicable(p) {
            ConvAlgo::Gemm1x1
        } else if ConvAlgo::Winograd.is_applicable(p) && s.c >= 16 && s.k >= 16 {
            ConvAlgo::Winograd
        } else {
            ConvAlgo::Im2colGemm
        }
    }
}

/// Checks everything a pass needs before running.
fn prepare<T: Element>(
    algo: ConvAlgo,
    pass: ConvPass,
    shape: &Conv2dShape,
    lens: [(&'static str, usize, usize); 3],
    ws: usize,
) -> Result<()> {
    let op = pass.kernel_name();
    shape.validate(op)?;
    for (name, actual, expected) in lens {
        check_len(op, name, actual, expected)?;
    }
    let problem = ConvProblem { pass, shape: *shape };
    if let Some(reason) = algo.not_applicable(&problem) {
        return Err(KernelError::NotApplicable { op, algo: algo.name(), reason });
    }
    check_workspace(op, algo.name(), ws, algo.workspace_len(&problem, T::DTYPE))
}

/// `y = conv(x, w)` with `algo`; `ws` holds [`Algorithm::workspace_len`] f32 elements.
pub fn conv2d_forward<T: Element>(
    algo: ConvAlgo,
    shape: Conv2dShape,
    x: &[T],
    w: &[T],
    y: &mut [T],
    ws: &mut [f32],
) -> Result<()> {
    let lens = [("x", x.len(), shape.x_len()), ("w", w.len(), shape.w_len()), ("y", y.len(), shape.y_len())];
    prepare::<T>(algo, ConvPass::Forward, &shape, lens, ws.len())?;
    let d = shape.dims();
    via_f32(x, w, y, ws, |x, w, y, ws| match algo {
        ConvAlgo::Direct => direct_forward(&d, x, w, y),
        ConvAlgo::Im2colGemm => im2col_forward(&d, x, w, y, ws),
        ConvAlgo::Im2colGemmBatchSplit => batch_split_forward(&d, x, w, y, ws),
        ConvAlgo::Winograd => winograd_forward(&d, x, w, y, ws),
        ConvAlgo::Gemm1x1 => gemm1x1_forward(&d, x, w, y),
    });
    Ok(())
}

/// `gx` = the gradient of `conv(x, w)` with respect to `x`, given `gy`.
pub fn conv2d_backward_data<T: Element>(
    algo: ConvAlgo,
    shape: Conv2dShape,
    w: &[T],
    gy: &[T],
    gx: &mut [T],
    ws: &mut [f32],
) -> Result<()> {
    let lens = [("w", w.len(), shape.w_len()), ("gy", gy.len(), shape.y_len()), ("gx", gx.len(), shape.x_len())];
    prepare::<T>(algo, ConvPass::BackwardData, &shape, lens, ws.len())?;
    let d = shape.dims();
    via_f32(w, gy, gx, ws, |w, gy, gx, ws| match algo {
        ConvAlgo::Direct => direct_backward_data(&d, w, gy, gx),
        ConvAlgo::Im2colGemm => im2col_backward_data(&d, w, gy, gx, ws),
        ConvAlgo::Im2colGemmBatchSplit => batch_split_backward_data(&d, w, gy, gx, ws),
        ConvAlgo::Winograd => winograd_backward_data(&d, w, gy, gx, ws),
        ConvAlgo::Gemm1x1 => gemm1x1_backward_data(&d, w, gy, gx),
    });
    Ok(())
}

/// `gw` = the gradient of `conv(x, w)` with respect to `w`, given `gy`.
pub fn conv2d_backward_weight<T: Element>(
    algo: ConvAlgo,
    shape: Conv2dShape,
    x: &[T],
    gy: &[T],
    gw: &mut [T],
    ws: &mut [f32],
) -> Result<()> {
    let lens = [("x", x.len(), shape.x_len()), ("gy", gy.len(), shape.y_len()), ("gw", gw.len(), shape.w_len())];
    prepare::<T>(algo, ConvPass::BackwardWeight, &shape, lens, ws.len())?;
    let d = shape.dims();
    via_f32(x, gy, gw, ws, |x, gy, gw, ws| match algo {
        ConvAlgo::Direct => direct_backward_weight(&d, x, gy, gw),
        ConvAlgo::Im2colGemm => im2col_backward_weight(&d, x, gy, gw, ws),
        ConvAlgo::Im2colGemmBatchSplit => batch_split_backward_weight(&d, x, gy, gw, ws),
        ConvAlgo::Gemm1x1 => gemm1x1_backward_weight(&d, x, gy, gw),
        // Rejected by `prepare`.
        ConvAlgo::Winograd => unreachable!("Winograd has no backward-weight pass"),
    });
    Ok(())
}

// ---------------------------------------------------------------------------------
// Shared pieces.

/// Every size a kernel needs, with the output size precomputed.
#[derive(Debug, Clone, Copy)]
struct Dims {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    r: usize,
    s: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    oh: usize,
    ow: usize,
}

impl Dims {
    fn hw(&self) -> usize {
        self.h * self.w
    }
    fn p(&self) -> usize {
        self.oh * self.ow
    }
    fn crs(&self) -> usize {
        self.c * self.r * self.s
    }
}

/// The outputs `o` in `0..out` whose input `o·stride + off − pad` lies in `0..size`.
fn valid_range(out: usize, size: usize, stride: usize, off: usize, pad: usize) -> Range<usize> {
    let lo = if pad > off { (pad - off).div_ceil(stride) } else { 0 };
    let hi = if size + pad > off { (size + pad - off).div_ceil(stride).min(out) } else { 0 };
    lo.min(hi)..hi
}

/// `Σ a[i]·b[i]` with eight independent accumulators (vectorises).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A row-major `rows × cols` matrix at `offset`.
fn mat(data: &[f32], offset: usize, cols: usize) -> MatRef<'_, f32> {
    MatRef { data, offset, rs: cols, cs: 1 }
}

/// The transpose of a row-major `rows × cols` matrix stored at `offset`.
fn mat_t(data: &[f32], offset: usize, cols: usize) -> MatRef<'_, f32> {
    MatRef { data, offset, rs: 1, cs: cols }
}

// ---------------------------------------------------------------------------------
// Direct.

fn direct_forward(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32]) {
    let (hw, p, rs) = (d.hw(), d.p(), d.r * d.s);
    if p == 0 {
        return;
    }
    y.par_chunks_mut(p).enumerate().for_each(|(plane, yp)| {
        let (ni, ki) = (plane / d.k, plane % d.k);
        yp.fill(0.0);
        for ci in 0..d.c {
            let xp = &x[(ni * d.c + ci) * hw..][..hw];
            let wk = &w[(ki * d.c + ci) * rs..][..rs];
            for ri in 0..d.r {
                let rows = valid_range(d.oh, d.h, d.sh, ri, d.ph);
                for si in 0..d.s {
                    let cols = valid_range(d.ow, d.w, d.sw, si, d.pw);
                    let wv = wk[ri * d.s + si];
                    for o_h in rows.clone() {
                        let xrow = &xp[(o_h * d.sh + ri - d.ph) * d.w..][..d.w];
                        let yrow = &mut yp[o_h * d.ow..][..d.ow];
                        if d.sw == 1 {
                            let i0 = cols.start + si - d.pw;
                            for (yv, &xv) in yrow[cols.clone()].iter_mut().zip(&xrow[i0..]) {
                                *yv += wv * xv;
                            }
                        } else {
                            for o_w in cols.clone() {
                                yrow[o_w] += wv * xrow[o_w * d.sw + si - d.pw];
                            }
                        }
                    }
                }
            }
        }
    });
}

fn direct_backward_data(d: &Dims, w: &[f32], gy: &[f32], gx: &mut [f32]) {
    let (hw, p, rs) = (d.hw(), d.p(), d.r * d.s);
    if hw == 0 {
        return;
    }
    gx.par_chunks_mut(hw).enumerate().for_each(|(plane, gxp)| {
        let (ni, ci) = (plane / d.c, plane % d.c);
        gxp.fill(0.0);
        for ki in 0..d.k {
            let gyp = &gy[(ni * d.k + ki) * p..][..p];
            let wk = &w[(ki * d.c + ci) * rs..][..rs];
            for ri in 0..d.r {
                let rows = valid_range(d.oh, d.h, d.sh, ri, d.ph);
                for si in 0..d.s {
                    let cols = valid_range(d.ow, d.w, d.sw, si, d.pw);
                    let wv = wk[ri * d.s + si];
                    for o_h in rows.clone() {
                        let gxrow = &mut gxp[(o_h * d.sh + ri - d.ph) * d.w..][..d.w];
                        let gyrow = &gyp[o_h * d.ow..][..d.ow];
                        if d.sw == 1 {
                            let i0 = cols.start + si - d.pw;
                            for (gv, &g) in gxrow[i0..].iter_mut().zip(&gyrow[cols.clone()]) {
                                *gv += wv * g;
                            }
                        } else {
                            for o_w in cols.clone() {
                                gxrow[o_w * d.sw + si - d.pw] += wv * gyrow[o_w];
                            }
                        }
                    }
                }
            }
        }
    });
}

fn direct_backward_weight(d: &Dims, x: &[f32], gy: &[f32], gw: &mut [f32]) {
    let (hw, p, rs) = (d.hw(), d.p(), d.r * d.s);
    if rs == 0 {
        return;
    }
    gw.par_chunks_mut(rs).enumerate().for_each(|(slice, g)| {
        let (ki, ci) = (slice / d.c, slice % d.c);
        for ri in 0..d.r {
            let rows = valid_range(d.oh, d.h, d.sh, ri, d.ph);
            for si in 0..d.s {
                let cols = valid_range(d.ow, d.w, d.sw, si, d.pw);
                let mut acc = 0.0f64;
                for ni in 0..d.n {
                    let xp = &x[(ni * d.c + ci) * hw..][..hw];
                    let gyp = &gy[(ni * d.k + ki) * p..][..p];
                    for o_h in rows.clone() {
                        let xrow = &xp[(o_h * d.sh + ri - d.ph) * d.w..][..d.w];
                        let gyrow = &gyp[o_h * d.ow..][..d.ow];
                        let partial = if d.sw == 1 {
                            let i0 = cols.start + si - d.pw;
                            dot(&gyrow[cols.clone()], &xrow[i0..i0 + cols.len()])
                        } else {
                            cols.clone().map(|o_w| gyrow[o_w] * xrow[o_w * d.sw + si - d.pw]).sum()
                        };
                        acc += f64::from(partial);
                    }
                }
                g[ri * d.s + si] = acc as f32;
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// im2col + GEMM.

/// Unfolds one image `[c, h, w]` into `col[(c·r + r')·s + s'][o_h·ow + o_w]`.
fn im2col(d: &Dims, xn: &[f32], col: &mut [f32], parallel: bool) {
    let (hw, p) = (d.hw(), d.p());
    let row = |(idx, cr): (usize, &mut [f32])| {
        let (ci, ri, si) = (idx / (d.r * d.s), (idx / d.s) % d.r, idx % d.s);
        let xp = &xn[ci * hw..][..hw];
        let rows = valid_range(d.oh, d.h, d.sh, ri, d.ph);
        let cols = valid_range(d.ow, d.w, d.sw, si, d.pw);
        for o_h in 0..d.oh {
            let dst = &mut cr[o_h * d.ow..][..d.ow];
            if !rows.contains(&o_h) {
                dst.fill(0.0);
                continue;
            }
            let xrow = &xp[(o_h * d.sh + ri - d.ph) * d.w..][..d.w];
            dst[..cols.start].fill(0.0);
            dst[cols.end..].fill(0.0);
            if d.sw == 1 {
                let i0 = cols.start + si - d.pw;
                dst[cols.clone()].copy_from_slice(&xrow[i0..i0 + cols.len()]);
            } else {
                for o_w in cols.clone() {
                    dst[o_w] = xrow[o_w * d.sw + si - d.pw];
                }
            }
        }
    };
    let col = &mut col[..d.crs() * p];
    if parallel {
        col.par_chunks_mut(p).enumerate().for_each(row);
    } else {
        col.chunks_mut(p).enumerate().for_each(row);
    }
}

/// Folds `col` (the layout of [`im2col`]) back into one image gradient, summing overlaps
/// in a fixed order.
fn col2im(d: &Dims, col: &[f32], gxn: &mut [f32], parallel: bool) {
    let (hw, p, rs) = (d.hw(), d.p(), d.r * d.s);
    let plane = |(ci, gxp): (usize, &mut [f32])| {
        gxp.fill(0.0);
        for ri in 0..d.r {
            let rows = valid_range(d.oh, d.h, d.sh, ri, d.ph);
            for si in 0..d.s {
                let cols = valid_range(d.ow, d.w, d.sw, si, d.pw);
                let src = &col[(ci * rs + ri * d.s + si) * p..][..p];
                for o_h in rows.clone() {
                    let gxrow = &mut gxp[(o_h * d.sh + ri - d.ph) * d.w..][..d.w];
                    let srow = &src[o_h * d.ow..][..d.ow];
                    if d.sw == 1 {
                        let i0 = cols.start + si - d.pw;
                        for (g, &v) in gxrow[i0..].iter_mut().zip(&srow[cols.clone()]) {
                            *g += v;
                        }
                    } else {
                        for o_w in cols.clone() {
                            gxrow[o_w * d.sw + si - d.pw] += srow[o_w];
                        }
                    }
                }
            }
        }
    };
    if parallel {
        gxn.par_chunks_mut(hw).enumerate().for_each(plane);
    } else {
        gxn.chunks_mut(hw).enumerate().for_each(plane);
    }
}

/// One image forward: `y_n[k, p] = w[k, crs] · col[crs, p]`.
fn im2col_forward_image(d: &Dims, xn: &[f32], w: &[f32], yn: &mut [f32], col: &mut [f32], par: Parallelism) {
    im2col(d, xn, col, matches!(par, Parallelism::Rayon(_)));
    gemm(d.k, d.p(), d.crs(), yn, 0, d.p(), false, mat(w, 0, d.crs()), mat(col, 0, d.p()), par);
}

/// One image backward data: `col = wᵀ · gy_n`, then col2im.
fn im2col_backward_data_image(d: &Dims, w: &[f32], gyn: &[f32], gxn: &mut [f32], col: &mut [f32], par: Parallelism) {
    let col = &mut col[..d.crs() * d.p()];
    gemm(d.crs(), d.p(), d.k, col, 0, d.p(), false, mat_t(w, 0, d.crs()), mat(gyn, 0, d.p()), par);
    col2im(d, col, gxn, matches!(par, Parallelism::Rayon(_)));
}

/// One image backward weight: `gw (+)= gy_n · colᵀ`.
fn im2col_backward_weight_image(
    d: &Dims,
    xn: &[f32],
    gyn: &[f32],
    gw: &mut [f32],
    accumulate: bool,
    col: &mut [f32],
    par: Parallelism,
) {
    im2col(d, xn, col, matches!(par, Parallelism::Rayon(_)));
    gemm(d.k, d.crs(), d.p(), gw, 0, d.crs(), accumulate, mat(gyn, 0, d.p()), mat_t(col, 0, d.p()), par);
}

fn im2col_forward(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32]) {
    let (chw, kp) = (d.c * d.hw(), d.k * d.p());
    if kp == 0 {
        return;
    }
    for (ni, yn) in y.chunks_mut(kp).enumerate() {
        im2col_forward_image(d, &x[ni * chw..][..chw], w, yn, ws, Parallelism::Rayon(0));
    }
}

fn im2col_backward_data(d: &Dims, w: &[f32], gy: &[f32], gx: &mut [f32], ws: &mut [f32]) {
    let (chw, kp) = (d.c * d.hw(), d.k * d.p());
    if chw == 0 {
        return;
    }
    for (ni, gxn) in gx.chunks_mut(chw).enumerate() {
        im2col_backward_data_image(d, w, &gy[ni * kp..][..kp], gxn, ws, Parallelism::Rayon(0));
    }
}

fn im2col_backward_weight(d: &Dims, x: &[f32], gy: &[f32], gw: &mut [f32], ws: &mut [f32]) {
    let (chw, kp) = (d.c * d.hw(), d.k * d.p());
    gw.fill(0.0);
    for ni in 0..d.n {
        let (xn, gyn) = (&x[ni * chw..][..chw], &gy[ni * kp..][..kp]);
        im2col_backward_weight_image(d, xn, gyn, gw, ni > 0, ws, Parallelism::Rayon(0));
    }
}

/// Images per slot and the slot size in `ws` for the batch-split variant.
fn batch_split_layout(d: &Dims, partial: usize) -> (usize, usize) {
    let slots = batch_slots(d.n);
    (d.n.div_ceil(slots), d.crs() * d.p() + partial)
}

fn batch_split_forward(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32]) {
    let (chw, kp) = (d.c * d.hw(), d.k * d.p());
    let (per, slot) = batch_split_layout(d, 0);
    if d.n == 0 || kp == 0 {
        return;
    }
    if slot == 0 {
        return y.fill(0.0);
    }
    y.par_chunks_mut(per * kp).zip(ws.par_chunks_mut(slot)).enumerate().for_each(|(j, (ys, col))| {
        for (li, yn) in ys.chunks_mut(kp).enumerate() {
            let ni = j * per + li;
            im2col_forward_image(d, &x[ni * chw..][..chw], w, yn, col, Parallelism::None);
        }
    });
}

fn batch_split_backward_data(d: &Dims, w: &[f32], gy: &[f32], gx: &mut [f32], ws: &mut [f32]) {
    let (chw, kp) = (d.c * d.hw(), d.k * d.p());
    let (per, slot) = batch_split_layout(d, 0);
    if d.n == 0 || chw == 0 {
        return;
    }
    if slot == 0 {
        return gx.fill(0.0);
    }
    gx.par_chunks_mut(per * chw).zip(ws.par_chunks_mut(slot)).enumerate().for_each(|(j, (gxs, col))| {
        for (li, gxn) in gxs.chunks_mut(chw).enumerate() {
            let ni = j * per + li;
            im2col_backward_data_image(d, w, &gy[ni * kp..][..kp], gxn, col, Parallelism::None);
        }
    });
}

fn batch_split_backward_weight(d: &Dims, x: &[f32], gy: &[f32], gw: &mut [f32], ws: &mut [f32]) {
    let (chw, kp, wl) = (d.c * d.hw(), d.k * d.p(), d.k * d.crs());
    let (per, slot) = batch_split_layout(d, wl);
    gw.fill(0.0);
    if d.n == 0 || wl == 0 || slot == 0 {
        return;
    }
    let total = Mutex::new(gw);
    let slots = d.n.div_ceil(per);
    ws.par_chunks_mut(slot).take(slots).enumerate().for_each(|(j, buf)| {
        let (partial, col) = buf.split_at_mut(wl);
        let images = j * per..((j + 1) * per).min(d.n);
        for ni in images.clone() {
            let (xn, gyn) = (&x[ni * chw..][..chw], &gy[ni * kp..][..kp]);
            im2col_backward_weight_image(d, xn, gyn, partial, ni > images.start, col, Parallelism::None);
        }
        // Completion order decides the order of these additions.
        let mut gw = total.lock().unwrap_or_else(PoisonError::into_inner);
        for (g, &v) in gw.iter_mut().zip(partial.iter()) {
            *g += v;
        }
    });
}

// ---------------------------------------------------------------------------------
// 1×1 as GEMM.

fn gemm1x1_forward(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32]) {
    let (hw, kp) = (d.hw(), d.k * d.p());
    if kp == 0 {
        return;
    }
    for (ni, yn) in y.chunks_mut(kp).enumerate() {
        gemm(d.k, hw, d.c, yn, 0, hw, false, mat(w, 0, d.c), mat(x, ni * d.c * hw, hw), Parallelism::Rayon(0));
    }
}

fn gemm1x1_backward_data(d: &Dims, w: &[f32], gy: &[f32], gx: &mut [f32]) {
    let hw = d.hw();
    if d.c * hw == 0 {
        return;
    }
    for (ni, gxn) in gx.chunks_mut(d.c * hw).enumerate() {
        gemm(d.c, hw, d.k, gxn, 0, hw, false, mat_t(w, 0, d.c), mat(gy, ni * d.k * hw, hw), Parallelism::Rayon(0));
    }
}

fn gemm1x1_backward_weight(d: &Dims, x: &[f32], gy: &[f32], gw: &mut [f32]) {
    let hw = d.hw();
    gw.fill(0.0);
    for ni in 0..d.n {
        let (gyn, xn) = (mat(gy, ni * d.k * hw, hw), mat_t(x, ni * d.c * hw, hw));
        gemm(d.k, d.c, hw, gw, 0, d.c, ni > 0, gyn, xn, Parallelism::Rayon(0));
    }
}

// ---------------------------------------------------------------------------------
// Winograd F(2×2, 3×3).

/// Tiles per image of a stride-1 3×3 problem (rows, columns), and how many images
/// are transformed and multiplied together: as many as keep the transformed input
/// and output (16·(c + k) floats per tile) within 8 MiB, so they stay in cache
/// between the transforms and the GEMMs; at least one.
fn winograd_tiling(d: &Dims) -> (usize, usize, usize) {
    const BUDGET_FLOATS: usize = 8 << 20 >> 2;
    let (th, tw) = (d.oh.div_ceil(2), d.ow.div_ceil(2));
    let per_image = 16 * (d.c + d.k) * th * tw;
    let group = BUDGET_FLOATS.checked_div(per_image).unwrap_or(1).clamp(1, d.n.max(1));
    (th, tw, group)
}

fn winograd_workspace(d: &Dims) -> usize {
    let (th, tw, group) = winograd_tiling(d);
    16 * d.k * d.c + 16 * (d.c + d.k) * group * th * tw
}

/// The stride-1 3×3 problem whose forward pass is `d`'s backward data: input `gy`
/// (`k` channels, `oh × ow`), filters flipped and transposed to `[c, k, 3, 3]`,
/// padding `2 − pad`, output `gx` (`c` channels, `h × w`).
fn flipped_dims(d: &Dims) -> Dims {
    Dims {
        n: d.n,
        c: d.k,
        h: d.oh,
        w: d.ow,
        k: d.c,
        r: 3,
        s: 3,
        sh: 1,
        sw: 1,
        ph: 2usize.saturating_sub(d.ph),
        pw: 2usize.saturating_sub(d.pw),
        oh: d.h,
        ow: d.w,
    }
}

/// `U = G g Gᵀ` for every filter, stored `[ξ][k][c]` (16 row-major `k × c` matrices).
fn winograd_filters(d: &Dims, w: &[f32], u: &mut [f32]) {
    let kc = d.k * d.c;
    // One task per output channel, owning its row of all 16 matrices.
    let mut per_k: Vec<Vec<&mut [f32]>> = (0..d.k).map(|_| Vec::with_capacity(16)).collect();
    for ux in u[..16 * kc].chunks_mut(kc) {
        for (ki, row) in ux.chunks_mut(d.c).enumerate() {
            per_k[ki].push(row);
        }
    }
    per_k.into_par_iter().enumerate().for_each(|(ki, mut out)| {
        for ci in 0..d.c {
            let g = &w[(ki * d.c + ci) * 9..][..9];
            let mut t = [[0.0f32; 3]; 4];
            for j in 0..3 {
                let (g0, g1, g2) = (g[j], g[3 + j], g[6 + j]);
                t[0][j] = g0;
                t[1][j] = 0.5 * (g0 + g1 + g2);
                t[2][j] = 0.5 * (g0 - g1 + g2);
                t[3][j] = g2;
            }
            for (a, row) in t.iter().enumerate() {
                let [t0, t1, t2] = *row;
                out[a * 4][ci] = t0;
                out[a * 4 + 1][ci] = 0.5 * (t0 + t1 + t2);
                out[a * 4 + 2][ci] = 0.5 * (t0 - t1 + t2);
                out[a * 4 + 3][ci] = t2;
            }
        }
    });
}

/// Forward pass of a stride-1 3×3 problem; `ws` holds [`winograd_workspace`].
fn winograd_forward(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32]) {
    winograd_forward_grouped(d, x, w, y, ws, winograd_tiling(d).2);
}

/// [`winograd_forward`] transforming `group` images at a time (at most the
/// [`winograd_tiling`] group, which sized the workspace).
fn winograd_forward_grouped(d: &Dims, x: &[f32], w: &[f32], y: &mut [f32], ws: &mut [f32], group: usize) {
    let (th, tw, _) = winograd_tiling(d);
    let t = th * tw;
    let (hw, p) = (d.hw(), d.p());
    if d.k * p == 0 {
        return;
    }
    if d.c == 0 {
        return y.fill(0.0);
    }
    let (u, rest) = ws.split_at_mut(16 * d.k * d.c);
    winograd_filters(d, w, u);
    let u: &[f32] = u;
    let gemm_par = if rayon::current_num_threads() > 16 {
        Parallelism::Rayon(rayon::current_num_threads().div_ceil(16))
    } else {
        Parallelism::None
    };
    for n0 in (0..d.n).step_by(group) {
        let g = group.min(d.n - n0);
        let gt = g * t;
        let (v, rest) = rest.split_at_mut(16 * d.c * gt);
        let m = &mut rest[..16 * d.k * gt];

        // Input transform V = Bᵀ d B, stored [ξ][c][gt]; each task owns one channel.
        let mut per_channel: Vec<Vec<&mut [f32]>> = (0..d.c).map(|_| Vec::with_capacity(16)).collect();
        for vx in v.chunks_mut(d.c * gt) {
            for (ci, chunk) in vx.chunks_mut(gt).enumerate() {
                per_channel[ci].push(chunk);
            }
        }
        // Padded row width: tile b reads padded columns 2b..2b + 4.
        let wp = 2 * tw + 2;
        per_channel.into_par_iter().enumerate().for_each(|(ci, mut out)| {
            let mut rows = vec![0.0f32; 8 * wp];
            let (dr, tr) = rows.split_at_mut(4 * wp);
            for li in 0..g {
                let xp = &x[((n0 + li) * d.c + ci) * hw..][..hw];
                for a in 0..th {
                    // Four padded input rows (zero outside the image).
                    for (i, row) in dr.chunks_mut(wp).enumerate() {
                        let ih = (2 * a + i) as isize - d.ph as isize;
                        row.fill(0.0);
                        if ih >= 0 && ih < d.h as isize {
                            let len = d.w.min(wp - d.pw);
                            row[d.pw..d.pw + len].copy_from_slice(&xp[ih as usize * d.w..][..len]);
                        }
                    }
                    // Bᵀ applied down the columns, vectorised along the row.
                    {
                        let (d0, rest) = dr.split_at(wp);
                        let (d1, rest) = rest.split_at(wp);
                        let (d2, d3) = rest.split_at(wp);
                        let (t0, rest) = tr.split_at_mut(wp);
                        let (t1, rest) = rest.split_at_mut(wp);
                        let (t2, t3) = rest.split_at_mut(wp);
                        for j in 0..wp {
                            t0[j] = d0[j] - d2[j];
                            t1[j] = d1[j] + d2[j];
                            t2[j] = d2[j] - d1[j];
                            t3[j] = d1[j] - d3[j];
                        }
                    }
                    // B applied along each tile's row.
                    let col0 = li * t + a * tw;
                    for (i, r) in tr.chunks(wp).enumerate() {
                        let [o0, o1, o2, o3] = &mut out[i * 4..i * 4 + 4] else { unreachable!() };
                        let (o0, o1) = (&mut o0[col0..col0 + tw], &mut o1[col0..col0 + tw]);
                        let (o2, o3) = (&mut o2[col0..col0 + tw], &mut o3[col0..col0 + tw]);
                        for b in 0..tw {
                            let q = &r[2 * b..2 * b + 4];
                            o0[b] = q[0] - q[2];
                            o1[b] = q[1] + q[2];
                            o2[b] = q[2] - q[1];
                            o3[b] = q[1] - q[3];
                        }
                    }
                }
            }
        });

        // 16 independent products M_ξ[k, gt] = U_ξ[k, c] · V_ξ[c, gt].
        let v: &[f32] = v;
        m.par_chunks_mut(d.k * gt).enumerate().for_each(|(xi, mx)| {
            let (uv, vv) = (mat(u, xi * d.k * d.c, d.c), mat(v, xi * d.c * gt, gt));
            gemm(d.k, gt, d.c, mx, 0, gt, false, uv, vv, gemm_par);
        });

        // Output transform Y = Aᵀ M A, one output plane per task.
        let m: &[f32] = m;
        let ys = &mut y[n0 * d.k * p..(n0 + g) * d.k * p];
        ys.par_chunks_mut(p).enumerate().for_each_init(
            || vec![0.0f32; 8 * tw],
            |sbuf, (plane, yp)| {
                let (li, ki) = (plane / d.k, plane % d.k);
                for a in 0..th {
                    // Row a of this plane's tiles in each of the 16 matrices, contiguous in b.
                    let col0 = ki * gt + li * t + a * tw;
                    let mrow = |xi: usize| &m[xi * d.k * gt + col0..][..tw];
                    // S = Aᵀ M (2 × 4 per tile), vectorised across the row of tiles.
                    for j in 0..4 {
                        let (m0, m1, m2, m3) = (mrow(j), mrow(4 + j), mrow(8 + j), mrow(12 + j));
                        let (s0, s1) = sbuf.split_at_mut(4 * tw);
                        let (s0, s1) = (&mut s0[j * tw..][..tw], &mut s1[j * tw..][..tw]);
                        for b in 0..tw {
                            s0[b] = m0[b] + m1[b] + m2[b];
                            s1[b] = m1[b] - m2[b] - m3[b];
                        }
                    }
                    // Y = S A: two outputs per tile in each of two rows.
                    for i in 0..2 {
                        let o_h = 2 * a + i;
                        if o_h >= d.oh {
                            break;
                        }
                        let s = &sbuf[i * 4 * tw..][..4 * tw];
                        let (s0, s1, s2, s3) = (&s[..tw], &s[tw..2 * tw], &s[2 * tw..3 * tw], &s[3 * tw..]);
                        let yrow = &mut yp[o_h * d.ow..][..d.ow];
                        let (pairs, last) = yrow.split_at_mut(d.ow / 2 * 2);
                        for (b, y2) in pairs.chunks_exact_mut(2).enumerate() {
                            y2[0] = s0[b] + s1[b] + s2[b];
                            y2[1] = s1[b] - s2[b] - s3[b];
                        }
                        if let Some(y0) = last.first_mut() {
                            let b = tw - 1;
                            *y0 = s0[b] + s1[b] + s2[b];
                        }
                    }
                }
            },
        );
    }
}

fn winograd_backward_data(d: &Dims, w: &[f32], gy: &[f32], gx: &mut [f32], ws: &mut [f32]) {
    if d.k == 0 {
        // No output channels: nothing flows back.
        return gx.fill(0.0);
    }
    let (wf, rest) = ws.split_at_mut(9 * d.k * d.c);
    // wf[c][k][2 − r][2 − s] = w[k][c][r][s]
    wf.par_chunks_mut(9 * d.k).enumerate().for_each(|(ci, wc)| {
        for ki in 0..d.k {
            let src = &w[(ki * d.c + ci) * 9..][..9];
            for (i, v) in wc[ki * 9..][..9].iter_mut().enumerate() {
                *v = src[8 - i];
            }
        }
    });
    winograd_forward(&flipped_dims(d), gy, wf, gx, rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ranges() {
        // size 5, pad 1, kernel offset 0, stride 1, out 5: o − 1 ∈ 0..5 → o ∈ 1..5 (o < 6 capped at 5)
        assert_eq!(valid_range(5, 5, 1, 0, 1), 1..5);
        assert_eq!(valid_range(5, 5, 1, 2, 1), 0..4);
        // stride 2, size 5, pad 1, off 1, out 3: 2o ∈ 0..5 → o ∈ 0..3
        assert_eq!(valid_range(3, 5, 2, 1, 1), 0..3);
        assert_eq!(valid_range(3, 0, 1, 0, 0), 0..0);
    }

    #[test]
    fn empty_shapes_do_not_panic() {
        let base = Conv2dShape::new(2, 3, 5, 5, 4, 3, 3).with_padding(1, 1);
        let empties = [
            Conv2dShape { n: 0, ..base },
            Conv2dShape { c: 0, ..base },
            Conv2dShape { k: 0, ..base },
            Conv2dShape { h: 0, w: 0, r: 1, s: 1, ..base },
        ];
        for shape in empties {
            for pass in ConvPass::ALL {
                let problem = ConvProblem { pass, shape };
                for algo in ConvAlgo::candidates(&problem) {
                    let mut ws = vec![0.0f32; algo.workspace_len(&problem, FloatDType::F32)];
                    let (x, w, y) = (vec![1.0f32; shape.x_len()], vec![1.0; shape.w_len()], vec![1.0; shape.y_len()]);
                    let result = match pass {
                        ConvPass::Forward => conv2d_forward(algo, shape, &x, &w, &mut y.clone(), &mut ws),
                        ConvPass::BackwardData => {
                            let mut gx = x.clone();
                            let r = conv2d_backward_data(algo, shape, &w, &y, &mut gx, &mut ws);
                            assert!(shape.k > 0 || gx.iter().all(|&v| v == 0.0), "{algo:?} {shape:?}");
                            r
                        }
                        ConvPass::BackwardWeight => {
                            let mut gw = w.clone();
                            let r = conv2d_backward_weight(algo, shape, &x, &y, &mut gw, &mut ws);
                            // With no images or no outputs the gradient is zero, not stale.
                            assert!(shape.y_len() > 0 || gw.iter().all(|&v| v == 0.0), "{algo:?} {shape:?}");
                            r
                        }
                    };
                    result.unwrap_or_else(|e| panic!("{algo:?} {pass:?} {shape:?}: {e}"));
                }
            }
        }
    }

    #[test]
    fn winograd_in_groups_matches_direct() {
        // Real shapes put several images in one group; force one image per group.
        let d = Conv2dShape::new(3, 2, 5, 7, 3, 3, 3).with_padding(1, 1).dims();
        let x: Vec<f32> = (0..3 * 2 * 35).map(|i| ((i * 37 % 11) as f32 - 5.0) / 4.0).collect();
        let w: Vec<f32> = (0..3 * 2 * 9).map(|i| ((i * 13 % 7) as f32 - 3.0) / 2.0).collect();
        let (mut want, mut got) = (vec![0.0f32; 3 * 3 * 35], vec![0.0f32; 3 * 3 * 35]);
        direct_forward(&d, &x, &w, &mut want);
        let mut ws = vec![f32::NAN; winograd_workspace(&d)];
        winograd_forward_grouped(&d, &x, &w, &mut got, &mut ws, 1);
        for (g, e) in got.iter().zip(&want) {
            assert!((g - e).abs() <= 1e-5 * e.abs().max(1.0), "{g} vs {e}");
        }
    }

    #[test]
    fn identity_kernel_copies_input() {
        // A 3×3 kernel with a single 1 in the centre and padding 1 is the identity.
        let shape = Conv2dShape::new(1, 1, 4, 5, 1, 3, 3).with_padding(1, 1);
        let x: Vec<f32> = (0..20).map(|v| v as f32).collect();
        let mut w = [0.0f32; 9];
        w[4] = 1.0;
        for &algo in ConvAlgo::all() {
            let problem = ConvProblem { pass: ConvPass::Forward, shape };
            if !algo.is_applicable(&problem) {
                continue;
            }
            let mut ws = vec![0.0; algo.workspace_len(&problem, FloatDType::F32)];
            let mut y = vec![0.0f32; 20];
            conv2d_forward(algo, shape, &x, &w, &mut y, &mut ws).unwrap();
            assert_eq!(y, x, "{algo:?}");
        }
    }

    #[test]
    fn metadata_and_errors() {
        let s = Conv2dShape::new(2, 3, 8, 8, 4, 3, 3).with_padding(1, 1);
        let fwd = ConvProblem { pass: ConvPass::Forward, shape: s };
        let bw = ConvProblem { pass: ConvPass::BackwardWeight, shape: s };
        assert_eq!(ConvAlgo::candidates(&fwd).len(), 4);
        assert!(!ConvAlgo::Winograd.is_applicable(&bw));
        assert!(!ConvAlgo::Im2colGemmBatchSplit.is_reproducible(&bw));
        assert!(ConvAlgo::Im2colGemmBatchSplit.is_reproducible(&fwd));
        assert_eq!(ConvAlgo::from_name("winograd_f2x3"), Some(ConvAlgo::Winograd));
        let mut gw = vec![0.0f32; s.w_len()];
        let err = conv2d_backward_weight(
            ConvAlgo::Winograd,
            s,
            &vec![0.0; s.x_len()],
            &vec![0.0; s.y_len()],
            &mut gw,
            &mut [],
        )
        .unwrap_err();
        assert!(matches!(err, KernelError::NotApplicable { algo: "winograd_f2x3", .. }), "{err}");
        let err =
            conv2d_forward(ConvAlgo::Im2colGemm, s, &vec![0.0; s.x_len()], &gw, &mut [0.0; 3], &mut []).unwrap_err();
        assert!(matches!(err, KernelError::LengthMismatch { operand: "y", .. }), "{err}");
        let tiny = Conv2dShape::new(1, 1, 2, 2, 1, 3, 3);
        assert!(conv2d_forward::<f32>(ConvAlgo::Direct, tiny, &[0.0; 4], &[0.0; 9], &mut [], &mut []).is_err());
    }
}
