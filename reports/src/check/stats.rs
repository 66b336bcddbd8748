//! The statistics of the time gate: a seeded bootstrap confidence interval of the
//! ratio of medians (new/old), the Mann–Whitney U test (normal approximation with
//! tie correction, one-sided: "new is slower"), Benjamini–Hochberg adjustment of
//! many p-values, and the smallest slowdown a comparison could have detected.

use vramlab_rng::Rng;

/// A bootstrap interval of the ratio of medians.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioInterval {
    /// median(new) / median(old).
    pub ratio: f64,
    pub lower: f64,
    pub upper: f64,
}

/// Median of values (sorted in place by selection; 0 for none).
pub fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    let mid = n / 2;
    let (_, &mut hi, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + hi) / 2.0
    }
}

/// Median of values (0 for none).
pub fn median(v: &[f64]) -> f64 {
    median_in_place(&mut v.to_vec())
}

/// Percentile bootstrap interval of median(new)/median(old) at `confidence`
/// (e.g. 0.95), from `resamples` resamplings of each side with replacement. The
/// generator is the workspace's seeded one (`vramlab_rng`), so the same inputs always give the
/// same interval. Both sides need at least one positive sample.
pub fn bootstrap_ratio_of_medians(
    old: &[f64],
    new: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<RatioInterval> {
    let (m_old, m_new) = (median(old), median(new));
    if old.is_empty() || new.is_empty() || m_old <= 0.0 || m_new <= 0.0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut buf_old = vec![0.0; old.len()];
    let mut buf_new = vec![0.0; new.len()];
    let mut ratios = Vec::with_capacity(resamples.max(1));
    for _ in 0..resamples.max(1) {
        for x in buf_old.iter_mut() {
            *x = old[rng.below(old.len())];
        }
        for x in buf_new.iter_mut() {
            *x = new[rng.below(new.len())];
        }
        let (a, b) = (median_in_place(&mut buf_old), median_in_place(&mut buf_new));
        if a > 0.0 {
            ratios.push(b / a);
        }
    }
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let alpha = (1.0 - confidence).clamp(0.0, 1.0) / 2.0;
    let at = |p: f64| {
        let pos = p * (ratios.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        ratios[lo] + (ratios[hi] - ratios[lo]) * (pos - lo as f64)
    };
    Some(RatioInterval { ratio: m_new / m_old, lower: at(alpha), upper: at(1.0 - alpha) })
}

/// The Mann–Whitney U test's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U of the new sample: how many (new, old) pairs have new > old (ties count ½).
    pub u_new: f64,
    /// One-sided p-value of "new tends to be larger than old" (normal
    /// approximation with continuity and tie correction).
    pub p_greater: f64,
    /// One-sided p-value of "new tends to be smaller than old".
    pub p_less: f64,
}

/// Mann–Whitney U test of `new` against `old`: ranks with ties averaged, the
/// normal approximation of U with the tie-corrected variance and a continuity
/// correction of ½. None when a side is empty or every value is the same.
pub fn mann_whitney(old: &[f64], new: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (new.len() as f64, old.len() as f64);
    if new.is_empty() || old.is_empty() {
        return None;
    }
    let mut all: Vec<(f64, bool)> = new.iter().map(|&x| (x, true)).chain(old.iter().map(|&x| (x, false))).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = all.len() as f64;
    let mut rank_sum_new = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_new += all[i..=j].iter().filter(|x| x.1).count() as f64 * avg_rank;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u_new = rank_sum_new - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if var <= 0.0 {
        return None;
    }
    let sd = var.sqrt();
    let z_greater = (u_new - mean - 0.5) / sd;
    let z_less = (mean - u_new - 0.5) / sd;
    Some(MannWhitney { u_new, p_greater: normal_sf(z_greater), p_less: normal_sf(z_less) })
}

/// Upper tail of the standard normal distribution, P(Z > z).
pub fn normal_sf(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// Benjamini–Hochberg adjusted p-values (q-values), in the input's order: a
/// test is a discovery at false discovery rate q when its adjusted value ≤ q.
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        let q = (p[i] * m as f64 / (rank + 1) as f64).min(1.0);
        running = running.min(q);
        adjusted[i] = running;
    }
    adjusted
}

/// The smallest slowdown (as a ratio, e.g. 1.12) that this comparison would
/// flag with about 95 % probability: the interval's lower half-width measured in
/// log space is the noise of the ratio at the interval's level (1.96 standard
/// errors at 95 %); a true slowdown is flagged once its lower bound clears the
/// threshold, and clears it 95 % of the time when it lies a further 1.645
/// standard errors above.
pub fn detectable_ratio(ci: &RatioInterval, confidence: f64, threshold: f64) -> f64 {
    let z_ci = normal_quantile(0.5 + confidence / 2.0);
    let half = (ci.ratio.ln() - ci.lower.ln()).max(0.0);
    let se = if z_ci > 0.0 { half / z_ci } else { 0.0 };
    (1.0 + threshold) * ((z_ci + 1.645) * se).exp()
}

/// Quantile of the standard normal distribution, by bisection on `normal_sf`
/// (accurate to 1e-9; used for a handful of confidence levels).
pub fn normal_quantile(p: f64) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let (mut lo, mut hi) = (-10.0f64, 10.0f64);
    for _ in 0..80 {
        let mid = (lo + hi) / 2.0;
        if 1.0 - normal_sf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_known_answers() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn normal_tails_known_answers() {
        assert!((normal_sf(0.0) - 0.5).abs() < 1e-12);
        assert!((normal_sf(1.959_963_985) - 0.025).abs() < 1e-9);
        assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((normal_quantile(0.95) - 1.644_853_627).abs() < 1e-6);
    }

    #[test]
    fn mann_whitney_known_answer() {
        // By hand: U = 16 (every pair), mean 8, variance 4·4/12·9 = 12,
        // z = (16 − 8 − ½)/√12 = 2.165, P(Z > z) = 0.0152.
        let r = mann_whitney(&[1.0, 2.0, 3.0, 3.5], &[4.0, 5.0, 6.0, 7.0]).unwrap();
        assert_eq!(r.u_new, 16.0);
        assert!((r.p_greater - 0.015_19).abs() < 1e-4, "{}", r.p_greater);
        assert!(r.p_less > 0.98);
        // Ties: U counts them as halves.
        let t = mann_whitney(&[1.0, 2.0, 2.0], &[2.0, 3.0]).unwrap();
        assert_eq!(t.u_new, 5.0);
        assert!(mann_whitney(&[1.0, 1.0], &[1.0, 1.0]).is_none(), "no variation, no test");
    }

    #[test]
    fn benjamini_hochberg_known_answer() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "BH") → 0.02 0.04 0.04 0.02
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.02, 0.04, 0.04, 0.02];
        for (a, b) in q.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{q:?}");
        }
        assert!(benjamini_hochberg(&[]).is_empty());
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_ratio() {
        let old: Vec<f64> = (0..30).map(|i| 100.0 + i as f64).collect();
        let new: Vec<f64> = old.iter().map(|x| x * 1.5).collect();
        let a = bootstrap_ratio_of_medians(&old, &new, 500, 0.95, 7).unwrap();
        let b = bootstrap_ratio_of_medians(&old, &new, 500, 0.95, 7).unwrap();
        assert_eq!(a, b, "same seed, same interval");
        assert!((a.ratio - 1.5).abs() < 1e-12);
        assert!(a.lower < 1.5 && a.upper > 1.5 && a.lower > 1.2, "{a:?}");
        assert!(bootstrap_ratio_of_medians(&[], &new, 10, 0.95, 1).is_none());
    }
}
