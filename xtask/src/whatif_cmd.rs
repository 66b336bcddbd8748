//! `cargo xtask whatif`: a PyTorch memory snapshot replayed under other
//! allocator settings and capacities, the recommendation, and who holds memory
//! at the allocated peak; a terminal table or JSON.

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::snapshot::{
    self, PeakHolder, SWEEP_GRID, Snapshot, SnapshotReplayOptions, WhatIf, peak_holders, recommend, what_if,
};

use crate::cli::WhatifArgs;
use crate::replay_cmd::write_stdout;
use crate::size::format_bytes;

pub fn run(args: &WhatifArgs) -> anyhow::Result<()> {
    let name = args.file.display().to_string();
    let file = File::open(&args.file).with_context(|| format!("cannot open {name}"))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        bail!("{name} is a directory, not a snapshot file");
    }
    let snap = snapshot::read_snapshot(BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("{name} is not a readable PyTorch memory snapshot"))?;
    let base = SnapshotReplayOptions {
        device: args.device,
        from_us: args.from_us,
        to_us: args.to_us,
        capacity_bytes: args.capacity,
        ..Default::default()
    };
    let mut configs: Vec<Option<AllocatorConfig>> = vec![None];
    configs.extend(args.alloc_conf.iter().cloned().map(Some));
    if args.sweep {
        for conf in SWEEP_GRID {
            let config = AllocatorConfig::parse(conf).with_context(|| format!("the sweep's setting '{conf}'"))?;
            configs.push(Some(config));
        }
    }
    let results = what_if(&snap, &base, &configs).with_context(|| format!("cannot replay {name}"))?;
    let best = if args.sweep || configs.len() > 1 { recommend(&results) } else { None };
    let recorded = &results[0];
    let (peak_index, holders) = peak_holders(&snap, recorded.replay.device);
    let out = if args.json {
        let json = Json {
            snapshot: &name,
            device: recorded.replay.device,
            capacity_bytes: args.capacity,
            results: &results,
            recommended: best.map(|i| results[i].alloc_conf.as_str()),
            peak_index,
            peak_holders: &holders[..holders.len().min(args.top)],
        };
        let mut v = serde_json::to_vec_pretty(&json).context("cannot serialize the report")?;
        v.push(b'\n');
        v
    } else {
        text(&name, &snap, args, &results, best, (peak_index, &holders)).into_bytes()
    };
    write_stdout(&out)
}

#[derive(Serialize)]
struct Json<'a> {
    snapshot: &'a str,
    device: usize,
    capacity_bytes: Option<u64>,
    results: &'a [WhatIf],
    recommended: Option<&'a str>,
    /// The trace entry after which the recording's live requested bytes peak.
    peak_index: Option<u64>,
    peak_holders: &'a [PeakHolder],
}

fn conf_name(w: &WhatIf) -> String {
    let conf = if w.alloc_conf.is_empty() { "PyTorch defaults" } else { &w.alloc_conf };
    if w.recorded { format!("recorded: {conf}") } else { conf.to_owned() }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

fn text(
    name: &str,
    snap: &Snapshot,
    args: &WhatifArgs,
    results: &[WhatIf],
    best: Option<usize>,
    (peak_index, holders): (Option<u64>, &[PeakHolder]),
) -> String {
    let mut s = String::new();
    let r0 = &results[0].replay;
    let capacity = args.capacity.map_or_else(|| "unlimited".to_owned(), format_bytes);
    let _ = writeln!(
        s,
        "vramlab what-if of {name}: device {}, {} trace entries, capacity {capacity}",
        r0.device, r0.entries
    );
    let width = results.iter().map(|w| conf_name(w).len()).max().unwrap_or(10).max(10);
    let _ = writeln!(
        s,
        "\n  {:width$}  {:>13}  {:>14}  {:>23}  {:>10}  out of memory",
        "setting", "peak reserved", "peak allocated", "free at peak (largest)", "cudaMalloc"
    );
    for (i, w) in results.iter().enumerate() {
        let r = &w.replay;
        let oom = match r.ooms.first() {
            None => "no".to_owned(),
            Some(o) => format!("at entry {}: alloc of {}", o.trace_index, format_bytes(o.requested_bytes)),
        };
        let mark = if Some(i) == best { " <- recommended" } else { "" };
        let _ = writeln!(
            s,
            "  {:width$}  {:>13}  {:>14}  {:>23}  {:>10}  {oom}{mark}",
            conf_name(w),
            format_bytes(r.peak_reserved_bytes),
            format_bytes(r.peak_allocated_bytes),
            format!(
                "{} ({})",
                format_bytes(r.fragmentation_at_peak_bytes),
                format_bytes(r.largest_free_block_at_peak_bytes)
            ),
            r.segment_allocs,
        );
    }
    if let Some(o) = r0.ooms.first() {
        let frame = snap.frames.stack(o.frames).next().map(|f| format!(" ({})", f.short())).unwrap_or_default();
        let _ = writeln!(
            s,
            "\nThe recorded settings run out of memory at entry {} (time_us {}){frame}:\n  {}",
            o.trace_index, o.time_us, o.message
        );
    }
    match best.map(|i| &results[i]) {
        Some(b) if args.sweep || results.len() > 1 => {
            let conf =
                if b.alloc_conf.is_empty() { "(unset: PyTorch's defaults)".to_owned() } else { b.alloc_conf.clone() };
            let _ = writeln!(s, "\nRecommended: PYTORCH_CUDA_ALLOC_CONF={conf}");
            let rb = &b.replay;
            if b.recorded {
                let _ = writeln!(s, "  the recorded settings are already the best of those tried");
            } else if r0.ooms.is_empty() {
                let saved = r0.peak_reserved_bytes.saturating_sub(rb.peak_reserved_bytes);
                let _ = writeln!(
                    s,
                    "  peak reserved {} instead of {}: {} ({:.1}%) less than the recorded settings; {} cudaMalloc calls instead of {}",
                    format_bytes(rb.peak_reserved_bytes),
                    format_bytes(r0.peak_reserved_bytes),
                    format_bytes(saved),
                    percent(saved, r0.peak_reserved_bytes),
                    rb.segment_allocs,
                    r0.segment_allocs
                );
            } else {
                let spare = args.capacity.map(|c| c.saturating_sub(rb.peak_reserved_bytes)).unwrap_or(0);
                let _ = writeln!(
                    s,
                    "  fits where the recorded settings do not: peak reserved {}, {} to spare; {} cudaMalloc calls",
                    format_bytes(rb.peak_reserved_bytes),
                    format_bytes(spare),
                    rb.segment_allocs
                );
            }
        }
        None if results.len() > 1 => {
            let _ = writeln!(s, "\nNo setting tried fits in {capacity}.");
        }
        _ => {}
    }
    let total: u64 = holders.iter().map(|h| h.bytes).sum();
    let at = peak_index.map_or_else(|| "before the first entry".to_owned(), |i| format!("after entry {i}"));
    let _ = writeln!(
        s,
        "\nWho holds memory at the recording's allocated peak ({at}; requested bytes, {} in all):",
        format_bytes(total)
    );
    let _ = writeln!(s, "  {:>12}  {:>6}  {:>7}  top frame", "bytes", "share", "allocs");
    for h in holders.iter().take(args.top) {
        let _ = writeln!(
            s,
            "  {:>12}  {:>5.1}%  {:>7}  {}",
            format_bytes(h.bytes),
            percent(h.bytes, total),
            h.allocations,
            h.frame
        );
    }
    if holders.len() > args.top {
        let _ = writeln!(s, "  … and {} more frames (--top N shows more)", holders.len() - args.top);
    }
    s
}
