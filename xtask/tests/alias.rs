//! `cargo xtask …` (the alias in `.cargo/config.toml`) must resolve to the
//! `xtask` binary: the package also builds `vramlab`, and without
//! `default-run` cargo refuses to choose ("could not determine which binary to
//! run"). Runs the alias's command in the debug profile, which the test build
//! has already compiled.

use std::path::Path;
use std::process::Command;

#[test]
fn the_cargo_xtask_alias_runs_the_xtask_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let config = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    assert!(config.contains("xtask = \"run --release --package xtask --\""), "{config}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The same command as the alias, in the debug profile (no release build in tests).
    let out = Command::new(cargo)
        .args(["run", "--quiet", "--offline", "--package", "xtask", "--", "--help"])
        .current_dir(root)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo run --package xtask failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("bench") && stdout.contains("whatif"), "{stdout}");
}
