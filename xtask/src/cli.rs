//! The command line's shape: clap's derive definitions and the help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_replay::{MAX_BYTES, OnOom};

use crate::size::{self, ACCEPTED_FORMS, Size};

const ABOUT: &str = "vramlab: measure what GPU performance guides claim, on your own hardware, and profile GPU memory";

const LONG_ABOUT: &str = "\
vramlab measures what every PyTorch GPU guide claims (pinned memory, mixed precision,
autotuning, the caching allocator, when the GPU starts to win) on your own hardware, and
profiles GPU memory while doing it: where memory goes, what the peak is and why.

Its allocator is a faithful model of PyTorch's CUDA caching allocator, so its numbers read
like torch.cuda.memory_stats().";

const AFTER_HELP: &str = "\
Examples:
  cargo xtask bench --quick                          every suite, quickly, on the best device here
  cargo xtask replay trace.jsonl --capacity 24GiB    would this run fit on a 24 GiB card?
  vramlab record -- python train.py                  record a PyTorch script's memory, OOMs included, and report
  cargo xtask gpu-check --bundle-only                build the GPU test bundle to run on a GPU machine
  cargo xtask check --baseline main                  did memory or speed regress since baseline `main`?
  cargo xtask history --metric '*peak_reserved*'     trends over stored runs, with change points
  cargo xtask diff before.pickle after.pickle         what changed between two PyTorch memory snapshots";

const BENCH_ABOUT: &str = "Run the bench suites (the GPU guides' claims, measured) and write the results";

const BENCH_LONG_ABOUT: &str = "\
Run the bench suites on the best device present (a CUDA GPU, else the CPU) or the one named:
each suite measures one claim of the PyTorch GPU guides and profiles memory while doing it.
Results are written suite by suite, atomically, to --out: results.json (versioned, with the
environment) and one CSV per suite; at the end the report (index.html, summary.md, charts,
trace.json) goes to --out/report. A case that fails, panics or overruns its time budget is
recorded as failed and the run goes on.";

const BENCH_AFTER_HELP: &str = "\
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

Every run is also appended to DIR/history.sqlite (see `cargo xtask history`).

Exit status: 0 when the suites ran (failed cases are results) and, with --baseline, nothing
regressed; 1 when a suite name, device or output folder is unusable, or a regression was
found; 2 for usage errors, or when the comparison could not be made (missing, corrupt or
incompatible baseline).";

const REPLAY_ABOUT: &str = "Replay an allocation trace through the caching allocator on a simulated device";

const REPLAY_LONG_ABOUT: &str = "\
Replay an allocation trace through vramlab's model of PyTorch's CUDA caching allocator on a
simulated device (addresses only, no memory behind them: a trace from an 80 GiB GPU replays
on a laptop), and report what torch.cuda.memory_stats() and memory_summary() would say at the
end, the peaks, and every out-of-memory on the way. Change --capacity and --alloc-conf to ask
what-if questions: would this run fit in 24 GiB? does expandable_segments:True avoid the
fragmentation?

Trace format (version 1): JSON Lines, one op per line; blank lines are skipped.
  {\"op\":\"alloc\",\"id\":7,\"size\":1048576,\"stream\":0,\"tag\":\"activation\"}
  {\"op\":\"free\",\"id\":7}
  {\"op\":\"empty_cache\"}
  {\"op\":\"reset_peak\"}
id: any integer, unique among live allocations. size: bytes. stream (default 0) and tag are
optional; tags: parameter, gradient, activation, optimizer_state, input, temporary, workspace.

PyTorch memory snapshots (torch.cuda.memory._dump_snapshot(), pickle protocols 2 to 5) are
recognised by their content: one device's trace is replayed (--device, --from-us/--to-us), with
the memory live before the recording placed first; under the snapshot's own allocator settings
the replay is checked against the recorded segments (the fidelity check).";

const REPLAY_AFTER_HELP: &str = "\
Examples:
  cargo xtask replay run.jsonl
  cargo xtask replay run.jsonl --capacity 24GiB --on-oom continue
  cargo xtask replay run.jsonl --alloc-conf expandable_segments:True --json > replay.json
  zcat run.jsonl.gz | cargo xtask replay -
  cargo xtask replay snapshot.pickle --device 1
  cargo xtask replay snapshot.pickle --alloc-conf expandable_segments:True \
      --export-snapshot replayed.pickle --chrome-trace replayed.json
  cargo xtask replay run.jsonl --capacity 24GiB --report target/replay   then open target/replay/index.html

Exit status: 0 when the trace replayed (out-of-memory events are results, not failures);
1 when the trace is malformed or unreadable (the message names the line); 2 for usage errors
and when the --report folder cannot be written.";

const WHATIF_ABOUT: &str =
    "Replay a PyTorch memory snapshot under other allocator settings: would it fit, and with which?";

const WHATIF_LONG_ABOUT: &str = "\
Replay the requests of a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), any pickle
protocol) under other allocator settings and device capacities, offline, from the file: for
each setting the peak reserved and allocated memory, the fragmentation at the reserved peak
(reserved - allocated, and the largest free block), the segment allocations (cudaMalloc calls,
each a device synchronisation) and whether and where it runs out of memory. --sweep tries a grid
of PYTORCH_CUDA_ALLOC_CONF settings (expandable_segments, max_split_size_mb,
roundup_power2_divisions) in parallel and recommends the one with the lowest peak reserved
memory that fits in --capacity (ties: fewer cudaMalloc calls). The allocations live at the
allocated peak (and at the recorded settings' first out-of-memory) are grouped by the call path of
the user's own code (frames inside torch, packages, the standard library and C++ folded), largest first.";

const WHATIF_AFTER_HELP: &str = "\
Examples:
  cargo xtask whatif snapshot.pickle --capacity 24GiB --sweep
  cargo xtask whatif snapshot.pickle --alloc-conf expandable_segments:True --json
  cargo xtask whatif snapshot.pickle --capacity 24GiB --sweep --report target/whatif
  cargo xtask whatif out/*-rank*.pickle --sweep

Exit status: 0 when the snapshot replayed (out-of-memory is a result); 1 when the file is not a
readable snapshot; 2 for usage errors and when the --report folder cannot be written.";

const GPU_CHECK_ABOUT: &str = "Build the GPU test bundle (tests + GPU figures, no Rust needed to run it) and run it";

const GPU_CHECK_LONG_ABOUT: &str = "\
Build, in release, the engine's test binaries (its CUDA tests included) and the gpu_figures
program into a self-contained bundle folder, with run.sh, PyTorch's reference figures
(torch_reference.py) and a comparison script; then run the bundle here unless --bundle-only.
The bundle needs no Rust toolchain and no network: copy the folder to a machine with an
NVIDIA GPU and run its run.sh there. run.sh runs every test binary (the CUDA tests one at a
time, with their output), measures vramlab's GPU figures and PyTorch's, writes both as JSON
and prints them side by side.";

const GPU_CHECK_AFTER_HELP: &str = "\
Examples:
  cargo xtask gpu-check                  build the bundle in target/gpu-check/bundle and run it here
  cargo xtask gpu-check --bundle-only    only build it; then, on the GPU machine:
                                         target/gpu-check/bundle/run.sh [RESULTS_DIR]

Exit status: 0 when every test passed and the GPU figures were measured; 3 when there is no
GPU here (the tests passed, the CUDA tests skipped: run the bundle on a GPU machine); 1 when
a test failed or the bundle could not be built; 2 for usage errors.";

#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
#[command(propagate_version = true, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    #[command(about = BENCH_ABOUT, long_about = BENCH_LONG_ABOUT, after_help = BENCH_AFTER_HELP)]
    Bench(BenchArgs),
    #[command(about = REPLAY_ABOUT, long_about = REPLAY_LONG_ABOUT, after_help = REPLAY_AFTER_HELP)]
    Replay(ReplayArgs),
    #[command(about = WHATIF_ABOUT, long_about = WHATIF_LONG_ABOUT, after_help = WHATIF_AFTER_HELP)]
    Whatif(WhatifArgs),
    #[command(about = GPU_CHECK_ABOUT, long_about = GPU_CHECK_LONG_ABOUT, after_help = GPU_CHECK_AFTER_HELP)]
    GpuCheck(GpuCheckArgs),
    #[command(about = crate::check_cmd::ABOUT, long_about = crate::check_cmd::LONG_ABOUT, after_help = crate::check_cmd::AFTER_HELP)]
    Check(crate::check_cmd::CheckArgs),
    #[command(about = crate::history_cmd::ABOUT, long_about = crate::history_cmd::LONG_ABOUT, after_help = crate::history_cmd::AFTER_HELP)]
    History(crate::history_cmd::HistoryArgs),
    #[command(about = REPORT_ABOUT, long_about = REPORT_LONG_ABOUT, after_help = REPORT_AFTER_HELP)]
    Report(ReportArgs),
    #[command(about = RECORD_ABOUT, long_about = RECORD_LONG_ABOUT, after_help = RECORD_AFTER_HELP)]
    Record(RecordArgs),
    #[command(about = crate::diff_cmd::ABOUT, long_about = crate::diff_cmd::LONG_ABOUT, after_help = crate::diff_cmd::AFTER_HELP)]
    Diff(crate::diff_cmd::DiffArgs),
}

const RECORD_ABOUT: &str = "Run a PyTorch program with its CUDA memory recorded, then replay every snapshot and report";

const RECORD_LONG_ABOUT: &str = "\
Run CMD (python train.py, torchrun ..., accelerate launch ..., a shell script) with a small
Python hook on its path (a sitecustomize.py in a temporary folder put first on PYTHONPATH,
which runs any sitecustomize it hides). In every Python process, when torch initialises CUDA
the hook starts torch.cuda.memory._record_memory_history(max_entries=N, stacks=...), and it
dumps the snapshot on every out-of-memory error (PyTorch's OOM observer), on an uncaught
exception and at exit, as DIR/<host>[-rank<R>]-pid<P>[-oom<N>].pickle, the rank from RANK,
LOCAL_RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK. The hook prints one line on stderr saying
where the snapshots go and never changes the program's output, behaviour or exit status.
Then vramlab replays every snapshot written, prints a summary per file on stderr (peaks,
recorded OOMs and whether expandable_segments:True or a max_split_size_mb setting would have
served the failed request, by how much) and writes DIR/report/index.html with a replay page
per snapshot.";

const RECORD_AFTER_HELP: &str = "\
Examples:
  vramlab record -- python train.py --batch 64
  vramlab record --out runs/oom --alloc-conf expandable_segments:True -- torchrun --nproc-per-node 2 train.py
  vramlab record --max-entries 100000 --stacks all -- ./launch.sh

Exit status: the program's (128 + N when a signal N ended it, as a shell reports it); 127 when
CMD cannot be found, 126 when it cannot be run; 1 when DIR cannot be written.";

const REPORT_ABOUT: &str = "Render the report (HTML, Markdown, CSV, charts, Perfetto trace) from a results file";

const REPORT_LONG_ABOUT: &str = "\
Render the report of a run from its results.json alone (it may come from another machine):
index.html (self-contained, offline: charts inline, interactive memory timelines), summary.md
(for $GITHUB_STEP_SUMMARY), one tidy CSV per suite, a PNG and an SVG per chart under charts/,
and trace.json (open it in ui.perfetto.dev). With a run history (--history), a Trends section
charts the run's headline figures over the last 20 runs, change points marked. `cargo xtask
bench` writes the same report.";

const REPORT_AFTER_HELP: &str = "\
Examples:
  cargo xtask report --from target/vramlab/results.json
  cargo xtask report --from ci/results.json --out /tmp/report
  cargo xtask report --from ci/results.json --history ci/history.sqlite   with trend charts

Exit status: 0 when the report was written; 2 when the file is not JSON, truncated, of another
schema version or partly unreadable (what could be read is still rendered); 1 when the report
cannot be written.";

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The results file (results.json of `cargo xtask bench`)
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,

    /// Where the report goes
    #[arg(long, value_name = "DIR", default_value = "target/vramlab/report")]
    pub out: PathBuf,

    /// The run history for the Trends section [default: history.sqlite beside --from, else
    /// target/vramlab/history.sqlite, when present]
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GpuCheckArgs {
    /// The bundle folder (replaced if it holds an earlier bundle) [default: target/gpu-check/bundle]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Only build the bundle; do not run it here
    #[arg(long)]
    pub bundle_only: bool,
}

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
    #[arg(long, value_name = "NAME", value_parser = crate::check_cmd::parse_baseline_name)]
    pub save_baseline: Option<String>,

    /// With --save-baseline: add this invocation's runs to the baseline's (same commit and machine)
    #[arg(long, requires = "save_baseline")]
    pub append: bool,

    /// After the run, compare it with baseline NAME (in --baseline-dir) or FILE; exit 1 on a regression
    #[arg(long, value_name = "NAME|FILE")]
    pub baseline: Option<String>,

    /// Where named baselines are stored
    #[arg(long, value_name = "DIR", default_value = crate::check_cmd::DEFAULT_BASELINE_DIR)]
    pub baseline_dir: PathBuf,

    /// Write each profiled case's memory recording as a PyTorch memory snapshot,
    /// DIR/<suite>-<case>.pickle (for pytorch.org/memory_viz or `cargo xtask replay`)
    #[arg(long, value_name = "DIR")]
    pub export_snapshot: Option<PathBuf>,

    /// With --export-snapshot: only this case (repeatable; its name, or SUITE/CASE)
    #[arg(long = "export-case", value_name = "NAME", requires = "export_snapshot")]
    pub export_cases: Vec<String>,

    #[command(flatten)]
    pub check: crate::check_cmd::CheckOptions,
}

fn parse_bench_capacity(s: &str) -> Result<Size, String> {
    let size = size::parse_size(s).map_err(|e| e.to_string())?;
    if size.bytes < 64 << 20 {
        return Err(format!("'{s}' is too small for the memory suite: at least 64MiB"));
    }
    Ok(size)
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace file, or '-' for standard input
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// More PyTorch snapshots (the ranks of a job): one report with a row per rank and
    /// device, the imbalance and the rank closest to its capacity
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,

    /// Memory of the simulated device, e.g. 24GiB, 512MiB, 1.5GiB or plain bytes (a fraction of a
    /// byte is rounded down, with a note) [default: unlimited]
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity, allow_hyphen_values = true)]
    pub capacity: Option<Size>,

    /// Allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax, e.g.
    /// 'expandable_segments:True,max_split_size_mb:128' [default: PyTorch's defaults]
    #[arg(long, value_name = "STR", value_parser = AllocatorConfig::parse)]
    pub alloc_conf: Option<AllocatorConfig>,

    /// What to do when an allocation runs out of memory
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = OnOomArg::Stop)]
    pub on_oom: OnOomArg,

    /// Print one JSON object (the flattened memory_stats, the OOMs, the peaks) instead of the report
    #[arg(long)]
    pub json: bool,

    /// PyTorch snapshots: the device whose trace to replay [default: the one with the most entries]
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,

    /// PyTorch snapshots: keep only entries at or after this time_us. The
    /// entries before it are dropped as the file is read (less memory and
    /// time on large files); the state at the window's start is rewound from
    /// the final segments, and blocks allocated before it are attributed by
    /// the final segments' frames only
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub from_us: Option<i64>,

    /// PyTorch snapshots: keep only entries at or before this time_us
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub to_us: Option<i64>,

    /// PyTorch snapshots: write the replay as a snapshot pickle (for pytorch.org/memory_viz)
    #[arg(long, value_name = "OUT")]
    pub export_snapshot: Option<PathBuf>,

    /// PyTorch snapshots: write the replay as a Chrome/Perfetto trace (JSON)
    #[arg(long, value_name = "OUT")]
    pub chrome_trace: Option<PathBuf>,

    /// Also write an offline HTML page into DIR: the memory timeline with its peak,
    /// the segments at the reserved peak, each out-of-memory's fragmentation
    /// figures; charts as PNG and SVG, and trace.json for Perfetto
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// The PyTorch memory snapshot (a pickle from torch.cuda.memory._dump_snapshot())
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// More PyTorch snapshots (the ranks of a job): each rank and device under each setting,
    /// the recommendation per rank and the rank closest to its capacity
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,

    /// Memory of the simulated device, e.g. 24GiB [default: unlimited, or for a snapshot with
    /// recorded OOMs the capacity they imply]
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity, allow_hyphen_values = true)]
    pub capacity: Option<Size>,

    /// torch.cuda.set_per_process_memory_fraction(F) on the simulated device: every setting may
    /// reserve F x --capacity; garbage_collection_threshold acts only under a fraction below 1
    #[arg(long, value_name = "F")]
    pub fraction: Option<f64>,

    /// Try a grid of allocator settings and recommend the best that fits
    #[arg(long)]
    pub sweep: bool,

    /// A setting to try besides the recorded one, in PYTORCH_CUDA_ALLOC_CONF syntax (repeatable)
    #[arg(long, value_name = "STR", value_parser = AllocatorConfig::parse)]
    pub alloc_conf: Vec<AllocatorConfig>,

    /// The device whose trace to replay [default: the one with the most entries]
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,

    /// Keep only entries at or after this time_us
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub from_us: Option<i64>,

    /// Keep only entries at or before this time_us
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub to_us: Option<i64>,

    /// Rows of the "who holds memory at the peak" table
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Print one JSON object instead of the tables
    #[arg(long)]
    pub json: bool,

    /// Also write an offline HTML page into DIR: the memory under each setting, the
    /// table of figures and the recommendation; charts as PNG and SVG, and trace.json
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Where the snapshots and the report go
    #[arg(long, value_name = "DIR", default_value = "vramlab-record")]
    pub out: PathBuf,

    /// Trace entries PyTorch keeps (a ring buffer: older entries are dropped)
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_entries: u64,

    /// Which stacks PyTorch records with each allocation
    #[arg(long, value_name = "WHICH", value_enum, default_value_t = StacksArg::Python)]
    pub stacks: StacksArg,

    /// PYTORCH_CUDA_ALLOC_CONF for the program (checked before it runs)
    #[arg(long, value_name = "STR", value_parser = check_alloc_conf)]
    pub alloc_conf: Option<String>,

    /// The command and its arguments, after `--`
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<String>,
}

fn check_alloc_conf(s: &str) -> Result<String, String> {
    AllocatorConfig::parse(s).map(|_| s.to_owned()).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StacksArg {
    /// Python frames only
    Python,
    /// Python and C++ frames (slower to record)
    All,
}

impl StacksArg {
    pub fn as_str(self) -> &'static str {
        match self {
            StacksArg::Python => "python",
            StacksArg::All => "all",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOomArg {
    /// End the replay at the first out-of-memory, as an uncaught PyTorch OOM would
    Stop,
    /// Record it and go on; later frees of the failed allocation are ignored
    Continue,
}

impl From<OnOomArg> for OnOom {
    fn from(arg: OnOomArg) -> OnOom {
        match arg {
            OnOomArg::Stop => OnOom::Stop,
            OnOomArg::Continue => OnOom::Continue,
        }
    }
}

fn parse_capacity(s: &str) -> Result<Size, String> {
    let size = size::parse_size(s).map_err(|e| e.to_string())?;
    if size.bytes > MAX_BYTES {
        return Err(format!("'{s}' is more than can be simulated: at most 1024TiB; expected {ACCEPTED_FORMS}"));
    }
    Ok(size)
}

impl ReplayArgs {
    /// `--capacity` in bytes (rounded down to whole bytes).
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.capacity.as_ref().map(|s| s.bytes)
    }
}

impl WhatifArgs {
    /// `--capacity` in bytes (rounded down to whole bytes).
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.capacity.as_ref().map(|s| s.bytes)
    }
}

impl Command {
    /// The notes for sizes given as fractions of a byte (`--capacity 4.8GiB`),
    /// which were rounded down: printed on stderr before the command runs.
    pub fn size_notes(&self) -> Vec<String> {
        let capacity = match self {
            Command::Bench(a) => Some(&a.capacity),
            Command::Replay(a) => a.capacity.as_ref(),
            Command::Whatif(a) => a.capacity.as_ref(),
            _ => None,
        };
        capacity.and_then(|s| s.rounding_note("--capacity")).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn capacity_limits() {
        assert_eq!(parse_capacity("1024TiB").map(|s| s.bytes), Ok(MAX_BYTES));
        assert_eq!(parse_capacity("4.8GiB").map(|s| s.bytes), Ok(5_153_960_755));
        assert!(parse_capacity("1025TiB").unwrap_err().contains("at most 1024TiB"));
        assert!(parse_capacity("4GB").unwrap_err().contains("write GiB"));
    }
}
