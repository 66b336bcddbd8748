//! `cargo xtask check`: compares a finished run with a baseline and prints the
//! verdict (terminal table, `regressions.md`, GitHub annotations, JSON,
//! exports); also the baseline handling `bench --save-baseline/--baseline` use.
//! Exit status: 0 no regression, 1 a regression, 2 comparison impossible.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Args, ValueEnum};
use vramlab_reports::check::{self, CheckConfig, Labels, export, output};
use vramlab_suites::RunResults;

pub const DEFAULT_BASELINE_DIR: &str = "target/vramlab/baselines";
const DEFAULT_RESULTS: &str = "target/vramlab/results.json";

pub const ABOUT: &str = "Compare a finished run with a baseline: exact memory gates, statistical time gates";

pub const LONG_ABOUT: &str = "\
Compare a finished run (results.json) with a baseline run: cases are matched by suite, case
name and parameters, per device. Memory figures (every _bytes metric, the memory peaks,
segment and out-of-memory counts, OOM batch sizes) are exact: an increase beyond the
tolerance (default 0 bytes) is a regression. Times are judged from the raw samples: a seeded
bootstrap interval of the ratio of medians (new/old) must lie wholly above the noise threshold
(default 5 %), and the Mann–Whitney U test must agree after Benjamini–Hochberg over all time
comparisons; otherwise the time is unchanged or inconclusive, with the smallest slowdown the
run could have detected. Times are not compared across machines unless --force-times.

Thresholds per suite, case or metric come from vramlab.toml at the repository root (see the
README). Writes regressions.md beside the results (for $GITHUB_STEP_SUMMARY); prints GitHub
annotations when GITHUB_ACTIONS=true.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask check --baseline main                      target/vramlab/results.json vs baseline `main`
  cargo xtask check --baseline old/results.json --from new/results.json --json
  cargo xtask check --baseline main --export bmf --export gab

Exit status: 0 when nothing regressed; 1 when something did; 2 when the comparison could not be
made (missing, corrupt, truncated or incompatible baseline or results, a bad vramlab.toml): the
message names the file and what is wrong.";

/// Options shared by `check` and `bench --baseline`.
#[derive(Debug, Args)]
pub struct CheckOptions {
    /// Compare times even when the two runs come from different machines
    #[arg(long)]
    pub force_times: bool,

    /// Also write the run in another tool's format into the output folder (repeatable):
    /// bmf (Bencher Metric Format, bmf.json), gab (github-action-benchmark customSmallerIsBetter, gab.json)
    #[arg(long, value_name = "FORMAT", value_enum)]
    pub export: Vec<ExportFormat>,

    /// Thresholds file [default: vramlab.toml in the current folder, if there is one]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the comparison as JSON on stdout instead of the table
    #[arg(long)]
    pub json: bool,

    /// List unchanged figures too
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Bmf,
    Gab,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The baseline: a NAME saved with `bench --save-baseline NAME` (in --baseline-dir) or a results FILE
    #[arg(long, value_name = "NAME|FILE")]
    pub baseline: String,

    /// The run to check
    #[arg(long, value_name = "FILE", default_value = DEFAULT_RESULTS)]
    pub from: PathBuf,

    /// Where named baselines are stored
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BASELINE_DIR)]
    pub baseline_dir: PathBuf,

    /// Where regressions.md and exports go [default: the folder of --from]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub options: CheckOptions,
}

/// A baseline name: letters, digits, `.`, `_`, `-` (it becomes a file name).
pub fn parse_baseline_name(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) && !s.starts_with('.') {
        Ok(s.to_owned())
    } else {
        Err(format!("'{s}' is not a baseline name: use letters, digits, '.', '_' and '-' (e.g. main, v0.3)"))
    }
}

/// NAME → DIR/NAME.json; anything that looks like a path (a separator or a
/// `.json` ending) is used as it is.
pub fn resolve_baseline(arg: &str, dir: &Path) -> PathBuf {
    if arg.ends_with(".json") || arg.contains('/') || arg.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(arg)
    } else {
        dir.join(format!("{arg}.json"))
    }
}

/// Stores `results` as baseline `name` in `dir`; returns its path.
pub fn save_baseline(results: &RunResults, name: &str, dir: &Path) -> Result<PathBuf> {
    let path = dir.join(format!("{name}.json"));
    let json = serde_json::to_vec_pretty(results).context("serializing the baseline")?;
    vramlab_reports::write_atomic(&path, &json)?;
    Ok(path)
}

/// Loads the settings: --config FILE, else ./vramlab.toml when present.
pub fn load_config(path: Option<&Path>) -> Result<CheckConfig, check::ConfigError> {
    match path {
        Some(p) => CheckConfig::load(p),
        None => CheckConfig::discover(Path::new(".")),
    }
}

/// `cargo xtask check`.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let baseline_path = resolve_baseline(&args.baseline, &args.baseline_dir);
    let prepared = (|| {
        let cfg = load_config(args.options.config.as_deref()).map_err(|e| e.to_string())?;
        let baseline = check::load_results(&baseline_path, "baseline").map_err(|e| e.to_string())?;
        let current = check::load_results(&args.from, "results").map_err(|e| e.to_string())?;
        Ok::<_, String>((cfg, baseline, current))
    })();
    let (cfg, baseline, current) = match prepared {
        Ok(p) => p,
        Err(message) => return Ok(impossible(&message)),
    };
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| args.from.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).into());
    report(&baseline, &baseline_path, &current, &args.from, &cfg, &args.options, &out_dir)
}

/// Prints why the comparison could not be made; exit status 2.
pub fn impossible(message: &str) -> u8 {
    let _ = writeln!(std::io::stderr(), "error: the comparison could not be made: {message}");
    2
}

/// Compares and writes every output; returns the exit status (0 or 1).
pub fn report(
    baseline: &RunResults,
    baseline_path: &Path,
    current: &RunResults,
    current_path: &Path,
    cfg: &CheckConfig,
    opts: &CheckOptions,
    out_dir: &Path,
) -> Result<u8> {
    let labels = Labels { baseline: baseline_path.display().to_string(), current: current_path.display().to_string() };
    let comparison = check::compare(baseline, current, cfg, opts.force_times, labels);
    let md = output::write_markdown(out_dir, &comparison)?;
    let mut written = vec![md];
    for f in &opts.export {
        let format = match f {
            ExportFormat::Bmf => export::Format::Bmf,
            ExportFormat::Gab => export::Format::Gab,
        };
        let path = out_dir.join(format.file_name());
        vramlab_reports::write_atomic(&path, export::render(format, current).as_bytes())?;
        written.push(path);
    }
    if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
        // The runner reads workflow commands from both streams; with --json,
        // stdout carries only the JSON.
        let annotations = output::annotations(&comparison);
        if opts.json {
            eprint!("{annotations}");
        } else {
            print!("{annotations}");
        }
    }
    let mut stdout = std::io::stdout().lock();
    if opts.json {
        writeln!(stdout, "{}", output::json(&comparison)?)?;
    } else {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        write!(stdout, "{}", output::terminal(&comparison, opts.all, colour))?;
    }
    drop(stdout);
    for p in written {
        eprintln!("wrote {}", p.display());
    }
    Ok(comparison.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_names_and_paths() {
        assert_eq!(resolve_baseline("main", Path::new("b")), PathBuf::from("b/main.json"));
        assert_eq!(resolve_baseline("old/results.json", Path::new("b")), PathBuf::from("old/results.json"));
        assert_eq!(resolve_baseline("x.json", Path::new("b")), PathBuf::from("x.json"));
        assert!(parse_baseline_name("v0.3-rc_1").is_ok());
        assert!(parse_baseline_name("../main").unwrap_err().contains("not a baseline name"));
        assert!(parse_baseline_name("").is_err());
    }
}
