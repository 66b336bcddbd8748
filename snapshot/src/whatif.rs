//! What-if replay: a snapshot's requests replayed under other allocator settings
//! and capacities (in parallel, the file parsed once), the recommendation of
//! the setting with the lowest peak reserved memory that fits. Who holds the
//! peak is `attribution.rs`'s.

use serde::Serialize;

use super::model::Snapshot;
use super::replay::{
    SnapshotReplay, SnapshotReplayError, SnapshotReplayOptions, replay_snapshot, replay_snapshot_timeline,
};
use vramlab_allocator::AllocatorConfig;
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
