//! The statistics of the time gate: the hierarchical bootstrap over runs then
//! samples (independent runs, or A/B pairs) that gives the ratio new/old its
//! interval and p-values (Student's t on the bootstrap's standard error, so a
//! baseline of few runs gets the wide interval it deserves); the one-run
//! bootstrap of the ratio of medians and the Mann–Whitney U test (kept for
//! reference and for the per-run noise); Benjamini–Hochberg adjustment of many
//! p-values; and the smallest slowdown a comparison could have detected.

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

/// A time judged from several runs: the ratio new/old with its interval and
/// one-sided p-values, all from one statistic (log ratio / bootstrap standard
/// error against Student's t with `df` degrees of freedom).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunsEstimate {
    /// The interval of the ratio new/old (`ratio` is the point estimate).
    pub interval: RatioInterval,
    /// Standard error of ln(ratio), from the bootstrap.
    pub se_log: f64,
    /// Degrees of freedom of the between-run noise estimate.
    pub df: f64,
    /// One-sided p-values: "new is slower", "new is faster".
    pub p_slower: f64,
    pub p_faster: f64,
    /// The between-run noise seen (standard deviation of ln(run median), as a
    /// fraction), pooled over the sides (or the pairs' differences / √2).
    pub between_run: f64,
    /// Runs on each side (pairs: both the pair count).
    pub runs: (usize, usize),
}

/// Why a time could not be judged from runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unjudged {
    /// One run on each side (or one A/B pair): the noise between runs is unknown.
    BetweenRunNoiseUnknown,
    /// A run with fewer samples than `min_samples`.
    TooFewSamples { fewest: usize },
    /// A run whose median is not positive.
    NoPositiveSamples,
}

/// One run's samples, prepared: its log median and its samples.
struct Run<'a> {
    samples: &'a [f64],
    log_median: f64,
}

fn prepare<'a>(runs: &[&'a [f64]], min_samples: usize) -> Result<Vec<Run<'a>>, Unjudged> {
    let fewest = runs.iter().map(|r| r.len()).min().unwrap_or(0);
    if fewest < min_samples.max(1) {
        return Err(Unjudged::TooFewSamples { fewest });
    }
    runs.iter()
        .map(|s| {
            let m = median(s);
            if m > 0.0 { Ok(Run { samples: s, log_median: m.ln() }) } else { Err(Unjudged::NoPositiveSamples) }
        })
        .collect()
}

/// Resamples of each run that measure how much its median moves by its own
/// samples alone (the within-run part of the runs' spread).
const PILOT_RESAMPLES: usize = 200;

/// The run effects of one side: each run's log median minus the side's mean.
/// Their spread holds the noise between runs *and* each median's own noise,
/// which the within-run level of the bootstrap adds again; so the effects are
/// scaled to carry only the between-run part, σ_b² = s² − v̄ (s²: their
/// unbiased variance, v̄: the runs' mean within-run variance, never below 0),
/// which also makes resampling k of them have the unbiased variance σ_b²/k.
/// Returns (mean, scaled effects, σ_b).
fn effects(logs: &[f64], within_var: f64) -> (f64, Vec<f64>, f64) {
    let k = logs.len() as f64;
    let centre = logs.iter().sum::<f64>() / k;
    if logs.len() < 2 {
        return (centre, vec![0.0; logs.len()], 0.0);
    }
    let s2 = logs.iter().map(|l| (l - centre).powi(2)).sum::<f64>() / (k - 1.0);
    let between = (s2 - within_var).max(0.0);
    // Resampling k effects with replacement has variance (1/k)·mean(e²): scale
    // so that mean(e²) = σ_b².
    let scale = if s2 > 0.0 { (between / s2 * k / (k - 1.0)).sqrt() } else { 0.0 };
    (centre, logs.iter().map(|l| (l - centre) * scale).collect(), between.sqrt())
}

/// The variance of ln(median) of a run from its own samples (a short bootstrap).
fn within_var(rng: &mut Rng, run: &Run<'_>, buf: &mut Vec<f64>) -> f64 {
    let w: Vec<f64> = (0..PILOT_RESAMPLES).map(|_| wobble(rng, run, buf)).collect();
    sd(&w).powi(2)
}

/// ln(median of a resample of `samples`) − ln(median of `samples`): the
/// within-run level of the hierarchical bootstrap.
fn wobble(rng: &mut Rng, run: &Run<'_>, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    buf.extend((0..run.samples.len()).map(|_| run.samples[rng.below(run.samples.len())]));
    let m = median_in_place(buf);
    if m > 0.0 { m.ln() - run.log_median } else { 0.0 }
}

/// Sample standard deviation (n − 1) of `v`; 0 for fewer than two.
fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The estimate from bootstrap draws of ln(ratio) around the point estimate
/// `log_ratio`: standard error, Student's t interval and one-sided p-values.
fn from_draws(
    log_ratio: f64,
    draws: &[f64],
    df: f64,
    confidence: f64,
    between_run: f64,
    runs: (usize, usize),
) -> RunsEstimate {
    estimate(log_ratio, sd(draws), df, confidence, between_run, runs)
}

/// `e` with the between-run noise at least `sigma` (a standard deviation of
/// ln(run median) known from elsewhere: runs of one build in other sittings).
/// Where the runs showed less, the interval and p-values are widened by the
/// missing part's variance over the runs, σ²·(1/k_old + 1/k_new) (for A/B
/// pairs, 2σ²/pairs): a figure whose process-to-process noise these few runs
/// happened not to show is judged with the noise it has.
pub fn with_between_run(e: &RunsEstimate, sigma: f64, confidence: f64) -> RunsEstimate {
    if sigma.is_nan() || sigma <= e.between_run {
        return *e;
    }
    let (k_old, k_new) = e.runs;
    let extra = (sigma.powi(2) - e.between_run.powi(2)) * (1.0 / k_old.max(1) as f64 + 1.0 / k_new.max(1) as f64);
    let se = (e.se_log.powi(2) + extra).sqrt();
    estimate(e.interval.ratio.ln(), se, e.df, confidence, sigma, e.runs)
}

fn estimate(log_ratio: f64, se: f64, df: f64, confidence: f64, between_run: f64, runs: (usize, usize)) -> RunsEstimate {
    let t = student_t_quantile(0.5 + confidence / 2.0, df);
    let (p_slower, p_faster) = if se > 0.0 {
        (student_t_sf(log_ratio / se, df), student_t_sf(-log_ratio / se, df))
    } else if log_ratio > 0.0 {
        (0.0, 1.0)
    } else if log_ratio < 0.0 {
        (1.0, 0.0)
    } else {
        (1.0, 1.0)
    };
    RunsEstimate {
        interval: RatioInterval {
            ratio: log_ratio.exp(),
            lower: (log_ratio - t * se).exp(),
            upper: (log_ratio + t * se).exp(),
        },
        se_log: se,
        df,
        p_slower,
        p_faster,
        between_run,
        runs,
    }
}

/// The ratio new/old of two builds measured in independent runs (a baseline of
/// `old.len()` runs, this build in `new.len()`), by a hierarchical bootstrap:
/// each resample draws a side's runs with replacement (their effects scaled to
/// the between-run part, see [`effects`]), then each drawn run's samples with replacement, and takes
/// the mean of the drawn runs' log medians. The point estimate is the ratio of
/// the sides' geometric means of run medians.
///
/// A side with one run borrows the other side's run effects (the same machine
/// moves both builds alike): its single run gets a run effect drawn from them.
/// With one run on each side the noise between runs is unknown: `Err`.
/// Degrees of freedom: the runs that measured the between-run noise, minus one
/// per side that did.
pub fn hierarchical_ratio(
    old: &[&[f64]],
    new: &[&[f64]],
    min_samples: usize,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Result<RunsEstimate, Unjudged> {
    if old.len() < 2 && new.len() < 2 {
        return Err(Unjudged::BetweenRunNoiseUnknown);
    }
    let (old_runs, new_runs) = (prepare(old, min_samples)?, prepare(new, min_samples)?);
    let mut rng = Rng::new(seed);
    let mut buf = Vec::new();
    let mut side_effects = |runs: &[Run<'_>]| {
        let v = runs.iter().map(|r| within_var(&mut rng, r, &mut buf)).sum::<f64>() / runs.len() as f64;
        effects(&runs.iter().map(|r| r.log_median).collect::<Vec<_>>(), v)
    };
    let (c_old, e_old, b_old) = side_effects(&old_runs);
    let (c_new, e_new, b_new) = side_effects(&new_runs);
    let df_of = |k: usize| if k > 1 { k as f64 - 1.0 } else { 0.0 };
    let df = df_of(old_runs.len()) + df_of(new_runs.len());
    // The between-run noise, pooled over the sides that measured it.
    let between_run =
        ((b_old.powi(2) * df_of(old_runs.len()) + b_new.powi(2) * df_of(new_runs.len())) / df.max(1.0)).sqrt();
    let mut draws = Vec::with_capacity(resamples.max(2));
    // One side's resampled mean log median; `borrowed`: the other side's effects for a single run.
    let mut side = |rng: &mut Rng, runs: &[Run<'_>], centre: f64, own: &[f64], borrowed: &[f64]| -> f64 {
        let k = runs.len();
        let mut total = 0.0;
        for _ in 0..k {
            let i = rng.below(k);
            let effect = if k > 1 { own[i] } else { borrowed[rng.below(borrowed.len())] };
            total += centre + effect + wobble(rng, &runs[i], &mut buf);
        }
        total / k as f64
    };
    for _ in 0..resamples.max(2) {
        let o = side(&mut rng, &old_runs, c_old, &e_old, &e_new);
        let n = side(&mut rng, &new_runs, c_new, &e_new, &e_old);
        draws.push(n - o);
    }
    Ok(from_draws(c_new - c_old, &draws, df, confidence, between_run, (old_runs.len(), new_runs.len())))
}

/// The ratio B/A of two builds measured in A/B pairs (run i of A and run i of
/// B interleaved in one sitting): each pair's ln(median B / median A), then a
/// hierarchical bootstrap over pairs (their differences scaled as in
/// [`effects`]) and over each drawn pair's samples on both sides. Drift that
/// moves a pair's two runs alike cancels. One pair: `Err` (the noise between
/// pairs is unknown). Degrees of freedom: pairs − 1.
pub fn paired_ratio(
    pairs: &[(&[f64], &[f64])],
    min_samples: usize,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Result<RunsEstimate, Unjudged> {
    if pairs.len() < 2 {
        return Err(Unjudged::BetweenRunNoiseUnknown);
    }
    let a = prepare(&pairs.iter().map(|p| p.0).collect::<Vec<_>>(), min_samples)?;
    let b = prepare(&pairs.iter().map(|p| p.1).collect::<Vec<_>>(), min_samples)?;
    let diffs: Vec<f64> = a.iter().zip(&b).map(|(a, b)| b.log_median - a.log_median).collect();
    let m = pairs.len();
    let mut rng = Rng::new(seed);
    let mut buf = Vec::new();
    let v = a.iter().chain(&b).map(|r| within_var(&mut rng, r, &mut buf)).sum::<f64>() / m as f64;
    let (centre, e, between) = effects(&diffs, v);
    let mut draws = Vec::with_capacity(resamples.max(2));
    for _ in 0..resamples.max(2) {
        let mut total = 0.0;
        for _ in 0..m {
            let i = rng.below(m);
            total += centre + e[i] + wobble(&mut rng, &b[i], &mut buf) - wobble(&mut rng, &a[i], &mut buf);
        }
        draws.push(total / m as f64);
    }
    Ok(from_draws(centre, &draws, m as f64 - 1.0, confidence, between / std::f64::consts::SQRT_2, (m, m)))
}

/// Upper tail of Student's t distribution with `df` degrees of freedom,
/// P(T > t), through the regularized incomplete beta function.
pub fn student_t_sf(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return if t > 0.0 { 0.0 } else { 1.0 };
    }
    if df <= 0.0 {
        return 0.5;
    }
    let tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    if t > 0.0 { tail } else { 1.0 - tail }
}

/// Quantile of Student's t distribution, by bisection on [`student_t_sf`].
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let (mut lo, mut hi) = (-1e6f64, 1e6f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if 1.0 - student_t_sf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-10 * (1.0 + mid.abs()) {
            break;
        }
    }
    (lo + hi) / 2.0
}

/// The regularized incomplete beta function I_x(a, b), by its continued
/// fraction (modified Lentz), using the symmetry for x above the mean.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = libm::lgamma(a + b) - libm::lgamma(a) - libm::lgamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(b, a, 1.0 - x);
    }
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    if d.abs() < tiny {
        d = tiny;
    }
    d = 1.0 / d;
    let mut f = d;
    for m in 1..300 {
        let m = m as f64;
        for num in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + num * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = 1.0 + num / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            f *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    ln_front.exp() * f / a
}

/// The smallest slowdown that a runs estimate would flag about 95 % of the
/// time: a true ratio whose ln lies (t + 1.645) standard errors above the
/// threshold's.
pub fn detectable_ratio_runs(e: &RunsEstimate, confidence: f64, threshold: f64) -> f64 {
    let t = student_t_quantile(0.5 + confidence / 2.0, e.df);
    (1.0 + threshold) * ((t + 1.645) * e.se_log).exp()
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
    fn student_t_known_answers() {
        // R: qt(0.975, c(1, 4, 30)) = 12.7062 2.776445 2.042272; pt(2, 5, lower = FALSE) = 0.05096974
        for (df, q) in [(1.0, 12.706_2), (4.0, 2.776_445), (30.0, 2.042_272)] {
            assert!((student_t_quantile(0.975, df) - q).abs() < 1e-3, "df {df}: {}", student_t_quantile(0.975, df));
        }
        assert!((student_t_sf(2.0, 5.0) - 0.050_969_74).abs() < 1e-7);
        assert!((student_t_sf(-2.0, 5.0) - (1.0 - 0.050_969_74)).abs() < 1e-7);
        assert!((student_t_sf(0.0, 3.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn runs_estimates_need_between_run_noise() {
        let run: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        let one = [run.as_slice()];
        assert_eq!(hierarchical_ratio(&one, &one, 5, 100, 0.95, 1), Err(Unjudged::BetweenRunNoiseUnknown));
        assert_eq!(paired_ratio(&[(&run, &run)], 5, 100, 0.95, 1), Err(Unjudged::BetweenRunNoiseUnknown));
        let short = [1.0, 2.0];
        assert_eq!(
            hierarchical_ratio(&[&run, &short], &one, 5, 100, 0.95, 1),
            Err(Unjudged::TooFewSamples { fewest: 2 })
        );
    }

    #[test]
    fn runs_that_move_together_widen_the_interval() {
        // Three baseline runs at 100, 115 and 92 (a 15 % spread between runs,
        // tight within), one new run at 112: not distinguishable from the baseline.
        let at = |c: f64| (0..30).map(|i| c + (i % 5) as f64 * 0.1).collect::<Vec<f64>>();
        let (r1, r2, r3, new) = (at(100.0), at(115.0), at(92.0), at(112.0));
        let e = hierarchical_ratio(&[&r1, &r2, &r3], &[&new], 5, 2000, 0.95, 3).unwrap();
        assert!(e.interval.lower < 1.0 && e.interval.upper > 1.2, "{e:?}");
        assert!(e.between_run > 0.08, "{e:?}");
        // The same runs paired with a 20 % slower B each: clearly slower.
        let pairs: Vec<(Vec<f64>, Vec<f64>)> =
            [100.0, 115.0, 92.0, 104.0].iter().map(|&c| (at(c), at(c * 1.2))).collect();
        let refs: Vec<(&[f64], &[f64])> = pairs.iter().map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
        let p = paired_ratio(&refs, 5, 2000, 0.95, 3).unwrap();
        assert!(p.interval.lower > 1.15 && p.interval.upper < 1.25 && p.p_slower < 1e-3, "{p:?}");
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
