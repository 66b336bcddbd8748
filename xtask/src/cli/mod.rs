//! The command line's shape: clap's derive definitions and the help text,
//! one file per command's flags (`bench.rs`, `check.rs` with `check --ab`'s,
//! `diff.rs`, `estimate.rs`, `gpu_check.rs`, `history.rs`, `record.rs`, `replay.rs` with the
//! `--capacity` parser `whatif` shares, `report.rs`, `whatif.rs`). The command
//! files import their flags from here; nothing here imports a command.

mod bench;
mod check;
mod diff;
mod estimate;
mod gpu_check;
mod history;
mod record;
mod replay;
mod report;
mod whatif;

use clap::{Parser, Subcommand};

use crate::output::WIDTH;

pub use bench::BenchArgs;
pub use check::{AbOptions, CheckArgs, CheckOptions, DEFAULT_AB_DIR, ExportFormat};
pub use diff::DiffArgs;
pub use estimate::{EstimateArgs, Search};
pub use gpu_check::GpuCheckArgs;
pub use history::HistoryArgs;
pub use record::RecordArgs;
pub use replay::{ReplayArgs, SnapshotWindow};
pub use report::ReportArgs;
pub use whatif::WhatifArgs;

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
  vramlab record -- python train.py                  record a PyTorch script's memory, OOMs
                                                     included, and report
  cargo xtask gpu-check --bundle-only                build the GPU test bundle to run on a GPU
                                                     machine
  cargo xtask check --baseline main                  did memory or speed regress since
                                                     baseline `main`?
  cargo xtask history --metric '*peak_reserved*'     trends over stored runs, with change points
  cargo xtask diff before.pickle after.pickle        what changed between two PyTorch memory
                                                     snapshots
  vramlab estimate -- python train.py                a PyTorch script's peak and OOM point,
                                                     estimated with no GPU";

#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
#[command(propagate_version = true, arg_required_else_help = true, max_term_width = WIDTH)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    #[command(about = bench::ABOUT, long_about = bench::LONG_ABOUT, after_help = bench::AFTER_HELP)]
    Bench(BenchArgs),
    #[command(about = replay::ABOUT, long_about = replay::LONG_ABOUT, after_help = replay::AFTER_HELP)]
    Replay(ReplayArgs),
    #[command(about = whatif::ABOUT, long_about = whatif::LONG_ABOUT, after_help = whatif::AFTER_HELP)]
    Whatif(WhatifArgs),
    #[command(about = gpu_check::ABOUT, long_about = gpu_check::LONG_ABOUT, after_help = gpu_check::AFTER_HELP)]
    GpuCheck(GpuCheckArgs),
    #[command(about = check::ABOUT, long_about = check::LONG_ABOUT, after_help = check::AFTER_HELP)]
    Check(CheckArgs),
    #[command(about = history::ABOUT, long_about = history::LONG_ABOUT, after_help = history::AFTER_HELP)]
    History(HistoryArgs),
    #[command(about = report::ABOUT, long_about = report::LONG_ABOUT, after_help = report::AFTER_HELP)]
    Report(ReportArgs),
    #[command(about = record::ABOUT, long_about = record::LONG_ABOUT, after_help = record::AFTER_HELP)]
    Record(RecordArgs),
    #[command(about = diff::ABOUT, long_about = diff::LONG_ABOUT, after_help = diff::AFTER_HELP)]
    Diff(DiffArgs),
    #[command(about = estimate::ABOUT, long_about = estimate::LONG_ABOUT, after_help = estimate::AFTER_HELP)]
    Estimate(EstimateArgs),
}

impl Command {
    /// The notes for sizes given as fractions of a byte (`--capacity 4.8GiB`),
    /// which were rounded down: printed on stderr before the command runs.
    pub fn size_notes(&self) -> Vec<String> {
        let capacity = match self {
            Command::Bench(a) => Some(&a.capacity),
            Command::Replay(a) => a.capacity.as_ref(),
            Command::Whatif(a) => a.capacity.as_ref(),
            Command::Estimate(a) => a.capacity.as_ref(),
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
}
