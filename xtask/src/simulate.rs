//! `bench --simulate`: the suites run once more, under valgrind's callgrind,
//! and each CPU case's measured work is counted (instructions, cache events,
//! an estimated cycle count) — a figure that does not move with the machine's
//! load, so it gates a change of a few percent where a shared runner's wall
//! time cannot.
//!
//! This process starts the simulated one (this binary, `bench
//! --simulated-process`) under callgrind, instrumenting nothing until asked;
//! the simulated process runs every case's work once more after a warm-up
//! call, on one thread, inside the harness's measured region — instrumented,
//! its counts zeroed before and dumped after, one profile per call (see
//! `vramlab_suites::valgrind`) — and records which regions were each case's; this process then reads the dumps and puts each case's
//! figures into the run's results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use vramlab_reports::callgrind;
use vramlab_suites::{Context, NoProgress, RunResults, SimulatedCpu, Suite};

use crate::cli::BenchArgs;

/// A simulated pass: each case's figures, and what it took.
#[derive(Debug)]
pub struct Pass {
    /// Suite, case name, parameters and the case's figures.
    figures: Vec<(String, String, BTreeMap<String, serde_json::Value>, SimulatedCpu)>,
    pub seconds: f64,
    /// Where the dumps and the simulated process's log are.
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

/// valgrind's options: callgrind, the cache model on, instrumenting only
/// where the process asks (`--instr-atstart=no`: each measured call, which
/// the process zeroes before and dumps after, one profile per call).
fn valgrind_args(dir: &Path) -> Vec<String> {
    vec![
        "--tool=callgrind".into(),
        "--cache-sim=yes".into(),
        "--instr-atstart=no".into(),
        format!("--callgrind-out-file={}", dir.join(callgrind::DUMP_STEM).display()),
    ]
}

/// Runs the simulated pass of `suites` with `args`'s settings on `device` (the run's).
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
    if !version.is_ok_and(|o| o.status.success()) {
        bail!(
            "--simulate runs the suites under valgrind's callgrind, and valgrind was not found on the PATH: install it (Debian and Ubuntu: apt-get install valgrind)"
        );
    }
    let dir = args.out.join("simulated");
    vramlab_reports::prepare_out_dir(&dir).with_context(|| format!("cannot write into {}", dir.display()))?;
    callgrind::clear_dumps(&dir)?;
    let log_path = dir.join("simulated.log");
    let log = vramlab_reports::create_log(&dir, "simulated.log")?;
    let exe = std::env::current_exe().context("finding this program to run it under callgrind")?;
    let mut cmd = Command::new("valgrind");
    cmd.args(valgrind_args(&dir)).arg(&exe).args(process_args(args, suites, &dir));
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    let started = Instant::now();
    let status = cmd.status().context("starting valgrind")?;
    if !status.success() {
        bail!("the simulated run failed ({status}); its log is {}", log_path.display());
    }
    let simulated = vramlab_reports::check::load_results(&dir.join(vramlab_reports::RESULTS_JSON), "simulated run")?;
    let mut figures = Vec::new();
    for suite in &simulated.suites {
        for case in suite.cases.iter().filter(|c| c.outcome.is_ok()) {
            let Some(regions) = case.simulated.as_ref().and_then(|s| s.regions) else { continue };
            let counted = callgrind::read_case(&dir, regions, &log_path)?;
            figures.push((suite.name.clone(), case.name.clone(), case.params.clone(), counted));
        }
    }
    Ok(Pass { figures, seconds: started.elapsed().as_secs_f64(), dir })
}

/// The simulated process's command line: `suites`, the same seed, capacity
/// and kind of run, on the CPU, its results into `dir`.
fn process_args(args: &BenchArgs, suites: &[String], dir: &Path) -> Vec<String> {
    let mut out = vec!["bench".to_owned(), "--simulated-process".to_owned(), "--device".to_owned(), "cpu".to_owned()];
    if args.quick {
        out.push("--quick".into());
    }
    for s in suites {
        out.extend(["--suite".to_owned(), s.clone()]);
    }
    out.extend(["--seed".to_owned(), args.seed.to_string()]);
    out.extend(["--capacity".to_owned(), args.capacity.bytes.to_string()]);
    out.extend(["--samples".to_owned(), "1".to_owned(), "--out".to_owned(), dir.display().to_string()]);
    out
}

/// The simulated process itself (`bench --simulated-process`): every case's
/// work once in the harness's measured region, on one thread — a rayon pool
/// of one, so the kernels' parallel loops run on the thread that entered the
/// region, whose counting callgrind toggles — then its results, with each
/// case's regions, into `out`.
pub fn process(suites: &[Box<dyn Suite>], mut ctx: Context, mut results: RunResults, out: &Path) -> Result<u8> {
    ctx.harness.simulated = true;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().context("a rayon pool of one thread")?;
    pool.install(|| {
        for suite in suites {
            results.suites.push(vramlab_suites::run_suite(suite.as_ref(), &ctx, &NoProgress));
        }
    });
    vramlab_reports::write_results_json(out, &results)?;
    Ok(0)
}
