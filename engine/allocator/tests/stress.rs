//! Multi-threaded stress test of the caching allocator over real host memory:
//! several threads share one `Arc<CachingAllocator>`, fill every allocation with
//! a thread-specific byte and a per-allocation serial, and verify both before
//! freeing it. Two live allocations that overlap (a block handed out twice, or a
//! bad split/merge) overwrite each other's bytes and fail the check. At the end
//! everything is freed, the cache emptied, and the statistics must balance.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use vramlab_allocator::consts::{GIB, MIB};
use vramlab_allocator::{
    Allocation, AllocatorConfig, BlockState, CachingAllocator, HostMemory, MemoryStats, ROUNDUP_BUCKETS,
    STAT_ARRAY_NAMES, StreamId,
};

const THREADS: usize = 4;
const OPS_PER_THREAD: usize = 2000;
const CAPACITY: u64 = GIB;
/// Most live allocations a thread holds, and most live bytes.
const MAX_LIVE: usize = 48;
const MAX_LIVE_BYTES: u64 = 160 * MIB;
/// Verification compares against this much of the thread's pattern at a time.
const PATTERN_CHUNK: usize = 64 * 1024;

/// The workspace's one seeded generator, with the draws the stress test needs.
#[derive(Debug)]
struct Rng(vramlab_rng::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

fn random_size(rng: &mut Rng) -> u64 {
    match rng.percent() {
        0..60 => rng.range(1, 4096),
        60..90 => rng.range(4097, MIB),
        90..98 => rng.range(MIB + 1, 4 * MIB),
        _ => rng.range(4 * MIB + 1, 24 * MIB),
    }
}

/// An allocation with what was written into it.
#[derive(Debug)]
struct Filled {
    alloc: Allocation,
    byte: u8,
    serial: u64,
}

/// Fills the whole block (its rounded size, which the caller owns) with `byte`,
/// with `serial` in the first and last 8 bytes.
fn fill(alloc: Allocation, byte: u8, serial: u64) -> Filled {
    let (ptr, len) = (alloc.addr() as *mut u8, alloc.size() as usize);
    assert!(len >= 16 && alloc.addr().is_multiple_of(512), "block {alloc:?} too small or unaligned");
    // SAFETY: the allocator handed us [addr, addr + size) of real host memory,
    // which nothing else may use while the allocation is live.
    unsafe {
        std::ptr::write_bytes(ptr, byte, len);
        ptr.cast::<u64>().write_unaligned(serial);
        ptr.add(len - 8).cast::<u64>().write_unaligned(serial);
    }
    Filled { alloc, byte, serial }
}

/// Checks that the block still holds exactly what [`fill`] wrote.
fn verify(f: &Filled, pattern: &[u8]) {
    let (ptr, len) = (f.alloc.addr() as *const u8, f.alloc.size() as usize);
    // SAFETY: as in `fill`; the allocation is still live.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    let head = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
    let tail = u64::from_ne_bytes(bytes[len - 8..].try_into().expect("8 bytes"));
    assert!(
        head == f.serial && tail == f.serial,
        "allocation {:#x}+{len}: serial {:#x} became {head:#x}/{tail:#x} (block handed out twice?)",
        f.alloc.addr(),
        f.serial
    );
    assert_eq!(pattern[0], f.byte);
    for (i, chunk) in bytes[8..len - 8].chunks(PATTERN_CHUNK).enumerate() {
        if chunk != &pattern[..chunk.len()] {
            let off = chunk.iter().position(|&b| b != f.byte).expect("a differing byte");
            panic!(
                "allocation {:#x}+{len} of thread byte {:#04x}: byte {} is {:#04x} (overwritten by another allocation)",
                f.alloc.addr(),
                f.byte,
                8 + i * PATTERN_CHUNK + off,
                chunk[off]
            );
        }
    }
}

/// Checks the stats' internal consistency (safe to call while others run: the
/// copy is taken under the allocator's lock).
fn check_stats(s: &MemoryStats) {
    for name in STAT_ARRAY_NAMES {
        let a = s.stat_array(name).expect("listed");
        assert_eq!(a.all.current, a.small_pool.current + a.large_pool.current, "{name}: all = small + large");
        assert_eq!(a.all.allocated, a.small_pool.allocated + a.large_pool.allocated, "{name}.allocated");
        assert_eq!(a.all.freed, a.small_pool.freed + a.large_pool.freed, "{name}.freed");
        for (pool, st) in [("all", a.all), ("small_pool", a.small_pool), ("large_pool", a.large_pool)] {
            assert!(st.current >= 0 && st.peak >= st.current, "{name}.{pool}: {st:?}");
            assert_eq!(st.current, st.allocated - st.freed, "{name}.{pool}: current = allocated − freed");
        }
    }
    assert!(s.allocated_bytes.all.current <= s.active_bytes.all.current, "allocated ≤ active");
    assert!(s.active_bytes.all.current <= s.reserved_bytes.all.current, "active ≤ reserved");
    assert!(s.reserved_bytes.all.current as u64 <= CAPACITY, "reserved within the device");
}

/// Checks that the snapshot's blocks tile their segments and agree with the stats
/// (both taken under the lock, but separately: only self-consistency is checked).
fn check_snapshot(a: &CachingAllocator) {
    for seg in a.snapshot() {
        let mut at = seg.address;
        let mut allocated = 0;
        for b in &seg.blocks {
            assert_eq!(b.address, at, "blocks tile segment {:#x}", seg.address);
            at += b.size;
            if b.state == BlockState::ActiveAllocated {
                allocated += b.size;
            }
        }
        assert_eq!(at, seg.address + seg.total_size, "block sizes sum to the segment size");
        assert_eq!(allocated, seg.allocated_size, "segment allocated_size");
    }
}

#[derive(Debug, Default)]
struct Report {
    mallocs: i64,
    frees: i64,
    ooms: i64,
    bytes_written: u64,
}

/// Allocations passed between threads: one thread allocates and fills, another
/// verifies and frees.
type Mailbox = Mutex<Vec<Filled>>;

fn worker(a: &CachingAllocator, t: usize, barrier: &Barrier, mailbox: &Mailbox) -> Report {
    let mut rng = Rng(vramlab_rng::Rng::new(0x5EED_0000 + t as u64 * 7919));
    let byte = 0xA1 + t as u8;
    let pattern = vec![byte; PATTERN_CHUNK];
    let patterns: Vec<Vec<u8>> = (0..THREADS).map(|u| vec![0xA1 + u as u8; PATTERN_CHUNK]).collect();
    let mut live: Vec<Filled> = Vec::new();
    let mut live_bytes = 0u64;
    let mut report = Report::default();
    barrier.wait();
    for op in 0..OPS_PER_THREAD {
        let p = rng.percent();
        let want_alloc = live.is_empty() || (p < 55 && live.len() < MAX_LIVE && live_bytes < MAX_LIVE_BYTES);
        if want_alloc {
            let size = random_size(&mut rng);
            let stream = rng.range(0, 2) as StreamId;
            match a.malloc(size, stream, None) {
                Ok(x) => {
                    assert!(x.size() >= size && x.size() % 512 == 0, "{x:?} for {size} B");
                    report.mallocs += 1;
                    report.bytes_written += x.size();
                    live_bytes += x.size();
                    let serial = ((t as u64) << 56) | report.mallocs as u64;
                    let f = fill(x, byte, serial);
                    if rng.percent() < 5 {
                        // Someone else verifies and frees this one.
                        live_bytes -= f.alloc.size();
                        mailbox.lock().unwrap().push(f);
                    } else {
                        live.push(f);
                    }
                }
                Err(e) => {
                    assert!(e.as_oom().is_some(), "only out-of-memory may fail: {e}");
                    report.ooms += 1;
                    // Make room: give back half of what this thread holds.
                    for _ in 0..live.len().div_ceil(2) {
                        let f = live.swap_remove(rng.range(0, live.len() as u64 - 1) as usize);
                        verify(&f, &pattern);
                        live_bytes -= f.alloc.size();
                        a.free(f.alloc).expect("live allocation");
                        report.frees += 1;
                    }
                }
            }
        } else {
            let i = rng.range(0, live.len() as u64 - 1) as usize;
            if p < 62 {
                // Used by another stream: the block waits for that stream's event.
                let f = &live[i];
                a.record_stream(&f.alloc, (f.alloc.stream() + 1) % 3);
            }
            let f = live.swap_remove(i);
            verify(&f, &pattern);
            live_bytes -= f.alloc.size();
            a.free(f.alloc).expect("live allocation");
            report.frees += 1;
        }
        if op % 64 == 0 {
            let taken = mailbox.lock().unwrap().pop();
            if let Some(f) = taken {
                verify(&f, &patterns[(f.byte - 0xA1) as usize]);
                a.free(f.alloc).expect("live allocation from another thread");
                report.frees += 1;
            }
        }
        if op % 97 == 0 {
            check_stats(&a.stats());
        }
        if op % 499 == t {
            check_snapshot(a);
        }
        if op % 700 == 350 {
            a.empty_cache();
        }
        if op % 500 == 0 {
            // Everything this thread holds is still intact.
            for f in &live {
                verify(f, &pattern);
            }
        }
    }
    for f in live.drain(..) {
        verify(&f, &pattern);
        a.free(f.alloc).expect("live allocation");
        report.frees += 1;
    }
    report
}

fn run(config: AllocatorConfig) {
    let a = Arc::new(CachingAllocator::new(Arc::new(HostMemory::with_capacity(CAPACITY)), config).unwrap());
    let barrier = Arc::new(Barrier::new(THREADS));
    let mailbox: Arc<Mailbox> = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (a, barrier, mailbox) = (a.clone(), barrier.clone(), mailbox.clone());
            thread::spawn(move || worker(&a, t, &barrier, &mailbox))
        })
        .collect();
    let reports: Vec<Report> = handles.into_iter().map(|h| h.join().expect("worker panicked")).collect();
    // What is left in the mailbox.
    for f in mailbox.lock().unwrap().drain(..) {
        verify(&f, &vec![f.byte; PATTERN_CHUNK]);
        a.free(f.alloc).unwrap();
    }
    let mallocs: i64 = reports.iter().map(|r| r.mallocs).sum();
    let ooms: i64 = reports.iter().map(|r| r.ooms).sum();
    assert!(mallocs >= (THREADS * OPS_PER_THREAD / 3) as i64, "too few allocations succeeded: {reports:?}");

    let s = a.stats();
    check_stats(&s);
    assert_eq!(s.allocated_bytes.all.current, 0, "everything was freed");
    assert_eq!(s.allocation.all.current, 0);
    assert_eq!(s.allocation.all.allocated, mallocs, "one allocation per successful malloc");
    assert_eq!(s.allocation.all.allocated, s.allocation.all.freed);
    assert_eq!(s.allocated_bytes.all.allocated, s.allocated_bytes.all.freed);
    assert_eq!(s.num_ooms, ooms);

    a.empty_cache();
    let s = a.stats();
    check_stats(&s);
    for name in STAT_ARRAY_NAMES {
        assert_eq!(s.stat_array(name).unwrap().all.current, 0, "{name} after empty_cache");
    }
    assert_eq!(s.memory_reserved(), 0);
    assert_eq!(s.segment.all.current, 0);
    assert_eq!(s.active.all.allocated, s.active.all.freed, "every block became inactive");
    assert_eq!(s.requested_bytes.all.allocated, s.requested_bytes.all.freed);
    assert!(a.snapshot().is_empty(), "no segment is left");
    assert_eq!(a.mem_info().free_bytes, CAPACITY, "the device has all its memory back");
}

#[test]
fn four_threads_share_one_allocator() {
    run(AllocatorConfig::default());
}

#[cfg(unix)]
#[test]
fn four_threads_share_one_allocator_expandable_segments() {
    run(AllocatorConfig {
        expandable_segments: true,
        max_split_size: Some(64 * MIB),
        roundup_power2_divisions: [4; ROUNDUP_BUCKETS],
        ..AllocatorConfig::default()
    });
}

#[test]
fn four_threads_share_one_allocator_max_split_and_gc() {
    run(AllocatorConfig {
        max_split_size: Some(32 * MIB),
        per_process_memory_fraction: Some(0.25),
        garbage_collection_threshold: Some(0.5),
        ..AllocatorConfig::default()
    });
}
