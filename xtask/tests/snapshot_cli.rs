//! End-to-end tests of `cargo xtask replay` on PyTorch memory snapshots: the
//! real binary on the fixtures in tests/data/snapshots and on broken files.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod common;
mod terminal;
use common::{memory_viz, run_viz, segments_and_segsum};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/snapshots").join(name).display().to_string()
}

fn xtask(args: &[&str]) -> Output {
    terminal::fits(Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap())
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_snapshot_is_detected_by_content_and_checked_against_the_recording() {
    // The name says nothing: the content does.
    let copy = std::env::temp_dir().join(format!("vramlab-snapshot-{}.dat", std::process::id()));
    std::fs::copy(fixture("small_p5.pickle"), &copy).unwrap();
    let o = xtask(&["replay", copy.to_str().unwrap()]);
    let _ = std::fs::remove_file(&copy);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("PyTorch memory snapshot, pickle protocol 5"), "{out}");
    assert!(out.contains("fidelity           agrees: 6 segment events"), "{out}");
    assert!(
        out.contains("2 segment(s) of 52.00 MiB and 2 block(s) of 52.00 MiB, rewound from the final segments"),
        "{out}"
    );
    assert!(out.contains("1 block(s), 40.00 MiB allocated in the final segments without an entry"), "{out}");
    assert!(out.contains("peak reserved      126.00 MiB"), "{out}");
}

#[test]
fn json_output_and_the_device_choice() {
    let o = xtask(&["replay", &fixture("multi_device_p4.pickle"), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device"], 1);
    assert_eq!(v["device_chosen"], true);
    assert_eq!(v["protocol"], 4);
    assert_eq!(v["fidelity"]["recorded_segment_events"], 2);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["format"], "pytorch_snapshot");
    let o = xtask(&["replay", &fixture("multi_device_p4.pickle"), "--device", "0"]);
    assert!(stdout(&o).contains("device             0\n"), "{}", stdout(&o));
    let o = xtask(&["replay", &fixture("multi_device_p4.pickle"), "--device", "7"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("device 7 has no trace"), "{}", stderr(&o));
}

#[test]
fn a_capacity_makes_it_run_out_of_memory_where_the_big_tensor_comes() {
    let o = xtask(&["replay", &fixture("small_p4.pickle"), "--capacity", "100MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("out of memory      1 time(s), first at entry"), "{out}");
    assert!(out.contains("alloc of 64.00 MiB"), "{out}");
    assert!(out.contains("fidelity           not checked"), "{out}");
}

#[test]
fn a_truncated_snapshot_is_an_error_naming_the_file_and_the_byte() {
    let bytes = std::fs::read(fixture("small_p2.pickle")).unwrap();
    let path = std::env::temp_dir().join(format!("vramlab-truncated-{}.pickle", std::process::id()));
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let o = xtask(&["replay", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("is not a readable PyTorch memory snapshot") && err.contains("truncated"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn snapshot_flags_on_a_jsonl_trace_are_refused() {
    let path = std::env::temp_dir().join(format!("vramlab-jsonl-{}.jsonl", std::process::id()));
    std::fs::write(&path, "{\"op\":\"alloc\",\"id\":1,\"size\":10}\n").unwrap();
    let o = xtask(&["replay", path.to_str().unwrap(), "--device", "1"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("apply to PyTorch memory snapshots"), "{}", stderr(&o));
}

#[test]
fn whatif_recommends_a_setting_that_fits_where_the_recorded_one_does_not() {
    let o = xtask(&["whatif", &fixture("small_p5.pickle"), "--capacity", "120MiB", "--sweep"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The recorded settings need 126 MiB reserved: out of memory at the 64 MiB tensor.
    assert!(out.contains("recorded: PyTorch defaults"), "{out}");
    assert!(out.contains("The recorded settings run out of memory at entry 22"), "{out}");
    assert!(out.contains("Recommended: PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4"), "{out}");
    assert!(out.contains("fits where the recorded settings do not: peak reserved 118.00 MiB"), "{out}");
    // Who holds memory at the allocated peak: the 40 MiB weight placed before the first entry counts.
    assert!(out.contains("Who holds the allocated peak (after entry 22)"), "{out}");
    assert!(out.contains("115.19 MiB requested in 4 live block(s)"), "{out}");
    assert!(
        out.contains(
            "64.19 MiB   55.7%       2  unknown                     train.py:77:backward <- train.py:41:forward"
        ),
        "{out}"
    );
    // And at the recorded settings' out-of-memory, with the request that failed.
    assert!(out.contains("Who holds the out-of-memory at entry 22"), "{out}");
    assert!(out.contains("the request that failed: 64.00 MiB from train.py:77:backward"), "{out}");
}

/// A real PyTorch recording: the peak's rows name the recording script's own
/// lines, not torch's; the backward pass (C++ frames only) and the categories
/// say what they are; `--json` carries the same rows with their full stacks.
#[test]
fn replay_attributes_the_peak_to_the_users_code() {
    let real =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots/transformer-default.pickle");
    let o = xtask(&["replay", real.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let table = &out[out.find("Who holds the allocated peak").expect("the peak table")..];
    let first_row = table.lines().nth(2).unwrap();
    assert!(
        first_row.contains(
            "activations (inferred)      record_snapshots.py:95:transformer <- record_snapshots.py:111:record_one"
        ),
        "{table}"
    );
    assert!(first_row.contains("[via torch/nn/modules/module.py:"), "{first_row}");
    assert!(table.contains("autograd engine, aten::mm (C++ frames only"), "{table}");
    assert!(table.contains("parameters (inferred)"), "{table}");
    assert!(table.contains("optimizer state (inferred)"), "{table}");
    assert!(!table.lines().take(12).any(|l| l.contains("  linear.py:") || l.contains("  module.py:")), "{table}");
    let o = xtask(&["replay", real.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let peak = &v["attribution"][0];
    assert_eq!(peak["kind"], "allocated_peak");
    assert_eq!(peak["trace_index"], v["peak_allocated_index"]);
    let row = &peak["groups"][0];
    assert_eq!(row["label"], "record_snapshots.py:95:transformer");
    assert_eq!(row["category"], "activation");
    assert_eq!(row["category_source"], "inferred");
    let frames = row["stacks"][0]["frames"].as_array().unwrap();
    assert!(frames.iter().any(|f| f["kind"] == "torch"), "the full stack keeps torch's frames");
    assert!(frames.iter().any(|f| f["kind"] == "native"));
    let total: u64 = peak["groups"].as_array().unwrap().iter().map(|g| g["bytes"].as_u64().unwrap()).sum::<u64>()
        + peak["bytes_not_listed"].as_u64().unwrap();
    assert_eq!(total, peak["total_bytes"].as_u64().unwrap());
}

#[test]
fn whatif_json_lists_every_setting_and_who_holds_the_peak() {
    let o = xtask(&["whatif", &fixture("small_p4.pickle"), "--alloc-conf", "expandable_segments:True", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["recorded"], true);
    assert_eq!(results[0]["replay"]["peak_reserved_bytes"], 126u64 << 20);
    assert_eq!(results[1]["alloc_conf"], "expandable_segments:True");
    // The recording's peak of requested bytes, by the user's call path, largest
    // first; the 40 MiB weight (live before the recording), the 11 MiB buffer,
    // the 64 MiB tensor and the 200 000-byte one live then (the generator's sequence).
    assert_eq!(v["attribution"][0]["kind"], "allocated_peak");
    let holders = v["attribution"][0]["groups"].as_array().unwrap();
    let bytes: Vec<u64> = holders.iter().map(|h| h["bytes"].as_u64().unwrap()).collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
    let total: u64 = bytes.iter().sum();
    assert_eq!(total, (40 + 11 + 64) * 1024 * 1024 + 200_000);
    assert!(v["peak_index"].as_u64().is_some());
    assert_eq!(v["attribution"][0]["trace_index"], v["peak_index"]);
}

#[test]
fn an_exported_replay_is_accepted_by_pytorchs_memory_viz() {
    let dir = std::env::temp_dir().join(format!("vramlab-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pickle = dir.join("replayed.pickle");
    let chrome = dir.join("replayed.json");
    let o = xtask(&[
        "replay",
        &fixture("small_p5.pickle"),
        "--alloc-conf",
        "expandable_segments:True",
        "--export-snapshot",
        pickle.to_str().unwrap(),
        "--chrome-trace",
        chrome.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(snapshot pickle)"), "{}", stdout(&o));
    // The Chrome trace is JSON with counters.
    let v: Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().iter().any(|e| e["ph"] == "C"));
    // vramlab reads its own export back, and its replay agrees with it.
    let o = xtask(&["replay", pickle.to_str().unwrap(), "--json"]);
    let back: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(back["fidelity"]["first_segment_disagreement"], Value::Null, "{back}");
    assert_eq!(back["alloc_conf"], "expandable_segments:True");
    if let Some(viz) = memory_viz() {
        let stats = run_viz(&viz, &["stats"], &pickle);
        // PyTorch's viewer reads the reserved total vramlab's replay of the export ends with.
        assert_eq!(back["final_reserved_bytes"], 134 << 20, "{back}");
        assert!(stats.contains("total_reserved: 134.0MiB"), "{stats}");
        let trace = run_viz(&viz, &["trace"], &pickle);
        assert!(
            // The memory live before the first entry is in the export's segments, not its trace.
            trace.contains("Device 0") && trace.contains("g = seg_3[0:64.0MiB]") && trace.contains("segment_map"),
            "{trace}"
        );
        let segments = segments_and_segsum(&viz, &pickle);
        assert!(segments.contains("active_allocated;"), "{segments}");
    } else {
        eprintln!("{}", common::SKIPPED);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_installable_vramlab_binary_runs_from_any_folder() {
    let dir = std::env::temp_dir();
    let o = Command::new(env!("CARGO_BIN_EXE_vramlab"))
        .current_dir(&dir)
        .args(["whatif", &fixture("small_p4.pickle"), "--capacity", "24GiB"])
        .output()
        .unwrap();
    let o = terminal::fits(o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("recorded: PyTorch defaults"), "{}", stdout(&o));
    let o = terminal::fits(Command::new(env!("CARGO_BIN_EXE_vramlab")).arg("--help").output().unwrap());
    assert!(stdout(&o).contains("Usage: vramlab"), "{}", stdout(&o));
}

/// `replay --json` prints one document whatever the input: a snapshot and a
/// JSON Lines trace give the same keys, and the same figures under the same
/// names (a snapshot's final statistics are `memory_stats`, as a trace's are).
#[test]
fn replay_json_has_one_shape_for_traces_and_snapshots() {
    let snap = xtask(&["replay", &fixture("small_p4.pickle"), "--json"]);
    assert!(snap.status.success(), "{}", stderr(&snap));
    let snap: Value = serde_json::from_slice(&snap.stdout).unwrap();
    let trace_file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/traces/fragmentation.jsonl");
    let trace = xtask(&["replay", trace_file.to_str().unwrap(), "--json"]);
    let trace: Value = serde_json::from_slice(&trace.stdout).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&snap), keys(&trace));
    for v in [&snap, &trace] {
        let stats = v["memory_stats"].as_object().unwrap();
        assert_eq!(stats["reserved_bytes.all.current"], v["final_reserved_bytes"], "{v}");
        assert_eq!(stats["allocated_bytes.all.peak"], v["peak_allocated_bytes"], "{v}");
        assert_eq!(v["devices"][0]["final_reserved_bytes"], v["final_reserved_bytes"]);
    }
    assert!(trace["fidelity"].is_null() && trace["live_at_start"].is_null() && trace["protocol"].is_null());
    assert!(snap["fidelity"].is_object() && snap["live_at_start"].is_object() && snap["lines"].is_null());
}

#[test]
fn several_snapshots_are_one_report_a_row_per_rank_and_device() {
    // Two ranks (named as `record` names them) and a two-device snapshot.
    let dir = std::env::temp_dir().join(format!("vramlab-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r0 = dir.join("host-rank0-pid10.pickle");
    let r1 = dir.join("host-rank1-pid11.pickle");
    std::fs::copy(fixture("small_p5.pickle"), &r0).unwrap();
    std::fs::copy(fixture("medium_p5.pickle"), &r1).unwrap();
    let (r0, r1, multi) = (r0.display().to_string(), r1.display().to_string(), fixture("multi_device_p4.pickle"));
    let o = xtask(&["replay", &r0, &r1, &multi, "--capacity", "200MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("vramlab replay of 4 rank(s) and device(s)"), "{out}");
    assert!(out.contains("imbalance          peak reserved"), "{out}");
    assert!(out.contains("closest to capacity rank "), "{out}");
    let o = xtask(&["replay", &r0, &r1, &multi, "--capacity", "200MiB", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[0]["rank"].as_str(), rows[1]["rank"].as_str()), (Some("0"), Some("1")));
    assert_eq!((rows[2]["device"].as_u64(), rows[3]["device"].as_u64()), (Some(0), Some(1)));
    let peaks: Vec<u64> = rows.iter().map(|r| r["peak_reserved_bytes"].as_u64().unwrap()).collect();
    let (max, min) = (*peaks.iter().max().unwrap(), *peaks.iter().min().unwrap());
    assert_eq!(v["imbalance"]["spread_bytes"].as_u64(), Some(max - min));
    let closest = v["closest_to_capacity"].as_u64().unwrap() as usize;
    assert_eq!(peaks[closest], max, "one capacity for all: the largest peak is the closest");
    assert_eq!(rows[closest]["headroom_bytes"].as_u64(), Some((200 << 20) - max));
    // A file that is not a snapshot is a row saying why, and exit 1; one-file flags are refused.
    let bad = dir.join("notes.txt");
    std::fs::write(&bad, "not a pickle").unwrap();
    let o = xtask(&["replay", &r0, bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("not a readable PyTorch memory snapshot"), "{}", stdout(&o));
    let o = xtask(&["replay", &r0, &r1, "--report", dir.join("r").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("apply to one file"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recorded_oom_replayed_as_a_failure_is_not_called_a_new_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-2.11-h200/oom-backoff.pickle");
    assert!(path.is_file(), "{} is missing", path.display());
    let o = xtask(&["replay", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The recorded failure is replayed as one (inferred limit), and the summary
    // line says the replay refused nothing else, not "never".
    assert!(out.contains("out of memory      only where the recording did: 1 of its 1 OOM failed again"), "{out}");
    // The entry's line is broken to fit 100 columns: read with every run of spaces and breaks as one space.
    let flowing = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flowing.contains("entry 44: request of 512.00 MiB (536870912 bytes) replayed: failed as recorded"),
        "{out}"
    );
}

/// A snapshot piped in (read and replayed without its file's tail) and the
/// same file named (its settings read from the tail first) replay alike; a
/// real PyTorch recording takes the overlapped path (replayed while read).
#[test]
fn a_snapshot_on_stdin_replays_as_the_file_does() {
    use std::io::Write;
    use std::process::Stdio;
    let torch = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots/mlp-default.pickle");
    for path in [PathBuf::from(fixture("small_p4.pickle")), torch] {
        let file = xtask(&["replay", path.to_str().unwrap(), "--json"]);
        assert!(file.status.success(), "{}", stderr(&file));
        let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["replay", "-", "--json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&std::fs::read(&path).unwrap()).unwrap();
        let piped = terminal::fits(child.wait_with_output().unwrap());
        assert!(piped.status.success(), "{}", stderr(&piped));
        let mut a: Value = serde_json::from_slice(&file.stdout).unwrap();
        let mut b: Value = serde_json::from_slice(&piped.stdout).unwrap();
        assert_eq!(b["input"], "<stdin>");
        a["input"] = Value::Null;
        b["input"] = Value::Null;
        // The file's replay found PyTorch's memory_stats beside it; standard input has no beside.
        a["fidelity"]["memory_stats"] = Value::Null;
        assert_eq!(a, b, "{}", path.display());
    }
}

/// `--from-us` drops the entries before it as the file is read, and says so.
#[test]
fn a_window_is_applied_while_reading() {
    let path = fixture("medium_p5.pickle");
    let whole: Value = serde_json::from_slice(&xtask(&["replay", &path, "--json"]).stdout).unwrap();
    let entries = whole["entries"].as_u64().unwrap();
    // The medium fixture's entries are 3 µs apart from 1.7e15 µs.
    let o = xtask(&["replay", &path, "--from-us", "1700000000004500"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let v: Value =
        serde_json::from_slice(&xtask(&["replay", &path, "--from-us", "1700000000004500", "--json"]).stdout).unwrap();
    let before = v["entries_before_window"].as_u64().unwrap();
    assert!(before > 0 && before < entries, "{v}");
    assert_eq!(v["entries"].as_u64().unwrap() + before, entries);
    assert!(out.contains(&format!("before --from-us   {before} entries, dropped while reading")), "{out}");
    assert_eq!(whole["entries_before_window"], Value::Null);
}

/// Every real recording the repository holds with PyTorch's `memory_stats()`
/// beside it (`NAME.stats.json`): `replay` finds the file, compares every key
/// and says so in its fidelity line; the JSON holds the comparison.
#[test]
fn replay_compares_every_memory_stats_key_with_the_stats_file_beside_the_pickle() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let mut seen = 0;
    for dir in ["torch-snapshots", "torch-2.11-h200"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "pickle") {
                continue;
            }
            seen += 1;
            let p = path.to_str().unwrap();
            let out = stdout(&xtask(&["replay", p]));
            assert!(out.contains("121 of 121 memory_stats keys equal PyTorch's"), "{p}:\n{out}");
            assert!(out.contains("num_sync_all_streams: vramlab"), "{p}: listed apart\n{out}");
            let v: Value = serde_json::from_slice(&xtask(&["replay", p, "--json"]).stdout).unwrap();
            let m = &v["fidelity"]["memory_stats"];
            assert_eq!((m["keys"].as_u64(), m["equal"].as_u64()), (Some(121), Some(121)), "{p}: {m}");
            assert_eq!(m["differing"], serde_json::json!([]), "{p}");
        }
    }
    assert_eq!(seen, 9, "six H100 and three H200 recordings");
}

/// A stats file that disagrees makes the replay disagree, naming each key
/// with both values; one of another device is not compared, and says why.
#[test]
fn a_differing_memory_stats_key_is_named_and_the_replay_disagrees() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots");
    let dir = std::env::temp_dir().join(format!("vramlab-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pickle = dir.join("mlp.pickle");
    std::fs::copy(data.join("mlp-default.pickle"), &pickle).unwrap();
    let mut stats: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("mlp-default.stats.json")).unwrap()).unwrap();
    let real = stats["memory_stats"]["allocated_bytes.all.peak"].as_i64().unwrap();
    stats["memory_stats"]["allocated_bytes.all.peak"] = (real + 512).into();
    std::fs::write(dir.join("mlp.stats.json"), stats.to_string()).unwrap();
    let out = stdout(&xtask(&["replay", pickle.to_str().unwrap()]));
    assert!(out.contains("fidelity           DISAGREES with the recording"), "{out}");
    assert!(out.contains("120 of 121 memory_stats keys equal PyTorch's (mlp.stats.json)"), "{out}");
    assert!(out.contains(&format!("allocated_bytes.all.peak: vramlab {real}, PyTorch {}", real + 512)), "{out}");
    stats["device_index"] = 1.into();
    std::fs::write(dir.join("mlp.stats.json"), stats.to_string()).unwrap();
    let out = stdout(&xtask(&["replay", pickle.to_str().unwrap()]));
    assert!(out.contains("fidelity           agrees"), "{out}");
    assert!(out.contains("mlp.stats.json: not compared:"), "{out}");
    assert!(out.contains("the stats are of device 1, the replay is of device 0"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn torch_fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots").join(name).display().to_string()
}

/// `check --baseline A --from B` on snapshots: the memory gate. The same
/// snapshot against itself is exit 0 with nothing changed; default against
/// expandable segments names every figure that changed; the other way round
/// they are regressions (exit 1), and a tolerance from the config lets them
/// through; a baseline that is not there is exit 2.
#[test]
fn check_gates_snapshots_exactly_per_rank_and_device() {
    let out = std::env::temp_dir().join(format!("vramlab-memory-gate-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let o_dir = out.to_str().unwrap();
    let (default, expandable) = (torch_fixture("cnn-default.pickle"), torch_fixture("cnn-expandable.pickle"));
    let o = xtask(&["check", "--baseline", &default, "--from", &default, "--out", o_dir]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok: 0 regressions, 0 improvements, 0 inconclusive, 7 unchanged"), "{}", stdout(&o));

    let o = xtask(&["check", "--baseline", &default, "--from", &expandable, "--out", o_dir, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let changed: Vec<(String, f64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["change"].as_f64().is_some_and(|c| c != 0.0))
        .map(|r| (r["metric"].as_str().unwrap().to_owned(), r["change"].as_f64().unwrap()))
        .collect();
    let mib = |n: f64| n * 1048576.0;
    assert_eq!(
        changed,
        [
            ("fragmentation_at_peak_bytes".to_owned(), -mib(86.0)),
            ("reserved_at_end_bytes".to_owned(), -mib(290.0)),
            ("cudamalloc_calls".to_owned(), -4.0),
            ("peak_reserved_bytes".to_owned(), -mib(86.0)),
        ]
    );
    assert!(
        v["rows"].as_array().unwrap().iter().all(|r| r["case"]["case"] == "process" && r["case"]["device"] == "cuda:0")
    );

    let o = xtask(&["check", "--baseline", &expandable, "--from", &default, "--out", o_dir]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("FAIL: 4 regressions"), "{text}");
    assert!(text.contains("peak_reserved_bytes") && text.contains("1.08 GiB → 1.16 GiB (+86.00 MiB)"), "{text}");
    let md = std::fs::read_to_string(out.join("regressions.md")).unwrap();
    assert!(md.starts_with("# vramlab regression check: ❌ regression") && md.contains("## Regressions (4)"), "{md}");
    let config = out.join("gate.toml");
    std::fs::write(&config, "[suite.snapshot]\nmemory_tolerance_bytes = 314572800\n").unwrap();
    let o = xtask(
        &["check", "--baseline", &expandable, "--from", &default, "--out", o_dir, "--all", "--config"]
            .into_iter()
            .chain([config.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("within the tolerance of 300.00 MiB"), "{}", stdout(&o));

    let o = xtask(&["check", "--baseline", "nope", "--baseline-dir", o_dir, "--from", &default, "--out", o_dir]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("the comparison could not be made: the baseline:") && stderr(&o).contains("nope.json"));
    let _ = std::fs::remove_dir_all(&out);
}

/// `record` folders: each process's final snapshot, matched by the rank in its
/// name and by device; OOM dumps are left out; a rank only on one side is named.
#[test]
fn check_matches_the_ranks_of_two_record_folders() {
    let root = std::env::temp_dir().join(format!("vramlab-memory-ranks-{}", std::process::id()));
    let (a, b) = (root.join("a"), root.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
    }
    let copy = |from: &str, to: &std::path::Path| std::fs::copy(torch_fixture(from), to).unwrap();
    copy("mlp-default.pickle", &a.join("h-rank0-pid1.pickle"));
    copy("cnn-default.pickle", &a.join("h-rank1-pid2.pickle"));
    copy("cnn-default.pickle", &a.join("h-rank1-pid2-oom1.pickle"));
    copy("mlp-default.pickle", &b.join("h-rank0-pid7.pickle"));
    copy("cnn-expandable.pickle", &b.join("h-rank1-pid8.pickle"));
    copy("mlp-default.pickle", &b.join("h-rank2-pid9.pickle"));
    let o = xtask(&["check", "--baseline", a.to_str().unwrap(), "--from", b.to_str().unwrap(), "--all"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("snapshot/rank 0 (cuda:0)") && text.contains("snapshot/rank 1 (cuda:0)"), "{text}");
    assert!(text.contains("4 improvements") && text.contains("1 only in this run"), "{text}");
    assert!(text.contains("cases only in this run:\n  snapshot/rank 2 (cuda:0)"), "{text}");
    assert!(b.join("regressions.md").is_file(), "regressions.md goes into the --from folder");
    let _ = std::fs::remove_dir_all(&root);
}
