//! What every command prints its results with: standard output that a reader
//! going away (`| head`) does not fail; prose fitted to the terminal's
//! [`WIDTH`], 100 columns (no line the commands print is wider), broken
//! between words; and the check that a `--report` folder can be written
//! before any work is done.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;

/// The widest line a command prints (characters): clap wraps its help to it,
/// and the commands' messages are fitted or wrapped to it.
pub const WIDTH: usize = 100;

/// Exit status when the `--report` folder cannot be written.
pub const BAD_REPORT_DIR: u8 = 2;

/// Checks that `--report DIR` can be written before anything is replayed; the
/// message, on stderr, names the folder. `false` when it cannot.
pub fn report_dir_ok(dir: Option<&Path>) -> bool {
    let Some(dir) = dir else { return true };
    match vramlab_reports::prepare_out_dir(dir) {
        Ok(()) => true,
        Err(e) => {
            eprint_line(&format!("error: cannot write the report into {}: {e}", dir.display()));
            false
        }
    }
}

/// The bytes a JSON document starts with.
const JSON_STARTS: &[u8] = b"{[";

/// Writes everything to stdout, text fitted to [`WIDTH`] ([`fit_lines`]) and
/// a JSON document (`--json`: it starts with `{` or `[`) as it is; a reader
/// that went away (`| head`) is not an error.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let json = bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|b| JSON_STARTS.contains(b));
    let fitted = match std::str::from_utf8(bytes) {
        Ok(text) if !json => Some(fit_lines(text)),
        _ => None,
    };
    let bytes = fitted.as_ref().map_or(bytes, |t| t.as_bytes());
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("cannot write the report"),
        _ => Ok(()),
    }
}

/// `text` on as many lines as it needs, each at most `width` columns, broken
/// between words; lines after the first start with `indent`. A word longer
/// than a line stands alone on its line.
pub fn wrap(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width && line.trim() != "" {
            lines.push(std::mem::replace(&mut line, indent.to_owned()));
        }
        if !line.is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.trim().is_empty() {
        lines.push(line);
    }
    lines
}

/// `text` in at most `width` columns: whole words, and " …" where words were left out.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    for word in text.split_whitespace() {
        let next = if out.is_empty() { word.chars().count() } else { out.chars().count() + 1 + word.chars().count() };
        // Room kept for the " …" that says words were left out.
        if next + 2 > width {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.is_empty() { "…".to_owned() } else { out + " …" }
}

/// An error naming a line of a bad input file (`FILE line N: …`): [`main`]
/// prints it on one line whatever its length, the form editors and grep jump to.
///
/// [`main`]: crate::main
#[derive(Debug)]
pub struct Located(pub String);

impl std::fmt::Display for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Located {}

/// An error and its causes, as `{e:#}` writes them but without a cause its
/// message already ends with (a `thiserror` message that shows its `source`,
/// which the chain then gives again).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
        } else if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Writes `line` and a newline to stderr, fitted to [`WIDTH`] ([`fit_lines`]);
/// nothing sensible is left to do if stderr is gone.
pub fn eprint_line(line: &str) {
    let mut text = fit_lines(line);
    text.push('\n');
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// `text` with every line longer than [`WIDTH`] broken to fit it
/// ([`break_at`]; spacing inside the line kept), the rest continuing on the
/// next line indented two more than the line. Table rows ([`is_table_row`])
/// stay whole.
pub fn fit_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 32);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        fit_line(&mut out, line);
    }
    out
}

/// Whether `line` is a row of a table: three or more columns, told apart by
/// runs of two or more spaces after the indentation. [`fit_lines`] leaves a
/// row whole, so its columns stay in line (the CLI tests exempt rows too).
pub fn is_table_row(line: &str) -> bool {
    line.trim().split("  ").filter(|cell| !cell.trim().is_empty()).count() >= 3
}

/// Where a line over the width breaks (a byte index of a space): after the
/// last `; `, `: ` or ` — ` within `room` columns (a clause stays whole)
/// unless that leaves less than a sixth of the line, else at the last space
/// within it, else at the first space past it (a word wider than the line
/// stays whole). `None`: no space to break at.
fn break_at(rest: &str, room: usize) -> Option<usize> {
    let limit = rest.char_indices().nth(room).map_or(rest.len(), |(b, _)| b);
    let start = rest.len() - rest.trim_start().len();
    let head = &rest[..limit];
    let clause = ["; ", ": ", " — "].iter().filter_map(|p| head.rfind(p).map(|i| i + p.len() - 1)).max();
    clause
        .filter(|&c| c > start && c >= limit / 6)
        .or_else(|| head.rfind(' ').filter(|&c| c > start))
        .or_else(|| rest[limit..].find(' ').map(|c| c + limit))
}

/// One line of [`fit_lines`].
fn fit_line(out: &mut String, line: &str) {
    if is_table_row(line) {
        out.push_str(line);
        return;
    }
    let indent: String = line.chars().take_while(|c| *c == ' ').chain("  ".chars()).collect();
    let mut rest = line;
    let mut first = true;
    loop {
        let prefix = if first { "" } else { indent.as_str() };
        let room = WIDTH.saturating_sub(prefix.len()).max(WIDTH / 2);
        if rest.chars().count() <= room {
            out.push_str(prefix);
            out.push_str(rest);
            return;
        }
        let Some(cut) = break_at(rest, room) else {
            out.push_str(prefix);
            out.push_str(rest);
            return;
        };
        out.push_str(prefix);
        out.push_str(rest[..cut].trim_end());
        out.push('\n');
        rest = rest[cut..].trim_start();
        first = false;
    }
}

/// `text` wrapped to [`WIDTH`] between words, lines after the first starting
/// with `indent`, as one string ending in a newline: a message for stderr.
pub fn paragraph(text: &str, indent: &str) -> String {
    let mut out = wrap(text, WIDTH, indent).join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shows_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot run `x`: {source}")]
        struct Spawn {
            source: std::io::Error,
        }
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Spawn { source: io() }).context("cannot capture");
        assert_eq!(error_text(&e), "cannot capture: cannot run `x`: no such file");
        let e = anyhow::Error::new(io()).context("cannot read a.pickle");
        assert_eq!(error_text(&e), format!("{e:#}"), "a cause not shown yet is kept");
    }

    #[test]
    fn long_lines_break_between_clauses_or_words_and_rows_stay_whole() {
        let message = format!("error: cannot replay {}: device 5 has no trace in this snapshot", "/x".repeat(30));
        let fitted = fit_lines(&message);
        assert!(fitted.lines().all(|l| l.chars().count() <= WIDTH), "{fitted}");
        assert_eq!(fitted.lines().nth(1), Some("  device 5 has no trace in this snapshot"));
        let row = format!("  {:<60}{:>30}{:>30}", "name", "a", "b");
        assert!(is_table_row(&row) && !is_table_row("  label        a value: its words"));
        assert_eq!(fit_lines(&row), row);
        assert_eq!(fit_lines("short\n\nlines"), "short\n\nlines");
        let word = "x".repeat(120);
        assert_eq!(fit_lines(&format!("a {word} b")), format!("a\n  {word}\n  b"));
    }

    #[test]
    fn wrap_breaks_between_words_and_keeps_every_word() {
        assert_eq!(wrap("no GPU: libcuda not found", 100, "  "), vec!["no GPU: libcuda not found"]);
        assert_eq!(wrap("no GPU: libcuda not found", 15, "  "), vec!["no GPU: libcuda", "  not found"]);
        assert_eq!(wrap("a supercalifragilistic b", 5, " "), vec!["a", " supercalifragilistic", " b"]);
    }

    #[test]
    fn fit_keeps_whole_words() {
        assert_eq!(fit("peak allocated: training 26.15 MiB", 100), "peak allocated: training 26.15 MiB");
        assert_eq!(fit("peak allocated: training 26.15 MiB", 20), "peak allocated: …");
        assert_eq!(fit("supercalifragilistic", 5), "…");
    }
}
