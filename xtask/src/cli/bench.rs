//! `bench`'s flags and help text.

use std::path::PathBuf;

use clap::Args;

use super::check::{CheckOptions, DEFAULT_BASELINE_DIR, parse_baseline_name};
use crate::size::{self, Size};

pub const ABOUT: &str = "Run the bench suites (the GPU guides' claims, measured) and write the results";

pub const LONG_ABOUT: &str = "\
Run the bench suites on the best device present (a CUDA GPU, else the CPU) or the one named:
each suite measures one claim of the PyTorch GPU guides and profiles memory while doing it.
Results are written suite by suite, atomically, to --out: results.json (versioned, with the
environment) and one CSV per suite; at the end the report (index.html, summary.md, charts,
trace.json) goes to --out/report. A case that fails, panics or overruns its time budget is
recorded as failed and the run goes on.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask bench                              every suite, full run (under 15 minutes)
  cargo xtask bench --quick                      every suite in under 2 minutes
  cargo xtask bench --suite memory --suite amp   two suites
  cargo xtask bench --device cpu --capacity 8GiB --out results/
  cargo xtask bench --suite memory --export-snapshot snapshots/ --export-case train_step_peak
                                                 the case's memory as a PyTorch snapshot pickle

  cargo xtask bench --quick --repeat 5 --save-baseline main   five runs as the baseline `main`
  cargo xtask bench --quick --save-baseline main --append     add this run to it (same commit)
  cargo xtask bench --quick --repeat 3 --baseline main        three runs, then compare with it
                                                              (see `cargo xtask check`)
  cargo xtask bench --quick --device cpu --simulate           also count each CPU case under
                                                              callgrind (gated in place of time)

Every run is also appended to DIR/history.sqlite (see `cargo xtask history`).

Exit status: 0 when the suites ran (failed cases are results) and, with --baseline, nothing
regressed; 1 when a suite name, device or output folder is unusable, or a regression was
found; 2 for usage errors, or when the comparison could not be made (missing, corrupt or
incompatible baseline).";

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A suite to run (repeatable) [default: all]; names: devices, cpu-vs-gpu, amp, autotune,
    /// memory, transfer, input-pipeline, async, allocator
    #[arg(long = "suite", value_name = "NAME")]
    pub suites: Vec<String>,

    /// The device: auto (a CUDA GPU when one is usable, else cpu), cpu, cuda or cuda:N
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: String,

    /// Fewer sizes and samples: the whole run in under 2 minutes
    #[arg(long)]
    pub quick: bool,

    /// Where results go
    #[arg(long, value_name = "DIR", default_value = "target/vramlab")]
    pub out: PathBuf,

    /// Timed samples per case [default: adaptive, at least 10]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: Option<u32>,

    /// Seed for every random input
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,

    /// Memory of the CPU device the memory suite runs out of, e.g. 4GiB
    #[arg(long, value_name = "SIZE", value_parser = parse_bench_capacity, default_value = "4GiB")]
    pub capacity: Size,

    /// Run the suites N times in a row (each run goes into the history; all N into runs.json):
    /// a baseline of several runs, or this build's side of the check
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,

    /// Also store the results (raw samples included) as baseline NAME (DIR/NAME.json): this
    /// invocation's runs, replacing what was there (see --append)
    #[arg(long, value_name = "NAME", value_parser = parse_baseline_name)]
    pub save_baseline: Option<String>,

    /// With --save-baseline: add this invocation's runs to the baseline's (same commit and machine)
    #[arg(long, requires = "save_baseline")]
    pub append: bool,

    /// After the run, compare it with baseline NAME (in --baseline-dir) or FILE; exit 1 on a regression
    #[arg(long, value_name = "NAME|FILE")]
    pub baseline: Option<String>,

    /// Where named baselines are stored
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BASELINE_DIR)]
    pub baseline_dir: PathBuf,

    /// Write each profiled case's memory recording as a PyTorch memory snapshot,
    /// DIR/<suite>-<case>.pickle (for pytorch.org/memory_viz or `cargo xtask replay`)
    #[arg(long, value_name = "DIR")]
    pub export_snapshot: Option<PathBuf>,

    /// With --export-snapshot: only this case (repeatable; its name, or SUITE/CASE)
    #[arg(long = "export-case", value_name = "NAME", requires = "export_snapshot")]
    pub export_cases: Vec<String>,

    /// Also count each CPU case's measured work under valgrind's callgrind (instructions and an
    /// estimated cycle count, deterministic: gated to a tolerance in place of time); needs valgrind
    #[arg(long)]
    pub simulate: bool,

    /// Internal: this process is the one `--simulate` runs under callgrind
    #[arg(long, hide = true)]
    pub simulated_process: bool,

    /// Internal, with --simulated-process: the timed run's autotuner choices, preloaded, so that
    /// benchmark mode counts the algorithm the timed run chose rather than tuning again
    #[arg(long, hide = true, value_name = "FILE", requires = "simulated_process")]
    pub tuned_choices: Option<PathBuf>,

    #[command(flatten)]
    pub check: CheckOptions,
}

fn parse_bench_capacity(s: &str) -> Result<Size, String> {
    let size = size::parse_size(s).map_err(|e| e.to_string())?;
    if size.bytes < 64 << 20 {
        return Err(format!("'{s}' is too small for the memory suite: at least 64MiB"));
    }
    Ok(size)
}
