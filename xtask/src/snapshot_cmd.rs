//! `cargo xtask replay` on a PyTorch memory snapshot (detected from the file's
//! content by `replay_cmd`): imports it, replays one device's trace, and prints
//! the report with the fidelity check, readable or as JSON; with `--report DIR`
//! also the offline HTML page of the replay.

use std::fmt::Write as _;
use std::io::Read;

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_replay::timeline::ReplayTimeline;
use vramlab_reports::replay_page::{self, Fact, ReplayPage};
use vramlab_snapshot::{self as snapshot, Snapshot, SnapshotReplay, SnapshotReplayOptions};

use crate::cli::ReplayArgs;
use crate::size::format_bytes;

/// Replays a snapshot read from `input` (named `name` in messages).
pub fn replay(args: &ReplayArgs, name: &str, input: impl Read) -> anyhow::Result<Vec<u8>> {
    let snap =
        snapshot::read_snapshot(input).with_context(|| format!("{name} is not a readable PyTorch memory snapshot"))?;
    if let (Some(from), Some(to)) = (args.from_us, args.to_us)
        && from > to
    {
        bail!("--from-us {from} is after --to-us {to}: the window is empty");
    }
    let opts = SnapshotReplayOptions {
        device: args.device,
        from_us: args.from_us,
        to_us: args.to_us,
        capacity_bytes: args.capacity,
        config: args.alloc_conf.clone(),
        on_oom: args.on_oom.into(),
        record: args.export_snapshot.is_some() || args.chrome_trace.is_some(),
    };
    let (r, timeline) = if args.report.is_some() {
        let (r, t) =
            snapshot::replay_snapshot_timeline(&snap, &opts, true).with_context(|| format!("cannot replay {name}"))?;
        (r, Some(t))
    } else {
        (snapshot::replay_snapshot(&snap, &opts).with_context(|| format!("cannot replay {name}"))?, None)
    };
    let mut written = None;
    if let (Some(dir), Some(timeline)) = (&args.report, &timeline) {
        let page = ReplayPage {
            source: name.to_owned(),
            unit: "trace entries".into(),
            facts: page_facts(&snap, &r, timeline),
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
        let json = JsonReport { snapshot: name, protocol: snap.protocol, replay: &r };
        serde_json::to_writer_pretty(&mut out, &json).context("cannot serialize the report")?;
        out.push(b'\n');
    } else {
        out = text_report(name, &snap, &r, args).into_bytes();
        if let Some(index) = &written {
            out.extend_from_slice(format!("\nreport: {}\n", index.display()).as_bytes());
        }
    }
    Ok(out)
}

/// The replay page's summary table.
fn page_facts(snap: &Snapshot, r: &SnapshotReplay, t: &ReplayTimeline) -> Vec<Fact> {
    let conf = if r.alloc_conf.is_empty() { "default (PyTorch's)".to_owned() } else { r.alloc_conf.clone() };
    let mut facts = vec![
        Fact::new("snapshot", format!("PyTorch memory snapshot, pickle protocol {}", snap.protocol)),
        Fact::new("device", r.device.to_string()),
        Fact::new("allocator config", conf),
        Fact::new("simulated device", r.capacity_bytes.map_or_else(|| "unlimited".to_owned(), exact)),
        Fact::new(
            "trace entries",
            format!("{} ({} in the window): {} allocs, {} frees", r.entries, r.entries_in_window, r.allocs, r.frees),
        ),
        Fact::new(
            "out of memory",
            match r.ooms.first() {
                None => "never".to_owned(),
                Some(o) => {
                    format!("{} time(s), first at entry {} (time_us {})", r.ooms.len(), o.trace_index, o.time_us)
                }
            },
        ),
        Fact::new("peak allocated", exact(t.peak_allocated_bytes())),
        Fact::new("peak reserved", exact(t.peak_reserved_bytes())),
        Fact::new("final allocated", exact(r.final_allocated_bytes)),
        Fact::new("final reserved", exact(r.final_reserved_bytes)),
        Fact::new("segment allocations", r.segment_allocs.to_string()),
    ];
    if let Some(f) = &r.fidelity {
        facts.push(Fact::new(
            "fidelity",
            if f.agrees() {
                "agrees with the recording"
            } else {
                "DISAGREES with the recording (see the terminal report)"
            },
        ));
    }
    facts
}

#[derive(Serialize)]
struct JsonReport<'a> {
    snapshot: &'a str,
    protocol: u8,
    #[serde(flatten)]
    replay: &'a SnapshotReplay,
}

fn exact(bytes: u64) -> String {
    if bytes < 1024 { format_bytes(bytes) } else { format!("{} ({bytes} bytes)", format_bytes(bytes)) }
}

fn frames_text(snap: &Snapshot, id: u32) -> String {
    snap.frames.stack(id).next().map(|f| format!(" at {}", f.short())).unwrap_or_default()
}

fn text_report(name: &str, snap: &Snapshot, r: &SnapshotReplay, args: &ReplayArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "vramlab replay of {name} (PyTorch memory snapshot, pickle protocol {})", snap.protocol);
    let how = if r.device_chosen {
        format!(
            " (the one with the most entries, of {} device(s) with a trace; --device N picks another)",
            r.devices_with_entries
        )
    } else {
        String::new()
    };
    let _ = writeln!(s, "  device             {}{how}", r.device);
    let conf = if r.alloc_conf.is_empty() { "default (PyTorch's)".to_owned() } else { r.alloc_conf.clone() };
    let origin = match (r.settings_from_snapshot, snap.allocator_settings.is_some()) {
        (true, true) => " (the snapshot's allocator_settings)",
        (true, false) => " (the snapshot records none: PyTorch's defaults)",
        (false, _) => " (--alloc-conf)",
    };
    let _ = writeln!(s, "  allocator config   {conf}{origin}");
    let capacity = r.capacity_bytes.map_or_else(|| "unlimited".to_owned(), exact);
    let _ = writeln!(s, "  simulated device   {capacity}");
    let window = if r.entries_in_window != r.entries {
        format!(", {} in the time window", r.entries_in_window)
    } else {
        String::new()
    };
    let _ = writeln!(s, "  trace entries      {}{window}: {} allocs, {} frees", r.entries, r.allocs, r.frees);
    let l = &r.live_at_start;
    if l.segments + l.blocks == 0 {
        let _ = writeln!(s, "  live at start      nothing (every segment and block is made in the trace)");
    } else {
        let _ = writeln!(
            s,
            "  live at start      {} segment(s) of {} and {} block(s) of {}, rewound from the final segments;\n                     \
             {} block(s), {} allocated in the final segments without an entry;\n                     \
             {} block(s), {} freed without an alloc entry (lost from the ring buffer)",
            l.segments,
            format_bytes(l.segments_bytes),
            l.blocks,
            format_bytes(l.blocks_bytes),
            l.blocks_in_segments,
            format_bytes(l.blocks_in_segments_bytes),
            l.freed_without_alloc,
            format_bytes(l.freed_without_alloc_bytes)
        );
        if l.outside_segments + l.entries_not_undone > 0 {
            let _ = writeln!(
                s,
                "                     {} block(s) in no segment placed in segments of the replay's own making; \
                 {} entr(ies) not undone{}",
                l.outside_segments,
                l.entries_not_undone,
                l.first_not_undone.as_deref().map(|f| format!(" (the first: {f})")).unwrap_or_default()
            );
        }
    }
    if r.skipped_entries > 0 {
        let _ = writeln!(
            s,
            "  skipped entries    {} (the first: {})",
            r.skipped_entries,
            r.first_skipped.as_deref().unwrap_or("")
        );
    }
    match r.ooms.first() {
        None => {
            let _ = writeln!(s, "  out of memory      never");
        }
        Some(o) => {
            let more = if r.stopped_early { "; the replay stopped there (--on-oom continue goes on)" } else { "" };
            let _ = writeln!(
                s,
                "  out of memory      {} time(s), first at entry {} (time_us {}): alloc of {}{}{more}\n                     {}",
                r.ooms.len(),
                o.trace_index,
                o.time_us,
                exact(o.requested_bytes),
                frames_text(snap, o.frames),
                o.message
            );
        }
    }
    if r.recorded_ooms > 0 {
        let _ = writeln!(s, "  recorded OOMs      {} in the snapshot's own trace", r.recorded_ooms);
    }
    let _ = writeln!(s, "  peak allocated     {}", exact(r.peak_allocated_bytes));
    let _ = writeln!(s, "  peak reserved      {}", exact(r.peak_reserved_bytes));
    let _ = writeln!(s, "  final allocated    {}", exact(r.final_allocated_bytes));
    let _ = writeln!(s, "  final reserved     {}", exact(r.final_reserved_bytes));
    let _ = writeln!(
        s,
        "  segment allocs     {} (cudaMalloc calls or mappings, after the placed memory)",
        r.segment_allocs
    );
    if !r.private_pools.is_empty() {
        let _ = writeln!(
            s,
            "  private pools      {:?}: CUDA graphs / MemPools, replayed in their own pools (by their final segments)",
            r.private_pools
        );
    }
    match &r.fidelity {
        None => {
            let _ = writeln!(
                s,
                "  fidelity           not checked (only for a whole-trace replay under the snapshot's own settings, unlimited)"
            );
        }
        Some(f) if f.agrees() => {
            let _ = writeln!(
                s,
                "  fidelity           agrees: {} segment events in the same order and sizes; the {} final segments, \
                 allocated and reserved totals match",
                f.recorded_segment_events, f.recorded_segments
            );
        }
        Some(f) => {
            let _ = writeln!(s, "  fidelity           DISAGREES with the recording:");
            if let Some(d) = &f.first_segment_disagreement {
                let show = |e: Option<(u64, snapshot::Action, u64)>| match e {
                    None => "nothing".to_owned(),
                    Some((i, a, size)) => format!("{} of {} at entry {i}", a.as_str(), exact(size)),
                };
                let _ = writeln!(
                    s,
                    "    segment event #{}: recorded {}, replayed {}",
                    d.position,
                    show(d.recorded),
                    show(d.replayed)
                );
            }
            if let Some(m) = &f.first_misplaced_alloc {
                let show = |p: Option<snapshot::Placement>| match p {
                    None => "in memory placed before the trace".to_owned(),
                    Some(p) => {
                        format!("at offset {} of segment #{} ({})", p.offset, p.segment, format_bytes(p.segment_bytes))
                    }
                };
                let _ = writeln!(
                    s,
                    "    first misplaced allocation: entry {}, {}: recorded {}, replayed {}",
                    m.trace_index,
                    exact(m.requested_bytes),
                    show(Some(m.recorded)),
                    show(m.replayed)
                );
            }
            if let Some(d) = &f.final_segments_disagreement {
                let _ = writeln!(s, "    final segments: {d}");
            }
            if f.recorded_allocated_bytes != f.replayed_allocated_bytes
                || f.recorded_reserved_bytes != f.replayed_reserved_bytes
            {
                let _ = writeln!(
                    s,
                    "    totals: recorded {} allocated / {} reserved, replayed {} / {}",
                    exact(f.recorded_allocated_bytes),
                    exact(f.recorded_reserved_bytes),
                    exact(f.replayed_allocated_bytes),
                    exact(f.replayed_reserved_bytes)
                );
            }
        }
    }
    for (what, path) in [("snapshot pickle", &args.export_snapshot), ("Chrome trace", &args.chrome_trace)] {
        if let Some(p) = path {
            let _ = writeln!(s, "  wrote              {} ({what})", p.display());
        }
    }
    s
}
