//! The headless browser the browser tests drive (Debian's `chromium`, by its
//! command line): finding it on `PATH` and running it with a throwaway profile.
//! Compiled with the `testing` feature, for the tests of the crates above.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The browser, or `None` (the test then says it skipped) — except in CI
/// (`CI` set), where a missing browser fails the test: `.ci/run` installs it.
pub fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        let out = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "no chromium on PATH in CI: install Debian's chromium package (.ci/run does)"
    );
    found
}

/// `browser` run headless, offline and without a sandbox, with its profile in
/// `profile` and then `args`; its output once it exits.
pub fn chromium_run(browser: &Path, profile: &Path, args: &[String]) -> Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs")
}
