//! `cargo xtask bench --export-snapshot DIR`: a real case's recording becomes
//! `DIR/<suite>-<case>.pickle`, which vramlab replays with the fidelity check
//! agreeing and — where python3 and PyTorch's `torch/cuda/_memory_viz.py` are
//! present (`VRAMLAB_MEMORY_VIZ`, default `target/memory_viz/_memory_viz.py`, which
//! `scripts/fetch_memory_viz.sh` fetches; missing in CI, the test fails) —
//! PyTorch's own viewer reads (`stats`, `trace`, `segments`, `segsum`).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
mod terminal;
use common::{memory_viz, run_viz, segments_and_segsum};

fn xtask(args: &[&str]) -> Output {
    terminal::fits(Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_memory_viz(viz: &Path, pickle: &Path) {
    let stats = run_viz(viz, &["stats"], pickle);
    assert!(stats.contains("segments: 2") && stats.contains("total_reserved: 128.0MiB"), "{stats}");
    let trace = run_viz(viz, &["trace"], pickle);
    assert!(trace.contains("Device 0") && trace.contains("= cudaMalloc(") && trace.contains("64.0MiB"), "{trace}");
    let segments = segments_and_segsum(viz, pickle);
    assert!(segments.contains("stream_0;seg_"), "{segments}");
}

#[test]
fn a_bench_case_exports_as_a_snapshot_that_replays_and_memory_viz_reads() {
    let dir = std::env::temp_dir().join(format!("vramlab-bench-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let snaps = dir.join("snapshots");
    let o = xtask(&[
        "bench",
        "--suite",
        "devices",
        "--quick",
        "--device",
        "cpu",
        "--out",
        dir.join("out").to_str().unwrap(),
        "--export-snapshot",
        snaps.to_str().unwrap(),
        "--export-case",
        "to_roundtrip/64MiB",
        "--export-case",
        "devices/no_such_case",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("memory snapshots: 1 written to"), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("--export-case devices/no_such_case: no profiled case"), "{}", text(&o.stderr));
    let files: Vec<String> =
        std::fs::read_dir(&snaps).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files, ["devices-to_roundtrip_64MiB.pickle"]);
    let pickle = snaps.join(&files[0]);

    // vramlab reads it back; the replay reproduces the recorded segments and the
    // peak the results file reports for the case.
    let o = xtask(&["replay", pickle.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["fidelity"]["first_segment_disagreement"], Value::Null, "{r}");
    assert_eq!(r["fidelity"]["final_segments_disagreement"], Value::Null, "{r}");
    assert!(r["fidelity"]["recorded_segment_events"].as_u64().unwrap() > 0, "{r}");
    let results: Value = serde_json::from_slice(&std::fs::read(dir.join("out/results.json")).unwrap()).unwrap();
    let case = results["suites"][0]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "to_roundtrip/64MiB")
        .unwrap()
        .clone();
    assert_eq!(r["peak_allocated_bytes"], case["memory"]["peak_allocated_bytes"], "{r}");
    assert_eq!(r["peak_reserved_bytes"], case["memory"]["peak_reserved_bytes"], "{r}");

    match memory_viz() {
        Some(viz) => run_memory_viz(&viz, &pickle),
        None => {
            eprintln!("{}", common::SKIPPED)
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn export_case_needs_export_snapshot() {
    let o = xtask(&["bench", "--export-case", "train_step_peak"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    assert!(text(&o.stderr).contains("--export-snapshot"), "{}", text(&o.stderr));
}
