//! Tests of the comparison on synthetic runs: seeded noise trials (false alarms,
//! power, the reported detectable effect), a planted memory regression, case
//! matching, corrupt baselines, unknown fields, and the export formats.

use std::collections::BTreeMap;

use vramlab_rng::Rng;
use vramlab_suites::harness::summarize;
use vramlab_suites::{
    CaseResult, Environment, MemoryPeaks, Outcome, RunOptions, RunResults, SCHEMA_VERSION, SuiteResult,
};

use super::*;

fn case(name: &str, samples: Vec<f64>, segment_bytes: f64) -> CaseResult {
    CaseResult::ok(name)
        .with_params([("size".into(), serde_json::json!(64))])
        .with_timing(summarize(samples, 1, "host"))
        .with_metrics([("segment_bytes".into(), segment_bytes), ("bandwidth_gbps".into(), 3.0)])
        .with_memory(MemoryPeaks {
            device: "cpu".into(),
            peak_allocated_bytes: 1 << 20,
            peak_reserved_bytes: segment_bytes as u64,
            peak_active_bytes: 1 << 20,
            peak_phase: None,
            by_category_at_peak_bytes: BTreeMap::from([("activation".into(), 1 << 20)]),
            allocator_events: 4,
        })
        .with_duration_ns(1)
}

fn run(cases: Vec<CaseResult>) -> RunResults {
    RunResults {
        schema_version: SCHEMA_VERSION,
        vramlab_version: "0.1.0".into(),
        started_at: "2026-11-24T00:00:00Z".into(),
        options: RunOptions {
            suites: vec![],
            device: "cpu".into(),
            quick: true,
            samples: None,
            seed: 42,
            capacity_bytes: 1 << 32,
        },
        environment: Environment {
            cpu_model: "Test CPU".into(),
            cpu_cores: 2,
            host_memory_bytes: 1 << 34,
            gpus: vec![],
            gpu_unavailable_reason: None,
            device: "cpu".into(),
            os: "linux x86_64".into(),
            rustc: None,
            git_commit: Some("abc".into()),
        },
        suites: vec![SuiteResult {
            name: "demo".into(),
            description: "d".into(),
            device: "cpu".into(),
            duration_ns: 1,
            cases,
            findings: vec![],
            charts: vec![],
        }],
    }
}

/// `n` samples around `center` with multiplicative Gaussian noise of `noise`
/// (0.2: 20 %), from the seeded generator.
fn noisy(rng: &mut Rng, n: usize, center: f64, noise: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let z = rng.normal();
            center * (1.0 + noise * z).max(0.05)
        })
        .collect()
}

fn labels() -> Labels {
    Labels { baseline: "old.json".into(), current: "new.json".into() }
}

/// Cheaper than the default 2000 resamples so 3 × 1000 trials stay quick in a
/// debug build; the verdicts are the same kind.
fn trial_config() -> CheckConfig {
    CheckConfig::parse("[check]\nbootstrap_resamples = 400\n").unwrap()
}

fn time_row(c: &Comparison) -> &Row {
    c.rows.iter().find(|r| r.kind == Kind::Time).expect("a time row")
}

const TRIALS: usize = 1000;
/// Per side; a `--quick` run takes 10 to 50 samples per case, a full run up to 200.
const SAMPLES: usize = 40;

/// Runs `TRIALS` seeded comparisons of two noisy sample sets whose true medians
/// differ by `slowdown`; returns (verdicts, reported detectable slowdowns).
fn trials(slowdown: f64, seed: u64) -> (Vec<Status>, Vec<f64>) {
    let cfg = trial_config();
    let mut rng = Rng::new(seed);
    let mut verdicts = Vec::with_capacity(TRIALS);
    let mut detectable = Vec::new();
    for _ in 0..TRIALS {
        let old = run(vec![case("t", noisy(&mut rng, SAMPLES, 1000.0, 0.2), 2097152.0)]);
        let new = run(vec![case("t", noisy(&mut rng, SAMPLES, 1000.0 * (1.0 + slowdown), 0.2), 2097152.0)]);
        let c = compare(&old, &new, &cfg, false, labels());
        let r = time_row(&c);
        verdicts.push(r.status);
        detectable.extend(r.detectable_slowdown);
    }
    (verdicts, detectable)
}

fn share(v: &[Status], s: Status) -> f64 {
    v.iter().filter(|&&x| x == s).count() as f64 / v.len() as f64
}

#[test]
fn identical_noisy_distributions_give_no_false_alarm_in_99_percent() {
    let (v, _) = trials(0.0, 1);
    let alarms = share(&v, Status::Regression);
    eprintln!("no change: false alarms in {:.1} % of {TRIALS} trials", alarms * 100.0);
    assert!(alarms <= 0.01, "false alarms in {:.1} % of trials", alarms * 100.0);
}

#[test]
fn a_30_percent_slowdown_is_flagged_in_95_percent() {
    let (v, _) = trials(0.30, 2);
    let flagged = share(&v, Status::Regression);
    eprintln!("30 % slowdown: flagged in {:.1} % of {TRIALS} trials", flagged * 100.0);
    assert!(flagged >= 0.95, "flagged in {:.1} % of trials", flagged * 100.0);
}

#[test]
fn the_reported_detectable_slowdown_agrees_with_trials() {
    // What the comparisons of equal runs say they could detect…
    let (_, d) = trials(0.0, 3);
    let mut d = d;
    d.sort_by(f64::total_cmp);
    let typical = d[d.len() / 2];
    assert!(typical > 0.05 && typical < 0.30, "detectable slowdown {typical}");
    // …is detected about 95 % of the time when planted (the statement is
    // approximate: allow 85 %), and a slowdown well below it mostly is not.
    let (at, _) = trials(typical, 4);
    let flagged = share(&at, Status::Regression);
    assert!(flagged >= 0.85, "at the reported {:.1} %: flagged in {:.1} %", typical * 100.0, flagged * 100.0);
    let (below, _) = trials(0.05 + (typical - 0.05) / 3.0, 5);
    let flagged_below = share(&below, Status::Regression);
    eprintln!(
        "reported detectable slowdown {:.1} %: flagged in {:.1} % at it, {:.1} % well below it",
        typical * 100.0,
        flagged * 100.0,
        flagged_below * 100.0
    );
    assert!(flagged_below < 0.5, "well below: flagged in {:.1} %", flagged_below * 100.0);
}

#[test]
fn verdicts_are_reproducible() {
    let mut rng = Rng::new(9);
    let old = run(vec![case("t", noisy(&mut rng, SAMPLES, 1000.0, 0.2), 0.0)]);
    let new = run(vec![case("t", noisy(&mut rng, SAMPLES, 1080.0, 0.2), 0.0)]);
    let a = output::json(&compare(&old, &new, &CheckConfig::default(), false, labels())).unwrap();
    let b = output::json(&compare(&old, &new, &CheckConfig::default(), false, labels())).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_planted_memory_regression_fails_exactly_and_names_the_case() {
    let samples: Vec<f64> = (0..20).map(|i| 1000.0 + i as f64).collect();
    let seg = 20.0 * 1024.0 * 1024.0;
    let old = run(vec![case("a", samples.clone(), seg), case("b", samples.clone(), seg)]);
    let mut new = old.clone();
    // One more 2 MiB segment in case b.
    new.suites[0].cases[1].metrics.insert("segment_bytes".into(), seg + 2097152.0);
    let c = compare(&old, &new, &CheckConfig::default(), false, labels());
    assert_eq!(c.exit_code(), 1);
    let regressions: Vec<&Row> = c.rows.iter().filter(|r| r.status == Status::Regression).collect();
    assert_eq!(regressions.len(), 1, "{regressions:?}");
    let r = regressions[0];
    assert_eq!((r.case.case.as_str(), r.metric.as_str(), r.change), ("b", "segment_bytes", Some(2097152.0)));
    assert_eq!(c.rows[0].metric, "segment_bytes", "worst first");
    assert!(r.detail.contains("20.00 MiB → 22.00 MiB (+2.00 MiB)"), "{}", r.detail);
    let text = output::terminal(&c, false, false);
    assert!(text.contains("REGRESSION") && text.contains("demo/b {\"size\":64} (cpu)"), "{text}");
    let md = output::markdown(&c);
    assert!(md.contains("## Regressions (1)") && md.contains("`demo/b {\"size\":64} (cpu)` | segment_bytes"), "{md}");
    let ann = output::annotations(&c);
    assert!(ann.starts_with("::error title=vramlab regression::demo/b"), "{ann}");
    // Identical runs: every memory figure unchanged, exit 0.
    let same = compare(&old, &old, &CheckConfig::default(), false, labels());
    assert_eq!(same.exit_code(), 0);
    assert!(same.rows.iter().filter(|r| r.kind == Kind::Memory).all(|r| r.status == Status::NoChange));
    // A tolerance of 2 MiB lets it through, a decrease is an improvement.
    let tolerant = CheckConfig::parse("[case.\"demo/b\"]\nmemory_tolerance_bytes = 2097152\n").unwrap();
    assert_eq!(compare(&old, &new, &tolerant, false, labels()).exit_code(), 0);
    let better = compare(&new, &old, &CheckConfig::default(), false, labels());
    assert_eq!(better.exit_code(), 0);
    assert_eq!(better.count(Status::Improvement), 1);
}

#[test]
fn cases_match_by_suite_name_and_params_and_one_sided_cases_are_listed() {
    let s: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
    let old = run(vec![case("a", s.clone(), 0.0), case("gone", s.clone(), 0.0)]);
    let mut new = run(vec![case("a", s.clone(), 0.0), case("added", s.clone(), 0.0)]);
    // Same name, other parameters: another case.
    let mut other = case("a", s, 0.0);
    other.params.insert("size".into(), serde_json::json!(128));
    new.suites[0].cases.push(other);
    let c = compare(&old, &new, &CheckConfig::default(), false, labels());
    let names = |v: &[CaseKey]| v.iter().map(|k| k.to_string()).collect::<Vec<_>>();
    assert_eq!(names(&c.only_in_baseline), ["demo/gone {\"size\":64} (cpu)"]);
    assert_eq!(names(&c.only_in_current), ["demo/added {\"size\":64} (cpu)", "demo/a {\"size\":128} (cpu)"]);
    assert_eq!(c.exit_code(), 0);

    // A memory figure on one side only is listed, not judged.
    let mut more = old.clone();
    more.suites[0].cases[0].metrics.insert("workspace_bytes".into(), 4096.0);
    let c = compare(&old, &more, &CheckConfig::default(), false, labels());
    let r = c.rows.iter().find(|r| r.metric == "workspace_bytes").unwrap();
    assert_eq!((r.status, r.detail.as_str(), r.new), (Status::NotCompared, "not in the baseline", Some(4096.0)));
    let c = compare(&more, &old, &CheckConfig::default(), false, labels());
    let r = c.rows.iter().find(|r| r.metric == "workspace_bytes").unwrap();
    assert_eq!((r.status, r.detail.as_str()), (Status::NotCompared, "in the baseline only"));
}

#[test]
fn a_failing_case_is_a_regression_and_other_machines_skip_times() {
    let s: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
    let old = run(vec![case("a", s.clone(), 0.0)]);
    let mut new = old.clone();
    new.suites[0].cases[0].outcome = Outcome::Failed { message: "out of memory".into() };
    let c = compare(&old, &new, &CheckConfig::default(), false, labels());
    assert_eq!(c.rows[0].status, Status::Regression);
    assert!(c.rows[0].detail.contains("out of memory"));

    let mut elsewhere = old.clone();
    elsewhere.environment.cpu_model = "Other CPU".into();
    elsewhere.suites[0].cases[0].timing = Some(summarize(s.iter().map(|x| x * 3.0).collect(), 1, "host"));
    let c = compare(&old, &elsewhere, &CheckConfig::default(), false, labels());
    assert!(!c.times_compared);
    assert_eq!(c.exit_code(), 0, "3× slower on another machine is not compared");
    assert_eq!(time_row(&c).status, Status::NotCompared);
    assert!(c.environment_differences[0].contains("CPU model: Test CPU (baseline) vs Other CPU"));
    let forced = compare(&old, &elsewhere, &CheckConfig::default(), true, labels());
    assert_eq!(forced.exit_code(), 1, "--force-times compares them");
    let ungated = CheckConfig::parse("[check]\ngate_times = false\n").unwrap();
    let reported = compare(&old, &elsewhere, &ungated, true, labels());
    assert_eq!(reported.exit_code(), 0, "gate_times = false: reported, not gated");
    assert_eq!(time_row(&reported).status, Status::Inconclusive);
    assert!(time_row(&reported).detail.contains("not gated"), "{}", time_row(&reported).detail);
}

fn temp(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("vramlab-check-{}-{name}", std::process::id()));
    std::fs::write(&p, contents).unwrap();
    p
}

#[test]
fn missing_corrupt_truncated_and_incompatible_baselines_are_named() {
    let good = serde_json::to_vec_pretty(&run(vec![case("a", vec![1.0; 10], 0.0)])).unwrap();
    let missing = std::env::temp_dir().join("vramlab-check-no-such-baseline.json");
    let e = load_results(&missing, "baseline").unwrap_err().to_string();
    assert!(e.contains("vramlab-check-no-such-baseline.json") && e.contains("no such file"), "{e}");
    assert!(e.contains("--save-baseline"), "{e}");
    let e = load_results(&missing, "results").unwrap_err().to_string();
    assert!(e.starts_with("results ") && e.contains("run `cargo xtask bench` first"), "{e}");

    let truncated = temp("truncated.json", &good[..good.len() / 2]);
    let e = load_results(&truncated, "baseline").unwrap_err().to_string();
    assert!(e.contains("truncated.json") && e.contains("EOF while parsing"), "{e}");

    let corrupt = temp("corrupt.json", b"{\"schema_version\": \"one\"}");
    let e = load_results(&corrupt, "baseline").unwrap_err().to_string();
    assert!(e.contains("corrupt.json") && e.contains("not vramlab results"), "{e}");

    let empty = temp("empty.json", b"");
    assert!(load_results(&empty, "baseline").unwrap_err().to_string().contains("empty"));

    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
    v["schema_version"] = serde_json::json!(99);
    let newer = temp("newer.json", v.to_string().as_bytes());
    let e = load_results(&newer, "baseline").unwrap_err().to_string();
    assert!(e.contains("newer.json") && e.contains("schema version 99"), "{e}");
    for p in [truncated, corrupt, empty, newer] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_later_schema_with_extra_fields_still_compares() {
    let base = run(vec![case("a", (0..20).map(|i| 100.0 + i as f64).collect(), 4096.0)]);
    let mut v = serde_json::to_value(&base).unwrap();
    v["schema_version"] = serde_json::json!(2);
    v["report_extras"] = serde_json::json!({"charts": true});
    v["suites"][0]["cases"][0]["future_series"] = serde_json::json!([{"t_ns": 0, "allocated_bytes": 5}]);
    v["suites"][0]["cases"][0]["memory"]["segments_timeline"] = serde_json::json!([1, 2, 3]);
    let path = temp("v2.json", v.to_string().as_bytes());
    let read = load_results(&path, "baseline").unwrap();
    let c = compare(&read, &base, &CheckConfig::default(), false, labels());
    assert_eq!(c.exit_code(), 0);
    assert!(c.rows.iter().any(|r| r.metric == "memory.peak_reserved_bytes" && r.status == Status::NoChange));
    if SCHEMA_VERSION < 2 {
        assert!(c.notes.iter().any(|n| n.contains("schema version 2")), "{:?}", c.notes);
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn bmf_export_has_the_documented_shape() {
    let r = run(vec![case("a", vec![10.0, 12.0, 11.0, 13.0], 4096.0)]);
    let v = export::bmf(&r);
    // BMF: an object of benchmarks, each an object of measures, each an object
    // with a numeric `value` and optional numeric `lower_value`/`upper_value`.
    let benches = v.as_object().expect("an object");
    assert_eq!(benches.len(), 1);
    let (name, measures) = benches.iter().next().unwrap();
    assert_eq!(name, "demo/a {\"size\":64} (cpu)");
    assert!(name.len() <= 1024);
    for (measure, metric) in measures.as_object().expect("measures object") {
        assert!(!measure.is_empty() && measure.len() <= 64, "{measure}");
        let m = metric.as_object().unwrap();
        assert!(m["value"].is_number(), "{measure}");
        for k in m.keys() {
            assert!(["value", "lower_value", "upper_value"].contains(&k.as_str()), "{k}");
            assert!(m[k].is_number());
        }
    }
    assert_eq!(measures["latency"]["value"], 11.5);
    assert_eq!(measures["latency"]["lower_value"], 10.75);
    assert_eq!(measures["segment-bytes"]["value"], 4096.0);
    assert_eq!(measures["peak-reserved-bytes"]["value"], 4096.0);
}

#[test]
fn gab_export_has_the_documented_shape() {
    let mut r = run(vec![case("a", vec![10.0, 12.0, 11.0, 13.0], 4096.0)]);
    r.suites[0]
        .cases
        .push(CaseResult { outcome: Outcome::Failed { message: "x".into() }, ..case("f", vec![1.0], 1.0) });
    let v = export::gab(&r);
    // customSmallerIsBetter: an array of {name, unit, value} with optional
    // string `range` and `extra`, nothing else.
    let entries = v.as_array().expect("an array");
    assert!(!entries.is_empty());
    for e in entries {
        let o = e.as_object().unwrap();
        assert!(o["name"].is_string() && o["unit"].is_string() && o["value"].is_number(), "{e}");
        for k in o.keys() {
            assert!(["name", "unit", "value", "range", "extra"].contains(&k.as_str()), "{k}");
        }
        for k in ["range", "extra"] {
            assert!(o.get(k).is_none_or(|x| x.is_string()));
        }
        assert!(!o["name"].as_str().unwrap().contains("demo/f"), "failed cases are not exported");
    }
    let time = entries.iter().find(|e| e["name"] == "demo/a {\"size\":64} (cpu) time").unwrap();
    assert_eq!((time["unit"].as_str(), time["value"].as_f64()), (Some("ns"), Some(11.5)));
    let seg = entries.iter().find(|e| e["name"] == "demo/a {\"size\":64} (cpu) segment_bytes").unwrap();
    assert_eq!((seg["unit"].as_str(), seg["value"].as_f64()), (Some("bytes"), Some(4096.0)));
}
