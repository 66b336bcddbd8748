//! `vramlab record -- CMD ARGS…`: runs a PyTorch program with its CUDA memory
//! recorded, then replays every snapshot it wrote. The Python hook
//! (`record_hook.py`, compiled in) is written as `sitecustomize.py` into a
//! temporary folder put first on the child's `PYTHONPATH`; it records from
//! torch's CUDA initialisation and dumps at every OOM, an uncaught exception and
//! exit. Afterwards each new snapshot in `--out` is replayed (peaks, recorded
//! OOMs, and the what-if answer at the first one: would `expandable_segments`
//! or a `max_split_size_mb` setting have served it), a summary goes to stderr
//! (the program's stdout stays its own), with the per-rank table of
//! `ranks_cmd` when several processes wrote snapshots, and `OUT/report/` gets a
//! replay page per snapshot and an index. The exit status is the program's.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::SystemTime;

use anyhow::Context;
use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_replay::OnOom;
use vramlab_reports::record::{
    RankSummaryRow, RanksSummary, RecordIndex, RecordRow, check_writable, remove_hook_dir, take_no_torch_notes,
    write_hook, write_record_index,
};
use vramlab_reports::replay_page::{self, Fact, ReplayPage};
use vramlab_snapshot::{self as snapshot, SWEEP_GRID, SnapshotReplayOptions, WhatIf};

use crate::cli::{CheckOptions, RecordArgs, SnapshotWindow, WhatifArgs};
use crate::memory_gate;
use crate::ranks_cmd::{is_oom_dump, is_part};
use crate::whatif_cmd;

/// Why a `.part` piece (a process killed while dumping) is not replayed.
const PART_REASON: &str = "cut short: its process ended while writing it (left as .part), so it is not replayed";
use vramlab_reports::replay_doc;

/// The hook, written as `sitecustomize.py` into the child's `PYTHONPATH`.
pub const HOOK: &str = concat!(include_str!("sitecustomize_chain.py"), include_str!("record_hook.py"));
/// The exit status for a command that cannot be found, as a shell gives it.
pub const NOT_FOUND: u8 = 127;
/// The exit status for a command found but not runnable (permissions, format).
pub const NOT_RUNNABLE: u8 = 126;

pub fn run(args: &RecordArgs) -> anyhow::Result<u8> {
    vramlab_reports::prepare_out_dir(&args.out)
        .with_context(|| format!("cannot write snapshots into {}; nothing was run", args.out.display()))?;
    let out = args.out.canonicalize().with_context(|| format!("cannot resolve {}", args.out.display()))?;
    // Nothing is run where its snapshots could not be kept.
    check_writable(&out).with_context(|| format!("cannot write snapshots into {}; nothing was run", out.display()))?;
    let before = pickles(&out);
    let started = SystemTime::now();
    let hook_dir = std::env::temp_dir().join(format!("vramlab-record-{}", std::process::id()));
    write_hook(&hook_dir, "sitecustomize.py", HOOK)
        .with_context(|| format!("cannot write the recording hook into {}", hook_dir.display()))?;
    let status = run_child(args, &out, &hook_dir);
    if let Err(e) = remove_hook_dir(&hook_dir) {
        crate::output::eprint_line(&format!("vramlab: warning: {e}"));
    }
    let shown = shell_words(&args.command);
    let code = match status {
        Ok(status) => exit_code(status),
        Err(e) => {
            let (code, why) = match e.kind() {
                std::io::ErrorKind::NotFound => (NOT_FOUND, "command not found"),
                std::io::ErrorKind::PermissionDenied => (NOT_RUNNABLE, "permission denied"),
                _ => (NOT_RUNNABLE, "it cannot be run"),
            };
            crate::output::eprint_line(&format!("error: cannot run `{}`: {why}\n  ({e})", args.command[0]));
            return Ok(code);
        }
    };
    let no_torch = take_no_torch_notes(&out);
    let new: Vec<PathBuf> = pickles(&out)
        .into_iter()
        .filter(|p| {
            !before.contains(p)
                || std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|modified| modified >= started)
        })
        .collect();
    let mut text = format!("\nvramlab record: `{shown}` exited with status {code}\n");
    #[cfg(unix)]
    if let Some(sig) = forward::received() {
        let name = if sig == libc::SIGINT { "SIGINT (Ctrl-C)" } else { "SIGTERM" };
        let _ = writeln!(text, "  interrupted by {name} while it ran; the snapshots it wrote are replayed");
    }
    text += &replay_and_index(&out, &new, &no_torch, shown.clone(), code).0;
    // Nothing sensible is left to do if stderr is gone.
    // Every line fitted to the terminal but a `.part` file's reason, which
    // stays whole on its line (its tests pin it so).
    let fitted: String = text
        .split_inclusive('\n')
        .map(|l| if l.contains(PART_REASON) { l.to_owned() } else { crate::output::fit_lines(l) })
        .collect();
    let _ = std::io::stderr().lock().write_all(fitted.as_bytes());
    let finals: Vec<PathBuf> = new.into_iter().filter(|p| !is_oom_dump(p) && !is_part(p)).collect();
    let gate = gate(args, &out, &shown, &finals)?;
    // The program's failure comes first; else the gate's verdict.
    Ok(if code == 0 { gate.unwrap_or(0) } else { code })
}

/// `--save-baseline` and `--baseline`: the memory figures of the run's final
/// snapshots saved, or gated (its exit status). Nothing without either flag.
fn gate(args: &RecordArgs, out: &Path, shown: &str, finals: &[PathBuf]) -> anyhow::Result<Option<u8>> {
    if args.save_baseline.is_none() && args.baseline.is_none() {
        return Ok(None);
    }
    let figures = if finals.is_empty() {
        Err(format!("`{shown}` wrote no snapshot to gate"))
    } else {
        memory_gate::figures_of(finals, format!("vramlab record -- {shown}"))
    };
    if let Some(name) = &args.save_baseline {
        let saved = figures.and_then(|f| memory_gate::save(&f, name, &args.baseline_dir));
        return Ok(Some(match saved {
            Ok(path) => {
                crate::output::eprint_line(&format!("memory baseline `{name}` saved: {}", path.display()));
                0
            }
            Err(message) => crate::compare::impossible(&format!("baseline `{name}` not saved: {message}")),
        }));
    }
    let baseline = args.baseline.as_deref().unwrap_or_default();
    let baseline_path = crate::compare::resolve_baseline(baseline, &args.baseline_dir);
    let opts = CheckOptions {
        force_times: false,
        export: Vec::new(),
        config: args.config.clone(),
        json: false,
        all: false,
        history: None,
    };
    eprintln!();
    memory_gate::check(&baseline_path, figures, &out.display().to_string(), &opts, out, true).map(Some)
}

/// Replays each snapshot of `new` (written into `out` by `shown`, which exited
/// with `code`; `no_torch`: the Pythons that could not import torch) and writes
/// `OUT/report/`: the summary's lines and the index's path. The command and
/// `crate::api` (Python's `vramlab.record`) share it.
pub(crate) fn replay_and_index(
    out: &Path,
    new: &[PathBuf],
    no_torch: &[String],
    shown: String,
    code: u8,
) -> (String, Option<PathBuf>) {
    let report_dir = out.join("report");
    let mut text = String::new();
    let mut rows = Vec::new();
    for path in new {
        let (row, summary) = replay_one(path, &report_dir);
        text += &summary;
        rows.push(row);
    }
    // Several processes (the ranks of a job): one row each, the imbalance, the one closest to its capacity.
    let finals: Vec<&PathBuf> = new.iter().filter(|p| !is_oom_dump(p)).collect();
    let mut ranks_summary = None;
    if finals.len() >= 2 {
        let mut ranks = Vec::new();
        for path in finals {
            ranks.extend(crate::ranks_cmd::rows_of(path, None, None, OnOom::Continue).unwrap_or_default());
        }
        let doc = crate::ranks_cmd::summarise(ranks);
        text.push('\n');
        text += &crate::ranks_cmd::text(&doc);
        ranks_summary = Some(ranks_summary_of(&doc, &rows));
    }
    let empty_reason = if new.is_empty() {
        let reason = match no_torch.first() {
            Some(python) => format!(
                "torch could not be imported by {python}{}, so nothing was recorded into {}: install torch for that \
                 Python, or run the command with the Python that has it",
                if no_torch.len() > 1 {
                    format!(" (and {} more process(es))", no_torch.len() - 1)
                } else {
                    String::new()
                },
                out.display()
            ),
            None => format!(
                "no process initialised CUDA through torch (torch not imported, CPU only, or not Python), so nothing \
                 was recorded into {}",
                out.display()
            ),
        };
        let _ = writeln!(text, "  no snapshot: {reason}");
        reason
    } else {
        String::new()
    };
    let index = RecordIndex { command: shown, exit_status: code, rows, ranks: ranks_summary, empty_reason };
    let written = match write_record_index(&report_dir, &index) {
        Ok(path) => {
            let _ = writeln!(text, "report: {}", path.display());
            Some(path)
        }
        Err(e) => {
            let _ = writeln!(text, "error: cannot write the report into {}: {e}", report_dir.display());
            None
        }
    };
    (text, written)
}

/// Runs the command with the hook on its path; waits for it.
fn run_child(args: &RecordArgs, out: &Path, hook_dir: &Path) -> std::io::Result<ExitStatus> {
    let mut paths = vec![hook_dir.to_path_buf()];
    if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        paths.extend(std::env::split_paths(&existing));
    }
    let pythonpath = std::env::join_paths(paths).unwrap_or_else(|_| OsString::from(hook_dir));
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("PYTHONPATH", pythonpath)
        .env("VRAMLAB_RECORD_DIR", out)
        .env("VRAMLAB_RECORD_MAX_ENTRIES", args.max_entries.to_string())
        .env("VRAMLAB_RECORD_STACKS", args.stacks.as_str());
    if let Some(conf) = &args.alloc_conf {
        cmd.env("PYTORCH_CUDA_ALLOC_CONF", conf);
    }
    #[cfg(unix)]
    let _forwarding = forward::install();
    let mut child = cmd.spawn()?;
    #[cfg(unix)]
    forward::set_child(child.id());
    child.wait()
}

/// SIGINT and SIGTERM while the recorded command runs: vramlab stays to replay
/// what it wrote. A signal the terminal sent (Ctrl-C) reached the child too,
/// being in its process group; one a process sent to vramlab alone (`kill`, a
/// job scheduler) is forwarded to the child. `si_code` tells them apart: at
/// most 0 for a process's (`SI_USER`, `SI_QUEUE`, `SI_TKILL`), positive for
/// the kernel's (the terminal's).
#[cfg(unix)]
mod forward {
    use std::sync::atomic::{AtomicI32, Ordering};

    static CHILD: AtomicI32 = AtomicI32::new(0);
    static RECEIVED: AtomicI32 = AtomicI32::new(0);
    const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

    extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        RECEIVED.store(sig, Ordering::SeqCst);
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; it is only read.
        let by_process = !info.is_null() && unsafe { (*info).si_code } <= 0;
        let pid = CHILD.load(Ordering::SeqCst);
        if by_process && pid > 0 {
            // SAFETY: kill is async-signal-safe; a child already gone makes it fail harmlessly.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// The handlers in force while the child runs; the previous ones come back on drop.
    #[derive(Debug)]
    pub struct Forwarding {
        previous: Vec<(libc::c_int, libc::sigaction)>,
    }

    pub fn install() -> Forwarding {
        RECEIVED.store(0, Ordering::SeqCst);
        let mut previous = Vec::new();
        for sig in SIGNALS {
            // SAFETY: sigaction with a zeroed struct, an extern "C" handler of the
            // SA_SIGINFO signature and an empty mask; the old action is kept to restore.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handler as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &action, &mut old) == 0 {
                    previous.push((sig, old));
                }
            }
        }
        Forwarding { previous }
    }

    pub fn set_child(pid: u32) {
        CHILD.store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
    }

    /// The last signal received while the child ran, if any.
    pub fn received() -> Option<libc::c_int> {
        Some(RECEIVED.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }

    impl Drop for Forwarding {
        fn drop(&mut self) {
            CHILD.store(0, Ordering::SeqCst);
            for (sig, old) in &self.previous {
                // SAFETY: restores the action sigaction returned for this signal.
                unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
            }
        }
    }
}

/// The status as a shell reports it: the code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from((128 + signal) & 0xff).unwrap_or(1);
        }
    }
    1
}

/// The snapshot files in `dir`, sorted: the finished ones and the hook's
/// `.pickle.part` files, which a process killed while dumping leaves behind.
fn pickles(dir: &Path) -> BTreeSet<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.to_str().is_some_and(|s| s.ends_with(".pickle") || s.ends_with(".pickle.part")))
        .collect()
}

/// The command as it would be typed (arguments with spaces or quotes quoted).
pub(crate) fn shell_words(words: &[String]) -> String {
    let quote = |w: &String| {
        if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The settings the what-if tries at a recorded OOM: expandable segments and
/// each `max_split_size_mb` of the sweep's grid.
fn oom_settings() -> Vec<Option<AllocatorConfig>> {
    let mut configs = vec![None];
    for conf in SWEEP_GRID {
        if !conf.contains(',') && (conf.starts_with("expandable_segments") || conf.starts_with("max_split_size_mb")) {
            configs.push(AllocatorConfig::parse(conf).ok());
        }
    }
    configs
}

/// Replays one snapshot: its index row and its lines of the summary. A file
/// that cannot be read or replayed is a row that says why, never an error.
fn replay_one(path: &Path, report_dir: &Path) -> (RecordRow, String) {
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut row = RecordRow {
        file: file.clone(),
        rank: crate::ranks_cmd::rank_of(path),
        page: None,
        whatif_page: None,
        peak_allocated: "-".into(),
        peak_reserved: "-".into(),
        ooms: 0,
        whatif: Vec::new(),
    };
    let mut text = String::new();
    let result = (|| -> anyhow::Result<()> {
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let snap = snapshot::read_snapshot(BufReader::with_capacity(1 << 20, f)).context(if is_part(path) {
            PART_REASON
        } else {
            "not a readable PyTorch memory snapshot (cut short by a killed process?)"
        })?;
        let opts = SnapshotReplayOptions::default();
        let (mut r, timeline) = snapshot::replay_snapshot_timeline(&snap, &opts, true).context("cannot replay it")?;
        let stats_note = crate::snapshot_cmd::check_stats_beside(path, &mut r);
        let doc = replay_doc::from_snapshot(&file, &snap, &r, &opts);
        row.peak_allocated = fmt_bytes(doc.peak_allocated_bytes);
        row.peak_reserved = fmt_bytes(doc.peak_reserved_bytes);
        row.ooms = doc.oom_requests.len() as u64;
        let _ = writeln!(
            text,
            "  {file}: device {}, {} trace entries; peak allocated {},\n    peak reserved {}; {} recorded OOM(s)",
            doc.device, doc.entries, row.peak_allocated, row.peak_reserved, row.ooms
        );
        if let Some(f) = doc.fidelity.as_ref().filter(|f| f.memory_stats.is_some() || !f.agrees()) {
            let verdict = if f.agrees() { "agrees with" } else { "DISAGREES with" };
            let _ = writeln!(text, "    the replay {verdict} the recording");
            for line in f.memory_stats.iter().flat_map(replay_doc::memory_stats_lines) {
                let _ = writeln!(text, "      {line}");
            }
        }
        if let Some(note) = stats_note {
            let _ = writeln!(text, "    memory_stats: {note}");
        }
        // Its what-if page: the recorded settings, expandable segments and max_split_size_mb.
        let settings = WhatifArgs {
            file: path.to_path_buf(),
            more: Vec::new(),
            capacity: None,
            fraction: None,
            sweep: false,
            alloc_conf: oom_settings().into_iter().flatten().collect(),
            window: SnapshotWindow { device: Some(doc.device as usize), ..Default::default() },
            top: replay_doc::ATTRIBUTION_ROWS,
            json: false,
            report: None,
        };
        let a = whatif_cmd::analyse(&settings, &file, &snap, true).context("cannot replay it under other settings")?;
        if let Some(first) = doc.oom_requests.first() {
            let _ = writeln!(
                text,
                "    recorded OOM at entry {}: a request of {}; would another setting, or a smaller batch, have served it?",
                first.trace_index,
                fmt_bytes(first.requested_bytes)
            );
            row.whatif = whatif_lines(&a.results);
            row.whatif.extend(a.batch.iter().flat_map(whatif_cmd::smaller_batch_lines));
            for line in &row.whatif {
                let _ = writeln!(text, "      {line}");
            }
        }
        let whatif_dir = report_dir.join(format!("{stem}-whatif"));
        whatif_cmd::write_page(&whatif_dir, &settings, &file, &a)
            .with_context(|| format!("cannot write its what-if page into {}", whatif_dir.display()))?;
        row.whatif_page = Some(format!("{stem}-whatif/index.html"));
        let mut facts = replay_doc::page_facts(&doc, &timeline);
        facts.extend(row.whatif.iter().map(|l| Fact::new("what-if at the recorded OOM", l.clone())));
        // The chart's x axis in time where the entries have times.
        let times: Vec<i64> = snap.device_traces[r.device].iter().map(|e| e.time_us).collect();
        let paths = vramlab_snapshot::path_timeline(&snap, r.device, &replay_page::mark_states(&timeline));
        let entries = snap.device_traces[r.device].len() as u64;
        let windows = replay_page::state_windows_for(&timeline, entries);
        let states = Some(
            snapshot::replay_snapshot_states(&snap, &opts, windows)
                .context("cannot replay it for the allocator states")?,
        );
        let page = ReplayPage {
            source: file.clone(),
            unit: "trace entries".into(),
            facts,
            stat_notes: replay_doc::stat_notes(&doc),
            attribution: &doc.attribution,
            entry_times_us: Some(&times),
            paths: paths.as_ref(),
            states: states.as_ref(),
            doc: Some(replay_doc::doc_view(&doc, &timeline)),
            capacity_bytes: doc.memory_limit_bytes.or(doc.capacity_bytes),
            timeline: &timeline,
        };
        let dir = report_dir.join(&stem);
        replay_page::write_replay_report(&dir, &page)
            .with_context(|| format!("cannot write its page into {}", dir.display()))?;
        row.page = Some(format!("{stem}/index.html"));
        Ok(())
    })();
    if let Err(e) = result {
        let why = crate::output::error_text(&e);
        let _ = writeln!(text, "  {file}: {why}");
        row.whatif = vec![why];
    }
    (row, text)
}

/// The index's summary of ranks: each row linked to its file's pages.
fn ranks_summary_of(doc: &crate::ranks_cmd::RanksDoc, rows: &[RecordRow]) -> RanksSummary {
    let opt = |b: Option<u64>| b.map(fmt_bytes).unwrap_or_else(|| "-".into());
    let summary_rows = doc
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let name = Path::new(&r.file).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let pages = rows.iter().find(|row| row.file == name);
            let mut marks = Vec::new();
            if let Some(im) = &doc.imbalance {
                if im.max_row == i {
                    marks.push("most reserved");
                }
                if im.min_row == i {
                    marks.push("least reserved");
                }
            }
            if doc.closest_to_capacity == Some(i) {
                marks.push("closest to capacity");
            }
            RankSummaryRow {
                label: crate::ranks_cmd::label(r).replace(&format!("{}, ", r.file), &format!("{name}, ")),
                file: name.clone(),
                page: pages.and_then(|p| p.page.clone()),
                whatif_page: pages.and_then(|p| p.whatif_page.clone()),
                peak_allocated: fmt_bytes(r.peak_allocated_bytes),
                peak_reserved: fmt_bytes(r.peak_reserved_bytes),
                limit: opt(r.limit_bytes),
                headroom: opt(r.headroom_bytes),
                oom: match (r.recorded_ooms, &r.out_of_memory) {
                    (0, None) => "no".to_owned(),
                    (0, Some(o)) => format!("in the replay {o}"),
                    (n, _) => format!("{n} recorded"),
                },
                marks: marks.join(", "),
                error: r.error.clone(),
            }
        })
        .collect();
    RanksSummary {
        rows: summary_rows,
        imbalance: crate::ranks_cmd::imbalance_text(doc),
        closest: crate::ranks_cmd::closest_text(doc),
    }
}

/// One line per setting tried: the recorded one first, then whether each
/// other served the recorded failed request, and by how much.
fn whatif_lines(results: &[WhatIf]) -> Vec<String> {
    let width = results.iter().map(|w| name(w).len()).max().unwrap_or(0);
    results.iter().map(|w| format!("{:width$}  {}", name(w), crate::whatif_cmd::recorded_oom_text(w))).collect()
}

fn name(w: &WhatIf) -> String {
    let conf = if w.alloc_conf.is_empty() { "PyTorch defaults" } else { &w.alloc_conf };
    if w.recorded { format!("recorded ({conf})") } else { conf.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_where_a_shell_needs_it() {
        let w = |s: &[&str]| shell_words(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["python3", "train.py", "--lr=0.1"]), "python3 train.py --lr=0.1");
        assert_eq!(w(&["sh", "-c", "exit 3"]), "sh -c 'exit 3'");
        assert_eq!(w(&["echo", "it's"]), r"echo 'it'\''s'");
    }

    #[test]
    fn oom_dumps_are_told_by_their_suffix() {
        assert!(is_oom_dump(Path::new("d/h-rank1-pid4-oom2.pickle")));
        assert!(!is_oom_dump(Path::new("d/h-rank1-pid4.pickle")));
        assert!(!is_oom_dump(Path::new("d/room-pid4.pickle")));
        assert!(is_oom_dump(Path::new("d/h-pid4-oom2.pickle.part")) && is_part(Path::new("d/h-pid4-oom2.pickle.part")));
        assert!(!is_oom_dump(Path::new("d/h-pid4.pickle.part")));
    }

    #[test]
    fn oom_settings_are_the_recorded_then_expandable_and_max_split() {
        let c = oom_settings();
        assert!(c[0].is_none());
        assert_eq!(c.len(), 5, "recorded, expandable_segments:True, max_split_size_mb:128/256/512");
    }
}
