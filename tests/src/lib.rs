//! What the end-to-end tests in this crate's `tests/` share: where the workspace is,
//! and the release `xtask` binary they run as users run it (`cargo xtask` is
//! `cargo run --release --package xtask`).
//!
//! The crate's files (the tidy test checks this map: every path named here
//! exists, and every Rust file of the crate is named, or a folder holding it):
//!
//! - `src/lib.rs` — this file: the workspace's root, the release binary.
//! - `tests/tidy.rs` — the architecture's rules that Cargo and the compiler do
//!   not check (direction, native libraries, writers, headers, one generator,
//!   the crates' file maps, function length, the length of README.md and
//!   ARCHITECTURE.md), over the real tree.
//! - `tests/docs.rs` — README.md and the guide (`../docs/`): links, images and
//!   anchors that exist, the book's chapter list, and every `vramlab …` /
//!   `cargo xtask …` command line in a code block accepted by the command line.
//! - `tests/bench_quick.rs` — `cargo xtask bench --quick --device cpu` end to
//!   end, its results and the report's sentences proofread.
//! - `tests/check_e2e.rs` — the regression check end to end through the
//!   release binary: a baseline, an identical run, a planted regression, bad
//!   inputs.
//! - `tests/simulated_e2e.rs` — `bench --simulate` end to end: a simulated A/A pair of the
//!   quick cpu-vs-gpu suite under callgrind, no simulated regression.
//! - `tests/report.rs` — the report of a fixed results file as a person sees it,
//!   in a headless browser.
//! - `tests/python.rs` — the Python package (`../python/`): a cached virtual
//!   environment, the wheel built and installed, the pytest suite, the
//!   notebook's output in a headless browser.
//! - `data/` — fixtures: `data/snapshots/` (PyTorch snapshot pickles written by
//!   `../scripts/make_snapshot_fixtures.py`), `data/torch-snapshots/` (snapshots
//!   PyTorch 2.11 recorded on an H100, with its `memory_stats()`) and
//!   `data/report-probe.html`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// Builds the release xtask binary (what `cargo xtask` runs) and returns its path.
pub fn xtask_release() -> PathBuf {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--package", "xtask", "--quiet"])
        .current_dir(&root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the release xtask failed");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    target.join("release").join(format!("xtask{}", std::env::consts::EXE_SUFFIX))
}
