//! `cargo xtask replay`: runs [`vramlab_replay`] on a file or standard
//! input and prints the report (the document of `vramlab_reports::replay_doc`), readable or as JSON; with `--report DIR` also
//! the offline HTML page of the replay (written by `vramlab_reports::replay_page`).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use vramlab_replay::{self as replay, ReplayError, ReplayOptions};
use vramlab_reports::replay_page::{self, ReplayPage};

use crate::cli::ReplayArgs;
use crate::output::{BAD_REPORT_DIR, report_dir_ok, write_stdout};
use crate::snapshot_cmd::Tail;
use vramlab_reports::replay_doc;

pub fn run(args: &ReplayArgs) -> anyhow::Result<u8> {
    if !args.more.is_empty() {
        return crate::ranks_cmd::run(args);
    }
    if !report_dir_ok(args.report.as_deref()) {
        return Ok(BAD_REPORT_DIR);
    }
    let opts = ReplayOptions {
        capacity_bytes: args.capacity_bytes(),
        config: args.alloc_conf.clone().unwrap_or_default(),
        on_oom: args.on_oom.into(),
    };
    let from_stdin = args.file.as_os_str() == "-";
    let name = if from_stdin { "<stdin>".to_owned() } else { args.file.display().to_string() };
    // A PyTorch memory snapshot, told by its content (a pickle), not its name.
    let is_snapshot = |head: &[u8]| vramlab_snapshot::is_pickle(head);
    if from_stdin {
        let mut stdin = io::stdin().lock();
        if is_snapshot(stdin.fill_buf().context("cannot read standard input")?) {
            // What the lock buffered stays in stdin's buffer for the reader.
            drop(stdin);
            return write_stdout(&crate::snapshot_cmd::replay(args, &name, io::stdin(), None, Tail::Unknown)?)
                .map(|()| 0);
        }
    } else {
        let mut file = open(&args.file)?;
        if is_snapshot(file.fill_buf().with_context(|| format!("cannot read {name}"))?) {
            let len = file.get_ref().metadata().ok().map(|m| m.len());
            return write_stdout(&crate::snapshot_cmd::replay(args, &name, file, len, Tail::File(&args.file))?)
                .map(|()| 0);
        }
    }
    if args.window.device.is_some()
        || args.fraction.is_some()
        || args.window.from_us.is_some()
        || args.window.to_us.is_some()
        || args.export_snapshot.is_some()
        || args.chrome_trace.is_some()
    {
        bail!(
            "--device, --fraction, --from-us, --to-us, --export-snapshot and --chrome-trace\n  \
             apply to PyTorch memory snapshots; {name} is a vramlab trace (JSON Lines)"
        );
    }
    let (report, timeline) = if args.report.is_some() {
        // The page's replay reads the trace twice (the second time up to the
        // reserved peak): it is read into memory once.
        let mut trace = Vec::new();
        if from_stdin {
            io::stdin().lock().read_to_end(&mut trace).context("cannot read standard input")?;
        } else {
            open(&args.file)?.read_to_end(&mut trace).with_context(|| format!("cannot read {name}"))?;
        }
        let (report, timeline) = replay::replay_with_timeline(&trace, &opts).map_err(|e| replay_error(&name, e))?;
        (report, Some(timeline))
    } else {
        let result = if from_stdin {
            replay::replay(io::stdin().lock(), &opts)
        } else {
            replay::replay(open(&args.file)?, &opts)
        };
        (result.map_err(|e| replay_error(&name, e))?, None)
    };
    let doc = replay_doc::from_trace(&name, &opts, &report);
    let mut written = None;
    if let (Some(dir), Some(timeline)) = (&args.report, &timeline) {
        let page = ReplayPage {
            source: name.clone(),
            unit: "trace ops".into(),
            facts: replay_doc::page_facts(&doc, timeline),
            stat_notes: replay_doc::stat_notes(&doc),
            attribution: &doc.attribution,
            entry_times_us: None,
            paths: None,
            states: None,
            doc: Some(replay_doc::doc_view(&doc, timeline)),
            capacity_bytes: doc.memory_limit_bytes.or(doc.capacity_bytes),
            timeline,
        };
        let files = replay_page::write_replay_report(dir, &page)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        written = Some(files.index_html);
    }

    let mut out = Vec::with_capacity(16 << 10);
    if args.json {
        serde_json::to_writer_pretty(&mut out, &doc).context("cannot serialize the report")?;
        out.push(b'\n');
    } else {
        out = replay_doc::text(&doc, false).into_bytes();
        if let Some(index) = &written {
            out.extend_from_slice(format!("\nreport: {}\n", index.display()).as_bytes());
        }
    }
    write_stdout(&out).map(|()| 0)
}

fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        bail!("{} is a directory, not a trace file", path.display());
    }
    Ok(BufReader::with_capacity(1 << 18, file))
}

/// `FILE line N: what` for errors about the trace's content.
fn replay_error(name: &str, e: ReplayError) -> anyhow::Error {
    match e.line() {
        Some(_) => anyhow::Error::new(crate::output::Located(format!("{name} {e}"))),
        None => anyhow!("{e}"),
    }
}
