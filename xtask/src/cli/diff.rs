//! `diff`'s flags and help text.

use std::path::PathBuf;

use clap::Args;

pub const ABOUT: &str = "Compare two PyTorch memory snapshots: peaks, who gained or lost bytes, segments";

pub const LONG_ABOUT: &str = "\
Compare two PyTorch memory snapshots (torch.cuda.memory._dump_snapshot(), any pickle protocol),
A before and B after, offline: each is replayed through vramlab's model of the caching allocator
under its own settings (the allocator_settings it recorded, else PyTorch's defaults), then the
peak allocated and reserved memory before and after and the change; the call paths of your own
code (frames inside torch, packages, the standard library and C++ folded) that gained or lost
bytes at each replay's allocated peak, largest change first; the segments at each reserved peak
(count and sizes) and the fragmentation then (reserved - allocated, the largest free block).

A and B may instead be two results files of `cargo xtask bench` (results.json): each suite case
in both (or the one --case SUITE/CASE names) is compared: peak allocated, reserved and active
bytes, the allocated bytes by category (tag) at the allocated peak, and the median time.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask diff before.pickle after.pickle
  cargo xtask diff before.pickle after.pickle --json
  cargo xtask diff before.pickle after.pickle --report target/diff
                                              then open target/diff/index.html
  cargo xtask diff old/results.json new/results.json --case memory/train_step

Exit status: 0 when both files were compared (whatever changed); 1 when a file is not a readable
snapshot or results file, cannot be replayed, or the results have no such case in common; 2 for
usage errors and when the --report folder cannot be written.";

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The snapshot before (A)
    #[arg(value_name = "A")]
    pub before: PathBuf,

    /// The snapshot after (B)
    #[arg(value_name = "B")]
    pub after: PathBuf,

    /// The device whose trace to replay in both [default: in each, the one with the most entries]
    #[arg(long, value_name = "N")]
    pub device: Option<usize>,

    /// Two results files: compare only this suite case (SUITE/CASE, e.g. memory/train_step)
    #[arg(long, value_name = "SUITE/CASE")]
    pub case: Option<String>,

    /// Print one JSON object instead of the tables
    #[arg(long)]
    pub json: bool,

    /// Also write an offline HTML page into DIR
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}
