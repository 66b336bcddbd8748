//! The help of both binaries, the top level's and every command's, short
//! (`-h`) and long (`--help`): it prints, exits 0, and every line fits in 100
//! columns (`terminal::fits`; clap wraps the paragraphs, the examples are
//! written to fit).

use std::process::Command;

mod terminal;

const COMMANDS: [&str; 9] = ["bench", "replay", "whatif", "gpu-check", "check", "history", "report", "record", "diff"];

#[test]
fn every_help_fits_in_100_columns() {
    for bin in [env!("CARGO_BIN_EXE_xtask"), env!("CARGO_BIN_EXE_vramlab")] {
        for flag in ["-h", "--help"] {
            let top = [vec![flag]];
            let commands = COMMANDS.iter().map(|c| vec![*c, flag]);
            for args in top.into_iter().chain(commands) {
                let o = terminal::fits(Command::new(bin).args(&args).output().unwrap());
                assert!(o.status.success(), "{bin} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
                assert!(String::from_utf8_lossy(&o.stdout).contains("Usage:"), "{bin} {args:?}");
            }
        }
    }
}
