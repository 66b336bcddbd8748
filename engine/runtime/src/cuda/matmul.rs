//! Matrix products on CUDA: the `matmul` op on the backend's cuBLAS handle
//! ([`super::blas`] has the handle, its workspace and the row-major mapping),
//! and giving the handle's workspace back ([`clear_cublas_workspace`]).

use std::sync::Arc;

use cudarc::cublas::sys;

use super::backend::CudaBackend;
use super::blas::{GemmTypes, RowMajorGemm, algorithm_name, matmul_allow_tf32};
use super::error::{CudaError, CudaResult, DriverContext};
use crate::backend::KernelTiming;
use crate::cpu_kernels::{KernelCall, MatmulShape};
use crate::device::Device;
use crate::error::{Result, TensorError};
use crate::storage::{Storage, current_tag};

/// Gives the device's cuBLAS workspace back to its caching allocator
/// (`torch._C._cuda_clearCublasWorkspaces()`); the next product takes a new one.
/// Nothing happens on a host device or before the first product.
pub fn clear_cublas_workspace(device: &Device) -> Result<()> {
    let Some(backend) = device.cuda() else { return Ok(()) };
    let Some(blas) = backend.blas_if_made() else { return Ok(()) };
    let mut workspace = blas.workspace.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = workspace.take() {
        backend.bind().map_err(|source| TensorError::Cuda { op: "clear_cublas_workspace", source })?;
        // SAFETY: a live handle; no workspace (cuBLAS then uses none of its own
        // choosing until one is set again, which `lock` does before any product).
        unsafe { sys::cublasSetWorkspace_v2(blas.raw(), std::ptr::null_mut(), 0) }.result().map_err(|e| {
            TensorError::Cuda { op: "clear_cublas_workspace", source: CudaError::cublas("cublasSetWorkspace", e) }
        })?;
        // Work queued on stream 0 may still use it: the allocator reuses the block
        // only for later work on stream 0, which runs after it.
        device.allocator().free(a)?;
    }
    Ok(())
}

/// `a · b` on CUDA for the backend: `shape` is checked. With `timed`, waits for the product and returns its device time;
/// otherwise returns at once (the product is queued on stream 0) with 0 ns.
pub(crate) fn matmul(
    backend: &Arc<CudaBackend>,
    a: &Storage,
    b: &Storage,
    shape: MatmulShape,
    timed: bool,
) -> Result<(Storage, KernelTiming)> {
    const OP: &str = "matmul";
    let cuda = |source| TensorError::Cuda { op: OP, source };
    let device = &a.device;
    let dtype = a.dtype.float().ok_or(TensorError::UnsupportedDType {
        op: OP,
        dtype: a.dtype,
        reason: "matmul needs a float dtype",
    })?;
    let tf32 = matmul_allow_tf32();
    let algorithm = algorithm_name(dtype, tf32);
    let out = Storage::new(device, shape.batch * shape.m * shape.n, a.dtype, current_tag())?;
    let mut timing = KernelTiming { algorithm, duration_ns: 0 };
    if out.len == 0 {
        return Ok((out, timing));
    }
    let call = KernelCall::Matmul { shape, dtype };
    let gemm = RowMajorGemm::contiguous(shape);
    let run = |launch: &dyn Fn() -> CudaResult<()>| -> CudaResult<u64> {
        let kernel = || backend.run_kernel(OP, algorithm, 0, call, |_| launch());
        if timed { backend.time_on_device(0, |_| kernel()) } else { kernel().map(|()| 0) }
    };
    let (c, bytes) = (out.addr(), out.size_bytes());
    timing.duration_ns = match gemm.column_major() {
        // The only zero dimension left is k: the sum over nothing is 0.
        None if shape.k == 0 => run(&|| {
            // SAFETY: `c` is the output's live allocation of `bytes` bytes.
            unsafe { cudarc::driver::result::memset_d8_async(c, 0, bytes, backend.stream(0).cu_stream()) }
                .during("zero-filling a product over k = 0")
        })
        .map_err(cuda)?,
        None => {
            return Err(TensorError::BadShape {
                op: OP,
                shape: out_shape(&shape),
                reason: "a dimension exceeds cuBLAS's 32-bit arguments".into(),
            });
        }
        Some(g) => {
            let blas = backend.blas().map_err(cuda)?.lock(backend, device.allocator())?;
            let types = GemmTypes { inputs: dtype, output: dtype, tf32 };
            let (pa, pb) = (a.addr(), b.addr());
            // SAFETY: the operands and the output are live allocations of this
            // device holding the shapes `g` was made from, in `dtype`.
            run(&|| unsafe { blas.gemm(OP, &g, types, (pa, pb, c), 0.0) }).map_err(cuda)?
        }
    };
    Ok((out, timing))
}

/// The stored shape of a product (for errors).
fn out_shape(shape: &MatmulShape) -> Vec<usize> {
    if shape.batch == 1 { vec![shape.m, shape.n] } else { vec![shape.batch, shape.m, shape.n] }
}
