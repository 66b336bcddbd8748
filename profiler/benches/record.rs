//! Recording cost: events per second into the recorder, bytes per event for a
//! 10-million-event recording, and what a recording subscriber adds to the
//! caching allocator's alloc+free pair.
//!
//! Run: `cargo bench -p vramlab-profiler --bench record`. The 10-million-event
//! figures (bytes/event, events/s, analysis and decimation time) are printed
//! before criterion's groups.
//!
//! Not here: the "overhead on a CPU training step ≤ 2%" bench needs the
//! engine's training step, which another issue builds.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramlab_engine::alloc::{AllocatorConfig, CachingAllocator, SimulatedMemory};
use vramlab_engine::hooks::{AllocatorAction, AllocatorEvent, Event, Hooks, KernelEvent, Subscriber, Tag, now_ns};
use vramlab_profiler::record::Recorder;
use vramlab_profiler::{Profiler, ProfilerConfig, process_resident_bytes};

/// Events per timed round: the recorder is replaced between rounds so memory
/// stays bounded however many iterations criterion asks for.
const ROUND: u64 = 1 << 20;

/// The `i`-th synthetic event: a cycle of alloc / free requested / free
/// completed over 64 live addresses, tags varying, two streams, and a kernel
/// every 16th event.
fn synthetic(i: u64, time_ns: u64) -> Event {
    if i % 16 == 15 {
        return Event::Kernel(KernelEvent {
            name: if i % 32 == 15 { "matmul" } else { "relu" },
            algorithm: "bench",
            device: 0,
            stream: 0,
            start_ns: time_ns,
            duration_ns: 1000 + i % 7,
            launch_ns: 100,
            flops: 1 << 20,
            bytes: 1 << 16,
        });
    }
    let slot = (i / 3) % 64;
    let action = match i % 3 {
        0 => AllocatorAction::Alloc,
        1 => AllocatorAction::FreeRequested,
        _ => AllocatorAction::FreeCompleted,
    };
    let size = 512 * (1 + slot);
    Event::Allocator(AllocatorEvent {
        action,
        time_ns,
        device: 0,
        stream: (slot & 1) as u32,
        addr: 0x7f00_0000_0000 + slot * (1 << 20),
        requested_bytes: size - 100,
        rounded_bytes: size,
        tag: Tag::ALL.get((slot % 8) as usize).copied(),
    })
}

fn ten_million() {
    const N: u64 = 10_000_000;
    let hub = Hooks::new();
    let rss_before = process_resident_bytes().unwrap_or(0);
    let profiler = Profiler::start(ProfilerConfig::on(hub.clone()).without_sampling()).unwrap();
    let t0 = Instant::now();
    let mut time_ns = now_ns();
    for i in 0..N {
        if i % 64 == 0 {
            time_ns = now_ns();
        }
        hub.emit(&synthetic(i, time_ns));
    }
    let record_time = t0.elapsed();
    let records = profiler.records();
    let heap = profiler.recording_bytes();
    let rss_after = process_resident_bytes().unwrap_or(0);
    let t1 = Instant::now();
    let profile = profiler.stop();
    let analysis_time = t1.elapsed();
    let t2 = Instant::now();
    let timeline = profile.timeline_decimated(0, 2000).unwrap();
    let decimate_time = t2.elapsed();
    let peak = profile.device(0).unwrap().peak_allocated.bytes;
    assert_eq!(timeline.allocated_bytes.max().map(|m| m.1), Some(peak));

    println!("10M synthetic events ({records} records; every 16th event a kernel, which takes 2 records):");
    println!(
        "  record: {:.1} ns/event, {:.1} M events/s (one hub.emit per event, recorder lock per event)",
        record_time.as_nanos() as f64 / N as f64,
        N as f64 / record_time.as_secs_f64() / 1e6
    );
    println!(
        "  storage: {} bytes = {:.1} MiB, {:.2} bytes/event; resident memory grew {:.1} MiB ({:.2} bytes/event)",
        heap,
        heap as f64 / (1 << 20) as f64,
        heap as f64 / N as f64,
        rss_after.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        rss_after.saturating_sub(rss_before) as f64 / N as f64
    );
    println!("  stop (both analysis passes): {:.2} s", analysis_time.as_secs_f64());
    println!(
        "  decimated timeline (2000 points, streaming): {:.2} s, {} allocated points, peak kept",
        decimate_time.as_secs_f64(),
        timeline.allocated_bytes.len()
    );
}

fn bench_record(c: &mut Criterion) {
    ten_million();

    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(1));
    let events: Vec<Event> = (0..4096).map(|i| synthetic(i, 1_000 + i)).collect();

    g.bench_function("on_event", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(ROUND);
                let rec = Recorder::new();
                let t = Instant::now();
                for i in 0..n {
                    rec.on_event(black_box(&events[(i & 4095) as usize]));
                }
                total += t.elapsed();
                done += n;
            }
            total
        })
    });

    // Batches of 4 events, as an allocator call delivers them (one lock per batch).
    g.bench_function("on_events_batch4", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(ROUND).div_ceil(4);
                let rec = Recorder::new();
                let t = Instant::now();
                for i in 0..n {
                    let at = ((i * 4) & 4095) as usize;
                    rec.on_events(black_box(&events[at..at + 4]));
                }
                total += t.elapsed();
                done += n * 4;
            }
            total
        })
    });
    g.finish();

    // The allocator's cached alloc+free pair (3 events) with and without a recorder.
    let mut g = c.benchmark_group("alloc_free_pair");
    g.throughput(Throughput::Elements(1));
    let sizes = [512u64, 4000, 65_536, 1 << 20, 3 << 20, 300];
    let pair = |alloc: &CachingAllocator, i: u64| {
        let a = alloc.malloc(sizes[(i % 6) as usize], 0, Some(Tag::Activation)).unwrap();
        alloc.free(black_box(a)).unwrap();
    };
    g.bench_function("no_subscriber", |b| {
        let alloc = CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default()).unwrap();
        let mut i = 0u64;
        b.iter(|| {
            pair(&alloc, i);
            i += 1;
        })
    });
    g.bench_function("profiler_recording", |b| {
        let hub = Hooks::new();
        let alloc = CachingAllocator::with_hooks(
            Arc::new(SimulatedMemory::unlimited()),
            AllocatorConfig::default(),
            hub.clone(),
            0,
        )
        .unwrap();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(ROUND / 4);
                let profiler = Profiler::start(ProfilerConfig::on(hub.clone()).without_sampling()).unwrap();
                let t = Instant::now();
                for i in 0..n {
                    pair(&alloc, i);
                }
                total += t.elapsed();
                drop(profiler);
                done += n;
            }
            total
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench_record
}
criterion_main!(benches);
