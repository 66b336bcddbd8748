//! vramlab's command line as a library: every command (`bench`, `replay`,
//! `whatif`, `diff`, `report`, `gpu-check`, `check`, `history`, `record`, `estimate`) and [`main`], which
//! parses the arguments and runs one. Two thin binaries call it: `xtask`
//! (`src/main.rs`, what `cargo xtask …` runs) and `vramlab`
//! (`src/bin/vramlab.rs`, installable with `cargo install --path xtask --bin
//! vramlab`). The only part of vramlab that talks to the terminal.
//!
//! Exit status: 0 on success, 1 when the input is bad (the message, on stderr,
//! names the file and line), 2 for usage errors (clap's), from `report` for a
//! bad results file and from `replay`/`whatif`/`diff` for a `--report` folder that
//! cannot be written, 3 from `gpu-check` when the machine has no GPU. `record`:
//! the recorded program's status (128 + N for signal N; 127 command not
//! found, 126 not runnable). `estimate`: 2 when the program was refused (an op
//! that cannot run without a GPU), 1 when it failed. `check`
//! (and `bench --baseline`): 1 on a regression, 2 when the comparison could not
//! be made.
//!
//! The files (paths from the crate's root):
//! - `src/lib.rs` — the modules, [`main`], [`run`] and [`check_args`].
//! - `src/api.rs` — `replay`, `whatif`, `diff` and `record`'s report in-process, their
//!   input a file or bytes in memory, their output the `--json` document: what the
//!   Python package (`../python/`) wraps.
//! - `src/main.rs`, `src/bin/vramlab.rs` — the two binaries, `xtask` and `vramlab`.
//! - `src/cli/` — the command line's shape: clap's definitions and help text,
//!   one file per command's flags; the commands import their flags from it.
//! - `src/output.rs` — stdout, prose wrapped to 100 columns, the `--report` folder's check.
//! - `src/size.rs` — size arguments (`24GiB`, `1.5GiB`, plain bytes).
//! - `src/bench_cmd.rs` — `bench`: the suites with progress bars, results, history,
//!   report and short summary; `src/snapshot_export.rs` — its `--export-snapshot`;
//!   `src/simulate.rs` — its `--simulate` (the suites under callgrind, figures per case).
//! - `src/report_cmd.rs` — `report`: the report from a results file; the bench's summary.
//! - `src/replay_cmd.rs` — `replay` of a trace; `src/snapshot_cmd.rs` — of a PyTorch
//!   snapshot; `src/ranks_cmd.rs` — of several (a job's ranks).
//! - `src/whatif_cmd.rs` — `whatif`: a snapshot under other settings, the recommendation.
//! - `src/diff_cmd.rs` — `diff`: two snapshots or two results files compared.
//! - `src/estimate_cmd.rs` — `estimate -- CMD`: the program captured with no GPU
//!   (`src/capture/`), replayed: peaks, the OOM point, the modelled requests, `--out`;
//!   `src/estimate_search.rs` — its `--search`, bisection over captures.
//!   `src/estimate_setup.rs` — what the two share: the set-up, a capture read, the head lines.
//! - `src/record_cmd.rs` — `record -- CMD`: runs CMD with `src/record_hook.py`, then
//!   replays and reports every snapshot written.
//! - `src/check_cmd.rs` — `check --baseline`; `src/ab_cmd.rs` — `check --ab`, the A/B
//!   sitting; `src/compare.rs` — what they and `bench --baseline` share: baselines,
//!   thresholds, the comparison and its outputs.
//! - `src/memory_gate.rs` — the memory gate of PyTorch programs: `check` on snapshots or
//!   `record` folders, `record --save-baseline`/`--baseline`.
//! - `src/history_cmd.rs` — `history`: trends with change points, `--import`, `--noise`.
//! - `src/gpu_check.rs` — `gpu-check`: the GPU test bundle, built and run.
//! - `src/capture/` — `estimate`'s capture: the program run with no GPU under a fake CUDA
//!   runtime (`fakecuda/fakecuda.rs`, built by `build.rs`) and `capture/hook.py`, every
//!   request the CUDA caching allocator would receive written as a raw capture pickle.
//! - `src/sitecustomize_chain.py` — what the two `sitecustomize.py` hooks share (written
//!   before each): running the `sitecustomize` a hook hides.
//! - `tests/` — end-to-end tests of the binaries (`terminal/` checks every line
//!   fits in 100 columns; `common/` runs PyTorch's `_memory_viz.py`).

mod ab_cmd;
pub mod api;
mod bench_cmd;
pub mod capture;
mod check_cmd;
mod cli;
mod compare;
mod diff_cmd;
mod estimate_cmd;
mod estimate_search;
mod estimate_setup;
mod gpu_check;
mod history_cmd;
mod memory_gate;
mod output;
mod ranks_cmd;
mod record_cmd;
mod replay_cmd;
mod report_cmd;
mod simulate;
mod size;
mod snapshot_cmd;
mod snapshot_export;
mod whatif_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

use cli::{Cli, Command};

/// Which binary runs the commands: the help and usage lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `cargo xtask …` inside the workspace.
    Xtask,
    /// The installed `vramlab` binary.
    Vramlab,
}

/// Whether `args` (the words after the program's name) are a command line
/// `vramlab` accepts, parsed as [`main`] would parse them but not run: `Err`
/// carries clap's message. The documentation's tests check every command they
/// show with it.
pub fn check_args<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let words = std::iter::once(std::ffi::OsString::from("vramlab")).chain(args.into_iter().map(Into::into));
    Cli::try_parse_from(words).map(drop).map_err(|e| e.to_string())
}

/// Ends the process on what clap says about the command line: help and the
/// version on stdout with status 0 as clap prints them; a usage error on
/// stderr, its lines fitted to 100 columns, with clap's status (2).
fn usage_error(e: &clap::Error) -> ! {
    if !e.use_stderr() {
        e.exit()
    }
    output::eprint_line(e.render().to_string().trim_end());
    std::process::exit(e.exit_code())
}

/// Parses the process's arguments, runs the command and returns its exit status.
pub fn main(program: Program) -> ExitCode {
    ExitCode::from(run(program, std::env::args_os()))
}

/// Parses `argv` (the program's name first, then its arguments), runs the
/// command and returns its exit status: [`main`] on the process's arguments,
/// and the Python package's `vramlab` command (`../python/`) in its own
/// process. Help, the version and usage errors end the process as clap does.
pub fn run<I, T>(program: Program, argv: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = match program {
        Program::Vramlab => Cli::command().name("vramlab").bin_name("vramlab"),
        Program::Xtask => Cli::command(),
    };
    let cli = match command.try_get_matches_from(argv).and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => usage_error(&e),
    };
    for note in cli.command.size_notes() {
        output::eprint_line(&format!("note: {note}"));
    }
    let result = match &cli.command {
        Command::Bench(args) => bench_cmd::run(args),
        Command::Replay(args) => replay_cmd::run(args),
        Command::Whatif(args) => whatif_cmd::run(args),
        Command::GpuCheck(args) => gpu_check::run(args),
        Command::Check(args) => check_cmd::run(args),
        Command::History(args) => history_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Record(args) => record_cmd::run(args),
        Command::Diff(args) => diff_cmd::run(args),
        Command::Estimate(args) => estimate_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Nothing sensible is left to do if stderr is gone too.
            if e.downcast_ref::<output::Located>().is_some() {
                let _ = writeln!(std::io::stderr(), "error: {}", output::error_text(&e));
            } else {
                output::eprint_line(&format!("error: {}", output::error_text(&e)));
            }
            1
        }
    }
}
