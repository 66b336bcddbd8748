//! What every command prints its results with: standard output that a reader
//! going away (`| head`) does not fail, and the check that a `--report`
//! folder can be written before any work is done.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;

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
