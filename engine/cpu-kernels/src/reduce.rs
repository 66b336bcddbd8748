//! Reductions: sum, mean, per-channel bias gradients, and `fill` (their backward).
//!
//! Sums accumulate in f64 over fixed chunks whose partial sums are added in index
//! order, so the result is bitwise identical whatever the thread count.

use std::ops::Range;

use rayon::prelude::*;

use super::element::Element;
use super::error::{Result, check_len, checked_product};
use super::par::{CHUNK, PAR_THRESHOLD};

/// `Σ f(i)` for `i` in `0..parts`, the partial results added in index order whether
/// or not they were computed in parallel, so the result never depends on scheduling.
pub(crate) fn ordered_sum(parts: usize, parallel: bool, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    if parallel {
        let partials: Vec<f64> = (0..parts).into_par_iter().map(&f).collect();
        partials.into_iter().sum()
    } else {
        (0..parts).map(f).sum()
    }
}

/// `Σ f(range)` over fixed `CHUNK`-sized ranges of `0..len`, in index order.
pub(crate) fn chunked_sum(len: usize, f: impl Fn(Range<usize>) -> f64 + Sync) -> f64 {
    ordered_sum(len.div_ceil(CHUNK), len >= PAR_THRESHOLD, |i| f(i * CHUNK..((i + 1) * CHUNK).min(len)))
}

/// Sum of a slice in f64, widening f16/bf16 in blocks.
pub(crate) fn sum_f64<T: Element>(x: &[T]) -> f64 {
    if let Some(xf) = T::as_f32(x) {
        return xf.iter().map(|&v| f64::from(v)).sum();
    }
    let mut buf = [0.0f32; 256];
    x.chunks(256)
        .map(|c| {
            T::slice_to_f32(c, &mut buf[..c.len()]);
            buf[..c.len()].iter().map(|&v| f64::from(v)).sum::<f64>()
        })
        .sum()
}

/// `Σ x`, accumulated in f64 and rounded to f32 (0 for an empty slice).
pub fn sum<T: Element>(x: &[T]) -> f32 {
    chunked_sum(x.len(), |r| sum_f64(&x[r])) as f32
}

/// `Σ x / len` (NaN for an empty slice, as in PyTorch).
pub fn mean<T: Element>(x: &[T]) -> f32 {
    (chunked_sum(x.len(), |r| sum_f64(&x[r])) / x.len() as f64) as f32
}

/// `y[..] = value`: the backward of `sum` (`value = g`) and `mean` (`value = g / len`).
pub fn fill<T: Element>(value: f32, y: &mut [T]) {
    let v = T::from_f32(value);
    if y.len() >= PAR_THRESHOLD {
        y.par_chunks_mut(CHUNK).for_each(|c| c.fill(v));
    } else {
        y.fill(v);
    }
}

/// `gb[c] = Σ_{o, i} gy[o, c, i]` over a `[outer, channels, inner]` layout: the bias
/// gradient of [`crate::add_bias`] (linear: `[rows, features, 1]`; conv:
/// `[n, c, h·w]`). Accumulates in f64 in a fixed order.
pub fn bias_grad<T: Element>(gy: &[T], outer: usize, channels: usize, inner: usize, gb: &mut [T]) -> Result<()> {
    let n = checked_product("bias_grad", &[outer, channels, inner])?;
    check_len("bias_grad", "gy", gy.len(), n)?;
    check_len("bias_grad", "gb", gb.len(), channels)?;
    if channels == 0 {
        return Ok(());
    }
    if inner == 1 {
        // Rows of `channels`: fixed blocks of rows give partial vectors, added in order.
        let rows_per_block = (CHUNK / channels).max(1);
        let block = |rows: &[T]| {
            let mut acc = vec![0.0f64; channels];
            let mut buf = vec![0.0f32; channels];
            for row in rows.chunks(channels) {
                T::slice_to_f32(row, &mut buf);
                acc.iter_mut().zip(&buf).for_each(|(a, &v)| *a += f64::from(v));
            }
            acc
        };
        let partials: Vec<Vec<f64>> = if n >= PAR_THRESHOLD {
            gy.par_chunks(rows_per_block * channels).map(block).collect()
        } else {
            gy.chunks(rows_per_block * channels).map(block).collect()
        };
        let mut total = vec![0.0f64; channels];
        for p in partials {
            total.iter_mut().zip(p).for_each(|(t, v)| *t += v);
        }
        gb.iter_mut().zip(total).for_each(|(g, t)| *g = T::from_f64(t));
    } else {
        let channel = |(c, g): (usize, &mut T)| {
            let s: f64 = (0..outer).map(|o| sum_f64(&gy[(o * channels + c) * inner..][..inner])).sum();
            *g = T::from_f64(s);
        };
        if n >= PAR_THRESHOLD {
            gb.par_iter_mut().enumerate().for_each(channel);
        } else {
            gb.iter_mut().enumerate().for_each(channel);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums() {
        let x: Vec<f32> = (0..100_000).map(|i| (i % 7) as f32 - 3.0).collect();
        let exact: f64 = x.iter().map(|&v| f64::from(v)).sum();
        assert_eq!(sum(&x), exact as f32);
        assert_eq!(mean(&x), (exact / 1e5) as f32);
        assert!(mean::<f32>(&[]).is_nan());
        assert_eq!(sum::<f32>(&[]), 0.0);
        let mut gb = [0.0f32; 2];
        bias_grad(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, 2, 1, &mut gb).unwrap();
        assert_eq!(gb, [9.0, 12.0]);
        bias_grad(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 2, 2, 2, &mut gb).unwrap();
        assert_eq!(gb, [1.0 + 2.0 + 5.0 + 6.0, 3.0 + 4.0 + 7.0 + 8.0]);
        let mut y = [0.0f32; 3];
        fill(0.25, &mut y);
        assert_eq!(y, [0.25; 3]);
    }
}
