//! `bench --simulate` end to end, the simulated A/A check CI runs: the quick
//! CPU run twice under callgrind through the release binary, the
//! first saved as a baseline, the second compared with it. Every timed case
//! gets simulated figures (instructions counted in its measured region, the
//! functions that executed them), and the two runs' figures agree within the
//! tolerance: no simulated regression, and the check says the simulated
//! figures gate those cases. Without valgrind the test says it skipped,
//! except in CI (`CI` set), where it fails.
//!
//! The whole quick run: every suite that times a case, 71 cases (amp counts one
//! training step after a small warm-up step, autotune's benchmark mode the
//! algorithm its timed run chose: docs/src/check.md, "Simulated sittings").

use std::path::Path;
use std::process::{Command, Output};
use vramlab_tests::{workspace_root, xtask_release};

use serde_json::Value;

fn xtask(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).current_dir(dir).env_remove("GITHUB_ACTIONS").output().expect("xtask runs")
}

/// How many cases the quick run counts. The two runs' output folders differ
/// in length on purpose: the simulated processes get the same arguments and
/// environment whatever `--out` is (a longer path once moved glibc malloc's
/// counts, and allocator's raw cases, a few hundred instructions of malloc and
/// free, by 0.6 %).
const COUNTED: usize = 71;

#[test]
fn a_simulated_aa_pair_of_the_quick_cpu_suite_has_no_regression() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "valgrind is missing in CI: .ci/run installs it");
        eprintln!("skipped: no valgrind on the PATH (Debian: apt-get install valgrind)");
        return;
    }
    let bin = xtask_release();
    let dir = std::env::temp_dir().join(format!("vramlab-simulated-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = |p: &str| dir.join(p).to_str().unwrap().to_owned();
    let bench = ["bench", "--quick", "--device", "cpu", "--simulate", "--samples", "5"];

    let started = std::time::Instant::now();
    let first = xtask(
        &bin,
        &dir,
        &[&bench[..], &["--out", &d("a"), "--save-baseline", "a", "--baseline-dir", &d("b")]].concat(),
    );
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("simulated pass: {COUNTED} cases counted")), "{stderr}");
    let results = vramlab_reports::read_results_json(&dir.join("a").join(vramlab_reports::RESULTS_JSON)).unwrap();
    for c in results.suites.iter().flat_map(|s| &s.cases).filter(|c| c.outcome.is_ok() && c.timing.is_some()) {
        let s = c.simulated.as_ref().unwrap_or_else(|| panic!("{} has no simulated figures", c.name));
        assert!(s.instructions > 0 && s.estimated_cycles >= s.instructions, "{}: {s:?}", c.name);
        assert!(s.regions.is_none(), "the regions stay in the simulated process's results");
        assert!(!s.functions.is_empty() && s.functions.windows(2).all(|w| w[0].instructions >= w[1].instructions));
    }
    // The add kernel's own instructions are named in its cases' profiles.
    let suite = results.suites.iter().find(|s| s.name == "cpu-vs-gpu").expect("the cpu-vs-gpu suite ran");
    let add = suite.cases.iter().find(|c| c.name == "add/cpu/1024").and_then(|c| c.simulated.as_ref()).unwrap();
    assert!(add.functions.iter().any(|f| f.name == "vramlab_cpu_kernels::elementwise::add"), "{:?}", add.functions);

    let config = workspace_root().join("vramlab.toml");
    let second = xtask(
        &bin,
        &dir,
        &[
            &bench[..],
            &["--out", &d("a-longer-output-folder"), "--baseline", "a", "--baseline-dir", &d("b"), "--json"],
            // The gate's settings a repository's CI uses: its vramlab.toml.
            &["--config", config.to_str().unwrap()],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    let took = started.elapsed();
    assert!(matches!(second.status.code(), Some(0 | 1)), "{stderr}");
    let json: Value = serde_json::from_slice(&second.stdout).expect("the comparison as JSON");
    let rows = json["rows"].as_array().unwrap();
    let simulated: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "simulated").collect();
    // A benchmark-mode case whose two timed runs chose different algorithms (by
    // their clocks) has one row saying so instead of its two figures.
    let choices: Vec<&Value> = simulated.iter().copied().filter(|r| r["metric"] == "simulated.timed_choice").collect();
    assert_eq!(simulated.len(), 2 * COUNTED - choices.len(), "instructions and estimated cycles of each counted case");
    for r in &choices {
        assert_eq!(r["status"], "not_compared", "{r}");
        assert!(
            r["case"]["case"].as_str().unwrap().ends_with("/benchmark"),
            "only benchmark mode chooses by the clock: {r}"
        );
    }
    for r in &simulated {
        assert_ne!(r["status"], "regression", "an A/A pair: {r}");
    }
    let instructions = simulated.iter().filter(|r| r["metric"] == "simulated.instructions");
    for r in instructions {
        // Neither way past the tolerance (0.5 %). Not to the instruction: cpu-vs-gpu's
        // process still moves glibc malloc's path by up to a few hundred instructions
        // between runs (`mlp_train_step/cpu/b8_…`: 207 835 → 208 107 in one pair).
        assert!(r["change"].as_f64().unwrap().abs() < 0.005, "instructions repeat: {r}");
    }
    // Their times are reported, not gated: this A/A pair cannot fail on a busy machine's clock
    // (a case of two different timed choices is gated by its time, which one run a side does not judge).
    let flipped = |r: &Value| choices.iter().any(|c| c["case"] == r["case"]);
    for r in rows.iter().filter(|r| r["kind"] == "time" && !flipped(r)) {
        assert_eq!(r["gated"], false, "{r}");
        assert_eq!(r["gated_by_simulation"], true, "{r}");
    }
    assert_eq!(second.status.code(), Some(0), "{stderr}");
    eprintln!("the simulated A/A pair took {:.0} s", took.as_secs_f64());
    let _ = std::fs::remove_dir_all(&dir);
}
