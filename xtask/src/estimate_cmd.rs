//! `vramlab estimate -- CMD ARGS…`: the program captured with no GPU
//! (`crate::capture`), the capture replayed through the allocator model under
//! the settings asked: the peaks, the out-of-memory point under the capacity
//! with how far short, who holds the peak, the modelled requests apart from
//! the program's own, the what-if sweep (`whatif_cmd`'s analysis), and with
//! `--out` the capture as a full snapshot marked as an estimate. `--search`
//! is `estimate_search.rs`'s. A refused program exits 2 with the op and line.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use vramlab_display::format::fmt_bytes;
use vramlab_replay::OnOom;
use vramlab_snapshot::{
    self as snapshot, Attribution, Estimate, ModelledRule, Snapshot, SnapshotReplayOptions, WhatIf,
};

use crate::capture::AssumedGpu;
use crate::cli::EstimateArgs;
use crate::estimate_setup::{Captured, PROGRAMS, REFUSED, Setup, head_lines, refused, whatif_args, with_settings};
use crate::output::write_stdout;
use crate::whatif_cmd;

/// The frame file name of a modelled request (the capture's rules).
pub const MODEL_FRAME: &str = "<vramlab model>";

pub fn run(args: &EstimateArgs) -> anyhow::Result<u8> {
    let gpu = match &args.gpu {
        Some(s) => match AssumedGpu::parse(s) {
            Ok(g) => g,
            Err(e) => {
                crate::output::eprint_line(&format!("error: --gpu {s}: {e}"));
                return Ok(REFUSED);
            }
        },
        None => AssumedGpu::h100(),
    };
    if let Some(out) = &args.out {
        check_out(out)?;
    }
    let setup = Setup::new(args, gpu);
    if let Some(search) = &args.search {
        return crate::estimate_search::run(args, &setup, search);
    }
    let captured = match setup.capture(&args.command, true)? {
        Ok(c) => c,
        Err(refusal) => return Ok(refused(&refusal)),
    };
    let est = estimate(args, &setup, &captured)?;
    if let (Some(path), Some(rec)) = (&args.out, &est.recording) {
        let mut bytes = Vec::new();
        snapshot::write_snapshot(rec, &mut bytes).context("cannot build the snapshot pickle")?;
        vramlab_reports::write_atomic(path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let out = if args.json {
        let mut v = serde_json::to_vec_pretty(&json(args, &setup, &captured, &est)).context("cannot serialize")?;
        v.push(b'\n');
        v
    } else {
        text(args, &setup, &captured, &est).into_bytes()
    };
    write_stdout(&out).map(|()| 0)
}

/// `--out`'s folder must take a file before the program runs.
fn check_out(out: &Path) -> anyhow::Result<()> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    vramlab_reports::record::check_writable(parent)
        .with_context(|| format!("cannot write {} (its folder is not writable); nothing was run", out.display()))
}

/// The capture replayed: on an unlimited device (the peaks, `--out`'s
/// snapshot) and under the capacity for each setting (`whatif_cmd`'s analysis).
pub(crate) struct Est {
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Peak reserved with the segments placed the other way (fresh addresses
    /// going down): the capture has no driver addresses, and PyTorch breaks
    /// ties between equal free blocks by address.
    pub peak_reserved_downwards_bytes: u64,
    pub results: Vec<WhatIf>,
    pub best: Option<usize>,
    pub attribution: Vec<Attribution>,
    /// The least capacity under which the program's settings fit, when they do
    /// not fit the capacity given (by bisection over replays).
    pub least_capacity_bytes: Option<u64>,
    /// The replay as a snapshot, for `--out`.
    pub recording: Option<Snapshot>,
    /// Requests of the program's own, and those the capture modelled.
    pub own: Requests,
    pub modelled: Requests,
    /// Where the capture counted requests it could not size (cuDNN's
    /// convolution workspaces): the peaks are lower bounds, and this is the
    /// upper one.
    pub upper_bound: Option<UpperBound>,
}

/// The upper bound of an estimate's peaks when some requests a GPU makes were
/// counted but not sized: the memory limit the allocator works under, for
/// the reasons the capture's rules give (PyTorch's functions named).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct UpperBound {
    pub bytes: u64,
    /// What the limit is: the assumed GPU's memory, or `--capacity` (under `--fraction`).
    pub limit: String,
    pub reasons: Vec<String>,
}

/// A count of requests and their bytes: over the run, and live at the allocated peak.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct Requests {
    pub allocs: u64,
    pub bytes: u64,
    pub at_peak_bytes: u64,
}

fn estimate(args: &EstimateArgs, setup: &Setup, c: &Captured) -> anyhow::Result<Est> {
    let snap = with_settings(&c.snap, &setup.config);
    let unlimited = SnapshotReplayOptions {
        no_capacity_inference: true,
        on_oom: OnOom::Continue,
        record: args.out.is_some(),
        ..Default::default()
    };
    let mut r = snapshot::replay_snapshot(&snap, &unlimited).context("cannot replay the capture")?;
    let downwards = SnapshotReplayOptions { fresh_addresses_downwards: true, record: false, ..unlimited.clone() };
    let peak_reserved_downwards_bytes =
        snapshot::replay_snapshot(&snap, &downwards).context("cannot replay the capture")?.peak_reserved_bytes;
    let wargs = whatif_args(args, setup, args.sweep);
    let a = whatif_cmd::analyse(&wargs, "the capture", &snap, false)?;
    let least_capacity_bytes =
        if a.results[0].fits() { None } else { Some(least_capacity(&snap, args.fraction, r.peak_reserved_bytes)?) };
    let (own, modelled) = requests(&snap, r.device, a.attribution.first());
    let upper_bound = c.snap.estimate.as_ref().and_then(|e| upper_bound(setup, args.fraction, e));
    Ok(Est {
        peak_allocated_bytes: r.peak_allocated_bytes,
        peak_reserved_bytes: r.peak_reserved_bytes,
        peak_reserved_downwards_bytes,
        results: a.results,
        best: a.best,
        attribution: a.attribution,
        least_capacity_bytes,
        recording: r.recording.take(),
        own,
        modelled,
        upper_bound,
    })
}

/// The peaks' upper bound, when a rule counted requests without sizing them:
/// the memory the allocator may reserve (the capacity, under the fraction).
pub(crate) fn upper_bound(setup: &Setup, fraction: Option<f64>, e: &Estimate) -> Option<UpperBound> {
    let reasons = e.unsized_reasons();
    if reasons.is_empty() {
        return None;
    }
    let bytes = fraction.map_or(setup.capacity_bytes, |f| (setup.capacity_bytes as f64 * f) as u64);
    Some(UpperBound {
        bytes,
        limit: capacity_words(setup, fraction),
        reasons: reasons.into_iter().map(str::to_owned).collect(),
    })
}

/// The text's lines for [`UpperBound`]: both peaks lie between the figures
/// shown and the limit (an estimate's bound, not a figure PyTorch gave).
pub(crate) fn upper_bound_lines(s: &mut String, b: &UpperBound, peak_reserved: u64) {
    let _ = writeln!(s, "  peaks' bounds      lower bounds: requests the capture counted could not be sized");
    if peak_reserved > b.bytes {
        let _ = writeln!(
            s,
            "                     already over the limit, {}: the program runs out of memory whatever they add",
            b.limit
        );
    } else {
        let _ = writeln!(s, "                     upper bound {}: the estimate's bound, not a PyTorch figure", b.limit);
    }
    for r in &b.reasons {
        let _ = writeln!(s, "                     {r}");
    }
}

/// The least capacity (in bytes) under which `snap` replays under its own
/// settings (and `fraction`) with no out-of-memory: bisection over replays
/// between its peak allocated bytes and its peak reserved on an unlimited
/// device (under which it always fits), divided by the fraction.
pub(crate) fn least_capacity(snap: &Snapshot, fraction: Option<f64>, peak_reserved: u64) -> anyhow::Result<u64> {
    let fits = |capacity: u64| -> anyhow::Result<bool> {
        let opts = SnapshotReplayOptions {
            capacity_bytes: Some(capacity),
            memory_fraction: fraction,
            no_capacity_inference: true,
            ..Default::default()
        };
        Ok(snapshot::replay_snapshot(snap, &opts).context("cannot replay the capture")?.ooms.is_empty())
    };
    let f = fraction.unwrap_or(1.0);
    let mut hi = ((peak_reserved as f64 / f).ceil() as u64).max(1);
    while !fits(hi)? {
        hi = hi.saturating_mul(2);
    }
    let mut lo = 0;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? { hi = mid } else { lo = mid }
    }
    Ok(hi)
}

/// Whether a stack is one of the capture's modelled requests.
fn is_modelled(snap: &Snapshot, stack: u32) -> bool {
    snap.frames.stack(stack).next().is_some_and(|f| f.filename.starts_with(MODEL_FRAME))
}

/// The program's own requests and the modelled ones: their allocs and bytes
/// over the run, and their bytes live at the allocated peak (`peak`).
fn requests(snap: &Snapshot, device: usize, peak: Option<&Attribution>) -> (Requests, Requests) {
    let (mut own, mut modelled) = (Requests::default(), Requests::default());
    for e in snap.device_traces[device].iter().filter(|e| e.action == snapshot::Action::Alloc) {
        let r = if is_modelled(snap, e.frames) { &mut modelled } else { &mut own };
        r.allocs += 1;
        r.bytes += e.size;
    }
    if let Some(a) = peak {
        // Call paths are grouped by the innermost user frame: a modelled
        // request's one frame is its own group, so none is left unlisted.
        let model: u64 = a.groups.iter().filter(|g| g.label.starts_with(MODEL_FRAME)).map(|g| g.bytes).sum();
        modelled.at_peak_bytes = model;
        own.at_peak_bytes = a.total_bytes.saturating_sub(model);
    }
    (own, modelled)
}

fn capacity_words(setup: &Setup, fraction: Option<f64>) -> String {
    let whose = if setup.capacity_given { "--capacity" } else { "the assumed GPU's memory" };
    match fraction {
        Some(f) => format!(
            "{} x {f} = {} ({whose} under --fraction)",
            fmt_bytes(setup.capacity_bytes),
            fmt_bytes((setup.capacity_bytes as f64 * f) as u64)
        ),
        None => format!("{} ({whose})", fmt_bytes(setup.capacity_bytes)),
    }
}

fn oom_words(snap: &Snapshot, est: &Est) -> String {
    let recorded = &est.results[0];
    match recorded.first_failure() {
        None => {
            let limit = recorded.replay.memory_limit_bytes.or(recorded.replay.capacity_bytes).unwrap_or(0);
            let headroom = fmt_bytes(limit.saturating_sub(recorded.replay.peak_reserved_bytes));
            if est.upper_bound.is_some() {
                // The peaks are lower bounds: the requests counted but not sized may take the headroom.
                format!("no, at the lower bounds: headroom at most {headroom}")
            } else {
                format!("no: headroom {headroom}")
            }
        }
        Some((index, bytes, _)) => {
            let at = snap
                .device_traces
                .get(recorded.replay.device)
                .and_then(|t| t.get(index as usize))
                .and_then(|e| user_frame(snap, e.frames))
                .map(|f| format!(" at {f}"))
                .unwrap_or_else(|| " with no Python frames (the autograd backward thread's)".to_string());
            let short = est
                .least_capacity_bytes
                .map(|least| {
                    format!(
                        "; it needs a capacity of {} ({} more)",
                        fmt_bytes(least),
                        fmt_bytes(least.saturating_sub(recorded.replay.capacity_bytes.unwrap_or(0)))
                    )
                })
                .unwrap_or_default();
            format!("YES, at entry {index}: a request of {}{at}{short}", fmt_bytes(bytes))
        }
    }
}

/// The innermost frame of the user's own code (else the innermost).
fn user_frame(snap: &Snapshot, stack: u32) -> Option<String> {
    let mut frames = snap.frames.stack(stack);
    let first = frames.next()?;
    let user = std::iter::once(first).chain(frames).find(|f| snapshot::frame_kind(f) == snapshot::FrameKind::User);
    Some(user.unwrap_or(first).short())
}

fn text(args: &EstimateArgs, setup: &Setup, c: &Captured, est: &Est) -> String {
    let e = c.snap.estimate.as_ref().expect("read_capture checks the marker");
    let mut s = head_lines(&args.command, e, setup);
    let _ = writeln!(
        s,
        "  capture            {:.1} s, of which {:.1} s the program's start-up (interpreter, imports){}",
        c.wall.as_secs_f64(),
        e.startup_s,
        if c.processes > 1 {
            format!("; {} processes used CUDA: the busiest is shown", c.processes)
        } else {
            String::new()
        }
    );
    let _ = writeln!(s, "  capacity           {}", capacity_words(setup, args.fraction));
    let _ = writeln!(s, "  peak allocated     {}", vramlab_reports::replay_doc::exact(est.peak_allocated_bytes));
    let _ = writeln!(s, "  peak reserved      {}", vramlab_reports::replay_doc::exact(est.peak_reserved_bytes));
    if est.peak_reserved_downwards_bytes != est.peak_reserved_bytes {
        let _ = writeln!(
            s,
            "                     {} with the segments placed downwards: where the driver puts them,\n\
             \x20                    which no capture can know, decides which of two equal free blocks\n\
             \x20                    PyTorch reuses (it breaks ties by address)",
            vramlab_reports::replay_doc::exact(est.peak_reserved_downwards_bytes)
        );
    }
    if let Some(b) = &est.upper_bound {
        upper_bound_lines(&mut s, b, est.peak_reserved_bytes);
    }
    let _ = writeln!(s, "  out of memory      {}", oom_words(&c.snap, est));
    let _ = writeln!(
        s,
        "  your requests      {} allocs, {} requested; {} of them live at the allocated peak",
        est.own.allocs,
        fmt_bytes(est.own.bytes),
        fmt_bytes(est.own.at_peak_bytes)
    );
    let _ = writeln!(
        s,
        "  modelled           {} allocs, {} requested; {} live at the allocated peak:\n    (requests a GPU \
         makes that the capture cannot see, each added by a rule)",
        est.modelled.allocs,
        fmt_bytes(est.modelled.bytes),
        fmt_bytes(est.modelled.at_peak_bytes)
    );
    for r in &e.rules {
        let _ = writeln!(s, "    {}", rule_line(r));
    }
    if args.sweep || est.results.len() > 1 {
        s.push('\n');
        s += &whatif_cmd::settings_table(&est.results, est.best, PROGRAMS);
        let wargs = whatif_args(args, setup, args.sweep);
        if let Some((head, why)) = whatif_cmd::recommendation(&wargs, &est.results, est.best).split_first() {
            let _ = writeln!(s, "\n{head}");
            for line in why {
                let _ = writeln!(s, "  {line}");
            }
        }
    }
    for a in &est.attribution {
        s.push('\n');
        s += &vramlab_reports::replay_doc::holders_text(a, args.top);
    }
    if let Some(path) = &args.out {
        let _ = writeln!(s, "\nwrote {} (the capture replayed, marked as an estimate)", path.display());
    }
    s
}

fn rule_line(r: &ModelledRule) -> String {
    format!("{} x {}: {}\n      {}", r.count, r.name, fmt_bytes(r.bytes), r.why)
}

/// `--json`: one object.
#[derive(Serialize)]
struct Json<'a> {
    schema_version: u32,
    command: &'a [String],
    estimate: &'a Estimate,
    capture_wall_s: f64,
    processes: usize,
    alloc_conf: String,
    capacity_bytes: u64,
    memory_fraction: Option<f64>,
    peak_allocated_bytes: u64,
    peak_reserved_bytes: u64,
    /// Peak reserved with the segments placed downwards (see the text output).
    peak_reserved_downwards_bytes: u64,
    /// Set when the capture counted requests it could not size (cuDNN's
    /// convolution workspaces): the peaks are then lower bounds, and each is at
    /// most `bytes` (the memory limit; an estimate's bound, not PyTorch's figure).
    peak_upper_bound: Option<&'a UpperBound>,
    /// The program's settings under the capacity: fits, or where it runs out.
    fits: bool,
    headroom_bytes: Option<u64>,
    out_of_memory: Option<JsonOom>,
    own_requests: Requests,
    modelled_requests: Requests,
    results: &'a [WhatIf],
    recommended: Option<&'a str>,
    attribution: &'a [Attribution],
    out: Option<&'a Path>,
}

#[derive(Serialize)]
struct JsonOom {
    trace_index: u64,
    requested_bytes: u64,
    frame: Option<String>,
    /// The least capacity under which it fits (bisection over replays).
    least_capacity_bytes: Option<u64>,
}

fn json<'a>(args: &'a EstimateArgs, setup: &Setup, c: &'a Captured, est: &'a Est) -> Json<'a> {
    let recorded = &est.results[0];
    let limit = recorded.replay.memory_limit_bytes.or(recorded.replay.capacity_bytes).unwrap_or(0);
    Json {
        schema_version: 1,
        command: &args.command,
        estimate: c.snap.estimate.as_ref().expect("read_capture checks the marker"),
        capture_wall_s: c.wall.as_secs_f64(),
        processes: c.processes,
        alloc_conf: setup.config.to_string(),
        capacity_bytes: setup.capacity_bytes,
        memory_fraction: args.fraction,
        peak_allocated_bytes: est.peak_allocated_bytes,
        peak_reserved_bytes: est.peak_reserved_bytes,
        peak_reserved_downwards_bytes: est.peak_reserved_downwards_bytes,
        peak_upper_bound: est.upper_bound.as_ref(),
        fits: recorded.fits(),
        headroom_bytes: recorded.fits().then(|| limit.saturating_sub(recorded.replay.peak_reserved_bytes)),
        out_of_memory: recorded.first_failure().map(|(index, bytes, _)| JsonOom {
            trace_index: index,
            requested_bytes: bytes,
            frame: c
                .snap
                .device_traces
                .get(recorded.replay.device)
                .and_then(|t| t.get(index as usize))
                .and_then(|e| user_frame(&c.snap, e.frames)),
            least_capacity_bytes: est.least_capacity_bytes,
        }),
        own_requests: est.own,
        modelled_requests: est.modelled,
        results: &est.results,
        recommended: est.best.map(|i| est.results[i].alloc_conf.as_str()),
        attribution: &est.attribution,
        out: args.out.as_deref(),
    }
}
