//! `cargo xtask whatif`: a PyTorch memory snapshot replayed under other
//! allocator settings and capacities, the recommendation, and who holds memory
//! at the allocated peak; a terminal table or JSON; with `--report DIR` also the
//! offline HTML page (the memory under each setting, the figures, the recommendation).

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;

use anyhow::{Context, bail};
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::{AllocatorConfig, format_size};
use vramlab_reports::replay_page::{self, Fact, WhatifPage, WhatifSetting};
use vramlab_snapshot::{
    self as snapshot, Attribution, Estimate, LimitKind, Point, PointKind, SMALLER_BATCH_MODEL, SWEEP_GRID,
    SmallerBatch, Snapshot, SnapshotReplayOptions, WhatIf, attribute, recommend, requested_peak_index, what_if,
    what_if_timelines,
};

use crate::cli::WhatifArgs;
use crate::output::{BAD_REPORT_DIR, report_dir_ok, write_stdout};

pub fn run(args: &WhatifArgs) -> anyhow::Result<u8> {
    if !args.more.is_empty() {
        let (out, code) = run_many(args, None)?;
        return write_stdout(&out).map(|()| code);
    }
    if !report_dir_ok(args.report.as_deref()) {
        return Ok(BAD_REPORT_DIR);
    }
    let name = args.file.display().to_string();
    let file = File::open(&args.file).with_context(|| format!("cannot open {name}"))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        bail!("{name} is a directory, not a snapshot file");
    }
    let snap = snapshot::read_snapshot(BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("{name} is not a readable PyTorch memory snapshot"))?;
    let (out, code) = output(args, &name, snap)?;
    write_stdout(&out).map(|()| code)
}

/// What `whatif` prints for `snap` (read from `name`) and its exit status; with
/// `--report`, the page written first. The command and `crate::api` share it.
pub(crate) fn output(args: &WhatifArgs, name: &str, snap: Snapshot) -> anyhow::Result<(Vec<u8>, u8)> {
    // A snapshot of several devices, none picked: a row per device, as for several files.
    if args.window.device.is_none() && args.report.is_none() && devices_with_entries(&snap).len() > 1 {
        return run_many(args, Some(snap));
    }
    let mut a = analyse(args, name, &snap, args.report.is_some())?;
    let stats_note = crate::snapshot_cmd::check_stats_beside(&args.file, &mut a.results[0].replay);
    let written = match &args.report {
        Some(dir) => Some(write_page(dir, args, name, &a)?),
        None => None,
    };
    let Analysis { results, best, batch, attribution, estimate, .. } = a;
    let recorded = &results[0];
    let out = if args.json {
        let mut attribution = attribution;
        for a in &mut attribution {
            a.truncate(args.top);
        }
        let json = Json {
            snapshot: name,
            device: recorded.replay.device,
            capacity_bytes: args.capacity_bytes(),
            results: &results,
            recommended: best.map(|i| results[i].alloc_conf.as_str()),
            peak_index: attribution.first().and_then(|a| a.trace_index),
            attribution: &attribution,
            smaller_batch: batch.as_ref(),
            estimate: estimate.as_ref(),
        };
        let mut v = serde_json::to_vec_pretty(&json).context("cannot serialize the report")?;
        v.push(b'\n');
        v
    } else {
        let mut text = text(name, &snap, args, &results, best, &attribution);
        text += &fidelity_text(&results[0], stats_note.as_deref());
        if let Some(b) = &batch {
            text.push('\n');
            for line in smaller_batch_lines(b) {
                text += &line;
                text.push('\n');
            }
        }
        if let Some(index) = &written {
            text += &format!("\nreport: {}\n", index.display());
        }
        text.into_bytes()
    };
    Ok((out, 0))
}

/// The recorded setting's check against the recording, when it has one:
/// whether it agrees and PyTorch's `memory_stats()` key by key (`note`: why
/// a stats file beside the snapshot was not compared).
fn fidelity_text(recorded: &WhatIf, note: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(f) = &recorded.replay.fidelity {
        let verdict = if f.agrees() { "agrees with" } else { "DISAGREES with (see `replay`)" };
        let _ = writeln!(s, "\n  the recorded setting's replay {verdict} the recording");
        for line in f.memory_stats.iter().flat_map(vramlab_reports::replay_doc::memory_stats_lines) {
            let _ = writeln!(s, "    {line}");
        }
    }
    if let Some(note) = note {
        let _ = writeln!(s, "  memory_stats: {note}");
    }
    s
}

/// A snapshot under every setting: what the terminal, JSON and page show.
pub(crate) struct Analysis {
    pub results: Vec<WhatIf>,
    /// Each setting's memory over the trace, when asked for (a page).
    pub timelines: Vec<vramlab_replay::timeline::ReplayTimeline>,
    pub best: Option<usize>,
    /// At a recorded OOM: would a smaller batch have fitted (a model)?
    pub batch: Option<SmallerBatch>,
    pub attribution: Vec<Attribution>,
    /// The snapshot is an estimate (captured with no GPU).
    pub estimate: Option<Estimate>,
}

/// Replays `snap` under every setting of `args` (the recorded first).
pub(crate) fn analyse(args: &WhatifArgs, name: &str, snap: &Snapshot, timelines: bool) -> anyhow::Result<Analysis> {
    let base = base_options(args, args.window.device);
    let configs = configs(args)?;
    let (results, timelines) = if timelines {
        let both = what_if_timelines(snap, &base, &configs).with_context(|| format!("cannot replay {name}"))?;
        both.into_iter().unzip()
    } else {
        (what_if(snap, &base, &configs).with_context(|| format!("cannot replay {name}"))?, Vec::new())
    };
    let best = if args.sweep || configs.len() > 1 { recommend(&results) } else { None };
    let batch = if results[0].avoids_recorded_oom.is_some() {
        let base = SnapshotReplayOptions { device: Some(results[0].replay.device), ..base.clone() };
        Some(snapshot::smaller_batch(snap, &base).with_context(|| format!("cannot replay {name} at a smaller batch"))?)
    } else {
        None
    };
    let attribution = holders(snap, &results[0], args.top.max(vramlab_reports::replay_doc::ATTRIBUTION_ROWS));
    Ok(Analysis { results, timelines, best, batch, attribution, estimate: snap.estimate.clone() })
}

/// The what-if page of an analysis made with timelines, into `dir`; its index's path.
pub(crate) fn write_page(
    dir: &std::path::Path,
    args: &WhatifArgs,
    name: &str,
    a: &Analysis,
) -> anyhow::Result<std::path::PathBuf> {
    let results = &a.results;
    let page = WhatifPage {
        estimate: a.estimate.as_ref().map(vramlab_reports::replay_doc::estimate_lines),
        source: name.to_owned(),
        unit: "trace entries".into(),
        facts: vec![
            Fact::new("device", results[0].replay.device.to_string()),
            Fact::new("trace entries", results[0].replay.entries.to_string()),
            match limit_words(args, &results[0]) {
                Some(limit) => Fact::new("memory limit", limit),
                None => Fact::new("simulated device", capacity_text(args, &results[0])),
            },
            Fact::new("settings tried", results.len().to_string()),
        ]
        .into_iter()
        .chain(a.batch.iter().map(|b| {
            let text = smaller_batch_lines(b).join(" ");
            Fact::new("smaller batch at the recorded OOM", text.trim_start_matches("smaller batch: ").to_owned())
        }))
        .collect(),
        settings: results
            .iter()
            .zip(&a.timelines)
            .enumerate()
            .map(|(i, (w, t))| {
                let r = &w.replay;
                WhatifSetting {
                    name: conf_name(w),
                    recommended: Some(i) == a.best,
                    peak_reserved_bytes: r.peak_reserved_bytes,
                    peak_allocated_bytes: r.peak_allocated_bytes,
                    fragmentation_at_peak_bytes: r.fragmentation_at_peak_bytes,
                    largest_free_block_at_peak_bytes: r.largest_free_block_at_peak_bytes,
                    segment_allocs: r.segment_allocs,
                    oom: failure_text(w),
                    recorded_oom: recorded_oom_text(w),
                    timeline: t,
                }
            })
            .collect(),
        recommendation: recommendation(args, results, a.best),
        attribution: &a.attribution,
        capacity_bytes: results[0].replay.memory_limit_bytes.or(results[0].replay.capacity_bytes),
        limit: limit_words(args, &results[0]),
        limit_label: results[0].replay.capacity_inferred.as_ref().filter(|_| args.capacity_bytes().is_none()).map(
            |c| match c.kind {
                LimitKind::Fraction => {
                    format!(
                        "limit {} (inferred: in [{}, {}))",
                        fmt_bytes(c.bytes),
                        fmt_bytes(c.at_least),
                        fmt_bytes(c.below)
                    )
                }
                LimitKind::Device => format!("capacity {} (inferred)", fmt_bytes(c.bytes)),
            },
        ),
        releases: results[0].replay.releases.runs.gt(&0).then(|| results[0].replay.releases.describe()),
    };
    let files = replay_page::write_whatif_report(dir, &page)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    Ok(files.index_html)
}

/// Who holds the memory at the recording's allocated peak (its live requested
/// bytes, the same under every setting) and, when the recorded settings run
/// out of memory, at their first failure; `rows` call paths each.
fn holders(snap: &Snapshot, recorded: &WhatIf, rows: usize) -> Vec<Attribution> {
    let device = recorded.replay.device;
    let mut points = vec![Point { kind: PointKind::AllocatedPeak, trace_index: requested_peak_index(snap, device) }];
    if let Some((index, _, _)) = recorded.first_failure() {
        points.push(Point { kind: PointKind::OutOfMemory, trace_index: Some(index) });
    }
    let mut out = attribute(snap, device, &points);
    for a in &mut out {
        a.truncate(rows);
    }
    out
}

/// The first request a setting could not serve, for its row.
fn failure_text(w: &WhatIf) -> Option<String> {
    w.first_failure().map(|(i, bytes, recorded)| {
        let what = if recorded { "the recorded failed request" } else { "alloc" };
        // PyTorch's message names the segment it tried, which rounding may make larger.
        let tried = w
            .replay
            .oom_requests
            .iter()
            .find(|o| o.trace_index == i)
            .and_then(|o| o.message.as_deref())
            .or_else(|| w.replay.ooms.iter().find(|o| o.trace_index == i).map(|o| o.message.as_str()))
            .and_then(tried_to_allocate)
            .filter(|t| *t != format_size(bytes))
            .map(|t| format!(" (tried to allocate {t})"))
            .unwrap_or_default();
        format!("at entry {i}: {what} of {}{tried}", fmt_bytes(bytes))
    })
}

/// "Tried to allocate X." of an out-of-memory message: the X.
fn tried_to_allocate(message: &str) -> Option<String> {
    let rest = &message[message.find("Tried to allocate ")? + "Tried to allocate ".len()..];
    Some(rest[..rest.find(". ")?].to_owned())
}

/// The simulated device, and where its capacity came from.
/// The limit the page names, where it was inferred: with the range the recording allows.
fn limit_words(args: &WhatifArgs, r0: &WhatIf) -> Option<String> {
    let c = r0.replay.capacity_inferred.as_ref().filter(|_| args.capacity_bytes().is_none())?;
    Some(match c.kind {
        LimitKind::Fraction => format!(
            "{} per-process limit, inferred from the recorded OOM at entry {}: the real limit lies in [{}, {}), and \
             the replay takes its lower end",
            fmt_bytes(r0.replay.memory_limit_bytes.unwrap_or(c.bytes)),
            c.entry,
            fmt_bytes(c.at_least),
            fmt_bytes(c.below)
        ),
        LimitKind::Device => {
            format!("{} of device memory, inferred from the recorded OOM at entry {}", fmt_bytes(c.bytes), c.entry)
        }
    })
}

fn capacity_text(args: &WhatifArgs, r0: &WhatIf) -> String {
    let r = &r0.replay;
    let mut s = match (args.capacity_bytes(), &r.capacity_inferred) {
        (Some(c), _) => fmt_bytes(c),
        (None, Some(c)) => format!(
            "{}, inferred from the recorded OOM at entry {} (no --capacity given)",
            fmt_bytes(r.memory_limit_bytes.unwrap_or(c.bytes)),
            c.entry
        ),
        (None, None) => "unlimited".to_owned(),
    };
    if let (Some(f), Some(limit)) = (args.fraction, r.memory_limit_bytes) {
        s += &format!(", memory fraction {f}: {} per process", fmt_bytes(limit));
    }
    s
}

/// Whether each recorded failed request was served under a setting, for its row.
pub(crate) fn recorded_oom_text(w: &WhatIf) -> String {
    let r = &w.replay;
    match w.avoids_recorded_oom {
        None => "-".to_owned(),
        Some(true) => {
            let spare = r.oom_requests.iter().filter_map(|o| o.spare_bytes).min().unwrap_or(0);
            format!("served, {} to spare", fmt_bytes(spare))
        }
        Some(false) => match r.oom_requests.iter().find(|o| !o.served) {
            Some(o) => format!("fails, {} short", fmt_bytes(o.short_bytes.unwrap_or(0))),
            None => "served, but an earlier request fails".to_owned(),
        },
    }
}

/// The smaller-batch answer at a recorded OOM, as lines: the answer, then
/// what it is (a model) and what was scaled.
pub(crate) fn smaller_batch_lines(answer: &SmallerBatch) -> Vec<String> {
    let SmallerBatch::Modelled {
        oom_entry,
        request_bytes,
        request_category,
        request_category_from,
        limit_bytes,
        live_bytes,
        scaled_live_bytes,
        trials,
        largest_fitting,
    } = answer
    else {
        let SmallerBatch::CannotTell { reason } = answer else { unreachable!("two variants") };
        return vec![format!("smaller batch: cannot be told: {reason}")];
    };
    let limit = fmt_bytes(*limit_bytes);
    let head = match largest_fitting {
        Some(b) if b.sixty_fourths == 64 => {
            format!("smaller batch: not needed: the recorded batch fits under the {limit} limit")
        }
        Some(b) => {
            let above = trials
                .iter()
                .filter(|t| t.sixty_fourths > b.sixty_fourths && !t.fits)
                .min_by_key(|t| t.sixty_fourths)
                .map(|t| match t.short_bytes {
                    Some(short) => format!("; {} is {} short", t.fraction_text(), fmt_bytes(short)),
                    None => match t.first_failure {
                        Some((i, bytes)) => {
                            format!("; {} fails at entry {i}, a request of {}", t.fraction_text(), fmt_bytes(bytes))
                        }
                        None => format!("; {} fails", t.fraction_text()),
                    },
                })
                .unwrap_or_default();
            format!(
                "smaller batch: yes, {} of the recorded batch fits: peak reserved {}, {} to spare under the {limit} limit{above}",
                b.fraction_text(),
                fmt_bytes(b.peak_reserved_bytes),
                fmt_bytes(b.headroom_bytes.unwrap_or(0)),
            )
        }
        None => {
            let least = trials.iter().map(|t| t.sixty_fourths).min().unwrap_or(64);
            let least = trials.iter().find(|t| t.sixty_fourths == least).map(|t| t.fraction_text()).unwrap_or_default();
            format!("smaller batch: no: not even {least} of the recorded batch fits under the {limit} limit")
        }
    };
    let request_was = match request_category_from {
        Some(i) => format!(
            "has no frames in the trace and was taken as the allocation before it (entry {i}): {}",
            request_category.name()
        ),
        None => format!("was {}", request_category.name()),
    };
    let share = if *live_bytes == 0 { 0.0 } else { *scaled_live_bytes as f64 * 100.0 / *live_bytes as f64 };
    vec![
        head,
        format!(
            "  ({SMALLER_BATCH_MODEL}. Of the {} live at the OOM, {} ({share:.0}%) was activations and temporaries; \
             the failed request at entry {oom_entry}, {}, {request_was}.)",
            fmt_bytes(*live_bytes),
            fmt_bytes(*scaled_live_bytes),
            fmt_bytes(*request_bytes),
        ),
    ]
}

/// The recommendation, a headline then its reasons; empty when there is nothing to recommend.
pub(crate) fn recommendation(args: &WhatifArgs, results: &[WhatIf], best: Option<usize>) -> Vec<String> {
    let r0 = &results[0].replay;
    let capacity = capacity_text(args, &results[0]);
    if results[0].avoids_recorded_oom.is_some() {
        return recorded_oom_recommendation(results, best, &capacity);
    }
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
                let spare = args.capacity_bytes().map(|c| c.saturating_sub(rb.peak_reserved_bytes)).unwrap_or(0);
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

/// The recommendation for a recording that ran out of memory: would a setting
/// have avoided the recorded OOM?
fn recorded_oom_recommendation(results: &[WhatIf], best: Option<usize>, capacity: &str) -> Vec<String> {
    let r0 = &results[0];
    let first = &r0.replay.oom_requests[0];
    let request = format!("the request of {} at entry {}", fmt_bytes(first.requested_bytes), first.trace_index);
    let recorded = if r0.avoids_recorded_oom == Some(true) {
        "the recorded settings serve it here too (the capacity is not the recorded one)".to_owned()
    } else {
        format!("the recorded settings fail it, as PyTorch did ({})", recorded_oom_text(r0))
    };
    let tried = results.len() > 1;
    match best.map(|i| &results[i]) {
        Some(b) if !b.recorded => {
            let conf = if b.alloc_conf.is_empty() { "(unset: PyTorch's defaults)" } else { &b.alloc_conf };
            vec![
                format!("Recommended: PYTORCH_CUDA_ALLOC_CONF={conf}"),
                format!(
                    "Would this setting have avoided the recorded OOM? Yes: {request} is {} under {capacity}; {recorded}",
                    recorded_oom_text(b)
                ),
                format!(
                    "peak reserved {}; {} cudaMalloc calls",
                    fmt_bytes(b.replay.peak_reserved_bytes),
                    b.replay.segment_allocs
                ),
            ]
        }
        Some(_) => vec![
            "Recommended: the recorded settings".to_owned(),
            format!("Would this setting have avoided the recorded OOM? Yes: {request} is served under {capacity}"),
        ],
        None if tried => vec![
            format!("No setting tried fits in {capacity}."),
            format!(
                "Would any setting tried have avoided the recorded OOM? No: {request} fails under every one; {recorded}"
            ),
        ],
        None => vec![format!("Would this setting have avoided the recorded OOM? No: {recorded}")],
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
    /// Who holds the memory there (and at the recorded settings' first
    /// out-of-memory), by the user's call path; `--top` rows each.
    attribution: &'a [Attribution],
    /// At a recorded OOM: would a smaller batch have fitted? A model (activation
    /// and temporary requests scaled; see `answer`).
    smaller_batch: Option<&'a SmallerBatch>,
    /// The snapshot is an estimate (captured with no GPU): what it assumed and
    /// modelled; `null` for a recording.
    estimate: Option<&'a Estimate>,
}

pub(crate) fn conf_name(w: &WhatIf) -> String {
    setting_name(w, "recorded")
}

/// A setting's name, the snapshot's own marked `own` ("recorded"; "the program's" for an estimate).
pub(crate) fn setting_name(w: &WhatIf, own: &str) -> String {
    let conf = if w.alloc_conf.is_empty() { "PyTorch defaults" } else { &w.alloc_conf };
    if w.recorded { format!("{own}: {conf}") } else { conf.to_owned() }
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
    attribution: &[Attribution],
) -> String {
    let mut s = String::new();
    let r0 = &results[0].replay;
    let capacity = capacity_text(args, &results[0]);
    let _ = writeln!(
        s,
        "vramlab what-if of {name}: device {}, {} trace entries, capacity {capacity}",
        r0.device, r0.entries
    );
    for line in snap.estimate.iter().flat_map(vramlab_reports::replay_doc::estimate_lines) {
        let _ = writeln!(s, "  {line}");
    }
    s += &settings_table(results, best, "recorded");
    let first_recorded = r0.oom_requests.iter().find(|o| !o.served);
    let first = match (r0.ooms.first(), first_recorded) {
        (Some(o), Some(q)) if q.trace_index < o.trace_index => None,
        (Some(o), _) => Some((o.trace_index, o.time_us, o.frames, o.message.as_str())),
        _ => None,
    }
    .or_else(|| first_recorded.map(|q| (q.trace_index, q.time_us, q.frames, q.message.as_deref().unwrap_or(""))));
    if let Some((index, time_us, frames, message)) = first {
        let frame = snap.frames.stack(frames).next().map(|f| format!(" ({})", f.short())).unwrap_or_default();
        let recorded = if first_recorded.is_some_and(|q| q.trace_index == index) { ", as recorded" } else { "" };
        let _ = writeln!(
            s,
            "\nThe recorded settings run out of memory at entry {index} (time_us {time_us}){frame}{recorded}:\n  {message}",
        );
    }
    if let Some(c) = &r0.capacity_inferred {
        let _ = writeln!(s, "\nCapacity: {}", c.describe());
    }
    if r0.releases.runs > 0 {
        let _ = writeln!(s, "Releases (recorded settings): {}", r0.releases.describe());
    }
    if let Some((head, why)) = recommendation(args, results, best).split_first() {
        let _ = writeln!(s, "\n{head}");
        for line in why {
            let _ = writeln!(s, "  {line}");
        }
    }
    for a in attribution {
        s.push('\n');
        s += &vramlab_reports::replay_doc::holders_text(a, args.top);
    }
    s
}

/// The table of settings: each one's peaks, fragmentation at the peak,
/// segment allocations and out-of-memory; the recommended one marked.
pub(crate) fn settings_table(results: &[WhatIf], best: Option<usize>, own: &str) -> String {
    let mut s = String::new();
    let r0 = &results[0].replay;
    let width = results.iter().map(|w| setting_name(w, own).len()).max().unwrap_or(10).max(10);
    let _ = writeln!(
        s,
        "\n  {:width$}  {:>13}  {:>14}  {:>23}  {:>10}  {}out of memory",
        "setting",
        "peak reserved",
        "peak allocated",
        "free at peak (largest)",
        "cudaMalloc",
        if r0.oom_requests.is_empty() { String::new() } else { format!("{:28}  ", "recorded OOM request") },
    );
    for (i, w) in results.iter().enumerate() {
        let r = &w.replay;
        let oom = failure_text(w).unwrap_or_else(|| "no".to_owned());
        let recorded_oom =
            if r0.oom_requests.is_empty() { String::new() } else { format!("{:28}  ", recorded_oom_text(w)) };
        let mark = if Some(i) == best { " <- recommended" } else { "" };
        let _ = writeln!(
            s,
            "  {:width$}  {:>13}  {:>14}  {:>23}  {:>10}  {recorded_oom}{oom}{mark}",
            setting_name(w, own),
            fmt_bytes(r.peak_reserved_bytes),
            fmt_bytes(r.peak_allocated_bytes),
            format!("{} ({})", fmt_bytes(r.fragmentation_at_peak_bytes), fmt_bytes(r.largest_free_block_at_peak_bytes)),
            r.segment_allocs,
        );
    }
    s
}

/// The replay options every setting shares, for `device`.
pub(crate) fn base_options(args: &WhatifArgs, device: Option<usize>) -> SnapshotReplayOptions {
    SnapshotReplayOptions {
        device,
        from_us: args.window.from_us,
        to_us: args.window.to_us,
        capacity_bytes: args.capacity_bytes(),
        memory_fraction: args.fraction,
        ..Default::default()
    }
}

/// The settings to try: the recorded ones, each `--alloc-conf`, the sweep's grid.
pub(crate) fn configs(args: &WhatifArgs) -> anyhow::Result<Vec<Option<AllocatorConfig>>> {
    let mut configs: Vec<Option<AllocatorConfig>> = vec![None];
    configs.extend(args.alloc_conf.iter().cloned().map(Some));
    if args.sweep {
        for conf in SWEEP_GRID {
            let config = AllocatorConfig::parse(conf).with_context(|| format!("the sweep's setting '{conf}'"))?;
            configs.push(Some(config));
        }
    }
    Ok(configs)
}

fn devices_with_entries(snap: &Snapshot) -> Vec<usize> {
    (0..snap.device_traces.len()).filter(|&d| !snap.device_traces[d].is_empty()).collect()
}

/// One rank and device under every setting tried.
#[derive(Debug, Serialize)]
struct RankWhatif {
    file: String,
    /// From a `-rank<R>-` in the file name.
    rank: Option<String>,
    device: usize,
    /// The memory it may reserve (the capacity given or the per-process limit, else inferred from a recorded OOM).
    limit_bytes: Option<u64>,
    results: Vec<WhatIf>,
    /// The setting recommended for this rank (`PYTORCH_CUDA_ALLOC_CONF`; "" is PyTorch's defaults).
    recommended: Option<String>,
    #[serde(skip)]
    best: Option<usize>,
    /// The recommendation in words: a headline, then its reasons.
    recommendation: Vec<String>,
    /// At a recorded OOM: would a smaller batch have fitted? A model.
    smaller_batch: Option<SmallerBatch>,
    /// Why this file or device could not be replayed (the other rows stand).
    error: Option<String>,
}

impl RankWhatif {
    fn label(&self) -> String {
        match &self.rank {
            Some(rank) => format!("rank {rank}, device {}", self.device),
            None => format!("{}, device {}", self.file, self.device),
        }
    }

    /// Peak reserved under the recorded settings over the limit.
    fn share_of_limit(&self) -> Option<f64> {
        let limit = self.limit_bytes.filter(|&l| l > 0)?;
        Some(self.results.first()?.replay.peak_reserved_bytes as f64 / limit as f64)
    }
}

/// `whatif A B …` (or one snapshot of several devices): the report.
#[derive(Debug, Serialize)]
struct RanksWhatif {
    rows: Vec<RankWhatif>,
    /// The row whose peak reserved memory (recorded settings) is the largest share of its limit.
    closest_to_capacity: Option<usize>,
}

/// Every rank and device of every file (or of `loaded`, the one file given)
/// under every setting: what to print, and exit 1 when a file could not be read or replayed.
fn run_many(args: &WhatifArgs, loaded: Option<Snapshot>) -> anyhow::Result<(Vec<u8>, u8)> {
    if args.report.is_some() {
        bail!(
            "--report applies to one file and device; with several, write each rank's page on its own \
             (`whatif FILE --device D --report DIR`)"
        );
    }
    let configs = configs(args)?;
    let mut rows = Vec::new();
    let files: Vec<&std::path::PathBuf> = std::iter::once(&args.file).chain(&args.more).collect();
    let mut loaded = loaded;
    for path in files {
        let name = path.display().to_string();
        let row = |device, error: String| RankWhatif {
            file: name.clone(),
            rank: crate::ranks_cmd::rank_of(path),
            device,
            limit_bytes: None,
            results: Vec::new(),
            recommended: None,
            best: None,
            recommendation: Vec::new(),
            smaller_batch: None,
            error: Some(error),
        };
        let snap = match loaded.take() {
            Some(s) => s,
            None => {
                if path.as_os_str() == "-" {
                    bail!("several files are read from their paths, not standard input");
                }
                let read = File::open(path).map_err(|e| format!("cannot open it: {e}")).and_then(|f| {
                    snapshot::read_snapshot(BufReader::with_capacity(1 << 20, f))
                        .map_err(|e| format!("not a readable PyTorch memory snapshot (cut short?): {e}"))
                });
                match read {
                    Ok(s) => s,
                    Err(e) => {
                        rows.push(row(args.window.device.unwrap_or(0), e));
                        continue;
                    }
                }
            }
        };
        let devices = match args.window.device {
            Some(d) => vec![d],
            None => devices_with_entries(&snap),
        };
        if devices.is_empty() {
            rows.push(row(0, "no device has trace entries".into()));
        }
        for device in devices {
            let base = base_options(args, Some(device));
            let results = match what_if(&snap, &base, &configs) {
                Ok(r) => r,
                Err(e) => {
                    rows.push(row(device, format!("cannot replay device {device}: {e}")));
                    continue;
                }
            };
            let best = if configs.len() > 1 { recommend(&results) } else { None };
            let smaller_batch = if results[0].avoids_recorded_oom.is_some() {
                snapshot::smaller_batch(&snap, &base).ok()
            } else {
                None
            };
            let r0 = &results[0].replay;
            rows.push(RankWhatif {
                limit_bytes: r0.memory_limit_bytes.or(r0.capacity_bytes),
                recommended: best.map(|i| results[i].alloc_conf.clone()),
                best,
                recommendation: recommendation(args, &results, best),
                smaller_batch,
                error: None,
                results,
                ..row(device, String::new())
            });
        }
    }
    let closest_to_capacity = (0..rows.len())
        .filter(|&i| rows[i].error.is_none() && rows[i].share_of_limit().is_some())
        .max_by(|&a, &b| rows[a].share_of_limit().unwrap_or(0.0).total_cmp(&rows[b].share_of_limit().unwrap_or(0.0)));
    let doc = RanksWhatif { rows, closest_to_capacity };
    let out = if args.json {
        let mut v = serde_json::to_vec_pretty(&doc).context("cannot serialize the report")?;
        v.push(b'\n');
        v
    } else {
        many_text(&doc).into_bytes()
    };
    Ok((out, u8::from(doc.rows.iter().any(|r| r.error.is_some()))))
}

fn many_text(doc: &RanksWhatif) -> String {
    let mut s = format!("vramlab what-if of {} rank(s) and device(s)\n", doc.rows.len());
    let width = doc.rows.iter().flat_map(|r| r.results.iter().map(|w| conf_name(w).len())).max().unwrap_or(10).max(10);
    for r in &doc.rows {
        let file = if r.rank.is_some() { format!(" ({})", r.file) } else { String::new() };
        let _ = writeln!(s, "\n{}{file}", r.label());
        if let Some(e) = &r.error {
            let _ = writeln!(s, "  {e}");
            continue;
        }
        let limit = r.limit_bytes.map_or_else(|| "unlimited".to_owned(), fmt_bytes);
        let _ = writeln!(
            s,
            "  {:width$}  {:>13}  {:>14}  {:>10}  {:28}  out of memory  (limit {limit})",
            "setting", "peak reserved", "peak allocated", "cudaMalloc", "recorded OOM request"
        );
        for (k, w) in r.results.iter().enumerate() {
            let mark = if r.best == Some(k) { " <- recommended" } else { "" };
            let _ = writeln!(
                s,
                "  {:width$}  {:>13}  {:>14}  {:>10}  {:28}  {}{mark}",
                conf_name(w),
                fmt_bytes(w.replay.peak_reserved_bytes),
                fmt_bytes(w.replay.peak_allocated_bytes),
                w.replay.segment_allocs,
                recorded_oom_text(w),
                failure_text(w).unwrap_or_else(|| "no".to_owned()),
            );
        }
        for (k, line) in r.recommendation.iter().enumerate() {
            let _ = writeln!(s, "  {}{line}", if k == 0 { "" } else { "  " });
        }
        for line in r.smaller_batch.iter().flat_map(smaller_batch_lines) {
            let _ = writeln!(s, "  {line}");
        }
    }
    match doc.closest_to_capacity.map(|i| &doc.rows[i]) {
        Some(r) => {
            let limit = r.limit_bytes.unwrap_or(0);
            let peak = r.results[0].replay.peak_reserved_bytes;
            let _ = writeln!(
                s,
                "\nclosest to capacity {}: peak reserved {} of {} ({:.1}%)\n  under the recorded settings",
                r.label(),
                fmt_bytes(peak),
                fmt_bytes(limit),
                peak as f64 * 100.0 / limit.max(1) as f64,
            );
        }
        None => {
            let _ = writeln!(s, "\nclosest to capacity unknown: no --capacity given and no recorded OOM implies one");
        }
    }
    let _ =
        writeln!(s, "drill-down          whatif FILE --device D (one row's full what-if; --report DIR for its page)");
    s
}
