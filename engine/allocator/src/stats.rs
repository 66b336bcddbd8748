//! The allocator's statistics, with PyTorch's names and arithmetic
//! (`DeviceStats` in `c10/core/CachingDeviceAllocator.h`, flattened the way
//! `torch.cuda.memory_stats()` flattens them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One statistic: its current value, its peak since the last
/// [`reset_peak`](Stat::reset_peak), and the sums of all increases and decreases
/// since the last [`reset_accumulated`](Stat::reset_accumulated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, amount: u64) {
        let amount = amount as i64;
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    #[inline]
    pub(crate) fn decrease(&mut self, amount: u64) {
        let amount = amount as i64;
        self.current -= amount;
        debug_assert!(self.current >= 0, "negative tracked stat (allocator logic error)");
        self.freed += amount;
    }

    /// Sets the peak to the current value (never to zero), as PyTorch does.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Zeroes the accumulated increases and decreases.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Which pool a block or segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PoolKind {
    /// Rounded requests of at most 1 MiB, packed into 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

impl PoolKind {
    /// The name PyTorch uses in the flattened stats keys.
    pub fn stat_name(self) -> &'static str {
        match self {
            PoolKind::Small => "small_pool",
            PoolKind::Large => "large_pool",
        }
    }
}

/// A statistic kept for all pools together and for each pool
/// (`all`, `small_pool`, `large_pool`). Every update hits `all` and the pool's entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatArray {
    pub all: Stat,
    pub small_pool: Stat,
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    /// The entry of one pool.
    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    #[inline]
    pub(crate) fn increase(&mut self, pool: PoolKind, amount: u64) {
        self.all.increase(amount);
        self.pool_mut(pool).increase(amount);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, pool: PoolKind, amount: u64) {
        self.all.decrease(amount);
        self.pool_mut(pool).decrease(amount);
    }

    fn for_each_mut(&mut self, mut f: impl FnMut(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }

    fn entries(&self) -> [(&'static str, &Stat); 3] {
        [("all", &self.all), ("small_pool", &self.small_pool), ("large_pool", &self.large_pool)]
    }
}

/// The allocator's statistics for one device, field for field PyTorch's `DeviceStats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Live allocations (blocks handed out and not yet freed).
    pub allocation: StatArray,
    /// Segments obtained from the device.
    pub segment: StatArray,
    /// Active blocks: allocated, or freed but still in use by another stream.
    pub active: StatArray,
    /// Free blocks inside segments that still hold live blocks (non-releasable).
    pub inactive_split: StatArray,
    /// Bytes of allocated blocks (rounded block sizes).
    pub allocated_bytes: StatArray,
    /// Bytes of segments obtained from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes originally requested by the callers of active blocks.
    pub requested_bytes: StatArray,
    /// Allocations of blocks of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    pub num_alloc_retries: i64,
    pub num_ooms: i64,
    pub num_sync_all_streams: i64,
    pub num_device_alloc: i64,
    pub num_device_free: i64,
    /// `max_split_size` in bytes, −1 when unlimited.
    pub max_split_size: i64,
}

/// The names of the per-pool statistics, in PyTorch's spelling.
pub const STAT_ARRAY_NAMES: [&str; 9] = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
];

impl MemoryStats {
    pub(crate) fn new(max_split_size: Option<u64>) -> Self {
        MemoryStats {
            max_split_size: max_split_size.map_or(-1, |v| v.min(i64::MAX as u64) as i64),
            ..Default::default()
        }
    }

    /// The per-pool statistic with PyTorch's name `name` (see [`STAT_ARRAY_NAMES`]).
    pub fn stat_array(&self, name: &str) -> Option<&StatArray> {
        Some(match name {
            "allocation" => &self.allocation,
            "segment" => &self.segment,
            "active" => &self.active,
            "inactive_split" => &self.inactive_split,
            "allocated_bytes" => &self.allocated_bytes,
            "reserved_bytes" => &self.reserved_bytes,
            "active_bytes" => &self.active_bytes,
            "inactive_split_bytes" => &self.inactive_split_bytes,
            "requested_bytes" => &self.requested_bytes,
            _ => return None,
        })
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `torch.cuda.memory_allocated()`.
    pub fn memory_allocated(&self) -> u64 {
        self.allocated_bytes.all.current as u64
    }
    /// `torch.cuda.max_memory_allocated()`.
    pub fn max_memory_allocated(&self) -> u64 {
        self.allocated_bytes.all.peak as u64
    }
    /// `torch.cuda.memory_reserved()`.
    pub fn memory_reserved(&self) -> u64 {
        self.reserved_bytes.all.current as u64
    }
    /// `torch.cuda.max_memory_reserved()`.
    pub fn max_memory_reserved(&self) -> u64 {
        self.reserved_bytes.all.peak as u64
    }

    /// `torch.cuda.reset_peak_memory_stats()`: every peak becomes its current value.
    pub fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            array.for_each_mut(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`: zeroes the allocated/freed sums
    /// and the `num_*` counters.
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            array.for_each_mut(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// The statistics flattened exactly as `torch.cuda.memory_stats()` returns them:
    /// `"allocated_bytes.all.peak"`, `"oversize_segments.current"`, `"num_ooms"`, …,
    /// in sorted key order (PyTorch sorts them too).
    pub fn flatten(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let mut put_stat = |prefix: String, s: &Stat| {
            out.insert(format!("{prefix}.current"), s.current);
            out.insert(format!("{prefix}.peak"), s.peak);
            out.insert(format!("{prefix}.allocated"), s.allocated);
            out.insert(format!("{prefix}.freed"), s.freed);
        };
        for name in STAT_ARRAY_NAMES {
            let array = self.stat_array(name).expect("every listed name exists");
            for (pool, stat) in array.entries() {
                put_stat(format!("{name}.{pool}"), stat);
            }
        }
        put_stat("oversize_allocations".into(), &self.oversize_allocations);
        put_stat("oversize_segments".into(), &self.oversize_segments);
        out.insert("num_alloc_retries".into(), self.num_alloc_retries);
        out.insert("num_ooms".into(), self.num_ooms);
        out.insert("num_sync_all_streams".into(), self.num_sync_all_streams);
        out.insert("num_device_alloc".into(), self.num_device_alloc);
        out.insert("num_device_free".into(), self.num_device_free);
        out.insert("max_split_size".into(), self.max_split_size);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_arithmetic_and_resets() {
        let mut s = Stat::default();
        s.increase(10);
        s.increase(5);
        s.decrease(12);
        assert_eq!(s, Stat { current: 3, peak: 15, allocated: 15, freed: 12 });
        s.reset_peak();
        assert_eq!(s.peak, 3, "peak resets to current, not zero");
        s.reset_accumulated();
        assert_eq!(s, Stat { current: 3, peak: 3, allocated: 0, freed: 0 });
    }

    #[test]
    fn flatten_has_pytorchs_keys() {
        let stats = MemoryStats::new(None);
        let flat = stats.flatten();
        // 9 arrays × 3 pools × 4 fields + 2 oversize × 4 + 6 scalars
        assert_eq!(flat.len(), 9 * 3 * 4 + 2 * 4 + 6);
        assert_eq!(flat["max_split_size"], -1);
        for key in [
            "allocated_bytes.all.peak",
            "reserved_bytes.large_pool.current",
            "inactive_split_bytes.small_pool.freed",
            "requested_bytes.all.allocated",
            "oversize_segments.peak",
            "num_sync_all_streams",
            "num_device_free",
        ] {
            assert!(flat.contains_key(key), "missing {key}");
        }
    }
}
