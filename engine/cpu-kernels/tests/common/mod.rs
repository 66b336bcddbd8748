//! Helpers shared by the integration tests that compare kernels: seeded random
//! data and the error measures with their tolerances' meaning.

#![allow(dead_code)] // each test crate uses its own subset

/// SplitMix64 plus Box–Muller: small, deterministic, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn for_test(name: &str) -> Rng {
        let base = std::env::var("VRAMLAB_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
        let seed = name.bytes().fold(base, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        eprintln!("{name}: seed {seed:#x} (VRAMLAB_TEST_SEED={base})");
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    pub fn normals(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (self.normal() * scale) as f32).collect()
    }
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
