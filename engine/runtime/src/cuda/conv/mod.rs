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

//!
//! Files: `problem.rs` (the TF32 switch and the problem's 32-bit sizes),
//! `im2col.rs` (vramlab's own kernels and plans), `cudnn.rs` (the cuDNN
//! wrapper), `algo.rs` (the candidates and the choice); this file holds the
//! pass itself.

mod algo;
pub(in crate::cuda) mod cudnn;
mod im2col;
mod problem;

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::alloc::AllocError;
use crate::autotune::{self, RuntimeCandidate, TuneMode};
use crate::backend::KernelTiming;
use crate::cpu_kernels::{Algorithm, Conv2dShape, ConvAlgo, ConvPass, ConvProblem, FloatDType, KernelCall};
use crate::cuda::backend::CudaBackend;
use crate::cuda::error::{CudaError, CudaResult, DriverContext};
use crate::cuda::library::CudaLib;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::Tag;
use crate::storage::{Storage, current_tag};

use algo::*;
use cudnn::*;
use im2col::*;
pub use im2col::{IM2COL_CHUNK_BYTES, IM2COL_CUBLAS, SOURCE, compile};
use problem::Dims;
pub use problem::{cudnn_allow_tf32, set_cudnn_allow_tf32};

/// The cuDNN version convolutions on `device` use (`cudnnGetVersion`, `91000`
/// for 9.10.0), or why they run without it (on im2col + cuBLAS alone). `None`
/// on a host device.
pub fn cudnn_version(device: &Device) -> Option<std::result::Result<usize, CudaError>> {
    let backend = device.cuda()?;
    Some(match backend.dnn_handle() {
        Ok(_) => Ok(cudarc::cudnn::result::get_version()),
        Err(e) => Err(e.clone()),
    })
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
    let p = Pointers { a: a.addr(), b: b.addr(), out: out.addr() };
    let (algorithm, duration_ns) = choose_and_run(backend, ConvProblem { pass, shape }, a, dtype, &d, p, &run)?;
    Ok((out, KernelTiming { algorithm, duration_ns }))
}

/// cuDNN's ranked candidates for the problem, with its handle and descriptors;
/// `None` when cuDNN is absent or cannot describe the problem.
fn cudnn_ranking<'b>(
    backend: &'b CudaBackend,
    d: &Dims,
    problem: ConvProblem,
    dtype: FloatDType,
    tf32: bool,
) -> Option<(&'b Dnn, Descriptors, Vec<AlgoPerf>)> {
    let dnn = backend.dnn()?;
    backend.bind().ok()?;
    let descs = Descriptors::new(d, dtype, initial_math(dtype, tf32)).ok()?;
    let ranking = cached_ranking(backend, dnn, problem, dtype, tf32, &descs).ok()?;
    Some((dnn, descs, ranking))
}

/// Chooses the pass's algorithm (by the autotuner's mode, measuring the
/// candidates in `benchmark` mode) and runs it with `run` (one kernel event),
/// trying the next candidate when one's workspace does not fit. Returns the
/// algorithm's name and the device time `run` measured. `a` is the first
/// operand (its device and dtype; `dtype` as a float type), `d` the problem's
/// checked sizes, `p` the operands' addresses.
fn choose_and_run(
    backend: &Arc<CudaBackend>,
    problem: ConvProblem,
    a: &Storage,
    dtype: FloatDType,
    d: &Dims,
    p: Pointers,
    run: &impl Fn(&'static str, Launch<'_>) -> Result<u64>,
) -> Result<(&'static str, u64)> {
    let pass = problem.pass;
    let op = pass.kernel_name();
    let cuda = |source| TensorError::Cuda { op, source };
    let device = &a.device;
    let tf32 = cudnn_allow_tf32();
    let cudnn = cudnn_ranking(backend, d, problem, dtype, tf32);
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
            _ => Ok(Prepared::Im2col(Im2colWorkspace::new(device, pass, d, a.dtype)?)),
        }
    };
    // Queues the im2col + cuBLAS pass on stream 0 (the caller brackets it).
    let im2col = |ws: &Im2colWorkspace, timing: &Bracket<'_>| {
        let kernels = ConvKernels::of(backend).map_err(cuda)?;
        let blas = backend.blas().map_err(cuda)?.lock(backend, device.allocator())?;
        timing(&mut |s| run_im2col(&kernels, &blas, s, pass, d, dtype, (p.a, p.b, p.out), ws))
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
        return Ok((name, took));
    }
    Err(first_oom.unwrap_or(TensorError::Cuda {
        op,
        source: CudaError::Cudnn { op, status: "no convolution algorithm could run".into() },
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use cudarc::cudnn::sys;

    use super::*;
    use crate::cpu_kernels;

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
