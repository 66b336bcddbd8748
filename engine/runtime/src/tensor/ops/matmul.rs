//! Matrix products (plain, batched, with transposed operands), with the
//! autotuner's algorithm.

use std::sync::Arc;

use super::{KernelTiming, check_pair, emit_kernel, workspace};
use crate::autotune;
use crate::cpu_kernels::{self as k, Algorithm, KernelCall, MatmulAlgo, MatmulShape};
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

impl Tensor {
    /// Matrix product `[m, k] · [k, n]`, or batched `[b, m, k] · [b, k, n]`.
    /// The algorithm comes from the autotuner.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Ok(self.matmul_impl(other, false, false, false)?.0)
    }

    /// [`matmul`](Self::matmul) with the algorithm chosen and its time.
    pub fn matmul_timed(&self, other: &Tensor) -> Result<(Tensor, KernelTiming)> {
        self.matmul_impl(other, false, false, true)
    }

    /// `op(a) · op(b)` where `op` transposes the last two dimensions of an operand
    /// whose flag is set: `a` is stored `[k, m]` (or `[b, k, m]`) when `trans_a`, `b`
    /// is stored `[n, k]` (or `[b, n, k]`) when `trans_b`. No copy is made: the
    /// kernel reads the operands with swapped strides. A linear layer's forward is
    /// `x · wᵀ` (`trans_b`), its weight gradient `gyᵀ · x` (`trans_a`).
    pub fn matmul_transposed(&self, other: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
        Ok(self.matmul_impl(other, trans_a, trans_b, false)?.0)
    }

    /// [`matmul_transposed`](Self::matmul_transposed) with the algorithm chosen and its time.
    pub fn matmul_transposed_timed(
        &self,
        other: &Tensor,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<(Tensor, KernelTiming)> {
        self.matmul_impl(other, trans_a, trans_b, true)
    }

    /// The matrix products. On a GPU, `timed` waits for the product and reports
    /// its device time; untimed products are only queued (0 ns). Host products
    /// always run to completion and report their time.
    fn matmul_impl(&self, other: &Tensor, trans_a: bool, trans_b: bool, timed: bool) -> Result<(Tensor, KernelTiming)> {
        const OP: &str = "matmul";
        check_pair(OP, self, other)?;
        let (a, b) = (self.shape(), other.shape());
        let bad = |reason: &str| TensorError::ShapeMismatch {
            op: OP,
            lhs: a.to_vec(),
            rhs: b.to_vec(),
            reason: reason.to_owned(),
        };
        // (rows, cols) of op(a) and op(b) from the last two stored dimensions.
        let mk = |d: &[usize], t: bool| if t { (d[1], d[0]) } else { (d[0], d[1]) };
        let (shape, out_shape) = match (a.len(), b.len()) {
            (2, 2) => {
                let ((m, k), (kb, n)) = (mk(a, trans_a), mk(b, trans_b));
                if k != kb {
                    return Err(bad("inner dimensions differ"));
                }
                (MatmulShape::new(m, n, k), vec![m, n])
            }
            (3, 3) => {
                let ((m, k), (kb, n)) = (mk(&a[1..], trans_a), mk(&b[1..], trans_b));
                if a[0] != b[0] || k != kb {
                    return Err(bad("inner dimensions differ"));
                }
                (MatmulShape::batched(a[0], m, n, k), vec![a[0], m, n])
            }
            _ => return Err(bad("expected two 2-d or two 3-d tensors")),
        };
        let shape = shape.transposed(trans_a, trans_b);
        let dtype = self.dtype().float().ok_or(TensorError::UnsupportedDType {
            op: OP,
            dtype: self.dtype(),
            reason: "matmul needs a float dtype",
        })?;
        if let Some(backend) = self.device().cuda() {
            return crate::cuda::blas::matmul(backend, self, other, shape, &out_shape, timed);
        }
        let device = self.device().clone();
        with_float!(self.dtype(), OP, |T| {
            let (a, b) = (self.host_slice::<T>(OP)?, other.host_slice::<T>(OP)?);
            let run = |algo: MatmulAlgo, c: &mut [T]| -> Result<u64> {
                let ws_len = algo.workspace_len(&shape, dtype);
                let mut ws = workspace(&device, ws_len)?;
                let start = now_ns();
                k::matmul(algo, shape, a, b, c, ws.slice_mut::<f32>())?;
                let took = now_ns().saturating_sub(start);
                emit_kernel(&device, OP, algo.name(), start, KernelCall::Matmul { shape, dtype });
                Ok(took)
            };
            let algo = autotune::global().choose(&device, &shape, dtype, |algo| {
                let mut scratch = Tensor::zeros(&out_shape, self.dtype(), &device)?;
                let s = Arc::get_mut(&mut scratch.storage).expect("a new tensor is not shared");
                run(algo, s.slice_mut::<T>())
            })?;
            let mut took = 0;
            let out = Tensor::build(&out_shape, self.dtype(), &device, |s| {
                took = run(algo, s.slice_mut::<T>())?;
                Ok(())
            })?;
            Ok((out, KernelTiming { algorithm: algo.name(), duration_ns: took }))
        })
    }
}
