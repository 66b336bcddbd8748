//! `check`'s flags and help text (`--ab`'s among them), and the options
//! `bench --baseline` shares.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

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

With snapshots — --baseline and --from each a PyTorch snapshot, a `vramlab record` folder or a
memory baseline saved by `record --save-baseline` — it is the memory gate of a PyTorch program:
per rank and device (matched by the -rankR of the file names and by device), peak allocated
and reserved, reserved at the end, cudaMalloc calls, num_alloc_retries, OOMs and fragmentation
at the peak, exactly, then the call paths whose bytes at the allocated peak moved most.

Thresholds per suite, case or metric come from vramlab.toml at the repository root (see the
README). Writes regressions.md beside the results (for $GITHUB_STEP_SUMMARY); prints GitHub
annotations when GITHUB_ACTIONS=true.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask check --baseline main         target/vramlab/results.json vs baseline `main`
  cargo xtask check --baseline old/results.json --from new/results.json --json
  cargo xtask check --baseline main --export bmf --export gab
  cargo xtask check --baseline main --from target/vramlab/runs.json   after `bench --repeat 3`
  cargo xtask check --ab ../base/target/release/vramlab --quick --pairs 5
                                            A/B: the base build and this one, interleaved
  vramlab check --baseline before.pickle --from after.pickle   two PyTorch snapshots
  vramlab check --baseline main --from vramlab-record          a record folder vs memory baseline `main`

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
    /// The baseline: a NAME saved with `bench --save-baseline NAME` or `record --save-baseline NAME` (in
    /// --baseline-dir), a results or runs FILE, or a PyTorch snapshot or `record` folder
    #[arg(long, value_name = "NAME|FILE", required_unless_present = "ab")]
    pub baseline: Option<String>,

    /// The runs to check: results.json (one run) or runs.json (`bench --repeat N`); or a PyTorch
    /// snapshot or `record` folder (the memory gate)
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
    pub ab_options: AbOptions,

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

/// Where the A/B runs go by default.
pub const DEFAULT_AB_DIR: &str = "target/vramlab/ab";

/// The A/B sitting's settings (used with `--ab`).
#[derive(Debug, Args)]
pub struct AbOptions {
    /// With --ab: rounds of the two builds (pairs of runs); at least 2
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=100))]
    pub pairs: u32,

    /// With --ab: this build's binary [default: the running one]
    #[arg(long, value_name = "BIN", requires = "ab")]
    pub candidate: Option<PathBuf>,

    /// With --ab: quick runs (bench --quick)
    #[arg(long, requires = "ab")]
    pub quick: bool,

    /// With --ab: a suite to run (repeatable) [default: every suite of this build]
    #[arg(long = "suite", value_name = "NAME", requires = "ab")]
    pub suites: Vec<String>,

    /// With --ab: the device both builds run on
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    pub device: String,

    /// With --ab: timed samples per case [default: adaptive]
    #[arg(long, value_name = "N", requires = "ab")]
    pub samples: Option<u32>,

    /// With --ab: the seed of every random input
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_names() {
        assert!(parse_baseline_name("v0.3-rc_1").is_ok());
        assert!(parse_baseline_name("../main").unwrap_err().contains("not a baseline name"));
        assert!(parse_baseline_name("").is_err());
    }
}
