//! `bench --simulate`: the suites run once more, under valgrind's callgrind,
//! and each CPU case's measured work is counted (instructions, cache events,
//! an estimated cycle count) — a figure that does not move with the machine's
//! load, so it gates a change of a few percent where a shared runner's wall
//! time cannot.
//!
//! This process starts the simulated ones (this binary, `bench
//! --simulated-process`, one per suite, as many at once as there are cores)
//! under callgrind, instrumenting nothing until asked; a simulated process
//! runs every case's work once more after a warm-up call, on one thread,
//! inside the harness's measured region — instrumented, its counts zeroed
//! before and dumped after, one profile per call (see
//! `vramlab_suites::valgrind`) — and records which regions were each case's;
//! this process then reads the dumps and puts each case's figures into the
//! run's results. The timed run's autotuner choices go to the simulated
//! processes (`tuned-choices.json`), so that a benchmark-mode case counts the
//! algorithm the timed run chose.
//!
//! What costs the time is not callgrind's counting but valgrind itself: it
//! emulates each fused multiply-add (the GEMM kernels' inner loop) lane by
//! lane in a helper call, so an uninstrumented matrix product runs some
//! hundred times slower than on the CPU. A suite under simulation therefore
//! runs no more of its work outside the measured region than the region
//! needs (amp: one warm-up step, no evaluation).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use vramlab_reports::{FileTuningStore, callgrind};
use vramlab_suites::{Context, NoProgress, RunResults, SimulatedCpu, Suite};

use crate::cli::BenchArgs;

/// A simulated pass: each case's figures, and what it took.
#[derive(Debug)]
pub struct Pass {
    /// Suite, case name, parameters and the case's figures.
    figures: Vec<Figures>,
    pub seconds: f64,
    /// Where the dumps and the simulated processes' logs are (a folder per suite).
    pub dir: PathBuf,
}

impl Pass {
    /// Puts each case's figures into `run`'s matching case (suite, name and
    /// parameters); returns how many found theirs.
    pub fn attach(&self, run: &mut RunResults) -> usize {
        let mut attached = 0;
        for (suite, name, params, figures) in &self.figures {
            let target = run
                .suites
                .iter_mut()
                .filter(|s| &s.name == suite)
                .flat_map(|s| s.cases.iter_mut())
                .find(|c| &c.name == name && &c.params == params);
            if let Some(c) = target {
                c.simulated = Some(figures.clone());
                attached += 1;
            }
        }
        attached
    }
}

/// The timed run's autotuner choices, in the simulated pass's folder.
const TUNED_CHOICES: &str = "tuned-choices.json";

/// The simulated caches (size, associativity, line size in bytes), fixed
/// rather than read from the machine (valgrind would take the host's L3 as
/// its last level, 8 MiB on one runner and 256 MiB on another): the same build
/// counts the same misses, and so the same estimated cycles, on every machine.
const CACHES: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

/// valgrind's options: callgrind, the cache model on ([`CACHES`]),
/// instrumenting only where the process asks (`--instr-atstart=no`: each
/// case's warm-up and measured call; the process zeroes the counts before
/// the measured call and dumps them after, one profile per call), the dumps
/// in the process's working folder.
fn valgrind_args() -> Vec<String> {
    vec![
        "--tool=callgrind".into(),
        "--cache-sim=yes".into(),
        CACHES[0].into(),
        CACHES[1].into(),
        CACHES[2].into(),
        "--instr-atstart=no".into(),
        format!("--callgrind-out-file={}", callgrind::DUMP_STEM),
    ]
}

/// The environment of a simulated process, all of it: the same on every run
/// and machine, since what the process holds in memory moves the counts (the
/// environment's size shifts the stack, so the cache events of stack
/// buffers). `PYTORCH_CUDA_ALLOC_CONF` is passed on (it configures the
/// allocator the cases count, as in the timed run), and `VALGRIND_LIB`
/// (where valgrind finds its tools, where it is installed off its default
/// path).
///
/// glibc's malloc gets one arena (`glibc.malloc.arena_max=1`): with several,
/// a thread is served from an arena chosen by contention at the moment it
/// first allocates, so a case with worker threads (input-pipeline's
/// workers) copied between differently aligned buffers from run to run (an
/// A/A pair of its cases differed by up to 0.2 % in instructions; one arena:
/// 0.005 %). valgrind runs a process's threads one at a time, so the arenas
/// that spare real threads their contention have none to spare here.
const PASSED_ENV: [&str; 2] = ["PYTORCH_CUDA_ALLOC_CONF", "VALGRIND_LIB"];
const MALLOC_TUNABLES: (&str, &str) = ("GLIBC_TUNABLES", "glibc.malloc.arena_max=1");

/// `program`'s path on this process's `PATH` (the simulated processes get no
/// `PATH`: see [`PASSED_ENV`]).
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// `path` relative to the folder `from`, both relative to the same folder
/// (or both absolute), as the simulated processes are given their paths:
/// the same length whatever the run's `--out`, since the process copies its
/// arguments to its heap and a longer one shifts every later allocation
/// (malloc's and memcpy's paths, and counts, depend on it).
fn relative_to(from: &Path, path: &Path) -> PathBuf {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), path.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out: PathBuf = from[common..].iter().map(|_| std::path::Component::ParentDir).collect();
    out.extend(&to[common..]);
    out
}

/// Runs the simulated pass of `suites` (longest first: they are started in
/// this order) with `args`'s settings on `device` (the run's).
///
/// Each suite runs in a simulated process of its own, as many at once as the
/// machine has cores: valgrind runs a process's threads one at a time, so one
/// process uses one core, and the counts of a case do not depend on what runs
/// beside it (each process counts only its own measured regions).
pub fn run(args: &BenchArgs, device: &str, suites: &[String]) -> Result<Pass> {
    if !device.starts_with("cpu") {
        bail!(
            "--simulate counts CPU cases, and this run is on {device}: run it with --device cpu (GPU cases keep their time)"
        );
    }
    if !vramlab_suites::valgrind::SUPPORTED {
        bail!("--simulate needs an x86-64 machine (valgrind's client requests are written for it)");
    }
    let version = Command::new("valgrind").arg("--version").output();
    if on_path("valgrind").is_none() || !version.is_ok_and(|o| o.status.success()) {
        bail!(
            "--simulate runs the suites under valgrind's callgrind, and valgrind was not found on the PATH: install it (Debian and Ubuntu: apt-get install valgrind)"
        );
    }
    let dir = args.out.join("simulated");
    vramlab_reports::prepare_out_dir(&dir).with_context(|| format!("cannot write into {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding this program to run it under callgrind")?;
    // Started through a link of one name, whatever this build's folder (see `link_program`).
    let exe = callgrind::link_program(&dir, &exe)
        .with_context(|| format!("linking this program into {} to run it under callgrind", dir.display()))?;
    // The timed run's autotuner choices, for the simulated processes to count
    // what benchmark mode chose there (tuning again under the simulator would
    // time every candidate at its speed, and choose by its clock).
    let choices = dir.join(TUNED_CHOICES);
    vramlab_engine::autotune::global()
        .export(&FileTuningStore::new(&choices))
        .with_context(|| format!("writing the timed run's autotuner choices to {}", choices.display()))?;
    let started = Instant::now();
    let queue = Mutex::new(suites.iter().collect::<VecDeque<_>>());
    let at_once = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, suites.len().max(1));
    let counted: Vec<Result<Vec<Figures>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..at_once)
            .map(|_| {
                scope.spawn(|| {
                    let mut figures = Vec::new();
                    loop {
                        // The lock is let go before the suite runs (a `while let` would hold it).
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                        let Some(suite) = next else { break };
                        figures.extend(run_suite(args, &exe, suite, &dir.join(suite), &choices)?);
                    }
                    Ok(figures)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a simulated run's thread panicked"))))
            .collect()
    });
    let mut figures = Vec::new();
    for c in counted {
        figures.extend(c?);
    }
    Ok(Pass { figures, seconds: started.elapsed().as_secs_f64(), dir })
}

/// One case's figures: suite, case name, parameters and what was counted.
type Figures = (String, String, BTreeMap<String, serde_json::Value>, SimulatedCpu);

/// One suite's simulated process, under callgrind, its dumps, log and results
/// in `dir`; each case's figures.
fn run_suite(args: &BenchArgs, exe: &Path, suite: &str, dir: &Path, choices: &Path) -> Result<Vec<Figures>> {
    vramlab_reports::prepare_out_dir(dir).with_context(|| format!("cannot write into {}", dir.display()))?;
    callgrind::clear_dumps(dir)?;
    let log_path = dir.join("simulated.log");
    let log = vramlab_reports::create_log(dir, "simulated.log")?;
    // Run in `dir`, every path relative to it, with a fixed environment: the
    // same arguments and environment, byte for byte, whatever `--out` and the
    // caller's shell (see `relative_to` and `PASSED_ENV`).
    let valgrind = on_path("valgrind").context("valgrind is no longer on the PATH")?;
    let mut cmd = Command::new(valgrind);
    cmd.current_dir(dir).env_clear().env(MALLOC_TUNABLES.0, MALLOC_TUNABLES.1);
    for var in PASSED_ENV {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    let here = Path::new(".");
    cmd.args(valgrind_args()).arg(relative_to(dir, exe)).args(process_args(
        args,
        &[suite.to_owned()],
        here,
        &relative_to(dir, choices),
    ));
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    let status = cmd.status().context("starting valgrind")?;
    if !status.success() {
        bail!("the simulated run of {suite} failed ({status}); its log is {}", log_path.display());
    }
    let simulated = vramlab_reports::check::load_results(&dir.join(vramlab_reports::RESULTS_JSON), "simulated run")?;
    let mut figures = Vec::new();
    for suite in &simulated.suites {
        for case in suite.cases.iter().filter(|c| c.outcome.is_ok()) {
            let Some(process) = case.simulated.as_ref() else { continue };
            let Some(regions) = process.regions else { continue };
            let mut counted = callgrind::read_case(dir, regions, &log_path)?;
            counted.timed_choice = process.timed_choice.clone();
            figures.push((suite.name.clone(), case.name.clone(), case.params.clone(), counted));
        }
    }
    Ok(figures)
}

/// The simulated process's command line: `suites`, the same seed, capacity
/// and kind of run, on the CPU, the timed run's autotuner `choices`, its
/// results into `dir`.
fn process_args(args: &BenchArgs, suites: &[String], dir: &Path, choices: &Path) -> Vec<String> {
    let mut out = vec!["bench".to_owned(), "--simulated-process".to_owned(), "--device".to_owned(), "cpu".to_owned()];
    if args.quick {
        out.push("--quick".into());
    }
    for s in suites {
        out.extend(["--suite".to_owned(), s.clone()]);
    }
    out.extend(["--seed".to_owned(), args.seed.to_string()]);
    out.extend(["--capacity".to_owned(), args.capacity.bytes.to_string()]);
    // The run's own --samples, though a simulated case counts one call: a suite
    // may name its cases by it (amp's steps), and the figures go to the case of
    // the same name and parameters.
    if let Some(n) = args.samples {
        out.extend(["--samples".to_owned(), n.to_string()]);
    }
    out.extend(["--tuned-choices".to_owned(), choices.display().to_string()]);
    out.extend(["--out".to_owned(), dir.display().to_string()]);
    out
}

/// The simulated process itself (`bench --simulated-process`): every case's
/// work once in the harness's measured region, on one thread — a rayon pool
/// of one, so the kernels' parallel loops run on the thread that entered the
/// region, whose counting callgrind toggles — then its results, with each
/// case's regions, into `out`.
pub fn process(
    suites: &[Box<dyn Suite>],
    mut ctx: Context,
    mut results: RunResults,
    out: &Path,
    tuned_choices: Option<&Path>,
) -> Result<u8> {
    ctx.harness.simulated = true;
    if let Some(path) = tuned_choices {
        vramlab_engine::autotune::global()
            .preload(&FileTuningStore::new(path))
            .with_context(|| format!("reading the timed run's autotuner choices from {}", path.display()))?;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().context("a rayon pool of one thread")?;
    pool.install(|| {
        for suite in suites {
            results.suites.push(vramlab_suites::run_suite(suite.as_ref(), &ctx, &NoProgress));
        }
    });
    vramlab_reports::write_results_json(out, &results)?;
    Ok(0)
}
