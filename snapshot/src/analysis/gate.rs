//! The figures a memory gate judges of one snapshot (`vramlab check` on
//! snapshots, `vramlab record --baseline`), per device with trace entries, from
//! the replay under the snapshot's own settings: the peaks allocated and
//! reserved, the memory reserved at the end, cudaMalloc calls
//! (`num_device_alloc`), `num_alloc_retries`, out-of-memory errors
//! (`num_ooms`), the fragmentation at the reserved peak (reserved − allocated),
//! and who holds the allocated peak by call path ([`crate::attribute`]).
//!
//! A figure the trace cannot determine (it does not start at the process's
//! first allocation: `underivable.rs`) is `None` with the reason — unless
//! PyTorch's own `memory_stats()` read at the dump is given, whose value it then
//! is. [`MemoryFigures`] is plain serde data: a saved memory baseline is this,
//! as JSON.

use serde::{Deserialize, Serialize};

use super::attribution::{Point, PointKind, attribute};
use crate::format::model::Snapshot;
use crate::replay::report::{SnapshotReplayError, SnapshotReplayOptions};
use crate::replay::run::replay_snapshot;
use crate::replay::stats_check::PytorchStats;

/// What a memory-figures document says it is (`kind`), and its version.
pub const FIGURES_KIND: &str = "vramlab-memory-figures";
pub const FIGURES_VERSION: u32 = 1;

/// Call paths kept per rank and device (the largest at the allocated peak).
pub const PATHS_KEPT: usize = 50;

/// The figures judged, in the order they are shown, each with the
/// `memory_stats()` key that holds it in PyTorch (if one does).
pub const FIGURES: [(&str, Option<&str>); 7] = [
    ("peak_allocated_bytes", Some("allocated_bytes.all.peak")),
    ("peak_reserved_bytes", Some("reserved_bytes.all.peak")),
    ("reserved_at_end_bytes", Some("reserved_bytes.all.current")),
    ("cudamalloc_calls", Some("num_device_alloc")),
    ("num_alloc_retries", Some("num_alloc_retries")),
    ("num_ooms", Some("num_ooms")),
    ("fragmentation_at_peak_bytes", None),
];

/// The figures of every snapshot of a run (a file, a `record` folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFigures {
    /// [`FIGURES_KIND`].
    pub kind: String,
    /// [`FIGURES_VERSION`].
    pub version: u32,
    /// What was measured: the files or folder, or the command `record` ran.
    pub source: String,
    pub ranks: Vec<RankFigures>,
}

impl MemoryFigures {
    pub fn new(source: String, ranks: Vec<RankFigures>) -> MemoryFigures {
        MemoryFigures { kind: FIGURES_KIND.to_owned(), version: FIGURES_VERSION, source, ranks }
    }
}

/// One figure: its value, or why it is not known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateFigure {
    pub name: String,
    pub value: Option<u64>,
    /// Why `value` is `None`.
    pub not_known: Option<String>,
    /// Whether the value is PyTorch's own (`memory_stats()` read at the dump)
    /// rather than the replay's.
    pub from_pytorch: bool,
}

/// One call path's requested bytes live at the allocated peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathBytes {
    /// The row's name (the innermost frame of the user's code, or the stand-in).
    pub label: String,
    /// The user's frames, innermost first.
    pub user_frames: Vec<String>,
    pub bytes: u64,
    pub blocks: u64,
}

/// One rank's (one snapshot's) device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankFigures {
    /// The snapshot's file name.
    pub file: String,
    /// From a `-rank<R>-` in the file name.
    pub rank: Option<String>,
    pub device: usize,
    pub figures: Vec<GateFigure>,
    /// Whether the replay agrees with the recording (`None`: not checked).
    pub fidelity_agrees: Option<bool>,
    /// The call paths at the allocated peak, largest first ([`PATHS_KEPT`] at most).
    pub paths: Vec<PathBytes>,
    /// The snapshot is an estimate (captured with no GPU): what it assumed
    /// ([`crate::Estimate::headline`]); `None` for a recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<String>,
}

impl RankFigures {
    /// The value of figure `name`, when known.
    pub fn value(&self, name: &str) -> Option<u64> {
        self.figures.iter().find(|f| f.name == name).and_then(|f| f.value)
    }
}

/// The figures of every device of `snapshot` that has trace entries (`file`
/// and `rank` name it); `pytorch`, the `memory_stats()` read at its dump (of
/// one device), fills and overrides what it holds for that device.
pub fn snapshot_figures(
    file: &str,
    rank: Option<String>,
    snapshot: &Snapshot,
    pytorch: Option<&PytorchStats>,
) -> Result<Vec<RankFigures>, SnapshotReplayError> {
    let devices: Vec<usize> =
        (0..snapshot.device_traces.len()).filter(|&d| !snapshot.device_traces[d].is_empty()).collect();
    if devices.is_empty() {
        return Err(SnapshotReplayError::NoTrace);
    }
    let mut out = Vec::new();
    for device in devices {
        let r = replay_snapshot(snapshot, &SnapshotReplayOptions { device: Some(device), ..Default::default() })?;
        let theirs = pytorch.filter(|p| p.device_index.unwrap_or(0) == device);
        let unknown = |key: &str| r.underivable_stats.iter().find(|u| u.key == key && !u.lower_bound);
        let figures = FIGURES
            .iter()
            .map(|&(name, key)| {
                let pytorch_value = key.and_then(|k| theirs?.stats.get(k)).map(|&v| v.max(0) as u64);
                if let Some(v) = pytorch_value {
                    return GateFigure { name: name.to_owned(), value: Some(v), not_known: None, from_pytorch: true };
                }
                // The fragmentation at the peak needs the peak.
                let why = unknown(key.unwrap_or("reserved_bytes.all.peak")).map(|u| u.reason.clone());
                let value = match key {
                    _ if why.is_some() => None,
                    Some(k) => r.final_memory_stats.get(k).map(|&v| v.max(0) as u64),
                    None => Some(r.fragmentation_at_peak_bytes),
                };
                GateFigure { name: name.to_owned(), value, not_known: why, from_pytorch: false }
            })
            .collect();
        let point = Point { kind: PointKind::AllocatedPeak, trace_index: r.peak_allocated_index };
        let paths = attribute(snapshot, device, &[point])
            .pop()
            .map(|a| {
                a.groups
                    .into_iter()
                    .take(PATHS_KEPT)
                    .map(|g| PathBytes { label: g.label, user_frames: g.user_frames, bytes: g.bytes, blocks: g.blocks })
                    .collect()
            })
            .unwrap_or_default();
        out.push(RankFigures {
            file: file.to_owned(),
            rank: rank.clone(),
            device,
            figures,
            fidelity_agrees: r.fidelity.as_ref().map(|f| f.agrees()),
            paths,
            estimate: snapshot.estimate.as_ref().map(|e| e.headline()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CNN: &[u8] = include_bytes!("../../../tests/data/torch-snapshots/cnn-default.pickle");

    #[test]
    fn a_whole_trace_gives_every_figure_and_the_paths_at_the_peak() {
        let snap = crate::read_snapshot(CNN).unwrap();
        let f = snapshot_figures("cnn-default.pickle", None, &snap, None).unwrap();
        let r = &f[0];
        assert!(r.figures.iter().all(|g| g.value.is_some() && !g.from_pytorch), "{:?}", r.figures);
        assert_eq!(r.figures.len(), FIGURES.len());
        let total: u64 = r.paths.iter().map(|p| p.bytes).sum();
        assert!(total > 0 && total <= r.value("peak_allocated_bytes").unwrap());
        // PyTorch's own values, where given, are the figures.
        let mut stats = PytorchStats::default();
        stats.stats.insert("num_alloc_retries".into(), 3);
        let g = snapshot_figures("cnn-default.pickle", None, &snap, Some(&stats)).unwrap();
        assert_eq!(g[0].value("num_alloc_retries"), Some(3));
        assert_eq!(g[0].value("peak_reserved_bytes"), r.value("peak_reserved_bytes"));
    }

    #[test]
    fn a_cut_trace_leaves_the_peaks_and_counts_unknown_with_the_reason() {
        let mut snap = crate::read_snapshot(CNN).unwrap();
        let device = snap.busiest_device().unwrap();
        let half = snap.device_traces[device].len() / 2;
        snap.device_traces[device].drain(..half);
        let f = snapshot_figures("cut", None, &snap, None).unwrap();
        let r = &f[0];
        assert!(r.value("reserved_at_end_bytes").is_some());
        for name in ["peak_allocated_bytes", "cudamalloc_calls", "fragmentation_at_peak_bytes"] {
            let g = r.figures.iter().find(|g| g.name == name).unwrap();
            assert!(g.value.is_none() && g.not_known.as_deref().is_some_and(|w| w.contains("first")), "{g:?}");
        }
    }
}
