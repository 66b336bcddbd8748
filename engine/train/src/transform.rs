//! Per-sample transforms the [`DataLoader`](crate::DataLoader) applies on load:
//! the [`SampleTransform`] trait and [`Augment`], a decode/augment stand-in
//! (seeded random crop, noise and per-sample normalisation) whose CPU cost is
//! tunable, so loading a batch costs what real loading costs.
//!
//! A transform draws its randomness from the generator the loader hands it,
//! derived from (loader seed, epoch, sample index) only — so a sample is
//! transformed the same way whichever worker loads it, and batches are
//! bit-identical for every `num_workers`.

use std::fmt;

use vramlab_rng::Rng;

/// A transform of one sample, in place. Runs on the loader's worker threads
/// (or the training thread with `num_workers = 0`).
pub trait SampleTransform: Send + Sync + fmt::Debug {
    /// Transforms sample `index` (its dataset index) of `shape` in place,
    /// drawing randomness from `rng` only. An `Err` names what is wrong with
    /// the sample; the loader adds the index.
    fn apply(&self, index: usize, shape: &[usize], sample: &mut [f32], rng: &mut Rng) -> Result<(), String>;
}

/// Random crop, then `rounds` passes of seeded Gaussian noise and per-sample
/// normalisation — an image pipeline's `RandomCrop(padding) → noise → Normalize`,
/// with the CPU cost scaled by `rounds`.
///
/// The crop pads the last two dimensions (`[.., h, w]`; a 1-D sample is one
/// row) by `crop_pad` zeros on each side and cuts a window of the original
/// size at a random offset: the sample shifts by up to ±`crop_pad` in each
/// direction, and its shape stays the same.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Augment {
    /// Standard deviation of the noise added in each round.
    pub noise_std: f32,
    /// Padding of the random crop (0: no crop).
    pub crop_pad: usize,
    /// Noise + normalisation passes (the cost knob: each pass draws one normal
    /// per element and reads the sample twice more).
    pub rounds: u32,
}

impl Augment {
    /// `rounds` passes of noise of standard deviation 0.1, crop padding 2.
    pub fn with_rounds(rounds: u32) -> Augment {
        Augment { noise_std: 0.1, crop_pad: 2, rounds }
    }
}

impl SampleTransform for Augment {
    fn apply(&self, _index: usize, shape: &[usize], sample: &mut [f32], rng: &mut Rng) -> Result<(), String> {
        if self.crop_pad > 0 {
            crop(shape, sample, self.crop_pad, rng);
        }
        for _ in 0..self.rounds {
            if self.noise_std != 0.0 {
                let s = f64::from(self.noise_std);
                for v in sample.iter_mut() {
                    *v += (rng.normal() * s) as f32;
                }
            }
            normalise(sample)?;
        }
        Ok(())
    }
}

/// Shifts the `[h, w]` planes of `sample` by a random offset in ±`pad`, zero-filled.
fn crop(shape: &[usize], sample: &mut [f32], pad: usize, rng: &mut Rng) {
    let (h, w) = match shape {
        [.., h, w] => (*h, *w),
        [n] => (1, *n),
        [] => return,
    };
    let span = 2 * pad + 1;
    let dy = if h > 1 { rng.below(span) as i64 - pad as i64 } else { 0 };
    let dx = rng.below(span) as i64 - pad as i64;
    if dy == 0 && dx == 0 {
        return;
    }
    let plane = h * w;
    let mut src = vec![0.0f32; plane];
    for p in sample.chunks_mut(plane) {
        src.copy_from_slice(p);
        for y in 0..h as i64 {
            for x in 0..w as i64 {
                let (sy, sx) = (y + dy, x + dx);
                p[(y as usize) * w + x as usize] = if (0..h as i64).contains(&sy) && (0..w as i64).contains(&sx) {
                    src[(sy as usize) * w + sx as usize]
                } else {
                    0.0
                };
            }
        }
    }
}

/// Zero mean, unit standard deviation over the sample.
fn normalise(sample: &mut [f32]) -> Result<(), String> {
    let n = sample.len() as f64;
    let mean = sample.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = sample.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
    let std = var.sqrt();
    if !std.is_finite() || std == 0.0 {
        return Err(format!(
            "cannot normalise: the sample's standard deviation is {std} (a constant or non-finite sample); \
             check the dataset's values at this index"
        ));
    }
    let (mean, inv) = (mean as f32, (1.0 / std) as f32);
    for v in sample.iter_mut() {
        *v = (*v - mean) * inv;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn augment_normalises_and_is_deterministic_per_generator() {
        let shape = [1, 4, 4];
        let base: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let t = Augment::with_rounds(2);
        let (mut a, mut b) = (base.clone(), base.clone());
        t.apply(0, &shape, &mut a, &mut Rng::new(5)).unwrap();
        t.apply(0, &shape, &mut b, &mut Rng::new(5)).unwrap();
        assert_eq!(a, b);
        let mean: f32 = a.iter().sum::<f32>() / 16.0;
        let var: f32 = a.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 16.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4, "mean {mean} var {var}");
        let mut c = base.clone();
        t.apply(0, &shape, &mut c, &mut Rng::new(6)).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn crop_shifts_with_zero_fill() {
        // Find a generator whose offset is non-zero and check the shift it made.
        let shape = [2, 3];
        let base = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        for seed in 0..20 {
            let mut s = base.clone();
            let mut rng = Rng::new(seed);
            let mut probe = rng.clone();
            crop(&shape, &mut s, 1, &mut rng);
            let dy = probe.below(3) as i64 - 1;
            let dx = probe.below(3) as i64 - 1;
            for y in 0..2i64 {
                for x in 0..3i64 {
                    let (sy, sx) = (y + dy, x + dx);
                    let want =
                        if (0..2).contains(&sy) && (0..3).contains(&sx) { base[(sy * 3 + sx) as usize] } else { 0.0 };
                    assert_eq!(s[(y * 3 + x) as usize], want, "seed {seed} dy {dy} dx {dx}");
                }
            }
        }
    }

    #[test]
    fn a_constant_sample_cannot_be_normalised() {
        let mut s = vec![3.0f32; 8];
        let t = Augment { noise_std: 0.0, crop_pad: 0, rounds: 1 };
        let e = t.apply(0, &[8], &mut s, &mut Rng::new(0)).unwrap_err();
        assert!(e.contains("standard deviation is 0"), "{e}");
    }
}
