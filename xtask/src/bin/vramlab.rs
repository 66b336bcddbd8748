//! The `vramlab` binary (`cargo install --path xtask --bin vramlab`): the same commands as
//! `cargo xtask …`, from the library (`src/lib.rs`), under the name vramlab.

fn main() -> std::process::ExitCode {
    xtask::main(xtask::Program::Vramlab)
}
