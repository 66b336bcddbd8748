//! `whatif`'s flags and help text.

use std::path::PathBuf;

use clap::Args;
use vramlab_engine::alloc::AllocatorConfig;

use super::replay::{SnapshotWindow, parse_capacity};
use crate::size::Size;

pub const ABOUT: &str =
    "Replay a PyTorch memory snapshot under other allocator settings: would it fit, and with which?";

pub const LONG_ABOUT: &str = "\
Replay the requests of a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), any pickle
protocol) under other allocator settings and device capacities, offline, from the file: for
each setting the peak reserved and allocated memory, the fragmentation at the reserved peak
(reserved - allocated, and the largest free block), the segment allocations (cudaMalloc calls,
each a device synchronisation) and whether and where it runs out of memory. --sweep tries a grid
of PYTORCH_CUDA_ALLOC_CONF settings (expandable_segments, max_split_size_mb,
roundup_power2_divisions) in parallel and recommends the one with the lowest peak reserved
memory that fits in --capacity (ties: fewer cudaMalloc calls). The allocations live at the
allocated peak (and at the recorded settings' first out-of-memory) are grouped by the call path
of the user's own code (frames inside torch, packages, the standard library and C++ folded),
largest first.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask whatif snapshot.pickle --capacity 24GiB --sweep
  cargo xtask whatif snapshot.pickle --alloc-conf expandable_segments:True --json
  cargo xtask whatif snapshot.pickle --capacity 24GiB --sweep --report target/whatif
  cargo xtask whatif out/*-rank*.pickle --sweep

Exit status: 0 when the snapshot replayed (out-of-memory is a result); 1 when the file is not a
readable snapshot; 2 for usage errors and when the --report folder cannot be written.";

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

    #[command(flatten)]
    pub window: SnapshotWindow,

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

impl WhatifArgs {
    /// `--capacity` in bytes (rounded down to whole bytes).
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.capacity.as_ref().map(|s| s.bytes)
    }
}
