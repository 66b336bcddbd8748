//! Convolutions on CUDA: cuDNN's algorithms when cuDNN loads, and vramlab's own
//! im2col + cuBLAS, which needs nothing but cuBLAS and NVRTC.
//!
//! NCHW, dilation 1, one group; forward, backward-data and backward-weight, in
//! f32, f16 and bf16, always accumulating in f32 (cuDNN's compute type `FLOAT`).
//!
//! **Choosing an algorithm** (the process-wide [`crate::autotune`] modes):
//! - `off` (`cudnn.benchmark = False`): cuDNN's heuristic, the first usable
//!   algorithm `cudnnGetConvolution*Algorithm_v7` ranks; im2col + cuBLAS when
//!   cuDNN is absent or cannot do the problem.
//! - `benchmark`: on the first call per shape and dtype, cuDNN measures its
//!   algorithms (`cudnnFindConvolution*AlgorithmEx`, with a workspace from the
//!   caching allocator as large as the hungriest algorithm that fits, as
//!   PyTorch's `getMaxWorkspaceSize` sizes it), im2col + cuBLAS is timed with
//!   events (one warm-up and the tuner's timed runs), and the fastest is cached
//!   and recorded by [`crate::autotune`], so suites report it like the CPU's.
//! - `deterministic`: cuDNN's heuristic restricted to algorithms it reports as
//!   deterministic; im2col + cuBLAS is deterministic in every pass.
//!
//! Rankings are asked for once per device, problem, dtype and TF32 switch, as
//! PyTorch caches its algorithm choices. Workspaces, cuDNN's and im2col's, come
//! from the device's caching allocator tagged `workspace`. When a cuDNN
//! algorithm's workspace does not fit, the next candidate in cuDNN's order is
//! tried, as PyTorch does. The runs that tune emit no kernel events (cuDNN's
//! `Find` runs its algorithms out of sight too); the chosen run does.
//!
//! **Timing**: an untimed pass is only queued on stream 0; a timed one
//! (`conv2d_timed`) waits and reports the pass's device time from events.
//!
//! **Math types**, as PyTorch sets them: f16 and bf16 run with tensor-op math;
//! f32 may use TF32 tensor cores while [`cudnn_allow_tf32`] is on
//! (`torch.backends.cudnn.allow_tf32`, on by default) and is pinned to FMA math
//! otherwise. The same switch decides whether the GEMMs of im2col + cuBLAS use
//! TF32, so the candidates compete on equal terms.
//!
//! **im2col + cuBLAS** works on chunks of images whose column buffer fits
//! [`IM2COL_CHUNK_BYTES`] (at least one image):
//! - forward: `col = im2col(x)`, `y[b] = W · col[b]` (one strided-batched GEMM
//!   per chunk, `W` shared with stride 0);
//! - backward data: `col[b] = Wᵀ · gy[b]` into an f32 column buffer, then
//!   `col2im` gathers each input element's contributions in a fixed order and
//!   rounds once;
//! - backward weight: `gw += gy[b] · col[b]ᵀ`, one GEMM per image accumulating
//!   in f32 (in the output for f32, else in an f32 workspace rounded once at the
//!   end).
//!
//! The im2col kernels are [`SOURCE`], compiled with NVRTC once per device.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::cudnn::sys;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use super::backend::CudaBackend;
use super::blas::{Blas, BlasGuard, GemmTypes, RowMajorGemm};
use super::error::{CudaError, CudaResult, DriverContext};
use super::libs::CudaLib;
use crate::alloc::AllocError;
use crate::autotune::{self, RuntimeCandidate, TuneMode};
use crate::backend::KernelTiming;
use crate::cpu_kernels::{self, Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, KernelCall};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::Tag;
use crate::storage::{Storage, current_tag};

/// The im2col kernels' CUDA C source.
pub const SOURCE: &str = r#"
// vramlab's kernels for the im2col + cuBLAS convolution (engine/runtime/src/cuda/conv.rs),
// compiled with NVRTC. No header is included: f16 and bf16 travel as their
// 16-bit patterns (im2col only copies them; the conversions from f32 are below).
//
// Layouts (NCHW, dilation 1, one group): x [B, C, H, W]; the column buffer
// [B, C*R*S, OH*OW], row (c*R + r)*S + s, column oh*OW + ow; weights [K, C*R*S].

template <typename T>
__device__ void im2col(const T* __restrict__ x, T* __restrict__ col, int C, int H, int W, int R, int S, int SH,
                       int SW, int PH, int PW, int OH, int OW, long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        long long t = i;
        int ow = (int)(t % OW); t /= OW;
        int oh = (int)(t % OH); t /= OH;
        int s = (int)(t % S); t /= S;
        int r = (int)(t % R); t /= R;
        int c = (int)(t % C);
        long long b = t / C;
        int ih = oh * SH - PH + r;
        int iw = ow * SW - PW + s;
        T v = T(0);
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            v = x[((b * C + c) * H + ih) * (long long)W + iw];
        }
        col[i] = v;
    }
}

extern "C" __global__ void im2col_f32(const float* x, float* col, int C, int H, int W, int R, int S, int SH, int SW,
                                      int PH, int PW, int OH, int OW, long long total) {
    im2col<float>(x, col, C, H, W, R, S, SH, SW, PH, PW, OH, OW, total);
}

extern "C" __global__ void im2col_16(const unsigned short* x, unsigned short* col, int C, int H, int W, int R, int S,
                                     int SH, int SW, int PH, int PW, int OH, int OW, long long total) {
    im2col<unsigned short>(x, col, C, H, W, R, S, SH, SW, PH, PW, OH, OW, total);
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }

struct F16 { unsigned short bits; };
struct BF16 { unsigned short bits; };

__device__ __forceinline__ void store(F16* p, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    p->bits = h;
}

// Round to nearest even; NaN stays NaN (quiet), as the `half` crate rounds.
__device__ __forceinline__ void store(BF16* p, float v) {
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p->bits = (unsigned short)((u >> 16) | 0x0040u);
    } else {
        p->bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

// The gradient of im2col: every input element gathers (in a fixed order, so the
// sum is reproducible) the column entries it was copied to, from an f32 column
// buffer, and is rounded once.
template <typename T>
__device__ void col2im(const float* __restrict__ col, T* __restrict__ gx, int C, int H, int W, int R, int S, int SH,
                       int SW, int PH, int PW, int OH, int OW, long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        long long t = i;
        int w = (int)(t % W); t /= W;
        int h = (int)(t % H); t /= H;
        int c = (int)(t % C);
        long long b = t / C;
        const float* base = col + (b * C + c) * (long long)R * S * OH * OW;
        float acc = 0.0f;
        for (int r = 0; r < R; ++r) {
            int y = h + PH - r;
            if (y < 0 || y % SH != 0) continue;
            int oh = y / SH;
            if (oh >= OH) continue;
            for (int s = 0; s < S; ++s) {
                int xx = w + PW - s;
                if (xx < 0 || xx % SW != 0) continue;
                int ow = xx / SW;
                if (ow >= OW) continue;
                acc += base[((long long)(r * S + s) * OH + oh) * OW + ow];
            }
        }
        store(gx + i, acc);
    }
}

extern "C" __global__ void col2im_f32(const float* col, float* gx, int C, int H, int W, int R, int S, int SH, int SW,
                                      int PH, int PW, int OH, int OW, long long total) {
    col2im<float>(col, gx, C, H, W, R, S, SH, SW, PH, PW, OH, OW, total);
}

extern "C" __global__ void col2im_f16(const float* col, F16* gx, int C, int H, int W, int R, int S, int SH, int SW,
                                      int PH, int PW, int OH, int OW, long long total) {
    col2im<F16>(col, gx, C, H, W, R, S, SH, SW, PH, PW, OH, OW, total);
}

extern "C" __global__ void col2im_bf16(const float* col, BF16* gx, int C, int H, int W, int R, int S, int SH, int SW,
                                       int PH, int PW, int OH, int OW, long long total) {
    col2im<BF16>(col, gx, C, H, W, R, S, SH, SW, PH, PW, OH, OW, total);
}

// Rounds an f32 accumulator (the weight gradient of f16/bf16 operands) once.
template <typename T>
__device__ void round_from_f32(const float* __restrict__ x, T* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        store(y + i, x[i]);
    }
}

extern "C" __global__ void f32_to_f16(const float* x, F16* y, long long n) { round_from_f32<F16>(x, y, n); }

extern "C" __global__ void f32_to_bf16(const float* x, BF16* y, long long n) { round_from_f32<BF16>(x, y, n); }
"#;

/// The im2col candidate's name in kernel events and the autotuner.
pub const IM2COL_CUBLAS: &str = "im2col_cublas";

/// Column buffers of im2col + cuBLAS hold this many bytes at most (but always
/// at least one image's).
pub const IM2COL_CHUNK_BYTES: usize = 64 << 20;

/// Threads per block of the im2col kernels.
const BLOCK: u32 = 256;

/// Grid-stride loops cover the rest beyond this many blocks.
const MAX_BLOCKS: u64 = 65_536;

static CUDNN_ALLOW_TF32: AtomicBool = AtomicBool::new(true);

/// `torch.backends.cudnn.allow_tf32 = on`: f32 convolutions on CUDA may use TF32
/// tensor cores. Process-wide; on by default, as in PyTorch.
pub fn set_cudnn_allow_tf32(on: bool) {
    CUDNN_ALLOW_TF32.store(on, Ordering::Relaxed);
}

/// Whether f32 convolutions on CUDA may use TF32 ([`set_cudnn_allow_tf32`]).
pub fn cudnn_allow_tf32() -> bool {
    CUDNN_ALLOW_TF32.load(Ordering::Relaxed)
}

/// The cuDNN version convolutions on `device` use (`cudnnGetVersion`, `91000`
/// for 9.10.0), or why they run without it (on im2col + cuBLAS alone). `None`
/// on a host device.
pub fn cudnn_version(device: &Device) -> Option<std::result::Result<usize, CudaError>> {
    let backend = device.cuda()?;
    Some(match backend.dnn.get_or_init(|| Dnn::new(backend)) {
        Ok(_) => Ok(cudarc::cudnn::result::get_version()),
        Err(e) => Err(e.clone()),
    })
}

// ---------------------------------------------------------------------------
// The im2col kernels.

/// The compiled im2col kernels of one device.
pub(crate) struct ConvKernels {
    im2col_f32: CudaFunction,
    im2col_16: CudaFunction,
    col2im_f32: CudaFunction,
    col2im_f16: CudaFunction,
    col2im_bf16: CudaFunction,
    f32_to_f16: CudaFunction,
    f32_to_bf16: CudaFunction,
}

/// Compiles [`SOURCE`] to PTX for a virtual architecture (`compute_90`).
pub fn compile(arch: &str) -> CudaResult<Ptx> {
    CudaLib::Nvrtc.require()?;
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}")],
        name: Some("conv_kernels.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(SOURCE, opts).map_err(|e| CudaError::Compile {
        source_name: "conv_kernels.cu",
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })
}

impl ConvKernels {
    /// The device's kernels, compiled on first use. Keyed by ordinal: devices of
    /// one ordinal share its primary context, where modules live.
    fn of(backend: &CudaBackend) -> CudaResult<Arc<ConvKernels>> {
        type Table = Mutex<HashMap<u32, CudaResult<Arc<ConvKernels>>>>;
        static TABLE: OnceLock<Table> = OnceLock::new();
        // Held while compiling, so two threads do not compile the same source.
        let mut table = TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let ordinal = backend.info().ordinal;
        if let Some(k) = table.get(&ordinal) {
            return k.clone();
        }
        let made = ConvKernels::load(backend);
        table.insert(ordinal, made.clone());
        made
    }

    fn load(backend: &CudaBackend) -> CudaResult<Arc<ConvKernels>> {
        let (major, minor) = backend.info().compute_capability;
        let ptx = compile(&format!("compute_{major}{minor}"))?;
        let module = backend.context().load_module(ptx).during("loading the im2col kernels")?;
        let f = |name: &str| module.load_function(name).during("loading an im2col kernel");
        Ok(Arc::new(ConvKernels {
            im2col_f32: f("im2col_f32")?,
            im2col_16: f("im2col_16")?,
            col2im_f32: f("col2im_f32")?,
            col2im_f16: f("col2im_f16")?,
            col2im_bf16: f("col2im_bf16")?,
            f32_to_f16: f("f32_to_f16")?,
            f32_to_bf16: f("f32_to_bf16")?,
        }))
    }
}

/// A grid of [`BLOCK`]-thread blocks for `total` elements (grid-stride beyond
/// [`MAX_BLOCKS`]).
fn launch_config(total: u64) -> LaunchConfig {
    let blocks = total.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// A convolution's sizes as the kernels and cuDNN take them (32-bit ints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dims {
    n: i32,
    c: i32,
    h: i32,
    w: i32,
    k: i32,
    r: i32,
    s: i32,
    sh: i32,
    sw: i32,
    ph: i32,
    pw: i32,
    oh: i32,
    ow: i32,
}

impl Dims {
    /// `None` when a size, or a per-image size of a GEMM, exceeds 32 bits.
    fn of(s: &Conv2dShape) -> Option<Dims> {
        let int = |v: usize| i32::try_from(v).ok();
        let d = Dims {
            n: int(s.n)?,
            c: int(s.c)?,
            h: int(s.h)?,
            w: int(s.w)?,
            k: int(s.k)?,
            r: int(s.r)?,
            s: int(s.s)?,
            sh: int(s.stride.0)?,
            sw: int(s.stride.1)?,
            ph: int(s.pad.0)?,
            pw: int(s.pad.1)?,
            oh: int(s.out_h())?,
            ow: int(s.out_w())?,
        };
        int(s.c.checked_mul(s.r)?.checked_mul(s.s)?)?;
        int(s.out_h().checked_mul(s.out_w())?)?;
        Some(d)
    }

    fn crs(&self) -> usize {
        self.c as usize * self.r as usize * self.s as usize
    }

    fn ohw(&self) -> usize {
        self.oh as usize * self.ow as usize
    }

    fn chw(&self) -> usize {
        self.c as usize * self.h as usize * self.w as usize
    }
}

/// Images per chunk of im2col + cuBLAS: as many as fit [`IM2COL_CHUNK_BYTES`]
/// of column buffer, at least one, at most the batch.
fn images_per_chunk(n: usize, column_bytes_per_image: usize) -> usize {
    (IM2COL_CHUNK_BYTES / column_bytes_per_image.max(1)).clamp(1, n.max(1))
}

/// The workspaces of one im2col + cuBLAS pass.
struct Im2colWorkspace {
    /// The column buffer: `chunk` images, in the operands' dtype (f32 for
    /// backward data).
    col: Storage,
    /// The f32 accumulator of a 16-bit weight gradient.
    acc: Option<Storage>,
    chunk: usize,
}

impl Im2colWorkspace {
    fn new(device: &Device, pass: ConvPass, d: &Dims, dtype: DType) -> Result<Im2colWorkspace> {
        let col_dtype = if pass == ConvPass::BackwardData { DType::F32 } else { dtype };
        let per_image = d.crs() * d.ohw();
        let chunk = images_per_chunk(d.n as usize, per_image * col_dtype.size_bytes());
        let scratch = |len: usize, dt: DType| Storage::new(device, len, dt, Some(Tag::Workspace));
        let col = scratch(chunk * per_image, col_dtype)?;
        let acc = if pass == ConvPass::BackwardWeight && dtype != DType::F32 {
            Some(scratch(d.k as usize * d.crs(), DType::F32)?)
        } else {
            None
        };
        Ok(Im2colWorkspace { col, acc, chunk })
    }
}

/// A buffer of an im2col + cuBLAS pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Buf {
    /// The first input: x (forward, backward weight) or w (backward data).
    A,
    /// The second input: w (forward) or gy (backward passes).
    B,
    Out,
    /// The column buffer: the operands' dtype, f32 for backward data.
    Col,
    /// The f32 accumulator of a 16-bit weight gradient.
    Acc,
}

/// An element of a buffer: `offset` counts elements of the buffer's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct At {
    buf: Buf,
    offset: usize,
}

fn at(buf: Buf, offset: usize) -> At {
    At { buf, offset }
}

/// One step of an im2col + cuBLAS pass, in queue order.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Columns of `images` images from `x` into the column buffer's start.
    Im2col { x: At, images: usize },
    /// `c = op(a)·op(b) + beta·c`; `f32_out`: `c` holds f32 (else the dtype).
    Gemm { g: RowMajorGemm, a: At, b: At, c: At, f32_out: bool, beta: f32 },
    /// `images` images of the input gradient at `gx` from the (f32) column buffer.
    Col2im { gx: At, images: usize },
    /// The output from the f32 accumulator, `len` elements, rounded once.
    Round { len: usize },
}

/// The steps of one im2col + cuBLAS pass over chunks of `chunk` images; `acc`:
/// a 16-bit weight gradient accumulates in [`Buf::Acc`].
fn im2col_plan(pass: ConvPass, d: &Dims, chunk: usize, acc: bool) -> Vec<Step> {
    let (n, crs, ohw, chw, k) = (d.n as usize, d.crs(), d.ohw(), d.chw(), d.k as usize);
    let chunk = chunk.max(1);
    let mut steps = Vec::new();
    for b0 in (0..n).step_by(chunk) {
        let images = chunk.min(n - b0);
        match pass {
            ConvPass::Forward => {
                // y[b] (k × ohw) = w (k × crs) · col[b] (crs × ohw).
                steps.push(Step::Im2col { x: at(Buf::A, b0 * chw), images });
                let g = RowMajorGemm {
                    batch: images,
                    m: k,
                    n: ohw,
                    k: crs,
                    trans_a: false,
                    trans_b: false,
                    stride_a: 0,
                    stride_b: crs * ohw,
                    stride_c: k * ohw,
                };
                let (a, b, c) = (at(Buf::B, 0), at(Buf::Col, 0), at(Buf::Out, b0 * k * ohw));
                steps.push(Step::Gemm { g, a, b, c, f32_out: false, beta: 0.0 });
            }
            ConvPass::BackwardData => {
                // col[b] (crs × ohw) = wᵀ (w stored k × crs) · gy[b] (k × ohw).
                let g = RowMajorGemm {
                    batch: images,
                    m: crs,
                    n: ohw,
                    k,
                    trans_a: true,
                    trans_b: false,
                    stride_a: 0,
                    stride_b: k * ohw,
                    stride_c: crs * ohw,
                };
                let (a, b, c) = (at(Buf::A, 0), at(Buf::B, b0 * k * ohw), at(Buf::Col, 0));
                steps.push(Step::Gemm { g, a, b, c, f32_out: true, beta: 0.0 });
                steps.push(Step::Col2im { gx: at(Buf::Out, b0 * chw), images });
            }
            ConvPass::BackwardWeight => {
                // gw (k × crs) += gy[b] (k × ohw) · col[b]ᵀ (col stored crs × ohw).
                steps.push(Step::Im2col { x: at(Buf::A, b0 * chw), images });
                for j in 0..images {
                    let g = RowMajorGemm {
                        batch: 1,
                        m: k,
                        n: crs,
                        k: ohw,
                        trans_a: false,
                        trans_b: true,
                        stride_a: k * ohw,
                        stride_b: crs * ohw,
                        stride_c: k * crs,
                    };
                    let (a, b) = (at(Buf::B, (b0 + j) * k * ohw), at(Buf::Col, j * crs * ohw));
                    let c = at(if acc { Buf::Acc } else { Buf::Out }, 0);
                    let beta = if b0 == 0 && j == 0 { 0.0 } else { 1.0 };
                    steps.push(Step::Gemm { g, a, b, c, f32_out: true, beta });
                }
            }
        }
    }
    if pass == ConvPass::BackwardWeight && acc {
        steps.push(Step::Round { len: k * crs });
    }
    steps
}

/// Queues one im2col + cuBLAS pass on `stream` (stream 0, the handle's):
/// `a`, `b` are (x, w) forward, (w, gy) backward data, (x, gy) backward weight.
#[allow(clippy::too_many_arguments)]
fn run_im2col(
    kernels: &ConvKernels,
    blas: &BlasGuard<'_>,
    stream: &CudaStream,
    pass: ConvPass,
    d: &Dims,
    dtype: cpu_kernels::FloatDType,
    (a, b, out): (u64, u64, u64),
    ws: &Im2colWorkspace,
) -> CudaResult<()> {
    let op = pass.kernel_name();
    let es = dtype.size_bytes() as u64;
    let col_es = if pass == ConvPass::BackwardData { 4 } else { es };
    let col = ws.col.addr();
    let acc = ws.acc.as_ref().map_or(0, Storage::addr);
    let addr = |p: At| {
        let (base, size) = match p.buf {
            Buf::A => (a, es),
            Buf::B => (b, es),
            Buf::Out => (out, es),
            Buf::Col => (col, col_es),
            Buf::Acc => (acc, 4),
        };
        base + p.offset as u64 * size
    };
    let tf32 = cudnn_allow_tf32();
    let dims = [&d.c, &d.h, &d.w, &d.r, &d.s, &d.sh, &d.sw, &d.ph, &d.pw, &d.oh, &d.ow];
    for step in im2col_plan(pass, d, ws.chunk, ws.acc.is_some()) {
        match step {
            Step::Im2col { x, images } => {
                let f = if dtype == cpu_kernels::FloatDType::F32 { &kernels.im2col_f32 } else { &kernels.im2col_16 };
                let (x, total) = (addr(x), (images * d.crs() * d.ohw()) as i64);
                let mut l = stream.launch_builder(f);
                l.arg(&x).arg(&col);
                for v in dims {
                    l.arg(v);
                }
                l.arg(&total);
                // SAFETY: `x` holds `images` images and the column buffer room
                // for their columns; the arguments match the kernel's parameters.
                unsafe { l.launch(launch_config(total as u64)) }.during("launching im2col")?;
            }
            Step::Gemm { g, a, b, c, f32_out, beta } => {
                let cm = g
                    .column_major()
                    .ok_or(CudaError::Cublas { op, status: "a GEMM dimension exceeds 32 bits".into() })?;
                let output = if f32_out { cpu_kernels::FloatDType::F32 } else { dtype };
                let types = GemmTypes { inputs: dtype, output, tf32 };
                // SAFETY: the buffers are live allocations of this device, sized
                // by the caller for the plan's dims.
                unsafe { blas.gemm(op, &cm, types, (addr(a), addr(b), addr(c)), beta) }?;
            }
            Step::Col2im { gx, images } => {
                let f = match dtype {
                    cpu_kernels::FloatDType::F32 => &kernels.col2im_f32,
                    cpu_kernels::FloatDType::F16 => &kernels.col2im_f16,
                    cpu_kernels::FloatDType::BF16 => &kernels.col2im_bf16,
                };
                let (gx, total) = (addr(gx), (images * d.chw()) as i64);
                let mut l = stream.launch_builder(f);
                l.arg(&col).arg(&gx);
                for v in dims {
                    l.arg(v);
                }
                l.arg(&total);
                // SAFETY: the column buffer holds the images' f32 columns and
                // `gx` room for the images.
                unsafe { l.launch(launch_config(total as u64)) }.during("launching col2im")?;
            }
            Step::Round { len } => {
                let f = if dtype == cpu_kernels::FloatDType::F16 { &kernels.f32_to_f16 } else { &kernels.f32_to_bf16 };
                let len = len as i64;
                let mut l = stream.launch_builder(f);
                l.arg(&acc).arg(&out).arg(&len);
                // SAFETY: the accumulator holds `len` f32, the output `len` 16-bit values.
                unsafe { l.launch(launch_config(len as u64)) }.during("rounding the weight gradient")?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// cuDNN.

/// A device backend's cuDNN handle (bound to stream 0).
pub struct Dnn {
    handle: usize,
    /// cuDNN handles are for one thread at a time: held around every call.
    lock: Mutex<()>,
}

impl std::fmt::Debug for Dnn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dnn").finish_non_exhaustive()
    }
}

impl Drop for Dnn {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once.
        let _ = unsafe { sys::cudnnDestroy(self.handle as sys::cudnnHandle_t) };
    }
}

impl Dnn {
    fn new(backend: &CudaBackend) -> CudaResult<Dnn> {
        CudaLib::Cudnn.require()?;
        backend.bind()?;
        let handle = cudarc::cudnn::result::create_handle().map_err(|e| CudaError::cudnn("cudnnCreate", e))?;
        let dnn = Dnn { handle: handle as usize, lock: Mutex::new(()) };
        let stream = backend.stream(0);
        // SAFETY: a live handle and the context's default stream.
        unsafe { cudarc::cudnn::result::set_stream(handle, stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| CudaError::cudnn("cudnnSetStream", e))?;
        Ok(dnn)
    }

    /// The backend's handle, made on first use; `None` when cuDNN is not there
    /// (or will not start), which only narrows the choice to im2col + cuBLAS.
    pub(crate) fn of(backend: &CudaBackend) -> Option<&Dnn> {
        backend.dnn.get_or_init(|| Dnn::new(backend)).as_ref().ok()
    }

    /// Exclusive use of the handle.
    fn use_handle(&self) -> (sys::cudnnHandle_t, MutexGuard<'_, ()>) {
        (self.handle as sys::cudnnHandle_t, self.lock.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `cudnnConvolution*AlgoPerf_t` with plain integers where the C struct has
/// enums, so that whatever cuDNN writes is a valid value. Same layout: every
/// field is a 32-bit enum, a float, a `size_t` or ints.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct AlgoPerf {
    algo: u32,
    status: u32,
    time_ms: f32,
    memory: usize,
    determinism: u32,
    math_type: u32,
    reserved: [c_int; 3],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>());
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>());
    assert!(align_of::<AlgoPerf>() == align_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
};

/// `CUDNN_STATUS_SUCCESS`.
const STATUS_SUCCESS: u32 = 0;
/// `CUDNN_DETERMINISTIC`.
const DETERMINISTIC: u32 = 1;

/// cuDNN's algorithms of each pass, by their enum value, as kernel events name them.
const FORWARD_ALGOS: [&str; 8] = [
    "cudnn_implicit_gemm",
    "cudnn_implicit_precomp_gemm",
    "cudnn_gemm",
    "cudnn_direct",
    "cudnn_fft",
    "cudnn_fft_tiling",
    "cudnn_winograd",
    "cudnn_winograd_nonfused",
];
const BACKWARD_DATA_ALGOS: [&str; 6] =
    ["cudnn_algo_0", "cudnn_algo_1", "cudnn_fft", "cudnn_fft_tiling", "cudnn_winograd", "cudnn_winograd_nonfused"];
const BACKWARD_FILTER_ALGOS: [&str; 7] = [
    "cudnn_algo_0",
    "cudnn_algo_1",
    "cudnn_fft",
    "cudnn_algo_3",
    "cudnn_winograd",
    "cudnn_winograd_nonfused",
    "cudnn_fft_tiling",
];

fn algo_names(pass: ConvPass) -> &'static [&'static str] {
    match pass {
        ConvPass::Forward => &FORWARD_ALGOS,
        ConvPass::BackwardData => &BACKWARD_DATA_ALGOS,
        ConvPass::BackwardWeight => &BACKWARD_FILTER_ALGOS,
    }
}

fn fwd_algo(a: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
    use sys::cudnnConvolutionFwdAlgo_t::*;
    Some(match a {
        0 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        1 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        2 => CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        3 => CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        4 => CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        5 => CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        6 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        7 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

fn bwd_data_algo(a: u32) -> Option<sys::cudnnConvolutionBwdDataAlgo_t> {
    use sys::cudnnConvolutionBwdDataAlgo_t::*;
    Some(match a {
        0 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        1 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
        2 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
        3 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
        4 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
        5 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

fn bwd_filter_algo(a: u32) -> Option<sys::cudnnConvolutionBwdFilterAlgo_t> {
    use sys::cudnnConvolutionBwdFilterAlgo_t::*;
    Some(match a {
        0 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
        1 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
        2 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
        3 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
        4 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
        5 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
        6 => CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
        _ => return None,
    })
}

fn math_type(m: u32) -> sys::cudnnMathType_t {
    use sys::cudnnMathType_t::*;
    match m {
        1 => CUDNN_TENSOR_OP_MATH,
        2 => CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
        3 => CUDNN_FMA_MATH,
        _ => CUDNN_DEFAULT_MATH,
    }
}

/// `CUDNN_FMA_MATH`.
const FMA_MATH: u32 = 3;

/// The math type a conv descriptor starts with (PyTorch's
/// `ConvolutionDescriptor::set`): tensor ops for 16-bit types, FMA for f32
/// without TF32, default (TF32 allowed) otherwise.
/// The math a benchmark-mode choice was measured with, in its cache key: a
/// choice measured without TF32 says nothing of the timings with it.
fn math_key(dtype: cpu_kernels::FloatDType, tf32: bool) -> &'static str {
    if dtype == cpu_kernels::FloatDType::F32 && tf32 { "tf32" } else { "full" }
}

fn initial_math(dtype: cpu_kernels::FloatDType, tf32: bool) -> u32 {
    match dtype {
        cpu_kernels::FloatDType::F16 | cpu_kernels::FloatDType::BF16 => 1,
        cpu_kernels::FloatDType::F32 if tf32 => 0,
        cpu_kernels::FloatDType::F32 => FMA_MATH,
    }
}

/// The math type an algorithm runs with: the one cuDNN ranked it with, except
/// that f32 without TF32 stays on FMA math (as PyTorch overrides it).
fn run_math(dtype: cpu_kernels::FloatDType, tf32: bool, ranked: u32) -> u32 {
    if dtype == cpu_kernels::FloatDType::F32 && !tf32 { FMA_MATH } else { ranked }
}

fn cudnn_data_type(d: cpu_kernels::FloatDType) -> sys::cudnnDataType_t {
    match d {
        cpu_kernels::FloatDType::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        cpu_kernels::FloatDType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
        cpu_kernels::FloatDType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
    }
}

/// The four descriptors of one convolution (destroyed on drop).
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created by `new` (null when its creation failed,
        // which cuDNN's destroy functions accept) and is destroyed once.
        unsafe {
            let _ = sys::cudnnDestroyTensorDescriptor(self.x);
            let _ = sys::cudnnDestroyFilterDescriptor(self.w);
            let _ = sys::cudnnDestroyTensorDescriptor(self.y);
            let _ = sys::cudnnDestroyConvolutionDescriptor(self.conv);
        }
    }
}

impl Descriptors {
    fn new(d: &Dims, dtype: cpu_kernels::FloatDType, math: u32) -> std::result::Result<Descriptors, CudaError> {
        use cudarc::cudnn::result as r;
        let err = |op| move |e| CudaError::cudnn(op, e);
        let mut descs = Descriptors {
            x: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        descs.x = r::create_tensor_descriptor().map_err(err("cudnnCreateTensorDescriptor"))?;
        descs.w = r::create_filter_descriptor().map_err(err("cudnnCreateFilterDescriptor"))?;
        descs.y = r::create_tensor_descriptor().map_err(err("cudnnCreateTensorDescriptor"))?;
        descs.conv = r::create_convolution_descriptor().map_err(err("cudnnCreateConvolutionDescriptor"))?;
        let dt = cudnn_data_type(dtype);
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        // SAFETY: live descriptors, set once each.
        unsafe {
            r::set_tensor4d_descriptor(descs.x, nchw, dt, [d.n, d.c, d.h, d.w])
                .map_err(err("cudnnSetTensor4dDescriptor"))?;
            r::set_filter4d_descriptor(descs.w, dt, nchw, [d.k, d.c, d.r, d.s])
                .map_err(err("cudnnSetFilter4dDescriptor"))?;
            r::set_tensor4d_descriptor(descs.y, nchw, dt, [d.n, d.k, d.oh, d.ow])
                .map_err(err("cudnnSetTensor4dDescriptor"))?;
            r::set_convolution2d_descriptor(
                descs.conv,
                d.ph,
                d.pw,
                d.sh,
                d.sw,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .map_err(err("cudnnSetConvolution2dDescriptor"))?;
        }
        descs.set_math(math)?;
        Ok(descs)
    }

    fn set_math(&self, math: u32) -> CudaResult<()> {
        // SAFETY: a live descriptor.
        unsafe { cudarc::cudnn::result::set_convolution_math_type(self.conv, math_type(math)) }
            .map_err(|e| CudaError::cudnn("cudnnSetConvolutionMathType", e))
    }
}

/// The operands of one pass: (x, w, y) forward, (w, gy, gx) backward data,
/// (x, gy, gw) backward weight — inputs first, the output last.
#[derive(Debug, Clone, Copy)]
struct Pointers {
    a: u64,
    b: u64,
    out: u64,
}

impl Dnn {
    /// cuDNN's ranking of its algorithms for the pass (`cudnnGet*Algorithm_v7`),
    /// best first, every algorithm with its status.
    fn ranking(&self, pass: ConvPass, descs: &Descriptors) -> CudaResult<Vec<AlgoPerf>> {
        let count = self.max_count(pass)?.max(algo_names(pass).len() as c_int);
        let (h, _g) = self.use_handle();
        let mut perf = vec![AlgoPerf::default(); count as usize];
        let mut returned: c_int = 0;
        let p = perf.as_mut_ptr();
        // SAFETY: live handle and descriptors; `perf` has room for `count`
        // entries laid out as cuDNN's perf structs (see `AlgoPerf`).
        let status = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnGetConvolutionForwardAlgorithm_v7(
                    h,
                    descs.x,
                    descs.w,
                    descs.conv,
                    descs.y,
                    count,
                    &mut returned,
                    p.cast(),
                ),
                ConvPass::BackwardData => sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    h,
                    descs.w,
                    descs.y,
                    descs.conv,
                    descs.x,
                    count,
                    &mut returned,
                    p.cast(),
                ),
                ConvPass::BackwardWeight => sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    h,
                    descs.x,
                    descs.y,
                    descs.conv,
                    descs.w,
                    count,
                    &mut returned,
                    p.cast(),
                ),
            }
        };
        status.result().map_err(|e| CudaError::cudnn("cudnnGetConvolutionAlgorithm_v7", e))?;
        perf.truncate(returned.clamp(0, count) as usize);
        Ok(perf)
    }

    /// How many results the pass's ranking and measurement can return.
    fn max_count(&self, pass: ConvPass) -> CudaResult<c_int> {
        let (h, _g) = self.use_handle();
        let mut count: c_int = 0;
        // SAFETY: a live handle; `count` is written.
        let status = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnGetConvolutionForwardAlgorithmMaxCount(h, &mut count),
                ConvPass::BackwardData => sys::cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &mut count),
                ConvPass::BackwardWeight => sys::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &mut count),
            }
        };
        status.result().map_err(|e| CudaError::cudnn("cudnnGetConvolutionAlgorithmMaxCount", e))?;
        Ok(count.max(0))
    }

    /// cuDNN's measurement of its algorithms (`cudnnFind*AlgorithmEx`), fastest
    /// first. Overwrites the output; waits for the device.
    fn find(
        &self,
        pass: ConvPass,
        descs: &Descriptors,
        p: Pointers,
        ws: u64,
        ws_bytes: usize,
    ) -> CudaResult<Vec<AlgoPerf>> {
        let count = self.max_count(pass)?.max(algo_names(pass).len() as c_int);
        let mut perf = vec![AlgoPerf::default(); count as usize];
        let mut returned: c_int = 0;
        let (h, _g) = self.use_handle();
        let (a, b, out) = (p.a as *const c_void, p.b as *const c_void, p.out as *mut c_void);
        let (pp, w) = (perf.as_mut_ptr(), ws as *mut c_void);
        // SAFETY: live handle and descriptors; the pointers hold the operands the
        // descriptors describe; the workspace holds `ws_bytes`; `perf` has room
        // for `count` entries laid out as cuDNN's perf structs.
        let status = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnFindConvolutionForwardAlgorithmEx(
                    h,
                    descs.x,
                    a,
                    descs.w,
                    b,
                    descs.conv,
                    descs.y,
                    out,
                    count,
                    &mut returned,
                    pp.cast(),
                    w,
                    ws_bytes,
                ),
                ConvPass::BackwardData => sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
                    h,
                    descs.w,
                    a,
                    descs.y,
                    b,
                    descs.conv,
                    descs.x,
                    out,
                    count,
                    &mut returned,
                    pp.cast(),
                    w,
                    ws_bytes,
                ),
                ConvPass::BackwardWeight => sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
                    h,
                    descs.x,
                    a,
                    descs.y,
                    b,
                    descs.conv,
                    descs.w,
                    out,
                    count,
                    &mut returned,
                    pp.cast(),
                    w,
                    ws_bytes,
                ),
            }
        };
        status.result().map_err(|e| CudaError::cudnn("cudnnFindConvolutionAlgorithmEx", e))?;
        perf.truncate(returned.clamp(0, count) as usize);
        Ok(perf)
    }

    /// The workspace `algo` needs with `math` (`cudnnGet*WorkspaceSize`); sets the
    /// descriptor's math type to `math`.
    fn workspace_bytes(&self, pass: ConvPass, descs: &Descriptors, algo: u32, math: u32) -> CudaResult<usize> {
        descs.set_math(math)?;
        let unknown =
            || CudaError::Cudnn { op: "cudnnGetConvolutionWorkspaceSize", status: format!("unknown algorithm {algo}") };
        let (h, _g) = self.use_handle();
        let mut bytes = 0usize;
        // SAFETY: live handle and descriptors; `bytes` is written.
        let status = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnGetConvolutionForwardWorkspaceSize(
                    h,
                    descs.x,
                    descs.w,
                    descs.conv,
                    descs.y,
                    fwd_algo(algo).ok_or_else(unknown)?,
                    &mut bytes,
                ),
                ConvPass::BackwardData => sys::cudnnGetConvolutionBackwardDataWorkspaceSize(
                    h,
                    descs.w,
                    descs.y,
                    descs.conv,
                    descs.x,
                    bwd_data_algo(algo).ok_or_else(unknown)?,
                    &mut bytes,
                ),
                ConvPass::BackwardWeight => sys::cudnnGetConvolutionBackwardFilterWorkspaceSize(
                    h,
                    descs.x,
                    descs.y,
                    descs.conv,
                    descs.w,
                    bwd_filter_algo(algo).ok_or_else(unknown)?,
                    &mut bytes,
                ),
            }
        };
        status.result().map_err(|e| CudaError::cudnn("cudnnGetConvolutionWorkspaceSize", e))?;
        Ok(bytes)
    }

    /// Queues `algo` on the handle's stream. The descriptor's math type must be
    /// the one the workspace was sized for.
    fn run(
        &self,
        pass: ConvPass,
        descs: &Descriptors,
        algo: u32,
        p: Pointers,
        ws: u64,
        ws_bytes: usize,
    ) -> CudaResult<()> {
        let unknown = || CudaError::Cudnn { op: pass.kernel_name(), status: format!("unknown algorithm {algo}") };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (al, be) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
        let (a, b, out) = (p.a as *const c_void, p.b as *const c_void, p.out as *mut c_void);
        let w = ws as *mut c_void;
        let (h, _g) = self.use_handle();
        // SAFETY: live handle and descriptors; the pointers hold the operands the
        // descriptors describe and `ws_bytes` of workspace; alpha and beta are
        // f32, cuDNN's scaling type for FLOAT compute.
        let status = unsafe {
            match pass {
                ConvPass::Forward => sys::cudnnConvolutionForward(
                    h,
                    al,
                    descs.x,
                    a,
                    descs.w,
                    b,
                    descs.conv,
                    fwd_algo(algo).ok_or_else(unknown)?,
                    w,
                    ws_bytes,
                    be,
                    descs.y,
                    out,
                ),
                ConvPass::BackwardData => sys::cudnnConvolutionBackwardData(
                    h,
                    al,
                    descs.w,
                    a,
                    descs.y,
                    b,
                    descs.conv,
                    bwd_data_algo(algo).ok_or_else(unknown)?,
                    w,
                    ws_bytes,
                    be,
                    descs.x,
                    out,
                ),
                ConvPass::BackwardWeight => sys::cudnnConvolutionBackwardFilter(
                    h,
                    al,
                    descs.x,
                    a,
                    descs.y,
                    b,
                    descs.conv,
                    bwd_filter_algo(algo).ok_or_else(unknown)?,
                    w,
                    ws_bytes,
                    be,
                    descs.w,
                    out,
                ),
            }
        };
        status.result().map_err(|e| CudaError::cudnn(pass.kernel_name(), e))
    }
}

// ---------------------------------------------------------------------------
// Candidates and the choice.

/// How one candidate computes the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// A cuDNN algorithm (its enum value) and the math type it runs with.
    Cudnn {
        algo: u32,
        math: u32,
    },
    Im2colCublas,
}

/// One algorithm the autotuner may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Candidate {
    method: Method,
    name: &'static str,
    reproducible: bool,
    /// Workspace cuDNN ranked it with (0 for im2col: sized separately).
    workspace_bytes: usize,
}

/// The candidates for a pass: cuDNN's usable algorithms in its ranking's order
/// (each once, with the math type of its best-ranked entry), then im2col +
/// cuBLAS when `im2col` (its libraries are there). Without cuDNN (an empty
/// ranking) only im2col + cuBLAS. The heuristic's choice is the first.
fn candidates(
    pass: ConvPass,
    ranking: &[AlgoPerf],
    dtype: cpu_kernels::FloatDType,
    tf32: bool,
    im2col: bool,
) -> Vec<Candidate> {
    let names = algo_names(pass);
    let mut out: Vec<Candidate> = Vec::new();
    for p in ranking {
        let Some(&name) = names.get(p.algo as usize) else { continue };
        if p.status != STATUS_SUCCESS || out.iter().any(|c| c.name == name) {
            continue;
        }
        out.push(Candidate {
            method: Method::Cudnn { algo: p.algo, math: run_math(dtype, tf32, p.math_type) },
            name,
            reproducible: p.determinism == DETERMINISTIC,
            workspace_bytes: p.memory,
        });
    }
    if im2col {
        out.push(Candidate {
            method: Method::Im2colCublas,
            name: IM2COL_CUBLAS,
            reproducible: true,
            workspace_bytes: 0,
        });
    }
    out
}

/// cuDNN's rankings, per device ordinal, problem, dtype and TF32 switch (what
/// PyTorch's algorithm cache holds in off mode): a ranking is asked for once.
fn cached_ranking(
    backend: &CudaBackend,
    dnn: &Dnn,
    problem: ConvProblem,
    dtype: cpu_kernels::FloatDType,
    tf32: bool,
    descs: &Descriptors,
) -> CudaResult<Vec<AlgoPerf>> {
    type Key = (u32, ConvProblem, cpu_kernels::FloatDType, bool);
    static RANKINGS: OnceLock<Mutex<HashMap<Key, Vec<AlgoPerf>>>> = OnceLock::new();
    let rankings = RANKINGS.get_or_init(Default::default);
    let key = (backend.info().ordinal, problem, dtype, tf32);
    if let Some(r) = rankings.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(r.clone());
    }
    let ranking = dnn.ranking(problem.pass, descs)?;
    rankings.lock().unwrap_or_else(|e| e.into_inner()).insert(key, ranking.clone());
    Ok(ranking)
}

/// The workspace `cudnnFind*AlgorithmEx` gets (PyTorch's `getMaxWorkspaceSize`):
/// the largest that a candidate needs and that is no larger than the largest
/// block the device could hand out (`max_block`: free device memory, or the
/// largest cached free block if larger).
fn find_workspace_bytes(candidates: &[Candidate], max_block: u64) -> usize {
    candidates
        .iter()
        .filter(|c| matches!(c.method, Method::Cudnn { .. }))
        .map(|c| c.workspace_bytes)
        .filter(|&b| b > 0 && b as u64 <= max_block)
        .max()
        .unwrap_or(0)
}

/// cuDNN's measured time of each candidate, from a `Find` result: the fastest
/// successful entry of the candidate's algorithm with its math type, else with
/// any math type. In candidates' order; no entry: an empty run list.
fn found_runs(candidates: &[Candidate], found: &[AlgoPerf]) -> Vec<Vec<u64>> {
    let ok = |p: &&AlgoPerf| p.status == STATUS_SUCCESS && p.time_ms >= 0.0;
    candidates
        .iter()
        .map(|c| match c.method {
            Method::Cudnn { algo, math } => found
                .iter()
                .filter(ok)
                .find(|p| p.algo == algo && p.math_type == math)
                .or_else(|| found.iter().filter(ok).find(|p| p.algo == algo))
                .map(|p| vec![(f64::from(p.time_ms) * 1e6) as u64])
                .unwrap_or_default(),
            Method::Im2colCublas => Vec::new(),
        })
        .collect()
}

/// The order in which candidates are tried when a workspace does not fit: the
/// choice first, then the others in cuDNN's order (reproducible ones only in
/// deterministic mode).
fn fallback_order(candidates: &[Candidate], chosen: usize, deterministic: bool) -> Vec<usize> {
    std::iter::once(chosen)
        .chain((0..candidates.len()).filter(|&i| i != chosen && (!deterministic || candidates[i].reproducible)))
        .collect()
}

/// Work to queue on a stream.
type Launch<'a> = &'a mut dyn FnMut(&CudaStream) -> CudaResult<()>;

/// Queues a [`Launch`] inside a kernel event or timing events, and returns the
/// device time it measured (0 when not timed).
type Bracket<'a> = dyn Fn(Launch<'_>) -> Result<u64> + 'a;

/// A candidate ready to run: its workspace allocated.
enum Prepared<'a> {
    Cudnn { dnn: &'a Dnn, descs: &'a Descriptors, algo: u32, workspace: Storage, bytes: usize },
    Im2col(Im2colWorkspace),
}

fn is_out_of_memory(e: &TensorError) -> bool {
    matches!(e, TensorError::Alloc(AllocError::OutOfMemory(_)))
}

/// A scratch buffer of at least `bytes` bytes from the device's allocator, tagged `workspace`.
fn workspace(device: &Device, bytes: usize) -> Result<Storage> {
    Storage::new(device, bytes.div_ceil(4), DType::F32, Some(Tag::Workspace))
}

/// One convolution pass on CUDA for the backend: `a`, `b` are (x, w)
/// forward, (w, gy) backward data, (x, gy) backward weight, on `backend`'s
/// device, checked. With `timed`, waits and returns the pass's device time;
/// otherwise queues it and returns 0 ns.
pub(crate) fn conv_pass(
    backend: &Arc<CudaBackend>,
    pass: ConvPass,
    shape: Conv2dShape,
    a: &Storage,
    b: &Storage,
    timed: bool,
) -> Result<(Storage, KernelTiming)> {
    let op = pass.kernel_name();
    let cuda = |source| TensorError::Cuda { op, source };
    let device = &a.device;
    let dtype = a.dtype.float().ok_or(TensorError::UnsupportedDType {
        op,
        dtype: a.dtype,
        reason: "conv2d needs a float dtype",
    })?;
    let out_dims = match pass {
        ConvPass::Forward => [shape.n, shape.k, shape.out_h(), shape.out_w()],
        ConvPass::BackwardData => [shape.n, shape.c, shape.h, shape.w],
        ConvPass::BackwardWeight => [shape.k, shape.c, shape.r, shape.s],
    };
    let out = Storage::new(device, out_dims.iter().product(), a.dtype, current_tag())?;
    let call = KernelCall::Conv2d { pass, shape, dtype };
    // Queues `launch` as one kernel event; with `timed`, waits for it.
    let run = |name: &'static str, launch: Launch<'_>| -> Result<u64> {
        let mut kernel = || backend.run_kernel(op, name, 0, call, &mut *launch);
        let took = if timed { backend.time_on_device(0, |_| kernel()) } else { kernel().map(|()| 0) };
        took.map_err(cuda)
    };
    if out.len == 0 {
        return Ok((out, KernelTiming { algorithm: "none", duration_ns: 0 }));
    }
    let d = Dims::of(&shape).ok_or_else(|| TensorError::BadShape {
        op,
        shape: out_dims.to_vec(),
        reason: "a size exceeds the 32 bits cuDNN and the im2col kernels index with".into(),
    })?;
    // A sum over nothing (no channels, filters or images to reduce over) is 0.
    let empty_sum = match pass {
        ConvPass::Forward => shape.c == 0,
        ConvPass::BackwardData => shape.k == 0,
        ConvPass::BackwardWeight => shape.n == 0,
    };
    if empty_sum {
        let (ptr, bytes) = (out.addr(), out.size_bytes());
        let took = run("fill_zero", &mut |s| {
            // SAFETY: the output's live allocation of `bytes` bytes.
            unsafe { cudarc::driver::result::memset_d8_async(ptr, 0, bytes, s.cu_stream()) }
                .during("zero-filling a convolution over nothing")
        })?;
        return Ok((out, KernelTiming { algorithm: "fill_zero", duration_ns: took }));
    }
    let tf32 = cudnn_allow_tf32();
    let p = Pointers { a: a.addr(), b: b.addr(), out: out.addr() };

    let problem = ConvProblem { pass, shape };
    // cuDNN's candidates; none when it is absent or cannot describe the problem.
    let cudnn = Dnn::of(backend).and_then(|dnn| {
        backend.bind().ok()?;
        let descs = Descriptors::new(&d, dtype, initial_math(dtype, tf32)).ok()?;
        let ranking = cached_ranking(backend, dnn, problem, dtype, tf32, &descs).ok()?;
        Some((dnn, descs, ranking))
    });
    let ranking = cudnn.as_ref().map_or(&[][..], |(_, _, r)| r.as_slice());
    // im2col + cuBLAS needs NVRTC (for its kernels) and cuBLAS.
    let own = CudaLib::Nvrtc.require().and_then(|()| CudaLib::Cublas.require());
    let cands = candidates(pass, ranking, dtype, tf32, own.is_ok());
    if cands.is_empty() {
        return Err(cuda(
            own.err()
                .unwrap_or(CudaError::Cudnn { op, status: "cuDNN offers no algorithm for this convolution".into() }),
        ));
    }
    let runtime: Vec<RuntimeCandidate> =
        cands.iter().map(|c| RuntimeCandidate { name: c.name, reproducible: c.reproducible }).collect();

    let prepare = |i: usize| -> Result<Prepared<'_>> {
        match (cands[i].method, &cudnn) {
            (Method::Cudnn { algo, math }, Some((dnn, descs, _))) => {
                let bytes = dnn.workspace_bytes(pass, descs, algo, math).map_err(cuda)?;
                Ok(Prepared::Cudnn { dnn, descs, algo, workspace: workspace(device, bytes)?, bytes })
            }
            _ => Ok(Prepared::Im2col(Im2colWorkspace::new(device, pass, &d, a.dtype)?)),
        }
    };
    // Queues the im2col + cuBLAS pass on stream 0 (the caller brackets it).
    let im2col = |ws: &Im2colWorkspace, timing: &Bracket<'_>| {
        let kernels = ConvKernels::of(backend).map_err(cuda)?;
        let blas = Blas::of(backend).map_err(cuda)?.lock(device)?;
        timing(&mut |s| run_im2col(&kernels, &blas, s, pass, &d, dtype, (p.a, p.b, p.out), ws))
    };

    let chosen = autotune::global().choose_runtime(
        device,
        ConvAlgo::OP,
        &(problem, math_key(dtype, tf32)),
        dtype,
        &runtime,
        0,
        || {
            let mut runs = vec![Vec::new(); cands.len()];
            if let Some((dnn, descs, _)) = &cudnn {
                let allocator = device.allocator();
                let max_block = allocator.mem_info().free_bytes.max(allocator.largest_free_block());
                let want = find_workspace_bytes(&cands, max_block);
                let (scratch, bytes) = match workspace(device, want) {
                    Ok(t) => (t, want),
                    // Find then measures the algorithms that need none.
                    Err(e) if is_out_of_memory(&e) => (workspace(device, 0)?, 0),
                    Err(e) => return Err(e),
                };
                let found = dnn.find(pass, descs, p, scratch.addr(), bytes).map_err(cuda)?;
                runs = found_runs(&cands, &found);
            }
            // im2col + cuBLAS: one warm-up, then the tuner's timed runs, by events.
            let last = cands.len() - 1;
            if cands[last].method != Method::Im2colCublas {
                // Its libraries are missing: cuDNN's algorithms only.
                return Ok(runs);
            }
            let ws = match prepare(last) {
                Ok(Prepared::Im2col(ws)) => ws,
                Ok(Prepared::Cudnn { .. }) => return Ok(runs),
                // No room for its column buffer: it does not run.
                Err(e) if is_out_of_memory(&e) => return Ok(runs),
                Err(e) => return Err(e),
            };
            let by_events = |launch: Launch<'_>| backend.time_on_device(0, |s| launch(s)).map_err(cuda);
            let timed_runs = autotune::global().timed_runs();
            im2col(&ws, &by_events)?;
            runs[last] = (0..timed_runs).map(|_| im2col(&ws, &by_events)).collect::<Result<Vec<u64>>>()?;
            Ok(runs)
        },
    )?;

    let deterministic = autotune::global().mode() == TuneMode::Deterministic;
    let mut first_oom = None;
    for i in fallback_order(&cands, chosen, deterministic) {
        let name = cands[i].name;
        let took = match prepare(i) {
            Ok(Prepared::Cudnn { dnn, descs, algo, workspace, bytes }) => {
                run(name, &mut |_| dnn.run(pass, descs, algo, p, workspace.addr(), bytes))?
            }
            Ok(Prepared::Im2col(ws)) => im2col(&ws, &|launch| run(name, launch))?,
            Err(e) if is_out_of_memory(&e) => {
                first_oom.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        return Ok((out, KernelTiming { algorithm: name, duration_ns: took }));
    }
    Err(first_oom.unwrap_or(TensorError::Cuda {
        op,
        source: CudaError::Cudnn { op, status: "no convolution algorithm could run".into() },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(algo: u32, status: u32, determinism: u32, math_type: u32, memory: usize, time_ms: f32) -> AlgoPerf {
        AlgoPerf { algo, status, time_ms, memory, determinism, math_type, reserved: [0; 3] }
    }

    #[test]
    fn every_cudnn_algorithm_has_a_distinct_name_per_pass() {
        for pass in [ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeight] {
            let names = algo_names(pass);
            for (i, n) in names.iter().enumerate() {
                assert!(n.starts_with("cudnn_"), "{n}");
                assert!(!names[..i].contains(n), "{n} twice");
                assert_ne!(*n, IM2COL_CUBLAS);
                let known = match pass {
                    ConvPass::Forward => fwd_algo(i as u32).map(|a| a as u32),
                    ConvPass::BackwardData => bwd_data_algo(i as u32).map(|a| a as u32),
                    ConvPass::BackwardWeight => bwd_filter_algo(i as u32).map(|a| a as u32),
                };
                assert_eq!(known, Some(i as u32), "{pass:?} {n}");
            }
        }
        assert!(fwd_algo(8).is_none() && bwd_data_algo(6).is_none() && bwd_filter_algo(7).is_none());
        assert_eq!(
            FORWARD_ALGOS[sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD as usize],
            "cudnn_winograd"
        );
        assert_eq!(
            FORWARD_ALGOS[sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM as usize],
            "cudnn_implicit_gemm"
        );
    }

    #[test]
    fn without_cudnn_im2col_cublas_is_the_only_candidate() {
        for pass in [ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeight] {
            let c = candidates(pass, &[], cpu_kernels::FloatDType::F32, true, true);
            assert!(candidates(pass, &[], cpu_kernels::FloatDType::F32, true, false).is_empty());
            assert_eq!(c.len(), 1);
            assert_eq!((c[0].method, c[0].name, c[0].reproducible), (Method::Im2colCublas, IM2COL_CUBLAS, true));
            // It is the heuristic's choice, and deterministic mode keeps it.
            assert_eq!(fallback_order(&c, 0, true), [0]);
        }
    }

    #[test]
    fn cudnn_candidates_keep_the_ranking_order_once_each_and_only_usable_ones() {
        let ranking = [
            perf(1, STATUS_SUCCESS, 1, 1, 4096, -1.0),
            perf(6, STATUS_SUCCESS, 0, 1, 1 << 20, -1.0),
            perf(1, STATUS_SUCCESS, 1, 0, 0, -1.0), // the same algorithm again, other math
            perf(4, 3000, 1, 0, 0, -1.0),           // CUDNN_STATUS_NOT_SUPPORTED
            perf(0, STATUS_SUCCESS, 1, 0, 0, -1.0),
            perf(99, STATUS_SUCCESS, 1, 0, 0, -1.0), // not an algorithm of this cuDNN
        ];
        let c = candidates(ConvPass::Forward, &ranking, cpu_kernels::FloatDType::F16, true, true);
        let names: Vec<_> = c.iter().map(|c| c.name).collect();
        assert_eq!(names, ["cudnn_implicit_precomp_gemm", "cudnn_winograd", "cudnn_implicit_gemm", IM2COL_CUBLAS]);
        assert_eq!(c[0].method, Method::Cudnn { algo: 1, math: 1 });
        assert_eq!(c.iter().map(|c| c.reproducible).collect::<Vec<_>>(), [true, false, true, true]);
        assert_eq!(c[1].workspace_bytes, 1 << 20);
        // Deterministic fallbacks skip the non-deterministic one.
        assert_eq!(fallback_order(&c, 2, true), [2, 0, 3]);
        assert_eq!(fallback_order(&c, 2, false), [2, 0, 1, 3]);
        // f32 without TF32 runs on FMA math whatever the ranking's math type.
        let c = candidates(ConvPass::Forward, &ranking, cpu_kernels::FloatDType::F32, false, false);
        assert_eq!(c[0].method, Method::Cudnn { algo: 1, math: FMA_MATH });
        // Without NVRTC or cuBLAS, cuDNN's algorithms only.
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn math_types_follow_pytorch() {
        use cpu_kernels::FloatDType::*;
        assert_eq!(initial_math(F16, false), 1);
        assert_eq!(initial_math(BF16, true), 1);
        assert_eq!(initial_math(F32, true), 0);
        assert_eq!(initial_math(F32, false), FMA_MATH);
        assert_eq!(run_math(F32, true, 1), 1);
        assert_eq!(run_math(F16, false, 1), 1);
        assert_eq!(math_type(FMA_MATH), sys::cudnnMathType_t::CUDNN_FMA_MATH);
        assert_eq!(math_type(1), sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH);
    }

    #[test]
    fn the_find_workspace_is_the_largest_that_fits() {
        let ranking = [
            perf(0, STATUS_SUCCESS, 1, 0, 0, -1.0),
            perf(1, STATUS_SUCCESS, 1, 0, 300, -1.0),
            perf(4, STATUS_SUCCESS, 1, 0, 5000, -1.0),
            perf(6, STATUS_SUCCESS, 1, 0, 800, -1.0),
        ];
        let c = candidates(ConvPass::Forward, &ranking, cpu_kernels::FloatDType::F32, true, true);
        assert_eq!(find_workspace_bytes(&c, u64::MAX), 5000);
        assert_eq!(find_workspace_bytes(&c, 4999), 800);
        assert_eq!(find_workspace_bytes(&c, 100), 0);
        assert_eq!(
            find_workspace_bytes(
                &candidates(ConvPass::Forward, &[], cpu_kernels::FloatDType::F32, true, true),
                1 << 40
            ),
            0
        );
    }

    #[test]
    fn find_results_map_to_candidates() {
        let ranking = [
            perf(1, STATUS_SUCCESS, 1, 1, 0, -1.0),
            perf(6, STATUS_SUCCESS, 1, 1, 0, -1.0),
            perf(0, STATUS_SUCCESS, 1, 1, 0, -1.0),
        ];
        let c = candidates(ConvPass::Forward, &ranking, cpu_kernels::FloatDType::F16, true, true);
        let found = [
            perf(6, STATUS_SUCCESS, 1, 0, 0, 0.25), // other math, faster
            perf(6, STATUS_SUCCESS, 1, 1, 0, 0.5),  // the candidate's math
            perf(1, STATUS_SUCCESS, 1, 0, 0, 1.5),  // only with other math
            perf(0, 2000, 1, 1, 0, -1.0),           // failed in Find
        ];
        let runs = found_runs(&c, &found);
        assert_eq!(runs, vec![vec![1_500_000], vec![500_000], vec![], vec![]]);
    }

    /// Runs an im2col plan on the host, over f64, with the kernels' index math
    /// and BLAS's definition of the GEMMs cuBLAS is handed.
    fn interpret(pass: ConvPass, shape: Conv2dShape, a: &[f64], b: &[f64], chunk: usize, acc: bool) -> Vec<f64> {
        let d = Dims::of(&shape).unwrap();
        let (crs, ohw, chw) = (d.crs(), d.ohw(), d.chw());
        let (c, h, w, r, s) = (d.c as i64, d.h as i64, d.w as i64, d.r as i64, d.s as i64);
        let (oh, ow) = (d.oh as i64, d.ow as i64);
        let out_len = match pass {
            ConvPass::Forward => shape.y_len(),
            ConvPass::BackwardData => shape.x_len(),
            ConvPass::BackwardWeight => shape.w_len(),
        };
        let mut bufs: HashMap<Buf, Vec<f64>> = HashMap::new();
        bufs.insert(Buf::A, a.to_vec());
        bufs.insert(Buf::B, b.to_vec());
        bufs.insert(Buf::Out, vec![f64::NAN; out_len]);
        bufs.insert(Buf::Col, vec![f64::NAN; chunk * crs * ohw]);
        bufs.insert(Buf::Acc, vec![f64::NAN; shape.w_len()]);
        for step in im2col_plan(pass, &d, chunk, acc) {
            match step {
                Step::Im2col { x, images } => {
                    let src = bufs[&x.buf][x.offset..].to_vec();
                    let col = bufs.get_mut(&Buf::Col).unwrap();
                    for i in 0..(images * crs * ohw) as i64 {
                        let (oww, t) = (i % ow, i / ow);
                        let (ohh, t) = (t % oh, t / oh);
                        let (ss, t) = (t % s, t / s);
                        let (rr, t) = (t % r, t / r);
                        let (cc, bb) = (t % c, t / c);
                        let (ih, iw) = (ohh * d.sh as i64 - d.ph as i64 + rr, oww * d.sw as i64 - d.pw as i64 + ss);
                        let inside = ih >= 0 && ih < h && iw >= 0 && iw < w;
                        col[i as usize] = if inside { src[(((bb * c + cc) * h + ih) * w + iw) as usize] } else { 0.0 };
                    }
                }
                Step::Gemm { g, a, b, c: cc, beta, .. } => {
                    let cm = g.column_major().unwrap();
                    let (av, bv) = (bufs[&a.buf][a.offset..].to_vec(), bufs[&b.buf][b.offset..].to_vec());
                    let out = &mut bufs.get_mut(&cc.buf).unwrap()[cc.offset..];
                    // cuBLAS's A is the row-major B.
                    crate::cuda::blas::reference_gemm(&cm, &bv, &av, out, f64::from(beta));
                }
                Step::Col2im { gx, images } => {
                    let col = bufs[&Buf::Col].clone();
                    let out = &mut bufs.get_mut(&gx.buf).unwrap()[gx.offset..];
                    for i in 0..(images * chw) as i64 {
                        let (ww, t) = (i % w, i / w);
                        let (hh, t) = (t % h, t / h);
                        let (cc, bb) = (t % c, t / c);
                        let base = ((bb * c + cc) * r * s * oh * ow) as usize;
                        let mut sum = 0.0;
                        for rr in 0..r {
                            let y = hh + d.ph as i64 - rr;
                            if y < 0 || y % d.sh as i64 != 0 || y / d.sh as i64 >= oh {
                                continue;
                            }
                            for ss in 0..s {
                                let x = ww + d.pw as i64 - ss;
                                if x < 0 || x % d.sw as i64 != 0 || x / d.sw as i64 >= ow {
                                    continue;
                                }
                                let (o_h, o_w) = (y / d.sh as i64, x / d.sw as i64);
                                sum += col[base + (((rr * s + ss) * oh + o_h) * ow + o_w) as usize];
                            }
                        }
                        out[i as usize] = sum;
                    }
                }
                Step::Round { len } => {
                    let acc = bufs[&Buf::Acc][..len].to_vec();
                    bufs.get_mut(&Buf::Out).unwrap()[..len].copy_from_slice(&acc);
                }
            }
        }
        bufs.remove(&Buf::Out).unwrap()
    }

    #[test]
    fn im2col_plans_compute_the_convolution_passes() {
        let shapes = [
            Conv2dShape::new(5, 3, 7, 6, 4, 3, 3).with_padding(1, 1),
            Conv2dShape::new(3, 2, 9, 8, 3, 3, 2).with_stride(2, 3).with_padding(1, 0),
            Conv2dShape::new(4, 4, 5, 5, 2, 1, 1),
            Conv2dShape::new(1, 2, 6, 7, 5, 5, 3).with_stride(2, 1).with_padding(2, 1),
            Conv2dShape::new(2, 1, 4, 4, 1, 4, 4),
        ];
        for shape in shapes {
            let values = |len: usize, seed: usize| -> Vec<f32> {
                (0..len).map(|i| ((i * 31 + seed * 17) % 9) as f32 - 4.0).collect()
            };
            let (x, wt, gy) = (values(shape.x_len(), 1), values(shape.w_len(), 2), values(shape.y_len(), 3));
            for pass in [ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeight] {
                let problem = ConvProblem { pass, shape };
                let mut ws = vec![0f32; ConvAlgo::Direct.workspace_len(&problem, cpu_kernels::FloatDType::F32)];
                let (a, b, expected) = match pass {
                    ConvPass::Forward => {
                        let mut y = vec![0f32; shape.y_len()];
                        cpu_kernels::conv2d_forward(ConvAlgo::Direct, shape, &x, &wt, &mut y, &mut ws).unwrap();
                        (&x, &wt, y)
                    }
                    ConvPass::BackwardData => {
                        let mut gx = vec![0f32; shape.x_len()];
                        cpu_kernels::conv2d_backward_data(ConvAlgo::Direct, shape, &wt, &gy, &mut gx, &mut ws).unwrap();
                        (&wt, &gy, gx)
                    }
                    ConvPass::BackwardWeight => {
                        let mut gw = vec![0f32; shape.w_len()];
                        cpu_kernels::conv2d_backward_weight(ConvAlgo::Direct, shape, &x, &gy, &mut gw, &mut ws)
                            .unwrap();
                        (&x, &gy, gw)
                    }
                };
                let (a, b): (Vec<f64>, Vec<f64>) =
                    (a.iter().map(|&v| f64::from(v)).collect(), b.iter().map(|&v| f64::from(v)).collect());
                let expected: Vec<f64> = expected.iter().map(|&v| f64::from(v)).collect();
                for chunk in [1, 2, shape.n] {
                    for acc in [false, true] {
                        let got = interpret(pass, shape, &a, &b, chunk, acc);
                        assert_eq!(got, expected, "{pass:?} {shape:?} chunk {chunk} acc {acc}");
                    }
                }
            }
        }
    }

    #[test]
    fn im2col_plans_accumulate_the_weight_gradient_once_from_zero() {
        let d = Dims::of(&Conv2dShape::new(5, 2, 4, 4, 3, 3, 3)).unwrap();
        let plan = im2col_plan(ConvPass::BackwardWeight, &d, 2, true);
        let gemms: Vec<f32> =
            plan.iter().filter_map(|s| if let Step::Gemm { beta, .. } = s { Some(*beta) } else { None }).collect();
        assert_eq!(gemms, [0.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(plan.iter().filter(|s| matches!(s, Step::Im2col { .. })).count(), 3);
        assert_eq!(plan.last(), Some(&Step::Round { len: 3 * 2 * 9 }));
        assert!(!im2col_plan(ConvPass::BackwardWeight, &d, 2, false).iter().any(|s| matches!(s, Step::Round { .. })));
    }

    #[test]
    fn chunks_bound_the_column_buffer() {
        assert_eq!(images_per_chunk(256, 1 << 20), 64);
        assert_eq!(images_per_chunk(8, 1 << 20), 8);
        assert_eq!(images_per_chunk(8, IM2COL_CHUNK_BYTES * 3), 1);
        assert_eq!(images_per_chunk(0, 100), 1);
    }

    #[test]
    fn dims_must_fit_32_bits() {
        let s = Conv2dShape::new(2, 3, 8, 8, 4, 3, 3).with_padding(1, 1).with_stride(2, 2);
        let d = Dims::of(&s).unwrap();
        assert_eq!((d.oh, d.ow, d.crs(), d.ohw(), d.chw()), (4, 4, 27, 16, 192));
        assert!(Dims::of(&Conv2dShape::new(1, 1 << 31, 1, 1, 1, 1, 1)).is_none());
        assert!(Dims::of(&Conv2dShape::new(1, 1 << 16, 1, 1, 1, 1 << 8, 1 << 8)).is_none());
    }

    #[test]
    fn launch_grids_cover_every_element() {
        assert_eq!(launch_config(1).grid_dim, (1, 1, 1));
        assert_eq!(launch_config(257).grid_dim, (2, 1, 1));
        assert_eq!(launch_config(u64::from(BLOCK) * MAX_BLOCKS * 4).grid_dim, (MAX_BLOCKS as u32, 1, 1));
        assert_eq!(launch_config(0).grid_dim, (1, 1, 1));
    }

    /// The kernels compile wherever NVRTC is found (on a GPU machine, or with
    /// `VRAMLAB_CUDA_LIBRARY_PATH` naming NVRTC's folder); elsewhere this says so.
    #[test]
    fn the_im2col_kernels_compile_with_nvrtc() {
        if let Err(e) = CudaLib::Nvrtc.require() {
            println!("skipped: no NVRTC ({e})");
            return;
        }
        let ptx = compile("compute_90").unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for name in ["im2col_f32", "im2col_16", "col2im_f32", "col2im_f16", "col2im_bf16", "f32_to_f16", "f32_to_bf16"]
        {
            assert!(text.contains(&format!(".entry {name}(")), "{name} missing from the PTX");
        }
    }
}
