//! `cargo xtask diff A B` (`vramlab diff A B`): two PyTorch memory snapshots,
//! each replayed under its own settings, compared (`vramlab_snapshot::diff_snapshots`):
//! the peaks before and after with the change, the call paths that gained or
//! lost bytes at the allocated peak, the segments and the fragmentation at the
//! reserved peak. A terminal table, or `--json` (the versioned [`DiffDoc`],
//! schema [`SCHEMA_VERSION`]); `--report DIR` also writes the page
//! (`vramlab_reports::diff_page`). Two results files (`results.json` of
//! `cargo xtask bench`, told from snapshots by their content) are compared
//! case by case instead (`vramlab_reports::results_diff`): every suite case in
//! both, or the one `--case SUITE/CASE` names.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_display::format::{fmt_change, fmt_count_change, fmt_relative};
use vramlab_reports::diff_page;
use vramlab_reports::results_diff::{self, ResultsDiff};
use vramlab_snapshot::{self as snapshot, Snapshot, SnapshotDiff, SnapshotReplayOptions};

use crate::cli::DiffArgs;
use crate::output::{BAD_REPORT_DIR, report_dir_ok};

/// The document's version: raised whenever a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// Call paths the terminal table lists (`--json` has them all).
const PATH_ROWS_TEXT: usize = 15;

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct DiffDoc<'a> {
    pub schema_version: u32,
    #[serde(flatten)]
    pub diff: &'a SnapshotDiff,
}

/// What `--json` prints for two results files (`kind` tells it from a snapshot diff).
#[derive(Debug, Serialize)]
pub struct ResultsDiffDoc<'a> {
    pub schema_version: u32,
    /// Always `results`.
    pub kind: &'static str,
    #[serde(flatten)]
    pub diff: &'a ResultsDiff,
}

/// The first byte of a JSON object (a results file).
const JSON_OPEN: u8 = b'{';

/// Whether the file starts like JSON (`{` after blanks): a results file, not a pickle.
fn is_json(path: &Path) -> anyhow::Result<bool> {
    if path.is_dir() {
        bail!("{} is a directory, not a snapshot or results file", path.display());
    }
    let mut head = [0u8; 64];
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let n = f.read(&mut head).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(head[..n].iter().find(|b| !b.is_ascii_whitespace()) == Some(&JSON_OPEN))
}

fn run_results(args: &DiffArgs, a_name: &str, b_name: &str) -> anyhow::Result<u8> {
    if args.device.is_some() {
        bail!("--device applies to snapshots; {a_name} and {b_name} are results files (use --case SUITE/CASE)");
    }
    let read = |p: &Path| {
        vramlab_reports::read_results_json(p)
            .with_context(|| format!("{} is not a readable results file of cargo xtask bench", p.display()))
    };
    let (a, b) = (read(&args.before)?, read(&args.after)?);
    let d = results_diff::diff_results((a_name, &a), (b_name, &b), args.case.as_deref())?;
    let written = match &args.report {
        Some(dir) => Some(
            results_diff::write_results_diff_report(dir, &d)
                .with_context(|| format!("cannot write the report into {}", dir.display()))?,
        ),
        None => None,
    };
    let doc = ResultsDiffDoc { schema_version: SCHEMA_VERSION, kind: "results", diff: &d };
    crate::output::write_stdout(&diff_output(args.json, &doc, || results_text(&d), written.as_deref())?)?;
    Ok(0)
}

/// What a diff prints: its JSON document with `--json`, else its text and the
/// report's path when one was written.
fn diff_output(
    json: bool,
    doc: &impl Serialize,
    text: impl FnOnce() -> String,
    written: Option<&Path>,
) -> anyhow::Result<Vec<u8>> {
    let out = if json {
        let mut v = serde_json::to_vec_pretty(doc).context("cannot serialize the diff")?;
        v.push(b'\n');
        v
    } else {
        let mut text = text();
        if let Some(index) = written {
            let _ = writeln!(text, "\nreport: {}", index.display());
        }
        text.into_bytes()
    };
    Ok(out)
}

/// The terminal report of two results files.
pub fn results_text(d: &ResultsDiff) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "vramlab diff: A = {} ({}), B = {} ({})",
        d.before.source, d.before.started_at, d.after.source, d.after.started_at
    );
    for c in &d.cases {
        let _ = writeln!(t, "\n{}/{}: {}", c.suite, c.case, results_diff::case_headline(c));
        if c.outcome_before != "ok" || c.outcome_after != "ok" {
            let _ = writeln!(t, "  outcome: A {} · B {}", c.outcome_before, c.outcome_after);
        }
        let _ = writeln!(t, "  {:<34} {:>14} {:>14}  change", "", "A (before)", "B (after)");
        for f in &c.figures {
            let _ = writeln!(
                t,
                "  {:<34} {:>14} {:>14}  {}",
                results_diff::figure_name(&f.name),
                results_diff::fmt_value(&f.name, f.before),
                results_diff::fmt_value(&f.name, f.after),
                results_diff::fmt_figure_change(f)
            );
        }
    }
    for (side, names) in [("A", &d.only_before), ("B", &d.only_after)] {
        if !names.is_empty() {
            let _ = writeln!(t, "\nonly in {side}: {}", names.join(", "));
        }
    }
    t
}

fn read(path: &std::path::Path) -> anyhow::Result<Snapshot> {
    if path.is_dir() {
        bail!("{} is a directory, not a PyTorch memory snapshot", path.display());
    }
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    snapshot::read_snapshot(std::io::BufReader::new(file))
        .with_context(|| format!("{} is not a readable PyTorch memory snapshot", path.display()))
}

pub fn run(args: &DiffArgs) -> anyhow::Result<u8> {
    if !report_dir_ok(args.report.as_deref()) {
        return Ok(BAD_REPORT_DIR);
    }
    let (a_name, b_name) = (args.before.display().to_string(), args.after.display().to_string());
    match (is_json(&args.before)?, is_json(&args.after)?) {
        (true, true) => return run_results(args, &a_name, &b_name),
        (false, false) => {}
        (a_json, _) => {
            let (json, other) = if a_json { (&a_name, &b_name) } else { (&b_name, &a_name) };
            bail!(
                "{json} is not a readable PyTorch memory snapshot (it is JSON) and {other} is not JSON: diff compares \
                 two snapshots or two results files of cargo xtask bench"
            );
        }
    }
    if args.case.is_some() {
        bail!("--case applies to results files; {a_name} and {b_name} are snapshots");
    }
    let (a, b) = (read(&args.before)?, read(&args.after)?);
    crate::output::write_stdout(&snapshots_output(args, (&a_name, &a), (&b_name, &b))?)?;
    Ok(0)
}

/// What `diff` prints for two snapshots (`a` before, `b` after, each with
/// its name); with `--report`, the page written first. The command and
/// `crate::api` share it.
pub(crate) fn snapshots_output(
    args: &DiffArgs,
    (a_name, a): (&str, &Snapshot),
    (b_name, b): (&str, &Snapshot),
) -> anyhow::Result<Vec<u8>> {
    let opts = SnapshotReplayOptions { device: args.device, ..Default::default() };
    let d = snapshot::diff_snapshots((a_name, a), (b_name, b), &opts).map_err(|(side, e)| {
        anyhow::Error::new(e).context(format!("cannot replay {}", if side == 0 { a_name } else { b_name }))
    })?;
    let written = match &args.report {
        Some(dir) => {
            // Each side's memory over its replay (its own settings, as the diff replays it), for the page's chart.
            let own = SnapshotReplayOptions { config: None, record: false, ..opts.clone() };
            let timeline = |name: &str, s: &Snapshot| {
                snapshot::replay_snapshot_timeline(s, &own, false)
                    .map(|(_, t)| t)
                    .with_context(|| format!("cannot replay {name}"))
            };
            let (ta, tb) = (timeline(a_name, a)?, timeline(b_name, b)?);
            Some(
                diff_page::write_diff_report(dir, &d, Some((&ta, &tb)))
                    .with_context(|| format!("cannot write the report into {}", dir.display()))?,
            )
        }
        None => None,
    };
    diff_output(args.json, &DiffDoc { schema_version: SCHEMA_VERSION, diff: &d }, || text(&d), written.as_deref())
}

/// The terminal report.
pub fn text(d: &SnapshotDiff) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "vramlab diff: A = {}, B = {}", d.before.source, d.after.source);
    for line in diff_page::estimate_banner(d).into_iter().flatten() {
        let _ = writeln!(t, "  {line}");
    }
    for f in diff_page::side_facts(d) {
        let _ = writeln!(t, "  {:<10} {}", f.name, f.value);
    }
    let _ = writeln!(t, "\n{}\n", diff_page::headline(d));
    let _ = writeln!(t, "  {:<58} {:>14} {:>14}  change", "", "A (before)", "B (after)");
    for r in diff_page::figure_rows(d) {
        let _ = writeln!(t, "  {:<58} {:>14} {:>14}  {}", r.name, r.before, r.after, r.change);
    }
    let _ = writeln!(
        t,
        "\nCall paths that gained or lost bytes at the allocated peak (requested bytes; your frames first; torch, packages, stdlib, <built-in>, C++ folded)"
    );
    if d.paths.is_empty() {
        let _ = writeln!(t, "  none");
    } else {
        let _ = writeln!(t, "  {:>14} {:>14} {:>22}  call path", "A (before)", "B (after)", "change");
        for p in d.paths.iter().take(PATH_ROWS_TEXT) {
            let mut path = p.user_frames.join(" <- ");
            if path.is_empty() {
                path = p.label.clone();
            }
            if let Some(via) = &p.via {
                let _ = write!(path, " [via {via}]");
            }
            let change = format!("{}{}", fmt_change(p.change_bytes), fmt_relative(p.before_bytes, p.change_bytes));
            let _ = writeln!(
                t,
                "  {:>14} {:>14} {:>22}  {path}",
                fmt_bytes(p.before_bytes),
                fmt_bytes(p.after_bytes),
                change
            );
        }
        if d.paths.len() > PATH_ROWS_TEXT {
            let rest = &d.paths[PATH_ROWS_TEXT..];
            let _ = writeln!(
                t,
                "  … and {} more, {} together (--json lists them)",
                rest.len(),
                fmt_change(rest.iter().map(|p| p.change_bytes).sum())
            );
        }
    }
    if d.paths_unchanged > 0 {
        let _ = writeln!(t, "  unchanged: {} call path(s) holding {}", d.paths_unchanged, fmt_bytes(d.bytes_unchanged));
    }
    let _ = writeln!(t, "\nSegment sizes at the reserved peak");
    let _ = writeln!(t, "  {:>14} {:>6} {:>6}  change", "size", "A", "B");
    for s in &d.segment_sizes {
        let _ = writeln!(
            t,
            "  {:>14} {:>6} {:>6}  {}",
            fmt_bytes(s.size_bytes),
            s.before,
            s.after,
            fmt_count_change(s.before, s.after)
        );
    }
    t
}
