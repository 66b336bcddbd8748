//! `cargo xtask bench --quick --device cpu`, end to end: the release binary is
//! built and run as a user would, and its results are checked against the
//! schema and for sanity, and every sentence the report generates from them
//! (the headline, descriptions, findings, chart notes and marks, case notes) is
//! proofread: no doubled word, no "1 cases", units spaced from their numbers,
//! no NaN or inf, numbers as the project formats them, and the sentences the
//! page shows as sentences start with a capital and end with a period.

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
    // Every line the bench prints fits in 100 columns, its first one (the machine) included.
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(line.chars().count() <= 100, "a line over 100 columns:\n{line}\n--- stdout:\n{stdout}");
    }
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
    let problems = proofread_results(&results);
    assert!(problems.is_empty(), "sentences that read wrong:\n{}", problems.join("\n"));
    let _ = std::fs::remove_dir_all(&out);
}

/// Units that follow a number, a space between them.
const UNITS: [&str; 17] = [
    "ns", "µs", "ms", "s", "B", "KiB", "MiB", "GiB", "TiB", "GB/s", "GB", "MB", "FLOP", "kFLOP", "MFLOP", "GFLOP", "%",
];

/// What reads wrong in `text`; `sentence`: the page shows it as a sentence
/// (capital start, final period).
fn proofread(text: &str, sentence: bool) -> Vec<String> {
    proofread_with_labels(text, sentence, &[])
}

/// [`proofread`], where a word that is one of `labels` (a part of a case's name,
/// such as `4KiB` in `cached/4KiB` or `4194304` in `add/cpu/4194304`) names its
/// case and is left as it is.
fn proofread_with_labels(text: &str, sentence: bool, labels: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    let bare = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
    for pair in words.windows(2) {
        let (a, b) = (bare(pair[0]), bare(pair[1]));
        // "the CPU (CPU time ÷ GPU time)" repeats a word on purpose; "the the" does not.
        let aside = pair[0].ends_with([',', ';', ':']) || pair[1].starts_with('(');
        if !a.is_empty() && a == b && a.chars().all(char::is_alphabetic) && !aside {
            out.push(format!("doubled word {a:?}"));
        }
    }
    for (i, pair) in words.windows(2).enumerate() {
        // "1 cases" and "(1 more claims" (but "1 of 2 cases", "1 ms", "1 process" read well).
        let one = pair[0].trim_start_matches(|c: char| !c.is_alphanumeric());
        let more = matches!(pair[1], "more" | "other") && i + 2 < words.len();
        let noun = (if more { words[i + 2] } else { pair[1] }).trim_end_matches(|c: char| !c.is_alphanumeric());
        let after_of = i > 0 && words[i - 1] == "of";
        if one == "1"
            && !after_of
            && noun.len() > 2
            && noun.ends_with('s')
            && !noun.ends_with("ss")
            && !noun.ends_with("us")
            && !noun.ends_with("is")
            && !UNITS.contains(&noun)
        {
            out.push(format!("\"1 {noun}\""));
        }
    }
    for w in &words {
        let w = w.trim_matches(|c: char| matches!(c, ',' | ';' | ':' | '(' | ')' | '.' | '—'));
        if labels.contains(&w) {
            continue;
        }
        if matches!(w, "NaN" | "inf" | "-inf" | "infinity" | "Infinity") {
            out.push(format!("{w:?}"));
        }
        // A number glued to its unit: "5ms", "3.2MiB", "50%".
        if let Some(i) = w.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
            && i > 0
            && w[..i].chars().any(|c| c.is_ascii_digit())
            && UNITS.contains(&&w[i..])
        {
            out.push(format!("unit not spaced in {w:?}"));
        }
    }
    // Numbers as the project writes them: no negative zero, at most four decimals,
    // no raw quantity of seven or more digits in bytes, FLOP or ns (those get a unit).
    let mut rest = text;
    while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
        let start = if i > 0 && rest.as_bytes()[i - 1] == b'-' { i - 1 } else { i };
        let len = rest[i..].find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len() - i);
        let number = rest[start..i + len].trim_end_matches('.');
        let glued = i > 0 && rest[..i].ends_with(|c: char| c.is_alphabetic() || c == '_');
        let label = labels.iter().any(|l| l.trim_end_matches(|c: char| c.is_alphabetic()) == number);
        if !glued && !label {
            let decimals = number.split('.').nth(1).map_or(0, str::len);
            if number.starts_with('-') && number.trim_start_matches('-').trim_matches(['0', '.']).is_empty() {
                out.push(format!("negative zero {number:?}"));
            } else if decimals > 4 {
                out.push(format!("{decimals} decimals in {number:?}"));
            } else if !number.contains('.')
                && number.trim_start_matches('-').len() >= 7
                && ["B", "bytes", "FLOP", "ns"].contains(&rest[i + len..].split_whitespace().next().unwrap_or(""))
            {
                // A quantity the project's formatters scale (1048576 bytes is 1.00 MiB); a
                // count such as a batch of 2312270 samples stays as it is.
                out.push(format!("raw number {number:?}"));
            }
        }
        rest = &rest[i + len.max(1)..];
    }
    if sentence {
        let first = words.first().copied().unwrap_or("");
        let code = first.contains(['_', '.', '=', '/', '(']) || first.chars().skip(1).any(char::is_uppercase);
        let starts = text.chars().next().is_some_and(|c| c.is_uppercase() || c.is_ascii_digit());
        if !starts && !code {
            out.push("no capital at the start".into());
        }
        if !text.trim_end().ends_with(['.', '!', '?']) {
            out.push("no final period".into());
        }
    }
    out.into_iter().map(|p| format!("{p} in {text:?}")).collect()
}

/// Every sentence the report generates from `results`, proofread.
fn proofread_results(results: &RunResults) -> Vec<String> {
    use vramlab_reports::html::{headline, sentence, suite_finding};
    let mut problems = proofread(&headline(results), true);
    for s in &results.suites {
        let mut texts: Vec<(String, bool)> = Vec::new();
        texts.push((sentence(&s.description), true));
        texts.push((suite_finding(s), true));
        for f in &s.findings {
            texts.push((f.claim.clone(), false));
            texts.push((sentence(&f.evidence), true));
        }
        for c in &s.cases {
            texts.extend(c.notes.iter().map(|n| (n.clone(), false)));
            match &c.outcome {
                Outcome::NotAvailable { reason } => texts.push((reason.clone(), false)),
                Outcome::Failed { message } => texts.push((message.clone(), false)),
                Outcome::Ok => {}
            }
        }
        for chart in vramlab_suites::declared_charts(s) {
            texts.push((chart.title, false));
            match chart.kind {
                vramlab_display::chart::ChartKind::Lines(l) => {
                    texts.extend(l.notes.into_iter().map(|n| (n, false)));
                    texts.extend(l.x_marks.into_iter().chain(l.y_marks).map(|m| (m.label, false)));
                    texts.extend(l.points.into_iter().map(|p| (p.label, false)));
                }
                vramlab_display::chart::ChartKind::Bars(b) => {
                    texts.extend(b.notes.into_iter().map(|n| (n, false)));
                    texts.extend(b.reference.map(|m| (m.label, false)));
                }
                vramlab_display::chart::ChartKind::Unavailable { reason } => texts.push((reason, false)),
            }
        }
        let labels: Vec<&str> = s.cases.iter().flat_map(|c| c.name.split('/')).collect();
        problems.extend(texts.iter().flat_map(|(t, sentence)| proofread_with_labels(t, *sentence, &labels)));
    }
    problems
}

#[test]
fn the_proofreader_catches_what_reads_wrong_and_passes_what_reads_well() {
    for (bad, why) in [
        ("beyond 0 workers more stop helping the the loop.", "doubled word"),
        ("Measured 1 workers at 3.00 MiB.", "\"1 workers\""),
        ("Two hold (1 more claims below).", "\"1 claims\""),
        ("It took 5ms.", "unit not spaced"),
        ("It waited 50% of the time.", "unit not spaced"),
        ("A ratio of NaN here.", "\"NaN\""),
        ("The change was -0.0000 per call.", "negative zero"),
        ("It ran at 8388608.000000001 FLOP.", "decimals"),
        ("It ran 268435456 FLOP per call.", "raw number"),
        ("the GPU wins.", "no capital"),
        ("The GPU wins", "no final period"),
    ] {
        let found = proofread(bad, true);
        assert!(found.iter().any(|p| p.contains(why)), "{bad:?}: {found:?}");
    }
    for good in [
        "Measured on the CPU, Test CPU (2 cores): 1 of 2 cases ran, 1 worker at 3.00 MiB, 5.62 MFLOP, 1 ms.",
        "no_grad saves memory: 50 % less.",
        "cudnn.benchmark chose gemm_1x1 (120.5 µs), 1.05x faster; 1 process.",
        "Had 2, 2 of them ran; batch 2312270 fits.",
        "Two hold (1 more claim below); 1 other case failed.",
        "Faster than the CPU (CPU time ÷ GPU time).",
    ] {
        assert_eq!(proofread(good, true), Vec::<String>::new(), "{good:?}");
    }
    // A case's label is its name, left as it is; the same words in prose are not.
    let text = "The GPU won from cached/4KiB: 4KiB and 4194304 FLOP ran.";
    assert_eq!(proofread_with_labels(text, true, &["cached", "4KiB", "4194304"]), Vec::<String>::new());
    assert_eq!(proofread(text, true).len(), 2, "{:?}", proofread(text, true));
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
