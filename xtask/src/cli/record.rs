//! `record`'s flags and help text.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use vramlab_engine::alloc::AllocatorConfig;

pub const ABOUT: &str = "Run a PyTorch program with its CUDA memory recorded, then replay every snapshot and report";

pub const LONG_ABOUT: &str = "\
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
per snapshot. Beside each snapshot the hook writes torch.cuda.memory_stats() read at the same
moment (NAME.stats.json); the replay is checked against it key by key.

--save-baseline NAME keeps the run's memory figures; --baseline NAME gates this run on them,
exactly, per rank and device, as `vramlab check --baseline A --from B` does for snapshots.";

pub const AFTER_HELP: &str = "\
Examples:
  vramlab record -- python train.py --batch 64
  vramlab record --out runs/oom --alloc-conf expandable_segments:True \\
      -- torchrun --nproc-per-node 2 train.py
  vramlab record --max-entries 100000 --stacks all -- ./launch.sh
  vramlab record --save-baseline main -- python train.py      on the main branch: the baseline
  vramlab record --baseline main -- python train.py           on a pull request: the gate

Exit status: the program's (128 + N when a signal N ended it, as a shell reports it); 127 when
CMD cannot be found, 126 when it cannot be run; 1 when DIR cannot be written. With --baseline and
a program that succeeded, the gate's: 0 no regression, 1 a regression, 2 no comparison possible
(regressions.md goes into DIR; GitHub annotations under GitHub Actions).";

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

    /// Save the memory figures of the snapshots written (per rank and device: peaks, reserved at the
    /// end, cudaMalloc calls, retries, OOMs, fragmentation, call paths at the peak) as memory
    /// baseline NAME in --baseline-dir
    #[arg(long, value_name = "NAME", value_parser = super::check::parse_baseline_name, conflicts_with = "baseline")]
    pub save_baseline: Option<String>,

    /// Gate the snapshots written against memory baseline NAME (saved with --save-baseline), or a
    /// baseline FILE, snapshot or record folder: exit 1 on a regression, 2 when they cannot be compared
    #[arg(long, value_name = "NAME|PATH")]
    pub baseline: Option<String>,

    /// Where named baselines are stored
    #[arg(long, value_name = "DIR", default_value = super::check::DEFAULT_BASELINE_DIR)]
    pub baseline_dir: PathBuf,

    /// The gate's thresholds [default: vramlab.toml in the current folder, if there is one]
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub config: Option<PathBuf>,

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
