//! Shared by the examples: `--device NAME` from the command line.

use vramlab_engine::device::Device;

/// The device named by `--device NAME` (default `cpu`); exits with the error's
/// message when it cannot be had.
pub fn device_from_args() -> Device {
    let args: Vec<String> = std::env::args().collect();
    let name = match args.iter().position(|a| a == "--device") {
        Some(i) => match args.get(i + 1) {
            Some(n) => n.clone(),
            None => {
                eprintln!("error: --device needs a value (cpu, cpu:N, cuda, cuda:N)");
                std::process::exit(2);
            }
        },
        None => "cpu".to_owned(),
    };
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: {} [--device cpu|cpu:N|cuda|cuda:N]", args[0]);
        std::process::exit(0);
    }
    match Device::parse(&name) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
