//! Real PyTorch memory snapshots, recorded on an NVIDIA H100 with PyTorch
//! 2.11.0+cu130 by `gpu-check/record_snapshots.py` (`run.sh snapshots`): an
//! MLP's SGD steps, a small CNN's Adam steps with `cudnn.benchmark` (which
//! calls `empty_cache` mid-trace), and a transformer encoder layer's AdamW
//! steps under bf16 autocast, each with and without `expandable_segments:True`.
//! Beside each `.pickle`, `.stats.json` holds the `torch.cuda.memory_stats()`
//! PyTorch printed when it dumped the snapshot.
//!
//! Every trace starts at the process's first CUDA allocation, so the replay
//! under the snapshot's own settings must reproduce it exactly: the fidelity
//! check (segment events, each allocation's segment and offset, the final
//! segments) agrees, and every statistic of the replay's allocator equals
//! PyTorch's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use vramlab_snapshot::{SnapshotReplayOptions, read_snapshot_file, replay_snapshot};

const FIXTURES: [&str; 6] =
    ["mlp-default", "mlp-expandable", "cnn-default", "cnn-expandable", "transformer-default", "transformer-expandable"];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots")
}

/// PyTorch's `memory_stats()` at the snapshot, and its allocator setting.
fn torch_stats(name: &str) -> (BTreeMap<String, i64>, String) {
    let text = std::fs::read_to_string(dir().join(format!("{name}.stats.json"))).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let stats = v["memory_stats"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_i64().unwrap_or_else(|| panic!("{name}: {k} is not an integer"))))
        .collect();
    (stats, v["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap().to_owned())
}

#[test]
fn real_pytorch_snapshots_replay_exactly_and_give_pytorchs_memory_stats() {
    for name in FIXTURES {
        let snapshot = read_snapshot_file(&dir().join(format!("{name}.pickle"))).unwrap();
        let (torch, conf) = torch_stats(name);
        let settings = snapshot.allocator_settings.as_ref().expect("PyTorch 2.11 writes its settings");
        assert_eq!(settings.expandable_segments, conf.contains("expandable_segments:True"), "{name}");

        let r = replay_snapshot(&snapshot, &SnapshotReplayOptions::default()).unwrap();
        assert_eq!(r.live_at_start, Default::default(), "{name}: nothing is live before the first entry");
        assert_eq!(r.skipped_entries, 0, "{name}: {:?}", r.first_skipped);
        let f = r.fidelity.as_ref().expect("a whole-trace replay under the snapshot's settings is checked");
        assert!(f.agrees(), "{name}: {f:#?}");
        assert!(f.recorded_segment_events > 0, "{name}");

        // Every statistic both name; PyTorch 2.11 has no key vramlab lacks.
        let ours = &r.final_memory_stats;
        let missing: Vec<_> = torch.keys().filter(|k| !ours.contains_key(*k)).collect();
        assert!(missing.is_empty(), "{name}: vramlab has no {missing:?}");
        // num_sync_all_streams is a lower bound on every recording (underivable.rs);
        // here no empty_cache() released nothing, so it is equal too.
        assert_eq!(r.underivable_stats.len(), 1, "{name}: {:?}", r.underivable_stats);
        assert!(r.underivable_stats[0].lower_bound);
        let differ: Vec<_> = torch
            .iter()
            .filter(|(k, v)| ours[*k] != **v)
            .map(|(k, v)| format!("{k}: vramlab {} torch {v}", ours[k]))
            .collect();
        assert!(
            differ.is_empty(),
            "{name}: {} of {} statistics differ:\n{}",
            differ.len(),
            torch.len(),
            differ.join("\n")
        );
        assert_eq!(r.final_allocated_bytes as i64, torch["allocated_bytes.all.current"], "{name}");
        assert_eq!(r.peak_reserved_bytes as i64, torch["reserved_bytes.all.peak"], "{name}");
    }
}
