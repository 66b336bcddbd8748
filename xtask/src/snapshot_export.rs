//! `cargo xtask bench --export-snapshot DIR [--export-case NAME …]`: each
//! profiled case's allocator recording written as a PyTorch memory snapshot,
//! `DIR/<suite>-<case>.pickle`, while the suites run (the runner hands the
//! snapshots over; `vramlab_reports` writes them).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use vramlab_snapshot::Snapshot;
use vramlab_suites::{CaseResult, SnapshotSink};

/// Collects the runner's snapshots into files.
pub struct SnapshotExport {
    dir: PathBuf,
    /// Case names (`case` or `suite/case`) to export; empty: every profiled case.
    cases: Vec<String>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    written: Vec<PathBuf>,
    files: HashSet<String>,
    matched: HashSet<String>,
    errors: Vec<String>,
}

impl SnapshotExport {
    pub fn new(dir: &Path, cases: &[String]) -> SnapshotExport {
        SnapshotExport { dir: dir.to_path_buf(), cases: cases.to_vec(), state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The files written, in order.
    pub fn written(&self) -> Vec<PathBuf> {
        self.state().written.clone()
    }

    /// What went wrong: files that could not be written, and `--export-case`
    /// names that matched no profiled case.
    pub fn problems(&self) -> Vec<String> {
        let s = self.state();
        let mut out = s.errors.clone();
        for c in &self.cases {
            if !s.matched.contains(c) {
                out.push(format!(
                    "--export-case {c}: no profiled case of the suites run has this name (a case's name, or SUITE/CASE)"
                ));
            }
        }
        out
    }

    fn selector(&self, suite: &str, case: &str) -> Option<String> {
        let full = format!("{suite}/{case}");
        self.cases.iter().find(|c| **c == case || **c == full).cloned()
    }
}

impl SnapshotSink for SnapshotExport {
    fn wants(&self, suite: &str, case: &str) -> bool {
        self.cases.is_empty() || self.selector(suite, case).is_some()
    }

    fn case_snapshot(&self, suite: &str, case: &CaseResult, snapshot: Snapshot) {
        let mut s = self.state();
        if let Some(sel) = self.selector(suite, &case.name) {
            s.matched.insert(sel);
        }
        // Two cases whose names clean to the same file get -2, -3, ….
        let base = vramlab_reports::memory_snapshot::case_snapshot_file(suite, &case.name);
        let mut file = base.clone();
        let mut n = 2;
        while s.files.contains(&file) {
            file = format!("{}-{n}.pickle", base.trim_end_matches(".pickle"));
            n += 1;
        }
        s.files.insert(file.clone());
        match vramlab_reports::memory_snapshot::write_case_snapshot(&self.dir, &file, &snapshot) {
            Ok(path) => s.written.push(path),
            Err(e) => s.errors.push(format!("the snapshot of {suite}/{} was not written: {e}", case.name)),
        }
    }
}
