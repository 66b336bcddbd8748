//! What every CLI test checks of the binary's output: each line it prints to
//! a terminal fits in 100 columns (characters, not bytes), help text
//! included (clap wraps it at that width).
//!
//! Exempt: what a program reads rather than a person — a stdout that is one
//! JSON document (`--json`), GitHub's workflow commands (lines starting with
//! `::`, e.g. `::error file=…`), and the one-line diagnostic of a bad input
//! file (`error: FILE line N…`, the form editors and grep jump to) — and the
//! rows of tables (three or more columns apart by runs of two or more spaces:
//! a row stays whole so its columns line up; the CLI breaks every other line,
//! `xtask/src/output.rs`). Two messages of `record` stay wider, as its tests
//! pin each on one line ([`PINNED`]). Markdown and pages written to files are
//! not terminal output and not checked here.

use std::process::Output;

/// Lines the tests pin whole and wider than 100 columns (`record_cli.rs`):
/// the hook's note that a dump failed, and a `.part` file's reason.
const PINNED: [&str; 2] = ["vramlab: the recording hook failed", ": cut short: its process ended while writing it"];

/// The widest line a command may print.
const WIDTH: usize = 100;

/// `o`, after asserting that every line of its stdout and stderr fits in
/// [`WIDTH`] columns (the exemptions above aside).
pub fn fits(o: Output) -> Output {
    let json = serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok();
    let streams = [("stdout", &o.stdout), ("stderr", &o.stderr)];
    for (name, bytes) in streams.into_iter().filter(|(name, _)| !(json && *name == "stdout")) {
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|l| !l.starts_with("::") && !diagnostic(l) && !table_row(l) && !pinned(l)) {
            let n = line.chars().count();
            assert!(n <= WIDTH, "a {n}-column line on {name} (at most {WIDTH}):\n{line}\n--- all of {name}:\n{text}");
        }
    }
    o
}

/// `error: FILE line N…`: a bad input's diagnostic, one line whatever its length.
fn diagnostic(line: &str) -> bool {
    let located = line.strip_prefix("error: ").and_then(|rest| rest.split_once(" line "));
    located.is_some_and(|(file, after)| !file.contains(' ') && after.starts_with(|c: char| c.is_ascii_digit()))
}

/// A row of a table: three or more columns apart by runs of two or more spaces.
fn table_row(line: &str) -> bool {
    line.trim().split("  ").filter(|cell| !cell.trim().is_empty()).count() >= 3
}

/// One of the [`PINNED`] lines.
fn pinned(line: &str) -> bool {
    PINNED.iter().any(|p| line.contains(p))
}
