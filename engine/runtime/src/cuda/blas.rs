//! Matrix products on CUDA through cuBLAS.
//!
//! - **One handle per device backend**, made on first use (after
//!   [`CudaLib::Cublas`] is found) and bound to stream 0, the legacy default
//!   stream that every compute op runs on.
//! - **Its workspace comes from the caching allocator**, tagged `workspace`,
//!   and is set with `cublasSetWorkspace_v2` (so cuBLAS allocates nothing of its
//!   own). The size is PyTorch's (`CublasHandlePool.cpp`): `CUBLAS_WORKSPACE_CONFIG`
//!   (`:SIZE_KiB:COUNT` pairs, summed) when set, else 32 MiB on compute
//!   capability 9.0 (Hopper) and `:4096:2:16:8` (8 MiB + 128 KiB) elsewhere. Like
//!   PyTorch's, it is allocated at the first product and then kept, so
//!   `memory_allocated` counts it from then on; [`super::clear_cublas_workspace`] gives it
//!   back (`torch._C._cuda_clearCublasWorkspaces()`).
//! - **Every product is one `cublasGemmEx`** (one `cublasGemmStridedBatchedEx`
//!   for a batch) with f32 accumulation: `CUBLAS_COMPUTE_32F` for f16 and bf16,
//!   and for f32 `CUBLAS_COMPUTE_32F`, or `CUBLAS_COMPUTE_32F_FAST_TF32` when
//!   [`set_matmul_allow_tf32`] is on (`torch.backends.cuda.matmul.allow_tf32`,
//!   off by default as in PyTorch ≥ 1.12). Kernel events name the algorithm
//!   `cublas` or `cublas_tf32`.
//! - **Row-major operands, column-major library**: a row-major `[m, n]` matrix
//!   is, to cuBLAS, its transpose, so `C = op(A)·op(B)` is computed as
//!   `Cᵀ = op(B)ᵀ·op(A)ᵀ` — cuBLAS's first operand is our `B` — with no copy
//!   (`RowMajorGemm::column_major`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use cudarc::cublas::sys;

use super::error::{CudaError, CudaResult};
use super::gpu::Gpu;
use super::library::CudaLib;
use crate::alloc::{Allocation, CachingAllocator};
use crate::cpu_kernels::{self, MatmulShape};
use crate::error::{Result, TensorError};
use crate::hooks::Tag;

/// The environment variable PyTorch (and cuBLAS) read the workspace size from.
pub const WORKSPACE_CONFIG_VAR: &str = "CUBLAS_WORKSPACE_CONFIG";

static MATMUL_ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// `torch.backends.cuda.matmul.allow_tf32 = on`: f32 matrix products on CUDA may
/// round their inputs to TF32 on the tensor cores. Process-wide; off by default.
pub fn set_matmul_allow_tf32(on: bool) {
    MATMUL_ALLOW_TF32.store(on, Ordering::Relaxed);
}

/// Whether f32 matrix products on CUDA may use TF32 ([`set_matmul_allow_tf32`]).
pub fn matmul_allow_tf32() -> bool {
    MATMUL_ALLOW_TF32.load(Ordering::Relaxed)
}

/// PyTorch's cuBLAS workspace size for a device of `compute_capability`, given
/// the value of `CUBLAS_WORKSPACE_CONFIG` (`None` when unset). A value with no
/// `:SIZE:COUNT` pair in it gives the default, as PyTorch does (with a warning).
pub fn workspace_bytes(compute_capability: (i32, i32), config: Option<&str>) -> u64 {
    let default = if compute_capability == (9, 0) { 4096 * 8 * 1024 } else { 4096 * 1024 * 2 + 16 * 1024 * 8 };
    let Some(config) = config else { return default };
    let pairs = config_pairs(config);
    if pairs.is_empty() {
        return default;
    }
    pairs.iter().fold(0u64, |total, &(size_kib, count)| {
        total.saturating_add(size_kib.saturating_mul(1024).saturating_mul(count))
    })
}

/// The `:SIZE:COUNT` pairs of a workspace config, found left to right without
/// overlap (what PyTorch's `std::regex(":([0-9]+):([0-9]+)")` iteration finds).
fn config_pairs(config: &str) -> Vec<(u64, u64)> {
    let b = config.as_bytes();
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let number = |from: usize, len: usize| config[from..from + len].parse::<u64>().unwrap_or(u64::MAX);
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' {
            let first = digits(i + 1);
            let colon = i + 1 + first;
            if first > 0 && colon < b.len() && b[colon] == b':' {
                let second = digits(colon + 1);
                if second > 0 {
                    pairs.push((number(i + 1, first), number(colon + 1, second)));
                    i = colon + 1 + second;
                    continue;
                }
            }
        }
        i += 1;
    }
    pairs
}

/// One (batched) product of row-major matrices, `C[i] = op(A[i])·op(B[i])`:
/// `op(A)` is `[m, k]` (stored `[k, m]` when `trans_a`), `op(B)` is `[k, n]`
/// (stored `[n, k]` when `trans_b`), `C` is `[m, n]`, all dense. Strides are in
/// elements between consecutive matrices of the batch; 0 uses the same matrix
/// for every entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowMajorGemm {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

/// The arguments of `cublasGemm(StridedBatched)Ex` for a [`RowMajorGemm`]:
/// cuBLAS's `A` operand is the row-major `B`, its `B` the row-major `A`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ColumnMajorGemm {
    /// Whether cuBLAS transposes its `A` (our `B`).
    pub transa: bool,
    /// Whether cuBLAS transposes its `B` (our `A`).
    pub transb: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub batch: i32,
}

impl RowMajorGemm {
    /// A dense batched product as a [`MatmulShape`] describes it.
    pub fn contiguous(s: MatmulShape) -> RowMajorGemm {
        RowMajorGemm {
            batch: s.batch,
            m: s.m,
            n: s.n,
            k: s.k,
            trans_a: s.trans_a,
            trans_b: s.trans_b,
            stride_a: s.m * s.k,
            stride_b: s.k * s.n,
            stride_c: s.m * s.n,
        }
    }

    /// The product as cuBLAS computes it: `Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m)`.
    /// A row-major `[r, c]` matrix is a column-major `c×r` one with leading
    /// dimension `c`, so:
    /// - `B` stored `[k, n]` is `op(B)ᵀ` itself (no transpose, `lda = n`);
    ///   stored `[n, k]` it is `op(B)`, transposed by cuBLAS (`lda = k`);
    /// - `A` stored `[m, k]` is `op(A)ᵀ` (no transpose, `ldb = k`); stored
    ///   `[k, m]` it is transposed by cuBLAS (`ldb = m`);
    /// - `C` is `n×m` with `ldc = n`.
    ///
    /// `None` when a dimension is 0 (nothing for cuBLAS to do: the caller fills
    /// or skips) or does not fit cuBLAS's 32-bit arguments.
    pub fn column_major(&self) -> Option<ColumnMajorGemm> {
        if self.batch == 0 || self.m == 0 || self.n == 0 || self.k == 0 {
            return None;
        }
        let int = |v: usize| i32::try_from(v).ok();
        let long = |v: usize| i64::try_from(v).ok();
        Some(ColumnMajorGemm {
            transa: self.trans_b,
            transb: self.trans_a,
            m: int(self.n)?,
            n: int(self.m)?,
            k: int(self.k)?,
            lda: int(if self.trans_b { self.k } else { self.n })?,
            ldb: int(if self.trans_a { self.m } else { self.k })?,
            ldc: int(self.n)?,
            stride_a: long(self.stride_b)?,
            stride_b: long(self.stride_a)?,
            stride_c: long(self.stride_c)?,
            batch: int(self.batch)?,
        })
    }
}

/// Element types of one product and the type it accumulates in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmTypes {
    /// Of `A` and `B`.
    pub inputs: cpu_kernels::FloatDType,
    pub output: cpu_kernels::FloatDType,
    /// f32 products on TF32 tensor cores.
    pub tf32: bool,
}

impl GemmTypes {
    fn data_type(d: cpu_kernels::FloatDType) -> sys::cudaDataType {
        match d {
            cpu_kernels::FloatDType::F32 => sys::cudaDataType::CUDA_R_32F,
            cpu_kernels::FloatDType::F16 => sys::cudaDataType::CUDA_R_16F,
            cpu_kernels::FloatDType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        }
    }

    /// f32 accumulation always; TF32 only for f32 inputs.
    fn compute(&self) -> sys::cublasComputeType_t {
        if self.tf32 && self.inputs == cpu_kernels::FloatDType::F32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        }
    }
}

/// A device backend's cuBLAS handle and its workspace.
pub struct Blas {
    handle: usize,
    /// The workspace set on the handle (none before the first product or after
    /// [`super::clear_cublas_workspace`]). Held while the handle is used.
    pub(super) workspace: Mutex<Option<Allocation>>,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas").finish_non_exhaustive()
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `new` and is destroyed once. Its
        // workspace belongs to the device's allocator, which frees its segments
        // itself when the device goes.
        let _ = unsafe { sys::cublasDestroy_v2(self.raw()) };
    }
}

impl Blas {
    pub(super) fn new(gpu: &Gpu) -> CudaResult<Blas> {
        CudaLib::Cublas.require()?;
        gpu.bind()?;
        let handle = cudarc::cublas::result::create_handle().map_err(|e| CudaError::cublas("cublasCreate", e))?;
        let blas = Blas { handle: handle as usize, workspace: Mutex::new(None) };
        let stream = gpu.stream(0);
        // SAFETY: a live handle and the context's default stream.
        unsafe { cudarc::cublas::result::set_stream(blas.raw(), stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| CudaError::cublas("cublasSetStream", e))?;
        Ok(blas)
    }

    pub(super) fn raw(&self) -> sys::cublasHandle_t {
        self.handle as sys::cublasHandle_t
    }

    /// Exclusive use of the handle, with its workspace allocated (from the
    /// caching allocator of `gpu`'s device, the first time) and set.
    pub(crate) fn lock(&self, gpu: &Gpu, allocator: &CachingAllocator) -> Result<BlasGuard<'_>> {
        let mut workspace = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if workspace.is_none() {
            gpu.bind().map_err(|source| TensorError::Cuda { op: "matmul", source })?;
            let cc = gpu.info().compute_capability;
            let config = std::env::var(WORKSPACE_CONFIG_VAR).ok();
            let bytes = workspace_bytes(cc, config.as_deref());
            let a = allocator.malloc(bytes, 0, Some(Tag::Workspace))?;
            // SAFETY: a live handle; the allocation holds `bytes` device bytes,
            // 512-byte aligned, and stays set until replaced or cleared.
            let set = unsafe { sys::cublasSetWorkspace_v2(self.raw(), a.addr() as *mut c_void, bytes as usize) }
                .result()
                .map_err(|e| CudaError::cublas("cublasSetWorkspace", e));
            if let Err(source) = set {
                let _ = allocator.free(a);
                return Err(TensorError::Cuda { op: "matmul", source });
            }
            *workspace = Some(a);
        }
        Ok(BlasGuard { blas: self, _workspace: workspace })
    }
}

/// The handle, locked, with its workspace set.
pub(crate) struct BlasGuard<'a> {
    blas: &'a Blas,
    _workspace: MutexGuard<'a, Option<Allocation>>,
}

impl BlasGuard<'_> {
    /// Queues `C = op(A)·op(B) + beta·C` on the handle's stream (stream 0);
    /// `(a, b, c)` are the row-major operands' device addresses.
    ///
    /// # Safety
    /// `a`, `b` and `c` must be live device addresses of the handle's context,
    /// holding the matrices `g` describes in the element types of `types`.
    pub(crate) unsafe fn gemm(
        &self,
        op: &'static str,
        g: &ColumnMajorGemm,
        types: GemmTypes,
        (a, b, c): (u64, u64, u64),
        beta: f32,
    ) -> CudaResult<()> {
        let alpha = 1.0f32;
        let (in_type, out_type) = (GemmTypes::data_type(types.inputs), GemmTypes::data_type(types.output));
        let op_of = |t: bool| if t { sys::cublasOperation_t::CUBLAS_OP_T } else { sys::cublasOperation_t::CUBLAS_OP_N };
        let algo = sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        // cuBLAS's A is the row-major B and its B the row-major A.
        let (first, second) = (b as *const c_void, a as *const c_void);
        let alpha_p = &alpha as *const f32 as *const c_void;
        let beta_p = &beta as *const f32 as *const c_void;
        // SAFETY: the caller vouches for the pointers; alpha and beta are host
        // f32 (the handle's default host pointer mode, and the scale type of
        // CUBLAS_COMPUTE_32F*), alive for the call.
        let status = unsafe {
            if g.batch == 1 {
                sys::cublasGemmEx(
                    self.blas.raw(),
                    op_of(g.transa),
                    op_of(g.transb),
                    g.m,
                    g.n,
                    g.k,
                    alpha_p,
                    first,
                    in_type,
                    g.lda,
                    second,
                    in_type,
                    g.ldb,
                    beta_p,
                    c as *mut c_void,
                    out_type,
                    g.ldc,
                    types.compute(),
                    algo,
                )
            } else {
                sys::cublasGemmStridedBatchedEx(
                    self.blas.raw(),
                    op_of(g.transa),
                    op_of(g.transb),
                    g.m,
                    g.n,
                    g.k,
                    alpha_p,
                    first,
                    in_type,
                    g.lda,
                    g.stride_a,
                    second,
                    in_type,
                    g.ldb,
                    g.stride_b,
                    beta_p,
                    c as *mut c_void,
                    out_type,
                    g.ldc,
                    g.stride_c,
                    g.batch,
                    types.compute(),
                    algo,
                )
            }
        };
        status.result().map_err(|e| CudaError::cublas(op, e))
    }
}

/// The algorithm name kernel events give an f32 product.
pub(super) fn algorithm_name(dtype: cpu_kernels::FloatDType, tf32: bool) -> &'static str {
    if tf32 && dtype == cpu_kernels::FloatDType::F32 { "cublas_tf32" } else { "cublas" }
}

/// BLAS's column-major GEMM as the reference manual defines it, over f64:
/// `C = op(A)·op(B) + beta·C` (with `beta` 0, `C` is not read). For tests of
/// the arguments vramlab hands cuBLAS.
#[cfg(test)]
pub(crate) fn reference_gemm(g: &ColumnMajorGemm, a: &[f64], b: &[f64], c: &mut [f64], beta: f64) {
    let at = |m: &[f64], off: usize, ld: i32, t: bool, i: usize, j: usize| {
        // op(M)(i, j): M(i, j) = m[i + j·ld], or M(j, i) when transposed.
        if t { m[off + j + i * ld as usize] } else { m[off + i + j * ld as usize] }
    };
    for batch in 0..g.batch as usize {
        let (oa, ob, oc) = (batch * g.stride_a as usize, batch * g.stride_b as usize, batch * g.stride_c as usize);
        for i in 0..g.m as usize {
            for j in 0..g.n as usize {
                let s: f64 = (0..g.k as usize)
                    .map(|l| at(a, oa, g.lda, g.transa, i, l) * at(b, ob, g.ldb, g.transb, l, j))
                    .sum();
                let cij = &mut c[oc + i + j * g.ldc as usize];
                *cij = if beta == 0.0 { s } else { s + beta * *cij };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row-major `op(A)·op(B)` computed directly.
    fn row_major_product(p: &RowMajorGemm, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; p.batch * p.m * p.n];
        for batch in 0..p.batch {
            let (oa, ob) = (batch * p.stride_a, batch * p.stride_b);
            for i in 0..p.m {
                for j in 0..p.n {
                    let mut s = 0.0;
                    for l in 0..p.k {
                        let av = if p.trans_a { a[oa + l * p.m + i] } else { a[oa + i * p.k + l] };
                        let bv = if p.trans_b { b[ob + j * p.k + l] } else { b[ob + l * p.n + j] };
                        s += av * bv;
                    }
                    c[batch * p.m * p.n + i * p.n + j] = s;
                }
            }
        }
        c
    }

    fn values(len: usize, seed: u64) -> Vec<f64> {
        (0..len).map(|i| ((i as u64 * 7919 + seed * 104_729) % 23) as f64 - 11.0).collect()
    }

    #[test]
    fn the_column_major_mapping_computes_the_row_major_product() {
        for (batch, m, n, k) in [(1, 3, 5, 4), (3, 2, 7, 5), (2, 1, 1, 9), (4, 6, 1, 3)] {
            for trans_a in [false, true] {
                for trans_b in [false, true] {
                    for shared_a in [false, true] {
                        let mut p =
                            RowMajorGemm::contiguous(MatmulShape::batched(batch, m, n, k).transposed(trans_a, trans_b));
                        if shared_a {
                            // A weight broadcast over the batch (im2col convolution).
                            p.stride_a = 0;
                        }
                        let a = values(if shared_a { m * k } else { batch * m * k }, 1);
                        let b = values(batch * k * n, 2);
                        let g = p.column_major().unwrap();
                        let mut c = vec![f64::NAN; batch * m * n];
                        // cuBLAS's A is our B, its B our A.
                        reference_gemm(&g, &b, &a, &mut c, 0.0);
                        assert_eq!(c, row_major_product(&p, &a, &b), "{p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_mapping_has_known_arguments_for_each_transpose() {
        let s = MatmulShape::batched(2, 3, 5, 4);
        let g = |ta, tb| RowMajorGemm::contiguous(s.transposed(ta, tb)).column_major().unwrap();
        // (transa, transb, lda, ldb) for (trans_a, trans_b).
        for ((ta, tb), expect) in [
            ((false, false), (false, false, 5, 4)),
            ((true, false), (false, true, 5, 3)),
            ((false, true), (true, false, 4, 4)),
            ((true, true), (true, true, 4, 3)),
        ] {
            let got = g(ta, tb);
            assert_eq!((got.transa, got.transb, got.lda, got.ldb), expect, "trans_a {ta} trans_b {tb}");
            assert_eq!((got.m, got.n, got.k, got.ldc), (5, 3, 4, 5));
            assert_eq!((got.stride_a, got.stride_b, got.stride_c, got.batch), (20, 12, 15, 2));
        }
    }

    #[test]
    fn zero_and_oversized_dimensions_are_not_handed_to_cublas() {
        assert_eq!(RowMajorGemm::contiguous(MatmulShape::new(0, 4, 4)).column_major(), None);
        assert_eq!(RowMajorGemm::contiguous(MatmulShape::new(4, 4, 0)).column_major(), None);
        assert_eq!(RowMajorGemm::contiguous(MatmulShape::new(1 << 31, 1, 1)).column_major(), None);
        assert!(RowMajorGemm::contiguous(MatmulShape::new((1 << 31) - 1, 1, 1)).column_major().is_some());
    }

    #[test]
    fn workspace_size_follows_pytorch() {
        assert_eq!(workspace_bytes((9, 0), None), 32 << 20);
        assert_eq!(workspace_bytes((8, 0), None), (8 << 20) + (128 << 10));
        assert_eq!(workspace_bytes((10, 0), None), (8 << 20) + (128 << 10));
        assert_eq!(workspace_bytes((8, 6), Some(":4096:8")), 32 << 20);
        assert_eq!(workspace_bytes((9, 0), Some(":16:8")), 128 << 10);
        assert_eq!(workspace_bytes((9, 0), Some(":4096:2:16:8")), (8 << 20) + (128 << 10));
        // Unparseable: the default.
        assert_eq!(workspace_bytes((9, 0), Some("4096")), 32 << 20);
        assert_eq!(workspace_bytes((8, 0), Some(":x:8")), (8 << 20) + (128 << 10));
        // Garbage around pairs is skipped, as a regex search does.
        assert_eq!(workspace_bytes((8, 0), Some("a::1:2b:3")), 2 << 10);
    }

    #[test]
    fn tf32_names_and_compute_types() {
        assert_eq!(algorithm_name(cpu_kernels::FloatDType::F32, false), "cublas");
        assert_eq!(algorithm_name(cpu_kernels::FloatDType::F32, true), "cublas_tf32");
        assert_eq!(algorithm_name(cpu_kernels::FloatDType::BF16, true), "cublas");
        let t = |inputs, tf32| GemmTypes { inputs, output: inputs, tf32 }.compute();
        assert_eq!(t(cpu_kernels::FloatDType::F32, true), sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32);
        assert_eq!(t(cpu_kernels::FloatDType::F32, false), sys::cublasComputeType_t::CUBLAS_COMPUTE_32F);
        assert_eq!(t(cpu_kernels::FloatDType::F16, true), sys::cublasComputeType_t::CUBLAS_COMPUTE_32F);
    }
}
