//! The autotuner: `torch.backends.cudnn.benchmark` and `.deterministic` for
//! every op with a choice of algorithm.
//!
//! - [`TuneMode::Off`]: a fixed heuristic per shape (no timing).
//! - [`TuneMode::Benchmark`]: the first call with a new key times every
//!   applicable candidate and caches the fastest: one warm-up run each (a
//!   candidate [`DROP_FACTOR`] times slower than the best is dropped there),
//!   then [`Autotuner::timed_runs`] rounds with the candidates in rotation, so
//!   that a burst of load from elsewhere hits them alike; each is scored by its
//!   fastest run (load only slows things down), and the heuristic's choice is
//!   kept unless another beats it by [`MIN_GAIN`]. (Timing candidates one after
//!   another, by the median of three, let background load decide the choice in
//!   a third of the tunings on our shared CI machine.)
//! - [`TuneMode::Deterministic`]: only bitwise-reproducible algorithms — the
//!   heuristic's choice when it is one, else the first reproducible candidate.
//!
//! The key is op, dtype, problem (shapes) and device identity. The cache can
//! persist to a JSON file; an entry is used only when its device and its
//! candidate set match the current ones, so a new machine or a new algorithm
//! makes the tuner measure again. Every tuning is recorded ([`TuningRecord`]:
//! each candidate's time, the choice, the time spent tuning) for suites to chart.

use std::collections::HashMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cpu_kernels::{Algorithm, DType};
use crate::device::Device;
use crate::hooks::now_ns;

/// How algorithms are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TuneMode {
    /// `cudnn.benchmark = False`: a fixed heuristic per shape.
    #[default]
    Off,
    /// `cudnn.benchmark = True`: measure every candidate once per key, keep the fastest.
    Benchmark,
    /// `cudnn.deterministic = True`: reproducible algorithms only.
    Deterministic,
}

impl std::str::FromStr for TuneMode {
    type Err = String;
    fn from_str(s: &str) -> Result<TuneMode, String> {
        match s {
            "off" => Ok(TuneMode::Off),
            "benchmark" => Ok(TuneMode::Benchmark),
            "deterministic" => Ok(TuneMode::Deterministic),
            other => Err(format!("unknown autotuner mode '{other}' (expected off, benchmark or deterministic)")),
        }
    }
}

/// One candidate's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateTiming {
    pub algorithm: String,
    pub reproducible: bool,
    /// Median of the timed runs (the warm-up run when it was dropped).
    pub median_ns: u64,
    /// Fastest timed run: the score the choice is made on.
    pub min_ns: u64,
    /// Not timed beyond its warm-up: more than `DROP_FACTOR` times slower than the best.
    pub dropped: bool,
    pub runs_ns: Vec<u64>,
}

/// A candidate whose warm-up run is this many times slower than the fastest
/// warm-up is not timed further.
pub const DROP_FACTOR: u64 = 4;

/// Another algorithm replaces the heuristic's choice only when it is at least
/// this much faster (a fraction): a near-tie is noise, and the heuristic is the
/// choice `off` mode makes too.
pub const MIN_GAIN: f64 = 0.03;

/// What one tuning did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord {
    pub key: String,
    pub op: String,
    pub candidates: Vec<CandidateTiming>,
    pub choice: String,
    /// Wall time spent measuring, warm-ups included.
    pub tuning_ns: u64,
}

/// A cached choice, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CacheEntry {
    device: String,
    /// The candidate set the choice was made from, by name.
    candidates: Vec<String>,
    choice: String,
    timings_ns: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: HashMap<String, CacheEntry>,
}

const CACHE_VERSION: u32 = 1;

/// Autotuner errors (persistence only: tuning itself cannot fail beyond the op's own errors).
#[derive(Debug, Error)]
pub enum AutotuneError {
    #[error("autotuner cache {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("autotuner cache {path} is not a vramlab autotuner cache: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Debug, Default)]
struct State {
    mode: TuneMode,
    timed_runs: usize,
    cache: HashMap<String, CacheEntry>,
    records: Vec<TuningRecord>,
    path: Option<PathBuf>,
}

/// Chooses algorithms. One per process ([`global`]) is what ops use; tests may
/// make their own.
#[derive(Debug)]
pub struct Autotuner {
    state: Mutex<State>,
}

impl Default for Autotuner {
    fn default() -> Self {
        Autotuner { state: Mutex::new(State { timed_runs: 5, ..State::default() }) }
    }
}

/// The process-wide autotuner the ops consult.
pub fn global() -> &'static Autotuner {
    static GLOBAL: OnceLock<Autotuner> = OnceLock::new();
    GLOBAL.get_or_init(Autotuner::default)
}

/// A device's identity for the cache: the same key on another machine must miss.
fn device_fingerprint(device: &Device) -> String {
    let p = device.properties();
    format!("{} {} ({} units)", p.id, p.name, p.compute_units)
}

impl Autotuner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mode(&self) -> TuneMode {
        self.lock().mode
    }

    pub fn set_mode(&self, mode: TuneMode) {
        self.lock().mode = mode;
    }

    /// Timed rounds per candidate (after one warm-up); default 5.
    pub fn timed_runs(&self) -> usize {
        self.lock().timed_runs
    }

    pub fn set_timed_runs(&self, runs: usize) {
        self.lock().timed_runs = runs.max(1);
    }

    /// Every tuning so far, oldest first.
    pub fn records(&self) -> Vec<TuningRecord> {
        self.lock().records.clone()
    }

    /// Forgets every cached choice and record (the file, if any, is untouched).
    pub fn clear(&self) {
        let mut st = self.lock();
        st.cache.clear();
        st.records.clear();
    }

    /// Number of cached choices.
    pub fn cached(&self) -> usize {
        self.lock().cache.len()
    }

    /// Persists choices to `path`: loads it now if it exists, and rewrites it after
    /// every new tuning.
    pub fn persist_to(&self, path: impl AsRef<Path>) -> Result<(), AutotuneError> {
        let path = path.as_ref().to_path_buf();
        let mut st = self.lock();
        match std::fs::read(&path) {
            Ok(bytes) => {
                let file: CacheFile = serde_json::from_slice(&bytes)
                    .map_err(|source| AutotuneError::Format { path: path.clone(), source })?;
                if file.version == CACHE_VERSION {
                    st.cache.extend(file.entries);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(AutotuneError::Io { path, source }),
        }
        st.path = Some(path);
        Ok(())
    }

    fn save(st: &State) -> Result<(), AutotuneError> {
        let Some(path) = &st.path else { return Ok(()) };
        let file = CacheFile { version: CACHE_VERSION, entries: st.cache.clone() };
        let json =
            serde_json::to_vec_pretty(&file).map_err(|source| AutotuneError::Format { path: path.clone(), source })?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, json)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|source| AutotuneError::Io { path: path.clone(), source })
    }

    /// Picks the algorithm for `problem`. In benchmark mode a cache miss runs
    /// `measure(candidate)` — which runs the op once with that algorithm and
    /// returns its duration in ns — one warm-up plus `timed_runs` times per
    /// candidate. Errors from `measure` propagate.
    pub fn choose<A, E>(
        &self,
        device: &Device,
        problem: &A::Problem,
        dtype: DType,
        mut measure: impl FnMut(A) -> Result<u64, E>,
    ) -> Result<A, E>
    where
        A: Algorithm,
        A::Problem: Debug,
    {
        let mode = self.mode();
        match mode {
            TuneMode::Off => return Ok(A::heuristic(problem)),
            TuneMode::Deterministic => {
                let h = A::heuristic(problem);
                if h.is_reproducible(problem) {
                    return Ok(h);
                }
                let first = A::candidates(problem).into_iter().find(|a| a.is_reproducible(problem));
                return Ok(first.unwrap_or(h));
            }
            TuneMode::Benchmark => {}
        }
        let candidates = A::candidates(problem);
        let names: Vec<String> = candidates.iter().map(|a| a.name().to_owned()).collect();
        let fingerprint = device_fingerprint(device);
        let key = format!("{}|{}|{:?}|{}", A::OP, dtype.as_str(), problem, fingerprint);
        {
            let st = self.lock();
            if let Some(e) = st.cache.get(&key)
                && e.device == fingerprint
                && e.candidates == names
                && let Some(a) = A::from_name(&e.choice)
            {
                return Ok(a);
            }
        }
        // Measure outside the lock: ops may run on other threads meanwhile.
        let runs = self.timed_runs();
        let started = now_ns();
        let heuristic = A::heuristic(problem);
        // Warm-up: every candidate once, which also gives a first estimate.
        let mut first = Vec::with_capacity(candidates.len());
        for &a in &candidates {
            first.push(measure(a)?);
        }
        let fastest_first = first.iter().copied().min().unwrap_or(0);
        // Candidates far slower than the best first run are not worth timing
        // further (the heuristic's choice always is): this keeps the direct
        // convolution from dominating the tuning time.
        let keep: Vec<bool> = candidates
            .iter()
            .zip(&first)
            .map(|(&a, &t)| a == heuristic || t <= fastest_first.saturating_mul(DROP_FACTOR))
            .collect();
        // Timed rounds, candidates in rotation, so a burst of load hits them alike.
        let mut runs_ns: Vec<Vec<u64>> = vec![Vec::with_capacity(runs); candidates.len()];
        for round in 0..runs {
            for i in 0..candidates.len() {
                let i = (i + round) % candidates.len();
                if keep[i] {
                    runs_ns[i].push(measure(candidates[i])?);
                }
            }
        }
        let timings: Vec<CandidateTiming> = candidates
            .iter()
            .zip(runs_ns)
            .zip(&first)
            .map(|((&a, runs_ns), &first_ns)| {
                let mut sorted = if runs_ns.is_empty() { vec![first_ns] } else { runs_ns.clone() };
                sorted.sort_unstable();
                CandidateTiming {
                    algorithm: a.name().to_owned(),
                    reproducible: a.is_reproducible(problem),
                    median_ns: sorted[sorted.len() / 2],
                    min_ns: sorted[0],
                    dropped: runs_ns.is_empty(),
                    runs_ns,
                }
            })
            .collect();
        let tuning_ns = now_ns().saturating_sub(started);
        let h = candidates.iter().position(|&a| a == heuristic);
        let best = match pick(&timings, &keep, h) {
            Some(i) => candidates[i],
            None => heuristic,
        };
        self.store(key, fingerprint, A::OP, names, timings, best.name(), tuning_ns);
        Ok(best)
    }

    /// Caches a tuning's choice and keeps its record.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        key: String,
        fingerprint: String,
        op: &str,
        names: Vec<String>,
        timings: Vec<CandidateTiming>,
        choice: &str,
        tuning_ns: u64,
    ) {
        let mut st = self.lock();
        st.cache.insert(
            key.clone(),
            CacheEntry {
                device: fingerprint,
                candidates: names,
                choice: choice.to_owned(),
                timings_ns: timings.iter().map(|t| t.median_ns).collect(),
            },
        );
        st.records.push(TuningRecord {
            key,
            op: op.to_owned(),
            candidates: timings,
            choice: choice.to_owned(),
            tuning_ns,
        });
        // A cache that cannot be written costs a re-tune next time, not this op.
        let _ = Autotuner::save(&st);
    }

    /// [`choose`](Self::choose) for algorithms that a library lists at run time
    /// (cuDNN's, plus vramlab's own GPU fallbacks) rather than an [`Algorithm`]
    /// type. `candidates` is in the library's order of preference and
    /// `candidates[heuristic]` is what `off` mode runs; `deterministic` mode takes
    /// the heuristic's choice when it is reproducible, else the first reproducible
    /// candidate. In benchmark mode a cache miss calls `measure` once; it returns
    /// each candidate's timed runs in ns, in `candidates`' order (no runs: the
    /// candidate could not run — it is never chosen, and left out of the record).
    /// The same rule as [`choose`](Self::choose) picks: the fastest run wins, the
    /// heuristic's choice unless another beats it by [`MIN_GAIN`]. Returns an index
    /// into `candidates` (`heuristic` when `candidates` is empty).
    #[allow(clippy::too_many_arguments)]
    pub fn choose_runtime<P: Debug, E>(
        &self,
        device: &Device,
        op: &'static str,
        problem: &P,
        dtype: DType,
        candidates: &[RuntimeCandidate],
        heuristic: usize,
        measure: impl FnOnce() -> Result<Vec<Vec<u64>>, E>,
    ) -> Result<usize, E> {
        if candidates.is_empty() {
            return Ok(heuristic);
        }
        let heuristic = heuristic.min(candidates.len() - 1);
        match self.mode() {
            TuneMode::Off => return Ok(heuristic),
            TuneMode::Deterministic => {
                if candidates[heuristic].reproducible {
                    return Ok(heuristic);
                }
                return Ok(candidates.iter().position(|c| c.reproducible).unwrap_or(heuristic));
            }
            TuneMode::Benchmark => {}
        }
        let names: Vec<String> = candidates.iter().map(|c| c.name.to_owned()).collect();
        let fingerprint = device_fingerprint(device);
        let key = format!("{}|{}|{:?}|{}", op, dtype.as_str(), problem, fingerprint);
        {
            let st = self.lock();
            if let Some(e) = st.cache.get(&key)
                && e.device == fingerprint
                && e.candidates == names
                && let Some(i) = candidates.iter().position(|c| c.name == e.choice)
            {
                return Ok(i);
            }
        }
        let started = now_ns();
        let mut runs = measure()?;
        runs.resize(candidates.len(), Vec::new());
        let keep: Vec<bool> = runs.iter().map(|r| !r.is_empty()).collect();
        let timings: Vec<CandidateTiming> = candidates
            .iter()
            .zip(runs)
            .map(|(c, runs_ns)| {
                let mut sorted = runs_ns.clone();
                sorted.sort_unstable();
                CandidateTiming {
                    algorithm: c.name.to_owned(),
                    reproducible: c.reproducible,
                    median_ns: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
                    min_ns: sorted.first().copied().unwrap_or(0),
                    dropped: false,
                    runs_ns,
                }
            })
            .collect();
        let tuning_ns = now_ns().saturating_sub(started);
        let best = pick(&timings, &keep, Some(heuristic)).unwrap_or(heuristic);
        let ran: Vec<CandidateTiming> = timings.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(t, _)| t).collect();
        self.store(key, fingerprint, op, names, ran, candidates[best].name, tuning_ns);
        Ok(best)
    }
}

/// One candidate of [`Autotuner::choose_runtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeCandidate {
    /// Stable name (kernel events and the cache use it).
    pub name: &'static str,
    /// Bitwise-identical results on every run with the same inputs.
    pub reproducible: bool,
}

/// The tuning's choice among the candidates still in the running (`keep`),
/// scored by their fastest run (load only ever slows a run down, so the minimum
/// is the steadiest score): the heuristic's choice (`heuristic`, an index) is
/// kept unless another beats it by [`MIN_GAIN`]. `None` when none is in the running.
fn pick(timings: &[CandidateTiming], keep: &[bool], heuristic: Option<usize>) -> Option<usize> {
    let score = |i: usize| timings[i].min_ns;
    let best = (0..timings.len()).filter(|&i| keep[i]).min_by_key(|&i| score(i))?;
    match heuristic {
        Some(h) if keep[h] && (score(h) as f64) <= score(best) as f64 * (1.0 + MIN_GAIN) => Some(h),
        _ => Some(best),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_kernels::{Conv2dShape, ConvAlgo, ConvPass, ConvProblem};

    fn problem() -> ConvProblem {
        ConvProblem { pass: ConvPass::Forward, shape: Conv2dShape::new(1, 2, 6, 6, 2, 3, 3) }
    }

    #[test]
    fn off_uses_the_heuristic_without_measuring() {
        let t = Autotuner::default();
        let a: ConvAlgo = t
            .choose(&Device::cpu(), &problem(), DType::F32, |_| -> Result<u64, ()> { panic!("no timing in off mode") })
            .unwrap();
        assert_eq!(a, ConvAlgo::heuristic(&problem()));
    }

    #[test]
    fn benchmark_picks_the_fastest_and_caches_it() {
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        let mut calls = 0;
        // Pretend Direct is fastest.
        let fake = |a: ConvAlgo| if a == ConvAlgo::Direct { 10 } else { 1000 };
        let a: ConvAlgo = t
            .choose(&Device::cpu(), &problem(), DType::F32, |a| {
                calls += 1;
                Ok::<_, ()>(fake(a))
            })
            .unwrap();
        assert_eq!(a, ConvAlgo::Direct);
        let n = ConvAlgo::candidates(&problem()).len();
        // Every candidate warms up; only Direct and the heuristic's choice are
        // within DROP_FACTOR of the best and get timed rounds.
        let heuristic_timed = usize::from(ConvAlgo::heuristic(&problem()) != ConvAlgo::Direct);
        assert_eq!(calls, n + (1 + heuristic_timed) * t.timed_runs());
        // Second call: cached, no measuring.
        let b: ConvAlgo =
            t.choose(&Device::cpu(), &problem(), DType::F32, |_| -> Result<u64, ()> { panic!("cached") }).unwrap();
        assert_eq!(b, ConvAlgo::Direct);
        let rec = t.records();
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].choice, "direct");
        assert_eq!(rec[0].candidates.len(), n);
        assert!(rec[0].candidates.iter().filter(|c| c.dropped).all(|c| c.algorithm != "direct"));
        // Another dtype is another key.
        let _: ConvAlgo = t.choose(&Device::cpu(), &problem(), DType::BF16, |a| Ok::<_, ()>(fake(a))).unwrap();
        assert_eq!(t.records().len(), 2);
    }

    #[test]
    fn near_ties_keep_the_heuristic_and_clear_wins_replace_it() {
        let h = ConvAlgo::heuristic(&problem());
        let other = ConvAlgo::candidates(&problem()).into_iter().find(|&a| a != h).unwrap();
        for (other_ns, expected) in [(99, h), (50, other)] {
            let t = Autotuner::default();
            t.set_mode(TuneMode::Benchmark);
            let a: ConvAlgo = t
                .choose(&Device::cpu(), &problem(), DType::F32, |a| {
                    Ok::<_, ()>(if a == h {
                        100
                    } else if a == other {
                        other_ns
                    } else {
                        1000
                    })
                })
                .unwrap();
            assert_eq!(a, expected, "other at {other_ns} ns against the heuristic's 100 ns");
        }
    }

    #[test]
    fn scoring_uses_the_fastest_run_so_bursts_of_load_do_not_decide() {
        let h = ConvAlgo::heuristic(&problem());
        let other = ConvAlgo::candidates(&problem()).into_iter().find(|&a| a != h).unwrap();
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        let mut heuristic_runs = 0;
        // The heuristic is truly faster (80 vs 100) but most of its runs are hit by load.
        let a: ConvAlgo = t
            .choose(&Device::cpu(), &problem(), DType::F32, |a| {
                Ok::<_, ()>(if a == h {
                    heuristic_runs += 1;
                    if heuristic_runs % 2 == 0 { 80 } else { 400 }
                } else if a == other {
                    100
                } else {
                    10_000
                })
            })
            .unwrap();
        assert_eq!(a, h);
    }

    #[test]
    fn deterministic_only_picks_reproducible() {
        let t = Autotuner::default();
        t.set_mode(TuneMode::Deterministic);
        let p = ConvProblem { pass: ConvPass::BackwardWeight, shape: Conv2dShape::new(4, 3, 8, 8, 4, 3, 3) };
        let a: ConvAlgo = t.choose(&Device::cpu(), &p, DType::F32, |_| Ok::<_, ()>(1)).unwrap();
        assert!(a.is_reproducible(&p));
    }

    fn runtime_candidates() -> [RuntimeCandidate; 3] {
        [
            RuntimeCandidate { name: "lib_fast_nondet", reproducible: false },
            RuntimeCandidate { name: "lib_det", reproducible: true },
            RuntimeCandidate { name: "own_det", reproducible: true },
        ]
    }

    #[test]
    fn runtime_off_and_deterministic_do_not_measure() {
        let t = Autotuner::default();
        let c = runtime_candidates();
        let never = || -> Result<Vec<Vec<u64>>, ()> { panic!("no timing outside benchmark mode") };
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F32, &c, 0, never), Ok(0));
        t.set_mode(TuneMode::Deterministic);
        // The heuristic's choice is not reproducible: the first that is.
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F32, &c, 0, never), Ok(1));
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F32, &c, 2, never), Ok(2));
        // No candidates at all: the heuristic index, untouched.
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F32, &[], 0, never), Ok(0));
        assert!(t.records().is_empty());
    }

    #[test]
    fn runtime_benchmark_picks_the_fastest_that_ran_and_caches_it() {
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        let c = runtime_candidates();
        // The fastest run belongs to a candidate that could not run in full: it
        // has no runs, so it is out; of the others `own_det` is clearly faster.
        let mut calls = 0;
        let chosen = t
            .choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F16, &c, 0, || {
                calls += 1;
                Ok::<_, ()>(vec![vec![], vec![900, 1000], vec![500, 400, 450]])
            })
            .unwrap();
        assert_eq!((chosen, calls), (2, 1));
        let rec = t.records();
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].op, "conv2d");
        assert_eq!(rec[0].choice, "own_det");
        assert!(rec[0].key.starts_with("conv2d|float16|"), "{}", rec[0].key);
        assert!(rec[0].key.contains(&format!("{:?}", problem())));
        // Only candidates that ran are in the record, with their runs.
        let names: Vec<&str> = rec[0].candidates.iter().map(|c| c.algorithm.as_str()).collect();
        assert_eq!(names, ["lib_det", "own_det"]);
        assert_eq!((rec[0].candidates[1].min_ns, rec[0].candidates[1].median_ns), (400, 450));
        // Cached: no measuring the second time.
        let never = || -> Result<Vec<Vec<u64>>, ()> { panic!("cached") };
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F16, &c, 0, never), Ok(2));
        // Another candidate set (a library that lists another algorithm) re-tunes.
        let fewer = &c[1..];
        let again = t.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F16, fewer, 0, || {
            Ok::<_, ()>(vec![vec![100], vec![101]])
        });
        // A near tie keeps the heuristic's choice.
        assert_eq!(again, Ok(0));
        assert_eq!(t.records().len(), 2);
        // Errors from measuring propagate and cache nothing.
        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        let failed = t2.choose_runtime(&Device::cpu(), "conv2d", &problem(), DType::F32, &c, 0, || Err("device lost"));
        assert_eq!(failed, Err("device lost"));
        assert_eq!(t2.cached(), 0);
    }

    #[test]
    fn persisted_choices_reload_and_invalidate() {
        let dir = std::env::temp_dir().join(format!("vramlab-autotune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cache.json");
        let _ = std::fs::remove_file(&path);
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        t.persist_to(&path).unwrap();
        let fake = |a: ConvAlgo| if a == ConvAlgo::Im2colGemm { 5 } else { 50 };
        let _: ConvAlgo = t.choose(&Device::cpu(), &problem(), DType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        assert!(path.exists());

        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        t2.persist_to(&path).unwrap();
        let a: ConvAlgo = t2
            .choose(&Device::cpu(), &problem(), DType::F32, |_| -> Result<u64, ()> { panic!("loaded from file") })
            .unwrap();
        assert_eq!(a, ConvAlgo::Im2colGemm);

        // A changed candidate set invalidates the entry.
        let text = std::fs::read_to_string(&path).unwrap().replace("\"direct\"", "\"retired_algo\"");
        std::fs::write(&path, text).unwrap();
        let t3 = Autotuner::default();
        t3.set_mode(TuneMode::Benchmark);
        t3.persist_to(&path).unwrap();
        let mut measured = false;
        let _: ConvAlgo = t3
            .choose(&Device::cpu(), &problem(), DType::F32, |a| {
                measured = true;
                Ok::<_, ()>(fake(a))
            })
            .unwrap();
        assert!(measured, "a stale candidate set must be re-tuned");

        std::fs::write(&path, "not json").unwrap();
        let err = Autotuner::default().persist_to(&path).unwrap_err();
        assert!(err.to_string().contains("not a vramlab autotuner cache"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
