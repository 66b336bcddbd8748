//! `history`'s flags and help text.

use std::path::PathBuf;

use clap::Args;

pub const ABOUT: &str = "Trends of a figure over the stored runs, with change points";

pub const LONG_ABOUT: &str = "\
Every `cargo xtask bench` run is appended to target/vramlab/history.sqlite (an embedded SQLite
database, no server), keyed by commit, time and machine. This prints the trend of the figures
whose names match --metric over the last N runs, marking each change point: where the level
stepped (binary segmentation on the mean; a step must beat a BIC penalty scaled by the
series' own run-to-run noise, so exact memory figures change wherever they change). Without
--metric it lists every figure that stepped within the last N runs.

Figure names read `suite/case {params} (device) metric`, where metric is `time` (median ns
per iteration), a memory figure (`segment_bytes`, `memory.peak_reserved_bytes`, …) or
another metric of the case.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask history                                        every figure that stepped lately
  cargo xtask history --metric '*peak_reserved*' --last 50
  cargo xtask history --metric 'allocator/cached/64MiB*time'
  cargo xtask history --import ci-artifacts/results.json    append a run from elsewhere
  cargo xtask history --noise                               each time's noise floor (A/A runs)

Exit status: 0; 1 when the database is missing, corrupt or of a newer schema (it is never
overwritten) or an imported file is not results; 2 for usage errors.";

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Figures whose names match this pattern (`*` and `?`, case-insensitive) [default: those that stepped]
    #[arg(long, value_name = "PATTERN")]
    pub metric: Option<String>,

    /// How many of the latest runs to show
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub last: u32,

    /// The history database
    #[arg(long, value_name = "FILE", default_value = "target/vramlab/history.sqlite")]
    pub db: PathBuf,

    /// Append these results files to the history (repeatable), then stop
    #[arg(long, value_name = "FILE")]
    pub import: Vec<PathBuf>,

    /// Print the series as JSON
    #[arg(long)]
    pub json: bool,

    /// Instead of trends: each time's noise floor, learned from runs of one build (same commit,
    /// machine and kind) — the change two such runs exceed 5 % of the time
    #[arg(long)]
    pub noise: bool,
}
