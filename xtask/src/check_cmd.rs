//! `cargo xtask check`: compares this build's runs with a baseline's (or, with
//! `--ab`, runs both builds interleaved first: `ab_cmd.rs`) and prints the
//! verdict (terminal table, `regressions.md`, GitHub annotations, JSON,
//! exports: `compare.rs`). With snapshots or `record` folders, the memory gate
//! of a PyTorch program (`memory_gate.rs`).
//! Exit status: 0 no regression, 1 a regression, 2 comparison impossible.

use std::path::Path;

use anyhow::Result;
use vramlab_reports::check::{self, Design};

use crate::cli::CheckArgs;
use crate::compare::{impossible, load_config, report, resolve_baseline};

/// `cargo xtask check`.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let Some(baseline_arg) = &args.baseline else {
        return crate::ab_cmd::run(args);
    };
    let baseline_path = resolve_baseline(baseline_arg, &args.baseline_dir);
    // Snapshots, `record` folders or a saved memory baseline: the memory gate.
    if crate::memory_gate::is_memory_side(&args.from) {
        let current = crate::memory_gate::load_side(&args.from);
        let out_dir = args.out.clone().unwrap_or_else(|| memory_out_dir(&args.from));
        let label = args.from.display().to_string();
        return crate::memory_gate::check(&baseline_path, current, &label, &args.options, &out_dir, false);
    }
    let prepared = (|| {
        let cfg = load_config(args.options.config.as_deref()).map_err(|e| e.to_string())?;
        let baseline = check::load_runs(&baseline_path, "baseline").map_err(|e| e.to_string())?;
        let current = check::load_runs(&args.from, "results").map_err(|e| e.to_string())?;
        if args.paired && baseline.len() != current.len() {
            return Err(format!(
                "--paired: the baseline has {} runs and {} has {}; A/B pairs need as many on each side",
                baseline.len(),
                args.from.display(),
                current.len()
            ));
        }
        Ok::<_, String>((cfg, baseline, current))
    })();
    let (mut cfg, baseline, current) = match prepared {
        Ok(p) => p,
        Err(message) => return Ok(impossible(&message)),
    };
    cfg.design = if args.paired { Design::Pairs } else { Design::Runs };
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| args.from.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).into());
    report(&baseline, &baseline_path, &current, &args.from, &cfg, &args.options, &out_dir)
}

/// Where `regressions.md` goes for snapshots: a `record` folder itself, else
/// the snapshot's folder.
fn memory_out_dir(from: &Path) -> std::path::PathBuf {
    if from.is_dir() {
        return from.to_path_buf();
    }
    from.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).into()
}
