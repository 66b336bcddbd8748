//! The regression check end to end through the real (release) binary: two
//! `cargo xtask bench --quick --device cpu` runs of the same code, the first
//! saved as a baseline, the second compared with it — every memory figure
//! identical, so the exact gate passes (times are reported, not asserted); a
//! planted memory regression fails with exit 1 naming the case; missing,
//! corrupt and truncated baselines exit 2 naming the file; exports parse; the
//! history holds both runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ sits in the workspace").to_path_buf()
}

/// Builds the release xtask binary (what `cargo xtask` runs) and returns its path.
fn xtask_release() -> PathBuf {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--package", "xtask", "--quiet"])
        .current_dir(&root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the release xtask failed");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    target.join("release").join(format!("xtask{}", std::env::consts::EXE_SUFFIX))
}

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
