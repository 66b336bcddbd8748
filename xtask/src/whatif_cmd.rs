//! `cargo xtask whatif`: a PyTorch memory snapshot replayed under other
//! allocator settings and capacities, the recommendation, and who holds memory
//! at the allocated peak; a terminal table or JSON; with `--report DIR` also the
//! offline HTML page (the memory under each setting, the figures, the recommendation).

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_reports::replay_page::{self, Fact, WhatifPage, WhatifSetting};
use vramlab_snapshot::{
    self as snapshot, PeakHolder, SWEEP_GRID, Snapshot, SnapshotReplayOptions, WhatIf, peak_holders, recommend,
    what_if, what_if_timelines,
};

use crate::cli::WhatifArgs;
use crate::replay_cmd::write_stdout;
use vramlab_reports::units::fmt_bytes;

pub fn run(args: &WhatifArgs) -> anyhow::Result<u8> {
    if !crate::replay_cmd::report_dir_ok(args.report.as_deref()) {
        return Ok(crate::replay_cmd::BAD_REPORT_DIR);
    }
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
    let (results, timelines) = if args.report.is_some() {
        let both = what_if_timelines(&snap, &base, &configs).with_context(|| format!("cannot replay {name}"))?;
        both.into_iter().unzip()
    } else {
        (what_if(&snap, &base, &configs).with_context(|| format!("cannot replay {name}"))?, Vec::new())
    };
    let best = if args.sweep || configs.len() > 1 { recommend(&results) } else { None };
    let mut written = None;
    if let Some(dir) = &args.report {
        let page = WhatifPage {
            source: name.clone(),
            unit: "trace entries".into(),
            facts: vec![
                Fact::new("device", results[0].replay.device.to_string()),
                Fact::new("trace entries", results[0].replay.entries.to_string()),
                Fact::new("simulated device", args.capacity.map_or_else(|| "unlimited".to_owned(), fmt_bytes)),
                Fact::new("settings tried", results.len().to_string()),
            ],
            settings: results
                .iter()
                .zip(&timelines)
                .enumerate()
                .map(|(i, (w, t))| {
                    let r = &w.replay;
                    WhatifSetting {
                        name: conf_name(w),
                        recommended: Some(i) == best,
                        peak_reserved_bytes: r.peak_reserved_bytes,
                        peak_allocated_bytes: r.peak_allocated_bytes,
                        fragmentation_at_peak_bytes: r.fragmentation_at_peak_bytes,
                        largest_free_block_at_peak_bytes: r.largest_free_block_at_peak_bytes,
                        segment_allocs: r.segment_allocs,
                        oom: r.ooms.first().map(oom_text),
                        timeline: t,
                    }
                })
                .collect(),
            recommendation: recommendation(args, &results, best),
        };
        let files = replay_page::write_whatif_report(dir, &page)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        written = Some(files.index_html);
    }
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
        let mut text = text(&name, &snap, args, &results, best, (peak_index, &holders));
        if let Some(index) = &written {
            text += &format!("\nreport: {}\n", index.display());
        }
        text.into_bytes()
    };
    write_stdout(&out).map(|()| 0)
}

fn oom_text(o: &snapshot::ReplayOom) -> String {
    format!("at entry {}: alloc of {}", o.trace_index, fmt_bytes(o.requested_bytes))
}

/// The recommendation, a headline then its reasons; empty when there is nothing to recommend.
fn recommendation(args: &WhatifArgs, results: &[WhatIf], best: Option<usize>) -> Vec<String> {
    let r0 = &results[0].replay;
    let capacity = args.capacity.map_or_else(|| "unlimited".to_owned(), fmt_bytes);
    match best.map(|i| &results[i]) {
        Some(b) if args.sweep || results.len() > 1 => {
            let conf =
                if b.alloc_conf.is_empty() { "(unset: PyTorch's defaults)".to_owned() } else { b.alloc_conf.clone() };
            let head = format!("Recommended: PYTORCH_CUDA_ALLOC_CONF={conf}");
            let rb = &b.replay;
            let why = if b.recorded {
                "the recorded settings are already the best of those tried".to_owned()
            } else if r0.ooms.is_empty() {
                let saved = r0.peak_reserved_bytes.saturating_sub(rb.peak_reserved_bytes);
                format!(
                    "peak reserved {} instead of {}: {} ({:.1}%) less than the recorded settings; {} cudaMalloc calls instead of {}",
                    fmt_bytes(rb.peak_reserved_bytes),
                    fmt_bytes(r0.peak_reserved_bytes),
                    fmt_bytes(saved),
                    percent(saved, r0.peak_reserved_bytes),
                    rb.segment_allocs,
                    r0.segment_allocs
                )
            } else {
                let spare = args.capacity.map(|c| c.saturating_sub(rb.peak_reserved_bytes)).unwrap_or(0);
                format!(
                    "fits where the recorded settings do not: peak reserved {}, {} to spare; {} cudaMalloc calls",
                    fmt_bytes(rb.peak_reserved_bytes),
                    fmt_bytes(spare),
                    rb.segment_allocs
                )
            };
            vec![head, why]
        }
        None if results.len() > 1 => vec![format!("No setting tried fits in {capacity}.")],
        _ => Vec::new(),
    }
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
    let capacity = args.capacity.map_or_else(|| "unlimited".to_owned(), fmt_bytes);
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
        let oom = r.ooms.first().map_or_else(|| "no".to_owned(), oom_text);
        let mark = if Some(i) == best { " <- recommended" } else { "" };
        let _ = writeln!(
            s,
            "  {:width$}  {:>13}  {:>14}  {:>23}  {:>10}  {oom}{mark}",
            conf_name(w),
            fmt_bytes(r.peak_reserved_bytes),
            fmt_bytes(r.peak_allocated_bytes),
            format!("{} ({})", fmt_bytes(r.fragmentation_at_peak_bytes), fmt_bytes(r.largest_free_block_at_peak_bytes)),
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
    if let Some((head, why)) = recommendation(args, results, best).split_first() {
        let _ = writeln!(s, "\n{head}");
        for line in why {
            let _ = writeln!(s, "  {line}");
        }
    }
    let total: u64 = holders.iter().map(|h| h.bytes).sum();
    let at = peak_index.map_or_else(|| "before the first entry".to_owned(), |i| format!("after entry {i}"));
    let _ = writeln!(
        s,
        "\nWho holds memory at the recording's allocated peak ({at}; requested bytes, {} in all):",
        fmt_bytes(total)
    );
    let _ = writeln!(s, "  {:>12}  {:>6}  {:>7}  top frame", "bytes", "share", "allocs");
    for h in holders.iter().take(args.top) {
        let _ = writeln!(
            s,
            "  {:>12}  {:>5.1}%  {:>7}  {}",
            fmt_bytes(h.bytes),
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
