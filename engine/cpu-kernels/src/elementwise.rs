//! Binary and scaling kernels over same-shaped slices.
//!
//! Backward rules: the gradient of `add` is the incoming gradient for both operands
//! (no kernel needed); `scale`'s is `scale(gy, alpha)`; `mul`'s is [`mul_backward`];
//! `add_bias`'s is [`crate::bias_grad`] for the bias and `gy` for `x`.

use rayon::prelude::*;

use super::element::Element;
use super::error::{Result, check_len, checked_product};
use super::par::{PAR_THRESHOLD, map1, map2};

/// `y = a + b`.
///
/// Never inlined, in every build: a simulated run's differential profile
/// names functions by their own instructions, and a kernel inlined into its
/// caller in one build and not in another would read as one function
/// shrinking and another growing.
#[inline(never)]
pub fn add<T: Element>(a: &[T], b: &[T], y: &mut [T]) -> Result<()> {
    check_len("add", "b", b.len(), a.len())?;
    check_len("add", "y", y.len(), a.len())?;
    map2(a, b, y, |x, z| x + z);
    // Test only (the `test-slowdown` feature, never in a release): the first
    // fifth is added again, so `add` does 20 % more work for the same result —
    // the planted slowdown the time gate's acceptance runs must flag.
    #[cfg(feature = "test-slowdown")]
    {
        let k = a.len() / 5;
        map2(&a[..k], &b[..k], &mut y[..k], |x, z| x + z);
    }
    // Test only (the `test-slowdown-2pct` feature): the first fiftieth is added
    // again in a loop of `add`'s own — 2 % more work, which a differential
    // profile names as `add`'s.
    #[cfg(feature = "test-slowdown-2pct")]
    {
        let k = a.len() / 50;
        for ((o, &x), &z) in y[..k].iter_mut().zip(&a[..k]).zip(&b[..k]) {
            *o = T::from_f32(x.to_f32() + z.to_f32());
        }
    }
    Ok(())
}

/// `y = a * b`.
pub fn mul<T: Element>(a: &[T], b: &[T], y: &mut [T]) -> Result<()> {
    check_len("mul", "b", b.len(), a.len())?;
    check_len("mul", "y", y.len(), a.len())?;
    map2(a, b, y, |x, z| x * z);
    Ok(())
}

/// Gradients of `y = a * b`: `ga = gy * b`, `gb = gy * a`.
pub fn mul_backward<T: Element>(a: &[T], b: &[T], gy: &[T], ga: &mut [T], gb: &mut [T]) -> Result<()> {
    let n = a.len();
    check_len("mul_backward", "b", b.len(), n)?;
    check_len("mul_backward", "gy", gy.len(), n)?;
    check_len("mul_backward", "ga", ga.len(), n)?;
    check_len("mul_backward", "gb", gb.len(), n)?;
    map2(gy, b, ga, |g, z| g * z);
    map2(gy, a, gb, |g, x| g * x);
    Ok(())
}

/// `y = alpha * x` (also the backward of itself).
pub fn scale<T: Element>(x: &[T], alpha: f32, y: &mut [T]) -> Result<()> {
    check_len("scale", "y", y.len(), x.len())?;
    map1(x, y, |v| alpha * v);
    Ok(())
}

/// `y[o, c, i] = x[o, c, i] + bias[c]` over a `[outer, channels, inner]` layout:
/// a linear layer's bias is `[rows, features, 1]`, a conv's is `[n, c, h·w]`.
pub fn add_bias<T: Element>(
    x: &[T],
    bias: &[T],
    outer: usize,
    channels: usize,
    inner: usize,
    y: &mut [T],
) -> Result<()> {
    let n = checked_product("add_bias", &[outer, channels, inner])?;
    check_len("add_bias", "x", x.len(), n)?;
    check_len("add_bias", "bias", bias.len(), channels)?;
    check_len("add_bias", "y", y.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    if inner == 1 {
        // Rows of `channels`: one bias vector per row.
        let row = |(xr, yr): (&[T], &mut [T])| map2(xr, bias, yr, |v, b| v + b);
        if n >= PAR_THRESHOLD {
            x.par_chunks(channels).zip(y.par_chunks_mut(channels)).for_each(row);
        } else {
            x.chunks(channels).zip(y.chunks_mut(channels)).for_each(row);
        }
    } else {
        // Planes of `inner`: one bias value per plane.
        let plane = |(p, (xp, yp)): (usize, (&[T], &mut [T]))| {
            let b = bias[p % channels].to_f32();
            map1(xp, yp, |v| v + b);
        };
        if n >= PAR_THRESHOLD {
            x.par_chunks(inner).zip(y.par_chunks_mut(inner)).enumerate().for_each(plane);
        } else {
            x.chunks(inner).zip(y.chunks_mut(inner)).enumerate().for_each(plane);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::*;

    #[test]
    fn known_answers() {
        let a = [1.0f32, -2.0, 3.5];
        let b = [0.5f32, 4.0, -1.0];
        let mut y = [0.0f32; 3];
        add(&a, &b, &mut y).unwrap();
        assert_eq!(y, [1.5, 2.0, 2.5]);
        mul(&a, &b, &mut y).unwrap();
        assert_eq!(y, [0.5, -8.0, -3.5]);
        scale(&a, 2.0, &mut y).unwrap();
        assert_eq!(y, [2.0, -4.0, 7.0]);
        let mut y6 = [0.0f32; 6];
        add_bias(&[0.0; 6], &[1.0, 2.0], 1, 2, 3, &mut y6).unwrap();
        assert_eq!(y6, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        add_bias(&[0.0; 6], &[1.0, 2.0], 3, 2, 1, &mut y6).unwrap();
        assert_eq!(y6, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
        let h: Vec<bf16> = a.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut hy = vec![bf16::ZERO; 3];
        add(&h, &h, &mut hy).unwrap();
        assert_eq!(hy.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), [2.0, -4.0, 7.0]);
        assert!(add(&a, &b[..2], &mut y).is_err());
    }
}
