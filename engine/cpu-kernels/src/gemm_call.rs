//! A bounds-checked, safe front to `gemm::gemm` for f32 and f16.

use gemm::Parallelism;

use super::element::{Element, FloatDType};

/// A strided view of a matrix inside a slice: element `(i, j)` is
/// `data[offset + i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a, T> {
    pub data: &'a [T],
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A row-major `rows × cols` matrix at `offset`, or its transpose when `trans`
    /// (then the slice stores the `cols × rows` matrix row-major).
    pub fn row_major(data: &'a [T], offset: usize, cols: usize, trans: bool, rows: usize) -> Self {
        if trans { MatRef { data, offset, rs: 1, cs: rows } } else { MatRef { data, offset, rs: cols, cs: 1 } }
    }

    /// Whether every element of a `rows × cols` view lies inside the slice.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1).checked_mul(self.rs).zip((cols - 1).checked_mul(self.cs));
        matches!(last, Some((a, b)) if self.offset.checked_add(a).and_then(|x| x.checked_add(b)).is_some_and(|end| end < self.data.len()))
    }
}

/// `dst[m × n] (row-major, row stride dst_rs, at dst_off) = [dst +] lhs[m × k] · rhs[k × n]`.
///
/// Panics if a view does not fit its slice or `T` is bf16: both are internal
/// invariants the calling kernels establish before getting here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_off: usize,
    dst_rs: usize,
    accumulate: bool,
    lhs: MatRef<'_, T>,
    rhs: MatRef<'_, T>,
    parallelism: Parallelism,
) {
    assert!(T::DTYPE != FloatDType::BF16, "the gemm crate has no bf16 kernels; bf16 goes through f32");
    if m == 0 || n == 0 {
        return;
    }
    let dst_view = MatRef { data: &*dst, offset: dst_off, rs: dst_rs, cs: 1 };
    assert!(dst_view.fits(m, n), "gemm: destination view out of bounds");
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                dst[dst_off + i * dst_rs..][..n].fill(T::ZERO);
            }
        }
        return;
    }
    assert!(lhs.fits(m, k) && rhs.fits(k, n), "gemm: operand view out of bounds");
    let stride = |s: usize| isize::try_from(s).expect("stride fits isize");
    let one = T::from_f32(1.0);
    let alpha = if accumulate { one } else { T::ZERO };
    // SAFETY: every element of the three views lies inside its slice (checked above),
    // `dst` is uniquely borrowed so it aliases neither operand, and `gemm` dispatches
    // on `T` being f32 or f16 (bf16 rejected above; `Element` is sealed to the three).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_off),
            1,
            stride(dst_rs),
            accumulate,
            lhs.data.as_ptr().add(lhs.offset),
            stride(lhs.cs),
            stride(lhs.rs),
            rhs.data.as_ptr().add(rhs.offset),
            stride(rhs.cs),
            stride(rhs.rs),
            alpha,
            one,
            false,
            false,
            false,
            parallelism,
        );
    }
}
