//! What-if replay: a snapshot's requests replayed under other allocator settings
//! and capacities (in parallel, the file parsed once), the recommendation of
//! the setting with the lowest peak reserved memory that fits. Who holds the
//! peak is `attribution.rs`'s.
//!
//! The smaller-batch answer at a recorded OOM ([`smaller_batch`]) is a model,
//! and says so: the requests of the memory that grows with the batch
//! (activations, temporaries, inputs, by the attribution's categories) are
//! scaled by k = b'/b, everything else (parameters, gradients, optimizer state,
//! memory of unknown use) kept, and the trace replayed under the recorded
//! settings and limit for k in eighths, then bisected to 1/64 below the largest
//! eighth that fits. Where the categories cannot tell (no frames), it says why
//! instead of answering.

use std::sync::Arc;

use serde::Serialize;

use super::attribution::{Category, NoFrames, Point, PointKind, attribute, entry_categories};
use crate::format::model::{Action, Snapshot};
use crate::replay::report::{SnapshotReplay, SnapshotReplayError, SnapshotReplayOptions};
use crate::replay::run::{replay_snapshot, replay_snapshot_timeline};
use vramlab_allocator::AllocatorConfig;
use vramlab_display::format::fmt_bytes;
use vramlab_replay::OnOom;
use vramlab_replay::timeline::ReplayTimeline;

/// The settings `--sweep` tries besides the recorded ones, as
/// `PYTORCH_CUDA_ALLOC_CONF` strings. (`garbage_collection_threshold` acts only
/// with a per-process memory fraction below 1 — [`SnapshotReplayOptions::memory_fraction`]
/// or an inferred per-process limit — so the grid leaves it out; it can be given explicitly.)
pub const SWEEP_GRID: [&str; 11] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:8",
    "roundup_power2_divisions:16",
    "max_split_size_mb:128,roundup_power2_divisions:4",
    "max_split_size_mb:512,roundup_power2_divisions:8",
    "expandable_segments:True,roundup_power2_divisions:4",
    "expandable_segments:True,max_split_size_mb:256",
];

/// One setting's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// `PYTORCH_CUDA_ALLOC_CONF` syntax; "" is PyTorch's defaults.
    pub alloc_conf: String,
    /// Whether these are the snapshot's own settings.
    pub recorded: bool,
    /// Would this setting have avoided the recorded OOM(s)? Every recorded
    /// failed request served and no other request failing; `None` when the
    /// recording has no OOM or its requests could not be made again (no capacity).
    pub avoids_recorded_oom: Option<bool>,
    pub replay: SnapshotReplay,
}

impl WhatIf {
    /// Every request served: no out-of-memory, the recorded failed requests included.
    pub fn fits(&self) -> bool {
        self.replay.ooms.is_empty() && self.replay.oom_requests.iter().all(|o| o.served)
    }

    /// The first request this setting could not serve: (trace index, bytes,
    /// whether it is a recorded failed request).
    pub fn first_failure(&self) -> Option<(u64, u64, bool)> {
        let other = self.replay.ooms.first().map(|o| (o.trace_index, o.requested_bytes, false));
        let recorded =
            self.replay.oom_requests.iter().find(|o| !o.served).map(|o| (o.trace_index, o.requested_bytes, true));
        match (other, recorded) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Replays `snapshot` once per configuration (`None` = the recorded settings),
/// in parallel on the machine's cores. Every replay stops at its first
/// out-of-memory.
pub fn what_if(
    snapshot: &Snapshot,
    base: &SnapshotReplayOptions,
    configs: &[Option<AllocatorConfig>],
) -> Result<Vec<WhatIf>, SnapshotReplayError> {
    run_all(snapshot, base, configs, false).map(|v| v.into_iter().map(|(w, _)| w).collect())
}

/// [`what_if`], and each setting's memory over the trace (without the segments
/// at the peak), for reports.
pub fn what_if_timelines(
    snapshot: &Snapshot,
    base: &SnapshotReplayOptions,
    configs: &[Option<AllocatorConfig>],
) -> Result<Vec<(WhatIf, ReplayTimeline)>, SnapshotReplayError> {
    run_all(snapshot, base, configs, true).map(|v| v.into_iter().map(|(w, t)| (w, t.expect("asked for"))).collect())
}

type Outcome = Result<(WhatIf, Option<ReplayTimeline>), SnapshotReplayError>;

fn run_all(
    snapshot: &Snapshot,
    base: &SnapshotReplayOptions,
    configs: &[Option<AllocatorConfig>],
    timelines: bool,
) -> Result<Vec<(WhatIf, Option<ReplayTimeline>)>, SnapshotReplayError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(configs.len().max(1));
    let mut results: Vec<Option<Outcome>> = (0..configs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let chunks: Vec<_> = results.chunks_mut(configs.len().div_ceil(threads).max(1)).collect();
        let mut start = 0;
        for chunk in chunks {
            let first = start;
            start += chunk.len();
            scope.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    let config = &configs[first + k];
                    let opts = SnapshotReplayOptions { config: config.clone(), on_oom: OnOom::Stop, ..base.clone() };
                    let outcome = if timelines {
                        replay_snapshot_timeline(snapshot, &opts, false).map(|(r, t)| (r, Some(t)))
                    } else {
                        replay_snapshot(snapshot, &opts).map(|r| (r, None))
                    };
                    *slot = Some(outcome.map(|(replay, timeline)| {
                        let avoids_recorded_oom = (!replay.oom_requests.is_empty()).then(|| {
                            replay.oom_requests.iter().all(|o| o.served)
                                && replay.ooms.iter().all(|o| o.trace_index > replay.oom_requests[0].trace_index)
                        });
                        let recorded = config.is_none();
                        (
                            WhatIf { alloc_conf: replay.alloc_conf.clone(), recorded, avoids_recorded_oom, replay },
                            timeline,
                        )
                    }));
                }
            });
        }
    });
    results.into_iter().map(|r| r.expect("every slot is filled by its thread")).collect()
}

/// The setting to recommend: the lowest peak reserved among those that fit,
/// fewer segment allocations on ties. Its index in `results`.
pub fn recommend(results: &[WhatIf]) -> Option<usize> {
    results
        .iter()
        .enumerate()
        .filter(|(_, w)| w.fits())
        .min_by_key(|(i, w)| (w.replay.peak_reserved_bytes, w.replay.segment_allocs, *i))
        .map(|(i, _)| i)
}

/// What the smaller-batch answer is, said wherever it is shown.
pub const SMALLER_BATCH_MODEL: &str = "a model, not PyTorch's number: activation and temporary requests scaled by k, \
     other memory unchanged; a real run at that batch may differ";

/// k is counted in 64ths of the recorded batch.
const K_UNIT: u32 = 64;
/// The fractions tried first (7/8 … 1/8), in 64ths; the recorded batch (64/64) is tried too.
const K_GRID: [u32; 7] = [56, 48, 40, 32, 24, 16, 8];
/// Memory of unknown use above this share of the memory live at the OOM: no answer.
const MAX_UNKNOWN_SHARE: f64 = 0.25;

/// One fraction of the batch, replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchTrial {
    /// k = `sixty_fourths` / 64 of the recorded batch.
    pub sixty_fourths: u32,
    pub peak_reserved_bytes: u64,
    /// Every request served, the recorded failed ones included.
    pub fits: bool,
    /// Fits: the limit less the peak reserved memory.
    pub headroom_bytes: Option<u64>,
    /// Does not fit: the first request not served (trace index, bytes asked for at this k).
    pub first_failure: Option<(u64, u64)>,
    /// Does not fit at a recorded failed request: how much short.
    pub short_bytes: Option<u64>,
}

impl BatchTrial {
    pub fn fraction(&self) -> f64 {
        f64::from(self.sixty_fourths) / f64::from(K_UNIT)
    }

    /// "3/4", "5/8", "23/64": the fraction in lowest terms.
    pub fn fraction_text(&self) -> String {
        let g = gcd(self.sixty_fourths, K_UNIT);
        if self.sixty_fourths == K_UNIT { "1".to_owned() } else { format!("{}/{}", self.sixty_fourths / g, K_UNIT / g) }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}

/// Would a smaller batch have fitted? See the module docs: a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum SmallerBatch {
    Modelled {
        /// The recorded failed request the answer is about (its `oom` entry).
        oom_entry: u64,
        request_bytes: u64,
        request_category: Category,
        /// The failed request had no frames: the allocation whose category it
        /// was given (the last before it with one).
        request_category_from: Option<u64>,
        /// The per-process limit the replays run under (recorded or given).
        limit_bytes: u64,
        /// Requested bytes live just before the failed request, and of them
        /// those scaled (activations, temporaries, inputs).
        live_bytes: u64,
        scaled_live_bytes: u64,
        /// The recorded batch first, then each fraction tried, largest first.
        trials: Vec<BatchTrial>,
        /// The largest fraction that fits, if any tried does.
        largest_fitting: Option<BatchTrial>,
    },
    /// The categories (or the limit) cannot tell: why.
    CannotTell { reason: String },
}

/// The smaller-batch answer at the first recorded OOM of `snapshot` (the
/// device and limit of `base`; the recorded settings).
pub fn smaller_batch(snapshot: &Snapshot, base: &SnapshotReplayOptions) -> Result<SmallerBatch, SnapshotReplayError> {
    let base =
        SnapshotReplayOptions { config: None, on_oom: OnOom::Stop, record: false, request_sizes: None, ..base.clone() };
    let recorded = replay_snapshot(snapshot, &base)?;
    let cannot = |reason: String| Ok(SmallerBatch::CannotTell { reason });
    let Some(oom) = recorded.oom_requests.iter().find(|o| !o.served).or(recorded.oom_requests.first()) else {
        return cannot(match (&recorded.capacity_not_inferred, recorded.recorded_ooms) {
            (_, 0) => "the recording has no out-of-memory error: there is no failed request to fit".to_owned(),
            (Some(why), _) => format!("the device's limit is not known ({why}); give a capacity"),
            (None, _) => "the recorded out-of-memory errors could not be made again".to_owned(),
        });
    };
    let device = recorded.device;
    let limit_bytes = recorded.memory_limit_bytes.or(recorded.capacity_bytes).unwrap_or(u64::MAX);
    let trace = &snapshot.device_traces[device];
    let mut categories = entry_categories(snapshot, device);
    // PyTorch often keeps no frames for a failed request (the real recordings'
    // `oom` entries have none): it is taken as what the allocation before it was.
    let mut taken_from: Vec<Option<u64>> = vec![None; trace.len()];
    let mut last_known = None;
    for (i, e) in trace.iter().enumerate() {
        let known = categories[i].filter(|c| c.0 != Category::Unknown);
        match e.action {
            Action::Alloc if known.is_some() => last_known = Some((i, known)),
            Action::Oom if snapshot.frames.stack(e.frames).next().is_none() => {
                if let Some((from, c)) = last_known {
                    categories[i] = c;
                    taken_from[i] = Some(from as u64);
                }
            }
            _ => {}
        }
    }
    let at = oom.trace_index as usize;
    let request_category = categories.get(at).copied().flatten().map_or(Category::Unknown, |c| c.0);
    let request_category_from = taken_from.get(at).copied().flatten();
    let frameless = snapshot.frames.stack(oom.frames).next().is_none();
    if request_category == Category::Unknown {
        let why = if frameless {
            "has no frames, nor has any allocation before it"
        } else {
            "has frames that name no forward, backward or optimizer code"
        };
        return cannot(format!(
            "the failed request at entry {} {why}: whether it grows with the batch cannot be told",
            oom.trace_index
        ));
    }
    let at_oom =
        attribute(snapshot, device, &[Point { kind: PointKind::OutOfMemory, trace_index: Some(oom.trace_index) }]);
    let at_oom = &at_oom[0];
    let bytes_of = |pick: &dyn Fn(Category) -> bool| -> u64 {
        at_oom.categories.iter().filter(|c| pick(c.category)).map(|c| c.bytes).sum()
    };
    let unknown = bytes_of(&|c| c == Category::Unknown);
    if at_oom.total_bytes > 0 && unknown as f64 > MAX_UNKNOWN_SHARE * at_oom.total_bytes as f64 {
        let why = at_oom
            .groups
            .iter()
            .filter(|g| g.category == Category::Unknown)
            .max_by_key(|g| g.bytes)
            .map(|g| match g.no_frames {
                Some(NoFrames::LiveBeforeRecording) => "most of it has no frames: live before the recording began",
                Some(NoFrames::RecordedWithoutStacks) => "most of it has no frames: recorded without stacks",
                Some(NoFrames::NoPythonFrames) => {
                    "most of it has no Python frames: made off the Python thread (autograd backward, most often)"
                }
                None => "its frames name no forward, backward or optimizer code",
            })
            .unwrap_or("no frames");
        return cannot(format!(
            "{} of the {} live at the out-of-memory error at entry {} ({:.0}%) is of unknown use ({why}): \
             what grows with the batch cannot be told",
            fmt_bytes(unknown),
            fmt_bytes(at_oom.total_bytes),
            oom.trace_index,
            unknown as f64 * 100.0 / at_oom.total_bytes as f64
        ));
    }
    let sizes_at = |k: u32| -> Arc<[u64]> {
        trace
            .iter()
            .zip(&categories)
            .map(|(e, c)| match c {
                Some((cat, _)) if scales_with_batch(*cat) && k < K_UNIT => {
                    (u128::from(e.size) * u128::from(k)).div_ceil(u128::from(K_UNIT)).max(1) as u64
                }
                _ => e.size,
            })
            .collect()
    };
    let trial = |k: u32| -> Result<BatchTrial, SnapshotReplayError> {
        let opts = SnapshotReplayOptions { device: Some(device), request_sizes: Some(sizes_at(k)), ..base.clone() };
        let r = replay_snapshot(snapshot, &opts)?;
        let w = WhatIf { alloc_conf: r.alloc_conf.clone(), recorded: true, avoids_recorded_oom: None, replay: r };
        let fits = w.fits();
        let failure = w.first_failure();
        let short = failure.and_then(|(i, _, rec)| {
            rec.then(|| w.replay.oom_requests.iter().find(|o| o.trace_index == i).and_then(|o| o.short_bytes)).flatten()
        });
        let first_failure = failure.map(|(i, bytes, rec)| {
            let asked = if rec {
                w.replay.oom_requests.iter().find(|o| o.trace_index == i).map_or(bytes, |o| o.requested_bytes)
            } else {
                bytes
            };
            (i, asked)
        });
        Ok(BatchTrial {
            sixty_fourths: k,
            peak_reserved_bytes: w.replay.peak_reserved_bytes,
            fits,
            headroom_bytes: fits.then(|| limit_bytes.saturating_sub(w.replay.peak_reserved_bytes)),
            first_failure: if fits { None } else { first_failure },
            short_bytes: if fits { None } else { short },
        })
    };
    let mut ks = vec![K_UNIT];
    ks.extend(K_GRID);
    let mut trials = parallel(&ks, &|k: &u32| trial(*k))?;
    // Bisect between the largest fraction that fits and the next one tried above it.
    let best = |t: &[BatchTrial]| t.iter().filter(|t| t.fits).max_by_key(|t| t.sixty_fourths).cloned();
    if let Some(lo) = best(&trials) {
        let mut lo = lo.sixty_fourths;
        let mut hi = trials.iter().map(|t| t.sixty_fourths).filter(|&k| k > lo).min().unwrap_or(lo);
        while hi > lo + 1 {
            let mid = (lo + hi) / 2;
            let t = trial(mid)?;
            if t.fits {
                lo = mid
            } else {
                hi = mid
            }
            trials.push(t);
        }
    }
    trials.sort_by_key(|t| std::cmp::Reverse(t.sixty_fourths));
    Ok(SmallerBatch::Modelled {
        oom_entry: oom.trace_index,
        request_bytes: oom.requested_bytes,
        request_category,
        request_category_from,
        limit_bytes,
        live_bytes: at_oom.total_bytes,
        scaled_live_bytes: bytes_of(&|c| scales_with_batch(c)),
        largest_fitting: best(&trials),
        trials,
    })
}

/// Memory that grows with the batch: activations, temporaries, inputs.
fn scales_with_batch(c: Category) -> bool {
    matches!(c, Category::Activation | Category::Temporary | Category::Input)
}

/// `f` of each item, on the machine's cores, in order.
fn parallel<T: Sync, R: Send, E: Send>(items: &[T], f: &(dyn Fn(&T) -> Result<R, E> + Sync)) -> Result<Vec<R>, E> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len().max(1));
    let chunk = items.len().div_ceil(threads).max(1);
    let results: Vec<Vec<Result<R, E>>> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            items.chunks(chunk).map(|c| scope.spawn(move || c.iter().map(f).collect::<Vec<_>>())).collect();
        handles.into_iter().map(|h| h.join().expect("a what-if replay panicked")).collect()
    });
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::format::model::{Frame, FrameTable, TraceEntry};

    const MIB: u64 = 1 << 20;
    const MODULE: &str = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py";
    const LINEAR: &str = "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";

    /// Stacks: 1 parameters (`.cuda()`), 2 a forward through nn.Linear, 3 the
    /// autograd engine (backward), 4 a forward with no frame but the user's own.
    fn frames() -> FrameTable {
        let f = |file: &str, line, name: &str| Frame { filename: Arc::from(file), line, name: Arc::from(name) };
        FrameTable {
            frames: vec![
                f(MODULE, 965, "_apply"),
                f(MODULE, 1097, "cuda"),
                f("/home/me/train.py", 20, "build"),
                f(LINEAR, 125, "forward"),
                f("/home/me/train.py", 41, "step"),
                f("engine.cpp", 0, "torch::autograd::Engine::evaluate_function"),
                f("/home/me/train.py", 50, "helper"),
            ],
            stacks: vec![Box::new([]), Box::new([0, 1, 2]), Box::new([3, 4]), Box::new([5]), Box::new([6])],
        }
    }

    fn e(action: Action, addr: u64, size: u64, frames: u32) -> TraceEntry {
        TraceEntry { action, addr, size, stream: 0, time_us: 0, frames }
    }

    fn snapshot(trace: Vec<TraceEntry>) -> Snapshot {
        Snapshot::of_one_device(trace, Vec::new(), frames())
    }

    fn limited(mib: u64) -> SnapshotReplayOptions {
        SnapshotReplayOptions { capacity_bytes: Some(mib * MIB), ..Default::default() }
    }

    /// Parameters of `param` MiB, two activations of `act` MiB, then a failed request.
    fn program(param: u64, act: u64, request: u64, request_frames: u32) -> Snapshot {
        use Action::*;
        snapshot(vec![
            e(Alloc, 0x1000_0000, param * MIB, 1),
            e(Alloc, 0x2000_0000, act * MIB, 2),
            e(Alloc, 0x3000_0000, act * MIB, 2),
            e(Oom, 0, request * MIB, request_frames),
        ])
    }

    fn modelled(s: SmallerBatch) -> (Vec<BatchTrial>, Option<BatchTrial>, Category, u64, u64) {
        match s {
            SmallerBatch::Modelled {
                trials, largest_fitting, request_category, live_bytes, scaled_live_bytes, ..
            } => (trials, largest_fitting, request_category, live_bytes, scaled_live_bytes),
            SmallerBatch::CannotTell { reason } => panic!("no answer: {reason}"),
        }
    }

    #[test]
    fn a_forward_oom_fits_at_the_largest_fraction_found_by_bisection() {
        // 200 MiB of parameters, 2 × 200 MiB of activations, a 500 MiB activation
        // failing on a 1000 MiB device: 200 + k (400 + 500) ≤ 1000 with each large
        // segment rounded up to 2 MiB. At 7/8: 200 + 2 × 176 + 438 = 990 MiB,
        // 10 MiB spare; at 57/64: 200 + 2 × 180 + 446 = 1006 MiB, too much.
        let (trials, best, category, live, scaled) =
            modelled(smaller_batch(&program(200, 200, 500, 2), &limited(1000)).unwrap());
        assert_eq!(category, Category::Activation);
        assert_eq!((live, scaled), (600 * MIB, 400 * MIB));
        let best = best.unwrap();
        assert_eq!((best.sixty_fourths, best.fraction_text()), (56, "7/8".to_owned()));
        assert_eq!(best.peak_reserved_bytes, 990 * MIB);
        assert_eq!(best.headroom_bytes, Some(10 * MIB));
        // The recorded batch fails as recorded, 100 MiB short; the bisection tried 60, 58, 57.
        assert_eq!(trials[0].sixty_fourths, 64);
        assert!(!trials[0].fits);
        assert_eq!(trials[0].short_bytes, Some(100 * MIB));
        assert_eq!(trials[0].first_failure, Some((3, 500 * MIB)));
        let ks: Vec<u32> = trials.iter().map(|t| t.sixty_fourths).collect();
        assert_eq!(ks, [64, 60, 58, 57, 56, 48, 40, 32, 24, 16, 8]);
        assert!(trials.iter().all(|t| t.fits == (t.sixty_fourths <= 56)), "{trials:?}");
        let t57 = trials.iter().find(|t| t.sixty_fourths == 57).unwrap();
        assert_eq!(t57.short_bytes, Some(6 * MIB));
        // The request asked for at 57/64: 445.3125 MiB.
        assert_eq!(t57.first_failure, Some((3, 500 * MIB * 57 / 64)));
    }

    #[test]
    fn a_failed_request_without_frames_is_taken_as_the_allocation_before_it() {
        // As PyTorch records it: the `oom` entry has no frames. The activation before it says forward.
        let s = smaller_batch(&program(200, 200, 500, 0), &limited(1000)).unwrap();
        let SmallerBatch::Modelled { request_category, request_category_from, largest_fitting, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!((request_category, request_category_from), (Category::Activation, Some(2)));
        assert_eq!(largest_fitting.unwrap().sixty_fourths, 56);
    }

    #[test]
    fn a_gradient_sized_backward_request_is_not_scaled() {
        // 300 MiB of parameters; the backward's 300 MiB request is a parameter's
        // size: a gradient, kept. 300 + 2 × 200 k + 300 ≤ 900: k = 3/4 exactly, no spare.
        let (_, best, category, _, _) = modelled(smaller_batch(&program(300, 200, 300, 3), &limited(900)).unwrap());
        assert_eq!(category, Category::Gradient);
        let best = best.unwrap();
        assert_eq!((best.fraction_text(), best.headroom_bytes), ("3/4".to_owned(), Some(0)));
        // Another size in the backward pass is a temporary, and scales.
        let (_, best, category, _, _) = modelled(smaller_batch(&program(300, 200, 310, 3), &limited(900)).unwrap());
        assert_eq!(category, Category::Temporary);
        assert!(best.unwrap().sixty_fourths > 48);
    }

    #[test]
    fn nothing_that_scales_means_no_fraction_fits() {
        // The failed request is parameters' (`.cuda()`): a smaller batch cannot make room for it.
        let (trials, best, category, _, _) = modelled(smaller_batch(&program(300, 20, 700, 1), &limited(900)).unwrap());
        assert_eq!(category, Category::Parameter);
        assert_eq!(best, None);
        assert!(trials.iter().all(|t| !t.fits));
    }

    #[test]
    fn unknown_categories_give_no_answer_and_say_why() {
        use Action::*;
        // The failed request has no frames, nor has anything before it.
        let s = snapshot(vec![e(Alloc, 0x1000_0000, 600 * MIB, 0), e(Oom, 0, 500 * MIB, 0)]);
        let SmallerBatch::CannotTell { reason } = smaller_batch(&s, &limited(1000)).unwrap() else { panic!() };
        assert!(reason.contains("entry 1 has no frames, nor has any allocation before it"), "{reason}");
        // Its frames name no forward, backward or optimizer code.
        let s = smaller_batch(&program(200, 200, 500, 4), &limited(1000)).unwrap();
        let SmallerBatch::CannotTell { reason } = s else { panic!("{s:?}") };
        assert!(reason.contains("frames that name no forward, backward or optimizer code"), "{reason}");
        // Most of the memory live at the OOM has no frames.
        let s = snapshot(vec![
            e(Alloc, 0x1000_0000, 600 * MIB, 0),
            e(Alloc, 0x2000_0000, 100 * MIB, 2),
            e(Oom, 0, 500 * MIB, 2),
        ]);
        let SmallerBatch::CannotTell { reason } = smaller_batch(&s, &limited(1000)).unwrap() else { panic!() };
        assert_eq!(
            reason,
            "600.00 MiB of the 700.00 MiB live at the out-of-memory error at entry 2 (86%) is of unknown use \
             (most of it has no Python frames: made off the Python thread (autograd backward, most often)): what \
             grows with the batch cannot be told"
        );
        // No OOM at all.
        let s = snapshot(vec![e(Alloc, 0x1000_0000, 600 * MIB, 2)]);
        let SmallerBatch::CannotTell { reason } = smaller_batch(&s, &limited(1000)).unwrap() else { panic!() };
        assert!(reason.contains("no out-of-memory error"), "{reason}");
    }
}
