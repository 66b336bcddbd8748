//! The im2col + cuBLAS convolution: the CUDA C of im2col, col2im and the
//! f32 rounding kernels (compiled with NVRTC once per device), the chunking
//! of column buffers and the plan of kernel and GEMM steps each pass runs.

use super::problem::{Dims, cudnn_allow_tf32};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use crate::cpu_kernels::{self, ConvPass};
use crate::cuda::blas::{BlasGuard, GemmTypes, RowMajorGemm};
use crate::cuda::error::{CudaError, CudaResult, DriverContext};
use crate::cuda::gpu::Gpu;
use crate::cuda::library::CudaLib;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::hooks::Tag;
use crate::storage::Storage;

/// The im2col kernels' CUDA C source.
pub const SOURCE: &str = r#"
// vramlab's kernels for the im2col + cuBLAS convolution (engine/runtime/src/cuda/conv/im2col.rs),
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
pub(super) const BLOCK: u32 = 256;

/// Grid-stride loops cover the rest beyond this many blocks.
pub(super) const MAX_BLOCKS: u64 = 65_536;

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
    pub(super) fn of(gpu: &Gpu) -> CudaResult<Arc<ConvKernels>> {
        type Table = Mutex<HashMap<u32, CudaResult<Arc<ConvKernels>>>>;
        static TABLE: OnceLock<Table> = OnceLock::new();
        // Held while compiling, so two threads do not compile the same source.
        let mut table = TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let ordinal = gpu.info().ordinal;
        if let Some(k) = table.get(&ordinal) {
            return k.clone();
        }
        let made = ConvKernels::load(gpu);
        table.insert(ordinal, made.clone());
        made
    }

    pub(super) fn load(gpu: &Gpu) -> CudaResult<Arc<ConvKernels>> {
        let (major, minor) = gpu.info().compute_capability;
        let ptx = compile(&format!("compute_{major}{minor}"))?;
        let module = gpu.context().load_module(ptx).during("loading the im2col kernels")?;
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
pub(super) fn launch_config(total: u64) -> LaunchConfig {
    let blocks = total.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// Images per chunk of im2col + cuBLAS: as many as fit [`IM2COL_CHUNK_BYTES`]
/// of column buffer, at least one, at most the batch.
pub(super) fn images_per_chunk(n: usize, column_bytes_per_image: usize) -> usize {
    (IM2COL_CHUNK_BYTES / column_bytes_per_image.max(1)).clamp(1, n.max(1))
}

/// The workspaces of one im2col + cuBLAS pass.
pub(super) struct Im2colWorkspace {
    /// The column buffer: `chunk` images, in the operands' dtype (f32 for
    /// backward data).
    pub(super) col: Storage,
    /// The f32 accumulator of a 16-bit weight gradient.
    pub(super) acc: Option<Storage>,
    pub(super) chunk: usize,
}

impl Im2colWorkspace {
    pub(super) fn new(device: &Device, pass: ConvPass, d: &Dims, dtype: DType) -> Result<Im2colWorkspace> {
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
pub(super) enum Buf {
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
pub(super) struct At {
    pub(super) buf: Buf,
    pub(super) offset: usize,
}

pub(super) fn at(buf: Buf, offset: usize) -> At {
    At { buf, offset }
}

/// One step of an im2col + cuBLAS pass, in queue order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Step {
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
pub(super) fn im2col_plan(pass: ConvPass, d: &Dims, chunk: usize, acc: bool) -> Vec<Step> {
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
pub(super) fn run_im2col(
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
