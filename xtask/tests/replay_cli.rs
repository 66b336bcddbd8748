//! End-to-end tests of `cargo xtask replay`: the real binary on real files.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

mod terminal;

/// A trace file in the temp directory, removed when dropped.
struct TempTrace(PathBuf);

impl TempTrace {
    fn new(contents: &str) -> TempTrace {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("vramlab-replay-cli-{}-{n}.jsonl", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        TempTrace(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn xtask(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    terminal::fits(child.wait_with_output().unwrap())
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Runs with `--json` and returns the parsed object; the run must succeed.
fn json(args: &[&str], stdin: Option<&str>) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = xtask(&all, stdin);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

/// The spec's known-answer vectors: 3 MiB and 5 MiB share one 20 MiB segment,
/// then both are freed and empty_cache gives the segment back.
const SPEC_TRACE: &str = r#"{"op":"alloc","id":1,"size":3145728,"tag":"activation"}
{"op":"alloc","id":2,"size":5242880,"stream":0}

{"op":"free","id":1}
{"op":"free","id":2}
{"op":"empty_cache"}
"#;

/// On a 64 MiB device the second 40 MiB allocation runs out of memory.
const OOM_TRACE: &str = r#"{"op":"alloc","id":1,"size":41943040}
{"op":"alloc","id":2,"size":41943040,"tag":"activation"}
{"op":"alloc","id":3,"size":1}
{"op":"free","id":2}
{"op":"free","id":1}
{"op":"alloc","id":4,"size":41943040}
"#;

#[test]
fn known_answer_json() {
    let trace = TempTrace::new(SPEC_TRACE);
    let v = json(&["replay", trace.path()], None);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["format"], "vramlab_trace");
    assert_eq!(v["entries_replayed"], 5);
    assert_eq!(v["lines"], 6);
    assert_eq!(v["stopped_early"], false);
    assert_eq!(v["ooms"], serde_json::json!([]));
    assert_eq!(v["input"], trace.path());
    assert_eq!(v["capacity_bytes"], Value::Null);
    assert_eq!(v["alloc_conf"], "");
    assert_eq!(v["on_oom"], "stop");
    assert_eq!(v["peak_allocated_bytes"], 8_388_608);
    assert_eq!(v["peak_reserved_bytes"], 20_971_520);
    assert_eq!(v["final_allocated_bytes"], 0);
    assert_eq!(v["final_reserved_bytes"], 0);
    assert_eq!(v["live_allocations"], 0);
    assert_eq!(v["last_reset_peak_line"], Value::Null);
    let stats = &v["memory_stats"];
    assert_eq!(stats.as_object().unwrap().len(), 9 * 3 * 4 + 2 * 4 + 6);
    for (key, value) in [
        ("allocated_bytes.all.current", 0),
        ("allocated_bytes.all.peak", 8_388_608),
        ("allocated_bytes.large_pool.allocated", 8_388_608),
        ("allocated_bytes.small_pool.peak", 0),
        ("reserved_bytes.all.peak", 20_971_520),
        ("reserved_bytes.all.freed", 20_971_520),
        ("inactive_split_bytes.all.peak", 17_825_792),
        ("inactive_split.all.current", 0),
        ("requested_bytes.all.allocated", 8_388_608),
        ("allocation.all.allocated", 2),
        ("segment.large_pool.allocated", 1),
        ("num_device_alloc", 1),
        ("num_device_free", 1),
        ("num_ooms", 0),
        ("num_alloc_retries", 0),
        ("max_split_size", -1),
    ] {
        assert_eq!(stats[key], value, "{key}");
    }
    assert!(v["summary"].as_str().unwrap().contains('|'));
}

#[test]
fn known_answer_text_report() {
    let trace = TempTrace::new(SPEC_TRACE);
    let o = xtask(&["replay", trace.path()], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for expected in [
        "events replayed    5 (6 lines read)",
        "out of memory      never",
        "peak allocated     8.00 MiB (8388608 bytes)",
        "peak reserved      20.00 MiB (20971520 bytes)",
        "final allocated    0 B",
        "final reserved     0 B",
        "live allocations   0",
        "simulated device   unlimited",
        "allocator config   default",
    ] {
        assert!(out.contains(expected), "missing '{expected}' in\n{out}");
    }
    // The memory_summary table follows.
    assert!(out.lines().filter(|l| l.starts_with('|') && l.ends_with('|')).count() > 10, "{out}");
}

#[test]
fn stdin_input() {
    let trace = TempTrace::new(SPEC_TRACE);
    let from_file = json(&["replay", trace.path()], None);
    let from_stdin = json(&["replay", "-"], Some(SPEC_TRACE));
    assert_eq!(from_stdin["input"], "<stdin>");
    assert_eq!(from_stdin["memory_stats"], from_file["memory_stats"]);
    assert_eq!(from_stdin["entries_replayed"], 5);
    // Errors name stdin.
    let o = xtask(&["replay", "-"], Some("{\"op\":\"free\",\"id\":1}\n"));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: <stdin> line 1: free of id 1"), "{}", stderr(&o));
}

#[test]
fn bad_input_exits_1_naming_the_line() {
    let cases: &[(&str, u64, &str)] = &[
        ("{\"op\":\"alloc\",\"id\":1,\"size\":1}\nnot json\n", 2, "malformed JSON"),
        ("{\"op\":\"alloc\",\"id\":1,\n", 1, "malformed JSON"),
        ("[1,2]\n", 1, "expected a JSON object"),
        ("{\"id\":1}\n", 1, "missing field 'op'"),
        ("\n\n{\"op\":\"alloc\",\"size\":1}\n", 3, "missing field 'id' (required by op 'alloc')"),
        ("{\"op\":\"alloc\",\"id\":1}\n", 1, "missing field 'size'"),
        ("{\"op\":\"free\"}\n", 1, "missing field 'id' (required by op 'free')"),
        ("{\"op\":\"malloc\",\"id\":1,\"size\":1}\n", 1, "unknown op 'malloc'"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"tag\":\"weights\"}\n", 1, "unknown tag 'weights'"),
        ("{\"op\":\"free\",\"id\":7}\n", 1, "free of id 7, which is not live"),
        (
            "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"free\",\"id\":7}\n{\"op\":\"free\",\"id\":7}\n",
            3,
            "free of id 7, which is not live (already freed at line 2)",
        ),
        (
            "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"alloc\",\"id\":7,\"size\":1}\n",
            2,
            "alloc of id 7, which is already live (allocated at line 1)",
        ),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":-4096}\n", 1, "size -4096 is negative"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":10.5}\n", 1, "size 10.5 is not a whole number of bytes"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":18446744073709551616}\n", 1, "is too large"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":1e400}\n", 1, "malformed JSON"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":\"1MiB\"}\n", 1, "expected a byte count"),
        ("{\"op\":\"alloc\",\"id\":-1,\"size\":1}\n", 1, "malformed JSON"),
        ("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4294967295}\n", 1, "stream"),
        ("{\"op\":\"free\",\"id\":1}\u{0}\n", 1, "malformed JSON"),
    ];
    for (text, line, fragment) in cases {
        let trace = TempTrace::new(text);
        let o = xtask(&["replay", trace.path()], None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{text:?}: {err}");
        let prefix = format!("error: {} line {line}", trace.path());
        assert!(err.starts_with(&prefix), "{text:?}: expected '{prefix}…', got {err}");
        assert!(err.contains(fragment), "{text:?}: expected '{fragment}' in {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(o.stdout.is_empty(), "nothing on stdout: {}", stdout(&o));
        // The same with --json: errors are never JSON on stdout.
        let o = xtask(&["replay", trace.path(), "--json"], None);
        assert_eq!(o.status.code(), Some(1));
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn invalid_utf8_is_bad_input_not_a_panic() {
    let path = std::env::temp_dir().join(format!("vramlab-replay-cli-{}-utf8.jsonl", std::process::id()));
    std::fs::write(&path, b"{\"op\":\"empty_cache\"}\n{\"op\":\"fr\xff\xfeee\",\"id\":1}\n").unwrap();
    let o = xtask(&["replay", path.to_str().unwrap()], None);
    let _ = std::fs::remove_file(&path);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(" line 2"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn unreadable_files_exit_1() {
    let missing = std::env::temp_dir().join("vramlab-replay-cli-does-not-exist.jsonl");
    let o = xtask(&["replay", missing.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: cannot open "), "{}", stderr(&o));
    let dir = std::env::temp_dir();
    let o = xtask(&["replay", dir.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
}

#[test]
fn oom_stop_and_continue() {
    let trace = TempTrace::new(OOM_TRACE);
    let stop = json(&["replay", trace.path(), "--capacity", "64MiB"], None);
    assert_eq!(stop["capacity_bytes"], 64 << 20);
    assert_eq!(stop["on_oom"], "stop");
    assert_eq!(stop["stopped_early"], true);
    assert_eq!(stop["entries_replayed"], 2);
    assert_eq!(stop["final_allocated_bytes"], 40 << 20);
    assert_eq!(stop["memory_stats"]["num_ooms"], 1);
    let ooms = stop["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1);
    let oom = &ooms[0];
    assert_eq!(oom["index"], 1);
    assert_eq!(oom["line"], 2);
    assert_eq!(oom["requested_bytes"], 41_943_040);
    let message = oom["message"].as_str().unwrap();
    assert!(message.contains("out of memory") && message.contains("Tried to allocate 40.00 MiB"), "{message}");
    assert_eq!(oom["memory_stats"]["allocated_bytes.all.current"], 40 << 20);
    assert_eq!(oom["memory_stats"]["num_ooms"], 1);

    let cont = json(&["replay", trace.path(), "--capacity", "64MiB", "--on-oom", "continue"], None);
    assert_eq!(cont["on_oom"], "continue");
    assert_eq!(cont["stopped_early"], false);
    assert_eq!(cont["entries_replayed"], 6);
    assert_eq!(cont["ooms"].as_array().unwrap().len(), 1);
    assert_eq!(cont["final_allocated_bytes"], (40 << 20) + 512);
    assert_eq!(cont["live_allocations"], 2);
    assert_eq!(cont["memory_stats"]["num_ooms"], 1);

    // The same capacity in plain bytes, and no OOM on a bigger device.
    let bytes = json(&["replay", trace.path(), "--capacity", "67108864"], None);
    assert_eq!(bytes["ooms"], stop["ooms"]);
    let big = json(&["replay", trace.path(), "--capacity", "1.5GiB"], None);
    assert_eq!(big["ooms"], serde_json::json!([]));
    assert_eq!(big["capacity_bytes"], 3u64 << 29);

    // The readable report lists the OOM with its line, size and message.
    let o = xtask(&["replay", trace.path(), "--capacity", "64MiB"], None);
    assert_eq!(o.status.code(), Some(0), "OOMs are results, not failures");
    let out = stdout(&o);
    assert!(out.contains("out of memory      1 time; the replay stopped there"), "{out}");
    assert!(
        out.contains("line 2 (event 1): alloc of 40.00 MiB (41943040 bytes)\n      vramlab: simulated out of memory"),
        "{out}"
    );
    assert!(out.contains("simulated device   64.00 MiB (67108864 bytes)"), "{out}");
}

/// The issue-18 edge sizes: below 1 EiB the allocator runs out of memory (with its
/// retry counted); at 1 EiB or more PyTorch refuses before the allocator and no
/// statistic changes. Both are results, not malformed input.
#[test]
fn edge_sizes_replay_as_pytorch_behaves() {
    let trace = TempTrace::new(
        "{\"op\":\"alloc\",\"id\":1,\"size\":18446744073709551615}\n\
         {\"op\":\"alloc\",\"id\":2,\"size\":858993459200000000}\n",
    );
    let r = json(&["replay", trace.path(), "--on-oom", "continue"], None);
    assert_eq!(r["entries_replayed"], 2);
    assert_eq!(r["too_large"].as_array().unwrap().len(), 1);
    assert_eq!(r["too_large"][0]["line"], 1);
    assert_eq!(r["ooms"].as_array().unwrap().len(), 1);
    assert_eq!(r["memory_stats"]["num_ooms"], 1);
    assert_eq!(r["memory_stats"]["num_alloc_retries"], 1);
    let message = r["ooms"][0]["message"].as_str().unwrap();
    assert!(message.contains("Tried to allocate 800000000.00 GiB"), "{message}");
    let o = xtask(&["replay", trace.path()], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("refused (>= 1 EiB)  1 request, before the allocator as PyTorch does; the replay stopped there"),
        "{out}"
    );
    assert!(out.contains("Tried to allocate more than 1EB memory"), "{out}");
}

#[test]
fn alloc_conf_changes_the_replay() {
    let trace = TempTrace::new("{\"op\":\"alloc\",\"id\":1,\"size\":5000}\n");
    let plain = json(&["replay", trace.path()], None);
    assert_eq!(plain["final_allocated_bytes"], 5120);
    let trace = TempTrace::new("{\"op\":\"alloc\",\"id\":1,\"size\":5121}\n");
    let plain = json(&["replay", trace.path()], None);
    assert_eq!(plain["final_allocated_bytes"], 5632);
    let rounded = json(&["replay", trace.path(), "--alloc-conf", "roundup_power2_divisions:4"], None);
    assert_eq!(rounded["final_allocated_bytes"], 6144);
    assert_eq!(rounded["alloc_conf"], "roundup_power2_divisions:4");
    let v = json(&["replay", trace.path(), "--alloc-conf", "max_split_size_mb:128,expandable_segments:True"], None);
    assert_eq!(v["memory_stats"]["max_split_size"], 128 << 20);
}

#[test]
fn bad_capacity_is_a_usage_error() {
    let trace = TempTrace::new(SPEC_TRACE);
    for (value, hint) in [
        ("4GB", "write GiB"),
        ("512mb", "write MiB"),
        ("-1", "negative"),
        ("lots", "no number"),
        ("2048TiB", "at most 1024TiB"),
        ("4 GiBs", "unknown unit"),
        ("-1GiB", "negative"),
        ("--json", "no number"),
    ] {
        let o = xtask(&["replay", trace.path(), "--capacity", value], None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains(&format!("'{value}'")), "{value}: {err}");
        assert!(err.contains(hint), "{value}: {err}");
        assert!(err.contains("KiB, MiB, GiB or TiB"), "{value}: {err}");
        assert!(!err.contains("panicked"));
        assert!(o.stdout.is_empty());
    }
}

/// The help gives `1.5GiB` as an example; `4.8GiB` is 5153960755.2 bytes: it is
/// rounded down to whole bytes, and a note on stderr says so (stdout, the JSON,
/// stays clean).
#[test]
fn a_fraction_of_a_byte_is_rounded_down_with_a_note() {
    let trace = TempTrace::new(SPEC_TRACE);
    let o = xtask(&["replay", trace.path(), "--capacity", "4.8GiB", "--json"], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["capacity_bytes"], 5_153_960_755u64);
    let err = stderr(&o);
    assert!(
        err.contains("note: --capacity 4.8GiB is 5153960755.2 bytes: rounded down to 5153960755 bytes (4.80 GiB)"),
        "{err}"
    );
    // A whole number of bytes says nothing.
    let o = xtask(&["replay", trace.path(), "--capacity", "1.5GiB"], None);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = xtask(&["replay", trace.path(), "--capacity", "1.5"], None);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("--capacity 1.5 is 1.5 bytes: rounded down to 1 bytes"), "{}", stderr(&o));
}

#[test]
fn bad_alloc_conf_is_a_usage_error() {
    let trace = TempTrace::new(SPEC_TRACE);
    for (value, hint) in [
        ("bogus_key:1", "bogus_key"),
        ("expandable_segments:Maybe", "expandable_segments"),
        ("max_split_size_mb:1", "max_split_size_mb"),
        ("garbage_collection_threshold:2", "garbage_collection_threshold"),
        ("max_split_size_mb", "max_split_size_mb"),
    ] {
        let o = xtask(&["replay", trace.path(), "--alloc-conf", value], None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains("--alloc-conf"), "{value}: {err}");
        assert!(err.contains(hint), "{value}: {err}");
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn usage_errors_and_help() {
    let o = xtask(&[], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("vramlab"), "{}", stderr(&o));
    let o = xtask(&["replay"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("FILE"), "{}", stderr(&o));
    let o = xtask(&["replay", "x", "--on-oom", "retry"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("stop") && stderr(&o).contains("continue"), "{}", stderr(&o));
    let o = xtask(&["frobnicate"], None);
    assert_eq!(o.status.code(), Some(2), "an unknown command is a usage error");

    let o = xtask(&["--help"], None);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    assert!(help.contains("vramlab measures"), "{help}");
    assert!(help.contains("replay"), "{help}");
    assert!(help.contains("would this run fit on a 24 GiB card"), "{help}");

    let o = xtask(&["replay", "--help"], None);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for expected in [
        "Usage: cargo xtask replay [OPTIONS] <FILE>",
        "--capacity <SIZE>",
        "--alloc-conf <STR>",
        "--on-oom <WHAT>",
        "--json",
        "{\"op\":\"alloc\",\"id\":7,\"size\":1048576,\"stream\":0,\"tag\":\"activation\"}",
        "cargo xtask replay run.jsonl --capacity 24GiB --on-oom continue",
        "Exit status",
    ] {
        assert!(help.contains(expected), "missing '{expected}' in\n{help}");
    }
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let trace = TempTrace::new(SPEC_TRACE);
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["replay", trace.path()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = terminal::fits(child.wait_with_output().unwrap());
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
