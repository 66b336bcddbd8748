//! Matrix products `C = op(A) · op(B)`, batched, through the `gemm` crate.
//!
//! Row-major operands: `A` is `[batch, m, k]` (or `[batch, k, m]` when `trans_a`),
//! `B` is `[batch, k, n]` (or `[batch, n, k]` when `trans_b`), `C` is `[batch, m, n]`.
//! Transposes cost nothing: they become strides for `gemm`, which packs its operands
//! anyway. The gradients of `C = A·B` are `dA = dC·Bᵀ` and `dB = Aᵀ·dC`, i.e. this
//! same kernel with `trans_b` / `trans_a` set.
//!
//! f32 and f16 run on `gemm`'s own kernels (f16 accumulates in f32 inside `gemm`);
//! bf16 is widened to f32 in the workspace, multiplied, and rounded back.

use std::sync::{Mutex, PoisonError};

use gemm::Parallelism;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::algorithm::Algorithm;
use super::element::{Element, FloatDType};
use super::error::{KernelError, Result, check_len, check_workspace, checked_product};
use super::gemm_call::{MatRef, gemm};
use super::par::{staging_len_for, via_f32};

const OP: &str = "matmul";

/// The shape of a (batched) matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatmulShape {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `A` is stored `[batch, k, m]`.
    pub trans_a: bool,
    /// `B` is stored `[batch, n, k]`.
    pub trans_b: bool,
}

impl MatmulShape {
    /// A single `[m, k] · [k, n]` product.
    pub const fn new(m: usize, n: usize, k: usize) -> Self {
        Self::batched(1, m, n, k)
    }

    /// `batch` independent products.
    pub const fn batched(batch: usize, m: usize, n: usize, k: usize) -> Self {
        MatmulShape { batch, m, n, k, trans_a: false, trans_b: false }
    }

    /// The same product with `A` and/or `B` stored transposed.
    pub const fn transposed(self, trans_a: bool, trans_b: bool) -> Self {
        MatmulShape { trans_a, trans_b, ..self }
    }

    /// Elements of `A`.
    pub const fn a_len(&self) -> usize {
        self.batch * self.m * self.k
    }
    /// Elements of `B`.
    pub const fn b_len(&self) -> usize {
        self.batch * self.k * self.n
    }
    /// Elements of `C`.
    pub const fn c_len(&self) -> usize {
        self.batch * self.m * self.n
    }

    fn validate(&self) -> Result<()> {
        checked_product(OP, &[self.batch, self.m, self.k])?;
        checked_product(OP, &[self.batch, self.k, self.n])?;
        checked_product(OP, &[self.batch, self.m, self.n])?;
        Ok(())
    }
}

/// How a matrix product is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulAlgo {
    /// One `gemm` call per batch entry, threaded inside `gemm` over output tiles
    /// (`Parallelism::Rayon`). Each output's reduction runs in one fixed order:
    /// reproducible.
    GemmRayon,
    /// Batch entries in parallel on rayon, each a single-threaded `gemm`
    /// (`Parallelism::None`); for one entry, plain single-threaded `gemm`. Better for
    /// many small products. Reproducible.
    GemmBatchParallel,
    /// Split-K: the reduction dimension is cut into slices multiplied in parallel
    /// into private partial results, which are added into `C` as each slice
    /// finishes, the way split-K GPU kernels use atomics. Wins when `m·n` is small
    /// and `k` large. The addition order is the completion order: **not**
    /// reproducible.
    SplitK,
}

/// Number of K slices [`MatmulAlgo::SplitK`] uses for this shape on the current pool.
fn split_count(shape: &MatmulShape) -> usize {
    let max = 2 * rayon::current_num_threads().max(2);
    shape.k.div_ceil(128).clamp(1, max)
}

impl Algorithm for MatmulAlgo {
    type Problem = MatmulShape;
    const OP: &'static str = OP;

    fn all() -> &'static [Self] {
        &[MatmulAlgo::GemmRayon, MatmulAlgo::GemmBatchParallel, MatmulAlgo::SplitK]
    }

    fn name(self) -> &'static str {
        match self {
            MatmulAlgo::GemmRayon => "gemm_rayon",
            MatmulAlgo::GemmBatchParallel => "gemm_batch_parallel",
            MatmulAlgo::SplitK => "gemm_split_k",
        }
    }

    fn is_applicable(self, _: &MatmulShape) -> bool {
        true
    }

    fn is_reproducible(self, _: &MatmulShape) -> bool {
        !matches!(self, MatmulAlgo::SplitK)
    }

    fn workspace_len(self, s: &MatmulShape, dtype: FloatDType) -> usize {
        let staging = |dtype| staging_len_for(dtype, s.a_len(), s.b_len(), s.c_len());
        match self {
            MatmulAlgo::GemmRayon | MatmulAlgo::GemmBatchParallel => {
                if dtype == FloatDType::BF16 {
                    staging(dtype)
                } else {
                    0
                }
            }
            MatmulAlgo::SplitK => staging(dtype) + split_count(s) * s.m * s.n,
        }
    }

    fn heuristic(s: &MatmulShape) -> Self {
        let work = s.m.saturating_mul(s.n).saturating_mul(s.k);
        if s.batch >= rayon::current_num_threads() && work < 1 << 21 {
            MatmulAlgo::GemmBatchParallel
        } else {
            MatmulAlgo::GemmRayon
        }
    }
}

/// `c = op(a) · op(b)` for every batch entry, with `algo`.
///
/// `ws` must hold at least [`Algorithm::workspace_len`] f32 elements (zero for f32
/// and f16 with the gemm algorithms, so `&mut []` will do there).
pub fn matmul<T: Element>(
    algo: MatmulAlgo,
    shape: MatmulShape,
    a: &[T],
    b: &[T],
    c: &mut [T],
    ws: &mut [f32],
) -> Result<()> {
    shape.validate()?;
    check_len(OP, "a", a.len(), shape.a_len())?;
    check_len(OP, "b", b.len(), shape.b_len())?;
    check_len(OP, "c", c.len(), shape.c_len())?;
    check_workspace(OP, algo.name(), ws.len(), algo.workspace_len(&shape, T::DTYPE))?;
    if shape.c_len() == 0 {
        return Ok(());
    }
    match algo {
        MatmulAlgo::GemmRayon | MatmulAlgo::GemmBatchParallel if T::DTYPE != FloatDType::BF16 => {
            gemm_batches(algo, &shape, a, b, c);
        }
        MatmulAlgo::GemmRayon | MatmulAlgo::GemmBatchParallel => {
            via_f32(a, b, c, ws, |a, b, c, _| gemm_batches(algo, &shape, a, b, c));
        }
        MatmulAlgo::SplitK => via_f32(a, b, c, ws, |a, b, c, ws| split_k(&shape, a, b, c, ws))?,
    }
    Ok(())
}

/// The two `gemm` algorithms, for f32 or f16.
fn gemm_batches<T: Element>(algo: MatmulAlgo, s: &MatmulShape, a: &[T], b: &[T], c: &mut [T]) {
    let (ma, mb, mc) = (s.m * s.k, s.k * s.n, s.m * s.n);
    let one = |bi: usize, cb: &mut [T], par: Parallelism| {
        let av = MatRef::row_major(a, bi * ma, s.k, s.trans_a, s.m);
        let bv = MatRef::row_major(b, bi * mb, s.n, s.trans_b, s.k);
        gemm(s.m, s.n, s.k, cb, 0, s.n, false, av, bv, par);
    };
    match algo {
        MatmulAlgo::GemmBatchParallel if s.batch > 1 => {
            c.par_chunks_mut(mc).enumerate().for_each(|(bi, cb)| one(bi, cb, Parallelism::None));
        }
        MatmulAlgo::GemmBatchParallel => one(0, c, Parallelism::None),
        _ => {
            for (bi, cb) in c.chunks_mut(mc).enumerate() {
                one(bi, cb, Parallelism::Rayon(0));
            }
        }
    }
}

/// Split-K in f32: slices of K into private partials, summed into `c` in completion order.
fn split_k(s: &MatmulShape, a: &[f32], b: &[f32], c: &mut [f32], ws: &mut [f32]) -> Result<()> {
    let p = split_count(s);
    let (ma, mb, mn) = (s.m * s.k, s.k * s.n, s.m * s.n);
    let partials = ws.get_mut(..p * mn).ok_or(KernelError::WorkspaceTooSmall {
        op: OP,
        algo: "gemm_split_k",
        required: p * mn,
        actual: 0,
    })?;
    for (bi, cb) in c.chunks_mut(mn).enumerate() {
        cb.fill(0.0);
        let acc = Mutex::new(cb);
        partials.par_chunks_mut(mn).enumerate().for_each(|(j, part)| {
            let (k0, k1) = (j * s.k / p, (j + 1) * s.k / p);
            let a_off = bi * ma + if s.trans_a { k0 * s.m } else { k0 };
            let b_off = bi * mb + if s.trans_b { k0 } else { k0 * s.n };
            let av = MatRef::row_major(a, a_off, s.k, s.trans_a, s.m);
            let bv = MatRef::row_major(b, b_off, s.n, s.trans_b, s.k);
            gemm(s.m, s.n, k1 - k0, part, 0, s.n, false, av, bv, Parallelism::None);
            let mut total = acc.lock().unwrap_or_else(PoisonError::into_inner);
            for (t, &x) in total.iter_mut().zip(part.iter()) {
                *t += x;
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_known_answer_all_algorithms() {
        // [[1,2,3],[4,5,6]] · [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let shape = MatmulShape::new(2, 2, 3);
        for &algo in MatmulAlgo::all() {
            let mut ws = vec![0.0; algo.workspace_len(&shape, FloatDType::F32)];
            let mut c = [0.0f32; 4];
            matmul(algo, shape, &a, &b, &mut c, &mut ws).unwrap();
            assert_eq!(c, [4.0, 5.0, 10.0, 11.0], "{algo:?}");
        }
    }

    #[test]
    fn rejects_wrong_lengths_and_small_workspace() {
        let shape = MatmulShape::new(2, 2, 3);
        let mut c = [0.0f32; 4];
        let err = matmul(MatmulAlgo::GemmRayon, shape, &[0.0; 5], &[0.0; 6], &mut c, &mut []).unwrap_err();
        assert!(matches!(err, KernelError::LengthMismatch { operand: "a", expected: 6, actual: 5, .. }));
        let a = [half::bf16::ZERO; 6];
        let mut cb = [half::bf16::ZERO; 4];
        let err = matmul(MatmulAlgo::GemmRayon, shape, &a, &a, &mut cb, &mut []).unwrap_err();
        assert!(matches!(err, KernelError::WorkspaceTooSmall { required: 16, .. }), "{err}");
    }

    #[test]
    fn metadata() {
        let s = MatmulShape::new(4, 4, 1024);
        assert_eq!(MatmulAlgo::from_name("gemm_split_k"), Some(MatmulAlgo::SplitK));
        assert!(!MatmulAlgo::SplitK.is_reproducible(&s));
        assert!(MatmulAlgo::GemmRayon.is_reproducible(&s));
        assert_eq!(MatmulAlgo::candidates(&s).len(), 3);
        assert!(MatmulAlgo::heuristic(&s).is_applicable(&s));
    }
}
