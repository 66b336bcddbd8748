//! Pool checkpoints (cudagraph trees): `getCheckpointState`,
//! `setCheckpointPoolState` (with `setSegmentStateToCheckpoint`) and
//! `checkPoolLiveAllocations` of `c10/cuda/CUDACachingAllocator.cpp`, as
//! methods of [`CachingAllocator`] and of its locked state. A child module of
//! `caching`: it works on the allocator's private state, but stays out of the
//! file of the hot paths.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::*;

/// One block of a checkpointed segment: PyTorch's `BlockState` (the fields
/// `setSegmentStateToCheckpoint` reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBlock {
    pub address: u64,
    pub size: u64,
    pub stream: StreamId,
    /// Whether the block was live (allocated) when the checkpoint was taken.
    pub allocated: bool,
}

/// One segment of a checkpoint, every block from its head on (unmapped
/// ranges of expandable segments included): PyTorch's `SegmentState`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointSegment {
    /// `is_small`: the segment's pool.
    pub pool: PoolKind,
    pub blocks: Vec<CheckpointBlock>,
}

/// A private pool's block layout at one moment: PyTorch's `PrivatePoolState`
/// ([`CachingAllocator::checkpoint_pool_state`]). Segments are ordered by
/// address (PyTorch lists the heads of live blocks in its active-block hash
/// set's order, then those of free blocks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCheckpoint {
    /// `owner_id`.
    pub pool: MempoolId,
    pub segments: Vec<CheckpointSegment>,
}

/// What [`CachingAllocator::set_checkpoint_pool_state`] changed: PyTorch's
/// `CheckpointDelta`. The handles of the blocks in `ptrs_freed` are stale (drop
/// them without freeing: PyTorch removes those storages' deleters); the blocks of
/// `dataptrs_allocd` are allocated and owned by whoever takes these handles
/// (PyTorch's `DataPtr`s with the allocator's deleter).
#[derive(Debug)]
pub struct CheckpointDelta {
    /// Addresses of the pool's blocks that were live and were freed.
    pub ptrs_freed: Vec<u64>,
    /// One allocation per block live in the checkpoint, in segment and address order.
    pub dataptrs_allocd: Vec<Allocation>,
}

impl CachingAllocator {
    /// `getCheckpointState(device, mempool_id)`: the layout of every segment of
    /// private pool `pool` — each block's address, size, stream and whether it is
    /// allocated. First records the events of blocks freed during a capture
    /// (`insert_events_deferred_until_no_capture`), as PyTorch does. A pool whose
    /// use count reached 0 can still be checkpointed (it is still in
    /// `graph_pools`). Fails for an unknown pool, and for a pool one of whose
    /// blocks still waits for stream events ("Events should have synchronized
    /// when checkpointing block"). Changes no statistic.
    pub fn checkpoint_pool_state(&self, pool: MempoolId) -> Result<PoolCheckpoint, AllocError> {
        let mut st = self.lock();
        let result = st.checkpoint_pool_state(&self.device, pool);
        st.emitter.flush();
        result
    }

    /// `setCheckpointPoolState(device, pps)`: returns private pool
    /// `checkpoint.pool` to the checkpointed layout. As PyTorch does it: every
    /// block of the pool allocated now is freed (`freeBlocksAllocatedToPool`,
    /// through `free`); then, per checkpointed segment, every block of the
    /// checkpoint is allocated again from the segment's one free block
    /// (`alloc_found_block`, splitting while the block is larger than the
    /// checkpointed size, each block's requested size being its size), and the
    /// blocks not live in the checkpoint are freed again. Segments the pool got
    /// after the checkpoint stay, free. Reserved memory and segments do not
    /// change; `allocation`, `allocated_bytes`, `active`, `active_bytes`,
    /// `inactive_split(_bytes)` and `oversize_allocations` end as the layout
    /// says, their peaks and allocated/freed totals counting every step; and
    /// `requested_bytes` counts each restored live block at its block size (the
    /// original request is not in the checkpoint).
    ///
    /// Refused before anything changes (where PyTorch would fail part-way): an
    /// unknown pool, a freeable pool ("Not expected to checkpoint freeable
    /// graph"), a checkpointed segment with a block that waits or would wait for
    /// stream events, and a checkpoint that does not fit the segment (no free
    /// block at its address after the frees, sizes or addresses that do not add
    /// up, two neighbouring free blocks, another stream).
    pub fn set_checkpoint_pool_state(&self, checkpoint: &PoolCheckpoint) -> Result<CheckpointDelta, AllocError> {
        let mut st = self.lock();
        let result = st.set_checkpoint_pool_state(&self.device, checkpoint);
        st.emitter.flush();
        let (ptrs_freed, created) = result?;
        let dataptrs_allocd = created.into_iter().map(|id| self.handle_of(&st, id)).collect();
        Ok(CheckpointDelta { ptrs_freed, dataptrs_allocd })
    }

    /// `checkPoolLiveAllocations(device, mempool_id, expected_live_allocations)`:
    /// whether the allocated blocks of private pool `pool` are exactly the
    /// addresses in `expected` (every allocated block's address is in the set, and
    /// there are as many of them as the set holds). Fails for an unknown pool
    /// ("Could not find pool of id").
    pub fn check_pool_live_allocations(&self, pool: MempoolId, expected: &BTreeSet<u64>) -> Result<bool, AllocError> {
        let st = self.lock();
        let slot = st.slot_of(&self.device, pool)?;
        let mut allocated_pool_blocks = 0usize;
        for (_, b) in st.arena.live() {
            if b.allocated && b.private == slot {
                if !expected.contains(&b.addr) {
                    return Ok(false);
                }
                allocated_pool_blocks += 1;
            }
        }
        Ok(allocated_pool_blocks == expected.len())
    }
}

impl State {
    // ----- pool checkpoints -----

    /// The first block of each segment of private pool `slot` that is live or
    /// free (`get_private_pool_head_blocks`: an unmapped head is in neither set),
    /// by address.
    fn private_pool_head_blocks(&self, slot: u32) -> Vec<u32> {
        let mut heads: Vec<u32> = self
            .arena
            .live()
            .filter(|(_, b)| b.private == slot && b.prev == NIL && b.mapped)
            .map(|(id, _)| id)
            .collect();
        heads.sort_by_key(|&id| self.arena[id].addr);
        heads
    }

    /// `getCheckpointState`.
    fn checkpoint_pool_state(&mut self, dev: &Device, pool: MempoolId) -> Result<PoolCheckpoint, AllocError> {
        self.insert_events_deferred_until_no_capture(dev);
        let slot = self.slot_of(dev, pool)?;
        let mut segments = Vec::new();
        for head in self.private_pool_head_blocks(slot) {
            let mut blocks = Vec::new();
            let mut cur = head;
            while cur != NIL {
                let b = &self.arena[cur];
                // `BlockState`: "Events should have synchronized when checkpointing block".
                if b.event_count > 0 || (!b.allocated && !b.stream_uses.is_empty()) {
                    return Err(AllocError::CheckpointPendingBlock { device: dev.name.clone(), pool, addr: b.addr });
                }
                blocks.push(CheckpointBlock {
                    address: b.addr,
                    size: b.size,
                    stream: b.stream,
                    allocated: b.allocated,
                });
                cur = b.next;
            }
            segments.push(CheckpointSegment { pool: self.arena[head].pool, blocks });
        }
        Ok(PoolCheckpoint { pool, segments })
    }

    /// Checks, without changing anything, that `setSegmentStateToCheckpoint` will
    /// go through for `seg` once the pool's live blocks are freed; returns the
    /// segment's head block.
    fn check_checkpoint_segment(
        &self,
        dev: &Device,
        pool: MempoolId,
        slot: u32,
        seg: &CheckpointSegment,
    ) -> Result<u32, AllocError> {
        let first = seg.blocks.first().map_or(0, |b| b.address);
        let mismatch =
            |reason: String| AllocError::CheckpointMismatch { device: dev.name.clone(), pool, segment: first, reason };
        if seg.blocks.is_empty() {
            return Err(mismatch("the checkpointed segment has no blocks".into()));
        }
        let Some(head) = self.private_pool_head_blocks(slot).into_iter().find(|&id| self.arena[id].addr == first)
        else {
            return Err(mismatch(format!("could not find {first:#x} among the pool's segments")));
        };
        // The segment after `freeBlocksAllocatedToPool`: runs of merged free
        // (mapped) and unmapped blocks, as (address, size, mapped).
        let (stream, expandable) = (self.arena[head].stream, self.arena[head].expandable != NIL);
        let mut runs: Vec<(u64, u64, bool)> = Vec::new();
        let mut cur = head;
        while cur != NIL {
            let b = &self.arena[cur];
            if b.event_count > 0 || !b.stream_uses.is_empty() {
                return Err(AllocError::CheckpointPendingBlock { device: dev.name.clone(), pool, addr: b.addr });
            }
            match runs.last_mut() {
                Some(run) if run.2 == b.mapped => run.1 += b.size,
                _ => runs.push((b.addr, b.size, b.mapped)),
            }
            cur = b.next;
        }
        // `setSegmentStateToCheckpoint`'s walk over those runs.
        let n = seg.blocks.len();
        let (mut run, mut addr, mut left) = (0usize, runs[0].0, runs[0].1);
        for (i, state) in seg.blocks.iter().enumerate() {
            if run >= runs.len() {
                return Err(mismatch(format!("the segment ends before checkpointed block {i}")));
            }
            if i == n - 1 && expandable {
                // The unmapped rest of an expandable segment, kept as it is.
                if run != runs.len() - 1 || runs[run].2 || state.allocated {
                    return Err(mismatch("the last block of an expandable segment is not its unmapped rest".into()));
                }
                continue;
            }
            if !runs[run].2 {
                return Err(mismatch(format!(
                    "checkpointed block {i} at {:#x} lies in unmapped memory",
                    state.address
                )));
            }
            if state.address != addr || state.size == 0 || state.size > left || state.stream != stream {
                return Err(mismatch(format!(
                    "checkpointed block {i} ({} bytes at {:#x}, stream {}) does not fit the free block of {left} bytes \
                     at {addr:#x} (stream {stream})",
                    state.size, state.address, state.stream
                )));
            }
            if i > 0 && !state.allocated && !seg.blocks[i - 1].allocated {
                return Err(mismatch(format!("checkpointed blocks {} and {i} are neighbouring free blocks", i - 1)));
            }
            addr += state.size;
            left -= state.size;
            if left == 0 {
                run += 1;
                if let Some(&(a, l, _)) = runs.get(run) {
                    (addr, left) = (a, l);
                }
            }
            if (run < runs.len()) != (i + 1 < n) {
                return Err(mismatch(format!("the segment does not end with checkpointed block {i}")));
            }
        }
        Ok(head)
    }

    /// `setCheckpointPoolState`: (addresses freed, blocks allocated for the
    /// checkpoint's live blocks).
    fn set_checkpoint_pool_state(
        &mut self,
        dev: &Device,
        checkpoint: &PoolCheckpoint,
    ) -> Result<(Vec<u64>, Vec<u32>), AllocError> {
        let pool = checkpoint.pool;
        if self.freeable_pools.contains(&pool) {
            return Err(AllocError::CheckpointFreeablePool { device: dev.name.clone(), pool });
        }
        let slot = self.slot_of(dev, pool)?;
        let mut heads = Vec::with_capacity(checkpoint.segments.len());
        for seg in &checkpoint.segments {
            let head = self.check_checkpoint_segment(dev, pool, slot, seg)?;
            if heads.contains(&head) {
                let segment = self.arena[head].addr;
                let reason = "the checkpoint lists the segment twice".to_owned();
                return Err(AllocError::CheckpointMismatch { device: dev.name.clone(), pool, segment, reason });
            }
            heads.push(head);
        }

        // `freeBlocksAllocatedToPool`.
        let mut freed = Vec::new();
        for head in self.private_pool_head_blocks(slot) {
            let mut cur = head;
            while cur != NIL {
                if self.arena[cur].allocated {
                    freed.push(self.arena[cur].addr);
                    self.free(dev, cur);
                }
                cur = self.arena[cur].next;
            }
        }

        let mut created = Vec::new();
        for seg in &checkpoint.segments {
            // After the frees the segment's head is its one free block (heads are
            // never merged away: a merge keeps the lower block's address).
            let head = self
                .private_pool_head_blocks(slot)
                .into_iter()
                .find(|&id| self.arena[id].addr == seg.blocks[0].address)
                .expect("checked above");
            self.set_segment_state_to_checkpoint(dev, slot, head, seg, &mut created);
        }
        Ok((freed, created))
    }

    /// `setSegmentStateToCheckpoint`: allocates every checkpointed block of the
    /// segment headed by free block `head`, then frees those not live in the
    /// checkpoint; pushes the live ones to `created`.
    fn set_segment_state_to_checkpoint(
        &mut self,
        dev: &Device,
        slot: u32,
        head: u32,
        seg: &CheckpointSegment,
        created: &mut Vec<u32>,
    ) {
        let n = seg.blocks.len();
        let mut cur = head;
        let mut last = head;
        for (i, state) in seg.blocks.iter().enumerate() {
            if i == n - 1 && self.arena[cur].expandable != NIL {
                continue;
            }
            self.remove_free(cur);
            let req = Request {
                stream: state.stream,
                pool: self.arena[cur].pool,
                private: slot,
                size: state.size,
                alloc_size: state.size,
            };
            // Split while the block is larger than the checkpointed one: the rest
            // belongs to the next block (max_split_size may have changed since).
            let split = self.arena[cur].size > state.size;
            let id = self.alloc_found_block(cur, &req, state.size, None, split);
            debug_assert!(self.arena[id].addr == state.address && self.arena[id].size == state.size);
            last = id;
            cur = self.arena[id].next;
        }
        while self.arena[last].prev != NIL {
            last = self.arena[last].prev;
        }
        cur = last;
        for (i, state) in seg.blocks.iter().enumerate() {
            let next = self.arena[cur].next;
            if i == n - 1 && self.arena[cur].expandable != NIL {
                cur = next;
                continue;
            }
            if state.allocated {
                created.push(cur);
            } else {
                self.free(dev, cur);
                debug_assert!(self.arena[cur].addr == state.address && self.arena[cur].size == state.size);
            }
            cur = next;
        }
    }
}
