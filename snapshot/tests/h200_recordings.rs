//! Real PyTorch 2.11 snapshots from an H200 (`tests/data/torch-2.11-h200`,
//! its README says how each was made), each with the `torch.cuda.memory_stats()`
//! PyTorch read at the dump: the replay agrees with the recording and every
//! statistic the trace determines equals PyTorch's; the ones it cannot
//! determine are listed, and where the replay's value is a lower bound it is one.

mod common;

use std::collections::BTreeMap;

use common::{h200_dir, torch_stats};
use vramlab_snapshot::{SnapshotReplay, SnapshotReplayOptions, read_snapshot_file, replay_snapshot};

fn replay(dir: &std::path::Path, name: &str) -> (SnapshotReplay, BTreeMap<String, i64>) {
    let snapshot = read_snapshot_file(&dir.join(format!("{name}.pickle"))).unwrap();
    (replay_snapshot(&snapshot, &SnapshotReplayOptions::default()).unwrap(), torch_stats(dir, name))
}

/// The fidelity check agrees and every derivable statistic is PyTorch's;
/// returns the underivable keys.
fn check_exact(dir: &std::path::Path, name: &str) -> (SnapshotReplay, Vec<String>) {
    let (r, torch) = replay(dir, name);
    assert_eq!(r.skipped_entries, 0, "{name}: {:?}", r.first_skipped);
    let f = r.fidelity.as_ref().expect("a whole-trace replay is checked");
    assert!(f.agrees(), "{name}: {f:#?}");
    let ours = &r.final_memory_stats;
    let underivable: Vec<String> = r.underivable_stats.iter().map(|u| u.key.clone()).collect();
    let differ: Vec<_> = torch
        .iter()
        .filter(|(k, v)| !underivable.contains(k) && ours.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: vramlab {:?} torch {v}", ours.get(k)))
        .collect();
    assert!(differ.is_empty(), "{name}: {} derivable statistics differ:\n{}", differ.len(), differ.join("\n"));
    for u in r.underivable_stats.iter().filter(|u| u.lower_bound) {
        assert!(ours[&u.key] <= torch[&u.key], "{name}: {} is no lower bound", u.key);
    }
    (r, underivable)
}

#[test]
fn a_cuda_graph_capture_replays_exactly() {
    let dir = h200_dir();
    let (r, underivable) = check_exact(&dir, "cudagraph");
    // graph.__enter__'s empty_cache releases the warm-up's 20 MiB segment; the
    // capture then allocates one at the same address in the graph's pool.
    let f = r.fidelity.as_ref().unwrap();
    assert_eq!((f.recorded_segments, f.replayed_segments), (14, 14));
    assert_eq!(r.final_memory_stats["num_device_free"], 1);
    assert_eq!(r.private_pools, vec![(1, 0)]);
    let p = &r.pool_inference;
    assert_eq!((p.known_from_final_segments, p.known_private, p.freed_assumed_default), (14, 4, 1));
    assert_eq!(p.allocs_in_private_pools, 18, "the capture stream's allocations after capture_begin's two");
    assert_eq!(underivable, ["num_sync_all_streams"]);
}

#[test]
fn resnet50_under_amp_and_cudnn_benchmark_matches_on_every_derivable_key() {
    let dir = h200_dir();
    let (r, underivable) = check_exact(&dir, "resnet50-amp");
    // cuDNN's benchmark empty_cache() calls that released nothing: PyTorch read
    // 68, the trace shows 59 releases.
    assert_eq!(underivable, ["num_sync_all_streams"]);
    assert_eq!(r.final_memory_stats["num_sync_all_streams"], 59);
    assert!(r.underivable_stats[0].lower_bound);
}
