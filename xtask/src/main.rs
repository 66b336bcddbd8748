//! vramlab's command line (`cargo xtask …`, or `vramlab …` installed with
//! `cargo install --path xtask --bin vramlab`): the only part of vramlab that talks
//! to the terminal. Commands: `bench`, `replay`, `whatif`, `report`, `gpu-check`,
//! `check`, `history`.
//!
//! Exit status: 0 on success, 1 when the input is bad (the message, on stderr,
//! names the file and line), 2 for usage errors (clap's), from `report` for a
//! bad results file and from `replay`/`whatif` for a `--report` folder that
//! cannot be written, 3 from `gpu-check` when the machine has no GPU. `check`
//! (and `bench --baseline`): 1 on a regression, 2 when the comparison could not
//! be made.

mod bench_cmd;
mod check_cmd;
mod cli;
mod gpu_check;
mod history_cmd;
mod replay_cmd;
mod report_cmd;
mod size;
mod snapshot_cmd;
mod whatif_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

use cli::{Cli, Command};

fn main() -> ExitCode {
    // Run as `vramlab` (the installable binary), the help says so.
    let installed = std::env::args_os()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_stem().map(|s| s == "vramlab"))
        .unwrap_or(false);
    let cli = if installed {
        let matches = Cli::command().name("vramlab").bin_name("vramlab").get_matches();
        match Cli::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        }
    } else {
        Cli::parse()
    };
    let result = match &cli.command {
        Command::Bench(args) => bench_cmd::run(args),
        Command::Replay(args) => replay_cmd::run(args),
        Command::Whatif(args) => whatif_cmd::run(args),
        Command::GpuCheck(args) => gpu_check::run(args),
        Command::Check(args) => check_cmd::run(args),
        Command::History(args) => history_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Nothing sensible is left to do if stderr is gone too.
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(1)
        }
    }
}
