//! Tests of the comparison on synthetic runs: seeded noise trials with noise
//! between runs as well as within (false alarms, power, the reported
//! detectable effect; independent runs and A/B pairs), a planted memory
//! regression, case matching, one-run baselines, run sets (corrupt, appended),
//! unknown fields, and the export formats.

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

/// Cheaper than the default 2000 resamples so 1000-trial sets stay quick in
/// a test build; the verdicts are the same kind.
fn trial_config() -> CheckConfig {
    CheckConfig::parse("[check]\nbootstrap_resamples = 400\n").unwrap()
}

fn time_row(c: &Comparison) -> &Row {
    c.rows.iter().find(|r| r.kind == Kind::Time).expect("a time row")
}

const TRIALS: usize = 1000;
/// Per run; a `--quick` run takes 10 to 50 samples per case, a full run up to 200.
const SAMPLES: usize = 40;
/// Within a run: 20 % Gaussian noise per sample.
const WITHIN: f64 = 0.2;
/// Between runs: each run's level moves by a log-normal factor of 5 % (σ of ln).
const BETWEEN: f64 = 0.05;
/// The baseline's runs and this build's (`bench --repeat 5 --save-baseline`, `bench --repeat 3 --baseline`).
const BASE_RUNS: usize = 5;
const NEW_RUNS: usize = 3;

/// `runs` runs of one build whose true median is `center`: each run's level
/// moves by exp(`BETWEEN`·z), its samples by `WITHIN`.
fn runs_of(rng: &mut Rng, runs: usize, center: f64, between: f64) -> RunSet {
    let all = (0..runs)
        .map(|_| {
            let level = center * (between * rng.normal()).exp();
            run(vec![case("t", noisy(rng, SAMPLES, level, WITHIN), 2097152.0)])
        })
        .collect();
    RunSet::new(all).unwrap()
}

/// Runs `TRIALS` seeded comparisons of a baseline of `BASE_RUNS` runs and
/// `NEW_RUNS` runs of a build whose true median is `slowdown` slower; returns
/// (verdicts, reported detectable slowdowns).
fn trials(slowdown: f64, seed: u64) -> (Vec<Status>, Vec<f64>) {
    let cfg = trial_config();
    let mut rng = Rng::new(seed);
    let mut verdicts = Vec::with_capacity(TRIALS);
    let mut detectable = Vec::new();
    for _ in 0..TRIALS {
        let old = runs_of(&mut rng, BASE_RUNS, 1000.0, BETWEEN);
        let new = runs_of(&mut rng, NEW_RUNS, 1000.0 * (1.0 + slowdown), BETWEEN);
        let c = compare_runs(&old, &new, &cfg, CompareOptions::default(), labels());
        let r = time_row(&c);
        verdicts.push(r.status);
        detectable.extend(r.detectable_slowdown);
    }
    (verdicts, detectable)
}

/// `TRIALS` A/B sittings of `pairs` pairs: both runs of a pair share a drift of
/// `drift` (σ of ln: the machine's state at the time), and each run has its own
/// `BETWEEN` on top; B is `slowdown` slower.
fn ab_trials(slowdown: f64, pairs: usize, drift: f64, seed: u64) -> Vec<Status> {
    let cfg = trial_config();
    let mut rng = Rng::new(seed);
    let options = CompareOptions { force_times: false, design: Design::Pairs, known_noise: None };
    (0..TRIALS)
        .map(|_| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..pairs {
                let level = 1000.0 * (drift * rng.normal()).exp();
                a.push(runs_of(&mut rng, 1, level, BETWEEN).first().clone());
                b.push(runs_of(&mut rng, 1, level * (1.0 + slowdown), BETWEEN).first().clone());
            }
            let c = compare_runs(&RunSet::new(a).unwrap(), &RunSet::new(b).unwrap(), &cfg, options.clone(), labels());
            time_row(&c).status
        })
        .collect()
}

fn share(v: &[Status], s: Status) -> f64 {
    v.iter().filter(|&&x| x == s).count() as f64 / v.len() as f64
}

#[test]
fn identical_noisy_builds_give_no_false_alarm_in_99_percent() {
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
    // What the comparisons of equal builds say they could detect…
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
fn ab_pairs_cancel_drift_between_sittings() {
    // 15 % drift shared by each pair's two runs (and 5 % of each run's own):
    // five pairs of one build give no false alarm in 99 %, a 30 % slower B is
    // flagged in 95 % — as independent runs with 5 % between them, not 15 %.
    let same = ab_trials(0.0, 5, 0.15, 6);
    let alarms = share(&same, Status::Regression);
    let slower = ab_trials(0.30, 5, 0.15, 7);
    let flagged = share(&slower, Status::Regression);
    eprintln!(
        "A/B, 5 pairs, 15 % drift: false alarms in {:.1} %, a 30 % slowdown flagged in {:.1} % of {TRIALS}",
        alarms * 100.0,
        flagged * 100.0
    );
    assert!(alarms <= 0.01, "false alarms in {:.1} %", alarms * 100.0);
    assert!(flagged >= 0.95, "flagged in {:.1} %", flagged * 100.0);
}

#[test]
fn a_figure_that_moves_15_percent_between_runs_is_not_a_10_percent_regression() {
    // Tight samples within each run (1 %), whole runs moving by up to 15 %:
    // the shape. A one-run interval would call +12 % a regression at
    // any threshold below it; three baseline runs at 100, 115 and 92 say the
    // runs alone move that much.
    let at = |level: f64| {
        let mut rng = Rng::new(level as u64);
        run(vec![case("t", noisy(&mut rng, SAMPLES, level, 0.01), 2097152.0)])
    };
    let cfg = CheckConfig::parse("[check]\ntime_threshold_percent = 10.0\n").unwrap();
    let base = RunSet::new(vec![at(1000.0), at(1150.0), at(920.0)]).unwrap();
    let c = compare_runs(&base, &RunSet::one(at(1120.0)), &cfg, CompareOptions::default(), labels());
    let r = time_row(&c);
    assert_ne!(r.status, Status::Regression, "{}", r.detail);
    assert!(r.between_run.unwrap() > 0.08 && r.detail.contains("3 baseline runs and 1 of this build"), "{}", r.detail);
    assert!(c.notes.iter().any(|n| n.contains("taken from the baseline's 3 runs")), "{:?}", c.notes);
    // A slowdown well beyond the runs' spread still is one.
    let slow = compare_runs(&base, &RunSet::one(at(2000.0)), &cfg, CompareOptions::default(), labels());
    assert_eq!(time_row(&slow).status, Status::Regression, "{}", time_row(&slow).detail);
}

#[test]
fn one_run_on_each_side_does_not_judge_times_and_says_why() {
    let mut rng = Rng::new(8);
    let old = run(vec![case("t", noisy(&mut rng, SAMPLES, 1000.0, 0.01), 0.0)]);
    let new = run(vec![case("t", noisy(&mut rng, SAMPLES, 3000.0, 0.01), 0.0)]);
    let c = compare(&old, &new, &CheckConfig::default(), false, labels());
    assert_eq!(c.exit_code(), 0, "3× slower, but one run each: not judged");
    let r = time_row(&c);
    assert_eq!(r.status, Status::NotCompared);
    assert!(r.detail.contains("noise between runs is unknown"), "{}", r.detail);
    assert!(c.warnings.iter().any(|w| w.contains("--repeat 5 --save-baseline")), "{:?}", c.warnings);
    assert!(output::terminal(&c, false, false).contains("warning: times not judged"));
    assert!(output::annotations(&c).contains("::warning title=vramlab::times not judged"));
    // One A/B pair: the same.
    let pairs = CompareOptions { force_times: false, design: Design::Pairs, known_noise: None };
    let c = compare_runs(&RunSet::one(old), &RunSet::one(new), &CheckConfig::default(), pairs, labels());
    assert!(time_row(&c).detail.contains("one A/B pair"), "{}", time_row(&c).detail);
}

#[test]
fn verdicts_are_reproducible() {
    let mut rng = Rng::new(9);
    let old = runs_of(&mut rng, 3, 1000.0, BETWEEN);
    let new = runs_of(&mut rng, 2, 1080.0, BETWEEN);
    let cfg = CheckConfig::default();
    let a = output::json(&compare_runs(&old, &new, &cfg, CompareOptions::default(), labels())).unwrap();
    let b = output::json(&compare_runs(&old, &new, &cfg, CompareOptions::default(), labels())).unwrap();
    assert_eq!(a, b);
    assert!(a.contains("\"between_run\"") && a.contains("\"design\": \"runs\""), "{a}");
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

    // Two runs a side (2 % apart), 3× slower on another machine.
    let at = |scale: f64, cpu: &str| {
        let mut r = old.clone();
        r.environment.cpu_model = cpu.into();
        r.suites[0].cases[0].timing = Some(summarize(s.iter().map(|x| x * scale).collect(), 1, "host"));
        r
    };
    let base = RunSet::new(vec![at(1.0, "Test CPU"), at(1.02, "Test CPU")]).unwrap();
    let elsewhere = RunSet::new(vec![at(3.0, "Other CPU"), at(3.06, "Other CPU")]).unwrap();
    let cmp = |cfg: &CheckConfig, force_times| {
        compare_runs(
            &base,
            &elsewhere,
            cfg,
            CompareOptions { force_times, design: Design::Runs, known_noise: None },
            labels(),
        )
    };
    let c = cmp(&CheckConfig::default(), false);
    assert!(!c.times_compared);
    assert_eq!(c.exit_code(), 0, "3× slower on another machine is not compared");
    assert_eq!(time_row(&c).status, Status::NotCompared);
    assert!(c.environment_differences[0].contains("CPU model: Test CPU (baseline) vs Other CPU"));
    let forced = cmp(&CheckConfig::default(), true);
    assert_eq!(forced.exit_code(), 1, "--force-times compares them: {}", time_row(&forced).detail);
    let ungated = CheckConfig::parse("[check]\ngate_times = false\n").unwrap();
    let reported = cmp(&ungated, true);
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

#[test]
fn run_sets_load_append_and_refuse_other_builds() {
    let mut rng = Rng::new(10);
    let set = runs_of(&mut rng, 3, 1000.0, BETWEEN);
    let path = temp("set.json", &set.to_json().unwrap());
    let read = load_runs(&path, "baseline").unwrap();
    assert_eq!(read.len(), 3);
    let samples = |r: &RunSet| r.runs()[2].suites[0].cases[0].timing.as_ref().unwrap().samples_ns.clone();
    assert_eq!(samples(&read).len(), samples(&set).len());
    assert!(samples(&read).iter().zip(samples(&set)).all(|(a, b)| (a - b).abs() <= 1e-9 * b.abs()));
    let e = load_results(&path, "baseline").unwrap_err().to_string();
    assert!(e.contains("a run set of 3 runs"), "{e}");
    // One run is written as a plain results file, which reads as a set of one.
    let one = RunSet::one(set.first().clone());
    let single = temp("single.json", &one.to_json().unwrap());
    assert!(load_results(&single, "baseline").is_ok());
    assert_eq!(load_runs(&single, "baseline").unwrap().len(), 1);

    let bytes = set.to_json().unwrap();
    let truncated = temp("set-truncated.json", &bytes[..bytes.len() / 2]);
    let e = load_runs(&truncated, "baseline").unwrap_err().to_string();
    assert!(e.contains("set-truncated.json") && e.contains("EOF while parsing"), "{e}");
    let empty_set = temp("set-empty.json", b"{\"vramlab_run_set\": 1, \"runs\": []}");
    assert!(load_runs(&empty_set, "baseline").unwrap_err().to_string().contains("no runs"));
    let newer = temp("set-newer.json", b"{\"vramlab_run_set\": 9, \"runs\": []}");
    assert!(load_runs(&newer, "baseline").unwrap_err().to_string().contains("format version 9"));

    let mut growing = RunSet::one(set.first().clone());
    growing.append(set.runs()[1].clone()).unwrap();
    let mut other_commit = set.first().clone();
    other_commit.environment.git_commit = Some("def".into());
    assert!(matches!(growing.append(other_commit), Err(AppendError::OtherCommit { .. })));
    let mut other_machine = set.first().clone();
    other_machine.environment.cpu_cores = 64;
    let e = growing.append(other_machine).unwrap_err().to_string();
    assert!(e.contains("CPU cores: 2 (baseline) vs 64"), "{e}");
    let mut full = set.first().clone();
    full.options.quick = false;
    assert!(matches!(growing.append(full), Err(AppendError::OtherKind { .. })));
    assert_eq!(growing.len(), 2);
    for p in [path, single, truncated, empty_set, newer] {
        let _ = std::fs::remove_file(p);
    }
}

/// A time whose process lands in one of two speeds (about 0.8 or 1.1 ms, as
/// `mlp_train_step/cpu/b64` does on the CI machine) is flagged by an A/A
/// sitting whose B side drew the slow speed 4 times in 5; with the history's
/// noise for that figure (σ 0.16 of ln, from runs of one build) it is not,
/// and a real 20 % slowdown of a quiet figure still is, in both designs.
#[test]
fn the_historys_noise_keeps_a_two_speed_time_from_a_false_alarm() {
    use crate::history::NoiseFloor;
    let mut rng = Rng::new(7);
    let mut sides = |a: [f64; 5], b: [f64; 5]| {
        let mut set = |levels: [f64; 5]| {
            RunSet::new(
                levels.iter().map(|&l| run(vec![case("t", noisy(&mut rng, SAMPLES, l, 0.03), 2097152.0)])).collect(),
            )
            .unwrap()
        };
        (set(a), set(b))
    };
    let known = |sigma: f64| {
        Some(KnownNoise::new(&[NoiseFloor {
            name: "demo/t {\"size\":64} (cpu) time".into(),
            builds: 3,
            runs: 12,
            between_run: sigma,
            robust_between_run: sigma,
            floor: 0.0,
        }]))
    };
    let cfg = trial_config();
    let opts = |design, known_noise| CompareOptions { force_times: false, design, known_noise };
    let (a, b) = sides([780.0, 840.0, 840.0, 830.0, 850.0], [1085.0, 1110.0, 1085.0, 1140.0, 895.0]);
    let plain = compare_runs(&a, &b, &cfg, opts(Design::Pairs, None), labels());
    assert_eq!(time_row(&plain).status, Status::Regression, "{}", time_row(&plain).detail);
    let told = compare_runs(&a, &b, &cfg, opts(Design::Pairs, known(0.16)), labels());
    let row = time_row(&told);
    assert_ne!(row.status, Status::Regression, "{}", row.detail);
    assert_eq!(row.known_between_run, Some(0.16));
    assert!(row.detail.contains("±16.0 % between runs as the history's runs of one build show"), "{}", row.detail);
    // Noise the runs show already is not added again: a known σ below it changes nothing.
    let low = compare_runs(&a, &b, &cfg, opts(Design::Pairs, known(0.001)), labels());
    assert_eq!(time_row(&low).ratio_interval, time_row(&plain).ratio_interval);
    assert_eq!(time_row(&low).known_between_run, None);
    // A quiet figure 20 % slower: flagged with its own low noise, paired or not.
    let (a, b) = sides([1000.0; 5], [1200.0; 5]);
    for design in [Design::Pairs, Design::Runs] {
        let c = compare_runs(&a, &b, &cfg, opts(design, known(0.02)), labels());
        assert_eq!(time_row(&c).status, Status::Regression, "{design:?}: {}", time_row(&c).detail);
    }
}

/// A case's simulated figures: `add` with `add_ir` instructions of its own, beside a fixed rest.
fn simulated(add_ir: u64) -> vramlab_suites::SimulatedCpu {
    let f = |name: &str, instructions| vramlab_suites::FunctionCount { name: name.into(), instructions };
    vramlab_suites::SimulatedCpu {
        regions: None,
        instructions: add_ir + 10_000,
        data_reads: 1,
        data_writes: 1,
        l1_misses: 0,
        ll_misses: 0,
        estimated_cycles: add_ir + 10_002,
        functions: vec![f("vramlab_cpu_kernels::elementwise::add", add_ir), f("malloc", 6_000), f("memset", 4_000)],
        timed_choice: None,
    }
}

fn with_simulated(mut run: RunResults, add_ir: u64) -> RunResults {
    run.suites[0].cases[0].simulated = Some(simulated(add_ir));
    run
}

#[test]
fn simulated_figures_of_different_timed_choices_are_not_compared_and_the_time_gates() {
    let cfg = CheckConfig::default();
    let side = |choice: &str, add_ir, time| {
        let mut r = run(vec![case("t", vec![time; 20], 1.0)]);
        let mut counted = simulated(add_ir);
        counted.timed_choice = Some(choice.to_owned());
        r.suites[0].cases[0].simulated = Some(counted);
        RunSet::new(vec![r.clone(), r]).unwrap()
    };
    // Benchmark mode chose another algorithm: 20 % more instructions, but different code.
    let c = compare_runs(
        &side("gemm_rayon", 90_000, 1000.0),
        &side("gemm_split_k", 110_000, 1000.0),
        &cfg,
        CompareOptions::default(),
        labels(),
    );
    assert!(!c.rows.iter().any(|r| r.metric == "simulated.instructions"), "not compared");
    let choice = c.rows.iter().find(|r| r.metric == "simulated.timed_choice").expect("one row says why");
    assert_eq!(choice.status, Status::NotCompared);
    assert!(choice.detail.contains("gemm_rayon → gemm_split_k"), "{}", choice.detail);
    assert!(!c.has_regression());
    // Its time gates it instead: twice as slow is a regression.
    let slow = compare_runs(
        &side("gemm_rayon", 90_000, 1000.0),
        &side("gemm_split_k", 90_000, 2000.0),
        &cfg,
        CompareOptions::default(),
        labels(),
    );
    let t = time_row(&slow);
    assert!(t.gated && !t.gated_by_simulation, "{t:?}");
    assert_eq!(t.status, Status::Regression, "{}", t.detail);
    // The same choice on both sides: compared as usual.
    let same = compare_runs(
        &side("gemm_rayon", 90_000, 1000.0),
        &side("gemm_rayon", 91_800, 1000.0),
        &cfg,
        CompareOptions::default(),
        labels(),
    );
    let r = same.rows.iter().find(|r| r.metric == "simulated.instructions").expect("compared");
    assert_eq!(r.status, Status::Regression, "{}", r.detail);
}

#[test]
fn simulated_figures_gate_within_their_tolerance_and_name_what_grew() {
    let cfg = CheckConfig::default();
    let base = || run(vec![case("t", vec![1000.0; 20], 1.0)]);
    let old = RunSet::new(vec![with_simulated(base(), 90_000), base()]).unwrap();
    let side = |add_ir, time| {
        let slow = run(vec![case("t", vec![time; 20], 1.0)]);
        RunSet::new(vec![with_simulated(slow.clone(), add_ir), slow]).unwrap()
    };
    let sim_row =
        |c: &Comparison| c.rows.iter().find(|r| r.metric == "simulated.instructions").expect("a simulated row").clone();
    // 2 % more work in `add`: 1.8 % of the case, over the 0.5 % tolerance.
    let c = compare_runs(&old, &side(91_800, 1000.0), &cfg, CompareOptions::default(), labels());
    let r = sim_row(&c);
    assert_eq!(r.status, Status::Regression, "{}", r.detail);
    assert_eq!(r.grew_most[0].name, "vramlab_cpu_kernels::elementwise::add");
    assert_eq!(r.grew_most[0].growth(), 1_800);
    assert!(r.detail.contains("100 000 → 101 800 instructions (+1.80 %"), "{}", r.detail);
    assert!(r.detail.contains("grew most: vramlab_cpu_kernels::elementwise::add +1 800"), "{}", r.detail);
    assert_eq!(c.method.simulated_figures, 2);
    assert!(output::markdown(&c).contains("gated by those"));
    // Within the tolerance, and the same count: no change.
    let same = compare_runs(&old, &side(90_300, 1000.0), &cfg, CompareOptions::default(), labels());
    assert_eq!(sim_row(&same).status, Status::NoChange, "{}", sim_row(&same).detail);
    // The case's time, twice as slow in both runs, is reported but not gated: the
    // simulated figures gate this CPU case.
    let slow = compare_runs(&old, &side(90_000, 2000.0), &cfg, CompareOptions::default(), labels());
    let t = time_row(&slow);
    assert!(!t.gated && t.gated_by_simulation, "{t:?}");
    assert_ne!(t.status, Status::Regression);
    assert!(t.detail.contains("gated by its simulated figures"), "{}", t.detail);
    assert!(!slow.has_regression());
    // A growth no larger than the floor is not a regression, whatever its
    // percentage (a tiny case's count moves a few dozen instructions between runs).
    let floored = CheckConfig::parse("[check]\nsimulated_floor_instructions = 1800\n").unwrap();
    let c = compare_runs(&old, &side(91_800, 1000.0), &floored, CompareOptions::default(), labels());
    assert_eq!(sim_row(&c).status, Status::NoChange, "{}", sim_row(&c).detail);
    assert!(
        sim_row(&c).detail.contains("tolerance ±0.5 % and ±1 800 instructions: within the floor"),
        "{}",
        sim_row(&c).detail
    );
    let c = compare_runs(&old, &side(91_801, 1000.0), &floored, CompareOptions::default(), labels());
    assert_eq!(sim_row(&c).status, Status::Regression, "{}", sim_row(&c).detail);
    let gate_both = CheckConfig::parse("[check]\ngate_simulated_times = true\n").unwrap();
    let both = compare_runs(&old, &side(90_000, 2000.0), &gate_both, CompareOptions::default(), labels());
    assert_eq!(time_row(&both).status, Status::Regression, "{}", time_row(&both).detail);
}

#[test]
fn a_time_too_noisy_to_gate_is_not_judged_and_warned_about() {
    let cfg = CheckConfig::default();
    let at = |level: f64| run(vec![case("t", vec![level; 20], 1.0)]);
    // Runs 30 % apart on each side: the between-run σ is above the 25 % cap.
    let old = RunSet::new(vec![at(1000.0), at(1500.0), at(700.0)]).unwrap();
    let new = RunSet::new(vec![at(2000.0), at(1400.0), at(3000.0)]).unwrap();
    let c = compare_runs(&old, &new, &cfg, CompareOptions::default(), labels());
    let t = time_row(&c);
    assert_eq!(t.status, Status::Inconclusive, "{}", t.detail);
    assert!(t.detail.starts_with("too noisy to gate on this machine"), "{}", t.detail);
    assert!(c.warnings.iter().any(|w| w.contains("1 time figure is too noisy to gate")), "{:?}", c.warnings);
}
