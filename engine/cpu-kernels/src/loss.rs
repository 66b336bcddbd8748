//! Losses in f32 (autocast keeps losses in f32): cross-entropy from logits with
//! `i64` class labels, and mean squared error, both with mean reduction and their
//! backward passes. Sums accumulate in f64 in a fixed order.

use rayon::prelude::*;

use super::error::{KernelError, Result, check_len, checked_product};
use super::par::{CHUNK, PAR_THRESHOLD};
use super::reduce::{chunked_sum, ordered_sum};

fn check_labels(op: &'static str, labels: &[i64], classes: usize) -> Result<()> {
    match labels.iter().position(|&l| l < 0 || l as u64 >= classes as u64) {
        Some(row) => Err(KernelError::LabelOutOfRange { op, row, label: labels[row], classes }),
        None => Ok(()),
    }
}

fn check_ce(op: &'static str, logits: usize, labels: &[i64], rows: usize, classes: usize) -> Result<()> {
    let n = checked_product(op, &[rows, classes])?;
    if classes == 0 {
        return Err(KernelError::InvalidShape { op, reason: "cross-entropy over zero classes".into() });
    }
    check_len(op, "logits", logits, n)?;
    check_len(op, "labels", labels.len(), rows)?;
    check_labels(op, labels, classes)
}

/// `max` and `ln Σ exp(x − max)` of one row, the sum in f64.
fn max_and_log_sum(row: &[f32]) -> (f32, f64) {
    let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
    let s: f64 = row.iter().map(|&v| f64::from(v - m).exp()).sum();
    (m, s.ln())
}

/// `mean_r (logsumexp(logits[r, :]) − logits[r, labels[r]])`, PyTorch's
/// `cross_entropy(logits, labels)` (no weights, no ignored index). NaN for zero rows.
pub fn cross_entropy(logits: &[f32], labels: &[i64], rows: usize, classes: usize) -> Result<f32> {
    check_ce("cross_entropy", logits.len(), labels, rows, classes)?;
    let rows_per_chunk = (CHUNK / classes).max(1);
    let parallel = rows * classes >= PAR_THRESHOLD;
    let total = ordered_sum(rows.div_ceil(rows_per_chunk), parallel, |c| {
        let (r0, r1) = (c * rows_per_chunk, ((c + 1) * rows_per_chunk).min(rows));
        (r0..r1)
            .map(|i| {
                let row = &logits[i * classes..(i + 1) * classes];
                let (m, ls) = max_and_log_sum(row);
                ls - (f64::from(row[labels[i] as usize]) - f64::from(m))
            })
            .sum()
    });
    Ok((total / rows as f64) as f32)
}

/// Gradient of [`cross_entropy`]: `g[r, j] = grad_out / rows · (softmax(logits[r])_j − [j = labels[r]])`.
pub fn cross_entropy_backward(
    logits: &[f32],
    labels: &[i64],
    rows: usize,
    classes: usize,
    grad_out: f32,
    grad_logits: &mut [f32],
) -> Result<()> {
    check_ce("cross_entropy_backward", logits.len(), labels, rows, classes)?;
    check_len("cross_entropy_backward", "grad_logits", grad_logits.len(), rows * classes)?;
    let scale = grad_out / rows as f32;
    let row = |(i, (x, g)): (usize, (&[f32], &mut [f32]))| {
        let (m, ls) = max_and_log_sum(x);
        let ls = ls as f32;
        for (o, &v) in g.iter_mut().zip(x) {
            *o = scale * ((v - m) - ls).exp();
        }
        g[labels[i] as usize] -= scale;
    };
    if rows * classes >= PAR_THRESHOLD {
        logits.par_chunks(classes).zip(grad_logits.par_chunks_mut(classes)).enumerate().for_each(row);
    } else {
        logits.chunks(classes).zip(grad_logits.chunks_mut(classes)).enumerate().for_each(row);
    }
    Ok(())
}

/// `mean((pred − target)²)`. NaN for empty slices.
pub fn mse(pred: &[f32], target: &[f32]) -> Result<f32> {
    check_len("mse", "target", target.len(), pred.len())?;
    let total = chunked_sum(pred.len(), |r| {
        pred[r.clone()]
            .iter()
            .zip(&target[r])
            .map(|(&p, &t)| {
                let d = f64::from(p) - f64::from(t);
                d * d
            })
            .sum()
    });
    Ok((total / pred.len() as f64) as f32)
}

/// Gradient of [`mse`] for `pred`: `2 · (pred − target) · grad_out / len`
/// (the gradient for `target` is its negation).
pub fn mse_backward(pred: &[f32], target: &[f32], grad_out: f32, grad_pred: &mut [f32]) -> Result<()> {
    check_len("mse_backward", "target", target.len(), pred.len())?;
    check_len("mse_backward", "grad_pred", grad_pred.len(), pred.len())?;
    let k = 2.0 * grad_out / pred.len() as f32;
    super::par::map2(pred, target, grad_pred, |p, t| k * (p - t));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // Uniform logits: loss = ln(classes).
        let loss = cross_entropy(&[0.0; 8], &[0, 3], 2, 4).unwrap();
        assert!((loss - 4f32.ln()).abs() < 1e-7);
        let mut g = [0.0f32; 8];
        cross_entropy_backward(&[0.0; 8], &[0, 3], 2, 4, 1.0, &mut g).unwrap();
        assert_eq!(g, [-0.375, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, -0.375]);
        let err = cross_entropy(&[0.0; 4], &[0, 2], 2, 2).unwrap_err();
        assert!(matches!(err, KernelError::LabelOutOfRange { row: 1, label: 2, classes: 2, .. }), "{err}");
        assert_eq!(mse(&[1.0, 2.0], &[0.0, 0.0]).unwrap(), 2.5);
        let mut gp = [0.0f32; 2];
        mse_backward(&[1.0, 2.0], &[0.0, 0.0], 1.0, &mut gp).unwrap();
        assert_eq!(gp, [1.0, 2.0]);
    }
}
