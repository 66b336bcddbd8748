//! Helpers shared by the integration tests that compare kernels: seeded random
//! data and the error measures with their tolerances' meaning.

#![allow(dead_code)] // each test crate uses its own subset

pub use vramlab_rng::Rng;

/// The workspace's one generator, seeded from the test's name and
/// `VRAMLAB_TEST_SEED` (printed, so a failure reproduces).
pub fn rng_for_test(name: &str) -> Rng {
    let base = std::env::var("VRAMLAB_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
    let seed = name.bytes().fold(base, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    eprintln!("{name}: seed {seed:#x} (VRAMLAB_TEST_SEED={base})");
    Rng::new(seed)
}

/// `‖got − want‖₂ / ‖want‖₂`; infinite when `got` holds a NaN or an infinity.
pub fn norm_rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    if got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// `max |got − want| / max(|want|, tiny)`; infinite on NaN or infinity.
pub fn elem_rel_err(got: &[f64], want: &[f64], tiny: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    got.iter()
        .zip(want)
        .map(|(g, w)| if !g.is_finite() { f64::INFINITY } else { (g - w).abs() / w.abs().max(tiny) })
        .fold(0.0, f64::max)
}
