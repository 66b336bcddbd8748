//! vramlab's command line (`cargo xtask …`): the only part of vramlab that talks
//! to the terminal. Commands: `bench`, `replay`, `whatif`, `gpu-check`.
//!
//! Exit status: 0 on success, 1 when the input is bad (the message, on stderr,
//! names the file and line), 2 for usage errors (clap's), 3 from `gpu-check`
//! when the machine has no GPU.

mod bench_cmd;
mod cli;
mod gpu_check;
mod replay_cmd;
mod size;
mod snapshot_cmd;
mod whatif_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Bench(args) => bench_cmd::run(args).map(|()| 0),
        Command::Replay(args) => replay_cmd::run(args).map(|()| 0),
        Command::Whatif(args) => whatif_cmd::run(args).map(|()| 0),
        Command::GpuCheck(args) => gpu_check::run(args),
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
