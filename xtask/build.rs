//! Builds `fakecuda/fakecuda.rs`, the stand-in for the CUDA runtime and driver that
//! `vramlab estimate`'s capture preloads into the captured program, as a cdylib in
//! `OUT_DIR` with the same rustc (`$RUSTC --crate-type cdylib --target $TARGET`): no C
//! compiler, no CUDA. `src/capture/` embeds it with `include_bytes!`. Linux only:
//! elsewhere nothing is built and the capture says it is unsupported.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=fakecuda/fakecuda.rs");
    println!("cargo::rustc-check-cfg=cfg(vramlab_fakecuda)");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let lib = out.join("libvramlab_fakecuda.so");
    let status = Command::new(&rustc)
        .args(["--edition", "2024", "--crate-type", "cdylib", "--crate-name", "vramlab_fakecuda"])
        .args(["-C", "opt-level=2", "-C", "panic=abort", "-C", "strip=debuginfo", "--target", &target])
        .arg("-o")
        .arg(&lib)
        .arg("fakecuda/fakecuda.rs")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {} to build fakecuda/fakecuda.rs: {e}", rustc.to_string_lossy()));
    assert!(status.success(), "building fakecuda/fakecuda.rs failed ({status}); see rustc's messages above");
    println!("cargo::rustc-cfg=vramlab_fakecuda");
}
