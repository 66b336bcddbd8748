//! The allocator's state at an entry (`replay_snapshot_states`, the replay
//! page's segment map at a chosen moment) rebuilt from its keyframes and
//! block changes equals the segments of a replay stopped at that entry, on
//! real PyTorch recordings (H100 and H200, default and expandable segments,
//! a recorded OOM, a CUDA graph's private pool); and the windows a long trace
//! keeps hold the pinned states within the budget.

mod common;

use std::path::Path;

use vramlab_snapshot::{
    SnapshotReplayOptions, read_snapshot_file, replay_snapshot_state_at, replay_snapshot_states, state_windows,
};

/// Checks the history of `path` at nine states; returns the reserved bytes at the end.
fn check(path: &Path) -> u64 {
    let snap = read_snapshot_file(path).unwrap();
    let opts = SnapshotReplayOptions::default();
    let entries = snap.device_traces[snap.busiest_device().unwrap()].len() as u64;
    let history = replay_snapshot_states(&snap, &opts, vec![(0, entries)]).unwrap();
    assert_eq!(history.windows.len(), 1, "{}: one window, every state", path.display());
    assert_eq!((history.windows[0].start, history.windows[0].end()), (0, entries), "{}", path.display());
    // Nine states spread over the trace, the first and the last among them.
    for k in 0..=8u64 {
        let ops = entries * k / 8;
        let rebuilt = history.state_at(ops).unwrap();
        let stopped = replay_snapshot_state_at(&snap, &opts, ops).unwrap().expect("the replay reaches it");
        assert_eq!(rebuilt, stopped, "{} after {ops} entries", path.display());
        assert!(ops == 0 || !rebuilt.is_empty(), "{}: segments after {ops} entries", path.display());
    }
    history.state_at(entries).unwrap().iter().map(|s| s.total_size).sum()
}

#[test]
fn the_state_at_an_entry_is_the_replays_segments_there() {
    let torch = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-snapshots");
    for name in ["transformer-default", "cnn-expandable"] {
        check(&torch.join(format!("{name}.pickle")));
    }
    let h200 = common::h200_dir();
    for name in ["oom-backoff", "cudagraph"] {
        let reserved = check(&h200.join(format!("{name}.pickle")));
        // The segments at the last entry are what PyTorch had reserved at the dump.
        assert_eq!(reserved as i64, common::torch_stats(&h200, name)["reserved_bytes.all.current"], "{name}");
    }
}

#[test]
fn a_long_trace_keeps_windows_around_its_pins_within_the_budget() {
    assert_eq!(state_windows(1000, &[10], 40_000), [(0, 1000)], "a short trace whole");
    let w = state_windows(2_000_000, &[1_500_000, 1_500_100, 7], 40_000);
    let kept: u64 = w.iter().map(|(a, b)| b - a + 1).sum();
    assert!(kept <= 40_000, "{kept} states kept");
    for pin in [1_500_000u64, 1_500_100, 7, 0] {
        assert!(w.iter().any(|&(a, b)| a + 200 <= pin.max(200) && pin + 200 <= b), "{pin} in {w:?}");
    }
    assert!(w.windows(2).all(|p| p[0].1 + 1 < p[1].0), "apart and in order: {w:?}");
    assert!(w.last().unwrap().0 > 1_900_000, "spread to the end: {w:?}");
}
