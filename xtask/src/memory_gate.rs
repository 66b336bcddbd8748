//! The memory gate of a PyTorch program: `vramlab check --baseline A --from B`
//! where A and B are snapshots, `record` output folders or saved memory
//! baselines, and `record --save-baseline` / `--baseline`. A side's figures
//! (`vramlab_snapshot::snapshot_figures`: per rank and device, with PyTorch's
//! own `memory_stats()` where a `NAME.stats.json` lies beside the pickle) are
//! compared by `vramlab_reports::check::memory` and written by the bench gate's
//! writers (`compare::emit`). Baselines are stored as bench baselines are:
//! `--baseline-dir/NAME.json` (a memory-figures document).
//! Exit status: 0 no regression, 1 a regression, 2 comparison impossible.

use std::fs::File;
use std::io::{BufReader, Read as _};
use std::path::{Path, PathBuf};

use anyhow::Result;
use vramlab_reports::check::{Labels, memory};
use vramlab_snapshot::{self as snapshot, FIGURES_KIND, FIGURES_VERSION, MemoryFigures};

use crate::cli::CheckOptions;
use crate::compare::{emit, impossible, load_config};

/// Whether `path` is a memory-gate side: a folder, a PyTorch snapshot, or a
/// saved memory-figures document.
pub fn is_memory_side(path: &Path) -> bool {
    if path.is_dir() {
        return true;
    }
    let mut head = [0u8; 256];
    let n = File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    snapshot::is_pickle(&head[..n]) || String::from_utf8_lossy(&head[..n]).contains(FIGURES_KIND)
}

/// The snapshots of a folder `record` wrote into: each process's final dump
/// (`-oomN` dumps are the same process earlier; `.part` files unfinished), sorted.
fn final_snapshots(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pickle") && !crate::ranks_cmd::is_oom_dump(p))
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(format!("{} holds no snapshot (*.pickle) to compare", dir.display()));
    }
    Ok(v)
}

/// The figures of the snapshots `paths` (`source` names them), each with the
/// `memory_stats()` PyTorch read beside it when there is one.
pub fn figures_of(paths: &[PathBuf], source: String) -> Result<MemoryFigures, String> {
    let mut ranks = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let f = File::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
        let snap = snapshot::read_snapshot(BufReader::with_capacity(1 << 20, f))
            .map_err(|e| format!("{shown} is not a readable PyTorch memory snapshot: {e}"))?;
        let stats_path = snapshot::stats_file_beside(path);
        let stats = match std::fs::read_to_string(&stats_path) {
            Ok(text) => Some(
                snapshot::read_pytorch_stats(&stats_path.display().to_string(), &text).map_err(|e| e.to_string())?,
            ),
            Err(_) => None,
        };
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(shown.clone());
        let rank = crate::ranks_cmd::rank_of(path);
        ranks.extend(
            snapshot::snapshot_figures(&file, rank, &snap, stats.as_ref())
                .map_err(|e| format!("cannot replay {shown}: {e}"))?,
        );
    }
    Ok(MemoryFigures::new(source, ranks))
}

/// One side: a folder's final snapshots, a snapshot, or a saved document.
pub fn load_side(path: &Path) -> Result<MemoryFigures, String> {
    let shown = path.display().to_string();
    if path.is_dir() {
        return figures_of(&final_snapshots(path)?, shown);
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if snapshot::is_pickle(&bytes) {
        return figures_of(&[path.to_path_buf()], shown);
    }
    let doc: MemoryFigures = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{shown} is neither a snapshot, a folder of them, nor a memory baseline: {e}"))?;
    if doc.kind != FIGURES_KIND || doc.version > FIGURES_VERSION {
        return Err(format!(
            "{shown} is a {} document of version {} (this build reads {FIGURES_KIND} up to version {FIGURES_VERSION})",
            doc.kind, doc.version
        ));
    }
    Ok(doc)
}

/// Stores `figures` as memory baseline `name` in `dir`; returns its path.
pub fn save(figures: &MemoryFigures, name: &str, dir: &Path) -> Result<PathBuf, String> {
    let path = dir.join(format!("{name}.json"));
    let json = serde_json::to_vec_pretty(figures).map_err(|e| format!("serializing the baseline: {e}"))?;
    vramlab_reports::write_atomic(&path, &json).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Compares `current` (from `current_label`) with the baseline at
/// `baseline_path`, writes every output into `out_dir`; the exit status.
pub fn check(
    baseline_path: &Path,
    current: Result<MemoryFigures, String>,
    current_label: &str,
    opts: &CheckOptions,
    out_dir: &Path,
    on_stderr: bool,
) -> Result<u8> {
    if !opts.export.is_empty() {
        return Ok(impossible("--export writes bench results in other tools' formats; snapshots have none"));
    }
    let prepared = (|| {
        let cfg = load_config(opts.config.as_deref()).map_err(|e| e.to_string())?;
        let baseline = load_side(baseline_path).map_err(|e| format!("the baseline: {e}"))?;
        Ok::<_, String>((cfg, baseline, current?))
    })();
    let (cfg, baseline, current) = match prepared {
        Ok(p) => p,
        Err(message) => return Ok(impossible(&message)),
    };
    let labels = Labels { baseline: baseline_path.display().to_string(), current: current_label.to_owned() };
    let comparison = memory::compare_memory(&baseline, &current, &cfg.config, labels);
    if comparison.rows.is_empty() {
        return Ok(impossible(&format!(
            "no rank and device of {current_label} is in the baseline {} (ranks are matched by the -rankR in the \
             file names, and by device)",
            baseline_path.display()
        )));
    }
    emit(&comparison, opts, out_dir, Vec::new(), on_stderr)
}
