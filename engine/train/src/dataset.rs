//! Datasets: samples in host memory ([`Dataset`]) with their [`Targets`], and
//! seeded synthetic ones (regression, Gaussian-blob classification, images).

use super::{NnError, Result};
use vramlab_rng::Rng;

/// What a dataset's samples are labelled with.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// One class index per sample, in `0..classes`.
    Classes { labels: Vec<i64>, classes: usize },
    /// `dims` f32 values per sample.
    Values { values: Vec<f32>, dims: usize },
}

/// Samples in host memory: f32 features of one shape per sample, and targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    features: Vec<f32>,
    sample_shape: Vec<usize>,
    targets: Targets,
}

impl Dataset {
    /// `features` holds `len` samples of `sample_shape`, back to back.
    pub fn new(features: Vec<f32>, sample_shape: &[usize], targets: Targets) -> Result<Dataset> {
        let per: usize = sample_shape.iter().product();
        let len = match &targets {
            Targets::Classes { labels, classes } => {
                if let Some(bad) = labels.iter().find(|&&l| l < 0 || l as usize >= *classes) {
                    return Err(NnError::Invalid {
                        what: "Dataset",
                        reason: format!("label {bad} outside 0..{classes}"),
                    });
                }
                labels.len()
            }
            Targets::Values { values, dims } => {
                if *dims == 0 || values.len() % dims != 0 {
                    return Err(NnError::Invalid {
                        what: "Dataset",
                        reason: format!("{} target values are not a multiple of {dims}", values.len()),
                    });
                }
                values.len() / dims
            }
        };
        if per == 0 || features.len() != len * per {
            return Err(NnError::Invalid {
                what: "Dataset",
                reason: format!(
                    "{} feature values for {len} samples of shape {sample_shape:?} ({} expected)",
                    features.len(),
                    len * per
                ),
            });
        }
        Ok(Dataset { features, sample_shape: sample_shape.to_vec(), targets })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        match &self.targets {
            Targets::Classes { labels, .. } => labels.len(),
            Targets::Values { values, dims } => values.len() / dims,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn sample_shape(&self) -> &[usize] {
        &self.sample_shape
    }

    /// Elements per sample.
    pub fn sample_len(&self) -> usize {
        self.sample_shape.iter().product()
    }

    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// The number of classes of a classification set.
    pub fn classes(&self) -> Option<usize> {
        match self.targets {
            Targets::Classes { classes, .. } => Some(classes),
            Targets::Values { .. } => None,
        }
    }

    /// Splits into the first `n` samples and the rest (train / test).
    pub fn split(mut self, n: usize) -> (Dataset, Dataset) {
        let n = n.min(self.len());
        let per = self.sample_len();
        let rest_features = self.features.split_off(n * per);
        let rest_targets = match &mut self.targets {
            Targets::Classes { labels, classes } => Targets::Classes { labels: labels.split_off(n), classes: *classes },
            Targets::Values { values, dims } => Targets::Values { values: values.split_off(n * *dims), dims: *dims },
        };
        let rest = Dataset { features: rest_features, sample_shape: self.sample_shape.clone(), targets: rest_targets };
        (self, rest)
    }

    /// Regression: `y = x·W + b + noise`, `x ~ N(0, 1)` of `in_dim`, `W, b ~ N(0, 1/in_dim)`
    /// and Gaussian noise of standard deviation `noise`.
    pub fn regression(len: usize, in_dim: usize, out_dim: usize, noise: f64, seed: u64) -> Result<Dataset> {
        let mut rng = Rng::derive(seed, 1);
        let s = 1.0 / (in_dim.max(1) as f64).sqrt();
        let w: Vec<f64> = (0..in_dim * out_dim).map(|_| rng.normal() * s).collect();
        let b: Vec<f64> = (0..out_dim).map(|_| rng.normal() * s).collect();
        let mut features = Vec::with_capacity(len * in_dim);
        let mut values = Vec::with_capacity(len * out_dim);
        for _ in 0..len {
            let x: Vec<f64> = (0..in_dim).map(|_| rng.normal()).collect();
            for o in 0..out_dim {
                let y: f64 = b[o] + (0..in_dim).map(|i| x[i] * w[i * out_dim + o]).sum::<f64>();
                values.push((y + noise * rng.normal()) as f32);
            }
            features.extend(x.iter().map(|&v| v as f32));
        }
        Dataset::new(features, &[in_dim], Targets::Values { values, dims: out_dim })
    }

    /// Classification into `classes` Gaussian blobs in `dims` dimensions: class
    /// centres `~ N(0, separation²)` per coordinate, samples = centre + `N(0, 1)`.
    /// With `separation` ≳ 1 and `dims` ≳ 8 the classes are (almost surely)
    /// linearly separable. Labels are drawn uniformly.
    pub fn classification(len: usize, dims: usize, classes: usize, separation: f64, seed: u64) -> Result<Dataset> {
        if classes == 0 || dims == 0 {
            return Err(NnError::Invalid { what: "Dataset::classification", reason: "zero classes or dims".into() });
        }
        let mut rng = Rng::derive(seed, 2);
        let centres: Vec<f64> = (0..classes * dims).map(|_| rng.normal() * separation).collect();
        let mut features = Vec::with_capacity(len * dims);
        let mut labels = Vec::with_capacity(len);
        for _ in 0..len {
            let c = rng.below(classes);
            labels.push(c as i64);
            features.extend((0..dims).map(|d| (centres[c * dims + d] + rng.normal()) as f32));
        }
        Dataset::new(features, &[dims], Targets::Classes { labels, classes })
    }

    /// Image-like classification: `[channels, height, width]` images, each class a
    /// smooth template (a few Gaussian bumps of either sign at class-specific
    /// places), each sample its class's template shifted by up to ±`height/8`
    /// pixels plus `N(0, noise²)` pixel noise. Learnable by an MLP and a CNN.
    pub fn images(len: usize, shape: [usize; 3], classes: usize, noise: f64, seed: u64) -> Result<Dataset> {
        let [ch, h, w] = shape;
        if classes == 0 || ch == 0 || h == 0 || w == 0 {
            return Err(NnError::Invalid {
                what: "Dataset::images",
                reason: format!("bad shape {shape:?} or classes"),
            });
        }
        let mut rng = Rng::derive(seed, 3);
        let plane = h * w;
        // Templates: 3 bumps per class and channel.
        let mut templates = vec![0.0f64; classes * ch * plane];
        for t in templates.chunks_mut(plane) {
            for _ in 0..3 {
                let (cy, cx) = (rng.uniform_range(0.2, 0.8) * h as f64, rng.uniform_range(0.2, 0.8) * w as f64);
                let sigma = rng.uniform_range(0.08, 0.18) * h.max(w) as f64;
                let amp = if rng.uniform() < 0.5 { -1.5 } else { 1.5 };
                for y in 0..h {
                    for x in 0..w {
                        let d2 = (y as f64 - cy).powi(2) + (x as f64 - cx).powi(2);
                        t[y * w + x] += amp * (-d2 / (2.0 * sigma * sigma)).exp();
                    }
                }
            }
        }
        let max_shift = (h / 8) as i64;
        let mut features = Vec::with_capacity(len * ch * plane);
        let mut labels = Vec::with_capacity(len);
        for _ in 0..len {
            let c = rng.below(classes);
            labels.push(c as i64);
            let span = (2 * max_shift + 1) as usize;
            let (dy, dx) = (rng.below(span) as i64 - max_shift, rng.below(span) as i64 - max_shift);
            for k in 0..ch {
                let t = &templates[(c * ch + k) * plane..][..plane];
                for y in 0..h as i64 {
                    for x in 0..w as i64 {
                        let (sy, sx) = (y - dy, x - dx);
                        let v = if (0..h as i64).contains(&sy) && (0..w as i64).contains(&sx) {
                            t[(sy as usize) * w + sx as usize]
                        } else {
                            0.0
                        };
                        features.push((v + noise * rng.normal()) as f32);
                    }
                }
            }
        }
        Dataset::new(features, &[ch, h, w], Targets::Classes { labels, classes })
    }
}
