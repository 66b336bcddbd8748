//! The cuDNN wrapper: the handle of one device (`Dnn`), tensor, filter and
//! convolution descriptors, the algorithm and math-type enums, and the calls
//! that rank (`Get…_v7`), measure (`Find…Ex`) and run a pass.

use super::problem::Dims;

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use cudarc::cudnn::sys;

use crate::cpu_kernels::{self, ConvPass};
use crate::cuda::error::{CudaError, CudaResult};
use crate::cuda::gpu::Gpu;
use crate::cuda::library::CudaLib;

/// A device backend's cuDNN handle (bound to stream 0).
pub struct Dnn {
    pub(super) handle: usize,
    /// cuDNN handles are for one thread at a time: held around every call.
    pub(super) lock: Mutex<()>,
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
    pub(in crate::cuda) fn new(gpu: &Gpu) -> CudaResult<Dnn> {
        CudaLib::Cudnn.require()?;
        gpu.bind()?;
        let handle = cudarc::cudnn::result::create_handle().map_err(|e| CudaError::cudnn("cudnnCreate", e))?;
        let dnn = Dnn { handle: handle as usize, lock: Mutex::new(()) };
        let stream = gpu.stream(0);
        // SAFETY: a live handle and the context's default stream.
        unsafe { cudarc::cudnn::result::set_stream(handle, stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| CudaError::cudnn("cudnnSetStream", e))?;
        Ok(dnn)
    }

    /// Exclusive use of the handle.
    pub(super) fn use_handle(&self) -> (sys::cudnnHandle_t, MutexGuard<'_, ()>) {
        (self.handle as sys::cudnnHandle_t, self.lock.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `cudnnConvolution*AlgoPerf_t` with plain integers where the C struct has
/// enums, so that whatever cuDNN writes is a valid value. Same layout: every
/// field is a 32-bit enum, a float, a `size_t` or ints.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AlgoPerf {
    pub(super) algo: u32,
    pub(super) status: u32,
    pub(super) time_ms: f32,
    pub(super) memory: usize,
    pub(super) determinism: u32,
    pub(super) math_type: u32,
    pub(super) reserved: [c_int; 3],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>());
    assert!(size_of::<AlgoPerf>() == size_of::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>());
    assert!(align_of::<AlgoPerf>() == align_of::<sys::cudnnConvolutionFwdAlgoPerf_t>());
};

/// `CUDNN_STATUS_SUCCESS`.
pub(super) const STATUS_SUCCESS: u32 = 0;
/// `CUDNN_DETERMINISTIC`.
pub(super) const DETERMINISTIC: u32 = 1;

/// cuDNN's algorithms of each pass, by their enum value, as kernel events name them.
pub(super) const FORWARD_ALGOS: [&str; 8] = [
    "cudnn_implicit_gemm",
    "cudnn_implicit_precomp_gemm",
    "cudnn_gemm",
    "cudnn_direct",
    "cudnn_fft",
    "cudnn_fft_tiling",
    "cudnn_winograd",
    "cudnn_winograd_nonfused",
];
pub(super) const BACKWARD_DATA_ALGOS: [&str; 6] =
    ["cudnn_algo_0", "cudnn_algo_1", "cudnn_fft", "cudnn_fft_tiling", "cudnn_winograd", "cudnn_winograd_nonfused"];
pub(super) const BACKWARD_FILTER_ALGOS: [&str; 7] = [
    "cudnn_algo_0",
    "cudnn_algo_1",
    "cudnn_fft",
    "cudnn_algo_3",
    "cudnn_winograd",
    "cudnn_winograd_nonfused",
    "cudnn_fft_tiling",
];

pub(super) fn algo_names(pass: ConvPass) -> &'static [&'static str] {
    match pass {
        ConvPass::Forward => &FORWARD_ALGOS,
        ConvPass::BackwardData => &BACKWARD_DATA_ALGOS,
        ConvPass::BackwardWeight => &BACKWARD_FILTER_ALGOS,
    }
}

pub(super) fn fwd_algo(a: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
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

pub(super) fn bwd_data_algo(a: u32) -> Option<sys::cudnnConvolutionBwdDataAlgo_t> {
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

pub(super) fn bwd_filter_algo(a: u32) -> Option<sys::cudnnConvolutionBwdFilterAlgo_t> {
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

pub(super) fn math_type(m: u32) -> sys::cudnnMathType_t {
    use sys::cudnnMathType_t::*;
    match m {
        1 => CUDNN_TENSOR_OP_MATH,
        2 => CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
        3 => CUDNN_FMA_MATH,
        _ => CUDNN_DEFAULT_MATH,
    }
}

/// `CUDNN_FMA_MATH`.
pub(super) const FMA_MATH: u32 = 3;

/// The math type a conv descriptor starts with (PyTorch's
/// `ConvolutionDescriptor::set`): tensor ops for 16-bit types, FMA for f32
/// without TF32, default (TF32 allowed) otherwise.
/// The math a benchmark-mode choice was measured with, in its cache key: a
/// choice measured without TF32 says nothing of the timings with it.
pub(super) fn math_key(dtype: cpu_kernels::FloatDType, tf32: bool) -> &'static str {
    if dtype == cpu_kernels::FloatDType::F32 && tf32 { "tf32" } else { "full" }
}

pub(super) fn initial_math(dtype: cpu_kernels::FloatDType, tf32: bool) -> u32 {
    match dtype {
        cpu_kernels::FloatDType::F16 | cpu_kernels::FloatDType::BF16 => 1,
        cpu_kernels::FloatDType::F32 if tf32 => 0,
        cpu_kernels::FloatDType::F32 => FMA_MATH,
    }
}

/// The math type an algorithm runs with: the one cuDNN ranked it with, except
/// that f32 without TF32 stays on FMA math (as PyTorch overrides it).
pub(super) fn run_math(dtype: cpu_kernels::FloatDType, tf32: bool, ranked: u32) -> u32 {
    if dtype == cpu_kernels::FloatDType::F32 && !tf32 { FMA_MATH } else { ranked }
}

pub(super) fn cudnn_data_type(d: cpu_kernels::FloatDType) -> sys::cudnnDataType_t {
    match d {
        cpu_kernels::FloatDType::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        cpu_kernels::FloatDType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
        cpu_kernels::FloatDType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
    }
}

/// The four descriptors of one convolution (destroyed on drop).
pub(super) struct Descriptors {
    pub(super) x: sys::cudnnTensorDescriptor_t,
    pub(super) w: sys::cudnnFilterDescriptor_t,
    pub(super) y: sys::cudnnTensorDescriptor_t,
    pub(super) conv: sys::cudnnConvolutionDescriptor_t,
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
    pub(super) fn new(
        d: &Dims,
        dtype: cpu_kernels::FloatDType,
        math: u32,
    ) -> std::result::Result<Descriptors, CudaError> {
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

    pub(super) fn set_math(&self, math: u32) -> CudaResult<()> {
        // SAFETY: a live descriptor.
        unsafe { cudarc::cudnn::result::set_convolution_math_type(self.conv, math_type(math)) }
            .map_err(|e| CudaError::cudnn("cudnnSetConvolutionMathType", e))
    }
}

/// The operands of one pass: (x, w, y) forward, (w, gy, gx) backward data,
/// (x, gy, gw) backward weight — inputs first, the output last.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pointers {
    pub(super) a: u64,
    pub(super) b: u64,
    pub(super) out: u64,
}

impl Dnn {
    /// cuDNN's ranking of its algorithms for the pass (`cudnnGet*Algorithm_v7`),
    /// best first, every algorithm with its status.
    pub(super) fn ranking(&self, pass: ConvPass, descs: &Descriptors) -> CudaResult<Vec<AlgoPerf>> {
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
    pub(super) fn max_count(&self, pass: ConvPass) -> CudaResult<c_int> {
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
    pub(super) fn find(
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
    pub(super) fn workspace_bytes(
        &self,
        pass: ConvPass,
        descs: &Descriptors,
        algo: u32,
        math: u32,
    ) -> CudaResult<usize> {
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
    pub(super) fn run(
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
