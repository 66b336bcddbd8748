//! The files of `vramlab record`: the check that `--out` can be written, the
//! hook's notes of Pythons without torch (read and removed), the Python hook's
//! temporary folder (its `sitecustomize.py` written there, the folder removed
//! after the run) and the
//! index page (`templates/record.html`) that lists every snapshot the recorded
//! command wrote, each row linking to its replay and what-if pages, and, when
//! several processes wrote snapshots, the ranks side by side (peaks, limit and
//! headroom, OOM or not, imbalance, the one closest to capacity), each rank's
//! row its drill-down.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{ReportError, prepare_out_dir, write_unsynced};

/// Writes `source` as `dir/name` (the hook's `sitecustomize.py`), creating
/// `dir`; returns the file's path.
pub fn write_hook(dir: &Path, name: &str, source: &str) -> Result<PathBuf, ReportError> {
    write_hook_bytes(dir, name, source.as_bytes())
}

/// Writes `bytes` as `dir/name` (a hook's file: `vramlab estimate`'s fake CUDA
/// library), creating `dir`; returns the file's path.
pub fn write_hook_bytes(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ReportError> {
    prepare_out_dir(dir)?;
    let path = dir.join(name);
    write_unsynced(&path, bytes)?;
    Ok(path)
}

/// Removes `path` if it is there (a capture's stale `refused.json`, the capture
/// files of a run that failed).
pub fn remove_if_present(path: &Path) -> Result<(), ReportError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ReportError::Io { path: path.to_path_buf(), source: e })
        }
        _ => Ok(()),
    }
}

/// Removes the hook's temporary folder and what is in it.
pub fn remove_hook_dir(dir: &Path) -> Result<(), ReportError> {
    fs::remove_dir_all(dir).map_err(|source| ReportError::Io { path: dir.to_path_buf(), source })
}

/// Whether files can be written into `dir` (a probe file written and removed):
/// `vramlab record` runs nothing where its snapshots could not be kept.
pub fn check_writable(dir: &Path) -> Result<(), ReportError> {
    let probe = dir.join(format!(".vramlab-write-test-{}", std::process::id()));
    write_unsynced(&probe, b"")?;
    fs::remove_file(&probe).map_err(|source| ReportError::Io { path: probe, source })
}

/// The hook's notes in `dir` of Pythons that could not import torch
/// (`.vramlab-no-torch-<pid>`, holding the executable), as "EXECUTABLE (pid P)";
/// each note is removed once read.
pub fn take_no_torch_notes(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut notes: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(NO_TORCH_NOTE)))
        .collect();
    notes.sort();
    notes
        .iter()
        .filter_map(|p| {
            let python = fs::read_to_string(p).ok();
            // A note left behind is harmless: the next run reads and removes it.
            let _ = fs::remove_file(p);
            let pid = p.file_name()?.to_str()?.trim_start_matches(NO_TORCH_NOTE).to_owned();
            Some(format!("{} (pid {pid})", python.unwrap_or_else(|| "python".into())))
        })
        .collect()
}

/// The prefix of the hook's no-torch notes (`record_hook.py` writes them).
const NO_TORCH_NOTE: &str = ".vramlab-no-torch-";

/// One snapshot of the index page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordRow {
    /// The snapshot's file name.
    pub file: String,
    /// The rank in its name (`-rank<R>-`), if any.
    pub rank: Option<String>,
    /// Its replay page, relative to the index; `None` when it could not be replayed.
    pub page: Option<String>,
    /// Its what-if page (the recorded settings, expandable segments, max_split_size_mb), relative to the index.
    pub whatif_page: Option<String>,
    pub peak_allocated: String,
    pub peak_reserved: String,
    /// Recorded out-of-memory errors in its trace.
    pub ooms: u64,
    /// The what-if answers at the first recorded OOM, one line a setting (or why the file was not replayed).
    pub whatif: Vec<String>,
}

/// One rank and device of a recorded job, in the index's summary of ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankSummaryRow {
    /// "rank 1, device 0" (or the file and device without a rank).
    pub label: String,
    pub file: String,
    /// Its replay and what-if pages, relative to the index.
    pub page: Option<String>,
    pub whatif_page: Option<String>,
    pub peak_allocated: String,
    pub peak_reserved: String,
    pub limit: String,
    pub headroom: String,
    /// "no", or the recorded out-of-memory errors.
    pub oom: String,
    /// "most reserved", "least reserved", "closest to capacity", joined.
    pub marks: String,
    /// Why it could not be replayed.
    pub error: Option<String>,
}

/// The ranks of a recorded job side by side (two or more processes wrote snapshots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RanksSummary {
    pub rows: Vec<RankSummaryRow>,
    /// The imbalance of peak reserved memory between the rows, in words.
    pub imbalance: String,
    /// The row closest to its capacity, in words.
    pub closest: String,
}

/// The index page of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordIndex {
    /// The command as run.
    pub command: String,
    /// Its exit status as a shell reports it (128 + N for signal N).
    pub exit_status: u8,
    pub rows: Vec<RecordRow>,
    /// The ranks side by side, when two or more processes wrote snapshots.
    pub ranks: Option<RanksSummary>,
    /// Why there are no rows, when there are none.
    pub empty_reason: String,
}

/// Writes `dir/index.html`; returns its path.
pub fn write_record_index(dir: &Path, index: &RecordIndex) -> Result<PathBuf, ReportError> {
    prepare_out_dir(dir)?;
    let ctx = minijinja::context! {
        title => format!("vramlab record: {}", index.command),
        version => env!("CARGO_PKG_VERSION"),
        command => &index.command,
        exit_status => index.exit_status,
        rows => &index.rows,
        ranks => &index.ranks,
        empty_reason => &index.empty_reason,
        css => crate::html::CSS,
    };
    crate::html::write_index(dir, "record.html", ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lists_rows_escaped_and_says_why_empty() {
        let dir = std::env::temp_dir().join(format!("vramlab-record-index-{}", std::process::id()));
        let row = RecordRow {
            file: "h-rank1-pid7.pickle".into(),
            rank: Some("1".into()),
            page: Some("h-rank1-pid7/index.html".into()),
            whatif_page: Some("h-rank1-pid7-whatif/index.html".into()),
            peak_allocated: "1.00 MiB".into(),
            peak_reserved: "2.00 MiB".into(),
            ooms: 1,
            whatif: vec!["expandable_segments:True: served, 4.00 MiB to spare".into()],
        };
        let index = RecordIndex {
            command: "python3 <x>.py".into(),
            exit_status: 1,
            rows: vec![row],
            ranks: None,
            empty_reason: String::new(),
        };
        let html = fs::read_to_string(write_record_index(&dir, &index).unwrap()).unwrap();
        assert!(html.contains("python3 &lt;x&gt;.py") && html.contains("exit status 1"), "{html}");
        assert!(html.contains(r#"<a href="h-rank1-pid7&#x2f;index.html">"#) && html.contains("4.00 MiB to spare"));
        assert!(html.contains(r#"<a href="h-rank1-pid7-whatif&#x2f;index.html">what-if</a>"#), "{html}");
        assert!(!html.contains("<h2>Ranks</h2>"), "one process: no summary of ranks");
        // Two ranks: the summary, each row linking to its pages, the one that failed marked.
        let rank = |label: &str, oom: &str, marks: &str| RankSummaryRow {
            label: label.into(),
            file: format!("h-{}-pid7.pickle", label.replace(", ", "-").replace(' ', "")),
            page: Some(format!("{label}/index.html")),
            whatif_page: Some(format!("{label}-whatif/index.html")),
            peak_allocated: "1.00 MiB".into(),
            peak_reserved: "2.00 MiB".into(),
            limit: "-".into(),
            headroom: "-".into(),
            oom: oom.into(),
            marks: marks.into(),
            error: None,
        };
        let ranks = RanksSummary {
            rows: vec![rank("rank 0", "no", "least reserved"), rank("rank 1", "1 recorded", "most reserved")],
            imbalance: "peak reserved 2.00x between rank 1 and rank 0".into(),
            closest: "unknown: no --capacity given".into(),
        };
        let index = RecordIndex { ranks: Some(ranks), ..index };
        let html = fs::read_to_string(write_record_index(&dir, &index).unwrap()).unwrap();
        assert!(html.contains("<h2>Ranks</h2>"), "{html}");
        assert!(html.contains("<li><strong>Imbalance</strong>: peak reserved 2.00x between rank 1 and rank 0</li>"));
        assert!(html.contains(r#"<tr class="failed"><td>rank 1</td>"#), "{html}");
        assert!(html.contains(r#"<a href="rank 0-whatif&#x2f;index.html">what-if</a>"#), "{html}");
        let empty = RecordIndex { rows: vec![], empty_reason: "torch never initialised CUDA".into(), ..index };
        let html = fs::read_to_string(write_record_index(&dir, &empty).unwrap()).unwrap();
        assert!(html.contains("No snapshot was written: torch never initialised CUDA"));
        // The hook's notes: read, named, removed.
        fs::write(dir.join(".vramlab-no-torch-42"), "/usr/bin/python3").unwrap();
        assert_eq!(take_no_torch_notes(&dir), ["/usr/bin/python3 (pid 42)"]);
        assert!(!dir.join(".vramlab-no-torch-42").exists() && take_no_torch_notes(&dir).is_empty());
        check_writable(&dir).unwrap();
        assert!(check_writable(&dir.join("index.html")).is_err(), "a file is no folder to write into");
        let hook = write_hook(&dir.join("hook"), "sitecustomize.py", "print(1)\n").unwrap();
        assert_eq!(fs::read_to_string(&hook).unwrap(), "print(1)\n");
        remove_hook_dir(&dir.join("hook")).unwrap();
        assert!(!dir.join("hook").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
