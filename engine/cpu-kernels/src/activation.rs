//! ReLU and GELU with their backward passes.
//!
//! GELU is the **tanh approximation** (PyTorch's `gelu(x, approximate='tanh')`):
//! `0.5·x·(1 + tanh(u))` with `u = √(2/π)·(x + 0.044715·x³)`. It is evaluated in the
//! algebraically identical form `x · σ(2u) = x / (1 + e^(−2u))`, which does not
//! cancel for negative `x` the way `1 + tanh(u)` does.

use super::element::Element;
use super::error::{Result, check_len};
use super::par::{map1, map2};

/// `√(2/π)`.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044_715;

/// `y = max(x, 0)`; NaN stays NaN, as in PyTorch.
pub fn relu<T: Element>(x: &[T], y: &mut [T]) -> Result<()> {
    check_len("relu", "y", y.len(), x.len())?;
    map1(x, y, |v| if v < 0.0 { 0.0 } else { v });
    Ok(())
}

/// `gx = gy` where `x > 0`, else 0.
pub fn relu_backward<T: Element>(x: &[T], gy: &[T], gx: &mut [T]) -> Result<()> {
    check_len("relu_backward", "gy", gy.len(), x.len())?;
    check_len("relu_backward", "gx", gx.len(), x.len())?;
    map2(x, gy, gx, |v, g| if v > 0.0 { g } else { 0.0 });
    Ok(())
}

/// GELU, tanh approximation (see the module docs).
pub fn gelu<T: Element>(x: &[T], y: &mut [T]) -> Result<()> {
    check_len("gelu", "y", y.len(), x.len())?;
    map1(x, y, gelu_f32);
    Ok(())
}

/// Gradient of [`gelu`]: `gx = gy · (σ(2u) + x·σ(2u)·(1 − σ(2u))·2u′(x))`.
pub fn gelu_backward<T: Element>(x: &[T], gy: &[T], gx: &mut [T]) -> Result<()> {
    check_len("gelu_backward", "gy", gy.len(), x.len())?;
    check_len("gelu_backward", "gx", gx.len(), x.len())?;
    map2(x, gy, gx, |v, g| g * gelu_grad_f32(v));
    Ok(())
}

#[inline(always)]
fn gelu_f32(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

#[inline(always)]
fn gelu_grad_f32(x: f32) -> f32 {
    let x2 = x * x;
    let u = SQRT_2_OVER_PI * (x + GELU_CUBIC * x2 * x);
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x2);
    // e = e^(−2|u|) ∈ (0, 1]: no overflow on either side.
    let e = (-2.0 * u.abs()).exp();
    let r = 1.0 / (1.0 + e);
    let s = if u >= 0.0 { r } else { e * r };
    let s_one_minus_s = e * r * r;
    s + 2.0 * x * s_one_minus_s * du
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let x = [-3.0f32, -1.0, 0.0, 0.5, 2.0, -100.0, 100.0, f32::NAN];
        let mut y = [0.0f32; 8];
        relu(&x, &mut y).unwrap();
        assert_eq!(&y[..7], &[0.0, 0.0, 0.0, 0.5, 2.0, 0.0, 100.0]);
        assert!(y[7].is_nan());
        gelu(&x, &mut y).unwrap();
        // torch.nn.functional.gelu(x, approximate='tanh')
        let expect = [-0.003_637_392_3f32, -0.158_808, 0.0, 0.345_714_2, 1.954_597_7, -0.0, 100.0];
        for (g, e) in y.iter().zip(expect) {
            assert!((g - e).abs() <= 1e-6 * e.abs().max(1.0), "{g} vs {e}");
        }
        let mut gx = [0.0f32; 8];
        gelu_backward(&x, &[1.0; 8], &mut gx).unwrap();
        assert!(gx[..7].iter().all(|v| v.is_finite()));
        assert_eq!(gx[2], 0.5);
        assert_eq!(gx[5], 0.0);
        assert_eq!(gx[6], 1.0);
    }
}
