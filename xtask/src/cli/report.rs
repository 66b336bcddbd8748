//! `report`'s flags and help text.

use std::path::PathBuf;

use clap::Args;

pub const ABOUT: &str = "Render the report (HTML, Markdown, CSV, charts, Perfetto trace) from a results file";

pub const LONG_ABOUT: &str = "\
Render the report of a run from its results.json alone (it may come from another machine):
index.html (self-contained, offline: charts inline, interactive memory timelines), summary.md
(for $GITHUB_STEP_SUMMARY), one tidy CSV per suite, a PNG and an SVG per chart under charts/,
and trace.json (open it in ui.perfetto.dev). With a run history (--history), a Trends section
charts the run's headline figures over the last 20 runs, change points marked. `cargo xtask
bench` writes the same report.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask report --from target/vramlab/results.json
  cargo xtask report --from ci/results.json --out /tmp/report
  cargo xtask report --from ci/results.json --history ci/history.sqlite   with trend charts

Exit status: 0 when the report was written; 2 when the file is not JSON, truncated, of another
schema version or partly unreadable (what could be read is still rendered); 1 when the report
cannot be written.";

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The results file (results.json of `cargo xtask bench`)
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,

    /// Where the report goes
    #[arg(long, value_name = "DIR", default_value = "target/vramlab/report")]
    pub out: PathBuf,

    /// The run history for the Trends section [default: history.sqlite beside --from, else
    /// target/vramlab/history.sqlite, when present]
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
}
