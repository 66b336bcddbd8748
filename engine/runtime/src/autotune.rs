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
//! The key is a [`TuningKey`]: op, dtype, problem (its shapes, serialized)
//! and device identity — typed and serialized, never `Debug` output, so a
//! change to how a type prints cannot invalidate users' caches. The cache can
//! persist through a [`TuningStore`] (the engine writes no files: the file
//! store lives in `vramlab-reports`); the stored form carries
//! [`CACHE_VERSION`], and a cache of another version is ignored with the
//! reason. An entry is used only when its device and its candidate set match
//! the current ones, so a new machine or a new algorithm makes the tuner
//! measure again. Every tuning is recorded ([`TuningRecord`]: each candidate's
//! time, the choice, the time spent tuning) for suites to chart.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cpu_kernels::{Algorithm, FloatDType};
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

/// What a tuning is for: the autotuner's cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TuningKey {
    /// The op (`conv2d`, `matmul`, …; [`Algorithm::OP`]).
    pub op: String,
    /// The dtype's name (`float32`, `float16`, `bfloat16`).
    pub dtype: String,
    /// The problem (shapes, pass, math mode) as JSON, from its `Serialize`
    /// implementation: field names and values, stable across releases.
    pub problem: String,
    /// The device's identity: the same key on another machine must miss.
    pub device: String,
}

impl TuningKey {
    /// The key of `problem` for `op` in `dtype` on `device`.
    pub fn new(op: &str, dtype: FloatDType, problem: &impl Serialize, device: &Device) -> TuningKey {
        TuningKey {
            op: op.to_owned(),
            dtype: dtype.as_str().to_owned(),
            // Plain structs, tuples and enums of numbers and names: serializing cannot fail.
            problem: serde_json::to_string(problem).expect("a tuning problem serializes to JSON"),
            device: device_fingerprint(device),
        }
    }
}

impl fmt::Display for TuningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} on {}", self.op, self.dtype, self.problem, self.device)
    }
}

/// What one tuning did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningRecord {
    pub key: TuningKey,
    pub op: String,
    pub candidates: Vec<CandidateTiming>,
    pub choice: String,
    /// Wall time spent measuring, warm-ups included.
    pub tuning_ns: u64,
}

/// A cached choice, as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CacheEntry {
    key: TuningKey,
    /// The candidate set the choice was made from, by name.
    candidates: Vec<String>,
    choice: String,
    timings_ns: Vec<u64>,
}

/// The stored form of the cache.
#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: Vec<CacheEntry>,
}

/// The version of the stored cache. 2: typed keys ([`TuningKey`]); 1 (string
/// keys from `Debug` output) is ignored.
pub const CACHE_VERSION: u32 = 2;

/// Where the autotuner keeps its choices between runs: bytes in, bytes out.
/// The engine owns the format ([`CACHE_VERSION`]); a store only keeps the bytes,
/// so the engine itself never touches a file (`vramlab_reports::FileTuningStore`
/// keeps them in a file).
pub trait TuningStore: Send + Sync + fmt::Debug {
    /// Where the bytes live, for messages (a path).
    fn location(&self) -> String;
    /// The bytes saved last, or `None` when nothing was saved yet.
    fn load(&self) -> std::io::Result<Option<Vec<u8>>>;
    /// Replaces the saved bytes (atomically: a reader sees the old or the new).
    fn save(&self, bytes: &[u8]) -> std::io::Result<()>;
}

/// What [`Autotuner::persist`] found in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheLoad {
    /// Nothing saved yet.
    Empty,
    /// This many choices were loaded.
    Loaded(usize),
    /// The stored cache was not used (another version): the reason. Its
    /// choices are tuned again, and the store is rewritten after the next tuning.
    Ignored(String),
}

/// Autotuner errors (persistence only: tuning itself cannot fail beyond the op's own errors).
#[derive(Debug, Error)]
pub enum AutotuneError {
    #[error("autotuner cache {location}: {source}")]
    Io {
        location: String,
        #[source]
        source: std::io::Error,
    },
    #[error("autotuner cache {location} is not a vramlab autotuner cache: {source}")]
    Format {
        location: String,
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Debug, Default)]
struct State {
    mode: TuneMode,
    timed_runs: usize,
    cache: HashMap<TuningKey, CacheEntry>,
    records: Vec<TuningRecord>,
    store: Option<Arc<dyn TuningStore>>,
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

    /// Keeps choices in `store`: loads what it holds now, and saves the cache
    /// after every new tuning. A cache of another [`CACHE_VERSION`] is not an
    /// error: it is ignored and the reason returned.
    pub fn persist(&self, store: Arc<dyn TuningStore>) -> Result<CacheLoad, AutotuneError> {
        let loaded = self.preload(store.as_ref())?;
        self.lock().store = Some(store);
        Ok(loaded)
    }

    /// Adds the choices `store` holds to the cache, without keeping the store
    /// (new tunings are not saved to it): how a run starts from another run's
    /// choices. A cache of another [`CACHE_VERSION`] is ignored, with the reason.
    pub fn preload(&self, store: &dyn TuningStore) -> Result<CacheLoad, AutotuneError> {
        let location = store.location();
        Ok(match store.load().map_err(|source| AutotuneError::Io { location: location.clone(), source })? {
            None => CacheLoad::Empty,
            Some(bytes) => {
                #[derive(Deserialize)]
                struct Version {
                    version: u32,
                }
                let format = |source| AutotuneError::Format { location: location.clone(), source };
                let Version { version } = serde_json::from_slice(&bytes).map_err(format)?;
                if version == CACHE_VERSION {
                    let file: CacheFile = serde_json::from_slice(&bytes).map_err(format)?;
                    let n = file.entries.len();
                    self.lock().cache.extend(file.entries.into_iter().map(|e| (e.key.clone(), e)));
                    CacheLoad::Loaded(n)
                } else {
                    CacheLoad::Ignored(format!(
                        "{location} holds an autotuner cache of version {version}; this vramlab reads version \
                         {CACHE_VERSION} — its choices will be tuned again and the cache rewritten"
                    ))
                }
            }
        })
    }

    /// Writes the cache's choices to `store` now (in the form [`preload`](Self::preload)
    /// and [`persist`](Self::persist) read); returns how many.
    pub fn export(&self, store: &dyn TuningStore) -> Result<usize, AutotuneError> {
        let st = self.lock();
        Autotuner::save_to(&st, store)?;
        Ok(st.cache.len())
    }

    /// The cached choices: each key and the algorithm chosen for it.
    pub fn cached_choices(&self) -> Vec<(TuningKey, String)> {
        self.lock().cache.values().map(|e| (e.key.clone(), e.choice.clone())).collect()
    }

    fn save(st: &State) -> Result<(), AutotuneError> {
        match &st.store {
            Some(store) => Autotuner::save_to(st, store.as_ref()),
            None => Ok(()),
        }
    }

    fn save_to(st: &State, store: &dyn TuningStore) -> Result<(), AutotuneError> {
        let mut entries: Vec<CacheEntry> = st.cache.values().cloned().collect();
        entries.sort_by(|a, b| {
            (&a.key.op, &a.key.dtype, &a.key.problem, &a.key.device).cmp(&(
                &b.key.op,
                &b.key.dtype,
                &b.key.problem,
                &b.key.device,
            ))
        });
        let file = CacheFile { version: CACHE_VERSION, entries };
        let json = serde_json::to_vec_pretty(&file)
            .map_err(|source| AutotuneError::Format { location: store.location(), source })?;
        store.save(&json).map_err(|source| AutotuneError::Io { location: store.location(), source })
    }

    /// Picks the algorithm for `problem`. In benchmark mode a cache miss runs
    /// `measure(candidate)` — which runs the op once with that algorithm and
    /// returns its duration in ns — one warm-up plus `timed_runs` times per
    /// candidate. Errors from `measure` propagate.
    pub fn choose<A, E>(
        &self,
        device: &Device,
        problem: &A::Problem,
        dtype: FloatDType,
        mut measure: impl FnMut(A) -> Result<u64, E>,
    ) -> Result<A, E>
    where
        A: Algorithm,
        A::Problem: Serialize,
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
        let key = TuningKey::new(A::OP, dtype, problem, device);
        {
            let st = self.lock();
            if let Some(e) = st.cache.get(&key)
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
        self.store(key, names, timings, best.name(), tuning_ns);
        Ok(best)
    }

    /// Caches a tuning's choice and keeps its record.
    fn store(&self, key: TuningKey, names: Vec<String>, timings: Vec<CandidateTiming>, choice: &str, tuning_ns: u64) {
        let mut st = self.lock();
        st.cache.insert(
            key.clone(),
            CacheEntry {
                key: key.clone(),
                candidates: names,
                choice: choice.to_owned(),
                timings_ns: timings.iter().map(|t| t.median_ns).collect(),
            },
        );
        let op = key.op.clone();
        st.records.push(TuningRecord { key, op, candidates: timings, choice: choice.to_owned(), tuning_ns });
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
    pub fn choose_runtime<P: Serialize, E>(
        &self,
        device: &Device,
        op: &'static str,
        problem: &P,
        dtype: FloatDType,
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
        let key = TuningKey::new(op, dtype, problem, device);
        {
            let st = self.lock();
            if let Some(e) = st.cache.get(&key)
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
        self.store(key, names, ran, candidates[best].name, tuning_ns);
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
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |_| -> Result<u64, ()> {
                panic!("no timing in off mode")
            })
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
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |a| {
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
            t.choose(&Device::cpu(), &problem(), FloatDType::F32, |_| -> Result<u64, ()> { panic!("cached") }).unwrap();
        assert_eq!(b, ConvAlgo::Direct);
        let rec = t.records();
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].choice, "direct");
        assert_eq!(rec[0].candidates.len(), n);
        assert!(rec[0].candidates.iter().filter(|c| c.dropped).all(|c| c.algorithm != "direct"));
        // Another dtype is another key.
        let _: ConvAlgo = t.choose(&Device::cpu(), &problem(), FloatDType::BF16, |a| Ok::<_, ()>(fake(a))).unwrap();
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
                .choose(&Device::cpu(), &problem(), FloatDType::F32, |a| {
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
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |a| {
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
        let a: ConvAlgo = t.choose(&Device::cpu(), &p, FloatDType::F32, |_| Ok::<_, ()>(1)).unwrap();
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
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F32, &c, 0, never), Ok(0));
        t.set_mode(TuneMode::Deterministic);
        // The heuristic's choice is not reproducible: the first that is.
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F32, &c, 0, never), Ok(1));
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F32, &c, 2, never), Ok(2));
        // No candidates at all: the heuristic index, untouched.
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F32, &[], 0, never), Ok(0));
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
            .choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F16, &c, 0, || {
                calls += 1;
                Ok::<_, ()>(vec![vec![], vec![900, 1000], vec![500, 400, 450]])
            })
            .unwrap();
        assert_eq!((chosen, calls), (2, 1));
        let rec = t.records();
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].op, "conv2d");
        assert_eq!(rec[0].choice, "own_det");
        assert_eq!((rec[0].key.op.as_str(), rec[0].key.dtype.as_str()), ("conv2d", "float16"), "{}", rec[0].key);
        assert_eq!(rec[0].key.problem, serde_json::to_string(&problem()).unwrap());
        // Only candidates that ran are in the record, with their runs.
        let names: Vec<&str> = rec[0].candidates.iter().map(|c| c.algorithm.as_str()).collect();
        assert_eq!(names, ["lib_det", "own_det"]);
        assert_eq!((rec[0].candidates[1].min_ns, rec[0].candidates[1].median_ns), (400, 450));
        // Cached: no measuring the second time.
        let never = || -> Result<Vec<Vec<u64>>, ()> { panic!("cached") };
        assert_eq!(t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F16, &c, 0, never), Ok(2));
        // Another candidate set (a library that lists another algorithm) re-tunes.
        let fewer = &c[1..];
        let again = t.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F16, fewer, 0, || {
            Ok::<_, ()>(vec![vec![100], vec![101]])
        });
        // A near tie keeps the heuristic's choice.
        assert_eq!(again, Ok(0));
        assert_eq!(t.records().len(), 2);
        // Errors from measuring propagate and cache nothing.
        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        let failed =
            t2.choose_runtime(&Device::cpu(), "conv2d", &problem(), FloatDType::F32, &c, 0, || Err("device lost"));
        assert_eq!(failed, Err("device lost"));
        assert_eq!(t2.cached(), 0);
    }

    /// A store in memory, as a file store would behave.
    #[derive(Debug, Default)]
    struct MemoryStore(Mutex<Option<Vec<u8>>>);

    impl TuningStore for MemoryStore {
        fn location(&self) -> String {
            "memory".into()
        }
        fn load(&self) -> std::io::Result<Option<Vec<u8>>> {
            Ok(self.0.lock().unwrap().clone())
        }
        fn save(&self, bytes: &[u8]) -> std::io::Result<()> {
            *self.0.lock().unwrap() = Some(bytes.to_vec());
            Ok(())
        }
    }

    impl MemoryStore {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone().unwrap()).unwrap()
        }
        fn set(&self, text: &str) {
            *self.0.lock().unwrap() = Some(text.as_bytes().to_vec());
        }
    }

    #[test]
    fn persisted_choices_reload_and_invalidate() {
        let store = Arc::new(MemoryStore::default());
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        assert_eq!(t.persist(store.clone()).unwrap(), CacheLoad::Empty);
        let fake = |a: ConvAlgo| if a == ConvAlgo::Im2colGemm { 5 } else { 50 };
        let _: ConvAlgo = t.choose(&Device::cpu(), &problem(), FloatDType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        // The stored form: versioned, with the key's fields by name.
        let saved: serde_json::Value = serde_json::from_str(&store.text()).unwrap();
        assert_eq!(saved["version"], CACHE_VERSION);
        let key = &saved["entries"][0]["key"];
        assert_eq!((key["op"].as_str(), key["dtype"].as_str()), (Some("conv2d"), Some("float32")));
        let problem_json: serde_json::Value = serde_json::from_str(key["problem"].as_str().unwrap()).unwrap();
        assert_eq!(problem_json["pass"], "forward", "{problem_json}");

        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        assert_eq!(t2.persist(store.clone()).unwrap(), CacheLoad::Loaded(1));
        let a: ConvAlgo = t2
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |_| -> Result<u64, ()> {
                panic!("loaded from the store")
            })
            .unwrap();
        assert_eq!(a, ConvAlgo::Im2colGemm);

        // A changed candidate set invalidates the entry.
        store.set(&store.text().replace("\"direct\"", "\"retired_algo\""));
        let t3 = Autotuner::default();
        t3.set_mode(TuneMode::Benchmark);
        t3.persist(store.clone()).unwrap();
        let mut measured = false;
        let _: ConvAlgo = t3
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |a| {
                measured = true;
                Ok::<_, ()>(fake(a))
            })
            .unwrap();
        assert!(measured, "a stale candidate set must be re-tuned");

        // Another version (version 1 keyed entries by `Debug` strings): ignored, with the reason, and rewritten.
        store.set(r#"{"version":1,"entries":{"conv2d|float32|ConvProblem { .. }|cpu":{"device":"cpu"}}}"#);
        let t4 = Autotuner::default();
        t4.set_mode(TuneMode::Benchmark);
        match t4.persist(store.clone()).unwrap() {
            CacheLoad::Ignored(reason) => {
                assert!(reason.contains("version 1") && reason.contains("tuned again"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let _: ConvAlgo = t4.choose(&Device::cpu(), &problem(), FloatDType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        assert!(store.text().contains(&format!("\"version\": {CACHE_VERSION}")), "rewritten in the current version");

        store.set("not json");
        let err = Autotuner::default().persist(store).unwrap_err();
        assert!(err.to_string().contains("memory is not a vramlab autotuner cache"), "{err}");
    }

    #[test]
    fn exported_choices_preload_into_another_tuner_without_tuning_or_saving() {
        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        // Im2colGemm is 10× faster here, so benchmark mode picks it over the heuristic.
        let fake = |a: ConvAlgo| if a == ConvAlgo::Im2colGemm { 5 } else { 50 };
        let chosen: ConvAlgo = t.choose(&Device::cpu(), &problem(), FloatDType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        let store = MemoryStore::default();
        assert_eq!(t.export(&store).unwrap(), 1);
        assert_eq!(t.cached_choices().len(), 1);
        assert_eq!(t.cached_choices()[0].1, chosen.name());

        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        assert_eq!(t2.preload(&store).unwrap(), CacheLoad::Loaded(1));
        let again: ConvAlgo = t2
            .choose(&Device::cpu(), &problem(), FloatDType::F32, |_| -> Result<u64, ()> {
                panic!("the preloaded choice is used, not tuned again")
            })
            .unwrap();
        assert_eq!(again, chosen);
        assert!(t2.records().is_empty(), "a preloaded choice is not a tuning");
        // preload does not keep the store: a new tuning leaves it as it was.
        let before = store.text();
        t2.clear();
        let _: ConvAlgo = t2.choose(&Device::cpu(), &problem(), FloatDType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        assert_eq!(store.text(), before);
    }
}
