//! `replay`'s flags and help text, and the `--capacity` parser `whatif` shares.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_replay::{MAX_BYTES, OnOom};

use crate::size::{self, ACCEPTED_FORMS, Size};

pub const ABOUT: &str = "Replay an allocation trace through the caching allocator on a simulated device";

pub const LONG_ABOUT: &str = "\
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
recognised by their content: one device's trace is replayed (--device, --from-us/--to-us; the
entries before --from-us are dropped as the file is read, for less memory and time on large
files), with the memory live before the recording placed first; under the snapshot's own allocator settings
the replay is checked against the recorded segments (the fidelity check).";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask replay run.jsonl
  cargo xtask replay run.jsonl --capacity 24GiB --on-oom continue
  cargo xtask replay run.jsonl --alloc-conf expandable_segments:True --json > replay.json
  zcat run.jsonl.gz | cargo xtask replay -
  cargo xtask replay snapshot.pickle --device 1
  cargo xtask replay snapshot.pickle --alloc-conf expandable_segments:True \\
      --export-snapshot replayed.pickle --chrome-trace replayed.json
  cargo xtask replay run.jsonl --capacity 24GiB --report target/replay
                                              then open target/replay/index.html

Exit status: 0 when the trace replayed (out-of-memory events are results, not failures);
1 when the trace is malformed or unreadable (the message names the line); 2 for usage errors
and when the --report folder cannot be written.";

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

    #[command(flatten)]
    pub window: SnapshotWindow,

    /// PyTorch snapshots: torch.cuda.set_per_process_memory_fraction(F) on the simulated
    /// device: the replay may reserve F x --capacity (or F x the capacity the recorded OOMs imply)
    #[arg(long, value_name = "F")]
    pub fraction: Option<f64>,

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

/// Which part of a PyTorch snapshot to replay: the device and the time
/// window (`replay` and `whatif` take the same three flags).
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct SnapshotWindow {
    /// PyTorch snapshots: the device whose trace to replay [default: the one with the most entries]
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,

    /// PyTorch snapshots: keep only entries at or after this time_us. The
    /// state at the window's start is rewound from the final segments, and
    /// blocks allocated before it are attributed by the final segments'
    /// frames only
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub from_us: Option<i64>,

    /// PyTorch snapshots: keep only entries at or before this time_us
    #[arg(long, value_name = "US", allow_hyphen_values = true)]
    pub to_us: Option<i64>,
}

impl ReplayArgs {
    /// `--capacity` in bytes (rounded down to whole bytes).
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.capacity.as_ref().map(|s| s.bytes)
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

/// A `--capacity` SIZE: at most what can be simulated.
pub fn parse_capacity(s: &str) -> Result<Size, String> {
    let size = size::parse_size(s).map_err(|e| e.to_string())?;
    if size.bytes > MAX_BYTES {
        return Err(format!("'{s}' is more than can be simulated: at most 1024TiB; expected {ACCEPTED_FORMS}"));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_limits() {
        assert_eq!(parse_capacity("1024TiB").map(|s| s.bytes), Ok(MAX_BYTES));
        assert_eq!(parse_capacity("4.8GiB").map(|s| s.bytes), Ok(5_153_960_755));
        assert!(parse_capacity("1025TiB").unwrap_err().contains("at most 1024TiB"));
        assert!(parse_capacity("4GB").unwrap_err().contains("write GiB"));
    }
}
