//! The regression check end to end through the real (release) binary: two
//! `cargo xtask bench --quick --device cpu` runs of the same code, the first
//! saved as a baseline, the second compared with it — every memory figure
//! identical, so the exact gate passes (times are reported, not asserted); a
//! planted memory regression fails with exit 1 naming the case; missing,
//! corrupt and truncated baselines exit 2 naming the file; exports parse; the
//! history holds both runs. Then the multi-run designs on one quick suite: a
//! baseline made by `--repeat` and grown by `--append`, judged against a
//! repeated run with times resampled over runs; a one-run baseline whose times
//! are not judged; and an A/B sitting (`check --ab`) whose pairs judge again
//! identically from its saved run sets.

use std::path::Path;
use std::process::{Command, Output};
use vramlab_tests::xtask_release;

use serde_json::Value;

/// Runs xtask in `dir` (no vramlab.toml there: the defaults apply), outside GitHub Actions.
fn xtask(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).current_dir(dir).env_remove("GITHUB_ACTIONS").output().expect("xtask runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn two_quick_runs_of_the_same_code_have_identical_memory() {
    let bin = xtask_release();
    let dir = std::env::temp_dir().join(format!("vramlab-check-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = |p: &str| dir.join(p).to_str().unwrap().to_owned();

    // Run 1, saved as baseline `e2e`.
    let first = xtask(
        &bin,
        &dir,
        &[
            "bench",
            "--quick",
            "--device",
            "cpu",
            "--out",
            &d("out"),
            "--save-baseline",
            "e2e",
            "--baseline-dir",
            &d("b"),
        ],
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(dir.join("b/e2e.json").is_file());

    // Run 2, compared with it.
    let second = xtask(
        &bin,
        &dir,
        &[
            "bench",
            "--quick",
            "--device",
            "cpu",
            "--out",
            &d("out"),
            "--baseline",
            "e2e",
            "--baseline-dir",
            &d("b"),
            "--json",
            "--export",
            "bmf",
            "--export",
            "gab",
        ],
    );
    let stderr = text(&second.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = text(&second.stdout);
    // With --json, stdout is the comparison only (the run's summary went to stderr).
    let cmp: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(stderr.contains("history: run 2 appended"), "{stderr}");
    let rows = cmp["rows"].as_array().unwrap();
    let memory: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "memory").collect();
    assert!(memory.len() > 100, "only {} memory figures compared", memory.len());
    let changed: Vec<String> = memory
        .iter()
        .filter(|r| r["status"] != "no_change")
        .map(|r| format!("{} {} {}: {}", r["case"]["suite"], r["case"]["case"], r["metric"], r["detail"]))
        .collect();
    assert!(changed.is_empty(), "memory not reproducible run to run:\n{}", changed.join("\n"));
    assert!(
        cmp["only_in_baseline"].as_array().unwrap().is_empty() && cmp["only_in_current"].as_array().unwrap().is_empty()
    );
    assert!(cmp["environment_differences"].as_array().unwrap().is_empty());
    // Times are judged (this machine's noise decides how), never gated here.
    let times = rows.iter().filter(|r| r["kind"] == "time").count();
    assert!(times > 20, "{times} time comparisons");
    let regressions = rows.iter().filter(|r| r["status"] == "regression").count();
    assert_eq!(second.status.code(), Some(u8::from(regressions > 0) as i32), "exit status follows the verdict");
    eprintln!(
        "two quick runs: {} memory figures identical; times: {}",
        memory.len(),
        ["regression", "inconclusive", "improvement", "no_change"]
            .map(|s| format!("{} {s}", rows.iter().filter(|r| r["kind"] == "time" && r["status"] == s).count()))
            .join(", ")
    );
    let md = std::fs::read_to_string(dir.join("out/regressions.md")).unwrap();
    assert!(md.starts_with("# vramlab regression check"), "{md}");

    // Exports parse and have their shapes.
    let bmf: Value = serde_json::from_slice(&std::fs::read(dir.join("out/bmf.json")).unwrap()).unwrap();
    assert!(bmf.as_object().unwrap().values().all(|m| m.as_object().unwrap().values().all(|v| v["value"].is_number())));
    let gab: Value = serde_json::from_slice(&std::fs::read(dir.join("out/gab.json")).unwrap()).unwrap();
    assert!(
        gab.as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"].is_string() && e["unit"].is_string() && e["value"].is_number())
    );

    // A planted memory regression: the baseline had one 2 MiB segment less in one case.
    let mut base: Value = serde_json::from_slice(&std::fs::read(dir.join("b/e2e.json")).unwrap()).unwrap();
    let (suite, case) = plant_segment(&mut base);
    std::fs::write(dir.join("planted.json"), base.to_string()).unwrap();
    let planted = xtask(
        &bin,
        &dir,
        &["check", "--baseline", &d("planted.json"), "--from", &d("out/results.json"), "--config", &d("loose.toml")],
    );
    assert_eq!(planted.status.code(), Some(2), "a missing --config file makes the comparison impossible");
    // Times not gated: only the planted memory figure may fail (a raw 4 MiB
    // malloc can take 50× longer in one run than in the next on a busy machine).
    std::fs::write(dir.join("loose.toml"), "[check]\ngate_times = false\n").unwrap();
    let planted = xtask(
        &bin,
        &dir,
        &["check", "--baseline", &d("planted.json"), "--from", &d("out/results.json"), "--config", &d("loose.toml")],
    );
    let out = text(&planted.stdout);
    assert_eq!(planted.status.code(), Some(1), "{out}{}", text(&planted.stderr));
    let line = out.lines().find(|l| l.starts_with("REGRESSION")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&format!("{suite}/{case}")) && line.contains("(+2.00 MiB)"), "{line}");
    assert_eq!(out.lines().filter(|l| l.starts_with("REGRESSION")).count(), 1, "{out}");

    // Comparisons that cannot be made: exit 2, the file named.
    let good = std::fs::read(dir.join("b/e2e.json")).unwrap();
    std::fs::write(dir.join("b/truncated.json"), &good[..good.len() / 3]).unwrap();
    std::fs::write(dir.join("b/corrupt.json"), b"\x00\x01garbage").unwrap();
    for (name, needle) in
        [("missing", "no such file"), ("truncated", "EOF while parsing"), ("corrupt", "not vramlab results")]
    {
        let o = xtask(
            &bin,
            &dir,
            &["check", "--baseline", name, "--baseline-dir", &d("b"), "--from", &d("out/results.json")],
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(&format!("{name}.json")) && err.contains(needle), "{name}: {err}");
    }
    let o = xtask(
        &bin,
        &dir,
        &["bench", "--quick", "--suite", "devices", "--baseline", "missing", "--baseline-dir", &d("b")],
    );
    assert_eq!(o.status.code(), Some(2), "a missing baseline is found before the run");
    assert!(!dir.join("target").exists(), "nothing ran");

    // The history holds both runs; identical memory never steps.
    let h =
        xtask(&bin, &dir, &["history", "--db", &d("out/history.sqlite"), "--metric", "*peak_reserved_bytes", "--json"]);
    assert_eq!(h.status.code(), Some(0), "{}", text(&h.stderr));
    let series: Value = serde_json::from_slice(&h.stdout).unwrap();
    let series = series.as_array().unwrap();
    assert!(!series.is_empty());
    for s in series {
        assert_eq!(s["points"].as_array().unwrap().len(), 2, "{}", s["name"]);
        assert!(s["change_points"].as_array().unwrap().is_empty(), "{}", s["name"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The time rows of a `--json` comparison.
fn time_rows(cmp: &Value) -> Vec<&Value> {
    cmp["rows"].as_array().unwrap().iter().filter(|r| r["kind"] == "time").collect()
}

/// Every memory row of a `--json` comparison is unchanged.
fn memory_unchanged(cmp: &Value) {
    let changed: Vec<String> = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "memory" && r["status"] != "no_change")
        .map(|r| format!("{} {}: {}", r["case"]["case"], r["metric"], r["detail"]))
        .collect();
    assert!(changed.is_empty(), "memory changed between runs of one build:\n{}", changed.join("\n"));
}

fn json_of(o: &Output) -> Value {
    let stdout = text(&o.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{}", text(&o.stderr)))
}

/// The runs held by a baseline file (a results file is one run).
fn runs_in(path: &Path) -> usize {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    if v.get("vramlab_run_set").is_some() { v["runs"].as_array().unwrap().len() } else { 1 }
}

#[test]
fn multi_run_baselines_and_the_ab_sitting() {
    let bin = xtask_release();
    let dir = std::env::temp_dir().join(format!("vramlab-check-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = |p: &str| dir.join(p).to_str().unwrap().to_owned();
    let quick = ["bench", "--quick", "--device", "cpu", "--suite", "cpu-vs-gpu", "--baseline-dir"];
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = quick.iter().map(|s| s.to_string()).collect();
        args.push(d("b"));
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        xtask(&bin, &dir, &args)
    };

    // Two runs in one invocation make the baseline; a third is appended.
    let o = run(&["--repeat", "2", "--save-baseline", "rep", "--out", &d("r1")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(runs_in(&dir.join("b/rep.json")), 2);
    assert_eq!(runs_in(&dir.join("r1/runs.json")), 2, "--repeat writes the run set beside the results");
    let o = run(&["--save-baseline", "rep", "--append", "--out", &d("r2")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(runs_in(&dir.join("b/rep.json")), 3, "--append adds the run");

    // Two runs of the same build against the three: every time is judged over
    // runs (3 against 2), never "noise unknown"; memory is identical.
    let o = run(&["--repeat", "2", "--baseline", "rep", "--out", &d("r3"), "--json"]);
    let cmp = json_of(&o);
    memory_unchanged(&cmp);
    let times = time_rows(&cmp);
    assert!(times.len() > 5, "{} time rows", times.len());
    for t in &times {
        assert_eq!(t["runs"], serde_json::json!([3, 2]), "{t}");
        assert!(!t["detail"].as_str().unwrap().contains("unknown"), "{t}");
        let (lo, hi) = (t["ratio_interval"][0].as_f64(), t["ratio_interval"][1].as_f64());
        assert!(matches!((lo, hi), (Some(lo), Some(hi)) if lo <= hi), "{t}");
    }
    let regressions = cmp["rows"].as_array().unwrap().iter().filter(|r| r["status"] == "regression").count();
    assert_eq!(o.status.code(), Some(u8::from(regressions > 0) as i32), "exit status follows the verdict");

    // One run a side: times are reported, not judged, and the row says how to fix it.
    let o =
        xtask(&bin, &dir, &["check", "--baseline", &d("r2/results.json"), "--from", &d("r1/results.json"), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let cmp = json_of(&o);
    for t in time_rows(&cmp) {
        assert_eq!(t["status"], "not_compared", "{t}");
        assert!(t["detail"].as_str().unwrap().contains("--repeat"), "{t}");
    }

    // --history: one that is not there makes the comparison impossible; one
    // that is is read (these runs, outside a git checkout, carry no commit, so
    // it knows no build's noise and the verdicts are the plain ones).
    let plain = ["check", "--baseline", &d("b/rep.json"), "--from", &d("r3/runs.json"), "--json"];
    let missing = d("no-such-history.sqlite");
    let o = xtask(&bin, &dir, &[&plain[..], &["--history", &missing]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no-such-history.sqlite"), "{}", text(&o.stderr));
    let with = xtask(&bin, &dir, &[&plain[..], &["--history", &d("r1/history.sqlite")]].concat());
    assert!(text(&with.stderr).contains("knows the between-run noise of 0 time figure(s)"), "{}", text(&with.stderr));
    let statuses = |c: &Value| -> Vec<String> { time_rows(c).iter().map(|t| t["status"].to_string()).collect() };
    assert_eq!(statuses(&json_of(&with)), statuses(&json_of(&xtask(&bin, &dir, &plain))));

    // An A/B sitting of this build against itself, two pairs: judged pair by pair.
    let bin_s = bin.to_str().unwrap();
    let ab = ["check", "--ab", bin_s, "--candidate", bin_s, "--quick", "--suite", "cpu-vs-gpu", "--device", "cpu"];
    let ab_out = d("ab");
    let mut args = ab.to_vec();
    args.extend(["--pairs", "2", "--out", &ab_out, "--json"]);
    let o = xtask(&bin, &dir, &args);
    let cmp = json_of(&o);
    memory_unchanged(&cmp);
    let judged: Vec<&Value> = time_rows(&cmp).into_iter().filter(|t| t["status"] != "not_compared").collect();
    assert!(judged.len() > 5, "{cmp}");
    for t in &judged {
        assert_eq!(t["runs"], serde_json::json!([2, 2]), "{t}");
        assert!(t["detail"].as_str().unwrap().contains("2 A/B pairs") || t["status"] == "inconclusive", "{t}");
    }
    assert_eq!(runs_in(&dir.join("ab/a.json")), 2);
    assert_eq!(runs_in(&dir.join("ab/b.json")), 2);
    // The saved sitting judged again gives the same verdicts (seeded bootstrap).
    let again =
        xtask(&bin, &dir, &["check", "--baseline", &d("ab/a.json"), "--from", &d("ab/b.json"), "--paired", "--json"]);
    let again = json_of(&again);
    let verdicts = |c: &Value| -> Vec<(String, String)> {
        time_rows(c).iter().map(|t| (t["case"]["case"].to_string(), t["status"].to_string())).collect()
    };
    assert_eq!(verdicts(&cmp), verdicts(&again));

    // Bad A/B inputs: exit 2 with the fix; too few pairs refused by the parser.
    let o = xtask(&bin, &dir, &["check", "--ab", &d("no-such-binary")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("no such file"), "{}", text(&o.stderr));
    let mut args = ab.to_vec();
    args.extend(["--pairs", "1"]);
    let o = xtask(&bin, &dir, &args);
    assert_eq!(o.status.code(), Some(2), "clap refuses --pairs 1");
    assert!(text(&o.stderr).contains("--pairs"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Lowers `segment_bytes` of the first case that has one by 2 MiB; returns (suite, case).
fn plant_segment(run: &mut Value) -> (String, String) {
    for s in run["suites"].as_array_mut().unwrap() {
        let suite = s["name"].as_str().unwrap().to_owned();
        for c in s["cases"].as_array_mut().unwrap() {
            if let Some(v) = c["metrics"].get_mut("segment_bytes").filter(|v| v.as_f64().unwrap_or(0.0) >= 2097152.0) {
                *v = Value::from(v.as_f64().unwrap() - 2097152.0);
                return (suite, c["name"].as_str().unwrap().to_owned());
            }
        }
    }
    panic!("no case with segment_bytes ≥ 2 MiB");
}
