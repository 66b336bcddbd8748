//! The caching allocator's hot path: a cached alloc+free pair in steady state,
//! with sizes from both pools, against glibc's malloc+free of the same sizes.
//!
//! Run: `cargo bench -p vramlab-engine --bench allocator`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use vramlab_allocator::consts::MIB;
use vramlab_allocator::hooks::{AllocatorEvent, Event, Subscriber};
use vramlab_allocator::{AllocatorConfig, CachingAllocator, HostMemory};

/// Request sizes cycled through: small pool (≤ 1 MiB) and large pool, with odd sizes.
const SIZES: [u64; 8] = [512, 4000, 65_536, MIB, 3 * MIB + 17, 8 * MIB, 24 * MIB, 300];

/// A subscriber that records every event into a fixed ring (what a profiler's
/// recorder does, minus its compression), behind the same kind of lock the
/// allocator uses.
struct Ring {
    events: spin::mutex::SpinMutex<Vec<AllocatorEvent>>,
    next: AtomicUsize,
}

impl Ring {
    fn new(capacity: usize) -> Ring {
        let blank = AllocatorEvent {
            action: vramlab_allocator::hooks::AllocatorAction::Alloc,
            time_ns: 0,
            device: 0,
            stream: 0,
            addr: 0,
            requested_bytes: 0,
            rounded_bytes: 0,
            tag: None,
        };
        Ring { events: spin::mutex::SpinMutex::new(vec![blank; capacity]), next: AtomicUsize::new(0) }
    }
}

impl Subscriber for Ring {
    fn on_event(&self, event: &Event) {
        self.on_events(std::slice::from_ref(event));
    }

    fn on_events(&self, batch: &[Event]) {
        let mut events = self.events.lock();
        let len = events.len();
        let mut i = self.next.load(Ordering::Relaxed);
        for event in batch {
            if let Event::Allocator(e) = event {
                events[i % len] = *e;
                i += 1;
            }
        }
        self.next.store(i, Ordering::Relaxed);
    }
}

fn allocator() -> CachingAllocator {
    let a = CachingAllocator::new(Arc::new(HostMemory::with_capacity(1 << 30)), AllocatorConfig::default()).unwrap();
    // Warm up: one segment per size class exists, so every pair below is cached.
    for &s in &SIZES {
        let x = a.malloc(s, 0, None).unwrap();
        a.free(x).unwrap();
    }
    a
}

fn pair_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_free_pair");

    let a = allocator();
    let mut i = 0;
    group.bench_function("caching_no_subscriber", |b| {
        b.iter(|| {
            let x = a.malloc(SIZES[i % SIZES.len()], 0, None).unwrap();
            black_box(x.addr());
            a.free(x).unwrap();
            i += 1;
        })
    });

    let a = allocator();
    a.hooks().subscribe(Arc::new(Ring::new(1 << 16)));
    let mut i = 0;
    group.bench_function("caching_recording_subscriber", |b| {
        b.iter(|| {
            let x = a.malloc(SIZES[i % SIZES.len()], 0, None).unwrap();
            black_box(x.addr());
            a.free(x).unwrap();
            i += 1;
        })
    });

    let mut i = 0;
    group.bench_function("glibc_malloc_free", |b| {
        b.iter(|| {
            let layout = Layout::from_size_align(SIZES[i % SIZES.len()] as usize, 512).unwrap();
            // SAFETY: non-zero size; freed with the same layout right after.
            unsafe {
                let p = System.alloc(layout);
                black_box(p);
                System.dealloc(p, layout);
            }
            i += 1;
        })
    });
    group.finish();
}

criterion_group!(benches, pair_bench);
criterion_main!(benches);
