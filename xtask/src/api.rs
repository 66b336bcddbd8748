//! The snapshot commands in-process, for the Python package (`../python/`,
//! `import vramlab`): `replay`, `whatif` and `diff` of a snapshot file or of
//! a snapshot's bytes in memory, each given the command's own flags, parsed
//! and checked by the command line's definitions and run through the
//! command's own code; what comes back is what the command prints with
//! `--json` (with `--report DIR`, the page is written first). `record`'s
//! report of snapshots written by an in-process recording. An error carries
//! the message the command prints after `error: `, its exit status and its
//! kind.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor};
use std::path::{Path, PathBuf};

use clap::Parser;
use vramlab_snapshot::{self as snapshot, SnapshotError, SnapshotReplayError};

use crate::cli::{Cli, Command};
use crate::snapshot_cmd::Tail;

/// Where a snapshot comes from.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A snapshot file (`torch.cuda.memory._dump_snapshot()`).
    Path(&'a Path),
    /// A snapshot pickle in memory (what `_dump_snapshot` would write).
    Bytes(&'a [u8]),
}

/// A snapshot and the name messages and documents give it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub name: &'a str,
    pub input: Input<'a>,
}

/// What went wrong, as the command line would have said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A flag's value the command line refuses (exit status 2).
    Usage,
    /// The input cannot be opened or is not a readable snapshot (exit status 1).
    Snapshot,
    /// The snapshot was read but cannot be replayed as asked (exit status 1).
    Replay,
    /// The `--report` folder cannot be written (exit status 2).
    Report,
}

/// An error of a command run in-process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    /// What the command prints after `error: `.
    pub message: String,
    /// The command's exit status.
    pub exit_status: u8,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    fn new(kind: ErrorKind, message: String) -> ApiError {
        let exit_status = match kind {
            ErrorKind::Usage | ErrorKind::Report => 2,
            ErrorKind::Snapshot | ErrorKind::Replay => 1,
        };
        ApiError { kind, message, exit_status }
    }

    /// A command's error, its kind told by what is at its root.
    fn of(e: &anyhow::Error) -> ApiError {
        let message = crate::output::error_text(e);
        let kind = if e.chain().any(|c| c.is::<vramlab_reports::ReportError>()) {
            ErrorKind::Report
        } else if e.chain().any(|c| c.is::<SnapshotReplayError>()) {
            ErrorKind::Replay
        } else if e.chain().any(|c| c.is::<SnapshotError>() || c.is::<std::io::Error>()) {
            ErrorKind::Snapshot
        } else {
            // The commands' own checks of their flags (`--from-us` after `--to-us`, …).
            ErrorKind::Usage
        };
        ApiError::new(kind, message)
    }
}

/// `command` with `args` parsed as the command line parses them.
fn parse(command: &str, args: &[&str], flags: &[String]) -> Result<Command, ApiError> {
    let words =
        ["vramlab", command].into_iter().chain(args.iter().copied()).map(str::to_owned).chain(flags.iter().cloned());
    let cli = Cli::try_parse_from(words).map_err(|e| {
        let text = e.render().to_string();
        let first = text.lines().next().unwrap_or_default();
        ApiError::new(ErrorKind::Usage, first.trim_start_matches("error: ").to_owned())
    })?;
    Ok(cli.command)
}

/// The `--report` folder created and checked before any work, as the commands do.
fn check_report_dir(dir: Option<&Path>) -> Result<(), ApiError> {
    match dir.map(vramlab_reports::prepare_out_dir) {
        Some(Err(e)) => Err(ApiError::new(
            ErrorKind::Report,
            format!("cannot write the report into {}: {e}", dir.unwrap_or(Path::new("")).display()),
        )),
        _ => Ok(()),
    }
}

/// The snapshot of `src`, read whole.
fn read(src: &Source<'_>) -> Result<snapshot::Snapshot, ApiError> {
    let unreadable = |e: SnapshotError| {
        ApiError::new(ErrorKind::Snapshot, format!("{} is not a readable PyTorch memory snapshot: {e}", src.name))
    };
    match src.input {
        Input::Bytes(bytes) => snapshot::read_snapshot(bytes).map_err(unreadable),
        Input::Path(path) => {
            let file = open(src.name, path)?;
            snapshot::read_snapshot(BufReader::with_capacity(1 << 20, file)).map_err(unreadable)
        }
    }
}

fn open(name: &str, path: &Path) -> Result<File, ApiError> {
    let file = File::open(path).map_err(|e| ApiError::new(ErrorKind::Snapshot, format!("cannot open {name}: {e}")))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(ApiError::new(ErrorKind::Snapshot, format!("{name} is a directory, not a snapshot file")));
    }
    Ok(file)
}

/// `replay` of one snapshot with `flags` (`--capacity 24GiB`, `--report DIR`, …):
/// its `--json` document. A file is read and replayed at once, as the command does.
pub fn replay(src: &Source<'_>, flags: &[String]) -> Result<Vec<u8>, ApiError> {
    let Command::Replay(mut args) = parse("replay", &[src.name], flags)? else { unreachable!("parsed as replay") };
    args.json = true;
    check_report_dir(args.report.as_deref())?;
    let not_snapshot = || {
        ApiError::new(
            ErrorKind::Snapshot,
            format!(
                "{} is not a PyTorch memory snapshot (a pickle); `vramlab replay FILE` also replays vramlab's \
                 JSON Lines traces",
                src.name
            ),
        )
    };
    let out = match src.input {
        Input::Bytes(bytes) => {
            if !snapshot::is_pickle(bytes) {
                return Err(not_snapshot());
            }
            let len = bytes.len() as u64;
            crate::snapshot_cmd::replay(&args, src.name, Cursor::new(bytes), Some(len), Tail::Bytes(bytes))
        }
        Input::Path(path) => {
            let mut file = BufReader::with_capacity(1 << 18, open(src.name, path)?);
            let head = file
                .fill_buf()
                .map_err(|e| ApiError::new(ErrorKind::Snapshot, format!("cannot read {}: {e}", src.name)))?;
            if !snapshot::is_pickle(head) {
                return Err(not_snapshot());
            }
            let len = file.get_ref().metadata().ok().map(|m| m.len());
            crate::snapshot_cmd::replay(&args, src.name, file, len, Tail::File(path))
        }
    };
    out.map_err(|e| ApiError::of(&e))
}

/// `whatif` of one snapshot with `flags` (`--capacity 24GiB --sweep`, …): its
/// `--json` document and the command's exit status (1 when a device of a
/// snapshot of several could not be replayed).
pub fn whatif(src: &Source<'_>, flags: &[String]) -> Result<(Vec<u8>, u8), ApiError> {
    let Command::Whatif(mut args) = parse("whatif", &[src.name], flags)? else { unreachable!("parsed as whatif") };
    args.json = true;
    check_report_dir(args.report.as_deref())?;
    let snap = read(src)?;
    crate::whatif_cmd::output(&args, src.name, snap).map_err(|e| ApiError::of(&e))
}

/// `diff` of two snapshots (`a` before, `b` after) with `flags`: its `--json` document.
pub fn diff(a: &Source<'_>, b: &Source<'_>, flags: &[String]) -> Result<Vec<u8>, ApiError> {
    let Command::Diff(mut args) = parse("diff", &[a.name, b.name], flags)? else { unreachable!("parsed as diff") };
    args.json = true;
    check_report_dir(args.report.as_deref())?;
    let (sa, sb) = (read(a)?, read(b)?);
    crate::diff_cmd::snapshots_output(&args, (a.name, &sa), (b.name, &sb)).map_err(|e| ApiError::of(&e))
}

/// `record`'s report of `snapshots`, written into `out` by a recording of
/// `what` that ended with status `status`: each replayed, its pages and the
/// index in `OUT/report/`. The summary's lines and the index's path.
pub fn record_report(out: &Path, snapshots: &[PathBuf], what: &str, status: u8) -> (String, Option<PathBuf>) {
    crate::record_cmd::replay_and_index(out, snapshots, &[], what.to_owned(), status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots/mlp-default.pickle")
    }

    #[test]
    fn a_file_and_its_bytes_give_the_same_document_but_for_the_name() {
        let path = fixture();
        let bytes = std::fs::read(&path).unwrap();
        let from_file = replay(&Source { name: "x", input: Input::Path(&path) }, &[]).unwrap();
        let from_bytes = replay(&Source { name: "x", input: Input::Bytes(&bytes) }, &[]).unwrap();
        let mut file_doc: serde_json::Value = serde_json::from_slice(&from_file).unwrap();
        let mut bytes_doc: serde_json::Value = serde_json::from_slice(&from_bytes).unwrap();
        // A file is also checked against the memory_stats() recorded beside it; bytes have no neighbour.
        let beside = file_doc["fidelity"]["memory_stats"].take();
        assert_eq!(beside["keys"], beside["equal"], "{beside}");
        assert!(beside["keys"].as_u64().unwrap() > 100, "{beside}");
        assert!(bytes_doc["fidelity"]["memory_stats"].take().is_null());
        assert_eq!(file_doc, bytes_doc);
        assert!(file_doc["peak_reserved_bytes"].as_u64().unwrap() > 0, "{file_doc}");
    }

    #[test]
    fn errors_carry_the_command_lines_message_kind_and_status() {
        let path = fixture();
        let src = Source { name: "mlp", input: Input::Path(&path) };
        let e = replay(&src, &["--capacity".into(), "12 parsecs".into()]).unwrap_err();
        assert_eq!((e.kind, e.exit_status), (ErrorKind::Usage, 2), "{e}");
        assert!(e.message.contains("--capacity"), "{e}");
        let e = replay(&Source { name: "junk", input: Input::Bytes(b"\x80\x04junk") }, &[]).unwrap_err();
        assert_eq!((e.kind, e.exit_status), (ErrorKind::Snapshot, 1), "{e}");
        assert!(e.message.starts_with("junk is not a readable PyTorch memory snapshot"), "{e}");
        let e = replay(&src, &["--device".into(), "7".into()]).unwrap_err();
        assert_eq!((e.kind, e.exit_status), (ErrorKind::Replay, 1), "{e}");
        assert!(e.message.starts_with("cannot replay mlp"), "{e}");
        let missing = Path::new("no/such.pickle");
        let e = whatif(&Source { name: "no/such.pickle", input: Input::Path(missing) }, &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Snapshot, "{e}");
        assert!(e.message.starts_with("cannot open no/such.pickle"), "{e}");
    }
}
