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
per snapshot.";

pub const AFTER_HELP: &str = "\
Examples:
  vramlab record -- python train.py --batch 64
  vramlab record --out runs/oom --alloc-conf expandable_segments:True \\
      -- torchrun --nproc-per-node 2 train.py
  vramlab record --max-entries 100000 --stacks all -- ./launch.sh

Exit status: the program's (128 + N when a signal N ended it, as a shell reports it); 127 when
CMD cannot be found, 126 when it cannot be run; 1 when DIR cannot be written.";

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
