//! Dtype casts between f32, f16 and bf16.

use rayon::prelude::*;

use super::element::Element;
use super::error::{Result, check_len};
use super::par::{CHUNK, PAR_THRESHOLD};

/// `dst[i] = src[i]` converted: widening is exact, narrowing rounds to nearest even
/// (values beyond the target's range become ±inf; NaN stays NaN). f16 ↔ bf16 goes
/// through f32, which is exact on the way up, so it rounds once.
pub fn cast<S: Element, D: Element>(src: &[S], dst: &mut [D]) -> Result<()> {
    check_len("cast", "dst", dst.len(), src.len())?;
    if src.len() >= PAR_THRESHOLD {
        src.par_chunks(CHUNK).zip(dst.par_chunks_mut(CHUNK)).for_each(|(s, d)| cast_serial(s, d));
    } else {
        cast_serial(src, dst);
    }
    Ok(())
}

fn cast_serial<S: Element, D: Element>(src: &[S], dst: &mut [D]) {
    if let Some(s) = S::as_f32(src) {
        D::slice_from_f32(s, dst);
    } else if let Some(d) = D::as_f32_mut(dst) {
        S::slice_to_f32(src, d);
    } else {
        let mut buf = [0.0f32; 256];
        for (s, d) in src.chunks(256).zip(dst.chunks_mut(256)) {
            S::slice_to_f32(s, &mut buf[..s.len()]);
            D::slice_from_f32(&buf[..s.len()], d);
        }
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;

    #[test]
    fn round_trips() {
        let x = [1.0f32, -0.1, 70000.0, f32::NAN];
        let mut h = [f16::ZERO; 4];
        cast(&x, &mut h).unwrap();
        assert_eq!(h[0].to_f32(), 1.0);
        assert!(h[2].is_infinite() && h[3].is_nan());
        let mut b = [bf16::ZERO; 4];
        cast(&h, &mut b).unwrap();
        assert_eq!(b[1], bf16::from_f32(f16::from_f32(-0.1).to_f32()));
        let mut back = [0.0f32; 4];
        cast(&b, &mut back).unwrap();
        assert_eq!(back[0], 1.0);
    }
}
