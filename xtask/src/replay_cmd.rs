//! `cargo xtask replay`: runs [`vramlab_replay`] on a file or standard
//! input and prints the report, readable or as JSON; with `--report DIR` also
//! the offline HTML page of the replay (written by `vramlab_reports::replay_page`).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_replay::timeline::ReplayTimeline;
use vramlab_replay::{self as replay, OnOom, ReplayError, ReplayOptions, ReplayReport};
use vramlab_reports::replay_page::{self, Fact, ReplayPage};

use crate::cli::ReplayArgs;
use crate::size::format_bytes;

/// How many out-of-memory events the readable report lists one by one.
const OOMS_LISTED: usize = 10;

/// Exit status when the `--report` folder cannot be written.
pub const BAD_REPORT_DIR: u8 = 2;

/// Checks that `--report DIR` can be written before anything is replayed; the
/// message, on stderr, names the folder. `false` when it cannot.
pub fn report_dir_ok(dir: Option<&Path>) -> bool {
    let Some(dir) = dir else { return true };
    match vramlab_reports::prepare_out_dir(dir) {
        Ok(()) => true,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: cannot write the report into {}: {e}", dir.display());
            false
        }
    }
}

pub fn run(args: &ReplayArgs) -> anyhow::Result<u8> {
    if !report_dir_ok(args.report.as_deref()) {
        return Ok(BAD_REPORT_DIR);
    }
    let opts = ReplayOptions {
        capacity_bytes: args.capacity,
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
            return write_stdout(&crate::snapshot_cmd::replay(args, &name, stdin)?).map(|()| 0);
        }
    } else {
        let mut file = open(&args.file)?;
        if is_snapshot(file.fill_buf().with_context(|| format!("cannot read {name}"))?) {
            return write_stdout(&crate::snapshot_cmd::replay(args, &name, file)?).map(|()| 0);
        }
    }
    if args.device.is_some()
        || args.from_us.is_some()
        || args.to_us.is_some()
        || args.export_snapshot.is_some()
        || args.chrome_trace.is_some()
    {
        bail!(
            "--device, --from-us, --to-us, --export-snapshot and --chrome-trace apply to PyTorch memory snapshots; \
             {name} is a vramlab trace (JSON Lines)"
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
    let mut written = None;
    if let (Some(dir), Some(timeline)) = (&args.report, &timeline) {
        let page = ReplayPage {
            source: name.clone(),
            unit: "trace ops".into(),
            facts: page_facts(&opts, &report, timeline),
            stat_notes: Vec::new(),
            timeline,
        };
        let files = replay_page::write_replay_report(dir, &page)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        written = Some(files.index_html);
    }

    let mut out = Vec::with_capacity(16 << 10);
    if args.json {
        let json = JsonReport {
            trace: &name,
            capacity_bytes: opts.capacity_bytes,
            alloc_conf: opts.config.to_string(),
            on_oom: opts.on_oom,
            report: &report,
        };
        serde_json::to_writer_pretty(&mut out, &json).context("cannot serialize the report")?;
        out.push(b'\n');
    } else {
        out = text_report(&name, &opts, &report).into_bytes();
        if let Some(index) = &written {
            out.extend_from_slice(format!("\nreport: {}\n", index.display()).as_bytes());
        }
    }
    write_stdout(&out).map(|()| 0)
}

/// The replay page's summary table.
fn page_facts(opts: &ReplayOptions, r: &ReplayReport, t: &ReplayTimeline) -> Vec<Fact> {
    let ooms = r.ooms.len() as u64 + r.ooms_not_recorded;
    let mut facts = vec![
        Fact::new("simulated device", opts.capacity_bytes.map_or_else(|| "unlimited".to_owned(), bytes_exact)),
        Fact::new("allocator config", config_text(&opts.config)),
        Fact::new("ops replayed", format!("{} ({} lines read)", r.events, r.lines)),
        Fact::new(
            "out of memory",
            match ooms {
                0 => "never".to_owned(),
                n if r.stopped_early => format!("{n} time(s); the replay stopped at the first"),
                n => format!("{n} time(s)"),
            },
        ),
        Fact::new("peak allocated", bytes_exact(t.peak_allocated_bytes())),
        Fact::new("peak reserved", bytes_exact(t.peak_reserved_bytes())),
        Fact::new("final allocated", bytes_exact(r.current_allocated_bytes)),
        Fact::new("final reserved", bytes_exact(r.current_reserved_bytes)),
        Fact::new("live allocations", r.live_allocations.to_string()),
    ];
    if r.devices.len() > 1 {
        facts.push(Fact::new("devices", format!("{} (the page shows device 0)", r.devices.len())));
    }
    facts
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
        Some(_) => anyhow!("{name} {e}"),
        None => anyhow!("{e}"),
    }
}

/// Writes everything to stdout; a reader that went away (`| head`) is not an error.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("cannot write the report"),
        _ => Ok(()),
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    trace: &'a str,
    capacity_bytes: Option<u64>,
    /// The configuration in force, canonical `PYTORCH_CUDA_ALLOC_CONF` syntax ("" = default).
    alloc_conf: String,
    on_oom: OnOom,
    #[serde(flatten)]
    report: &'a ReplayReport,
}

fn config_text(config: &AllocatorConfig) -> String {
    let text = config.to_string();
    if text.is_empty() { "default (PyTorch's)".to_owned() } else { text }
}

fn bytes_exact(bytes: u64) -> String {
    if bytes < 1024 { format_bytes(bytes) } else { format!("{} ({bytes} bytes)", format_bytes(bytes)) }
}

fn text_report(name: &str, opts: &ReplayOptions, r: &ReplayReport) -> String {
    let mut s = String::new();
    let capacity = opts.capacity_bytes.map_or_else(|| "unlimited".to_owned(), bytes_exact);
    // Writing to a String cannot fail.
    let _ = writeln!(s, "vramlab replay of {name}");
    let _ = writeln!(s, "  simulated device   {capacity}");
    let _ = writeln!(s, "  allocator config   {}", config_text(&opts.config));
    let _ = writeln!(s, "  events replayed    {} ({} lines read)", r.events, r.lines);
    let total_ooms = r.ooms.len() as u64 + r.ooms_not_recorded;
    if total_ooms == 0 {
        let _ = writeln!(s, "  out of memory      never");
    } else {
        let how = if r.stopped_early { "; the replay stopped there (--on-oom continue goes on)" } else { "" };
        let _ = writeln!(s, "  out of memory      {total_ooms} time{}{how}", if total_ooms == 1 { "" } else { "s" });
        for oom in r.ooms.iter().take(OOMS_LISTED) {
            let _ = writeln!(
                s,
                "    line {} (event {}): alloc of {}\n      {}",
                oom.line,
                oom.event_index,
                bytes_exact(oom.requested_bytes),
                oom.error
            );
        }
        if total_ooms > OOMS_LISTED as u64 {
            let _ = writeln!(s, "    … and {} more (--json lists the first 1000)", total_ooms - OOMS_LISTED as u64);
        }
    }
    let total_too_large = r.too_large.len() as u64 + r.too_large_not_recorded;
    if total_too_large > 0 {
        let how = if r.stopped_early && r.ooms.is_empty() { "; the replay stopped there" } else { "" };
        let _ = writeln!(
            s,
            "  refused (>= 1 EiB)  {total_too_large} request{}, before the allocator as PyTorch does{how}",
            if total_too_large == 1 { "" } else { "s" }
        );
        for record in r.too_large.iter().take(OOMS_LISTED) {
            let _ = writeln!(s, "    line {} (event {}): {}", record.line, record.event_index, record.message);
        }
    }
    let since = r.last_reset_peak_line.map(|l| format!(", since the reset_peak at line {l}")).unwrap_or_default();
    let _ = writeln!(s, "  peak allocated     {}{since}", bytes_exact(r.peak_allocated_bytes));
    let _ = writeln!(s, "  peak reserved      {}{since}", bytes_exact(r.peak_reserved_bytes));
    let _ = writeln!(s, "  final allocated    {}", bytes_exact(r.current_allocated_bytes));
    let _ = writeln!(s, "  final reserved     {}", bytes_exact(r.current_reserved_bytes));
    let _ = writeln!(s, "  live allocations   {}", r.live_allocations);
    if r.devices.len() > 1 {
        let _ =
            writeln!(s, "  devices            {} (the figures above and the summary are device 0's)", r.devices.len());
        for d in &r.devices {
            let _ = writeln!(
                s,
                "    device {}: peak allocated {}, peak reserved {}, final reserved {}",
                d.device,
                bytes_exact(d.peak_allocated_bytes),
                bytes_exact(d.peak_reserved_bytes),
                bytes_exact(d.current_reserved_bytes)
            );
        }
    }
    s.push('\n');
    s.push_str(&r.summary);
    s
}
