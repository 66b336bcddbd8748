//! The harness's own cost per timed sample (bookkeeping, not the work).
//!
//! Run: `cargo bench -p vramlab-suites --bench harness`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_suites::{HarnessConfig, measure};

fn harness_overhead(c: &mut Criterion) {
    // 1000 samples of empty work, one iteration each: the time per sample is the
    // harness's bookkeeping (two clock reads and a push) plus the call.
    let cfg = HarnessConfig {
        warmup: Duration::ZERO,
        fixed_samples: Some(1000),
        min_sample_time: Duration::ZERO,
        ..HarnessConfig::quick()
    };
    c.bench_function("harness_1000_samples_of_empty_work", |b| {
        b.iter(|| black_box(measure(&cfg, || Ok::<(), ()>(())).unwrap()))
    });
}

criterion_group!(benches, harness_overhead);
criterion_main!(benches);
