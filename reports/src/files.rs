//! The atomic writers, the output folder and its logs, and `ReportError`:
//! what every writer of the crate stands on.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serializing {what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing CSV {path}: {source}")]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error("reading {path}: not vramlab results ({reason})")]
    NotResults { path: PathBuf, reason: String },
    #[error("drawing the chart {chart}: {reason}")]
    Chart { chart: String, reason: String },
    #[error("rendering the HTML report: {reason}")]
    Template { reason: String },
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced to
/// disk, then a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    write_replacing(path, bytes, true)
}

/// Like [`write_atomic`] without waiting for the disk (`fsync`): for the files
/// derived from `results.json` — charts, pages, `summary.md`, `trace.json`,
/// the CSVs — which `cargo xtask report --from` redraws; an interrupted run
/// still leaves whole files only. A report has a couple of hundred of them,
/// and on this project's machines one `fsync` (about 7 ms) cost more than
/// drawing a chart. `results.json`, baselines, exported snapshots and the
/// tuning cache stay synced.
pub(crate) fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    write_replacing(path, bytes, false)
}

fn write_replacing(path: &Path, bytes: &[u8], sync: bool) -> Result<(), ReportError> {
    let io = |source| ReportError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    let mut f = fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    if sync {
        f.sync_all().map_err(io)?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(io)
}

/// Makes `dir` (and its parents) and checks that files can be written into
/// it, so a run finds out before it measures rather than after.
pub fn prepare_out_dir(dir: &Path) -> Result<(), ReportError> {
    let io = |source| ReportError::Io { path: dir.to_path_buf(), source };
    fs::create_dir_all(dir).map_err(io)?;
    let probe = dir.join(".vramlab-write-test");
    fs::write(&probe, b"").map_err(io)?;
    let _ = fs::remove_file(probe);
    Ok(())
}

/// Creates `dir` and the log file `dir/name` for a child process's output
/// (`check --ab`'s steps): the file, opened for writing, truncated.
pub fn create_log(dir: &Path, name: &str) -> Result<fs::File, ReportError> {
    prepare_out_dir(dir)?;
    let path = dir.join(name);
    fs::File::create(&path).map_err(|source| ReportError::Io { path, source })
}
