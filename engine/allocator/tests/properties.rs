//! Property tests for the caching allocator: random sequences of operations
//! (alloc, free, record_stream, empty_cache, stat resets, stream events) over
//! random configurations and device capacities, with the allocator's invariants
//! checked against `snapshot()` and `stats()` after every step, plus a
//! best-fit oracle for the block each `malloc` hands out and PyTorch's rules for
//! what an out-of-memory error may change (`c10/cuda/CUDACachingAllocator.cpp`).

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use vramlab_allocator::consts::MIB;
use vramlab_allocator::{
    Allocation, AllocatorConfig, BlockInfo, BlockState, CachingAllocator, MemoryStats, PoolKind, ROUNDUP_BUCKETS,
    STAT_ARRAY_NAMES, SegmentInfo, SimulatedMemory, Stat, StreamId,
};

/// Streams 0, 1 and 2.
const STREAMS: StreamId = 3;
const MIN_BLOCK: u64 = 512;

// ----- the operations -----

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        stream: StreamId,
    },
    /// Frees live allocation `pick % live`.
    Free {
        pick: usize,
    },
    /// `record_stream` (mostly on a stream other than the allocation's own).
    RecordStream {
        pick: usize,
        other: u32,
    },
    /// `record_stream` (mostly on another stream), then free.
    RecordThenFree {
        pick: usize,
        other: u32,
    },
    EmptyCache,
    ResetPeak,
    ResetAccumulated,
    /// Completes every stream event recorded so far (the blocks become free at
    /// the next malloc's `process_events`).
    CompleteEvents,
    /// `count` allocations of one size, each checked (fills pools with many blocks).
    AllocMany {
        count: u8,
        size: u64,
        stream: StreamId,
    },
    /// Frees every other live allocation in address order (fragments the pools).
    FreeAlternate {
        parity: bool,
    },
}

#[derive(Debug, Clone)]
struct Case {
    config: AllocatorConfig,
    capacity: u64,
    /// Whether stream events stay pending until `CompleteEvents`.
    hold_events: bool,
    ops: Vec<Op>,
}

fn size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        6 => 1u64..=4096,
        5 => 1u64..=MIB,
        3 => (MIB - 512)..=(MIB + 512),
        2 => (10 * MIB - 4096)..=(10 * MIB + 4096),
        2 => (20 * MIB - 4096)..=(20 * MIB + 4096),
        // Around the max_split_size choices.
        2 => (prop::sample::select(vec![21u64, 32, 33, 64, 128]), -(2 * MIB as i64)..=(2 * MIB as i64))
            .prop_map(|(m, d)| (m * MIB).saturating_add_signed(d)),
        4 => (MIB + 1)..=(200 * MIB),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (size_strategy(), 0..STREAMS).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        7 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (any::<usize>(), any::<u32>()).prop_map(|(pick, other)| Op::RecordStream { pick, other }),
        2 => (any::<usize>(), any::<u32>()).prop_map(|(pick, other)| Op::RecordThenFree { pick, other }),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::ResetPeak),
        1 => Just(Op::ResetAccumulated),
        2 => Just(Op::CompleteEvents),
    ]
}

/// Many small blocks: enough free blocks per pool to push the free sets past
/// their small-vector size into the B-tree and back.
fn fragmenting_op_strategy() -> impl Strategy<Value = Op> {
    let small = prop_oneof![4 => 1u64..=4096, 2 => 1u64..=64 * 1024, 1 => 1u64..=4 * MIB];
    prop_oneof![
        3 => (1u8..=64, small.clone(), 0..2 as StreamId)
            .prop_map(|(count, size, stream)| Op::AllocMany { count, size, stream }),
        3 => (small, 0..2 as StreamId).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => any::<bool>().prop_map(|parity| Op::FreeAlternate { parity }),
        1 => (any::<usize>(), any::<u32>()).prop_map(|(pick, other)| Op::RecordThenFree { pick, other }),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::CompleteEvents),
    ]
}

fn fragmenting_case_strategy(max_ops: usize) -> impl Strategy<Value = Case> {
    (
        config_strategy(),
        (256u64..=4096).prop_map(|m| m * MIB),
        any::<bool>(),
        prop::collection::vec(fragmenting_op_strategy(), 1..max_ops),
    )
        .prop_map(|(config, capacity, hold_events, ops)| Case { config, capacity, hold_events, ops })
}

fn divisions_strategy() -> impl Strategy<Value = [u64; ROUNDUP_BUCKETS]> {
    prop_oneof![
        Just([0u64; ROUNDUP_BUCKETS]),
        Just([4u64; ROUNDUP_BUCKETS]),
        prop::array::uniform16(prop::sample::select(vec![0u64, 1, 2, 4, 8, 16])),
    ]
}

fn config_strategy() -> impl Strategy<Value = AllocatorConfig> {
    let random = (
        prop::sample::select(vec![
            None,
            Some(21 * MIB),
            Some(32 * MIB),
            Some(33 * MIB),
            Some(64 * MIB),
            Some(128 * MIB),
        ]),
        divisions_strategy(),
        any::<bool>(),
        prop_oneof![Just(None), (0.5f64..=1.0).prop_map(Some)],
        prop_oneof![Just(None), (0.3f64..0.9).prop_map(Some)],
    )
        .prop_map(|(max_split_size, divisions, expandable, fraction, gc)| AllocatorConfig {
            max_split_size,
            roundup_power2_divisions: divisions,
            expandable_segments: expandable,
            per_process_memory_fraction: fraction,
            garbage_collection_threshold: gc,
            ..AllocatorConfig::default()
        });
    prop_oneof![1 => Just(AllocatorConfig::default()), 4 => random]
}

fn capacity_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![3 => (64u64..=512).prop_map(|m| m * MIB), 1 => (512u64..=4096).prop_map(|m| m * MIB)]
}

fn case_strategy(max_ops: usize) -> impl Strategy<Value = Case> {
    (
        config_strategy(),
        capacity_strategy(),
        prop::bool::weighted(0.8),
        prop::collection::vec(op_strategy(), 1..max_ops),
    )
        .prop_map(|(config, capacity, hold_events, ops)| Case { config, capacity, hold_events, ops })
}

// ----- the spec's rules, for the oracle -----

/// Segment size for a rounded request (allocator-spec.md, "Sizes").
fn segment_size(rounded: u64, config: &AllocatorConfig) -> u64 {
    if rounded <= MIB {
        2 * MIB
    } else if rounded < 10 * MIB {
        config.large_segment_size
    } else {
        rounded.div_ceil(2 * MIB) * 2 * MIB
    }
}

fn pool_of(rounded: u64) -> PoolKind {
    if rounded <= MIB { PoolKind::Small } else { PoolKind::Large }
}

/// Whether taking a block of `block_size` for `rounded` splits off the rest.
fn splits(config: &AllocatorConfig, pool: PoolKind, block_size: u64, rounded: u64) -> bool {
    let remaining = block_size - rounded;
    if pool == PoolKind::Small || config.expandable_segments {
        remaining >= MIN_BLOCK
    } else {
        rounded < config.max_split_size_bytes() && remaining > MIB
    }
}

/// The size of the block handed out for `rounded` out of a block of `block_size`.
fn handed_out(config: &AllocatorConfig, pool: PoolKind, block_size: u64, rounded: u64) -> u64 {
    if splits(config, pool, block_size, rounded) { rounded } else { block_size }
}

/// PyTorch's `get_free_block` over the free blocks of a snapshot: the smallest
/// inactive block of the same stream and pool with room (lowest address among
/// equal sizes), subject to the max_split_size rules. `None`: a new segment.
fn best_fit<'a>(
    snap: &'a [SegmentInfo],
    config: &AllocatorConfig,
    stream: StreamId,
    pool: PoolKind,
    rounded: u64,
) -> Option<&'a BlockInfo> {
    let found = snap
        .iter()
        .filter(|s| s.stream == stream && s.pool == pool)
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Inactive && b.size >= rounded)
        .min_by_key(|b| (b.size, b.address))?;
    let max_split = config.max_split_size_bytes();
    if rounded < max_split && found.size >= max_split {
        return None;
    }
    if rounded >= max_split && found.size >= rounded.saturating_add(config.max_non_split_rounding) {
        return None;
    }
    Some(found)
}

// ----- stats helpers -----

/// Every `Stat`, in a fixed order, with its name.
fn stat_list(s: &MemoryStats) -> Vec<(String, Stat)> {
    let mut out = Vec::with_capacity(STAT_ARRAY_NAMES.len() * 3 + 2);
    for name in STAT_ARRAY_NAMES {
        let array = s.stat_array(name).expect("listed stat");
        out.push((format!("{name}.all"), array.all));
        out.push((format!("{name}.small_pool"), array.small_pool));
        out.push((format!("{name}.large_pool"), array.large_pool));
    }
    out.push(("oversize_allocations".into(), s.oversize_allocations));
    out.push(("oversize_segments".into(), s.oversize_segments));
    out
}

fn pools() -> [PoolKind; 2] {
    [PoolKind::Small, PoolKind::Large]
}

fn is_active(b: &BlockInfo) -> bool {
    b.state != BlockState::Inactive
}

fn has_pending(snap: &[SegmentInfo]) -> bool {
    snap.iter().flat_map(|s| &s.blocks).any(|b| b.state == BlockState::ActivePendingFree)
}

/// The segment and block whose range holds `addr`.
fn find_block(snap: &[SegmentInfo], addr: u64) -> Option<(&SegmentInfo, &BlockInfo)> {
    snap.iter()
        .filter(|s| s.address <= addr && addr < s.address + s.total_size)
        .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
        .find(|(_, b)| b.address <= addr && addr < b.address + b.size)
}

// ----- the checked run -----

#[derive(Debug)]
struct Live {
    alloc: Allocation,
    recorded: bool,
}

struct Harness {
    raw: Arc<SimulatedMemory>,
    a: CachingAllocator,
    config: AllocatorConfig,
    capacity: u64,
    live: Vec<Live>,
    /// Each stat's current value at the last reset_accumulated (0 at the start).
    accumulated_base: Vec<i64>,
    /// The largest current value seen per stat since the last reset_peak.
    seen_max: Vec<i64>,
    /// The snapshot after the previous step.
    snap: Vec<SegmentInfo>,
    /// Whether events were completed since the last malloc (which processes them).
    events_completed: bool,
    /// Whether events stay pending until completed (else they complete at once).
    hold_events: bool,
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

macro_rules! check_eq {
    ($left:expr, $right:expr, $($fmt:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(TestCaseError::fail(format!(
                "{}: left {:?} != right {:?}",
                format!($($fmt)+),
                l,
                r
            )));
        }
    }};
}

impl Harness {
    fn new(case: &Case) -> Harness {
        let raw = Arc::new(SimulatedMemory::with_capacity(case.capacity));
        raw.hold_events(case.hold_events);
        let a = CachingAllocator::new(raw.clone(), case.config.clone()).expect("valid config");
        let n = stat_list(&a.stats()).len();
        Harness {
            raw,
            a,
            config: case.config.clone(),
            capacity: case.capacity,
            live: Vec::new(),
            accumulated_base: vec![0; n],
            seen_max: vec![0; n],
            snap: Vec::new(),
            events_completed: false,
            hold_events: case.hold_events,
        }
    }

    fn pick(&self, pick: usize) -> Option<usize> {
        (!self.live.is_empty()).then(|| pick % self.live.len())
    }

    /// The stream a `record_stream` names: usually another one, sometimes the
    /// allocation's own (which PyTorch ignores).
    fn use_stream(stream: StreamId, other: u32) -> StreamId {
        (stream + other % STREAMS) % STREAMS
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Alloc { size, stream } => self.alloc(size, stream)?,
            Op::Free { pick } => {
                if let Some(i) = self.pick(pick) {
                    self.free(i)?;
                }
            }
            Op::RecordStream { pick, other } => {
                if let Some(i) = self.pick(pick) {
                    self.record(i, other)?;
                }
            }
            Op::RecordThenFree { pick, other } => {
                if let Some(i) = self.pick(pick) {
                    self.record(i, other)?;
                    self.free(i)?;
                }
            }
            Op::EmptyCache => self.empty_cache()?,
            Op::ResetPeak => {
                self.a.reset_peak_stats();
                let s = self.a.stats();
                for (i, (name, stat)) in stat_list(&s).into_iter().enumerate() {
                    check_eq!(stat.peak, stat.current, "after reset_peak, {name}.peak is its current value");
                    self.seen_max[i] = stat.current;
                }
            }
            Op::ResetAccumulated => {
                self.a.reset_accumulated_stats();
                let s = self.a.stats();
                for (i, (name, stat)) in stat_list(&s).into_iter().enumerate() {
                    check!(stat.allocated == 0 && stat.freed == 0, "after reset_accumulated, {name} = {stat:?}");
                    self.accumulated_base[i] = stat.current;
                }
                check!(
                    s.num_alloc_retries == 0
                        && s.num_ooms == 0
                        && s.num_sync_all_streams == 0
                        && s.num_device_alloc == 0
                        && s.num_device_free == 0,
                    "after reset_accumulated the num_* counters are 0: {s:?}"
                );
            }
            Op::AllocMany { count, size, stream } => {
                for _ in 0..count {
                    self.alloc(size, stream)?;
                    self.check_invariants()?;
                }
            }
            Op::FreeAlternate { parity } => {
                let mut addrs: Vec<u64> = self.live.iter().map(|l| l.alloc.addr()).collect();
                addrs.sort_unstable();
                for addr in addrs.into_iter().skip(parity as usize).step_by(2) {
                    let i = self.live.iter().position(|l| l.alloc.addr() == addr).expect("live address");
                    self.free(i)?;
                    self.check_invariants()?;
                }
            }
            Op::CompleteEvents => {
                let before = self.a.stats();
                self.raw.complete_events();
                self.events_completed = true;
                check_eq!(self.a.stats(), before, "completing events changes nothing until the next malloc");
            }
        }
        self.check_invariants()
    }

    fn alloc(&mut self, size: u64, stream: StreamId) -> Result<(), TestCaseError> {
        let before = self.a.stats();
        if size == 0 {
            let x = self.a.malloc(0, stream, None).map_err(|e| TestCaseError::fail(format!("0 bytes: {e}")))?;
            check!(x.is_null() && x.size() == 0 && x.addr() == 0, "0 bytes give a null allocation: {x:?}");
            self.a.free(x).map_err(|e| TestCaseError::fail(format!("free of a null allocation: {e}")))?;
            check_eq!(self.a.stats(), before, "a 0-byte request touches nothing");
            return Ok(());
        }
        let config = self.config.clone();
        let rounded = config.round_size(size);
        let pool = pool_of(rounded);
        let seg_size = segment_size(rounded, &config);
        let prev_snap = std::mem::take(&mut self.snap);
        let pending_before = has_pending(&prev_snap);
        // process_events may free pending blocks first; the oracle then does not know the pool.
        let oracle = !config.expandable_segments && !(pending_before && (self.events_completed || !self.hold_events));
        let expected = if oracle { Some(best_fit(&prev_snap, &config, stream, pool, rounded)) } else { None };

        let result = self.a.malloc(size, stream, None);
        self.events_completed = false;
        let after = self.a.stats();
        let x = match result {
            Ok(x) => x,
            Err(err) => {
                let Some(oom) = err.as_oom() else {
                    return Err(TestCaseError::fail(format!("malloc({size}) failed with a non-OOM error: {err}")));
                };
                check_eq!(oom.requested_bytes, size, "oom.requested_bytes");
                check_eq!(oom.rounded_bytes, rounded, "oom.rounded_bytes");
                check_eq!(oom.segment_bytes, seg_size, "oom.segment_bytes ('Tried to allocate')");
                check_eq!(oom.total_bytes, self.capacity, "oom.total_bytes");
                check_eq!(oom.stream, stream, "oom.stream");
                let info = self.a.mem_info();
                check_eq!(oom.free_bytes, info.free_bytes, "oom.free_bytes");
                let allowed = config.effective_memory_fraction().map(|f| (f * self.capacity as f64) as u64);
                check_eq!(oom.allowed_bytes, allowed, "oom.allowed_bytes");
                check_eq!(oom.allocated_bytes, after.memory_allocated(), "oom.allocated_bytes");
                check_eq!(
                    oom.reserved_unallocated_bytes,
                    after.memory_reserved() - after.memory_allocated(),
                    "oom.reserved_unallocated_bytes"
                );
                self.check_oom(&before, &after, pending_before, seg_size, allowed)?;
                self.snap = prev_snap;
                return Ok(());
            }
        };
        check!(!x.is_null(), "a non-zero request gives a real allocation");
        check_eq!(x.requested(), size, "allocation.requested");
        check_eq!(x.stream(), stream, "allocation.stream");
        check_eq!(x.pool(), pool, "allocation.pool for rounded size {rounded}");
        check!(x.size() >= rounded, "allocation of {} < rounded {rounded}", x.size());
        if pool == PoolKind::Small || config.expandable_segments {
            check_eq!(x.size(), rounded, "small-pool/expandable blocks are split down to the rounded size");
        } else if rounded < config.max_split_size_bytes() {
            check!(x.size() - rounded <= MIB, "unsplit remainder {} > 1 MiB", x.size() - rounded);
        } else {
            check!(
                x.size() - rounded < config.max_non_split_rounding,
                "oversize request {rounded} got block {}",
                x.size()
            );
        }
        if let Some(expected) = expected {
            match expected {
                Some(b) => {
                    check_eq!(x.addr(), b.address, "best fit for {rounded} B on stream {stream} ({pool:?})");
                    check_eq!(x.size(), handed_out(&config, pool, b.size, rounded), "split of a cached block");
                    check_eq!(
                        after.num_device_alloc,
                        before.num_device_alloc,
                        "a cache hit asks nothing of the device"
                    );
                    check_eq!(after.reserved_bytes, before.reserved_bytes, "a cache hit keeps reserved");
                }
                None => {
                    check!(
                        find_block(&prev_snap, x.addr()).is_none(),
                        "no cached block fits {rounded} B, yet {:#x} lies in an old segment",
                        x.addr()
                    );
                    check_eq!(x.size(), handed_out(&config, pool, seg_size, rounded), "split of a new segment");
                    let snap = self.a.snapshot();
                    let (seg, _) = find_block(&snap, x.addr()).expect("the new allocation is in the snapshot");
                    check_eq!(seg.total_size, seg_size, "new segment size for {rounded} B");
                    check_eq!(seg.address, x.addr(), "a new segment's first block is handed out");
                    check!(after.num_device_alloc > before.num_device_alloc, "a new segment counts a device alloc");
                }
            }
        }
        self.live.push(Live { alloc: x, recorded: false });
        Ok(())
    }

    /// What an out-of-memory error may change: only the counters and the effects
    /// of releasing cached segments (and of finishing pending frees).
    fn check_oom(
        &mut self,
        before: &MemoryStats,
        after: &MemoryStats,
        pending_before: bool,
        seg_size: u64,
        allowed: Option<u64>,
    ) -> Result<(), TestCaseError> {
        check_eq!(after.num_ooms, before.num_ooms + 1, "num_ooms");
        check_eq!(after.num_alloc_retries, before.num_alloc_retries + 1, "num_alloc_retries (release-all retry)");
        check_eq!(after.num_sync_all_streams, before.num_sync_all_streams + 1, "num_sync_all_streams");
        check_eq!(after.allocation, before.allocation, "OOM leaves allocation unchanged");
        check_eq!(after.allocated_bytes, before.allocated_bytes, "OOM leaves allocated_bytes unchanged");
        check_eq!(after.oversize_allocations, before.oversize_allocations, "OOM leaves oversize_allocations");
        check_eq!(after.max_split_size, before.max_split_size, "max_split_size");
        if pending_before {
            for (name, b, a) in [
                ("active", before.active, after.active),
                ("active_bytes", before.active_bytes, after.active_bytes),
                ("requested_bytes", before.requested_bytes, after.requested_bytes),
            ] {
                check!(a.all.current <= b.all.current, "{name} grew on OOM");
                check_eq!(a.all.allocated, b.all.allocated, "{name}.allocated on OOM");
                check_eq!(a.all.peak, b.all.peak, "{name}.peak on OOM");
            }
        } else {
            check_eq!(after.active, before.active, "OOM leaves active");
            check_eq!(after.active_bytes, before.active_bytes, "OOM leaves active_bytes");
            check_eq!(after.requested_bytes, before.requested_bytes, "OOM leaves requested_bytes");
            check_eq!(after.inactive_split, before.inactive_split, "OOM leaves inactive_split");
            check_eq!(after.inactive_split_bytes, before.inactive_split_bytes, "OOM leaves inactive_split_bytes");
        }
        let snap = self.a.snapshot();
        check!(!has_pending(&snap), "the release-all retry waited for every pending free");
        if !self.config.expandable_segments {
            for (name, b, a) in [
                ("segment", before.segment, after.segment),
                ("reserved_bytes", before.reserved_bytes, after.reserved_bytes),
            ] {
                for (pool, bs, as_) in [
                    ("all", b.all, a.all),
                    ("small", b.small_pool, a.small_pool),
                    ("large", b.large_pool, a.large_pool),
                ] {
                    check!(as_.current <= bs.current, "{name}.{pool} grew on OOM");
                    check_eq!(as_.allocated, bs.allocated, "{name}.{pool}.allocated on OOM: no new segment");
                    check_eq!(as_.peak, bs.peak, "{name}.{pool}.peak on OOM");
                }
            }
            check_eq!(after.num_device_alloc, before.num_device_alloc, "num_device_alloc on OOM");
            check_eq!(after.oversize_segments.allocated, before.oversize_segments.allocated, "oversize_segments");
            for seg in &snap {
                check!(seg.blocks.iter().any(is_active), "fully free segment at {:#x} survived an OOM", seg.address);
            }
            // The device really had no room (or the fraction forbade it).
            let free = self.a.mem_info().free_bytes;
            let reserved = after.memory_reserved();
            check!(
                free < seg_size || allowed.is_some_and(|al| reserved + seg_size > al),
                "OOM although the device has {free} B free for a {seg_size} B segment (reserved {reserved}, allowed {allowed:?})"
            );
        } else {
            check_eq!(after.segment, before.segment, "expandable segments never count segments");
        }
        Ok(())
    }

    fn record(&mut self, i: usize, other: u32) -> Result<(), TestCaseError> {
        let before = self.a.stats();
        let live = &mut self.live[i];
        let stream = Harness::use_stream(live.alloc.stream(), other);
        self.a.record_stream(&live.alloc, stream);
        live.recorded |= stream != live.alloc.stream();
        check_eq!(self.a.stats(), before, "record_stream changes no stats");
        Ok(())
    }

    fn free(&mut self, i: usize) -> Result<(), TestCaseError> {
        let before = self.a.stats();
        let Live { alloc: x, recorded } = self.live.swap_remove(i);
        let (addr, size, requested, pool) = (x.addr(), x.size(), x.requested(), x.pool());
        self.a.free(x).map_err(|e| TestCaseError::fail(format!("free of a live allocation failed: {e}")))?;
        let after = self.a.stats();
        check_eq!(after.allocated_bytes.all.current, before.allocated_bytes.all.current - size as i64, "free");
        check_eq!(
            after.allocated_bytes.pool(pool).current,
            before.allocated_bytes.pool(pool).current - size as i64,
            "free"
        );
        check_eq!(after.allocation.all.current, before.allocation.all.current - 1, "allocation after free");
        check_eq!(after.reserved_bytes, before.reserved_bytes, "free never releases segments");
        let snap = self.a.snapshot();
        let Some((_, b)) = find_block(&snap, addr) else {
            return Err(TestCaseError::fail(format!("freed block {addr:#x} vanished from the snapshot")));
        };
        if recorded {
            check_eq!(b.state, BlockState::ActivePendingFree, "a block used by another stream waits for its events");
            check_eq!((b.address, b.size, b.requested_size), (addr, size, requested), "pending block");
            check_eq!(after.active, before.active, "pending free keeps active");
            check_eq!(after.requested_bytes, before.requested_bytes, "pending free keeps requested");
        } else {
            check_eq!(b.state, BlockState::Inactive, "a freed block is free at once");
            check!(b.address <= addr && addr + size <= b.address + b.size, "merged block covers the freed block");
            check_eq!(after.active.all.current, before.active.all.current - 1, "active after free");
            check_eq!(after.active_bytes.all.current, before.active_bytes.all.current - size as i64, "active_bytes");
            check_eq!(
                after.requested_bytes.all.current,
                before.requested_bytes.all.current - requested as i64,
                "requested_bytes after free"
            );
        }
        Ok(())
    }

    fn empty_cache(&mut self) -> Result<(), TestCaseError> {
        let before = self.a.stats();
        let pending_before = has_pending(&self.snap);
        self.a.empty_cache();
        let after = self.a.stats();
        check_eq!(after.num_sync_all_streams, before.num_sync_all_streams + 1, "empty_cache synchronizes");
        check_eq!(after.allocation, before.allocation, "empty_cache keeps allocation");
        check_eq!(after.allocated_bytes, before.allocated_bytes, "empty_cache keeps allocated_bytes");
        check_eq!(after.num_device_alloc, before.num_device_alloc, "empty_cache allocates nothing");
        if !pending_before {
            check_eq!(after.active, before.active, "empty_cache keeps active");
            check_eq!(after.requested_bytes, before.requested_bytes, "empty_cache keeps requested_bytes");
        }
        let snap = self.a.snapshot();
        check!(!has_pending(&snap), "empty_cache waits for pending frees");
        if !self.config.expandable_segments {
            for seg in &snap {
                check!(seg.blocks.iter().any(is_active), "empty_cache left fully free segment {:#x}", seg.address);
            }
        }
        Ok(())
    }

    fn check_invariants(&mut self) -> Result<(), TestCaseError> {
        let s = self.a.stats();
        let snap = self.a.snapshot();
        let config = &self.config;
        let expandable = config.expandable_segments;
        let max_split = config.max_split_size_bytes();

        // Stats on their own.
        for (i, (name, stat)) in stat_list(&s).into_iter().enumerate() {
            check!(stat.current >= 0, "{name}.current < 0: {stat:?}");
            check!(stat.peak >= stat.current, "{name}: peak < current: {stat:?}");
            self.seen_max[i] = self.seen_max[i].max(stat.current);
            check!(stat.peak >= self.seen_max[i], "{name}: peak below a current seen since the reset: {stat:?}");
            check_eq!(
                stat.current,
                self.accumulated_base[i] + stat.allocated - stat.freed,
                "{name}: current = current at reset + allocated − freed ({stat:?})"
            );
        }
        for name in STAT_ARRAY_NAMES {
            let a = s.stat_array(name).expect("listed");
            let (all, sm, lg) = (a.all, a.small_pool, a.large_pool);
            check_eq!(all.current, sm.current + lg.current, "{name}: all = small + large (current)");
            check_eq!(all.allocated, sm.allocated + lg.allocated, "{name}: all = small + large (allocated)");
            check_eq!(all.freed, sm.freed + lg.freed, "{name}: all = small + large (freed)");
            check!(all.peak <= sm.peak + lg.peak, "{name}: all.peak > small.peak + large.peak");
            check!(all.peak >= sm.peak.max(lg.peak), "{name}: all.peak < a pool's peak");
        }
        check_eq!(s.max_split_size, config.max_split_size.map_or(-1, |m| m as i64), "max_split_size stat");
        for (name, v) in [
            ("num_alloc_retries", s.num_alloc_retries),
            ("num_ooms", s.num_ooms),
            ("num_sync_all_streams", s.num_sync_all_streams),
            ("num_device_alloc", s.num_device_alloc),
            ("num_device_free", s.num_device_free),
        ] {
            check!(v >= 0, "{name} < 0");
        }
        if !expandable {
            check_eq!(s.segment.all.allocated, s.num_device_alloc, "each new segment is one device alloc");
            check_eq!(s.segment.all.freed, s.num_device_free, "each released segment is one device free");
        }

        // Snapshot structure.
        for w in snap.windows(2) {
            check!(
                w[0].address + w[0].total_size <= w[1].address,
                "segments overlap: {:#x} and {:#x}",
                w[0].address,
                w[1].address
            );
        }
        for seg in &snap {
            check_eq!(seg.is_expandable, expandable, "segment kind");
            check!(seg.stream < STREAMS, "segment stream {}", seg.stream);
            check!(!seg.blocks.is_empty(), "segment {:#x} without blocks", seg.address);
            let mut at = seg.address;
            let (mut allocated, mut active, mut requested) = (0, 0, 0);
            for b in &seg.blocks {
                check_eq!(b.address, at, "blocks tile segment {:#x} contiguously", seg.address);
                check!(b.size > 0 && b.size % MIN_BLOCK == 0, "block size {} not a positive multiple of 512", b.size);
                check!(b.address % MIN_BLOCK == 0, "block address {:#x} not 512-aligned", b.address);
                at += b.size;
                if b.state == BlockState::ActiveAllocated {
                    allocated += b.size;
                }
                if is_active(b) {
                    active += b.size;
                    requested += b.requested_size;
                    check!(
                        b.requested_size > 0 && b.requested_size <= b.size,
                        "block requested {} of {}",
                        b.requested_size,
                        b.size
                    );
                } else {
                    check_eq!(b.requested_size, 0, "an inactive block has no requested size");
                }
            }
            check_eq!(at, seg.address + seg.total_size, "block sizes sum to the segment's total_size");
            check_eq!(seg.allocated_size, allocated, "segment allocated_size");
            check_eq!(seg.active_size, active, "segment active_size");
            check_eq!(seg.requested_size, requested, "segment requested_size");
            for w in seg.blocks.windows(2) {
                check!(
                    !(w[0].state == BlockState::Inactive && w[1].state == BlockState::Inactive),
                    "adjacent free blocks {:#x} and {:#x} were not merged",
                    w[0].address,
                    w[1].address
                );
            }
            if expandable {
                let page = if seg.pool == PoolKind::Small { 2 * MIB } else { config.large_segment_size };
                check!(seg.total_size % page == 0, "mapped range of {} B is not whole pages", seg.total_size);
            } else if seg.pool == PoolKind::Small {
                check_eq!(seg.total_size, 2 * MIB, "small-pool segment size");
            } else {
                check!(
                    seg.total_size % (2 * MIB) == 0 && seg.total_size >= 10 * MIB,
                    "large-pool segment size {}",
                    seg.total_size
                );
            }
            if seg.pool == PoolKind::Small {
                for b in seg.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
                    check!(b.size <= MIB, "small-pool block of {} B", b.size);
                }
            }
        }

        // PyTorch's `_check_memory_stat_consistency`, the library's version.
        if let Err(e) = vramlab_allocator::check_memory_stat_consistency(&s, &snap) {
            return Err(TestCaseError::fail(e.to_string()));
        }

        // Stats against the snapshot, per pool.
        for pool in pools() {
            let segs: Vec<&SegmentInfo> = snap.iter().filter(|g| g.pool == pool).collect();
            let blocks = || segs.iter().flat_map(|g| &g.blocks);
            let reserved: u64 = segs.iter().map(|g| g.total_size).sum();
            check_eq!(
                s.reserved_bytes.pool(pool).current as u64,
                reserved,
                "{pool:?}: reserved = mapped segment bytes"
            );
            if expandable {
                check_eq!(s.segment.pool(pool).current, 0, "{pool:?}: expandable mapping counts no segments");
            } else {
                check_eq!(s.segment.pool(pool).current as usize, segs.len(), "{pool:?}: segment count");
            }
            let alloc_blocks = || blocks().filter(|b| b.state == BlockState::ActiveAllocated);
            check_eq!(s.allocation.pool(pool).current as usize, alloc_blocks().count(), "{pool:?}: allocation count");
            check_eq!(
                s.allocated_bytes.pool(pool).current as u64,
                alloc_blocks().map(|b| b.size).sum::<u64>(),
                "{pool:?}: allocated_bytes = active_allocated block bytes"
            );
            check_eq!(
                s.active.pool(pool).current as usize,
                blocks().filter(|b| is_active(b)).count(),
                "{pool:?}: active"
            );
            check_eq!(
                s.active_bytes.pool(pool).current as u64,
                blocks().filter(|b| is_active(b)).map(|b| b.size).sum::<u64>(),
                "{pool:?}: active_bytes"
            );
            check_eq!(
                s.requested_bytes.pool(pool).current as u64,
                blocks().map(|b| b.requested_size).sum::<u64>(),
                "{pool:?}: requested_bytes = requested sizes of active blocks"
            );
            // PyTorch counts a free block as inactive split when it has a neighbour
            // (`is_split()`); expandable segments are left out.
            let (split_count, split_bytes) = if expandable {
                (0, 0)
            } else {
                segs.iter()
                    .filter(|g| g.blocks.len() > 1)
                    .flat_map(|g| &g.blocks)
                    .filter(|b| b.state == BlockState::Inactive)
                    .fold((0usize, 0u64), |(n, sz), b| (n + 1, sz + b.size))
            };
            check_eq!(s.inactive_split.pool(pool).current as usize, split_count, "{pool:?}: inactive_split");
            check_eq!(s.inactive_split_bytes.pool(pool).current as u64, split_bytes, "{pool:?}: inactive_split_bytes");
        }
        let oversize_segments = if expandable { 0 } else { snap.iter().filter(|g| g.total_size >= max_split).count() };
        check_eq!(s.oversize_segments.current as usize, oversize_segments, "oversize_segments");
        let oversize_allocs = self.live.iter().filter(|l| l.alloc.size() >= max_split).count();
        check_eq!(s.oversize_allocations.current as usize, oversize_allocs, "oversize_allocations");

        // The device.
        let info = self.a.mem_info();
        check_eq!(info.total_bytes, self.capacity, "device capacity");
        check_eq!(info.total_bytes - info.free_bytes, s.memory_reserved(), "device used = reserved");
        if let Some(f) = config.effective_memory_fraction() {
            let allowed = (f * self.capacity as f64) as u64;
            // Expandable segments check the fraction against the segment size but map
            // whole 20 MiB pages, so they may pass it by less than a page (as PyTorch).
            let slack = if expandable { config.large_segment_size } else { 0 };
            check!(
                s.memory_reserved() < allowed + slack + 1,
                "reserved {} past allowed {allowed}",
                s.memory_reserved()
            );
        }

        // The live allocations.
        check_eq!(s.allocation.all.current as usize, self.live.len(), "allocation = live allocations");
        let live_bytes: u64 = self.live.iter().map(|l| l.alloc.size()).sum();
        check_eq!(s.memory_allocated(), live_bytes, "allocated_bytes = sum of live allocation sizes");
        let mut ranges = Vec::with_capacity(self.live.len());
        for Live { alloc: x, .. } in &self.live {
            check!(x.size() >= x.requested(), "allocation size {} < requested {}", x.size(), x.requested());
            check!(x.size() % MIN_BLOCK == 0 && x.addr() % MIN_BLOCK == 0, "allocation {x:?} not 512-aligned");
            check!(x.size() >= config.round_size(x.requested()), "allocation below the rounded request");
            let Some((seg, b)) = find_block(&snap, x.addr()) else {
                return Err(TestCaseError::fail(format!("live allocation {:#x} is in no segment", x.addr())));
            };
            check_eq!(
                (b.address, b.size, b.requested_size, b.state),
                (x.addr(), x.size(), x.requested(), BlockState::ActiveAllocated),
                "snapshot block of a live allocation"
            );
            check_eq!((seg.stream, seg.pool), (x.stream(), x.pool()), "segment of a live allocation");
            ranges.push((x.addr(), x.size()));
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            check!(w[0].0 + w[0].1 <= w[1].0, "live allocations overlap: {:#x}+{} and {:#x}", w[0].0, w[0].1, w[1].0);
        }
        self.snap = snap;
        Ok(())
    }

    /// Frees everything, completes the events, empties the cache: nothing stays.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        while !self.live.is_empty() {
            self.free(self.live.len() - 1)?;
            self.check_invariants()?;
        }
        self.raw.hold_events(false);
        self.raw.complete_events();
        self.empty_cache()?;
        self.check_invariants()?;
        let s = self.a.stats();
        check_eq!(s.memory_reserved(), 0, "reserved after freeing everything and empty_cache");
        check_eq!(s.segment.all.current, 0, "segments after empty_cache");
        check!(self.snap.is_empty(), "snapshot after empty_cache: {:?}", self.snap);
        for (name, stat) in stat_list(&s) {
            check_eq!(stat.current, 0, "{name}.current at the end");
        }
        check_eq!(self.a.mem_info().free_bytes, self.capacity, "the device has all its memory back");
        Ok(())
    }
}

/// Runs `case` with every check; returns the final stats.
fn run_checked(case: &Case) -> Result<MemoryStats, TestCaseError> {
    let mut h = Harness::new(case);
    h.check_invariants()?;
    for (i, op) in case.ops.iter().enumerate() {
        h.step(op).map_err(|e| TestCaseError::fail(format!("step {i} ({op:?}): {e}")))?;
    }
    h.finish().map_err(|e| TestCaseError::fail(format!("cleanup: {e}")))?;
    Ok(h.a.stats())
}

// ----- determinism: an unchecked replay -----

#[derive(Debug, PartialEq)]
enum Outcome {
    Alloc(u64, u64),
    Oom(u64, u64, u64),
    Other,
}

fn replay(case: &Case) -> Vec<(Outcome, MemoryStats, Vec<SegmentInfo>)> {
    let raw = Arc::new(SimulatedMemory::with_capacity(case.capacity));
    raw.hold_events(case.hold_events);
    let a = CachingAllocator::new(raw.clone(), case.config.clone()).expect("valid config");
    let mut live: Vec<Allocation> = Vec::new();
    let mut out = Vec::with_capacity(case.ops.len());
    for op in &case.ops {
        let mut outcome = Outcome::Other;
        match *op {
            Op::Alloc { size, stream } => match a.malloc(size, stream, None) {
                Ok(x) => {
                    outcome = Outcome::Alloc(x.addr(), x.size());
                    live.push(x);
                }
                Err(e) => {
                    let oom = e.as_oom().expect("only OOM errors");
                    outcome = Outcome::Oom(oom.segment_bytes, oom.free_bytes, oom.reserved_unallocated_bytes);
                }
            },
            Op::Free { pick } => {
                if !live.is_empty() {
                    let x = live.swap_remove(pick % live.len());
                    a.free(x).expect("live");
                }
            }
            Op::RecordStream { pick, other } | Op::RecordThenFree { pick, other } => {
                if !live.is_empty() {
                    let i = pick % live.len();
                    a.record_stream(&live[i], Harness::use_stream(live[i].stream(), other));
                    if matches!(op, Op::RecordThenFree { .. }) {
                        a.free(live.swap_remove(i)).expect("live");
                    }
                }
            }
            Op::EmptyCache => a.empty_cache(),
            Op::ResetPeak => a.reset_peak_stats(),
            Op::ResetAccumulated => a.reset_accumulated_stats(),
            Op::CompleteEvents => raw.complete_events(),
            Op::AllocMany { count, size, stream } => {
                for _ in 0..count {
                    if let Ok(x) = a.malloc(size, stream, None) {
                        live.push(x);
                    }
                }
            }
            Op::FreeAlternate { parity } => {
                live.sort_by_key(Allocation::addr);
                let all = std::mem::take(&mut live);
                for (i, x) in all.into_iter().enumerate() {
                    if (i % 2 == 1) == parity { a.free(x).expect("live") } else { live.push(x) }
                }
            }
        }
        out.push((outcome, a.stats(), a.snapshot()));
    }
    for x in live {
        a.free(x).expect("live");
    }
    a.empty_cache();
    out.push((Outcome::Other, a.stats(), a.snapshot()));
    out
}

// ----- round_size -----

fn request_strategy() -> impl Strategy<Value = u64> {
    // Up to PyTorch's 1 EiB limit on a single request.
    prop_oneof![1u64..=1 << 14, 1u64..=1 << 22, 1u64..=1 << 30, 1u64..=1 << 40, 1u64..1 << 60]
}

fn rounding_config_strategy() -> impl Strategy<Value = AllocatorConfig> {
    prop::array::uniform16(prop::sample::select(vec![0u64, 1, 2, 4, 8, 16, 32, 64, 128]))
        .prop_map(|divisions| AllocatorConfig { roundup_power2_divisions: divisions, ..AllocatorConfig::default() })
}

fn proptest_config(cases: u32) -> ProptestConfig {
    // No regression files: this suite owns no directory beside the test.
    // PROPTEST_CASES in the environment overrides the case count (for long runs).
    let defaults = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() { defaults.cases } else { cases };
    ProptestConfig { cases, failure_persistence: None, max_shrink_iters: 4096, ..defaults }
}

proptest! {
    #![proptest_config(proptest_config(64))]

    /// Every invariant after every step of a random sequence, and an empty
    /// allocator after freeing everything.
    #[test]
    fn invariants_hold_after_every_step(case in case_strategy(200)) {
        run_checked(&case)?;
    }
}

proptest! {
    #![proptest_config(proptest_config(24))]

    /// The same invariants under heavy fragmentation: hundreds of small blocks,
    /// every other one freed, so the pools hold many free blocks at once.
    #[test]
    fn invariants_hold_under_fragmentation(case in fragmenting_case_strategy(60)) {
        run_checked(&case)?;
    }
}

proptest! {
    #![proptest_config(proptest_config(64))]

    /// The same sequence on two fresh allocators gives identical results, stats
    /// and snapshots (addresses included: the simulated devices start alike).
    #[test]
    fn replay_is_deterministic(case in case_strategy(200)) {
        let first = replay(&case);
        let second = replay(&case);
        prop_assert_eq!(first.len(), second.len());
        for (i, ((out1, stats1, snap1), (out2, stats2, snap2))) in first.iter().zip(&second).enumerate() {
            let op = case.ops.get(i);
            prop_assert_eq!(out1, out2, "step {} ({:?}): outcome", i, op);
            let (flat1, flat2) = (stats1.flatten(), stats2.flatten());
            let differing: Vec<_> = flat1
                .iter()
                .filter(|(k, v)| flat2.get(*k) != Some(v))
                .map(|(k, v)| format!("{k}: {v} vs {}", flat2[k]))
                .collect();
            prop_assert!(differing.is_empty(), "step {} ({:?}): stats differ: {:?}", i, op, differing);
            prop_assert_eq!(snap1, snap2, "step {} ({:?}): snapshot", i, op);
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(512))]

    /// `round_size` is at least the request, a multiple of 512, monotone, and
    /// either plain 512-rounding or a division of the power-of-two interval.
    #[test]
    fn round_size_is_an_upper_bound_multiple_of_512_and_monotone(
        config in rounding_config_strategy(),
        s1 in request_strategy(),
        s2 in request_strategy(),
    ) {
        let (lo, hi) = (s1.min(s2), s1.max(s2));
        let (r_lo, r_hi) = (config.round_size(lo), config.round_size(hi));
        for (s, r) in [(lo, r_lo), (hi, r_hi)] {
            prop_assert!(r >= s, "round_size({}) = {} < request", s, r);
            prop_assert_eq!(r % MIN_BLOCK, 0, "round_size({}) = {} is no multiple of 512", s, r);
            let d = config.roundup_divisions_for(s);
            if d <= 1 || s <= MIN_BLOCK * d {
                prop_assert_eq!(r, s.div_ceil(MIN_BLOCK) * MIN_BLOCK, "plain rounding of {} (d = {})", s, d);
            } else {
                let floor = 1u64 << (63 - s.leading_zeros());
                let step = floor / d;
                prop_assert!(r <= 2 * floor, "round_size({}) = {} past the next power of two", s, r);
                prop_assert_eq!((r - floor) % step, 0, "round_size({}) = {} not on a 1/{} division", s, r, d);
                prop_assert!(r - s < step, "round_size({}) = {} skips a division of {}", s, r, step);
            }
        }
        prop_assert!(r_lo <= r_hi, "round_size not monotone: {} -> {}, {} -> {}", lo, r_lo, hi, r_hi);
        prop_assert_eq!(config.round_size(r_lo), r_lo, "round_size is idempotent");
    }
}

proptest! {
    #![proptest_config(proptest_config(64))]

    /// Requests no device can hold, up to `u64::MAX`, fail with an out-of-memory
    /// error and leave the allocator as it was: no panic, and never an allocation
    /// smaller than the request. (PyTorch rejects 1 EiB or more with an
    /// OutOfMemoryError before the caching allocator sees the request:
    /// `one_exa_bytes` in `CUDACachingAllocator.cpp`'s `allocate`.)
    #[test]
    fn huge_requests_fail_cleanly(
        size in prop_oneof![
            (1u64 << 50)..(1u64 << 60),
            (1u64 << 60)..=u64::MAX,
            (u64::MAX - 4 * MIB)..=u64::MAX,
        ],
        stream in 0..STREAMS,
    ) {
        let a = CachingAllocator::new(Arc::new(SimulatedMemory::with_capacity(1 << 30)), AllocatorConfig::default())
            .expect("default config");
        let keep = a.malloc(3 * MIB, stream, None).expect("3 MiB fits");
        let before = a.stats();
        match a.malloc(size, stream, None) {
            Ok(x) => prop_assert!(false, "malloc({}) handed out {:?}", size, x),
            Err(e) => prop_assert!(e.is_out_of_memory(), "malloc({}) failed with {}", size, e),
        }
        let after = a.stats();
        prop_assert_eq!(after.allocation, before.allocation);
        prop_assert_eq!(after.allocated_bytes, before.allocated_bytes);
        prop_assert_eq!(after.active_bytes, before.active_bytes);
        prop_assert_eq!(after.requested_bytes, before.requested_bytes);
        prop_assert_eq!(after.reserved_bytes.all.current, before.reserved_bytes.all.current);
        a.free(keep).expect("live");
    }
}

/// A deliberately tight device: this sequence runs into OOMs and into retries
/// that succeed after releasing cached segments, all of which must leave the
/// allocator consistent and usable.
#[test]
fn oom_heavy_sequence_on_a_small_device() {
    let config = AllocatorConfig { max_split_size: Some(32 * MIB), ..AllocatorConfig::default() };
    let mut ops = Vec::new();
    for i in 0..60u64 {
        ops.push(Op::Alloc { size: (i % 7 + 1) * 9 * MIB + i * 4099, stream: (i % 3) as StreamId });
        if i % 3 == 0 {
            ops.push(Op::Free { pick: i as usize * 7 });
        }
        if i % 11 == 0 {
            ops.push(Op::RecordThenFree { pick: i as usize, other: i as u32 });
        }
    }
    let case = Case { config, capacity: 64 * MIB, hold_events: true, ops };
    let stats = run_checked(&case).unwrap();
    let mallocs = stats.allocation.all.allocated;
    assert!(stats.num_ooms > 0, "the sequence must run out of memory: {stats:?}");
    assert!(stats.num_alloc_retries > stats.num_ooms, "some retries must succeed: {stats:?}");
    assert!(mallocs > 10, "most allocations must succeed: {stats:?}");
}

/// The smallest sequence the determinism property shrinks to: two blocks of one
/// segment freed while streams 1 and 2 still use them; the next malloc frees
/// them in the order it visits the streams, and the inactive_split peak depends
/// on that order. Replayed on fresh allocators, every run must agree.
#[test]
fn pending_frees_on_two_streams_replay_identically() {
    let ops = vec![
        Op::Alloc { size: 512, stream: 0 },
        Op::Alloc { size: 512, stream: 0 },
        Op::RecordStream { pick: 0, other: 1 },
        Op::RecordStream { pick: 1, other: 2 },
        Op::Free { pick: 0 },
        Op::Free { pick: 0 },
        Op::CompleteEvents,
        Op::ResetPeak,
        Op::Alloc { size: 512, stream: 0 },
    ];
    let case = Case { config: AllocatorConfig::default(), capacity: 64 * MIB, hold_events: true, ops };
    let peaks: std::collections::BTreeSet<(i64, i64)> = (0..32)
        .map(|_| {
            let run = replay(&case);
            let stats = &run[case.ops.len() - 1].1;
            (stats.inactive_split.all.peak, stats.inactive_split_bytes.all.peak)
        })
        .collect();
    assert_eq!(peaks.len(), 1, "inactive_split peaks (count, bytes) differ between identical replays: {peaks:?}");
}
