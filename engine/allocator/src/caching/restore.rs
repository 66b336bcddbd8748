//! Restoring a segment with a given block layout: the state a caching allocator
//! had before a recording began (a PyTorch snapshot's trace rewound from its
//! final segments) set up directly, as one `cudaMalloc` of the segment's size and
//! its blocks laid out in address order — what PyTorch's allocator held, not a
//! sequence of requests that might have led there. A child module of `caching`:
//! it works on the allocator's private state, as the pool checkpoints do.

use super::*;

/// One block of a segment to restore, in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreBlock {
    pub size: u64,
    /// Bytes requested, for an allocated block (counted in `requested_bytes`).
    pub requested: u64,
    pub allocated: bool,
}

/// A plain (`cudaMalloc`'d) segment to restore: its size, stream, pool and
/// every block from its start to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreSegment {
    pub size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    /// The private pool owning it (created already); `None` is the default pool.
    pub private: Option<MempoolId>,
    pub blocks: Vec<RestoreBlock>,
}

impl CachingAllocator {
    /// Allocates a segment of `segment.size` bytes from the device (where the
    /// raw allocator puts it: a [`SimulatedMemory`](crate::SimulatedMemory)'s
    /// address plan can name the address) and lays its blocks out as given: the
    /// allocated ones handed out (returned in address order, owned by the
    /// caller), the free ones in the pool's free set. Statistics count the
    /// segment (`segment`, `reserved_bytes`, `num_device_alloc`,
    /// `oversize_segments`) and each allocated block as one allocation
    /// (`allocation`, `allocated_bytes`, `active`, `active_bytes`,
    /// `requested_bytes`, `oversize_allocations`); the free blocks of a split
    /// segment count in `inactive_split(_bytes)`. Events: `segment_alloc`, then
    /// an `alloc` per allocated block.
    ///
    /// Refused before anything changes: no blocks, a block of 0 bytes, sizes
    /// that do not add up to the segment's, two neighbouring free blocks (the
    /// allocator merges them), a stream past the model's limit, an unknown
    /// private pool. Out of memory (the device or the memory fraction) is an
    /// [`AllocError::OutOfMemory`], counted in `num_ooms` as PyTorch counts it.
    pub fn restore_segment(&self, segment: &RestoreSegment) -> Result<Vec<Allocation>, AllocError> {
        let mut st = self.lock();
        let result = st.restore_segment(&self.device, segment);
        st.emitter.flush();
        let ids = result?;
        Ok(ids.into_iter().map(|id| self.handle_of(&st, id)).collect())
    }
}

impl State {
    /// [`CachingAllocator::restore_segment`] under the lock: the allocated blocks.
    fn restore_segment(&mut self, dev: &Device, seg: &RestoreSegment) -> Result<Vec<u32>, AllocError> {
        let size = seg.size;
        let mismatch = |reason: String| AllocError::RestoreMismatch { device: dev.name.clone(), size, reason };
        if seg.blocks.is_empty() {
            return Err(mismatch("it has no blocks".into()));
        }
        if let Some(i) = seg.blocks.iter().position(|b| b.size == 0) {
            return Err(mismatch(format!("block {i} has 0 bytes")));
        }
        if let Some(i) = seg.blocks.iter().position(|b| !b.size.is_multiple_of(super::super::consts::MIN_BLOCK_SIZE)) {
            return Err(mismatch(format!("block {i} is not a whole number of 512-byte units")));
        }
        let sum = seg.blocks.iter().try_fold(0u64, |acc, b| acc.checked_add(b.size));
        if sum != Some(size) {
            return Err(mismatch(format!("its blocks add up to {sum:?} bytes")));
        }
        if let Some(i) = seg.blocks.windows(2).position(|w| !w[0].allocated && !w[1].allocated) {
            return Err(mismatch(format!("blocks {i} and {} are neighbouring free blocks", i + 1)));
        }
        if seg.stream > MAX_STREAM {
            return Err(AllocError::InvalidStream { device: dev.name.clone(), stream: seg.stream, max: MAX_STREAM });
        }
        if seg.blocks.iter().any(|b| b.size > MAX_KEY_SIZE) {
            return Err(mismatch("a block is larger than the model can index".into()));
        }
        let private = match seg.private {
            Some(pool) => self.slot_of(dev, pool)?,
            None => NIL,
        };
        let req = Request { stream: seg.stream, pool: seg.pool, private, size, alloc_size: size };
        if let Some(allowed) = self.allowed_memory_maximum
            && self.total_allocated_memory + size > allowed
        {
            return Err(self.out_of_memory(dev, &req, size));
        }
        let addr = match dev.raw.malloc(size) {
            Ok(addr) => addr,
            Err(RawError::OutOfMemory) => return Err(self.out_of_memory(dev, &req, size)),
            Err(e) => return Err(dev.device_error(e)),
        };

        // The segment, as `alloc_block` gets it.
        self.count_pool_device_malloc(private);
        self.total_allocated_memory += size;
        let head = self.arena.insert(Block::new(addr, size, seg.stream, seg.pool, private));
        self.stats.segment.increase(seg.pool, 1);
        self.stats.reserved_bytes.increase(seg.pool, size);
        if size >= self.max_split_size {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.emit(AllocatorAction::SegmentAlloc, head, size, size);

        // Its blocks, linked in address order.
        let split = seg.blocks.len() > 1;
        let mut ids = Vec::with_capacity(seg.blocks.len());
        let mut at = addr;
        for (i, b) in seg.blocks.iter().enumerate() {
            let id = if i == 0 {
                self.arena[head].size = b.size;
                head
            } else {
                let prev = ids[i - 1];
                let mut block = Block::new(at, b.size, seg.stream, seg.pool, private);
                block.prev = prev;
                let id = self.arena.insert(block);
                self.arena[prev].next = id;
                id
            };
            ids.push(id);
            at += b.size;
        }
        let mut allocated = Vec::new();
        for (b, &id) in seg.blocks.iter().zip(&ids) {
            if b.allocated {
                let block = &mut self.arena[id];
                block.allocated = true;
                block.requested = b.requested;
                self.emit(AllocatorAction::Alloc, id, b.requested, b.size);
                let s = &mut self.stats;
                s.allocation.increase(seg.pool, 1);
                s.allocated_bytes.increase(seg.pool, b.size);
                s.active.increase(seg.pool, 1);
                s.active_bytes.increase(seg.pool, b.size);
                s.requested_bytes.increase(seg.pool, b.requested);
                if b.size >= self.max_split_size {
                    s.oversize_allocations.increase(1);
                }
                allocated.push(id);
            } else {
                self.insert_free(id);
                if split {
                    self.stats.inactive_split.increase(seg.pool, 1);
                    self.stats.inactive_split_bytes.increase(seg.pool, b.size);
                }
            }
        }
        Ok(allocated)
    }
}

#[cfg(test)]
mod tests {
    use crate::consts::MIB;
    use crate::{
        AllocatorConfig, BlockState, CachingAllocator, PoolKind, RestoreBlock, RestoreSegment, SimulatedMemory,
        check_memory_stat_consistency,
    };
    use std::sync::Arc;

    fn block(size: u64, allocated: bool) -> RestoreBlock {
        RestoreBlock { size, requested: if allocated { size - 100 } else { 0 }, allocated }
    }

    #[test]
    fn a_restored_segment_has_the_layout_and_the_statistics_it_describes() {
        let plan = vec![(30 * MIB, 0x1000_0000)];
        let raw = Arc::new(SimulatedMemory::with_address_plan(1 << 40, plan));
        raw.arm_address_plan();
        let a = CachingAllocator::new(raw, AllocatorConfig::default()).unwrap();
        let seg = RestoreSegment {
            size: 30 * MIB,
            stream: 0,
            pool: PoolKind::Large,
            private: None,
            blocks: vec![block(4 * MIB, true), block(6 * MIB, false), block(12 * MIB, true), block(8 * MIB, false)],
        };
        let live = a.restore_segment(&seg).unwrap();
        assert_eq!(
            live.iter().map(|l| (l.addr(), l.size())).collect::<Vec<_>>(),
            [(0x1000_0000, 4 * MIB), (0x1000_0000 + 10 * MIB, 12 * MIB)]
        );
        let (stats, segments) = a.stats_and_snapshot();
        assert_eq!(segments.len(), 1);
        assert_eq!(segments[0].address, 0x1000_0000);
        let layout: Vec<_> = segments[0].blocks.iter().map(|b| (b.size, b.state)).collect();
        assert_eq!(
            layout,
            [
                (4 * MIB, BlockState::ActiveAllocated),
                (6 * MIB, BlockState::Inactive),
                (12 * MIB, BlockState::ActiveAllocated),
                (8 * MIB, BlockState::Inactive)
            ]
        );
        assert_eq!(stats.inactive_split.all.current, 2);
        assert_eq!(a.memory_allocated(), 16 * MIB);
        assert_eq!(a.memory_reserved(), 30 * MIB);
        assert!(check_memory_stat_consistency(&stats, &segments).is_ok());

        // Best fit takes the 6 MiB gap for a 5 MiB request, and frees merge.
        let b = a.malloc(5 * MIB, 0, None).unwrap();
        assert_eq!(b.addr(), 0x1000_0000 + 4 * MIB);
        for l in live {
            a.free(l).unwrap();
        }
        a.free(b).unwrap();
        let (stats, segments) = a.stats_and_snapshot();
        assert_eq!(segments[0].blocks.len(), 1);
        assert!(check_memory_stat_consistency(&stats, &segments).is_ok());
    }

    #[test]
    fn layouts_no_allocator_could_hold_are_refused_before_anything_changes() {
        let a = CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default()).unwrap();
        let seg = |blocks| RestoreSegment { size: 20 * MIB, stream: 0, pool: PoolKind::Large, private: None, blocks };
        for (blocks, why) in [
            (vec![], "no blocks"),
            (vec![block(10 * MIB, true), block(8 * MIB, false)], "add up"),
            (vec![block(10 * MIB, false), block(10 * MIB, false)], "neighbouring free"),
            (vec![block(20 * MIB, true), block(0, false)], "0 bytes"),
            (vec![block(10 * MIB + 1, true), block(10 * MIB - 1, false)], "512-byte"),
        ] {
            let err = a.restore_segment(&seg(blocks)).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        let priv_seg = RestoreSegment { private: Some((1, 2)), ..seg(vec![block(20 * MIB, true)]) };
        assert!(a.restore_segment(&priv_seg).unwrap_err().to_string().contains("no private pool"));
        assert_eq!(a.memory_reserved(), 0);
        let capped =
            CachingAllocator::new(Arc::new(SimulatedMemory::with_capacity(10 * MIB)), Default::default()).unwrap();
        assert!(capped.restore_segment(&seg(vec![block(20 * MIB, true)])).unwrap_err().is_out_of_memory());
    }
}
