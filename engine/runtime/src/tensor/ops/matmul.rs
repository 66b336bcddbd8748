//! Matrix products (plain, batched, with transposed operands), with the
//! autotuner's algorithm.

use super::check_pair;
use crate::backend::KernelTiming;
use crate::cpu_kernels::MatmulShape;
use crate::error::{Result, TensorError};
use crate::tensor::value::Tensor;

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

    /// The matrix products (see `Backend::matmul` for `timed`).
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
        let (out, timing) = self.device().backend().matmul(self.storage(), other.storage(), shape, timed)?;
        Ok((Tensor::from_storage(out, &out_shape), timing))
    }
}
