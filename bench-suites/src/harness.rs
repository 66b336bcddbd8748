//! The timing harness: warm-up, then at least ten samples (more, and several
//! iterations per sample, for fast work), summarized as median, quartiles and
//! minimum, with every sample kept.
//!
//! In a simulated run (`bench --simulate` runs the suites again under
//! valgrind's callgrind) the harness instead makes one warm-up call and then
//! one call inside [`measured_region`], the one function callgrind collects
//! in: instruction counts are deterministic, so one call is the figure. Only
//! the warm-up call and the region run instrumented (the warm-up so that the
//! simulated caches enter the region warm), and only the region's counts are
//! kept, one profile of their own ([`crate::valgrind`]'s client requests;
//! no-ops outside valgrind).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use vramlab_engine::hooks::now_ns;

use crate::schema::TimingStats;
use crate::valgrind::CountRequests;

/// How much to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessConfig {
    /// Warm-up runs continue until this much time has passed (at least one run).
    pub warmup: Duration,
    /// Fewest timed samples.
    pub min_samples: usize,
    /// Most timed samples.
    pub max_samples: usize,
    /// Sampling stops adding samples beyond `min_samples` once this much time is spent.
    pub target: Duration,
    /// Exactly this many samples when set (`--samples N`).
    pub fixed_samples: Option<usize>,
    /// A sample lasts at least this long: fast work runs several iterations per sample.
    pub min_sample_time: Duration,
    /// A simulated run: one warm-up call, then one call in [`measured_region`]
    /// (its time, under a CPU simulator, is not a time to compare).
    pub simulated: bool,
}

impl HarnessConfig {
    /// The defaults of a full run.
    pub fn standard() -> HarnessConfig {
        HarnessConfig {
            warmup: Duration::from_millis(100),
            min_samples: 10,
            max_samples: 200,
            target: Duration::from_millis(800),
            fixed_samples: None,
            min_sample_time: Duration::from_micros(20),
            simulated: false,
        }
    }

    /// `--quick`: shorter warm-up and sampling, still ten samples.
    pub fn quick() -> HarnessConfig {
        HarnessConfig {
            warmup: Duration::from_millis(20),
            max_samples: 50,
            target: Duration::from_millis(150),
            ..HarnessConfig::standard()
        }
    }
}

/// Measured regions counted so far in this process (see [`measured_region`];
/// a warm-up call goes through the region uncounted).
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// How many measured regions this process has entered: the runner reads it
/// before and after a case, and the regions in between are the case's.
pub fn regions_entered() -> u64 {
    REGIONS.load(Ordering::Relaxed)
}

/// The measured region of a simulated run: one call of `work`, and nothing
/// else. [`in_measured_region`] zeroes callgrind's counts just before it
/// and dumps them just after, so each call is one profile (numbered in the
/// order of the calls) of what `work` executed. Never inlined, never
/// generic: it stays one symbol, named in the profiles.
#[inline(never)]
pub fn measured_region(work: &mut dyn FnMut() -> bool) -> bool {
    std::hint::black_box(work())
}

/// [`measured_region`]'s name as callgrind shows it.
pub const MEASURED_REGION: &str = "vramlab_suites::harness::measured_region";

/// One call of `work` inside [`measured_region`], its error kept; its wall time
/// in nanoseconds. Under callgrind: instrumented, counted from zero, and
/// dumped as one profile; the instrumentation is off afterwards.
pub fn in_measured_region<E>(mut work: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    region_call(&mut work, CountRequests::COUNTED)
}

/// One call of `work` through [`measured_region`], with `requests` around it:
/// counted ([`CountRequests::COUNTED`]: the instrumentation started, which
/// callgrind ignores while it is on, and stopped after the dump), or a
/// warm-up ([`CountRequests::WARM_UP`]) that runs the counted call's
/// instructions, from the zero request to the dump, in the same code: never
/// inlined, so both calls share this one copy of it.
#[inline(never)]
fn region_call<E>(work: &mut impl FnMut() -> Result<(), E>, requests: CountRequests) -> Result<f64, E> {
    let counted = requests == CountRequests::COUNTED;
    let mut error = None;
    let mut region = || match work() {
        Ok(()) => true,
        Err(e) => {
            error = Some(e);
            false
        }
    };
    let t0 = now_ns();
    let instrumented = counted.then(crate::valgrind::Instrumented::start);
    requests.zero();
    let ok = measured_region(&mut region);
    requests.dump();
    if counted {
        REGIONS.fetch_add(1, Ordering::Relaxed);
    }
    drop(instrumented);
    let ns = (now_ns() - t0) as f64;
    match error {
        Some(e) if !ok => Err(e),
        _ => Ok(ns),
    }
}

/// A simulated run's measurement: one warm-up call (first-touch pages, lazy
/// set-up, an autotuner's choice made outside the region), then one call in
/// the region.
///
/// The warm-up runs instrumented, though not counted: callgrind's simulated
/// caches see only instrumented code, so an uninstrumented warm-up would
/// leave them as the previous case's region left them, and the counted call
/// would pay its own code's and data's first misses (35 estimated cycles
/// each). How many lines those are depends on where the linker put the code,
/// so a tiny case's estimated cycles moved with changes to unrelated
/// functions. The warm-up goes through the region's own code
/// ([`CountRequests::WARM_UP`]), so the counted call enters the caches in the
/// state one identical call leaves, as each timed call after the first does.
fn simulated<E>(
    mut prepare: impl FnMut() -> Result<(), E>,
    mut work: impl FnMut() -> Result<(), E>,
) -> Result<TimingStats, E> {
    prepare()?;
    let warming = crate::valgrind::Instrumented::start();
    region_call(&mut work, CountRequests::WARM_UP)?;
    prepare()?;
    let ns = region_call(&mut work, CountRequests::COUNTED)?;
    drop(warming);
    Ok(summarize(vec![ns], 1, "simulated"))
}

/// Times `work` (one iteration per call) and summarizes the samples. Errors from
/// `work` end the measurement and are returned.
pub fn measure<E>(cfg: &HarnessConfig, mut work: impl FnMut() -> Result<(), E>) -> Result<TimingStats, E> {
    if cfg.simulated {
        return simulated(|| Ok(()), work);
    }
    // Warm-up, which also estimates one iteration's time.
    let warm_start = now_ns();
    let warmup_ns = cfg.warmup.as_nanos() as u64;
    let mut warm_runs = 0u64;
    loop {
        work()?;
        warm_runs += 1;
        if now_ns().saturating_sub(warm_start) >= warmup_ns {
            break;
        }
    }
    let per_iter_ns = (now_ns().saturating_sub(warm_start) / warm_runs).max(1);
    let iterations = (cfg.min_sample_time.as_nanos() as u64).div_ceil(per_iter_ns).max(1);
    let samples = match cfg.fixed_samples {
        Some(n) => n.max(1),
        None => {
            let affordable = (cfg.target.as_nanos() as u64 / (per_iter_ns * iterations)).max(1) as usize;
            affordable.clamp(cfg.min_samples, cfg.max_samples.max(cfg.min_samples))
        }
    };
    let mut raw = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = now_ns();
        for _ in 0..iterations {
            work()?;
        }
        raw.push((now_ns() - t0) as f64 / iterations as f64);
    }
    Ok(summarize(raw, iterations, "host"))
}

/// Times `work` alone, one call per sample, with `prepare` run before each call
/// outside the clock (waiting for a GPU to go idle, say, so that every sample
/// times one call made to an idle device). Warm-up and the number of samples
/// follow `cfg` as in [`measure`]; errors from either end the measurement.
pub fn measure_each<E>(
    cfg: &HarnessConfig,
    mut prepare: impl FnMut() -> Result<(), E>,
    mut work: impl FnMut() -> Result<(), E>,
) -> Result<TimingStats, E> {
    if cfg.simulated {
        return simulated(prepare, work);
    }
    let warm_start = now_ns();
    let warmup_ns = cfg.warmup.as_nanos() as u64;
    let mut warm_runs = 0u64;
    loop {
        prepare()?;
        work()?;
        warm_runs += 1;
        if now_ns().saturating_sub(warm_start) >= warmup_ns {
            break;
        }
    }
    let per_round_ns = (now_ns().saturating_sub(warm_start) / warm_runs).max(1);
    let samples = match cfg.fixed_samples {
        Some(n) => n.max(1),
        None => ((cfg.target.as_nanos() as u64 / per_round_ns).max(1) as usize)
            .clamp(cfg.min_samples, cfg.max_samples.max(cfg.min_samples)),
    };
    let mut raw = Vec::with_capacity(samples);
    for _ in 0..samples {
        prepare()?;
        let t0 = now_ns();
        work()?;
        raw.push((now_ns() - t0) as f64);
    }
    Ok(summarize(raw, 1, "host"))
}

/// Summary statistics of per-iteration samples (ns).
pub fn summarize(samples_ns: Vec<f64>, iterations_per_sample: u64, clock: &str) -> TimingStats {
    let mut sorted = samples_ns.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| quantile(&sorted, p);
    let (p25, p75) = (q(0.25), q(0.75));
    let mean = if sorted.is_empty() { 0.0 } else { sorted.iter().sum::<f64>() / sorted.len() as f64 };
    TimingStats {
        clock: clock.to_owned(),
        iterations_per_sample,
        median_ns: q(0.5),
        p25_ns: p25,
        p75_ns: p75,
        iqr_ns: p75 - p25,
        min_ns: sorted.first().copied().unwrap_or(0.0),
        max_ns: sorted.last().copied().unwrap_or(0.0),
        mean_ns: mean,
        samples_ns,
    }
}

/// Linear-interpolated quantile of sorted values (0 for none).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let pos = p * (n - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_known_answers() {
        let s = summarize(vec![5.0, 1.0, 3.0, 2.0, 4.0], 1, "host");
        assert_eq!((s.median_ns, s.min_ns, s.max_ns, s.mean_ns), (3.0, 1.0, 5.0, 3.0));
        assert_eq!((s.p25_ns, s.p75_ns, s.iqr_ns), (2.0, 4.0, 2.0));
        assert_eq!(s.samples_ns, vec![5.0, 1.0, 3.0, 2.0, 4.0], "raw order kept");
        let even = summarize(vec![1.0, 2.0, 3.0, 4.0], 1, "host");
        assert_eq!(even.median_ns, 2.5);
    }

    #[test]
    fn measure_each_keeps_the_preparation_off_the_clock() {
        let cfg = HarnessConfig {
            warmup: Duration::from_millis(1),
            target: Duration::from_millis(30),
            ..HarnessConfig::quick()
        };
        let (mut prepared, mut worked) = (0u64, 0u64);
        let s = measure_each(
            &cfg,
            || {
                prepared += 1;
                std::thread::sleep(Duration::from_millis(2));
                Ok::<(), ()>(())
            },
            || {
                worked += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(prepared, worked, "one preparation before every call");
        assert!(s.samples_ns.len() >= 10, "{}", s.samples_ns.len());
        assert_eq!(s.iterations_per_sample, 1);
        // Each sample times the empty call alone, not the 2 ms sleep before it.
        assert!(s.median_ns < 1e6, "{}", s.median_ns);
    }

    #[test]
    fn measure_takes_at_least_ten_samples_and_batches_fast_work() {
        let mut calls = 0u64;
        let cfg = HarnessConfig {
            warmup: Duration::from_millis(1),
            target: Duration::from_millis(2),
            ..HarnessConfig::quick()
        };
        let t = measure(&cfg, || {
            calls += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(t.samples_ns.len() >= 10);
        assert!(t.iterations_per_sample > 1, "an empty closure is fast work");
        assert!(calls >= 10 * t.iterations_per_sample);
    }

    #[test]
    fn measure_reports_slow_work_faithfully() {
        let cfg = HarnessConfig { fixed_samples: Some(10), warmup: Duration::ZERO, ..HarnessConfig::quick() };
        let t = measure(&cfg, || {
            std::thread::sleep(Duration::from_millis(2));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(t.samples_ns.len(), 10);
        assert_eq!(t.iterations_per_sample, 1);
        assert!(t.median_ns >= 2e6 && t.median_ns < 2e7, "{}", t.median_ns);
    }

    #[test]
    fn a_simulated_measurement_is_one_warm_up_and_one_call_in_the_region() {
        let cfg = HarnessConfig { simulated: true, ..HarnessConfig::quick() };
        let mut calls = 0u64;
        let before = regions_entered();
        let t = measure(&cfg, || {
            calls += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(calls, 2, "one warm-up call, one measured call");
        assert!(regions_entered() > before, "the measured call went through the region");
        assert_eq!((t.samples_ns.len(), t.clock.as_str()), (1, "simulated"));
        let mut n = 0;
        let r = measure(&cfg, || {
            n += 1;
            if n == 2 { Err("in the region") } else { Ok(()) }
        });
        assert_eq!(r.unwrap_err(), "in the region", "an error inside the region is returned");
    }

    #[test]
    fn errors_stop_the_measurement() {
        let mut n = 0;
        let r = measure(&HarnessConfig::quick(), || {
            n += 1;
            if n == 3 { Err("boom") } else { Ok(()) }
        });
        assert_eq!(r.unwrap_err(), "boom");
    }
}
