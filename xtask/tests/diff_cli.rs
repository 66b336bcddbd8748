//! End-to-end tests of `diff A B`: the real binary compares PyTorch's own
//! snapshots (the MLP under the default settings and under expandable segments;
//! the MLP against the transformer; a snapshot against itself), prints the
//! terminal table, the versioned JSON document and the page, and refuses
//! unreadable files (exit 1) and a report folder it cannot write (exit 2).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod terminal;

fn snap(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots").join(name).display().to_string()
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

fn json(args: &[&str]) -> Value {
    let mut all = vec!["diff"];
    all.extend(args);
    all.push("--json");
    let o = xtask(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramlab-diff-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn expandable_segments_against_the_defaults() {
    let o = xtask(&["diff", &snap("mlp-default.pickle"), &snap("mlp-expandable.pickle")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for expected in [
        "its own settings: PyTorch's defaults",
        "its own settings: expandable_segments:True",
        "Peak reserved fell by 4.00 MiB (−1.2 %), peak allocated did not change.",
        "Peak reserved                                                  328.00 MiB     324.00 MiB  −4.00 MiB (−1.2 %)",
        "Segments at the reserved peak                                          11              2  −9",
        // The same program: no call path moved at the allocated peak.
        "unchanged: 9 call path(s) holding 310.56 MiB",
        "      320.00 MiB      0      1  +1",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in\n{out}");
    }
    let d = json(&[&snap("mlp-default.pickle"), &snap("mlp-expandable.pickle")]);
    assert_eq!(d["peak_reserved_change_bytes"], -(4 << 20));
    assert_eq!(d["before"]["segments_at_peak"], 11);
    assert_eq!(d["after"]["segments_at_peak"], 2);
    assert_eq!(d["after"]["alloc_conf"], "expandable_segments:True");
    assert_eq!(d["paths"].as_array().unwrap().len(), 0);
}

#[test]
fn a_snapshot_against_itself_is_no_change() {
    let a = snap("transformer-default.pickle");
    let d = json(&[&a, &a]);
    assert_eq!(d["schema_version"], 1);
    for key in ["peak_allocated_change_bytes", "peak_reserved_change_bytes", "fragmentation_change_bytes"] {
        assert_eq!(d[key], 0, "{key}");
    }
    assert_eq!(d["before"], {
        let mut after = d["after"].clone();
        after["source"] = d["before"]["source"].clone();
        after
    });
    assert!(d["paths"].as_array().unwrap().is_empty());
    assert_eq!(d["bytes_unchanged"], d["before"]["live_requested_bytes"]);
    for s in d["segment_sizes"].as_array().unwrap() {
        assert_eq!(s["before"], s["after"]);
    }
    let o = xtask(&["diff", &a, &a]);
    let out = stdout(&o);
    assert!(out.contains("The peaks did not change"), "{out}");
    assert!(out.contains("Call paths that gained or lost bytes at the allocated peak") && out.contains("  none\n"));
}

#[test]
fn the_json_document_lists_every_changed_call_path_largest_change_first() {
    let d = json(&[&snap("mlp-default.pickle"), &snap("transformer-default.pickle")]);
    let side_keys = [
        "source",
        "device",
        "alloc_conf",
        "settings_from_snapshot",
        "entries",
        "peak_allocated_bytes",
        "peak_allocated_index",
        "peak_reserved_bytes",
        "live_requested_bytes",
        "live_blocks",
        "segments_at_peak",
        "segment_bytes_at_peak",
        "largest_segment_bytes",
        "segment_allocs",
        "fragmentation_at_peak_bytes",
        "largest_free_block_at_peak_bytes",
        "ooms",
        "fidelity_agrees",
        "estimate",
    ];
    for side in ["before", "after"] {
        let keys: Vec<&str> = d[side].as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = side_keys.to_vec();
        want.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        assert_eq!(got, want, "{side}");
    }
    assert_eq!(d["peak_allocated_change_bytes"], 257_681_920i64 - 325_652_992);
    let paths = d["paths"].as_array().unwrap();
    assert!(paths.len() > 10, "different programs: {}", paths.len());
    let mut last = u64::MAX;
    for p in paths {
        let (b, a, c) = (
            p["before_bytes"].as_u64().unwrap(),
            p["after_bytes"].as_u64().unwrap(),
            p["change_bytes"].as_i64().unwrap(),
        );
        assert_eq!(a as i64 - b as i64, c);
        assert!(c != 0);
        assert!(c.unsigned_abs() <= last, "largest change first");
        last = c.unsigned_abs();
        for key in ["label", "user_frames", "via", "category", "before_blocks", "after_blocks"] {
            assert!(p.get(key).is_some(), "{key}");
        }
    }
    // The transformer's own frame gained what the MLP's lost.
    let transformer = paths.iter().find(|p| p["label"] == "record_snapshots.py:95:transformer").unwrap();
    assert_eq!(transformer["before_bytes"], 0);
    assert!(transformer["change_bytes"].as_i64().unwrap() > 0);
    assert!(paths.iter().any(|p| p["label"].as_str().unwrap().ends_with(":mlp") && p["after_bytes"] == 0));
}

#[test]
fn the_page_is_written_and_named() {
    let dir = temp_dir("page");
    let o = xtask(&[
        "diff",
        &snap("mlp-default.pickle"),
        &snap("transformer-default.pickle"),
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("report: {}", dir.join("index.html").display())));
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    for expected in [
        "Peak reserved rose by 48.00 MiB (+14.6 %), peak allocated fell by 64.82 MiB (−20.9 %).",
        "<code class=\"frame\">record_snapshots.py:44:mlp</code>",
        "<code class=\"frame\">record_snapshots.py:95:transformer</code>",
        "Segment sizes at the reserved peak",
    ] {
        assert!(html.contains(expected), "missing {expected}");
    }
    // Offline: the interactive chart's script and data are inline, nothing is fetched.
    assert!(!html.contains(" src=") && html.contains("id=\"overlay-data\""), "offline, the chart inline");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unreadable_files_are_exit_status_1() {
    let good = snap("mlp-default.pickle");
    let not_pickle = temp_dir("not-pickle");
    std::fs::write(&not_pickle, b"{\"op\": \"alloc\"}\n").unwrap();
    let missing = temp_dir("missing").join("nope.pickle");
    let dir = std::env::temp_dir();
    for (args, says) in [
        ([good.clone(), missing.display().to_string()], format!("cannot open {}", missing.display())),
        (
            [not_pickle.display().to_string(), good.clone()],
            format!("{} is not a readable PyTorch memory snapshot", not_pickle.display()),
        ),
        ([good.clone(), dir.display().to_string()], format!("{} is a directory", dir.display())),
    ] {
        let o = xtask(&["diff", &args[0], &args[1]]);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(&says), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let _ = std::fs::remove_file(&not_pickle);
    // A device neither has: the replay of A fails first, and says so.
    let o = xtask(&["diff", &good, &good, "--device", "5"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("cannot replay {good}")) && err.contains("device 5 has no trace"), "{err}");
}

#[test]
fn a_report_folder_that_cannot_be_written_is_exit_status_2() {
    let file = temp_dir("not-a-dir");
    std::fs::write(&file, b"a file").unwrap();
    let inside = file.join("report");
    let a = snap("mlp-default.pickle");
    let o = xtask(&["diff", &a, &a, "--report", inside.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("cannot write the report into {}", inside.display())), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "nothing is replayed");
    let _ = std::fs::remove_file(&file);
}
