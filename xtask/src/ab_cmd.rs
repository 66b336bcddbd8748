//! `cargo xtask check --ab BASE_BIN`: the baseline build and this build run
//! interleaved in one sitting — round by round, suite by suite, the two
//! builds back to back, which one goes first alternating every round (A B, then
//! B A, …) so a slow drift of the machine falls on both alike — then judged
//! pair by pair (`Design::Pairs`). Each step is a `bench --suite S` process of
//! one build, so any older binary that has `bench` serves as the baseline; its
//! output goes to a log beside the step's results.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Result;
use vramlab_reports::check::{Design, RunSet};
use vramlab_suites::RunResults;

use crate::cli::{AbOptions, CheckArgs, DEFAULT_AB_DIR};
use crate::compare::{Settings, impossible, load_config, report};

/// One build in the sitting.
struct Build {
    label: &'static str,
    bin: PathBuf,
}

pub fn run(args: &CheckArgs) -> Result<u8> {
    let Some(base) = &args.ab else { return Ok(impossible("--baseline or --ab is required")) };
    let opts = &args.ab_options;
    let candidate = match &opts.candidate {
        Some(c) => c.clone(),
        None => std::env::current_exe()?,
    };
    let cfg = match load_config(args.options.config.as_deref()) {
        Ok(c) => Settings { design: Design::Pairs, ..c },
        Err(e) => return Ok(impossible(&e.to_string())),
    };
    for (what, bin) in [("--ab", base), ("--candidate", &candidate)] {
        if !bin.is_file() {
            return Ok(impossible(&format!(
                "{what} {}: no such file — build the baseline's binary first (e.g. `git worktree add ../base main && cargo build --release -p xtask` there)",
                bin.display()
            )));
        }
    }
    let suites: Vec<String> = if opts.suites.is_empty() {
        vramlab_suites::all_suites().iter().map(|s| s.name().to_owned()).collect()
    } else {
        opts.suites.clone()
    };
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_AB_DIR));
    if let Err(e) = vramlab_reports::prepare_out_dir(&out) {
        return Ok(impossible(&format!("cannot write into {}: {e}", out.display())));
    }
    let builds = [Build { label: "a", bin: base.clone() }, Build { label: "b", bin: candidate }];
    let pairs = opts.pairs as usize;
    crate::output::eprint_line(&format!(
        "A/B: {} (a, the baseline) and {} (b, this build), {pairs} rounds of {} suite{}, interleaved; runs in {}",
        builds[0].bin.display(),
        builds[1].bin.display(),
        suites.len(),
        if suites.len() == 1 { "" } else { "s" },
        out.display()
    ));
    let mut sides: [Vec<RunResults>; 2] = [Vec::new(), Vec::new()];
    for round in 0..pairs {
        // A B in even rounds, B A in odd ones.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut merged: [Option<RunResults>; 2] = [None, None];
        for suite in &suites {
            for &side in &order {
                let b = &builds[side];
                let dir = out.join(b.label).join(format!("round-{}", round + 1)).join(suite);
                crate::output::eprint_line(&format!("  round {}/{pairs}: {suite} on {}", round + 1, b.label));
                let run = match bench(&b.bin, suite, &dir, opts) {
                    Ok(r) => r,
                    Err(message) => return Ok(impossible(&message)),
                };
                match &mut merged[side] {
                    None => merged[side] = Some(run),
                    Some(m) => m.suites.extend(run.suites),
                }
            }
        }
        for (side, m) in merged.into_iter().enumerate() {
            sides[side].extend(m);
        }
    }
    let [a, b] = sides;
    let (Some(a), Some(b)) = (RunSet::new(a), RunSet::new(b)) else {
        return Ok(impossible("no suite ran"));
    };
    let (a_path, b_path) = (out.join("a.json"), out.join("b.json"));
    for (set, path) in [(&a, &a_path), (&b, &b_path)] {
        vramlab_reports::write_atomic(path, &set.to_json()?)?;
    }
    crate::output::eprint_line(&format!(
        "wrote {} and {} (again: `check --baseline {} --from {} --paired`)\n",
        a_path.display(),
        b_path.display(),
        a_path.display(),
        b_path.display()
    ));
    report(&a, &a_path, &b, &b_path, &cfg, &args.options, &out)
}

/// Runs `bin bench --suite SUITE --out DIR …`; its results, or why not.
fn bench(bin: &Path, suite: &str, dir: &Path, opts: &AbOptions) -> Result<RunResults, String> {
    let log_path = dir.join("log.txt");
    let log = vramlab_reports::create_log(dir, "log.txt").map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut cmd = Command::new(bin);
    cmd.args(["bench", "--suite", suite, "--device", &opts.device, "--seed", &opts.seed.to_string()]);
    cmd.arg("--out").arg(dir);
    if opts.quick {
        cmd.arg("--quick");
    }
    if let Some(n) = opts.samples {
        cmd.args(["--samples", &n.to_string()]);
    }
    let status = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !status.success() {
        return Err(format!(
            "{} bench --suite {suite} failed ({status}); its output: {}",
            bin.display(),
            log_path.display()
        ));
    }
    let results = dir.join(vramlab_reports::RESULTS_JSON);
    vramlab_reports::check::load_results(&results, "results").map_err(|e| e.to_string())
}
