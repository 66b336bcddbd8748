//! What the end-to-end tests in `tests/tests/` share: where the workspace is,
//! and the release `xtask` binary they run as users run it (`cargo xtask` is
//! `cargo run --release --package xtask`).

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
