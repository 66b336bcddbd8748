//! vramlab's bench suites: each claim of the GPU guides as a suite of cases,
//! the timing harness that measures them, the results schema they fill, and
//! the charts each suite declares as data to show its claim ([`charts`]).
//!
//! Suites return data; they never print or write files (reports write files,
//! xtask talks to the terminal). A case that fails, panics or overruns its time
//! budget is recorded as failed and the run goes on ([`runner`]).
//!
//! Files:
//! - `src/lib.rs` — this map, the re-exports, every suite (`all_suites`, `suite_by_name`)
//! - `src/suite.rs` — the `Suite` trait, `Case`, `CaseOutput`, `Context`, `Progress`
//! - `src/runner.rs` — runs a suite: each case isolated (errors, panics, overruns), profiled; snapshots to a sink
//! - `src/harness.rs` — timing: warm-up, samples, median and quartiles (`measure`, `measure_each`); a
//!   simulated run's measured region
//! - `src/valgrind.rs` — valgrind's client requests: callgrind's instrumentation on and off around a case's work
//! - `src/schema.rs` — the versioned results (`RunResults` → `SuiteResult` → `CaseResult`), findings, timelines
//! - `src/env.rs` — the machine the run measured
//! - `src/charts.rs` — `declared_charts` and the readers the suites' chart code shares (charts are display's model)
//! - `src/testing.rs` — results to test chart code on (cases, suites, the chart suites' case sets); tests and the
//!   `testing` feature only
//! - `src/suites/mod.rs` — the suites in run order, and one found by its name
//! - `src/suites/common.rs` — what the suites share when they judge (`faster_by`'s margins, a case, a metric)
//! - `src/suites/devices.rs` — the devices and their round trips (no charts of its own)
//! - `src/suites/cpu_vs_gpu.rs`, `src/suites/amp.rs`, `src/suites/autotune.rs`, `src/suites/memory.rs`,
//!   `src/suites/transfer.rs`, `src/suites/input_pipeline.rs`, `src/suites/async_timing.rs`,
//!   `src/suites/allocator.rs` — one suite per claim
//! - `src/suites/cpu_vs_gpu/`, `src/suites/amp/`, `src/suites/autotune/`, `src/suites/memory/`,
//!   `src/suites/transfer/`, `src/suites/input_pipeline/`, `src/suites/async_timing/`,
//!   `src/suites/allocator/` — each suite's `charts.rs`: its charts from its cases
//! - `benches/harness.rs` — criterion: the harness's cost per sample

pub mod charts;
pub mod env;
pub mod harness;
pub mod runner;
pub mod schema;
pub mod suite;
pub mod suites;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod valgrind;

pub use charts::declared_charts;
pub use harness::{HarnessConfig, measure};
pub use runner::{SnapshotSink, run_suite, run_suite_with};
pub use schema::*;
pub use suite::{Case, CaseError, CaseOutput, Context, NoProgress, Progress, Suite};
pub use suites::{all_suites, suite_by_name};
