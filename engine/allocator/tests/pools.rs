//! Property tests of private pools (CUDA graphs, `MemPool`): random sequences of
//! allocations, frees, pool begins/ends/releases and `empty_cache` calls (on a
//! device small enough that the `use_on_oom` fallback and out-of-memory happen),
//! checking after every step that
//!
//! - the statistics agree with the snapshot (`check_memory_stat_consistency`) and
//!   the allocated bytes are the live blocks' sizes;
//! - live blocks never overlap;
//! - every live block sits in a segment of the pool it was allocated to — the
//!   latest begun pool whose streams match, else the default pool — except that a
//!   default-pool request may be served by a `use_on_oom` pool;
//! - a pool's segments are never handed out outside it: a block in a private
//!   pool's segment was allocated while that pool took the allocation (or by the
//!   fallback);
//! - after `empty_cache` with nothing being allocated to a pool, no pool whose
//!   use count is 0 keeps a fully free segment, and such a pool with no segment
//!   is gone.

use std::sync::Arc;

use proptest::prelude::*;
use vramlab_allocator::consts::MIB;
use vramlab_allocator::{
    Allocation, AllocatorConfig, CachingAllocator, MempoolId, PoolFilter, SimulatedMemory, StreamId,
};

const POOLS: [MempoolId; 3] = [(1, 0), (0, 1), (0, 2)];

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        stream: StreamId,
    },
    Free {
        pick: usize,
    },
    /// `create_mem_pool` (with `use_on_oom`) when the pool does not exist.
    Create {
        pool: usize,
        use_on_oom: bool,
        no_split: bool,
    },
    /// Begin allocating to the pool: every stream, or only `stream`.
    Begin {
        pool: usize,
        stream: Option<StreamId>,
    },
    End {
        pool: usize,
    },
    Release {
        pool: usize,
    },
    EmptyCache {
        pool: Option<usize>,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        6 => 1u64..=MIB,
        3 => (MIB + 1)..=12 * MIB,
        1 => (12 * MIB + 1)..=40 * MIB,
    ];
    prop_oneof![
        10 => (size, 0u32..2).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        6 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (0usize..3, any::<bool>(), any::<bool>())
            .prop_map(|(pool, use_on_oom, no_split)| Op::Create { pool, use_on_oom, no_split }),
        2 => (0usize..3, proptest::option::of(0u32..2)).prop_map(|(pool, stream)| Op::Begin { pool, stream }),
        2 => (0usize..3).prop_map(|pool| Op::End { pool }),
        1 => (0usize..3).prop_map(|pool| Op::Release { pool }),
        1 => proptest::option::of(0usize..3).prop_map(|pool| Op::EmptyCache { pool }),
    ]
}

struct Live {
    allocation: Allocation,
    /// The pool the allocation was made for (`None`: the default pool).
    intended: Option<MempoolId>,
}

struct Harness {
    allocator: CachingAllocator,
    live: Vec<Live>,
    /// Pools being allocated to, in the order begun, with their stream filter.
    begun: Vec<(MempoolId, Option<StreamId>)>,
    /// Pools ever flagged `use_on_oom` (a flag can only be set at creation here).
    use_on_oom: Vec<MempoolId>,
}

impl Harness {
    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let a = &self.allocator;
        match *op {
            Op::Alloc { size, stream } => {
                let intended = self.begun.iter().rev().find(|(_, s)| s.is_none_or(|s| s == stream)).map(|&(p, _)| p);
                if let Ok(allocation) = a.malloc(size, stream, None) {
                    self.live.push(Live { allocation, intended });
                }
            }
            Op::Free { pick } => {
                if !self.live.is_empty() {
                    let l = self.live.swap_remove(pick % self.live.len());
                    a.free(l.allocation).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            Op::Create { pool, use_on_oom, no_split } => {
                let id = POOLS[pool];
                if a.pool_use_count(id).is_none() {
                    a.create_mem_pool(id, use_on_oom, no_split).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.use_on_oom.retain(|p| *p != id);
                    if use_on_oom {
                        self.use_on_oom.push(id);
                    }
                }
            }
            Op::Begin { pool, stream } => {
                let id = POOLS[pool];
                let filter = stream.map_or(PoolFilter::AllStreams, |s| PoolFilter::Streams(vec![s]));
                let already = self.begun.iter().any(|(p, _)| *p == id);
                let result = a.begin_allocate_to_pool(id, filter);
                prop_assert_eq!(result.is_err(), already, "begin twice must fail, once must not");
                if !already {
                    self.begun.push((id, stream));
                }
            }
            Op::End { pool } => {
                let id = POOLS[pool];
                let at = self.begun.iter().position(|(p, _)| *p == id);
                prop_assert_eq!(a.end_allocate_to_pool(id).is_ok(), at.is_some());
                if let Some(i) = at {
                    self.begun.remove(i);
                    a.release_pool(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            Op::Release { pool } => {
                let id = POOLS[pool];
                // Only the creator's use may be released here (a begun pool keeps its own).
                let begun = self.begun.iter().any(|(p, _)| *p == id);
                if !begun && a.pool_use_count(id).is_some_and(|c| c > 0) {
                    a.release_pool(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            Op::EmptyCache { pool } => match pool {
                Some(p) => a.empty_cache_pool(POOLS[p]),
                None => a.empty_cache(),
            },
        }
        self.check(matches!(op, Op::EmptyCache { pool: None }))
    }

    fn check(&self, emptied: bool) -> Result<(), TestCaseError> {
        let a = &self.allocator;
        if let Err(e) = a.check_memory_stat_consistency() {
            return Err(TestCaseError::fail(e.to_string()));
        }
        let (stats, snapshot) = a.stats_and_snapshot();
        let live_bytes: u64 = self.live.iter().map(|l| l.allocation.size()).sum();
        prop_assert_eq!(stats.allocated_bytes.all.current as u64, live_bytes);
        let mut ranges: Vec<(u64, u64)> =
            self.live.iter().map(|l| (l.allocation.addr(), l.allocation.size())).collect();
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            prop_assert!(w[0].0 + w[0].1 <= w[1].0, "live blocks overlap");
        }
        for l in &self.live {
            let addr = l.allocation.addr();
            let seg = snapshot
                .iter()
                .find(|s| s.address <= addr && addr < s.address + s.total_size)
                .ok_or_else(|| TestCaseError::fail("a live block outside every segment"))?;
            match (l.intended, seg.pool_id) {
                (want, got) if want == got => {}
                (None, Some(got)) => {
                    prop_assert!(self.use_on_oom.contains(&got), "a default request served by pool {got:?}")
                }
                (want, got) => prop_assert!(false, "allocated for {want:?}, found in {got:?}"),
            }
        }
        if emptied && self.begun.is_empty() {
            for id in a.pools() {
                if a.pool_use_count(id) == Some(0) {
                    for seg in snapshot.iter().filter(|s| s.pool_id == Some(id) && !s.is_expandable) {
                        prop_assert!(
                            seg.blocks.iter().any(|b| b.state != vramlab_allocator::BlockState::Inactive),
                            "a freeable pool kept a free segment"
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

fn run(ops: &[Op], expandable: bool) -> Result<(), TestCaseError> {
    let raw = Arc::new(SimulatedMemory::with_capacity(96 * MIB));
    let config = AllocatorConfig { expandable_segments: expandable, ..AllocatorConfig::default() };
    let allocator = CachingAllocator::new(raw, config).expect("a valid config");
    let mut h = Harness { allocator, live: Vec::new(), begun: Vec::new(), use_on_oom: Vec::new() };
    for op in ops {
        h.step(op)?;
    }
    // Wind down: end every pool, free everything, release every use, empty the cache.
    while let Some((id, _)) = h.begun.pop() {
        h.allocator.end_allocate_to_pool(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
        h.allocator.release_pool(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    for l in h.live.drain(..) {
        h.allocator.free(l.allocation).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    for id in POOLS {
        while h.allocator.pool_use_count(id).is_some_and(|c| c > 0) {
            h.allocator.release_pool(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
    h.allocator.empty_cache();
    h.check(true)?;
    prop_assert_eq!(h.allocator.memory_allocated(), 0);
    if !expandable {
        // Every pool gave its segments back and is gone.
        prop_assert!(h.allocator.pools().is_empty());
        prop_assert_eq!(h.allocator.memory_reserved(), 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn pools_keep_their_blocks_and_the_books_balance(
        ops in proptest::collection::vec(op_strategy(), 1..160),
        expandable in any::<bool>(),
    ) {
        run(&ops, expandable)?;
    }
}
