//! PyTorch's own `torch.cuda.memory_stats()` beside a snapshot, compared key by
//! key with the replay's. `vramlab record`'s hook writes `NAME.stats.json` next
//! to each `NAME.pickle` at the moment of the dump ([`stats_file_beside`]); its
//! shape is `{"memory_stats": {key: int, …}, "PYTORCH_CUDA_ALLOC_CONF": …,
//! "device_index": …}` ([`read_pytorch_stats`]). Every key PyTorch gave is
//! compared (`SnapshotReplay::check_memory_stats`, in `report.rs`): the keys the trace
//! cannot determine (`underivable.rs`) are listed apart with both values, every
//! other key must be equal, and the result is part of the fidelity report, so
//! "agrees" includes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use super::underivable::UnderivableStat;

/// What PyTorch read at a dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PytorchStats {
    /// The file they were read from, as named.
    pub source: String,
    /// `torch.cuda.memory_stats()`, key by key.
    pub stats: BTreeMap<String, i64>,
    /// The CUDA device index they are of (`None`: not recorded; PyTorch's
    /// `memory_stats()` reads the current device, device 0 unless the program chose another).
    pub device_index: Option<usize>,
}

/// A stats file that cannot be read.
#[derive(Debug, Error)]
pub enum StatsFileError {
    #[error("{path}: not JSON ({source}); it should be what `vramlab record` writes beside a snapshot")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path}: no \"memory_stats\" object of integers (key {key:?} is not one); write \
         {{\"memory_stats\": torch.cuda.memory_stats()}} as JSON"
    )]
    Shape { path: String, key: String },
}

/// `DIR/NAME.stats.json` for the snapshot `DIR/NAME.pickle` (any other name:
/// the whole file name with `.stats.json` appended).
pub fn stats_file_beside(pickle: &Path) -> PathBuf {
    let name = pickle.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".pickle").unwrap_or(&name);
    pickle.with_file_name(format!("{stem}.stats.json"))
}

/// Reads a stats file's text (`path` names it in errors).
pub fn read_pytorch_stats(path: &str, text: &str) -> Result<PytorchStats, StatsFileError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|source| StatsFileError::Json { path: path.to_owned(), source })?;
    let shape = |key: &str| StatsFileError::Shape { path: path.to_owned(), key: key.to_owned() };
    let object = v.get("memory_stats").and_then(|m| m.as_object()).ok_or_else(|| shape("memory_stats"))?;
    let mut stats = BTreeMap::new();
    for (k, n) in object {
        stats.insert(k.clone(), n.as_i64().ok_or_else(|| shape(k))?);
    }
    let device_index = v.get("device_index").and_then(|d| d.as_u64()).map(|d| d as usize);
    Ok(PytorchStats { source: path.to_owned(), stats, device_index })
}

/// One key whose replayed value is not PyTorch's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatDifference {
    pub key: String,
    /// `None`: the replay has no such key.
    pub replayed: Option<i64>,
    pub pytorch: i64,
}

/// One key the trace cannot determine, with both values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnderivableValue {
    pub key: String,
    pub replayed: i64,
    pub pytorch: i64,
    /// Whether the replay's value is a lower bound of PyTorch's (and is one here).
    pub lower_bound: bool,
}

/// PyTorch's `memory_stats()` compared with the replay's, key by key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryStatsCheck {
    /// The file PyTorch's stats were read from.
    pub source: String,
    /// The keys compared for equality: PyTorch's, less the underivable ones.
    pub keys: u64,
    /// Of those, the equal ones.
    pub equal: u64,
    /// Every key that differs, by name.
    pub differing: Vec<StatDifference>,
    /// The keys the trace cannot determine, listed apart.
    pub underivable: Vec<UnderivableValue>,
}

impl MemoryStatsCheck {
    pub fn agrees(&self) -> bool {
        self.differing.is_empty()
    }
}

/// Why PyTorch's stats were not compared with a replay.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StatsNotCompared {
    #[error(
        "the replay is not checked against the recording (other settings, a window or a capacity), so its \
         memory_stats are not PyTorch's to compare"
    )]
    NotTheRecording,
    #[error("the stats are of device {stats}, the replay is of device {replay} (--device {stats} compares them)")]
    OtherDevice { stats: usize, replay: usize },
}

/// `pytorch` key by key against the replay's `ours`, whose `underivable` keys are listed apart.
pub(crate) fn compare(
    ours: &BTreeMap<String, i64>,
    underivable: &[UnderivableStat],
    pytorch: &PytorchStats,
) -> MemoryStatsCheck {
    let mut check = MemoryStatsCheck {
        source: pytorch.source.clone(),
        keys: 0,
        equal: 0,
        differing: Vec::new(),
        underivable: Vec::new(),
    };
    for (key, &theirs) in &pytorch.stats {
        let replayed = ours.get(key).copied();
        if let Some(u) = underivable.iter().find(|u| &u.key == key) {
            check.underivable.push(UnderivableValue {
                key: key.clone(),
                replayed: replayed.unwrap_or(0),
                pytorch: theirs,
                lower_bound: u.lower_bound && replayed.is_some_and(|v| v <= theirs),
            });
            continue;
        }
        check.keys += 1;
        if replayed == Some(theirs) {
            check.equal += 1;
        } else {
            check.differing.push(StatDifference { key: key.clone(), replayed, pytorch: theirs });
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_file_sits_beside_the_pickle() {
        assert_eq!(stats_file_beside(Path::new("d/h-pid4-oom1.pickle")), Path::new("d/h-pid4-oom1.stats.json"));
        assert_eq!(stats_file_beside(Path::new("x.pkl")), Path::new("x.pkl.stats.json"));
    }

    #[test]
    fn every_key_is_compared_and_underivable_ones_listed_apart() {
        let map = |v: &[(&str, i64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect::<BTreeMap<_, _>>();
        let ours = map(&[("a.current", 5), ("b.peak", 7), ("num_sync_all_streams", 3), ("ours_only", 1)]);
        let theirs = map(&[("a.current", 5), ("b.peak", 8), ("num_sync_all_streams", 4), ("theirs_only", 2)]);
        let u = [UnderivableStat { key: "num_sync_all_streams".into(), reason: "r".into(), lower_bound: true }];
        let c = compare(&ours, &u, &PytorchStats { source: "s".into(), stats: theirs, device_index: None });
        assert_eq!((c.keys, c.equal), (3, 1));
        assert_eq!(
            c.differing,
            [
                StatDifference { key: "b.peak".into(), replayed: Some(7), pytorch: 8 },
                StatDifference { key: "theirs_only".into(), replayed: None, pytorch: 2 }
            ]
        );
        assert_eq!(
            c.underivable,
            [UnderivableValue { key: "num_sync_all_streams".into(), replayed: 3, pytorch: 4, lower_bound: true }]
        );
        assert!(!c.agrees());
    }

    #[test]
    fn a_bad_file_says_what_it_should_hold() {
        let e = read_pytorch_stats("s.json", "{\"memory_stats\": {\"a\": 1.5}}").unwrap_err();
        assert!(e.to_string().contains("key \"a\" is not one"), "{e}");
        assert!(read_pytorch_stats("s.json", "[").unwrap_err().to_string().contains("not JSON"));
        let ok = read_pytorch_stats("s.json", "{\"memory_stats\": {\"a\": 1}, \"device_index\": 1}").unwrap();
        assert_eq!((ok.stats["a"], ok.device_index), (1, Some(1)));
    }
}
