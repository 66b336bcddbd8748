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
            let _ = writeln!(io::stderr(), "error: cannot write the report into {}: {e}", dir.display());
            false
        }
    }
}

/// Writes everything to stdout; a reader that went away (`| head`) is not an error.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
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
