//! `cargo xtask check`: compares this build's runs with a baseline's (or, with
//! `--ab`, runs both builds interleaved first: `ab_cmd.rs`) and prints the
//! verdict (terminal table, `regressions.md`, GitHub annotations, JSON,
//! exports); also the baseline handling `bench --save-baseline/--append/--baseline` use.
//! Exit status: 0 no regression, 1 a regression, 2 comparison impossible.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, ValueEnum};
use vramlab_reports::check::{self, CheckConfig, CompareOptions, Design, KnownNoise, Labels, RunSet, export, output};
use vramlab_reports::history::History;

pub const DEFAULT_BASELINE_DIR: &str = "target/vramlab/baselines";
const DEFAULT_RESULTS: &str = "target/vramlab/results.json";

pub const ABOUT: &str = "Compare a finished run with a baseline: exact memory gates, statistical time gates";

pub const LONG_ABOUT: &str = "\
Compare this build's runs (results.json, or runs.json from `bench --repeat N`) with a
baseline's: cases are matched by suite, case name and parameters, per device. Memory figures
(every _bytes metric, the memory peaks, segment and out-of-memory counts, OOM batch sizes) are
exact: an increase beyond the tolerance (default 0 bytes) is a regression. Times are judged
from several runs: a seeded hierarchical bootstrap over runs, then over each run's samples,
gives the ratio new/old an interval that holds the noise between runs (Student's t on its
standard error, so few runs give a wide interval); a regression only when the whole interval
lies above the noise threshold (default 5 %) and the p-value agrees after Benjamini–Hochberg
over all time comparisons. With one run on each side the noise between runs is unknown and
times are not judged: make the baseline several runs (`bench --repeat N --save-baseline`,
`--append`). Times are not compared across machines unless --force-times.

--ab BASE_BIN runs the baseline build's binary and this build interleaved, suite by suite,
alternating which goes first, for --pairs rounds in one sitting, then judges each time from
the pairs' ratios: drift that moves both builds alike cancels. The way to gate on a noisy
shared machine.

Thresholds per suite, case or metric come from vramlab.toml at the repository root (see the
README). Writes regressions.md beside the results (for $GITHUB_STEP_SUMMARY); prints GitHub
annotations when GITHUB_ACTIONS=true.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask check --baseline main                      target/vramlab/results.json vs baseline `main`
  cargo xtask check --baseline old/results.json --from new/results.json --json
  cargo xtask check --baseline main --export bmf --export gab
  cargo xtask check --baseline main --from target/vramlab/runs.json   after `bench --repeat 3`
  cargo xtask check --ab ../base/target/release/vramlab --quick --pairs 5
                                                         A/B: the base build and this one, interleaved

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

    /// A history database (`bench` keeps one in its --out folder): where its
    /// runs of one build show a time noisier between runs than the runs compared
    /// do, the comparison takes the history's noise
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Bmf,
    Gab,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The baseline: a NAME saved with `bench --save-baseline NAME` (in --baseline-dir) or a results or runs FILE
    #[arg(long, value_name = "NAME|FILE", required_unless_present = "ab")]
    pub baseline: Option<String>,

    /// The runs to check: results.json (one run) or runs.json (`bench --repeat N`)
    #[arg(long, value_name = "FILE", default_value = DEFAULT_RESULTS)]
    pub from: PathBuf,

    /// The baseline's and --from's runs are A/B pairs (run i of each ran together): judge the pairs' ratios
    #[arg(long, requires = "baseline")]
    pub paired: bool,

    /// A/B: run the baseline build BASE_BIN (a vramlab or xtask binary) and this build
    /// interleaved in one sitting, then compare them pair by pair
    #[arg(long, value_name = "BASE_BIN", conflicts_with_all = ["baseline", "paired"])]
    pub ab: Option<PathBuf>,

    #[command(flatten)]
    pub ab_options: crate::ab_cmd::AbOptions,

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

/// Stores `runs` as baseline `name` in `dir` — replacing it, or with
/// `append` adding them to its runs (same commit, machine and kind); returns
/// its path and how many runs it holds. Errors are messages for exit 2.
pub fn save_baseline(runs: &RunSet, name: &str, dir: &Path, append: bool) -> Result<(PathBuf, usize), String> {
    let path = dir.join(format!("{name}.json"));
    let set = if append && path.is_file() {
        let mut set = check::load_runs(&path, "baseline").map_err(|e| e.to_string())?;
        for r in runs.runs() {
            set.append(r.clone()).map_err(|e| format!("baseline {}: cannot append: {e}", path.display()))?;
        }
        set
    } else {
        runs.clone()
    };
    let json = set.to_json().map_err(|e| format!("serializing the baseline: {e}"))?;
    vramlab_reports::write_atomic(&path, &json).map_err(|e| e.to_string())?;
    Ok((path, set.len()))
}

/// The thresholds and how the two sides' runs relate.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: CheckConfig,
    pub design: Design,
}

/// Loads the settings: --config FILE, else ./vramlab.toml when present; independent runs.
pub fn load_config(path: Option<&Path>) -> Result<Settings, check::ConfigError> {
    let config = match path {
        Some(p) => CheckConfig::load(p),
        None => CheckConfig::discover(Path::new(".")),
    }?;
    Ok(Settings { config, design: Design::Runs })
}

/// `cargo xtask check`.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let Some(baseline_arg) = &args.baseline else {
        return crate::ab_cmd::run(args);
    };
    let baseline_path = resolve_baseline(baseline_arg, &args.baseline_dir);
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

/// The history's between-run noise of every time some build other than the
/// compared ones (`exclude`: their commits) ran twice or more.
fn known_noise(path: &Path, exclude: &[&str]) -> Result<KnownNoise, String> {
    let history = History::open_existing(path).map_err(|e| e.to_string())?;
    let floors = history.noise_floors_without(" time", HISTORY_RUNS, exclude).map_err(|e| e.to_string())?;
    let builds = floors.iter().map(|f| f.builds).max().unwrap_or(0);
    eprintln!(
        "the history {} knows the between-run noise of {} time figure(s), from up to {builds} other build(s) run more than once",
        path.display(),
        floors.len()
    );
    Ok(KnownNoise::new(&floors))
}

/// How many of the history's latest runs teach the noise.
const HISTORY_RUNS: usize = 500;

/// Prints why the comparison could not be made; exit status 2.
pub fn impossible(message: &str) -> u8 {
    let _ = writeln!(std::io::stderr(), "error: the comparison could not be made: {message}");
    2
}

/// Compares and writes every output; returns the exit status (0 or 1).
pub fn report(
    baseline: &RunSet,
    baseline_path: &Path,
    current: &RunSet,
    current_path: &Path,
    cfg: &Settings,
    opts: &CheckOptions,
    out_dir: &Path,
) -> Result<u8> {
    let labels = Labels { baseline: baseline_path.display().to_string(), current: current_path.display().to_string() };
    // The compared builds' own runs in the history must not teach the noise.
    let commits: Vec<&str> = [baseline, current]
        .iter()
        .flat_map(|set| set.runs().iter().filter_map(|r| r.environment.git_commit.as_deref()))
        .collect();
    let known_noise = match &opts.history {
        None => None,
        Some(path) => match known_noise(path, &commits) {
            Ok(k) => Some(k),
            Err(message) => return Ok(impossible(&message)),
        },
    };
    let options = CompareOptions { force_times: opts.force_times, design: cfg.design, known_noise };
    let comparison = check::compare_runs(baseline, current, &cfg.config, options, labels);
    let md = output::write_markdown(out_dir, &comparison)?;
    let mut written = vec![md];
    for f in &opts.export {
        let format = match f {
            ExportFormat::Bmf => export::Format::Bmf,
            ExportFormat::Gab => export::Format::Gab,
        };
        let path = out_dir.join(format.file_name());
        let last = current.runs().last().unwrap_or(current.first());
        vramlab_reports::write_atomic(&path, export::render(format, last).as_bytes())?;
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
