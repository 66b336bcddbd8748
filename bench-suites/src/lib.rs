//! vramlab's bench suites: each claim of the GPU guides as a suite of cases,
//! the timing harness that measures them, the results schema they fill, and
//! the charts each suite declares as data to show its claim ([`charts`]).
//!
//! Suites return data; they never print or write files (reports write files,
//! xtask talks to the terminal). A case that fails, panics or overruns its time
//! budget is recorded as failed and the run goes on ([`runner`]).

pub mod charts;
pub mod env;
pub mod harness;
pub mod runner;
pub mod schema;
pub mod suite;
pub mod suites;

pub use charts::declared_charts;
pub use harness::{HarnessConfig, measure};
pub use runner::{SnapshotSink, run_suite, run_suite_with};
pub use schema::*;
pub use suite::{Case, CaseError, CaseOutput, Context, NoProgress, Progress, Suite};

/// Every suite, in the order a full run takes them.
pub fn all_suites() -> Vec<Box<dyn Suite>> {
    suites::all()
}

/// The suite called `name`.
pub fn suite_by_name(name: &str) -> Option<Box<dyn Suite>> {
    all_suites().into_iter().find(|s| s.name() == name)
}
