//! `cargo xtask bench`: runs the suites with progress bars and writes the
//! results (JSON + CSV per suite) after each suite, atomically; then the
//! run to the history, then the report (its trends include this run) and a
//! short summary; saves it as a baseline (`--save-baseline`) and compares it
//! with one (`--baseline`). `--repeat N` makes N runs in one invocation (each
//! in the history, all in `runs.json`): a baseline of several runs, or this
//! build's side of the check. `--export-snapshot` writes the cases' memory
//! recordings as PyTorch snapshots (`snapshot_export.rs`).

use std::collections::HashMap;
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

use crate::cli::BenchArgs;

pub fn run(args: &BenchArgs) -> Result<u8> {
    let suites = select_suites(&args.suites)?;
    // A baseline that cannot be compared is found before the run, not after it.
    let baseline = match &args.baseline {
        None => None,
        Some(name) => {
            let path = crate::compare::resolve_baseline(name, &args.baseline_dir);
            let loaded =
                crate::compare::load_config(args.check.config.as_deref()).map_err(|e| e.to_string()).and_then(|cfg| {
                    Ok((cfg, vramlab_reports::check::load_runs(&path, "baseline").map_err(|e| e.to_string())?))
                });
            match loaded {
                Ok((cfg, b)) => Some((cfg, b, path)),
                Err(message) => return Ok(crate::compare::impossible(&message)),
            }
        }
    };
    let (device, gpu_unavailable) = match args.device.as_str() {
        "auto" => Device::auto(),
        name => {
            let d = Device::parse(name).with_context(|| format!("--device {name}"))?;
            let why = if d.is_cpu() { vramlab_engine::device::cuda_probe().err() } else { None };
            (d, why.map(|w| format!("CUDA unavailable: {w}")))
        }
    };
    vramlab_reports::prepare_out_dir(&args.out)
        .with_context(|| format!("cannot write into the output folder {}", args.out.display()))?;
    let export = match &args.export_snapshot {
        Some(dir) => {
            vramlab_reports::prepare_out_dir(dir)
                .with_context(|| format!("cannot write into the snapshot folder {}", dir.display()))?;
            Some(crate::snapshot_export::SnapshotExport::new(dir, &args.export_cases))
        }
        None => None,
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
    let ctx =
        Context { device: device.clone(), gpu_unavailable, options: options.clone(), harness, hooks: Hooks::new() };

    let mut environment = vramlab_suites::env::detect(&device);
    environment.rustc = command_output("rustc", &["--version"]);
    environment.git_commit = command_output("git", &["rev-parse", "--short=12", "HEAD"]);
    if cfg!(feature = "test-slowdown") {
        eprintln!("warning: this is a test build (feature test-slowdown): the CPU add kernel does 20 % more work");
    }

    let repeat = args.repeat as usize;
    eprintln!(
        "vramlab bench on {device}{}{} — {} suite{}{}, results in {}",
        if args.quick { " (quick)" } else { "" },
        ctx.gpu_unavailable.as_deref().map(|r| format!("; {r}")).unwrap_or_default(),
        suites.len(),
        if suites.len() == 1 { "" } else { "s" },
        if repeat > 1 { format!(", {repeat} runs") } else { String::new() },
        args.out.display()
    );
    let history = args.out.join(vramlab_reports::history::HISTORY_FILE);
    let mut runs = Vec::with_capacity(repeat);
    let mut appended = Vec::new();
    for i in 0..repeat {
        if repeat > 1 {
            eprintln!("run {} of {repeat}", i + 1);
        }
        let results = RunResults {
            schema_version: SCHEMA_VERSION,
            vramlab_version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            options: options.clone(),
            environment: environment.clone(),
            suites: Vec::new(),
        };
        let results = measure(&suites, &ctx, results, export.as_ref(), &args.out)?;
        // Every run goes into the history (runs of one commit teach it the noise
        // between runs), first, so the report's trends include it.
        appended.push(vramlab_reports::history::History::open_or_create(&history).and_then(|mut h| h.append(&results)));
        runs.push(results);
    }
    let set = RunSet::new(runs).context("no run")?;
    let results = set.runs().last().expect("at least one run").clone();
    if repeat > 1 {
        let path = args.out.join(vramlab_reports::check::RUNS_JSON);
        vramlab_reports::write_atomic(&path, &set.to_json().context("serializing the runs")?)?;
    }
    let history_ok = appended.iter().any(|a| a.is_ok()) || history.is_file();
    let index = crate::report_cmd::write_for_bench(
        &results,
        &args.out.join("report"),
        history_ok.then_some(history.as_path()),
    )?;
    // With --json, stdout carries only the comparison: the summary goes to stderr.
    let mut summary: Box<dyn std::io::Write> =
        if args.check.json { Box::new(std::io::stderr()) } else { Box::new(std::io::stdout()) };
    crate::report_cmd::print_short_summary(&mut *summary, &results)?;
    for a in appended {
        match a {
            Ok(id) => writeln!(summary, "history: run {id} appended to {}", history.display())?,
            Err(e) => eprintln!("warning: the run was not added to the history: {e}"),
        }
    }
    if let (Some(e), Some(dir)) = (&export, &args.export_snapshot) {
        let written = e.written();
        writeln!(
            summary,
            "memory snapshots: {} written to {} (open them in pytorch.org/memory_viz, or `cargo xtask replay FILE`)",
            written.len(),
            dir.display()
        )?;
        for p in e.problems() {
            eprintln!("warning: {p}");
        }
    }
    if let Some(name) = &args.save_baseline {
        match crate::compare::save_baseline(&set, name, &args.baseline_dir, args.append) {
            Ok((path, n)) => writeln!(
                summary,
                "baseline '{name}' saved: {} ({n} run{})",
                path.display(),
                if n == 1 { "" } else { "s" }
            )?,
            Err(message) => {
                drop(summary);
                return Ok(crate::compare::impossible(&message));
            }
        }
    }
    // The report's path comes last: it is what a person opens next.
    writeln!(summary, "\nresults: {}", args.out.join(vramlab_reports::RESULTS_JSON).display())?;
    if repeat > 1 {
        writeln!(summary, "runs:    {} ({repeat} runs)", args.out.join(vramlab_reports::check::RUNS_JSON).display())?;
    }
    writeln!(summary, "report:  {}", index.display())?;
    match baseline {
        None => Ok(0),
        Some((cfg, base, path)) => {
            writeln!(summary)?;
            drop(summary);
            let results_path = args.out.join(if repeat > 1 {
                vramlab_reports::check::RUNS_JSON
            } else {
                vramlab_reports::RESULTS_JSON
            });
            crate::compare::report(&base, &path, &set, &results_path, &cfg, &args.check, &args.out)
        }
    }
}

/// One run of the suites, its results written after every suite.
fn measure(
    suites: &[Box<dyn Suite>],
    ctx: &Context,
    mut results: RunResults,
    export: Option<&crate::snapshot_export::SnapshotExport>,
    out: &std::path::Path,
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
                b.println(format!("  {suite}/{}: FAILED: {message}", case.name));
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
