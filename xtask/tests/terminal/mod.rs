//! What every CLI test checks of the binary's output: each line it prints to
//! a terminal fits in 100 columns (characters, not bytes), help text
//! included (clap wraps it at that width).
//!
//! Exempt, being read by a program rather than a person: a stdout that is one
//! JSON document (`--json`), and GitHub's workflow commands (lines starting
//! with `::`, e.g. `::error file=…`). Markdown and pages written to files are
//! not terminal output and not checked here.

use std::process::Output;

/// The widest line a command may print.
const WIDTH: usize = 100;

/// `o`, after asserting that every line of its stdout and stderr fits in
/// [`WIDTH`] columns (the exemptions above aside).
pub fn fits(o: Output) -> Output {
    let json = serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok();
    let streams = [("stdout", &o.stdout), ("stderr", &o.stderr)];
    for (name, bytes) in streams.into_iter().filter(|(name, _)| !(json && *name == "stdout")) {
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|l| !l.starts_with("::")) {
            let n = line.chars().count();
            assert!(n <= WIDTH, "a {n}-column line on {name} (at most {WIDTH}):\n{line}\n--- all of {name}:\n{text}");
        }
    }
    o
}
