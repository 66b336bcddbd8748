//! `cargo xtask report --from FILE` on bad input: a results file that is not
//! JSON, truncated, of another schema version, or with a damaged suite — a
//! message naming the file and what is wrong, exit status 2, and what can be
//! rendered is rendered.

use std::path::PathBuf;
use std::process::{Command, Output};

mod terminal;

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramlab-report-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn report(file: &std::path::Path, out: &std::path::Path) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("report")
        .arg("--from")
        .arg(file)
        .arg("--out")
        .arg(out)
        .output()
        .expect("xtask runs");
    terminal::fits(o)
}

const GOOD_SUITE: &str = r#"{"name":"memory","description":"d","device":"cpu","duration_ns":1,
  "cases":[{"name":"c","params":{},"outcome":{"status":"ok"},"timing":null,"metrics":{},"memory":null,"notes":[],"duration_ns":1}],
  "findings":[{"claim":"no_grad saves memory","verdict":"holds","evidence":"2x"}]}"#;

fn file_with(version: u32, suites: &str) -> String {
    format!(
        r#"{{"schema_version":{version},"vramlab_version":"0.1.0","started_at":"t",
  "options":{{"suites":[],"device":"cpu","quick":true,"samples":null,"seed":1,"capacity_bytes":1}},
  "environment":{{"cpu_model":"x","cpu_cores":1,"host_memory_bytes":1,"gpus":[],"gpu_unavailable_reason":null,
  "device":"cpu","os":"linux","rustc":null,"git_commit":null}},"suites":[{suites}]}}"#
    )
}

#[test]
fn bad_results_files_exit_2_naming_the_file() {
    let dir = temp("bad");
    let cases = [
        ("not-json.json", "hello".to_owned(), "not JSON"),
        ("truncated.json", file_with(2, GOOD_SUITE)[..200].to_owned(), "truncated"),
        ("future.json", file_with(99, GOOD_SUITE), "schema version 99"),
    ];
    for (name, contents, what) in cases {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        let out = report(&path, &dir.join("out"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name) && stderr.contains(what), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_suite_is_named_and_the_rest_renders() {
    let dir = temp("partial");
    let path = dir.join("half.json");
    std::fs::write(&path, file_with(2, &format!(r#"{GOOD_SUITE}, {{"name":"amp","cases":7}}"#))).unwrap();
    let out = report(&path, &dir.join("out"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("half.json") && stderr.contains("(amp) does not parse"), "{stderr}");
    let html = std::fs::read_to_string(dir.join("out").join("index.html")).expect("the rest rendered");
    assert!(html.contains("no_grad saves memory") && html.contains("does not parse"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_version_1_file_renders_without_timelines() {
    let dir = temp("v1");
    let path = dir.join("old.json");
    std::fs::write(&path, file_with(1, GOOD_SUITE)).unwrap();
    let out = report(&path, &dir.join("out"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("old.json") && stderr.contains("schema version 1"), "{stderr}");
    assert!(stdout.contains("holds") && stdout.trim_end().ends_with("index.html"), "{stdout}");
    assert!(dir.join("out").join("summary.md").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
