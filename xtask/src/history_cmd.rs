//! `cargo xtask history`: the trend of figures over the runs stored in
//! `target/vramlab/history.sqlite`, with change points marked; `--import`
//! appends results files (e.g. CI artifacts) to it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use vramlab_display::format::fmt_ns;
use vramlab_reports::check::figures::amount_text;
use vramlab_reports::history::{History, Series};

pub const ABOUT: &str = "Trends of a figure over the stored runs, with change points";

pub const LONG_ABOUT: &str = "\
Every `cargo xtask bench` run is appended to target/vramlab/history.sqlite (an embedded SQLite
database, no server), keyed by commit, time and machine. This prints the trend of the figures
whose names match --metric over the last N runs, marking each change point: where the level
stepped (binary segmentation on the mean; a step must beat a BIC penalty scaled by the
series' own run-to-run noise, so exact memory figures change wherever they change). Without
--metric it lists every figure that stepped within the last N runs.

Figure names read `suite/case {params} (device) metric`, where metric is `time` (median ns
per iteration), a memory figure (`segment_bytes`, `memory.peak_reserved_bytes`, …) or
another metric of the case.";

pub const AFTER_HELP: &str = "\
Examples:
  cargo xtask history                                        every figure that stepped lately
  cargo xtask history --metric '*peak_reserved*' --last 50
  cargo xtask history --metric 'allocator/cached/64MiB*time'
  cargo xtask history --import ci-artifacts/results.json    append a run from elsewhere
  cargo xtask history --noise                               each time's noise floor (A/A runs)

Exit status: 0; 1 when the database is missing, corrupt or of a newer schema (it is never
overwritten) or an imported file is not results; 2 for usage errors.";

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Figures whose names match this pattern (`*` and `?`, case-insensitive) [default: those that stepped]
    #[arg(long, value_name = "PATTERN")]
    pub metric: Option<String>,

    /// How many of the latest runs to show
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub last: u32,

    /// The history database
    #[arg(long, value_name = "FILE", default_value = "target/vramlab/history.sqlite")]
    pub db: PathBuf,

    /// Append these results files to the history (repeatable), then stop
    #[arg(long, value_name = "FILE")]
    pub import: Vec<PathBuf>,

    /// Print the series as JSON
    #[arg(long)]
    pub json: bool,

    /// Instead of trends: each time's noise floor, learned from runs of one build (same commit,
    /// machine and kind) — the change two such runs exceed 5 % of the time
    #[arg(long)]
    pub noise: bool,
}

pub fn run(args: &HistoryArgs) -> Result<u8> {
    if !args.import.is_empty() {
        let mut h = History::open_or_create(&args.db)?;
        for f in &args.import {
            let results = vramlab_reports::check::load_results(f, "results")?;
            let id = h.append(&results)?;
            eprintln!("appended {} as run {id}", f.display());
        }
        return Ok(0);
    }
    let h = History::open_existing(&args.db)?;
    if args.noise {
        return noise(&h, args);
    }
    let series = h.trends(args.metric.as_deref(), args.last as usize)?;
    let mut out = String::new();
    if args.json {
        out = serde_json::to_string_pretty(&series)?;
        out.push('\n');
    } else if args.metric.is_some() {
        if series.is_empty() {
            let _ = writeln!(out, "no figure matches '{}'", args.metric.as_deref().unwrap_or_default());
        }
        for s in &series {
            trend(&mut out, s);
        }
    } else {
        let stepped: Vec<&Series> = series.iter().filter(|s| !s.change_points.is_empty()).collect();
        let _ = writeln!(
            out,
            "{} of {} figures stepped within the last {} runs ({} runs stored){}",
            stepped.len(),
            series.len(),
            args.last,
            h.runs()?,
            if stepped.is_empty() { "" } else { "; --metric NAME shows one's trend" }
        );
        for s in stepped {
            for &i in &s.change_points {
                let _ = writeln!(out, "  {}: {}", s.name, step_text(s, i));
            }
        }
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(0)
}

/// `history --noise`: the noise floor of every time the history ran twice for one build.
fn noise(h: &History, args: &HistoryArgs) -> Result<u8> {
    let mut floors = h.noise_floors(" time", args.last as usize)?;
    if let Some(p) = &args.metric {
        let m = globset::GlobBuilder::new(p).case_insensitive(true).build()?.compile_matcher();
        floors.retain(|f| m.is_match(&f.name));
    }
    let mut out = String::new();
    if args.json {
        out = serde_json::to_string_pretty(&floors)? + "\n";
    } else if floors.is_empty() {
        out.push_str(
            "no build was run twice within the last runs: `cargo xtask bench --repeat 3` runs one build three times\n",
        );
    } else {
        let gate = vramlab_reports::trends::NOISE_GATE;
        let ok = floors.iter().filter(|f| f.floor <= gate).count();
        let _ = writeln!(
            out,
            "{ok} of {} times can be gated at {:.0} % from one run a side (noise floor: the change two runs of one build exceed 5 % of the time)\n",
            floors.len(),
            gate * 100.0
        );
        let _ = writeln!(out, "{:>9}  {:>9}  {:>12}  figure", "floor", "σ", "runs(builds)");
        for f in &floors {
            let _ = writeln!(
                out,
                "{:>7.1} %  {:>7.1} %  {:>12}  {}",
                f.floor * 100.0,
                f.between_run * 100.0,
                format!("{}({})", f.runs, f.builds),
                f.name.trim_end_matches(" time")
            );
        }
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(0)
}

fn value_text(name: &str, v: f64) -> String {
    if name.ends_with(" time") || name.ends_with("_ns") { fmt_ns(v) } else { amount_text(v, name.ends_with("_bytes")) }
}

/// "run 12 (commit abc): 1.00 MiB → 3.00 MiB (+200.0 %)", the levels' means.
fn step_text(s: &Series, i: usize) -> String {
    let prev_start = s.change_points.iter().rev().find(|&&c| c < i).copied().unwrap_or(0);
    let next_end = s.change_points.iter().find(|&&c| c > i).copied().unwrap_or(s.points.len());
    let mean = |a: usize, b: usize| s.points[a..b].iter().map(|p| p.value).sum::<f64>() / (b - a) as f64;
    let (before, after) = (mean(prev_start, i), mean(i, next_end));
    let p = &s.points[i];
    format!(
        "stepped at run {} ({}{}): {} → {}{}",
        p.run_id,
        p.started_at,
        p.git_commit.as_deref().map(|c| format!(", commit {c}")).unwrap_or_default(),
        value_text(&s.name, before),
        value_text(&s.name, after),
        if before != 0.0 { format!(" ({:+.1} %)", (after / before - 1.0) * 100.0) } else { String::new() }
    )
}

fn trend(out: &mut String, s: &Series) {
    let _ = writeln!(out, "\n{}", s.name);
    let lo = s.points.iter().map(|p| p.value).fold(f64::INFINITY, f64::min);
    let hi = s.points.iter().map(|p| p.value).fold(f64::NEG_INFINITY, f64::max);
    for (i, p) in s.points.iter().enumerate() {
        // A bar from the series' minimum to its maximum, 30 characters wide.
        let width = if hi > lo { ((p.value - lo) / (hi - lo) * 30.0).round() as usize } else { 15 };
        let mut mark = String::new();
        if s.change_points.contains(&i) {
            mark.push_str(&format!("  ◆ {}", step_text(s, i)));
        }
        if i > 0 && s.points[i - 1].environment != p.environment {
            mark.push_str(&format!("  (machine changed: {})", p.environment));
        }
        let _ = writeln!(
            out,
            "  run {:>5}  {:<20}  {:<12}  {:>12}  {:<30}{mark}",
            p.run_id,
            p.started_at,
            p.git_commit.as_deref().unwrap_or("-"),
            value_text(&s.name, p.value),
            "▇".repeat(width.max(1)),
        );
    }
}
