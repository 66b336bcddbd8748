//! Fuzz target: any bytes through the snapshot importer, and what imports
//! through the replay. Errors are fine; a panic, a hang or an out-of-memory is a bug.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run snapshot_import corpus/snapshot_import ../tests/data/snapshots`

#![no_main]

use libfuzzer_sys::fuzz_target;
use vramlab_snapshot::{SnapshotReplayOptions, read_snapshot, replay_snapshot};

fuzz_target!(|data: &[u8]| {
    if let Ok(snapshot) = read_snapshot(data) {
        for device in 0..snapshot.device_traces.len().min(2) {
            let opts = SnapshotReplayOptions { device: Some(device), ..Default::default() };
            let _ = replay_snapshot(&snapshot, &opts);
        }
    }
});
