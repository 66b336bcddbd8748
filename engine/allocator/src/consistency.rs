//! PyTorch's `_check_memory_stat_consistency` as a reusable check: every
//! current statistic recomputed from [`CachingAllocator::snapshot`] (segments,
//! blocks and their states) must equal [`CachingAllocator::stats`].
//!
//! Modelled on `TestCudaMultiGPU._check_memory_stat_consistency` in
//! `test/test_cuda_multigpu.py` (pytorch/pytorch, commit 0424523786, the version
//! that knows expandable segments). What it adds, each following from PyTorch's
//! `CUDACachingAllocator.cpp`: every key is compared, not only the keys some
//! segment contributed to (an empty snapshot must mean zero stats), and
//! `oversize_allocations` / `oversize_segments` are recomputed from the block
//! and segment sizes against `max_split_size`.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::caching::{BlockState, CachingAllocator, SegmentInfo};
use crate::stats::{MemoryStats, PoolKind, STAT_ARRAY_NAMES};

/// Statistics that disagree with the snapshot they were taken with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "memory stats disagree with the snapshot (allocator bookkeeping bug): {}",
    mismatches.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("; ")
)]
pub struct StatInconsistency {
    pub mismatches: Vec<StatMismatch>,
}

/// One statistic whose value differs from what the snapshot implies.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{key}: the snapshot implies {expected}, memory_stats() says {actual}")]
pub struct StatMismatch {
    /// The flattened key (`allocated_bytes.small_pool.current`), or
    /// `segment@0x…:requested_size` for a segment whose blocks' requested
    /// sizes do not sum to its own.
    pub key: String,
    pub expected: i64,
    pub actual: i64,
}

/// Every `.current` statistic as the snapshot implies it, by flattened key.
pub fn expected_current_stats(snapshot: &[SegmentInfo], max_split_size: i64) -> BTreeMap<String, i64> {
    let max_split = if max_split_size < 0 { u64::MAX } else { max_split_size as u64 };
    let mut expected = BTreeMap::new();
    for name in STAT_ARRAY_NAMES {
        for pool in ["all", "small_pool", "large_pool"] {
            expected.insert(format!("{name}.{pool}.current"), 0i64);
        }
    }
    expected.insert("oversize_allocations.current".to_owned(), 0);
    expected.insert("oversize_segments.current".to_owned(), 0);
    let mut add = |name: &str, pool: PoolKind, amount: u64| {
        for p in ["all", pool.stat_name()] {
            *expected.get_mut(&format!("{name}.{p}.current")).expect("listed above") += amount as i64;
        }
    };
    let mut oversize_allocations = 0;
    let mut oversize_segments = 0;
    for segment in snapshot {
        let (pool, expandable) = (segment.pool, segment.is_expandable);
        if !expandable {
            add("segment", pool, 1);
            if segment.total_size >= max_split {
                oversize_segments += 1;
            }
        }
        add("allocated_bytes", pool, segment.allocated_size);
        add("reserved_bytes", pool, segment.total_size);
        add("active_bytes", pool, segment.active_size);
        add("requested_bytes", pool, segment.requested_size);
        let is_split = segment.blocks.len() > 1;
        for block in &segment.blocks {
            if block.state == BlockState::ActiveAllocated {
                add("allocation", pool, 1);
                if block.size >= max_split {
                    oversize_allocations += 1;
                }
            }
            if block.state != BlockState::Inactive {
                add("active", pool, 1);
            }
            if block.state == BlockState::Inactive && is_split && !expandable {
                add("inactive_split", pool, 1);
                add("inactive_split_bytes", pool, block.size);
            }
        }
    }
    expected.insert("oversize_allocations.current".to_owned(), oversize_allocations);
    expected.insert("oversize_segments.current".to_owned(), oversize_segments);
    expected
}

/// PyTorch's `_check_memory_stat_consistency` for one device: `stats` and
/// `snapshot` must have been taken with no allocator call between them.
pub fn check_memory_stat_consistency(stats: &MemoryStats, snapshot: &[SegmentInfo]) -> Result<(), StatInconsistency> {
    let mut mismatches = Vec::new();
    for segment in snapshot {
        // `self.assertEqual(sum_requested, segment["requested_size"])`
        let sum_requested: u64 =
            segment.blocks.iter().filter(|b| b.state != BlockState::Inactive).map(|b| b.requested_size).sum();
        if sum_requested != segment.requested_size {
            mismatches.push(StatMismatch {
                key: format!("segment@{:#x}:requested_size", segment.address),
                expected: sum_requested as i64,
                actual: segment.requested_size as i64,
            });
        }
    }
    let actual = stats.flatten();
    for (key, expected) in expected_current_stats(snapshot, stats.max_split_size) {
        let value = actual.get(&key).copied().unwrap_or(i64::MIN);
        if value != expected {
            mismatches.push(StatMismatch { key, expected, actual: value });
        }
    }
    if mismatches.is_empty() { Ok(()) } else { Err(StatInconsistency { mismatches }) }
}

impl CachingAllocator {
    /// [`check_memory_stat_consistency`] on this allocator's statistics and snapshot.
    pub fn check_memory_stat_consistency(&self) -> Result<(), StatInconsistency> {
        let (stats, snapshot) = self.stats_and_snapshot();
        check_memory_stat_consistency(&stats, &snapshot)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{AllocatorConfig, SimulatedMemory};

    #[test]
    fn an_empty_allocator_is_consistent_and_a_tampered_stat_is_caught() {
        let a = CachingAllocator::new(Arc::new(SimulatedMemory::with_capacity(1 << 30)), AllocatorConfig::default())
            .unwrap();
        a.check_memory_stat_consistency().unwrap();
        let x = a.malloc(3 << 20, 0, None).unwrap();
        a.check_memory_stat_consistency().unwrap();
        let (mut stats, snapshot) = a.stats_and_snapshot();
        stats.inactive_split_bytes.large_pool.current += 512;
        let err = check_memory_stat_consistency(&stats, &snapshot).unwrap_err();
        assert_eq!(err.mismatches.len(), 1);
        assert_eq!(err.mismatches[0].key, "inactive_split_bytes.large_pool.current");
        assert_eq!(err.mismatches[0].expected, 17_825_792);
        assert!(err.to_string().contains("the snapshot implies 17825792, memory_stats() says 17826304"), "{err}");
        // Stats without their segment: every key it implied is reported.
        let err = check_memory_stat_consistency(&stats, &[]).unwrap_err();
        assert!(err.mismatches.iter().any(|m| m.key == "reserved_bytes.all.current" && m.expected == 0));
        a.free(x).unwrap();
        a.empty_cache();
        a.check_memory_stat_consistency().unwrap();
    }
}
