//! `cargo xtask replay` on a PyTorch memory snapshot (detected from the file's
//! content by `replay_cmd`): imports it, replays one device's trace, and prints
//! the report with the fidelity check (the document of `vramlab_reports::replay_doc`), readable
//! or as JSON; with `--report DIR` also the offline HTML page of the replay.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vramlab_reports::replay_page::{self, ReplayPage};
use vramlab_snapshot::{self as snapshot, ReadOptions, SnapshotReplay, SnapshotReplayOptions};

use crate::cli::ReplayArgs;
use vramlab_reports::replay_doc;

/// Files from this size on show their progress on stderr (where it is a
/// terminal): the bytes read, then the replay (about 1 s per 100 MB).
const PROGRESS_FROM_BYTES: u64 = 32 << 20;

/// Where the end of a snapshot can be read before the rest: its last bytes
/// hold its allocator settings, which let the replay start while it is read.
#[derive(Debug, Clone, Copy)]
pub enum Tail<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
    Unknown,
}

/// Replays a snapshot read from `input` (named `name` in messages; `len`, its
/// size where known, for the progress bar of large files; `tail`, where its
/// end tells the allocator settings before the rest is read). Without
/// `--report`, the replay runs while the file is read
/// ([`snapshot::read_and_replay`]); `--from-us` drops the entries before it
/// as they are read.
pub fn replay(
    args: &ReplayArgs,
    name: &str,
    input: impl Read + Send,
    len: Option<u64>,
    tail: Tail<'_>,
) -> anyhow::Result<Vec<u8>> {
    if let (Some(from), Some(to)) = (args.window.from_us, args.window.to_us)
        && from > to
    {
        bail!("--from-us {from} is after --to-us {to}: the window is empty");
    }
    let opts = SnapshotReplayOptions {
        device: args.window.device,
        from_us: args.window.from_us,
        to_us: args.window.to_us,
        capacity_bytes: args.capacity_bytes(),
        memory_fraction: args.fraction,
        config: args.alloc_conf.clone(),
        on_oom: args.on_oom.into(),
        record: args.export_snapshot.is_some() || args.chrome_trace.is_some(),
        ..Default::default()
    };
    let read = ReadOptions { from_us: args.window.from_us };
    let bar = len.filter(|&n| n >= PROGRESS_FROM_BYTES).map(|n| {
        let style = ProgressStyle::with_template("{prefix:>9} [{bar:30}] {bytes}/{total_bytes} {elapsed}")
            .expect("a valid template")
            .progress_chars("=> ");
        let prefix = if args.report.is_some() { "reading" } else { "replaying" };
        ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()).with_style(style).with_prefix(prefix)
    });
    // Cleared however the replay ends.
    let _clear = ClearOnDrop(bar.clone());
    let input: Box<dyn Read + Send> = match &bar {
        Some(bar) => Box::new(bar.wrap_read(input)),
        None => Box::new(input),
    };
    let unreadable = || format!("{name} is not a readable PyTorch memory snapshot");
    let (snap, mut r, timeline) = if args.report.is_some() {
        let snap = snapshot::read_snapshot_with(input, read).with_context(unreadable)?;
        if let Some(bar) = &bar {
            let entries: usize = snap.device_traces.iter().map(Vec::len).sum();
            bar.set_style(
                ProgressStyle::with_template("{prefix:>9} {spinner} {msg} {elapsed}").expect("a valid template"),
            );
            bar.set_prefix("replaying");
            bar.set_message(format!("{entries} trace entries"));
            bar.enable_steady_tick(Duration::from_millis(100));
        }
        let (r, t) =
            snapshot::replay_snapshot_timeline(&snap, &opts, true).with_context(|| format!("cannot replay {name}"))?;
        (snap, r, Some(t))
    } else {
        let settings = match tail {
            Tail::File(path) => settings_from_tail(path),
            Tail::Bytes(bytes) => snapshot::peek_allocator_settings(&bytes[bytes.len().saturating_sub(256 << 10)..])
                .map(|s| s.to_config()),
            Tail::Unknown => None,
        };
        let (snap, r) = snapshot::read_and_replay(input, read, settings, &opts).with_context(unreadable)?;
        let r = r.with_context(|| format!("cannot replay {name}"))?;
        (snap, r, None)
    };
    let stats_note = match tail {
        Tail::File(path) => check_stats_beside(path, &mut r),
        Tail::Bytes(_) | Tail::Unknown => None,
    };
    let doc = replay_doc::from_snapshot(name, &snap, &r, &opts);
    let mut written = None;
    if let (Some(dir), Some(timeline)) = (&args.report, &timeline) {
        // The chart's x axis in time where the entries have times.
        let times: Vec<i64> = snap.device_traces[r.device].iter().map(|e| e.time_us).collect();
        let paths = snapshot::path_timeline(&snap, r.device, &replay_page::mark_states(timeline));
        let entries = snap.device_traces[r.device].len() as u64;
        let windows = replay_page::state_windows_for(timeline, entries);
        let states = Some(
            snapshot::replay_snapshot_states(&snap, &opts, windows)
                .context("cannot replay it for the allocator states")?,
        );
        let page = ReplayPage {
            source: name.to_owned(),
            unit: "trace entries".into(),
            facts: replay_doc::page_facts(&doc, timeline),
            stat_notes: replay_doc::stat_notes(&doc),
            attribution: &doc.attribution,
            entry_times_us: Some(&times),
            paths: paths.as_ref(),
            states: states.as_ref(),
            doc: Some(replay_doc::doc_view(&doc, timeline)),
            capacity_bytes: doc.memory_limit_bytes.or(doc.capacity_bytes),
            timeline,
        };
        let files = replay_page::write_replay_report(dir, &page)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        written = Some(files.index_html);
    }
    // Built in memory, written by vramlab-reports (the crate that writes files), atomically.
    if let Some(rec) = &r.recording {
        if let Some(path) = &args.export_snapshot {
            let mut bytes = Vec::new();
            snapshot::write_snapshot(rec, &mut bytes).context("cannot build the snapshot pickle")?;
            vramlab_reports::write_atomic(path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some(path) = &args.chrome_trace {
            let mut bytes = Vec::new();
            snapshot::write_chrome_trace(rec, r.device, &mut bytes).context("cannot build the Chrome trace")?;
            vramlab_reports::write_atomic(path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let mut out = Vec::new();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &doc).context("cannot serialize the report")?;
        out.push(b'\n');
    } else {
        let mut text = replay_doc::text(&doc, snap.allocator_settings.is_some());
        if let Some(note) = &stats_note {
            let _ = writeln!(text, "  memory_stats       {note}");
        }
        for (what, path) in [("snapshot pickle", &args.export_snapshot), ("Chrome trace", &args.chrome_trace)] {
            if let Some(p) = path {
                let _ = writeln!(text, "  wrote              {} ({what})", p.display());
            }
        }
        out = text.into_bytes();
        if let Some(index) = &written {
            out.extend_from_slice(format!("\nreport: {}\n", index.display()).as_bytes());
        }
    }
    Ok(out)
}

/// PyTorch's `memory_stats()` beside the snapshot `path` (`NAME.stats.json`, as
/// `record` writes it), compared with the replay `r` key by key into its
/// fidelity report. Without such a file, nothing; with one that cannot be read
/// or compared, the line that says why.
pub(crate) fn check_stats_beside(path: &Path, r: &mut SnapshotReplay) -> Option<String> {
    let file = snapshot::stats_file_beside(path);
    let shown = file.display().to_string();
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(format!("{shown}: cannot read it: {e}")),
    };
    match snapshot::read_pytorch_stats(&shown, &text) {
        Ok(stats) => r.check_memory_stats(&stats).err().map(|e| format!("{shown}: not compared: {e}")),
        Err(e) => Some(e.to_string()),
    }
}

/// The allocator settings the last 256 KiB of the snapshot file at `path` hold, if any.
fn settings_from_tail(path: &Path) -> Option<vramlab_engine::alloc::AllocatorConfig> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(256 << 10);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::with_capacity((len - from) as usize);
    file.read_to_end(&mut tail).ok()?;
    snapshot::peek_allocator_settings(&tail).map(|s| s.to_config())
}

/// Clears a progress bar when dropped.
struct ClearOnDrop(Option<ProgressBar>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
