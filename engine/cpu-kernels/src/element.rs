//! The floating-point storage types the kernels accept.

use std::fmt;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// A floating-point storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloatDType {
    F32,
    F16,
    BF16,
}

impl FloatDType {
    /// Every floating-point dtype, in a stable order.
    pub const ALL: [FloatDType; 3] = [FloatDType::F32, FloatDType::F16, FloatDType::BF16];

    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            FloatDType::F32 => 4,
            FloatDType::F16 | FloatDType::BF16 => 2,
        }
    }

    /// The name as PyTorch spells it without the `torch.` prefix (`float32`, `float16`, `bfloat16`).
    pub const fn as_str(self) -> &'static str {
        match self {
            FloatDType::F32 => "float32",
            FloatDType::F16 => "float16",
            FloatDType::BF16 => "bfloat16",
        }
    }
}

impl fmt::Display for FloatDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A storage type the kernels are generic over: f32, [`half::f16`] or [`half::bf16`].
///
/// Kernels compute in f32: values are widened with [`Element::to_f32`] (exact for
/// all three types) and narrowed once with [`Element::from_f32`] (round to nearest even).
pub trait Element:
    Copy + Send + Sync + Default + PartialEq + PartialOrd + fmt::Debug + 'static + sealed::Sealed
{
    /// The matching [`FloatDType`].
    const DTYPE: FloatDType;
    /// Zero.
    const ZERO: Self;

    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
    /// Rounds an f32 to the nearest representable value (ties to even).
    fn from_f32(v: f32) -> Self;
    /// Widens to f64 (exact).
    fn to_f64(self) -> f64 {
        f64::from(self.to_f32())
    }
    /// Rounds an f64 to the nearest representable value (one rounding, not two).
    fn from_f64(v: f64) -> Self;

    /// Widens a slice into `dst` (same length), vectorised where the CPU allows.
    fn slice_to_f32(src: &[Self], dst: &mut [f32]);
    /// Narrows a slice of f32 into `dst` (same length), vectorised where the CPU allows.
    fn slice_from_f32(src: &[f32], dst: &mut [Self]);

    /// The slice itself when `Self` is f32, so f32 paths skip the conversion.
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// The slice itself when `Self` is f32, so f32 paths skip the conversion.
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

impl Element for f32 {
    const DTYPE: FloatDType = FloatDType::F32;
    const ZERO: Self = 0.0;

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    #[inline(always)]
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    #[inline(always)]
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
}

/// f64 → f32 rounding to odd: truncate, and set the last bit when inexact. Rounding
/// that to f16 or bf16 (≥ 2 fewer significand bits) with ties-to-even then equals
/// rounding the f64 directly.
fn f64_to_f32_round_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f64::from(f) == v || f.to_bits() & 1 == 1 {
        return f;
    }
    // Inexact with an even last bit: step one ulp towards `v`, making it odd.
    let bits = f.to_bits();
    f32::from_bits(if f64::from(f).abs() > v.abs() { bits - 1 } else { bits + 1 })
}

macro_rules! half_element {
    ($t:ty, $dtype:expr) => {
        impl Element for $t {
            const DTYPE: FloatDType = $dtype;
            const ZERO: Self = <$t>::ZERO;

            #[inline(always)]
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                // Not `<$t>::from_f64`: half 2.7 drops the low 32 mantissa bits before
                // rounding, which double-rounds values just past a tie.
                <$t>::from_f32(f64_to_f32_round_odd(v))
            }
            fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
                src.convert_to_f32_slice(dst);
            }
            fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
                dst.convert_from_f32_slice(src);
            }
            #[inline(always)]
            fn as_f32(_: &[Self]) -> Option<&[f32]> {
                None
            }
            #[inline(always)]
            fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
                None
            }
        }
    };
}

half_element!(f16, FloatDType::F16);
half_element!(bf16, FloatDType::BF16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rounding() {
        assert_eq!(<f16 as Element>::from_f32(1.0 + 1.0 / 4096.0).to_f32(), 1.0); // below half an ulp
        assert_eq!(<bf16 as Element>::from_f32(1.0 + 1.0 / 128.0).to_f32(), 1.0078125);
        assert_eq!(<f16 as Element>::from_f64(65504.0).to_f32(), 65504.0);
        let src = [0.1f32, -2.5, 3.0e-5, 1.0e4];
        let mut h = [f16::ZERO; 4];
        f16::slice_from_f32(&src, &mut h);
        let mut back = [0.0f32; 4];
        f16::slice_to_f32(&h, &mut back);
        for (a, b) in src.iter().zip(back) {
            assert!(((a - b) / a).abs() < 1e-3, "{a} vs {b}");
        }
        assert_eq!(FloatDType::BF16.size_bytes(), 2);
        // Just past a tie: must round up (half's own from_f64 rounds this down).
        let v = f64::from(32.12501f32);
        assert_eq!(<bf16 as Element>::from_f64(v).to_f32(), 32.25);
        assert_eq!(<f16 as Element>::from_f64(1.0 + 2f64.powi(-11) + 2f64.powi(-40)).to_f32(), 1.0 + 2f32.powi(-10));
        assert_eq!(<f16 as Element>::from_f64(1e-30).to_f32(), 0.0);
        assert_eq!(<bf16 as Element>::from_f64(-1e300).to_f32(), f32::NEG_INFINITY);
        assert!(<f16 as Element>::from_f64(f64::NAN).is_nan());
        assert_eq!(FloatDType::F32.to_string(), "float32");
    }
}
