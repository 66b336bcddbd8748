//! The `xtask` binary, what `cargo xtask …` runs (the alias in
//! `.cargo/config.toml`): the commands live in the library (`src/lib.rs`).

fn main() -> std::process::ExitCode {
    xtask::main(xtask::Program::Xtask)
}
