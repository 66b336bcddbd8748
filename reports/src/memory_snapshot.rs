//! Bench cases' recordings as PyTorch memory-snapshot pickles
//! (`cargo xtask bench --export-snapshot DIR`): one `<suite>-<case>.pickle` per
//! exported case, in the layout `torch.cuda.memory._dump_snapshot()` writes, so
//! pytorch.org/memory_viz and PyTorch's `torch/cuda/_memory_viz.py` open it and
//! `cargo xtask replay` replays it.

use std::path::{Path, PathBuf};

use vramlab_snapshot::{Snapshot, write_snapshot};

use crate::{ReportError, write_atomic};

/// The file name of a case's snapshot: `<suite>-<case>.pickle`, every character
/// other than ASCII letters, digits, `-`, `_` and `.` written as `_` (case names
/// hold `/`).
pub fn case_snapshot_file(suite: &str, case: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
    };
    format!("{}-{}.pickle", clean(suite), clean(case))
}

/// Writes `snapshot` as a protocol-2 pickle to `dir/file`, atomically; returns its path.
pub fn write_case_snapshot(dir: &Path, file: &str, snapshot: &Snapshot) -> Result<PathBuf, ReportError> {
    let path = dir.join(file);
    let mut bytes = Vec::new();
    write_snapshot(snapshot, &mut bytes).map_err(|source| ReportError::Io { path: path.clone(), source })?;
    write_atomic(&path, &bytes)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_flat_and_safe() {
        assert_eq!(case_snapshot_file("memory", "train_step_peak"), "memory-train_step_peak.pickle");
        assert_eq!(
            case_snapshot_file("memory", "fragmentation/max_split 64 MiB"),
            "memory-fragmentation_max_split_64_MiB.pickle"
        );
        assert_eq!(case_snapshot_file("a", "../x"), "a-.._x.pickle", "no path separator survives");
    }
}
