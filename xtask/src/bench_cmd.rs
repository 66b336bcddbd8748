//! `cargo xtask bench`: runs the suites with progress bars and writes the
//! results (JSON + CSV per suite) after each suite, atomically; then the
//! run to the history, then the report (its trends include this run) and a
//! short summary; saves it as a baseline (`--save-baseline`) and compares it
//! with one (`--baseline`). `--repeat N` makes N runs in one invocation (each
//! in the history, all in `runs.json`): a baseline of several runs, or this
//! build's side of the check. `--export-snapshot` writes the cases' memory
//! recordings as PyTorch snapshots (`snapshot_export.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Hooks;
use vramlab_suites::{
    CaseResult, Context, HarnessConfig, Outcome, Progress, RunOptions, RunResults, SCHEMA_VERSION, Suite,
};

use vramlab_reports::check::RunSet;
use vramlab_reports::history::{HISTORY_FILE, History};

use crate::cli::BenchArgs;
use crate::compare::{Settings, impossible, load_config, report, resolve_baseline, save_baseline};
use crate::output::paragraph;
use crate::snapshot_export::SnapshotExport;

pub fn run(args: &BenchArgs) -> Result<u8> {
    let suites = select_suites(&args.suites)?;
    // A baseline that cannot be compared is found before the run, not after it.
    let baseline = match load_baseline(args) {
        Ok(b) => b,
        Err(message) => return Ok(impossible(&message)),
    };
    let ctx = context(args)?;
    vramlab_reports::prepare_out_dir(&args.out)
        .with_context(|| format!("cannot write into the output folder {}", args.out.display()))?;
    let export = match &args.export_snapshot {
        Some(dir) => {
            vramlab_reports::prepare_out_dir(dir)
                .with_context(|| format!("cannot write into the snapshot folder {}", dir.display()))?;
            Some(SnapshotExport::new(dir, &args.export_cases))
        }
        None => None,
    };
    let mut environment = vramlab_suites::env::detect(&ctx.device);
    // Not in a simulated process: its results serve only to find its regions,
    // and what git prints (the working tree's state) would move its heap, and
    // with it malloc's counts, from one run to the next.
    if !args.simulated_process {
        environment.rustc = command_output("rustc", &["--version"]);
        environment.git_commit = build_key();
    }
    if cfg!(feature = "test-slowdown") {
        crate::output::eprint_line(
            "warning: this is a test build (feature test-slowdown): the CPU add kernel does 20 % more work",
        );
    }
    if cfg!(feature = "test-slowdown-2pct") {
        crate::output::eprint_line(
            "warning: this is a test build (feature test-slowdown-2pct): the CPU add kernel does 2 % more work",
        );
    }
    let skeleton = |environment: vramlab_suites::Environment| RunResults {
        schema_version: SCHEMA_VERSION,
        vramlab_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        options: ctx.options.clone(),
        environment,
        suites: Vec::new(),
    };
    if args.simulated_process {
        let results = skeleton(environment.clone());
        return crate::simulate::process(&suites, ctx.clone(), results, &args.out, args.tuned_choices.as_deref());
    }
    announce(args, &ctx, suites.len());
    let history = args.out.join(HISTORY_FILE);
    let mut runs = Vec::with_capacity(args.repeat as usize);
    let mut appended = Vec::new();
    for i in 0..args.repeat {
        if args.repeat > 1 {
            crate::output::eprint_line(&format!("run {} of {}", i + 1, args.repeat));
        }
        let mut results = measure(&suites, &ctx, skeleton(environment.clone()), export.as_ref(), &args.out)?;
        if i == 0 && args.simulate {
            // Counted once, after the first run (they repeat): its figures go with it.
            simulated_pass(args, &mut results)?;
        }
        // Every run goes into the history (runs of one commit teach it the noise
        // between runs), first, so the report's trends include it.
        appended.push(History::open_or_create(&history).and_then(|mut h| h.append(&results)));
        runs.push(results);
    }
    let set = RunSet::new(runs).context("no run")?;
    finish(args, &set, appended, &history, export.as_ref(), baseline)
}

/// The baseline `--baseline` names, with the thresholds: loaded before the
/// run, so one that cannot be compared stops it first. Errors are messages
/// for exit 2.
fn load_baseline(args: &BenchArgs) -> Result<Option<(Settings, RunSet, PathBuf)>, String> {
    let Some(name) = &args.baseline else { return Ok(None) };
    let path = resolve_baseline(name, &args.baseline_dir);
    let cfg = load_config(args.check.config.as_deref()).map_err(|e| e.to_string())?;
    let base = vramlab_reports::check::load_runs(&path, "baseline").map_err(|e| e.to_string())?;
    Ok(Some((cfg, base, path)))
}

/// The device `--device` names (the best one present for `auto`) and what
/// every case of the run shares.
fn context(args: &BenchArgs) -> Result<Context> {
    let (device, gpu_unavailable) = match args.device.as_str() {
        "auto" => Device::auto(),
        name => {
            let d = Device::parse(name).with_context(|| format!("--device {name}"))?;
            let why = if d.is_cpu() { vramlab_engine::device::cuda_probe().err() } else { None };
            (d, why.map(|w| format!("CUDA unavailable: {w}")))
        }
    };
    let options = RunOptions {
        suites: args.suites.clone(),
        device: args.device.clone(),
        quick: args.quick,
        samples: args.samples.map(|n| n as usize),
        seed: args.seed,
        capacity_bytes: args.capacity.bytes,
    };
    let mut harness = if args.quick { HarnessConfig::quick() } else { HarnessConfig::standard() };
    harness.fixed_samples = options.samples;
    Ok(Context { device, gpu_unavailable, options, harness, hooks: Hooks::new() })
}

/// What runs where, on stderr: the device, why CUDA is unavailable, the
/// suites, the runs and the output folder.
fn announce(args: &BenchArgs, ctx: &Context, suites: usize) {
    let repeat = args.repeat;
    let line = format!(
        "vramlab bench on {}{} — {suites} suite{}{}, results in {}",
        ctx.device,
        if args.quick { " (quick)" } else { "" },
        if suites == 1 { "" } else { "s" },
        if repeat > 1 { format!(", {repeat} runs") } else { String::new() },
        args.out.display()
    );
    eprint!("{}", paragraph(&line, "  "));
    if let Some(reason) = &ctx.gpu_unavailable {
        eprint!("{}", paragraph(&format!("  {reason}"), "  "));
    }
}

/// After the runs: `runs.json`, the report, the short summary and what was
/// written, the baseline saved; then the comparison with `--baseline`'s.
/// With `--json`, stdout carries only the comparison: the summary goes to stderr.
fn finish(
    args: &BenchArgs,
    set: &RunSet,
    appended: Vec<Result<i64, vramlab_reports::history::HistoryError>>,
    history: &Path,
    export: Option<&SnapshotExport>,
    baseline: Option<(Settings, RunSet, PathBuf)>,
) -> Result<u8> {
    let repeat = args.repeat;
    let results = set.runs().last().expect("at least one run");
    let runs_json = args.out.join(vramlab_reports::check::RUNS_JSON);
    if repeat > 1 {
        vramlab_reports::write_atomic(&runs_json, &set.to_json().context("serializing the runs")?)?;
    }
    let history_ok = appended.iter().any(|a| a.is_ok()) || history.is_file();
    let index = crate::report_cmd::write_for_bench(results, &args.out.join("report"), history_ok.then_some(history))?;
    let mut summary: Box<dyn std::io::Write> =
        if args.check.json { Box::new(std::io::stderr()) } else { Box::new(std::io::stdout()) };
    crate::report_cmd::print_short_summary(&mut *summary, results)?;
    for a in appended {
        match a {
            Ok(id) => {
                write!(summary, "{}", paragraph(&format!("history: run {id} appended to {}", history.display()), "  "))?
            }
            Err(e) => eprint!("{}", paragraph(&format!("warning: the run was not added to the history: {e}"), "  ")),
        }
    }
    if let (Some(e), Some(dir)) = (export, &args.export_snapshot) {
        let line = format!(
            "memory snapshots: {} written to {} (open them in pytorch.org/memory_viz, or `cargo xtask replay FILE`)",
            e.written().len(),
            dir.display()
        );
        write!(summary, "{}", paragraph(&line, "  "))?;
        for p in e.problems() {
            eprint!("{}", paragraph(&format!("warning: {p}"), "  "));
        }
    }
    if let Some(name) = &args.save_baseline {
        match save_baseline(set, name, &args.baseline_dir, args.append) {
            Ok((path, n)) => {
                let line =
                    format!("baseline '{name}' saved: {} ({n} run{})", path.display(), if n == 1 { "" } else { "s" });
                write!(summary, "{}", paragraph(&line, "  "))?;
            }
            Err(message) => {
                drop(summary);
                return Ok(impossible(&message));
            }
        }
    }
    // The report's path comes last: it is what a person opens next.
    let results_json = args.out.join(vramlab_reports::RESULTS_JSON);
    writeln!(summary, "\nresults: {}", results_json.display())?;
    if repeat > 1 {
        writeln!(summary, "runs:    {} ({repeat} runs)", runs_json.display())?;
    }
    writeln!(summary, "report:  {}", index.display())?;
    let Some((cfg, base, path)) = baseline else { return Ok(0) };
    writeln!(summary)?;
    drop(summary);
    let compared = if repeat > 1 { runs_json } else { results_json };
    report(&base, &path, set, &compared, &cfg, &args.check, &args.out)
}

/// One run of the suites, its results written after every suite.
fn measure(
    suites: &[Box<dyn Suite>],
    ctx: &Context,
    mut results: RunResults,
    export: Option<&SnapshotExport>,
    out: &Path,
) -> Result<RunResults> {
    let bars = Bars::new();
    for suite in suites {
        let sink = export.map(|e| e as &dyn vramlab_suites::SnapshotSink);
        let result = vramlab_suites::run_suite_with(suite.as_ref(), ctx, &bars, sink);
        let csv = vramlab_reports::write_suite_csv(out, &result)?;
        results.suites.push(result);
        vramlab_reports::write_results_json(out, &results)?;
        bars.println(&format!("  wrote {}", csv.display()));
    }
    bars.clear();
    Ok(results)
}

/// The suites named (all when none), or an error listing the valid names.
fn select_suites(names: &[String]) -> Result<Vec<Box<dyn Suite>>> {
    let all = vramlab_suites::all_suites();
    if names.is_empty() {
        return Ok(all);
    }
    let known: Vec<&str> = all.iter().map(|s| s.name()).collect();
    for n in names {
        if !known.contains(&n.as_str()) {
            bail!("unknown suite '{n}'; the suites are: {}", known.join(", "));
        }
    }
    Ok(all.into_iter().filter(|s| names.iter().any(|n| n == s.name())).collect())
}

/// `--simulate`: the suites of `results` that timed a case run again under
/// callgrind; each case's figures go into `results`, written again.
fn simulated_pass(args: &BenchArgs, results: &mut RunResults) -> Result<()> {
    let mut suites: Vec<&vramlab_suites::SuiteResult> =
        results.suites.iter().filter(|s| s.cases.iter().any(|c| c.outcome.is_ok() && c.timing.is_some())).collect();
    // The longest first, so that the simulated processes running side by side end together.
    suites.sort_by_key(|s| std::cmp::Reverse(s.duration_ns));
    let timed: Vec<String> = suites.iter().map(|s| s.name.clone()).collect();
    if timed.is_empty() {
        crate::output::eprint_line("simulated pass: no suite of this run times a case; nothing to count");
        return Ok(());
    }
    crate::output::eprint_line(&format!(
        "simulated pass: the {} suites that time a case, each case once under callgrind",
        timed.len()
    ));
    let pass = crate::simulate::run(args, &results.environment.device, &timed)?;
    let attached = pass.attach(results);
    let line = format!(
        "simulated pass: {attached} cases counted in {:.0} s (callgrind's profiles and log: {})",
        pass.seconds,
        pass.dir.display()
    );
    eprint!("{}", paragraph(&line, "  "));
    vramlab_reports::write_results_json(&args.out, results)?;
    Ok(())
}

/// The build a run measures, as the history and baselines key it: the commit,
/// then `-dirty.<hash of the uncommitted changes>` when the work tree differs
/// from it, then `+<feature>` for each test feature built in — so runs of
/// uncommitted edits or of a test build never pass for runs of the commit.
fn build_key() -> Option<String> {
    let commit = command_output("git", &["rev-parse", "--short=12", "HEAD"])?;
    let mut key = commit;
    let status = command_output("git", &["status", "--porcelain", "--untracked-files=normal"]);
    if status.is_some() {
        let diff = Process::new("git").args(["diff", "HEAD"]).output().map(|o| o.stdout).unwrap_or_default();
        let hash = fnv1a(status.iter().flat_map(|s| s.bytes()).chain(diff));
        key.push_str(&format!("-dirty.{:08x}", hash as u32));
    }
    for (on, feature) in [
        (cfg!(feature = "test-slowdown"), "test-slowdown"),
        (cfg!(feature = "test-slowdown-2pct"), "test-slowdown-2pct"),
    ] {
        if on {
            key.push_str(&format!("+{feature}"));
        }
    }
    Some(key)
}

/// FNV-1a over bytes: a stable short hash.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Process::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|s| !s.is_empty())
}

/// One progress bar per suite, on stderr.
struct Bars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
}

impl Bars {
    fn new() -> Bars {
        Bars { multi: MultiProgress::new(), bars: Mutex::new(HashMap::new()) }
    }

    fn bar(&self, suite: &str) -> Option<ProgressBar> {
        self.bars.lock().unwrap_or_else(|e| e.into_inner()).get(suite).cloned()
    }

    fn println(&self, line: &str) {
        let _ = self.multi.println(line);
    }

    fn clear(&self) {
        let _ = self.multi.clear();
    }
}

impl Progress for Bars {
    fn suite_started(&self, suite: &str, cases: usize) {
        let style = ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {elapsed:>4} {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
        let bar = self.multi.add(ProgressBar::new(cases as u64).with_style(style).with_prefix(suite.to_owned()));
        bar.enable_steady_tick(Duration::from_millis(200));
        self.bars.lock().unwrap_or_else(|e| e.into_inner()).insert(suite.to_owned(), bar);
    }

    fn case_started(&self, suite: &str, case: &str, _index: usize) {
        if let Some(b) = self.bar(suite) {
            b.set_message(case.to_owned());
        }
    }

    fn case_finished(&self, suite: &str, case: &CaseResult) {
        if let Some(b) = self.bar(suite) {
            if let Outcome::Failed { message } = &case.outcome {
                b.println(paragraph(&format!("  {suite}/{}: FAILED: {message}", case.name), "    ").trim_end());
            }
            b.inc(1);
        }
    }

    fn suite_finished(&self, suite: &str) {
        if let Some(b) = self.bar(suite) {
            b.finish_with_message("done");
        }
    }
}
