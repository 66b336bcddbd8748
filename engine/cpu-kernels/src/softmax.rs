//! Softmax and log-softmax over the last dimension, numerically stable (the row
//! maximum is subtracted before `exp`), with their backward passes. Inputs are
//! `[rows, cols]` row-major; f16/bf16 rows are widened to f32 for the whole row.

use rayon::prelude::*;

use super::element::Element;
use super::error::{KernelError, Result, check_len, checked_product};
use super::par::PAR_THRESHOLD;

fn check(op: &'static str, rows: usize, cols: usize, lens: &[(&'static str, usize)]) -> Result<usize> {
    let n = checked_product(op, &[rows, cols])?;
    if cols == 0 && rows > 0 {
        return Err(KernelError::InvalidShape { op, reason: "softmax over an empty last dimension".into() });
    }
    for &(name, len) in lens {
        check_len(op, name, len, n)?;
    }
    Ok(n)
}

/// Applies `f(a_row, b_row, y_row)` in f32 to every row; `b` may be empty.
fn rows<T: Element, F>(a: &[T], b: &[T], y: &mut [T], cols: usize, f: F)
where
    F: Fn(&[f32], &[f32], &mut [f32]) + Sync,
{
    if a.is_empty() {
        return;
    }
    let b_cols = if b.is_empty() { 0 } else { cols };
    let run = |buf: &mut Vec<f32>, ar: &[T], br: &[T], yr: &mut [T]| {
        if let (Some(af), Some(bf)) = (T::as_f32(ar), T::as_f32(br)) {
            f(af, bf, T::as_f32_mut(yr).expect("f32 input implies f32 output"));
            return;
        }
        buf.resize(3 * cols, 0.0);
        let (fa, rest) = buf.split_at_mut(cols);
        let (fb, fy) = rest.split_at_mut(cols);
        T::slice_to_f32(ar, fa);
        T::slice_to_f32(br, &mut fb[..br.len()]);
        f(fa, &fb[..br.len()], fy);
        T::slice_from_f32(fy, yr);
    };
    // Empty `b` chunks: zip against an iterator of empty slices.
    let b_row = |i: usize| if b_cols == 0 { &b[..0] } else { &b[i * cols..(i + 1) * cols] };
    if a.len() >= PAR_THRESHOLD {
        a.par_chunks(cols)
            .zip(y.par_chunks_mut(cols))
            .enumerate()
            .for_each_init(Vec::new, |buf, (i, (ar, yr))| run(buf, ar, b_row(i), yr));
    } else {
        let mut buf = Vec::new();
        for (i, (ar, yr)) in a.chunks(cols).zip(y.chunks_mut(cols)).enumerate() {
            run(&mut buf, ar, b_row(i), yr);
        }
    }
}

fn row_max(x: &[f32]) -> f32 {
    // A NaN anywhere makes the row NaN, as in PyTorch.
    x.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m })
}

/// `y[r, :] = exp(x[r, :] − max) / Σ exp(x[r, :] − max)`.
pub fn softmax<T: Element>(x: &[T], rows: usize, cols: usize, y: &mut [T]) -> Result<()> {
    check("softmax", rows, cols, &[("x", x.len()), ("y", y.len())])?;
    self::rows(x, &[], y, cols, |x, _, y| {
        let m = row_max(x);
        let mut s = 0.0f32;
        for (o, &v) in y.iter_mut().zip(x) {
            *o = (v - m).exp();
            s += *o;
        }
        let inv = 1.0 / s;
        y.iter_mut().for_each(|o| *o *= inv);
    });
    Ok(())
}

/// `y[r, :] = x[r, :] − max − ln Σ exp(x[r, :] − max)`.
pub fn log_softmax<T: Element>(x: &[T], rows: usize, cols: usize, y: &mut [T]) -> Result<()> {
    check("log_softmax", rows, cols, &[("x", x.len()), ("y", y.len())])?;
    self::rows(x, &[], y, cols, |x, _, y| {
        let m = row_max(x);
        let s: f32 = x.iter().map(|&v| (v - m).exp()).sum();
        // (x − max) − ln Σ: subtracting max first keeps the small result exact.
        let ls = s.ln();
        for (o, &v) in y.iter_mut().zip(x) {
            *o = (v - m) - ls;
        }
    });
    Ok(())
}

/// Gradient of [`softmax`] from its output `y`: `gx = y ⊙ (gy − Σ gy ⊙ y)` per row.
pub fn softmax_backward<T: Element>(y: &[T], gy: &[T], rows: usize, cols: usize, gx: &mut [T]) -> Result<()> {
    check("softmax_backward", rows, cols, &[("y", y.len()), ("gy", gy.len()), ("gx", gx.len())])?;
    self::rows(y, gy, gx, cols, |y, gy, gx| {
        let dot: f32 = y.iter().zip(gy).map(|(a, b)| a * b).sum();
        for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
            *o = yv * (g - dot);
        }
    });
    Ok(())
}

/// Gradient of [`log_softmax`] from its output `y`: `gx = gy − exp(y) · Σ gy` per row.
pub fn log_softmax_backward<T: Element>(y: &[T], gy: &[T], rows: usize, cols: usize, gx: &mut [T]) -> Result<()> {
    check("log_softmax_backward", rows, cols, &[("y", y.len()), ("gy", gy.len()), ("gx", gx.len())])?;
    self::rows(y, gy, gx, cols, |y, gy, gx| {
        let s: f32 = gy.iter().sum();
        for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
            *o = g - yv.exp() * s;
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_for_large_logits() {
        let x = [1000.0f32, 1001.0, 1002.0, -5.0, -5.0, -5.0];
        let mut y = [0.0f32; 6];
        softmax(&x, 2, 3, &mut y).unwrap();
        assert!((y[2] - 0.665_240_94).abs() < 1e-6 && (y[3] - 1.0 / 3.0).abs() < 1e-7, "{y:?}");
        log_softmax(&x, 2, 3, &mut y).unwrap();
        assert!((y[0] - (-2.407_606)).abs() < 1e-6, "{y:?}");
        let mut nan = [0.0f32; 3];
        softmax(&[1.0, f32::NAN, 2.0], 1, 3, &mut nan).unwrap();
        assert!(nan.iter().all(|v| v.is_nan()));
        assert!(softmax::<f32>(&[], 1, 0, &mut []).is_err());
        softmax::<f32>(&[], 0, 0, &mut []).unwrap();
        log_softmax_backward::<f32>(&[], &[], 0, 5, &mut []).unwrap();
    }
}
