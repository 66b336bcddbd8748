//! Import plus replay of a 2-million-entry PyTorch memory snapshot (a ~115 MB
//! protocol-4 pickle written by scripts/make_snapshot_fixtures.py --big), the
//! fidelity check included: one after the other, and at once on two threads
//! as `vramlab replay` does (`read_and_replay`); the import alone and the
//! replay alone. The target (issue 25): read and replayed in 0.4 s on this
//! 2-core machine (a 20M-entry file in 4 s and 1.5 GiB, measured with
//! /usr/bin/time on `xtask replay`, see ARCHITECTURE.md).
//! And the replay page's timeline stacked by call path of the same file
//! (`path_timeline`).
//!
//! Run: `cargo bench -p vramlab-snapshot --bench snapshot` (needs python3 to
//! write the file once; set VRAMLAB_BENCH_SNAPSHOT to use another file).

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_snapshot::{
    ReadOptions, SnapshotReplayOptions, path_timeline, peek_allocator_settings, read_and_replay, read_snapshot,
    replay_snapshot,
};

const ENTRIES: usize = 2_000_000;

fn snapshot_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VRAMLAB_BENCH_SNAPSHOT") {
        return Some(PathBuf::from(p));
    }
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("snapshot-{ENTRIES}.pickle"));
    if path.exists() {
        return Some(path);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/make_snapshot_fixtures.py");
    let ok = Command::new("python3")
        .arg(&script)
        .args(["--big", &ENTRIES.to_string()])
        .arg(&path)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(path)
}

fn snapshot_bench(c: &mut Criterion) {
    let Some(path) = snapshot_file() else {
        eprintln!("snapshot bench skipped: python3 could not write the snapshot (set VRAMLAB_BENCH_SNAPSHOT)");
        return;
    };
    let opts = SnapshotReplayOptions::default();
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(10).measurement_time(Duration::from_secs(12));
    group.bench_function("import_and_replay_2m_entries", |b| {
        b.iter(|| {
            let snap =
                read_snapshot(BufReader::with_capacity(1 << 20, File::open(&path).expect("open"))).expect("valid");
            let r = replay_snapshot(&snap, &opts).expect("replays");
            assert!(r.fidelity.as_ref().is_some_and(|f| f.agrees()));
            r.peak_reserved_bytes
        })
    });
    // What `vramlab replay FILE` does: the replay runs on the entries as they
    // are read (overlap.rs), the allocator settings taken from the file's tail.
    let tail = std::fs::read(&path).expect("read");
    let settings = peek_allocator_settings(&tail[tail.len().saturating_sub(256 << 10)..]).map(|s| s.to_config());
    drop(tail);
    group.bench_function("read_and_replay_2m_entries", |b| {
        b.iter(|| {
            let input = BufReader::with_capacity(1 << 20, File::open(&path).expect("open"));
            let (_, r) = read_and_replay(input, ReadOptions::default(), settings.clone(), &opts).expect("valid");
            let r = r.expect("replays");
            assert!(r.fidelity.as_ref().is_some_and(|f| f.agrees()));
            r.peak_reserved_bytes
        })
    });
    group.bench_function("import_only_2m_entries", |b| {
        b.iter(|| {
            read_snapshot(BufReader::with_capacity(1 << 20, File::open(&path).expect("open")))
                .expect("valid")
                .segments
                .len()
        })
    });
    let snap = read_snapshot(BufReader::with_capacity(1 << 20, File::open(&path).expect("open"))).expect("valid");
    // The replay alone (the rewind, pool plan, OOM and release passes and the
    // fidelity check included), the snapshot read once.
    group.bench_function("replay_only_2m_entries", |b| {
        b.iter(|| replay_snapshot(&snap, &opts).expect("replays").peak_reserved_bytes)
    });
    // The replay page's stacked timeline (`xtask replay --report`): the page
    // of this file must render in under 2 s, so this pass must stay well under.
    group.bench_function("path_timeline_2m_entries", |b| {
        b.iter(|| path_timeline(&snap, 0, &[]).expect("device 0").applied.len())
    });
    group.finish();
}

criterion_group!(benches, snapshot_bench);
criterion_main!(benches);
