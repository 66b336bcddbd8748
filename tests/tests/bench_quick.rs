//! `cargo xtask bench --quick --device cpu`, end to end: the release binary is
//! built and run as a user would, and its results are checked against the
//! schema and for sanity.

use std::process::Command;
use vramlab_tests::xtask_release;

use vramlab_suites::{Outcome, RunResults, SCHEMA_VERSION};

fn case_metric(results: &RunResults, suite: &str, case: &str, metric: &str) -> Option<f64> {
    let s = results.suites.iter().find(|s| s.name == suite)?;
    s.cases.iter().find(|c| c.name == case)?.metrics.get(metric).copied()
}

#[test]
fn bench_quick_on_cpu_writes_sane_results() {
    let xtask = xtask_release();
    let out = std::env::temp_dir().join(format!("vramlab-bench-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let started = std::time::Instant::now();
    let run = Command::new(&xtask)
        .args(["bench", "--quick", "--device", "cpu", "--out"])
        .arg(&out)
        .output()
        .expect("xtask runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let results = vramlab_reports::read_results_json(&out.join(vramlab_reports::RESULTS_JSON)).expect("valid results");
    assert_eq!(results.schema_version, SCHEMA_VERSION);
    assert!(results.options.quick);
    assert_eq!(results.environment.device, "cpu");
    assert!(results.environment.cpu_cores >= 1 && results.environment.host_memory_bytes > 0);
    let names: Vec<&str> = results.suites.iter().map(|s| s.name.as_str()).collect();
    for expected in vramlab_suites::all_suites().iter().map(|s| s.name()) {
        assert!(names.contains(&expected), "suite {expected} missing from {names:?}");
        assert!(out.join(format!("{expected}.csv")).is_file(), "no CSV for {expected}");
    }
    // The report is written too, and the terminal summary ends with its path.
    let stdout = String::from_utf8_lossy(&run.stdout);
    let index = out.join("report").join("index.html");
    assert!(index.is_file(), "no report: {stdout}");
    assert!(stdout.trim_end().ends_with(&index.display().to_string()), "{stdout}");
    assert!(out.join("report").join("summary.md").is_file() && out.join("report").join("trace.json").is_file());
    if let Some(reason) = &results.environment.gpu_unavailable_reason {
        // Wrapped to the terminal summary's width: compared word by word.
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&stdout).matches(&words(reason)).count(), 1, "the CUDA reason once: {stdout}");
    }
    // Schema v2: the training step keeps its timeline (peak included) and category stack.
    let memory = results.suites.iter().find(|s| s.name == "memory").expect("memory suite");
    let train = memory.cases.iter().find(|c| c.name == "train_step_peak").expect("train_step_peak");
    let tl = train.timeline.as_ref().expect("a timeline");
    assert_eq!(tl.allocated.bytes.iter().max(), Some(&tl.peak_allocated_bytes));
    assert_eq!(Some(tl.peak_allocated_bytes), train.memory.as_ref().map(|m| m.peak_allocated_bytes));
    assert!(tl.allocated.time_ns.len() <= vramlab_suites::TIMELINE_POINTS);
    let stack = train.categories.as_ref().expect("a category stack");
    assert!(stack.by_category_bytes.contains_key("parameter") && stack.by_category_bytes.contains_key("gradient"));
    // Its kernels (the first MAX_KERNEL_SLICES) are in the results and, as complete
    // events on their own tracks, in trace.json.
    assert!(!train.kernels.is_empty() && train.kernels.len() <= vramlab_suites::MAX_KERNEL_SLICES);
    assert!(train.kernels.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report").join("trace.json")).unwrap()).expect("trace JSON");
    let slices = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X" && e["cat"] == "kernel");
    assert_eq!(slices.count(), train.kernels.len());
    for suite in &results.suites {
        assert!(!suite.cases.is_empty(), "{} has no cases", suite.name);
        assert!(!suite.findings.is_empty(), "{} has no findings", suite.name);
        for case in &suite.cases {
            match &case.outcome {
                Outcome::Ok => {
                    if let Some(t) = &case.timing {
                        assert!(
                            t.samples_ns.len() >= 10,
                            "{}/{}: {} samples",
                            suite.name,
                            case.name,
                            t.samples_ns.len()
                        );
                        assert!(t.median_ns > 0.0 && t.min_ns <= t.median_ns);
                    }
                    for (name, value) in &case.metrics {
                        assert!(value.is_finite(), "{}/{}: {name} = {value}", suite.name, case.name);
                    }
                }
                Outcome::NotAvailable { reason } => assert!(!reason.is_empty()),
                Outcome::Failed { message } => panic!("{}/{} failed: {message}", suite.name, case.name),
            }
        }
    }
    // What holds on any machine: allocation through the cache beats the device's
    // malloc for a large block, and the pitfall cases of the GPU suites say why
    // they do not apply here.
    let cached = case_metric(&results, "allocator", "cached/64MiB", "pair_ns").expect("allocator cached/64MiB");
    let raw = case_metric(&results, "allocator", "raw/64MiB", "pair_ns").expect("allocator raw/64MiB");
    assert!(cached < raw, "cached {cached} ns vs raw {raw} ns");
    let transfer = results.suites.iter().find(|s| s.name == "transfer").unwrap();
    assert!(
        transfer.findings.iter().all(|f| f.verdict == vramlab_suites::Verdict::NotApplicable),
        "pinned-vs-pageable must not be judged on a CPU device"
    );
    assert!(took.as_secs() < 300, "--quick took {took:?}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bench_rejects_bad_input_with_a_message() {
    let xtask = xtask_release();
    for (args, needle, code) in [
        (vec!["bench", "--suite", "nope"], "unknown suite 'nope'", 1),
        (vec!["bench", "--device", "tpu"], "unknown device type 'tpu'", 1),
        (vec!["bench", "--capacity", "12GB"], "GiB", 2),
    ] {
        let out = Command::new(&xtask).args(&args).output().expect("xtask runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
