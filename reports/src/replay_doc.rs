//! The one report of `replay`: a versioned document ([`ReplayDoc`], schema
//! [`SCHEMA_VERSION`]) with the same key names for the same things whatever the
//! input — a vramlab JSON Lines trace or a PyTorch memory snapshot — built from
//! either replay's outcome. `--json` prints it; the terminal report and the
//! page's summary table are rendered from it ([`text`], [`page_facts`]), so the
//! three never disagree. Keys that a kind of input cannot fill are `null` (or
//! empty), never left out; README, "The replay report (`--json`)", lists them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_engine::alloc::OutOfMemoryError;
use vramlab_replay::timeline::ReplayTimeline;
use vramlab_replay::{OnOom, ReplayOptions, ReplayReport, TooLargeRecord};
use vramlab_snapshot::{
    Action, Attribution, CategorySource, Estimate, FidelityReport, InferredCapacity, LimitKind, LiveAtStart,
    MemoryStatsCheck, OomRequest, Placement, PointKind, PoolInference, ReleaseSummary, Snapshot, SnapshotReplay,
    SnapshotReplayOptions, UnderivableStat,
};

use crate::replay_page::{Answer, DocView, Fact, StatNote, answer_holders};

/// The document's version: raised whenever a key changes meaning or goes away.
/// Version 1 replaced the two shapes of earlier releases (`trace`/`snapshot`
/// became `input`, `events` `entries_replayed`, `current_*_bytes`
/// `final_*_bytes`, `final_memory_stats` `memory_stats`).
pub const SCHEMA_VERSION: u32 = 1;

/// How many out-of-memory events the terminal report lists one by one.
const OOMS_LISTED: usize = 10;

/// Call paths the document keeps per attributed point (the rest are counted).
pub const ATTRIBUTION_ROWS: usize = 25;
/// Call paths the terminal report lists per attributed point.
const ATTRIBUTION_ROWS_TEXT: usize = 10;

/// What was replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// vramlab's JSON Lines allocation trace.
    VramlabTrace,
    /// A PyTorch memory snapshot pickle.
    PytorchSnapshot,
}

/// One out-of-memory of the replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DocOom {
    /// 0-based index of the op (trace) or entry (snapshot) that failed.
    pub index: u64,
    /// 1-based line of the trace (traces only).
    pub line: Option<u64>,
    pub device: u32,
    /// The entry's `time_us` (snapshots only).
    pub time_us: Option<i64>,
    pub requested_bytes: u64,
    /// The innermost Python frame of the allocation (snapshots that recorded stacks).
    pub frame: Option<String>,
    /// The error's text, in PyTorch's words.
    pub message: String,
    /// The error's numbers (traces only).
    pub error: Option<OutOfMemoryError>,
    /// `memory_stats()` right after the failure (traces only).
    pub memory_stats: Option<BTreeMap<String, i64>>,
}

/// One device's figures at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DocDevice {
    pub device: u32,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub final_allocated_bytes: u64,
    pub final_reserved_bytes: u64,
    pub memory_stats: BTreeMap<String, i64>,
}

/// The replay report, for every input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayDoc {
    pub schema_version: u32,
    /// The file replayed (`<stdin>` for standard input).
    pub input: String,
    pub format: InputFormat,
    /// The pickle protocol (snapshots only).
    pub protocol: Option<u8>,
    /// The device the headline figures are of.
    pub device: u32,
    /// Whether that device was chosen as the one with the most entries (no `--device`).
    pub device_chosen: bool,
    /// Devices with at least one entry.
    pub devices_with_entries: u64,
    /// The settings replayed, canonical `PYTORCH_CUDA_ALLOC_CONF` syntax ("" = PyTorch's defaults).
    pub alloc_conf: String,
    /// Whether those are the snapshot's own `allocator_settings` (or its defaults).
    pub settings_from_snapshot: bool,
    /// The simulated device's memory; `null` is unlimited.
    pub capacity_bytes: Option<u64>,
    pub on_oom: OnOom,
    /// The time window (snapshots only).
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    /// Lines read (traces only; blank ones included).
    pub lines: Option<u64>,
    /// Ops (trace) or entries (snapshot) in the input; for a trace, those read;
    /// for a snapshot read from `--from-us` on, those from there.
    pub entries: u64,
    /// Entries before `--from-us`, dropped while the snapshot was read (never
    /// in memory): entry numbers count from the first one after them.
    pub entries_before_window: Option<u64>,
    /// Ops or entries replayed (in the window), including failed allocations.
    pub entries_replayed: u64,
    /// `alloc` and free entries among them (snapshots only).
    pub allocs: Option<u64>,
    pub frees: Option<u64>,
    /// Whether the replay ended at an out-of-memory before the end (`--on-oom stop`).
    pub stopped_early: bool,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub final_allocated_bytes: u64,
    pub final_reserved_bytes: u64,
    /// The entry after which allocated memory peaked (snapshots only).
    pub peak_allocated_index: Option<u64>,
    /// The line of the last `reset_peak` op, from which the peaks count (traces only).
    pub last_reset_peak_line: Option<u64>,
    /// Allocations live at the end (failed ones not counted).
    pub live_allocations: u64,
    /// Segment allocations (cudaMalloc calls or mappings) during the replay
    /// (snapshots only: after the memory placed before the first entry).
    pub segment_allocs: Option<u64>,
    /// The first out-of-memory events (at most 1000).
    pub ooms: Vec<DocOom>,
    /// Who holds the memory at the allocated peak and at each out-of-memory:
    /// the live blocks grouped by the call path of the user's own code, with
    /// categories (snapshots only; empty for a trace, which has no stacks; at
    /// most [`ATTRIBUTION_ROWS`] call paths each, the rest counted).
    pub attribution: Vec<Attribution>,
    /// Out-of-memory events beyond those, counted only.
    pub ooms_not_listed: u64,
    /// Requests of 1 EiB or more, refused before the allocator as PyTorch does.
    pub too_large: Vec<TooLargeRecord>,
    pub too_large_not_listed: u64,
    /// `oom` entries in the recording itself (snapshots only).
    pub recorded_ooms: Option<u64>,
    /// Each recorded failed request made again: served (with the memory to
    /// spare) or failed as recorded (with how much short) (snapshots only).
    pub oom_requests: Vec<OomRequest>,
    /// The capacity the recorded OOMs imply, when none was given, and why none
    /// could be inferred when it could not (snapshots only).
    pub capacity_inferred: Option<InferredCapacity>,
    pub capacity_not_inferred: Option<String>,
    /// The per-process limit in force (an inferred limit or `--fraction`).
    pub memory_limit_bytes: Option<u64>,
    /// The recording's releases of cached blocks and how each was replayed (snapshots only).
    pub releases: Option<ReleaseSummary>,
    /// Memory live when the recording began, placed before the first entry (snapshots only).
    pub live_at_start: Option<LiveAtStart>,
    /// Entries that made no sense and were skipped, and the first of them.
    pub skipped_entries: u64,
    pub first_skipped: Option<String>,
    /// Private pools (CUDA graphs, MemPools) replayed in their own pools.
    pub private_pools: Vec<(i64, i64)>,
    /// How each segment's pool was known (snapshots only).
    pub pool_inference: Option<PoolInference>,
    /// `record_stream` frees replayed in two steps, and those still waiting at
    /// the end (snapshots only).
    pub frees_deferred: Option<u64>,
    pub frees_pending_at_end: Option<u64>,
    /// The largest free block and reserved − allocated at the reserved peak (snapshots only).
    pub largest_free_block_at_peak_bytes: Option<u64>,
    pub fragmentation_at_peak_bytes: Option<u64>,
    /// `torch.cuda.memory_stats()` of the headline device at the end, keyed as PyTorch keys it.
    pub memory_stats: BTreeMap<String, i64>,
    /// The `memory_stats` keys the input cannot determine, each with its reason
    /// and whether the value is a lower bound; left out of every comparison.
    pub underivable_stats: Vec<UnderivableStat>,
    /// `torch.cuda.memory_summary()` at the end (traces only).
    pub summary: Option<String>,
    /// The check of the replay against the recording (snapshots replayed whole,
    /// under their own settings, on an unlimited device).
    pub fidelity: Option<FidelityReport>,
    /// Every device's figures (a trace's devices; a snapshot's replayed device).
    pub devices: Vec<DocDevice>,
    /// The snapshot is an estimate (`vramlab estimate`: captured with no GPU):
    /// the GPU and torch it assumed and the requests it modelled; `null` for a
    /// recording.
    pub estimate: Option<Estimate>,
}

/// The document of a trace replay.
pub fn from_trace(input: &str, opts: &ReplayOptions, r: &ReplayReport) -> ReplayDoc {
    ReplayDoc {
        schema_version: SCHEMA_VERSION,
        input: input.to_owned(),
        format: InputFormat::VramlabTrace,
        protocol: None,
        device: 0,
        device_chosen: false,
        devices_with_entries: r.devices.len() as u64,
        alloc_conf: opts.config.to_string(),
        settings_from_snapshot: false,
        capacity_bytes: opts.capacity_bytes,
        on_oom: opts.on_oom,
        from_us: None,
        to_us: None,
        lines: Some(r.lines),
        entries_before_window: None,
        entries: r.events,
        entries_replayed: r.events,
        allocs: None,
        frees: None,
        stopped_early: r.stopped_early,
        peak_allocated_bytes: r.peak_allocated_bytes,
        peak_reserved_bytes: r.peak_reserved_bytes,
        final_allocated_bytes: r.current_allocated_bytes,
        final_reserved_bytes: r.current_reserved_bytes,
        peak_allocated_index: None,
        last_reset_peak_line: r.last_reset_peak_line,
        live_allocations: r.live_allocations,
        segment_allocs: None,
        ooms: r
            .ooms
            .iter()
            .map(|o| DocOom {
                index: o.event_index,
                line: Some(o.line),
                device: o.device,
                time_us: None,
                requested_bytes: o.requested_bytes,
                frame: None,
                message: o.error.to_string(),
                error: Some(o.error.clone()),
                memory_stats: Some(o.memory_stats.clone()),
            })
            .collect(),
        ooms_not_listed: r.ooms_not_recorded,
        attribution: Vec::new(),
        too_large: r.too_large.clone(),
        too_large_not_listed: r.too_large_not_recorded,
        recorded_ooms: None,
        oom_requests: Vec::new(),
        capacity_inferred: None,
        capacity_not_inferred: None,
        memory_limit_bytes: None,
        releases: None,
        live_at_start: None,
        skipped_entries: 0,
        first_skipped: None,
        private_pools: Vec::new(),
        pool_inference: None,
        frees_deferred: None,
        frees_pending_at_end: None,
        largest_free_block_at_peak_bytes: None,
        fragmentation_at_peak_bytes: None,
        memory_stats: r.memory_stats.clone(),
        underivable_stats: Vec::new(),
        summary: Some(r.summary.clone()),
        fidelity: None,
        devices: r
            .devices
            .iter()
            .map(|d| DocDevice {
                device: d.device,
                peak_allocated_bytes: d.peak_allocated_bytes,
                peak_reserved_bytes: d.peak_reserved_bytes,
                final_allocated_bytes: d.current_allocated_bytes,
                final_reserved_bytes: d.current_reserved_bytes,
                memory_stats: d.memory_stats.clone(),
            })
            .collect(),
        estimate: None,
    }
}

/// The document of a snapshot replay.
pub fn from_snapshot(input: &str, snap: &Snapshot, r: &SnapshotReplay, opts: &SnapshotReplayOptions) -> ReplayDoc {
    let stat = |key: &str| r.final_memory_stats.get(key).copied().unwrap_or(0).max(0) as u64;
    ReplayDoc {
        schema_version: SCHEMA_VERSION,
        input: input.to_owned(),
        format: InputFormat::PytorchSnapshot,
        protocol: Some(snap.protocol),
        device: r.device as u32,
        device_chosen: r.device_chosen,
        devices_with_entries: r.devices_with_entries,
        alloc_conf: r.alloc_conf.clone(),
        settings_from_snapshot: r.settings_from_snapshot,
        capacity_bytes: r.capacity_bytes,
        on_oom: opts.on_oom,
        from_us: opts.from_us,
        to_us: opts.to_us,
        lines: None,
        entries: r.entries,
        entries_before_window: snap.skipped_entries.get(r.device).copied().filter(|&n| n > 0),
        entries_replayed: r.entries_in_window,
        allocs: Some(r.allocs),
        frees: Some(r.frees),
        stopped_early: r.stopped_early,
        peak_allocated_bytes: r.peak_allocated_bytes,
        peak_reserved_bytes: r.peak_reserved_bytes,
        final_allocated_bytes: r.final_allocated_bytes,
        final_reserved_bytes: r.final_reserved_bytes,
        peak_allocated_index: r.peak_allocated_index,
        last_reset_peak_line: None,
        live_allocations: stat("allocation.all.current"),
        segment_allocs: Some(r.segment_allocs),
        ooms: r
            .ooms
            .iter()
            .map(|o| DocOom {
                index: o.trace_index,
                line: None,
                device: r.device as u32,
                time_us: Some(o.time_us),
                requested_bytes: o.requested_bytes,
                frame: snap.frames.stack(o.frames).next().map(|f| f.short()),
                message: o.message.clone(),
                error: None,
                memory_stats: None,
            })
            .collect(),
        ooms_not_listed: 0,
        attribution: vramlab_snapshot::replay_attribution(snap, r)
            .into_iter()
            .map(|mut a| {
                a.truncate(ATTRIBUTION_ROWS);
                a
            })
            .collect(),
        too_large: Vec::new(),
        too_large_not_listed: 0,
        recorded_ooms: Some(r.recorded_ooms),
        oom_requests: r.oom_requests.clone(),
        capacity_inferred: r.capacity_inferred.clone(),
        capacity_not_inferred: r.capacity_not_inferred.clone(),
        memory_limit_bytes: r.memory_limit_bytes,
        releases: Some(r.releases.clone()),
        live_at_start: Some(r.live_at_start.clone()),
        skipped_entries: r.skipped_entries,
        first_skipped: r.first_skipped.clone(),
        private_pools: r.private_pools.clone(),
        pool_inference: Some(r.pool_inference.clone()),
        frees_deferred: Some(r.frees_deferred),
        frees_pending_at_end: Some(r.frees_pending_at_end),
        largest_free_block_at_peak_bytes: Some(r.largest_free_block_at_peak_bytes),
        fragmentation_at_peak_bytes: Some(r.fragmentation_at_peak_bytes),
        memory_stats: r.final_memory_stats.clone(),
        underivable_stats: r.underivable_stats.clone(),
        summary: None,
        fidelity: r.fidelity.clone(),
        devices: vec![DocDevice {
            device: r.device as u32,
            peak_allocated_bytes: r.peak_allocated_bytes,
            peak_reserved_bytes: r.peak_reserved_bytes,
            final_allocated_bytes: r.final_allocated_bytes,
            final_reserved_bytes: r.final_reserved_bytes,
            memory_stats: r.final_memory_stats.clone(),
        }],
        estimate: snap.estimate.clone(),
    }
}

/// The lines that say a snapshot is an estimate, for every view of it: the
/// assumed GPU and torch, then each modelled kind of request.
pub fn estimate_lines(e: &Estimate) -> Vec<String> {
    let mut lines = vec![format!(
        "ESTIMATED: captured with no GPU (vramlab estimate), not recorded by PyTorch; assumed {}, torch {}",
        e.gpu.describe(),
        e.torch
    )];
    for r in &e.rules {
        lines.push(format!("modelled: {} x {} ({}): {}", r.count, r.name, fmt_bytes(r.bytes), r.why));
    }
    let reasons = e.unsized_reasons();
    if !reasons.is_empty() {
        lines.push(format!(
            "peaks: lower bounds; each is at most {} (the assumed GPU's memory; the estimate's upper bound, \
             not a PyTorch figure): {}",
            exact(e.gpu.total_memory),
            reasons.join(" ")
        ));
    }
    lines
}

/// `12.00 MiB (12582912 bytes)`; below 1 KiB the bytes alone.
pub fn exact(bytes: u64) -> String {
    if bytes < 1024 { fmt_bytes(bytes) } else { format!("{} ({bytes} bytes)", fmt_bytes(bytes)) }
}

fn conf_text(conf: &str) -> String {
    if conf.is_empty() { "default (PyTorch's)".to_owned() } else { conf.to_owned() }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The terminal report: the document's figures, one per line, then the
/// format's details (a trace's memory summary, a snapshot's fidelity check).
/// `snapshot_has_settings`: whether a snapshot recorded its allocator settings.
pub fn text(d: &ReplayDoc, snapshot_has_settings: bool) -> String {
    let mut s = String::new();
    title_lines(&mut s, d);
    let capacity = capacity_text(d);
    match d.format {
        InputFormat::VramlabTrace => trace_input_lines(&mut s, d, &capacity),
        InputFormat::PytorchSnapshot => snapshot_input_lines(&mut s, d, &capacity, snapshot_has_settings),
    }
    oom_lines(&mut s, d);
    recorded_oom_lines(&mut s, d);
    peak_lines(&mut s, d);
    match d.format {
        InputFormat::VramlabTrace => trace_detail_lines(&mut s, d),
        InputFormat::PytorchSnapshot => snapshot_detail_lines(&mut s, d),
    }
    s
}

// Writing to a String cannot fail: the functions below drop `writeln!`'s Ok.

/// The report's first line, and for a snapshot the device replayed.
fn title_lines(s: &mut String, d: &ReplayDoc) {
    match d.format {
        InputFormat::VramlabTrace => {
            let _ = writeln!(s, "vramlab replay of {}", d.input);
        }
        InputFormat::PytorchSnapshot => {
            let what = if d.estimate.is_some() { "ESTIMATED snapshot" } else { "PyTorch memory snapshot" };
            let _ = writeln!(s, "vramlab replay of {} ({what}, pickle protocol {})", d.input, d.protocol.unwrap_or(0));
            for line in d.estimate.iter().flat_map(estimate_lines) {
                let _ = writeln!(s, "  {line}");
            }
            let how = if d.device_chosen {
                format!(
                    " (the one with the most entries, of {} device(s) with a trace; --device N picks another)",
                    d.devices_with_entries
                )
            } else {
                String::new()
            };
            let _ = writeln!(s, "  device             {}{how}", d.device);
        }
    }
}

/// The simulated device's memory: its capacity (and where it comes from) and
/// the per-process limit.
fn capacity_text(d: &ReplayDoc) -> String {
    let mut capacity = d.capacity_bytes.map_or_else(|| "unlimited".to_owned(), exact);
    if d.capacity_inferred.is_some() {
        capacity += " (inferred from the recorded OOM: no --capacity given)";
    }
    if let Some(limit) = d.memory_limit_bytes {
        capacity += &format!("; per-process limit {}", exact(limit));
    }
    capacity
}

/// A trace's device, settings and how much was replayed.
fn trace_input_lines(s: &mut String, d: &ReplayDoc, capacity: &str) {
    let _ = writeln!(s, "  simulated device   {capacity}");
    let _ = writeln!(s, "  allocator config   {}", conf_text(&d.alloc_conf));
    let _ = writeln!(s, "  events replayed    {} ({} lines read)", d.entries_replayed, d.lines.unwrap_or(0));
}

/// A snapshot's settings (and where they come from), device, entries, the
/// memory live before its trace and the entries skipped.
fn snapshot_input_lines(s: &mut String, d: &ReplayDoc, capacity: &str, snapshot_has_settings: bool) {
    let origin = match (d.settings_from_snapshot, snapshot_has_settings) {
        (true, true) => " (the snapshot's allocator_settings)",
        (true, false) => " (the snapshot records none: PyTorch's defaults)",
        (false, _) => " (--alloc-conf)",
    };
    let _ = writeln!(s, "  allocator config   {}{origin}", conf_text(&d.alloc_conf));
    let _ = writeln!(s, "  simulated device   {capacity}");
    let window = if d.entries_replayed != d.entries {
        format!(", {} in the time window", d.entries_replayed)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  trace entries      {}{window}: {} allocs, {} frees",
        d.entries,
        d.allocs.unwrap_or(0),
        d.frees.unwrap_or(0)
    );
    if let Some(n) = d.entries_before_window {
        let _ = writeln!(
            s,
            "  before --from-us   {n} entries, dropped while reading (entry numbers count from the first after them)"
        );
    }
    live_at_start_lines(s, d);
    if d.skipped_entries > 0 {
        let _ = writeln!(
            s,
            "  skipped entries    {} (the first: {})",
            d.skipped_entries,
            d.first_skipped.as_deref().unwrap_or("")
        );
    }
}

/// The out-of-memory errors the snapshot recorded, each replayed request's
/// outcome, the inferred capacity and the releases before the errors.
fn recorded_oom_lines(s: &mut String, d: &ReplayDoc) {
    if let Some(n) = d.recorded_ooms.filter(|&n| n > 0) {
        let _ = writeln!(s, "  recorded OOMs      {n} in the snapshot's own trace");
        if d.oom_requests.is_empty() {
            let why = d.capacity_not_inferred.as_deref().unwrap_or("the device is unlimited");
            let _ = writeln!(s, "                     only counted, not replayed: {why}");
        }
        for o in &d.oom_requests {
            let outcome = match (o.served, o.spare_bytes, o.short_bytes) {
                (true, spare, _) => format!("served, {} to spare", fmt_bytes(spare.unwrap_or(0))),
                (false, _, short) => {
                    format!("failed as recorded (release, retry, OOM), {} short", fmt_bytes(short.unwrap_or(0)))
                }
            };
            let _ = writeln!(
                s,
                "                     entry {}: request of {} replayed: {outcome}",
                o.trace_index,
                exact(o.requested_bytes)
            );
        }
    }
    if let Some(c) = &d.capacity_inferred {
        let _ = writeln!(s, "  capacity           {}", c.describe());
    }
    if let Some(rel) = d.releases.as_ref().filter(|r| r.runs > 0) {
        let _ = writeln!(s, "  releases           {}", rel.describe());
    }
}

/// The peaks and the final figures.
fn peak_lines(s: &mut String, d: &ReplayDoc) {
    let since = d.last_reset_peak_line.map(|l| format!(", since the reset_peak at line {l}")).unwrap_or_default();
    let _ = writeln!(s, "  peak allocated     {}{since}", exact(d.peak_allocated_bytes));
    let _ = writeln!(s, "  peak reserved      {}{since}", exact(d.peak_reserved_bytes));
    let _ = writeln!(s, "  final allocated    {}", exact(d.final_allocated_bytes));
    let _ = writeln!(s, "  final reserved     {}", exact(d.final_reserved_bytes));
}

/// A trace's live allocations, its devices' figures and the memory summary.
fn trace_detail_lines(s: &mut String, d: &ReplayDoc) {
    let _ = writeln!(s, "  live allocations   {}", d.live_allocations);
    if d.devices.len() > 1 {
        let _ =
            writeln!(s, "  devices            {} (the figures above and the summary are device 0's)", d.devices.len());
        for dev in &d.devices {
            let _ = writeln!(
                s,
                "    device {}: peak allocated {}, peak reserved {}, final reserved {}",
                dev.device,
                exact(dev.peak_allocated_bytes),
                exact(dev.peak_reserved_bytes),
                exact(dev.final_reserved_bytes)
            );
        }
    }
    if let Some(summary) = &d.summary {
        s.push('\n');
        s.push_str(summary);
    }
}

/// A snapshot's segment allocations, pools, deferred frees, the figures it
/// cannot derive, the fidelity check and who holds memory at the peaks.
fn snapshot_detail_lines(s: &mut String, d: &ReplayDoc) {
    let _ = writeln!(
        s,
        "  segment allocs     {} (cudaMalloc calls or mappings, after the placed memory)",
        d.segment_allocs.unwrap_or(0)
    );
    if !d.private_pools.is_empty() {
        let _ = writeln!(
            s,
            "  private pools      {:?}: CUDA graphs / MemPools, replayed in their own pools (by their final segments)",
            d.private_pools
        );
    }
    if let Some(pi) = &d.pool_inference
        && (pi.inferred_private > 0 || (!d.private_pools.is_empty() && pi.freed_assumed_default > 0))
    {
        let _ = writeln!(
            s,
            "  pools of segments  {} known from the final segments, {} freed ones inferred in a private pool, \
             {} freed ones replayed in the default pool (their pool is not in the trace)",
            pi.known_from_final_segments, pi.inferred_private, pi.freed_assumed_default
        );
    }
    if let Some(n) = d.frees_deferred.filter(|&n| n > 0) {
        let _ = writeln!(
            s,
            "  deferred frees     {n} (record_stream: allocated no more at free_requested, reusable at \
             free_completed); {} still waiting for other streams at the dump",
            d.frees_pending_at_end.unwrap_or(0)
        );
    }
    for n in stat_notes(d) {
        let _ = writeln!(s, "  not derivable      {}: {} ({})", n.key, n.value, n.reason);
    }
    if d.estimate.is_some() {
        let _ = writeln!(
            s,
            "  fidelity           not applicable: an estimate has no recording to check against (its figures are \
             the allocator model's, over requests captured without a GPU)"
        );
    } else {
        fidelity_lines(s, d.fidelity.as_ref());
    }
    for a in &d.attribution {
        s.push('\n');
        s.push_str(&holders_text(a, ATTRIBUTION_ROWS_TEXT));
    }
}

/// "Who holds …": one attributed point as a table, the user's call path first.
pub fn holders_text(a: &Attribution, top: usize) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "Who holds {}: {} requested in {} live block(s)", a.title(), fmt_bytes(a.total_bytes), a.blocks);
    if let Some(r) = &a.request {
        let _ = writeln!(s, "  the request that failed: {} from {}", fmt_bytes(r.bytes), r.label);
    }
    let _ = writeln!(
        s,
        "  {:>12}  {:>6}  {:>6}  {:26}  call path (your frames first; torch, packages, stdlib, <built-in>, C++ folded)",
        "bytes", "share", "blocks", "category"
    );
    for g in a.groups.iter().take(top) {
        let category = match g.category_source {
            CategorySource::Inferred => format!("{} (inferred)", g.category.name()),
            CategorySource::Tagged => format!("{} (tagged)", g.category.name()),
            CategorySource::Unknown => g.category.name().to_owned(),
        };
        let mut path = g.user_frames.join(" <- ");
        if path.is_empty() {
            path = g.label.clone();
        }
        if let Some(via) = &g.via {
            path += &format!("  [via {via}]");
        }
        let _ = writeln!(
            s,
            "  {:>12}  {:>5.1}%  {:>6}  {category:26}  {path}",
            fmt_bytes(g.bytes),
            g.share * 100.0,
            g.blocks
        );
    }
    let more = a.groups.len().saturating_sub(top) as u64 + a.groups_not_listed;
    if more > 0 {
        let bytes: u64 = a.groups.iter().skip(top).map(|g| g.bytes).sum::<u64>() + a.bytes_not_listed;
        let _ = writeln!(s, "  … and {more} more call paths holding {} (--json lists more)", fmt_bytes(bytes));
    }
    if !a.categories.is_empty() {
        let cats: Vec<String> = a
            .categories
            .iter()
            .map(|c| format!("{} {} ({:.1}%)", c.category.name(), fmt_bytes(c.bytes), c.share * 100.0))
            .collect();
        let how = if a.categories_inferred() {
            " — inferred from the frames and each block's lifetime where not tagged"
        } else {
            ""
        };
        let _ = writeln!(s, "  by category: {}{how}", cats.join(", "));
    }
    s
}

fn live_at_start_lines(s: &mut String, d: &ReplayDoc) {
    let Some(l) = &d.live_at_start else { return };
    if l.segments + l.blocks == 0 {
        let _ = writeln!(s, "  live at start      nothing (every segment and block is made in the trace)");
        return;
    }
    let _ = writeln!(
        s,
        "  live at start\n    {} segment(s) of {} and {} block(s) of {}, rewound from the final segments;\n    \
         {} block(s), {} allocated in the final segments without an entry;\n    \
         {} block(s), {} freed without an alloc entry (lost from the ring buffer)",
        l.segments,
        fmt_bytes(l.segments_bytes),
        l.blocks,
        fmt_bytes(l.blocks_bytes),
        l.blocks_in_segments,
        fmt_bytes(l.blocks_in_segments_bytes),
        l.freed_without_alloc,
        fmt_bytes(l.freed_without_alloc_bytes)
    );
    if l.outside_segments + l.entries_not_undone > 0 {
        let _ = writeln!(
            s,
            "    {} block(s) in no segment placed in segments of the replay's own making;\n    \
             {} entr(ies) not undone{}",
            l.outside_segments,
            l.entries_not_undone,
            l.first_not_undone.as_deref().map(|f| format!(" (the first: {f})")).unwrap_or_default()
        );
    }
}

/// "out of memory" when the replay refused no request: "never", or, where the
/// recording itself ran out of memory, that only its own failed requests
/// failed (a recorded OOM replayed as a failure is not a new one).
fn no_oom(d: &ReplayDoc) -> String {
    match d.recorded_ooms.filter(|&n| n > 0) {
        None => "never".to_owned(),
        Some(n) => {
            let failed = d.oom_requests.iter().filter(|o| !o.served).count();
            if d.oom_requests.is_empty() {
                format!("never (the recording's {} counted, not replayed)", plural(n, "OOM", "OOMs"))
            } else if failed > 0 {
                format!("only where the recording did: {failed} of its {} failed again", plural(n, "OOM", "OOMs"))
            } else {
                format!("never, not even at the recording's {}: each request served", plural(n, "OOM", "OOMs"))
            }
        }
    }
}

fn oom_lines(s: &mut String, d: &ReplayDoc) {
    let total = d.ooms.len() as u64 + d.ooms_not_listed;
    let stopped = if d.stopped_early { "; the replay stopped there (--on-oom continue goes on)" } else { "" };
    match (d.format, d.ooms.first()) {
        (_, None) if total == 0 => {
            let _ = writeln!(s, "  out of memory      {}", no_oom(d));
        }
        (InputFormat::PytorchSnapshot, Some(o)) => {
            let frame = o.frame.as_ref().map(|f| format!(" at {f}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  out of memory      {total} time(s), first at entry {} (time_us {}): alloc of {}{frame}{stopped}\n                     {}",
                o.index,
                o.time_us.unwrap_or(0),
                exact(o.requested_bytes),
                o.message
            );
        }
        _ => {
            let _ = writeln!(s, "  out of memory      {}{stopped}", plural(total, "time", "times"));
            for o in d.ooms.iter().take(OOMS_LISTED) {
                let at = match o.line {
                    Some(line) => format!("line {line} (event {})", o.index),
                    None => format!("entry {}", o.index),
                };
                let _ = writeln!(s, "    {at}: alloc of {}\n      {}", exact(o.requested_bytes), o.message);
            }
            if total > OOMS_LISTED as u64 {
                let _ = writeln!(s, "    … and {} more (--json lists the first 1000)", total - OOMS_LISTED as u64);
            }
        }
    }
    let too_large = d.too_large.len() as u64 + d.too_large_not_listed;
    if too_large > 0 {
        let how = if d.stopped_early && d.ooms.is_empty() { "; the replay stopped there" } else { "" };
        let _ = writeln!(
            s,
            "  refused (>= 1 EiB)  {}, before the allocator as PyTorch does{how}",
            plural(too_large, "request", "requests")
        );
        for record in d.too_large.iter().take(OOMS_LISTED) {
            let _ = writeln!(s, "    line {} (event {}): {}", record.line, record.event_index, record.message);
        }
    }
}

fn fidelity_lines(s: &mut String, fidelity: Option<&FidelityReport>) {
    match fidelity {
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
            for line in f.memory_stats.iter().flat_map(memory_stats_lines) {
                let _ = writeln!(s, "                     {line}");
            }
        }
        Some(f) => {
            let _ = writeln!(s, "  fidelity           DISAGREES with the recording:");
            if let Some(d) = &f.first_segment_disagreement {
                let show = |e: Option<(u64, Action, u64)>| match e {
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
                let show = |p: Option<Placement>| match p {
                    None => "in memory placed before the trace".to_owned(),
                    Some(p) => {
                        format!("at offset {} of segment #{} ({})", p.offset, p.segment, fmt_bytes(p.segment_bytes))
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
            for line in f.memory_stats.iter().flat_map(memory_stats_lines) {
                let _ = writeln!(s, "    {line}");
            }
        }
    }
}

/// PyTorch's `memory_stats()` against the replay's, as lines (each under 100
/// columns once indented): how many keys are equal, each key that differs
/// with both values, then the keys the trace cannot determine, apart.
pub fn memory_stats_lines(m: &MemoryStatsCheck) -> Vec<String> {
    let mut lines = vec![format!(
        "{} of {} memory_stats keys equal PyTorch's ({})",
        m.equal,
        m.keys,
        m.source.rsplit('/').next().unwrap_or(&m.source)
    )];
    if !m.differing.is_empty() {
        lines.push(format!("{} differ:", m.differing.len()));
    }
    for d in &m.differing {
        let ours = d.replayed.map_or_else(|| "no such key".to_owned(), |v| v.to_string());
        lines.push(format!("  {}: vramlab {ours}, PyTorch {}", d.key, d.pytorch));
    }
    if !m.underivable.is_empty() {
        lines.push(format!("{} not derivable from the trace, compared apart:", m.underivable.len()));
    }
    for u in &m.underivable {
        let bound = if u.lower_bound { " (a lower bound)" } else { "" };
        lines.push(format!("  {}: vramlab {}{bound}, PyTorch {}", u.key, u.replayed, u.pytorch));
    }
    lines
}

/// The statistics the input cannot determine, as the text and the page show
/// them: "at least N" for a lower bound, else "not known from the trace".
pub fn stat_notes(d: &ReplayDoc) -> Vec<StatNote> {
    d.underivable_stats
        .iter()
        .map(|u| {
            let value = d.memory_stats.get(&u.key).copied().unwrap_or(0);
            StatNote {
                key: u.key.clone(),
                value: if u.lower_bound { format!("at least {value}") } else { "not known from the trace".to_owned() },
                reason: u.reason.clone(),
            }
        })
        .collect()
}

/// The replay page's summary table, from the document and the page's timeline
/// (whose peaks are those of the charted device).
pub fn page_facts(d: &ReplayDoc, t: &ReplayTimeline) -> Vec<Fact> {
    let capacity = d.capacity_bytes.map_or_else(|| "unlimited".to_owned(), exact);
    let total_ooms = d.ooms.len() as u64 + d.ooms_not_listed;
    let mut facts = Vec::new();
    if let Some(e) = &d.estimate {
        facts.push(Fact::new("estimated", estimate_lines(e).join("; ")));
    }
    match d.format {
        InputFormat::VramlabTrace => {
            facts.push(Fact::new("simulated device", capacity));
            facts.push(Fact::new("allocator config", conf_text(&d.alloc_conf)));
            facts.push(Fact::new(
                "ops replayed",
                format!("{} ({} lines read)", d.entries_replayed, d.lines.unwrap_or(0)),
            ));
            facts.push(Fact::new(
                "out of memory",
                match total_ooms {
                    0 => "never".to_owned(),
                    n if d.stopped_early => format!("{n} time(s); the replay stopped at the first"),
                    n => format!("{n} time(s)"),
                },
            ));
        }
        InputFormat::PytorchSnapshot => {
            facts.push(Fact::new(
                "snapshot",
                format!("PyTorch memory snapshot, pickle protocol {}", d.protocol.unwrap_or(0)),
            ));
            facts.push(Fact::new("device", d.device.to_string()));
            facts.push(Fact::new("allocator config", conf_text(&d.alloc_conf)));
            match limit_text(d) {
                Some(limit) if d.memory_limit_bytes.is_some() => {
                    facts.push(Fact::new("memory limit", limit));
                    facts.push(Fact::new(
                        "simulated device",
                        format!("{capacity}: the limit above is what it may reserve"),
                    ));
                }
                Some(limit) if d.capacity_inferred.is_some() => facts.push(Fact::new("simulated device", limit)),
                _ => facts.push(Fact::new("simulated device", capacity)),
            }
            facts.push(Fact::new(
                "trace entries",
                format!(
                    "{} ({} in the window): {} allocs, {} frees",
                    d.entries,
                    d.entries_replayed,
                    d.allocs.unwrap_or(0),
                    d.frees.unwrap_or(0)
                ),
            ));
            facts.push(Fact::new(
                "out of memory",
                match d.ooms.first() {
                    None => no_oom(d),
                    Some(o) => {
                        format!("{total_ooms} time(s), first at entry {} (time_us {})", o.index, o.time_us.unwrap_or(0))
                    }
                },
            ));
        }
    }
    facts.push(Fact::new("peak allocated", exact(t.peak_allocated_bytes())));
    facts.push(Fact::new("peak reserved", exact(t.peak_reserved_bytes())));
    facts.push(Fact::new("final allocated", exact(d.final_allocated_bytes)));
    facts.push(Fact::new("final reserved", exact(d.final_reserved_bytes)));
    match d.format {
        InputFormat::VramlabTrace => {
            facts.push(Fact::new("live allocations", d.live_allocations.to_string()));
            if d.devices.len() > 1 {
                facts.push(Fact::new("devices", format!("{} (the page shows device 0)", d.devices.len())));
            }
        }
        InputFormat::PytorchSnapshot => {
            facts.push(Fact::new("segment allocations", d.segment_allocs.unwrap_or(0).to_string()));
            if let Some(f) = &d.fidelity {
                facts.push(Fact::new(
                    "fidelity",
                    if f.agrees() {
                        "agrees with the recording"
                    } else {
                        "DISAGREES with the recording (see the terminal report)"
                    },
                ));
            }
        }
    }
    facts
}

/// The memory the replay may reserve, in words for the page: the limit, and
/// whether it was given or inferred (with the range the recording allows).
/// `None` for an unlimited device.
pub fn limit_text(d: &ReplayDoc) -> Option<String> {
    let limit = d.memory_limit_bytes.or(d.capacity_bytes)?;
    Some(match &d.capacity_inferred {
        Some(c) if c.kind == LimitKind::Fraction => format!(
            "{} per-process limit, inferred from the recorded OOM at entry {}: the real limit lies in [{}, {}), \
             and the replay takes its lower end",
            fmt_bytes(limit),
            c.entry,
            fmt_bytes(c.at_least),
            fmt_bytes(c.below)
        ),
        Some(c) => format!(
            "{} of device memory, inferred from the recorded OOM at entry {} (reserved then plus the device's free \
             memory)",
            fmt_bytes(limit),
            c.entry
        ),
        None if d.memory_limit_bytes.is_some() => format!("{} per-process limit", fmt_bytes(limit)),
        None => format!("{} simulated device", fmt_bytes(limit)),
    })
}

/// The capacity line's label on the page's chart: the limit, marked
/// "inferred, at least" where the recording only bounds it.
pub fn limit_label(d: &ReplayDoc) -> Option<String> {
    let limit = d.memory_limit_bytes.or(d.capacity_bytes)?;
    Some(match &d.capacity_inferred {
        Some(c) if c.kind == LimitKind::Fraction => {
            format!("limit {} (inferred: in [{}, {}))", fmt_bytes(limit), fmt_bytes(c.at_least), fmt_bytes(c.below))
        }
        Some(_) => format!("capacity {} (inferred)", fmt_bytes(limit)),
        None if d.memory_limit_bytes.is_some() => format!("limit {}", fmt_bytes(limit)),
        None => format!("capacity {}", fmt_bytes(limit)),
    })
}

/// The replay page's answer card, from the document and the page's timeline.
pub fn page_answer(d: &ReplayDoc, t: &ReplayTimeline) -> Answer {
    let holders_at = |kind: PointKind, index: Option<u64>| {
        d.attribution.iter().find(|a| a.kind == kind && (index.is_none() || a.trace_index == index))
    };
    let limit = limit_text(d);
    let Some(o) = t.ooms.first() else {
        let mut answer = Answer::default();
        let peak = t.peak_allocated_bytes();
        let at = t.points.iter().find(|p| p.allocated_bytes == peak).map_or(0, |p| p.ops);
        let what = if d.format == InputFormat::PytorchSnapshot { "entry" } else { "op" };
        answer.headline = match at {
            0 => format!("Allocated memory peaks at {} before the first {what}", fmt_bytes(peak)),
            n => format!("Allocated memory peaks at {} after {what} {}", fmt_bytes(peak), n - 1),
        };
        answer.headline += &format!("; reserved memory at {}.", fmt_bytes(t.peak_reserved_bytes()));
        if let Some(limit) = &limit {
            answer.lines.push(format!("It fitted under the {limit}."));
        }
        if d.recorded_ooms.is_some_and(|n| n > 0) {
            answer.lines.push(format!("Out of memory: {}.", no_oom(d)));
        }
        if let Some(a) = holders_at(PointKind::AllocatedPeak, None) {
            answer.holders_title = format!("Top holders at the peak ({} requested):", fmt_bytes(a.total_bytes));
            answer.holders = answer_holders(a);
        }
        return answer;
    };
    let total = t.ooms.len() as u64 + t.ooms_not_recorded;
    let place = crate::replay_page::oom_place(o);
    let mut answer = Answer {
        headline: format!(
            "Out of memory at {place}: a request of {} failed with {} reserved ({} allocated){}.",
            fmt_bytes(o.requested_bytes),
            fmt_bytes(o.reserved_bytes),
            fmt_bytes(o.allocated_bytes),
            if total > 1 { format!(", the first of {total}") } else { String::new() }
        ),
        ..Answer::default()
    };
    if let Some(limit) = &limit {
        answer.lines.push(format!("Limit: {limit}."));
    }
    let request = d.oom_requests.iter().find(|r| r.trace_index == o.index);
    if let Some(short) = request.and_then(|r| r.short_bytes) {
        answer.lines.push(format!(
            "{} short: the memory reserved after the allocator released its cache, plus the segment the request \
             needed, less the limit.",
            fmt_bytes(short)
        ));
    }
    if request.is_some() {
        answer
            .lines
            .push("The recording ran out of memory here too: the replay makes its failed request again.".into());
    }
    if o.reserved_unallocated_bytes >= o.requested_bytes {
        answer.lines.push(format!(
            "Fragmentation: {} was reserved but unallocated, enough for the request, but the largest free block was {}.",
            fmt_bytes(o.reserved_unallocated_bytes),
            fmt_bytes(o.largest_free_block_bytes)
        ));
    }
    if let Some(a) =
        holders_at(PointKind::OutOfMemory, Some(o.index)).or_else(|| holders_at(PointKind::AllocatedPeak, None))
    {
        answer.holders_title = format!("Top holders at {} ({} requested):", a.title(), fmt_bytes(a.total_bytes));
        answer.holders = answer_holders(a);
    }
    answer
}

/// What the replay page takes from the document: the answer card, the limit
/// in words and as the chart's label, the releases, how far short each
/// recorded failed request made again was.
pub fn doc_view(d: &ReplayDoc, t: &ReplayTimeline) -> DocView {
    let mut answer = page_answer(d, t);
    if let Some(e) = &d.estimate {
        answer.headline = format!("Estimated: {}", answer.headline);
        answer.lines.insert(0, estimate_lines(e).swap_remove(0));
    }
    DocView {
        estimate: d.estimate.as_ref().map(estimate_lines),
        answer: Some(answer),
        limit: limit_text(d),
        limit_label: limit_label(d),
        releases: d.releases.as_ref().filter(|r| r.runs > 0).map(|r| r.describe()),
        short_bytes: d.oom_requests.iter().filter_map(|r| Some((r.trace_index, r.short_bytes?))).collect(),
    }
}
