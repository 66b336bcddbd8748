//! `gpu-check`'s flags and help text.

use std::path::PathBuf;

use clap::Args;

pub const ABOUT: &str = "Build the GPU test bundle (tests + GPU figures, no Rust needed to run it) and run it";

pub const LONG_ABOUT: &str = "\
Build, in release, the engine's test binaries (its CUDA tests included) and the gpu_figures
program into a self-contained bundle folder, with run.sh, PyTorch's reference figures
(torch_reference.py) and a comparison script; then run the bundle here unless --bundle-only.
The bundle needs no Rust toolchain and no network: copy the folder to a machine with an
NVIDIA GPU and run its run.sh there. run.sh runs every test binary (the CUDA tests one at a
time, with their output), measures vramlab's GPU figures and PyTorch's, writes both as JSON
and prints them side by side.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask gpu-check                  build the bundle in target/gpu-check/bundle and run it here
  cargo xtask gpu-check --bundle-only    only build it; then, on the GPU machine:
                                         target/gpu-check/bundle/run.sh [RESULTS_DIR]

Exit status: 0 when every test passed and the GPU figures were measured; 3 when there is no
GPU here (the tests passed, the CUDA tests skipped: run the bundle on a GPU machine); 1 when
a test failed or the bundle could not be built; 2 for usage errors.";

#[derive(Debug, Args)]
pub struct GpuCheckArgs {
    /// The bundle folder (replaced if it holds an earlier bundle) [default: target/gpu-check/bundle]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Only build the bundle; do not run it here
    #[arg(long)]
    pub bundle_only: bool,
}
