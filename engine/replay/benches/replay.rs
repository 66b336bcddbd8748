//! Replay of a 1-million-event trace file, parse included.
//!
//! Run: `cargo bench -p vramlab-replay --bench replay`.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_allocator::hooks::Tag;
use vramlab_replay::{ReplayOptions, TraceOp, replay, write_trace};

#[path = "../tests/support/synthetic.rs"]
mod synthetic;
use synthetic::SyntheticTrace;

const EVENTS: usize = 1_000_000;

fn replay_bench(c: &mut Criterion) {
    let path = std::env::temp_dir().join(format!("vramlab-bench-trace-{}.jsonl", std::process::id()));
    write_trace(BufWriter::new(File::create(&path).expect("create trace")), SyntheticTrace::new(EVENTS, 7))
        .expect("write trace");
    let opts = ReplayOptions::default();

    let mut group = c.benchmark_group("replay");
    group.sample_size(10).measurement_time(Duration::from_secs(8));
    group.bench_function("file_1m_events", |b| {
        b.iter(|| {
            let file = BufReader::new(File::open(&path).expect("open trace"));
            let report = replay(file, &opts).expect("valid trace");
            assert_eq!(report.events, EVENTS as u64);
            report
        })
    });
    group.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, replay_bench);
criterion_main!(benches);
