//! The caching allocator: PyTorch's `DeviceCachingAllocator` (as of PyTorch 2.9,
//! `c10/cuda/CUDACachingAllocator.cpp`), one per device, over a [`RawAllocator`].
//!
//! Blocks live in an arena and refer to their neighbours by index; the free
//! blocks of each pool sit in a `BTreeMap` ordered by (stream, size, address),
//! which is PyTorch's `BlockComparatorSize`, so the best-fit lookup is the same
//! `lower_bound`.
//!
//! Private pools (CUDA graphs' pools and `torch.cuda.MemPool`) are modelled as in
//! PyTorch (read in `CUDACachingAllocator.cpp`'s 2.9–2.11 form, the one with
//! `use_on_oom_pools`, `no_split_pools`, `try_mempool_fallback` and
//! `emptyCache(mempool_id)`; the copy read carried no commit id): each
//! [`MempoolId`] owns a small and a large free-block pool of its own
//! (`PrivatePool`), allocations go to the last pool begun whose stream filter
//! matches (`get_pool`), a pool's blocks are never handed out outside it (but by
//! the `use_on_oom` fallback), and its segments go back to the device only once
//! its use count reached 0 (`releasePool`) and `empty_cache` finds them free.
//! Statistics count a pool's blocks in `small_pool`/`large_pool` by size, as
//! `get_stat_types_for_pool` does. IPC sharing is not modelled.
//!
//! Pool checkpointing (cudagraph trees) is modelled as in the same file
//! (pytorch/pytorch commit 001074d25084fdb87a799823e395a50f5ec044d3):
//! [`CachingAllocator::checkpoint_pool_state`] is `getCheckpointState`,
//! [`CachingAllocator::set_checkpoint_pool_state`] is `setCheckpointPoolState`
//! (`freeBlocksAllocatedToPool`, then `setSegmentStateToCheckpoint` per
//! segment: every checkpointed block allocated again with
//! `alloc_found_block`, then the ones not live in the checkpoint freed), and
//! [`CachingAllocator::check_pool_live_allocations`] is `checkPoolLiveAllocations`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use super::config::AllocatorConfig;
use super::consts::{MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};
use super::error::{AllocError, OutOfMemoryError};
use super::expandable::ExpandableSegment;
use super::free_set::{self, FreeSet, MAX_KEY_SIZE, MAX_STREAM};

use super::raw::{EventId, MemInfo, RawAllocator, RawError, StreamId};
use super::stats::{MemoryStats, PoolKind};
use crate::hooks::{AllocatorAction, AllocatorEvent, Emitter, Event, Hooks, Tag};

pub(crate) mod checkpoint;
pub(crate) mod restore;

/// Requests of this size (1 EiB) or more are refused outright, as in PyTorch.
pub const MAX_REQUEST: u64 = 1 << 60;

/// "No block" in the arena's links.
const NIL: u32 = u32::MAX;

/// Source of allocator identities, so a handle is only accepted by its owner.
static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(1);

/// A live allocation handed out by [`CachingAllocator::malloc`]. It is not `Clone`:
/// giving it back to [`CachingAllocator::free`] consumes it, so it cannot be freed
/// twice.
#[derive(Debug, PartialEq, Eq)]
pub struct Allocation {
    addr: u64,
    size: u64,
    requested: u64,
    stream: StreamId,
    pool: PoolKind,
    tag: Option<Tag>,
    block: u32,
    owner: u32,
}

impl Allocation {
    /// Device address of the first byte (0 for a 0-byte request).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The block's size: the rounded request, or more when the block was not split.
    /// This is what `allocated_bytes` counts.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Bytes the caller asked for.
    pub fn requested(&self) -> u64 {
        self.requested
    }
    pub fn stream(&self) -> StreamId {
        self.stream
    }
    pub fn pool(&self) -> PoolKind {
        self.pool
    }
    pub fn tag(&self) -> Option<Tag> {
        self.tag
    }
    /// Whether this is the null allocation of a 0-byte request.
    pub fn is_null(&self) -> bool {
        self.block == NIL
    }
}

/// A private pool's id: PyTorch's `MempoolId_t`, a pair. CUDA graphs use
/// `(capture id, 0)`, `graph_pool_handle()` and `MemPool` use `(0, n)`; `(0, 0)`
/// is the default pool and never names a private one.
pub type MempoolId = (u64, u64);

/// Which allocations a pool being allocated to takes
/// ([`CachingAllocator::begin_allocate_to_pool`]): PyTorch's filter function.
/// A graph capture takes the streams being captured; `torch.cuda.use_mem_pool`
/// takes every allocation of the current thread, which a model with one thread
/// per device sees as every stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolFilter {
    /// Every allocation, on any stream.
    AllStreams,
    /// Allocations on these streams only.
    Streams(Vec<StreamId>),
}

impl PoolFilter {
    #[inline]
    fn matches(&self, stream: StreamId) -> bool {
        match self {
            PoolFilter::AllStreams => true,
            PoolFilter::Streams(s) => s.contains(&stream),
        }
    }
}

/// State of a block in a [`SegmentInfo`], as PyTorch's snapshot names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
}

/// One block of a segment in a [`CachingAllocator::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub tag: Option<Tag>,
}

/// One segment (for expandable segments: one contiguous mapped range), as in
/// `torch.cuda.memory_snapshot()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    /// The private pool owning the segment (`segment_pool_id`); `None` for the
    /// default pool (PyTorch's `(0, 0)`).
    #[serde(default)]
    pub pool_id: Option<MempoolId>,
    pub is_expandable: bool,
    pub blocks: Vec<BlockInfo>,
}

#[derive(Debug, Clone)]
struct Block {
    addr: u64,
    size: u64,
    requested: u64,
    stream: StreamId,
    pool: PoolKind,
    allocated: bool,
    mapped: bool,
    prev: u32,
    next: u32,
    event_count: u32,
    stream_uses: Vec<StreamId>,
    gc_count_base: i64,
    tag: Option<Tag>,
    /// Index into `State::expandable`, or NIL.
    expandable: u32,
    /// Index into `State::private_pools`, or NIL for the default pools.
    private: u32,
    in_use: bool,
}

impl Block {
    fn new(addr: u64, size: u64, stream: StreamId, pool: PoolKind, private: u32) -> Block {
        Block {
            addr,
            size,
            requested: 0,
            stream,
            pool,
            private,
            allocated: false,
            mapped: true,
            prev: NIL,
            next: NIL,
            event_count: 0,
            stream_uses: Vec::new(),
            gc_count_base: 0,
            tag: None,
            expandable: NIL,
            in_use: true,
        }
    }

    #[inline]
    fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    #[inline]
    fn size_key(&self) -> u128 {
        free_set::key(self.stream, self.size, self.addr)
    }

    #[inline]
    fn addr_key(&self) -> AddrKey {
        (self.stream, self.addr)
    }
}

/// (stream, address): PyTorch's `BlockComparatorAddress`.
type AddrKey = (StreamId, u64);

/// The free blocks of one pool.
#[derive(Debug, Default)]
struct BlockPool {
    /// Free, mapped blocks by (stream, size, address): PyTorch's `BlockComparatorSize`.
    blocks: FreeSet,
    /// Unmapped ranges of expandable segments by (stream, address).
    unmapped: BTreeMap<AddrKey, u32>,
    get_free_blocks_call_count: i64,
}

/// A private pool (`PrivatePool`): its own free blocks, its users and its segments.
#[derive(Debug)]
struct PrivatePool {
    id: MempoolId,
    small: BlockPool,
    large: BlockPool,
    /// Graphs / `MemPool`s / ongoing `use_mem_pool`s using the pool.
    use_count: i64,
    /// Device allocations made for the pool and not yet freed
    /// (`cudaMalloc_count`): one up per segment or successful expandable
    /// `alloc_block`, one down per `release_block` or `unmap_block`; the pool is
    /// deleted once both counts are 0.
    device_malloc_count: i64,
}

/// Picks one of the free-block pools (split borrow of the state).
#[inline]
fn block_pool<'a>(
    small: &'a mut BlockPool,
    large: &'a mut BlockPool,
    private_pools: &'a mut [Option<PrivatePool>],
    kind: PoolKind,
    private: u32,
) -> &'a mut BlockPool {
    if private == NIL {
        match kind {
            PoolKind::Small => small,
            PoolKind::Large => large,
        }
    } else {
        let p = private_pools[private as usize].as_mut().expect("a block's private pool is live");
        match kind {
            PoolKind::Small => &mut p.small,
            PoolKind::Large => &mut p.large,
        }
    }
}

/// Block storage with stable indices.
#[derive(Debug, Default)]
struct Arena {
    slots: Vec<Block>,
    vacant: Vec<u32>,
}

impl Arena {
    #[inline]
    fn insert(&mut self, block: Block) -> u32 {
        if let Some(i) = self.vacant.pop() {
            self.slots[i as usize] = block;
            i
        } else {
            self.slots.push(block);
            (self.slots.len() - 1) as u32
        }
    }

    #[inline]
    fn remove(&mut self, i: u32) {
        self.slots[i as usize].in_use = false;
        self.slots[i as usize].stream_uses = Vec::new();
        self.vacant.push(i);
    }

    fn live(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.slots.iter().enumerate().filter(|(_, b)| b.in_use).map(|(i, b)| (i as u32, b))
    }
}

impl std::ops::Index<u32> for Arena {
    type Output = Block;
    #[inline]
    fn index(&self, i: u32) -> &Block {
        &self.slots[i as usize]
    }
}

impl std::ops::IndexMut<u32> for Arena {
    #[inline]
    fn index_mut(&mut self, i: u32) -> &mut Block {
        &mut self.slots[i as usize]
    }
}

/// What one `malloc` is looking for (PyTorch's `AllocParams`).
#[derive(Debug, Clone, Copy)]
struct Request {
    stream: StreamId,
    pool: PoolKind,
    /// The private pool (index into `State::private_pools`), or NIL.
    private: u32,
    /// Rounded size.
    size: u64,
    /// Segment size to ask of the device.
    alloc_size: u64,
}

/// Everything behind the allocator's lock.
#[derive(Debug)]
struct State {
    config: AllocatorConfig,
    /// `config.max_split_size`, u64::MAX when unlimited (hot-path copy).
    max_split_size: u64,
    stats: MemoryStats,
    arena: Arena,
    small: BlockPool,
    large: BlockPool,
    /// Bytes obtained from the device (segments plus mapped pages).
    total_allocated_memory: u64,
    /// The per-process limit when a memory fraction below 1 is set.
    allowed_memory_maximum: Option<u64>,
    expandable: Vec<Option<ExpandableSegment>>,
    /// Outstanding stream events per stream, oldest first.
    /// Ordered by stream so that processing order (and so the stats) is deterministic.
    pending_events: BTreeMap<StreamId, VecDeque<(EventId, u32)>>,
    num_pending_events: usize,
    /// Events of the operation in progress, delivered when it ends.
    emitter: Emitter,
    device_index: u32,
    /// Private pools by slot (`graph_pools`); `None` is a free slot.
    private_pools: Vec<Option<PrivatePool>>,
    /// Slot of each live private pool.
    pool_slots: BTreeMap<MempoolId, u32>,
    /// Pools whose use count reached 0 (`graph_pools_freeable`).
    freeable_pools: BTreeSet<MempoolId>,
    /// Pools being allocated to, in the order begun (`captures_underway`).
    captures_underway: Vec<(MempoolId, u32, PoolFilter)>,
    /// Pools that serve a default-pool request about to fail (`use_on_oom_pools`).
    use_on_oom_pools: BTreeSet<MempoolId>,
    /// Pools whose blocks are never split (`no_split_pools`).
    no_split_pools: BTreeSet<u32>,
    /// Blocks freed during a capture while other streams used them: their
    /// events are recorded once no capture is underway
    /// (`needs_events_deferred_until_no_capture`).
    deferred_blocks: Vec<u32>,
}

/// The device behind the allocator, outside the locked state.
#[derive(Debug)]
struct Device {
    raw: Arc<dyn RawAllocator>,
    hooks: Arc<Hooks>,
    name: String,
}

impl Device {
    fn device_error(&self, source: RawError) -> AllocError {
        AllocError::Device { device: self.name.clone(), source }
    }
}

/// The lock around the allocator's state: a test-and-test-and-set spin lock
/// whose waiters yield the processor between looks.
///
/// Why not `std::sync::Mutex`: its unlock is an atomic swap (to learn whether a
/// sleeper needs waking), so a cached alloc+free pair paid four atomic
/// read-modify-writes, about a third of the pair's time; this lock's unlock is a
/// plain release store. Critical sections are tens of nanoseconds and contention
/// is rare (one device's allocations usually come from one thread); the long
/// ones — a raw device malloc on a cache miss — make waiters yield, not sleep.
type StateLock = spin::mutex::SpinMutex<State, YieldWhileLocked>;
type StateGuard<'a> = spin::mutex::SpinMutexGuard<'a, State, YieldWhileLocked>;

/// Waiting strategy of [`StateLock`]: give the processor away between looks.
struct YieldWhileLocked;

impl spin::RelaxStrategy for YieldWhileLocked {
    #[inline]
    fn relax() {
        std::thread::yield_now();
    }
}

/// A caching allocator for one device. Safe to share between threads.
pub struct CachingAllocator {
    device: Device,
    id: u32,
    state: StateLock,
}

impl std::fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator").field("device", &self.device.name).field("id", &self.id).finish()
    }
}

/// Segment size for a rounded request (`get_allocation_size`).
#[inline]
fn allocation_size(size: u64, large_segment_size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        large_segment_size
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

impl CachingAllocator {
    /// A caching allocator over `raw` with its own event hub and device index 0.
    pub fn new(raw: Arc<dyn RawAllocator>, config: AllocatorConfig) -> Result<CachingAllocator, AllocError> {
        CachingAllocator::with_hooks(raw, config, Hooks::new(), 0)
    }

    /// A caching allocator that emits its events to `hooks`, as device `device_index`.
    pub fn with_hooks(
        raw: Arc<dyn RawAllocator>,
        config: AllocatorConfig,
        hooks: Arc<Hooks>,
        device_index: u32,
    ) -> Result<CachingAllocator, AllocError> {
        config.validate()?;
        let total = raw.mem_info().total_bytes;
        let allowed_memory_maximum = config.effective_memory_fraction().map(|f| (f * total as f64) as u64);
        let name = raw.name().to_owned();
        let state = State {
            max_split_size: config.max_split_size_bytes(),
            stats: MemoryStats::new(config.max_split_size),
            config,
            arena: Arena::default(),
            small: BlockPool::default(),
            large: BlockPool::default(),
            total_allocated_memory: 0,
            allowed_memory_maximum,
            expandable: Vec::new(),
            pending_events: BTreeMap::new(),
            num_pending_events: 0,
            emitter: Emitter::new(hooks.clone()),
            device_index,
            private_pools: Vec::new(),
            pool_slots: BTreeMap::new(),
            freeable_pools: BTreeSet::new(),
            captures_underway: Vec::new(),
            use_on_oom_pools: BTreeSet::new(),
            no_split_pools: BTreeSet::new(),
            deferred_blocks: Vec::new(),
        };
        Ok(CachingAllocator {
            device: Device { raw, hooks, name },
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            state: StateLock::new(state),
        })
    }

    #[inline]
    fn lock(&self) -> StateGuard<'_> {
        // The guard unlocks during unwinding too: a panic inside a subscriber
        // does not leave the allocator locked.
        self.state.lock()
    }

    /// The device's name (`cpu`, `cuda:0`, `simulated`).
    pub fn device_name(&self) -> &str {
        &self.device.name
    }

    /// The hub this allocator emits to.
    pub fn hooks(&self) -> &Arc<Hooks> {
        &self.device.hooks
    }

    /// The configuration in force.
    pub fn config(&self) -> AllocatorConfig {
        self.lock().config.clone()
    }

    /// Free and total memory as the device reports them.
    pub fn mem_info(&self) -> MemInfo {
        self.device.raw.mem_info()
    }

    /// The untagged handle of block `id`, owned by the caller: what
    /// [`Self::restore_segment`] and [`Self::set_checkpoint_pool_state`] hand
    /// out for the blocks they allocate.
    fn handle_of(&self, st: &State, id: u32) -> Allocation {
        let b = &st.arena[id];
        Allocation {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            stream: b.stream,
            pool: b.pool,
            tag: None,
            block: id,
            owner: self.id,
        }
    }

    /// Allocates `size` bytes for use on `stream`. A 0-byte request returns a null
    /// allocation without touching the allocator.
    pub fn malloc(&self, size: u64, stream: StreamId, tag: Option<Tag>) -> Result<Allocation, AllocError> {
        if size == 0 {
            return Ok(Allocation {
                addr: 0,
                size: 0,
                requested: 0,
                stream,
                pool: PoolKind::Small,
                tag,
                block: NIL,
                owner: self.id,
            });
        }
        if size >= MAX_REQUEST {
            // PyTorch refuses these before its allocator sees them (`one_exa_bytes`).
            return Err(AllocError::RequestTooLarge { device: self.device.name.clone(), requested_bytes: size });
        }
        if stream > MAX_STREAM {
            return Err(AllocError::InvalidStream { device: self.device.name.clone(), stream, max: MAX_STREAM });
        }
        let mut st = self.lock();
        let result = st.malloc(&self.device, size, stream, tag);
        st.emitter.flush();
        drop(st);
        let (id, addr, block_size, pool) = result?;
        Ok(Allocation { addr, size: block_size, requested: size, stream, pool, tag, block: id, owner: self.id })
    }

    /// Frees an allocation. Its bytes stop counting as allocated now; the block
    /// returns to the pool now, or — when other streams used it — once their
    /// work recorded at this point has completed.
    pub fn free(&self, allocation: Allocation) -> Result<(), AllocError> {
        if allocation.block == NIL && allocation.owner == self.id {
            return Ok(());
        }
        let mut st = self.lock();
        let st = &mut *st;
        let valid = allocation.owner == self.id && (allocation.block as usize) < st.arena.slots.len() && {
            let b = &st.arena[allocation.block];
            b.in_use && b.allocated && b.addr == allocation.addr
        };
        if !valid {
            return Err(AllocError::InvalidFree { device: self.device.name.clone(), addr: allocation.addr });
        }
        st.free(&self.device, allocation.block);
        st.emitter.flush();
        Ok(())
    }

    /// Marks the allocation as used by `stream` (`Tensor.record_stream`): when it is
    /// freed, its block is not reused before the work queued on `stream` until then
    /// has completed. Uses on the allocation's own stream need nothing.
    pub fn record_stream(&self, allocation: &Allocation, stream: StreamId) {
        if allocation.block == NIL || allocation.owner != self.id || stream == allocation.stream {
            return;
        }
        let mut st = self.lock();
        let b = &mut st.arena[allocation.block];
        if b.in_use && b.allocated && b.addr == allocation.addr && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
    }

    /// Counts `allocation` as `requested` bytes asked for (at most its block's
    /// size) instead of the size it was made with; only `requested_bytes`
    /// changes. Not a PyTorch call: a replay that places memory it found live
    /// (a snapshot's blocks, rewound into expandable segments) knows each
    /// block's size and the bytes its caller asked for, and allocates the one
    /// to count the other, as PyTorch's block does (`requested_size`).
    pub fn set_requested(&self, allocation: &mut Allocation, requested: u64) {
        if allocation.block == NIL || allocation.owner != self.id || requested > allocation.size {
            return;
        }
        let mut st = self.lock();
        let st = &mut *st;
        let b = &mut st.arena[allocation.block];
        if !(b.in_use && b.allocated && b.addr == allocation.addr) {
            return;
        }
        let (pool, old) = (b.pool, b.requested);
        b.requested = requested;
        st.stats.requested_bytes.decrease(pool, old);
        st.stats.requested_bytes.increase(pool, requested);
        allocation.requested = requested;
    }

    /// PyTorch's `process_events` on its own: frees the blocks whose stream events
    /// have all completed, as the start of every `malloc` does (and, like it, not
    /// while a pool is being allocated to). For replays that learn from a trace
    /// (its `free_completed`) that another stream's work is done.
    pub fn process_events(&self) {
        let mut st = self.lock();
        if st.captures_underway.is_empty() && st.num_pending_events != 0 {
            st.process_events(&self.device);
        }
        st.emitter.flush();
    }

    /// `torch.cuda.empty_cache()`: waits for outstanding stream events, then gives
    /// every fully free segment (and every fully free page of expandable segments)
    /// back to the device. Allocated memory is unchanged.
    pub fn empty_cache(&self) {
        let mut st = self.lock();
        if st.emitter.is_active() {
            st.emit_raw(AllocatorAction::EmptyCache, 0, 0, 0, 0, None);
        }
        st.release_cached_blocks(&self.device, None);
        st.emitter.flush();
    }

    /// `torch.cuda.empty_cache()` inside `use_mem_pool(pool)` / `MemPool`'s
    /// destructor (`emptyCache(mempool_id)`): releases the fully free segments of
    /// `pool` if its use count has reached 0 (waiting for that pool's events
    /// first), and deletes the pool once it holds no segment. The default pools are
    /// not touched.
    pub fn empty_cache_pool(&self, pool: MempoolId) {
        let mut st = self.lock();
        if st.emitter.is_active() {
            st.emit_raw(AllocatorAction::EmptyCache, 0, 0, 0, 0, None);
        }
        st.release_cached_blocks(&self.device, Some(pool));
        st.emitter.flush();
    }

    /// Creates private pool `pool` with use count 1, or adds one user to it
    /// (`createOrIncrefPool`; `torch.cuda.MemPool()` and `graph_pool_handle()`
    /// followed by a capture). `(0, 0)` is refused: it is the default pool.
    pub fn create_or_incref_pool(&self, pool: MempoolId) -> Result<(), AllocError> {
        if pool == (0, 0) {
            return Err(AllocError::DefaultPool { device: self.device.name.clone() });
        }
        self.lock().create_or_incref_pool(pool);
        Ok(())
    }

    /// `torch.cuda.MemPool(use_on_oom=…, no_split=…)`: creates the pool (use
    /// count 1) and sets its two flags, as [`set_use_on_oom`](Self::set_use_on_oom)
    /// and [`set_no_split`](Self::set_no_split) do.
    pub fn create_mem_pool(&self, pool: MempoolId, use_on_oom: bool, no_split: bool) -> Result<(), AllocError> {
        self.create_or_incref_pool(pool)?;
        self.set_use_on_oom(pool, use_on_oom)?;
        self.set_no_split(pool, no_split)
    }

    /// `setUseOnOOM`: whether a default-pool request that would run out of memory
    /// may take a free block of `pool` (tried before the cached blocks are released).
    pub fn set_use_on_oom(&self, pool: MempoolId, on: bool) -> Result<(), AllocError> {
        let mut st = self.lock();
        st.slot_of(&self.device, pool)?;
        if on {
            st.use_on_oom_pools.insert(pool);
        } else {
            st.use_on_oom_pools.remove(&pool);
        }
        Ok(())
    }

    /// `setNoSplit`: blocks of `pool` are handed out whole, never split.
    pub fn set_no_split(&self, pool: MempoolId, on: bool) -> Result<(), AllocError> {
        let mut st = self.lock();
        let slot = st.slot_of(&self.device, pool)?;
        if on {
            st.no_split_pools.insert(slot);
        } else {
            st.no_split_pools.remove(&slot);
        }
        Ok(())
    }

    /// `beginAllocateToPool` (a capture begins, or `use_mem_pool` is entered):
    /// creates or increfs `pool`, and from now allocations that `filter` takes go
    /// to it — the latest begun pool whose filter matches wins. While any pool is
    /// being allocated to, outstanding stream events are not processed, frees of
    /// blocks used on other streams wait for the end of allocation to pools, and an
    /// out-of-memory does not release cached blocks (all as in PyTorch).
    pub fn begin_allocate_to_pool(&self, pool: MempoolId, filter: PoolFilter) -> Result<(), AllocError> {
        if pool == (0, 0) {
            return Err(AllocError::DefaultPool { device: self.device.name.clone() });
        }
        let mut st = self.lock();
        if st.captures_underway.iter().any(|(id, _, _)| *id == pool) {
            return Err(AllocError::PoolAlreadyRecording { device: self.device.name.clone(), pool });
        }
        let slot = st.create_or_incref_pool(pool);
        st.captures_underway.push((pool, slot, filter));
        Ok(())
    }

    /// `endAllocateToPool` (a capture ends, or `use_mem_pool` is left): allocations
    /// stop going to `pool`. The pool keeps its use count (see
    /// [`release_pool`](Self::release_pool)).
    pub fn end_allocate_to_pool(&self, pool: MempoolId) -> Result<(), AllocError> {
        let mut st = self.lock();
        let Some(i) = st.captures_underway.iter().position(|(id, _, _)| *id == pool) else {
            return Err(AllocError::PoolNotRecording { device: self.device.name.clone(), pool });
        };
        st.captures_underway.remove(i);
        Ok(())
    }

    /// `releasePool` (`CUDAGraph::reset`, leaving `use_mem_pool`, `~MemPool`): one
    /// user fewer. At 0 the pool becomes freeable: `empty_cache` then gives its
    /// free segments back and deletes it once it holds none.
    pub fn release_pool(&self, pool: MempoolId) -> Result<(), AllocError> {
        let mut st = self.lock();
        let slot = st.slot_of(&self.device, pool)?;
        let p = st.private_pools[slot as usize].as_mut().expect("listed pools are live");
        if p.use_count == 0 {
            return Err(AllocError::PoolReleased { device: self.device.name.clone(), pool });
        }
        p.use_count -= 1;
        if p.use_count == 0 {
            st.freeable_pools.insert(pool);
        }
        Ok(())
    }

    /// A live private pool's use count (`getPoolUseCount`, `MemPool.use_count()`);
    /// `None` when no such pool exists (never created, or deleted).
    pub fn pool_use_count(&self, pool: MempoolId) -> Option<i64> {
        let st = self.lock();
        st.pool_slots.get(&pool).and_then(|&s| st.private_pools[s as usize].as_ref()).map(|p| p.use_count)
    }

    /// The live private pools' ids, in order.
    pub fn pools(&self) -> Vec<MempoolId> {
        self.lock().pool_slots.keys().copied().collect()
    }

    /// `torch.cuda.set_per_process_memory_fraction(f)`: new segments may not push
    /// reserved memory past `f` × total. A fraction of 1 removes the limit.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), AllocError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(AllocError::InvalidFraction(fraction));
        }
        let total = self.device.raw.mem_info().total_bytes;
        let mut st = self.lock();
        st.config.per_process_memory_fraction = Some(fraction);
        st.allowed_memory_maximum = (fraction < 1.0).then_some((fraction * total as f64) as u64);
        Ok(())
    }

    /// The per-process limit that `torch.cuda.set_per_process_memory_fraction`
    /// sets (PyTorch's `allowed_memory_maximum`), given in bytes rather than as a
    /// fraction of the device: for a limit known only by its size (a snapshot's
    /// recorded out-of-memory under a fraction). `None` removes it. Garbage
    /// collection (`garbage_collection_threshold`) acts under it as under a fraction.
    pub fn set_memory_limit(&self, bytes: Option<u64>) {
        self.lock().allowed_memory_maximum = bytes;
    }

    /// The per-process limit in force (`allowed_memory_maximum`), if any.
    pub fn memory_limit(&self) -> Option<u64> {
        self.lock().allowed_memory_maximum
    }

    /// `torch.cuda.memory._set_allocator_settings(s)`: a new configuration from `s`
    /// on top of the current one ([`AllocatorConfig::with_settings`]), in force from
    /// the next call. Where PyTorch reads `max_split_size` live and lets the
    /// `oversize_*` statistics drift when it changes under live blocks, vramlab
    /// recounts their current values against the new limit, so that they keep
    /// agreeing with the snapshot. Switching `expandable_segments` while the
    /// allocator holds segments is refused (vramlab does not model a mix of both
    /// kinds): call `empty_cache` and free the live blocks first.
    pub fn set_allocator_settings(&self, s: &str) -> Result<(), AllocError> {
        let total = self.device.raw.mem_info().total_bytes;
        let mut st = self.lock();
        let config = st.config.with_settings(s)?;
        if config.expandable_segments != st.config.expandable_segments && st.stats.reserved_bytes.all.current > 0 {
            return Err(AllocError::SettingsWhileHolding {
                device: self.device.name.clone(),
                reserved_bytes: st.stats.reserved_bytes.all.current as u64,
            });
        }
        st.allowed_memory_maximum = match config.effective_memory_fraction() {
            Some(f) => Some((f * total as f64) as u64),
            None if config.per_process_memory_fraction.is_some() => None,
            None => st.allowed_memory_maximum,
        };
        st.max_split_size = config.max_split_size_bytes();
        st.stats.max_split_size = config.max_split_size.map_or(-1, |v| v.min(i64::MAX as u64) as i64);
        st.config = config;
        st.recount_oversize();
        Ok(())
    }

    /// A copy of the statistics (`torch.cuda.memory_stats()`).
    pub fn stats(&self) -> MemoryStats {
        self.lock().stats.clone()
    }

    /// `torch.cuda.memory_allocated()`.
    #[inline]
    pub fn memory_allocated(&self) -> u64 {
        self.lock().stats.memory_allocated()
    }

    /// `torch.cuda.memory_reserved()`.
    #[inline]
    pub fn memory_reserved(&self) -> u64 {
        self.lock().stats.memory_reserved()
    }

    /// `memory_allocated()` and `memory_reserved()` read under one lock (for
    /// callers that follow both after every operation, such as a replay).
    #[inline]
    pub fn memory_allocated_and_reserved(&self) -> (u64, u64) {
        let st = self.lock();
        (st.stats.memory_allocated(), st.stats.memory_reserved())
    }

    /// `torch.cuda.max_memory_allocated()`.
    #[inline]
    pub fn max_memory_allocated(&self) -> u64 {
        self.lock().stats.max_memory_allocated()
    }

    /// `torch.cuda.max_memory_reserved()`.
    #[inline]
    pub fn max_memory_reserved(&self) -> u64 {
        self.lock().stats.max_memory_reserved()
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&self) {
        self.lock().stats.reset_peak();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&self) {
        self.lock().stats.reset_accumulated();
    }

    /// The device memory under this allocator (what `cudaMalloc` / `cudaFree`
    /// are to PyTorch's), for measuring it directly or building another
    /// allocator over the same device.
    pub fn raw_memory(&self) -> &Arc<dyn RawAllocator> {
        &self.device.raw
    }

    /// The largest free cached block (0 when none), as `cacheInfo` reports it.
    pub fn largest_free_block(&self) -> u64 {
        let st = self.lock();
        let largest = |p: &BlockPool| p.blocks.sizes().max().unwrap_or(0);
        let private = st.private_pools.iter().flatten().map(|p| largest(&p.small).max(largest(&p.large))).max();
        largest(&st.small).max(largest(&st.large)).max(private.unwrap_or(0))
    }

    /// Every segment with its blocks, sorted by address (`torch.cuda.memory_snapshot()`).
    /// For expandable segments each contiguous mapped range is one segment.
    pub fn snapshot(&self) -> Vec<SegmentInfo> {
        self.lock().snapshot()
    }

    /// [`stats`](Self::stats) and [`snapshot`](Self::snapshot) taken under one lock,
    /// so that they describe the same moment.
    pub fn stats_and_snapshot(&self) -> (MemoryStats, Vec<SegmentInfo>) {
        let st = self.lock();
        (st.stats.clone(), st.snapshot())
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        // Give every segment back, live blocks or not: the memory belongs to us.
        let mut heads = Vec::new();
        for (_, b) in st.arena.live() {
            if b.expandable == NIL && b.prev == NIL {
                let mut size = 0;
                let mut cur = Some(b);
                while let Some(c) = cur {
                    size += c.size;
                    cur = (c.next != NIL).then(|| &st.arena[c.next]);
                }
                heads.push((b.addr, size));
            }
        }
        for (addr, size) in heads {
            self.device.raw.free(addr, size);
        }
        for seg in st.expandable.iter_mut().flatten() {
            seg.release_all(&*self.device.raw);
        }
    }
}

impl State {
    /// The malloc path under the lock: (block, address, block size, pool).
    fn malloc(
        &mut self,
        dev: &Device,
        size: u64,
        stream: StreamId,
        tag: Option<Tag>,
    ) -> Result<(u32, u64, u64, PoolKind), AllocError> {
        let capturing = !self.captures_underway.is_empty();
        if !capturing {
            if !self.deferred_blocks.is_empty() {
                self.insert_events_deferred_until_no_capture(dev);
            }
            if self.num_pending_events != 0 {
                self.process_events(dev);
            }
        }
        let rounded = self.config.round_size(size);
        let pool = if rounded <= SMALL_SIZE { PoolKind::Small } else { PoolKind::Large };
        let mut req = Request {
            stream,
            pool,
            private: if capturing { self.get_pool(stream) } else { NIL },
            size: rounded,
            alloc_size: allocation_size(rounded, self.config.large_segment_size),
        };
        let block = match self.get_free_block(&req) {
            Some(b) => b,
            None => match self.allocate_new(dev, &mut req)? {
                Some(b) => b,
                None => return Err(self.out_of_memory(dev, &req, size)),
            },
        };
        let split = self.should_split(block, rounded);
        let id = self.alloc_found_block(block, &req, size, tag, split);
        let b = &self.arena[id];
        Ok((id, b.addr, b.size, pool))
    }

    /// The private pool an allocation on `stream` goes to while pools are being
    /// allocated to (`get_pool`): the latest begun whose filter takes it, else NIL.
    fn get_pool(&self, stream: StreamId) -> u32 {
        self.captures_underway.iter().rev().find(|(_, _, f)| f.matches(stream)).map_or(NIL, |&(_, slot, _)| slot)
    }

    /// `create_or_incref_pool`: the pool's slot.
    fn create_or_incref_pool(&mut self, id: MempoolId) -> u32 {
        if let Some(&slot) = self.pool_slots.get(&id) {
            let p = self.private_pools[slot as usize].as_mut().expect("listed pools are live");
            p.use_count += 1;
            if p.use_count == 1 {
                // Revived after its users were gone (PyTorch asserts use_count > 0
                // here; a trace may release a pool and capture into it again).
                self.freeable_pools.remove(&id);
            }
            return slot;
        }
        let pool = PrivatePool {
            id,
            small: BlockPool::default(),
            large: BlockPool::default(),
            use_count: 1,
            device_malloc_count: 0,
        };
        let slot = match self.private_pools.iter().position(Option::is_none) {
            Some(i) => {
                self.private_pools[i] = Some(pool);
                i
            }
            None => {
                self.private_pools.push(Some(pool));
                self.private_pools.len() - 1
            }
        } as u32;
        self.pool_slots.insert(id, slot);
        slot
    }

    fn slot_of(&self, dev: &Device, id: MempoolId) -> Result<u32, AllocError> {
        self.pool_slots.get(&id).copied().ok_or_else(|| AllocError::UnknownPool { device: dev.name.clone(), pool: id })
    }

    fn pool_id_of(&self, private: u32) -> Option<MempoolId> {
        (private != NIL).then(|| self.private_pools[private as usize].as_ref().expect("a block's pool is live").id)
    }

    /// Records the events of blocks freed during a capture
    /// (`insert_events_deferred_until_no_capture`).
    fn insert_events_deferred_until_no_capture(&mut self, dev: &Device) {
        for id in std::mem::take(&mut self.deferred_blocks) {
            self.insert_events(dev, id);
        }
    }

    /// Buffers an allocator event about block `id` (when anybody listens).
    #[inline]
    fn emit(&mut self, action: AllocatorAction, id: u32, requested: u64, rounded: u64) {
        if self.emitter.is_active() {
            let b = &self.arena[id];
            let (stream, addr, tag) = (b.stream, b.addr, b.tag);
            self.emit_raw(action, stream, addr, requested, rounded, tag);
        }
    }

    #[cold]
    fn emit_raw(
        &mut self,
        action: AllocatorAction,
        stream: StreamId,
        addr: u64,
        requested: u64,
        rounded: u64,
        tag: Option<Tag>,
    ) {
        let time_ns = self.emitter.batch_time_ns();
        self.emitter.push(Event::Allocator(AllocatorEvent {
            action,
            time_ns,
            device: self.device_index,
            stream,
            addr,
            requested_bytes: requested,
            rounded_bytes: rounded,
            tag,
        }));
    }

    #[inline]
    fn pool_mut(&mut self, pool: PoolKind, private: u32) -> &mut BlockPool {
        block_pool(&mut self.small, &mut self.large, &mut self.private_pools, pool, private)
    }

    #[inline]
    fn gc_enabled(&self) -> bool {
        self.allowed_memory_maximum.is_some() && self.config.garbage_collection_threshold.is_some_and(|t| t > 0.0)
    }

    /// Puts a free mapped block into its pool (`insert_into_blocks`).
    #[inline]
    fn insert_free(&mut self, id: u32) {
        let (pool, private, key) = {
            let b = &self.arena[id];
            (b.pool, b.private, b.size_key())
        };
        let p = self.pool_mut(pool, private);
        let base = p.get_free_blocks_call_count;
        p.blocks.insert(key, id);
        self.arena[id].gc_count_base = base;
    }

    #[inline]
    fn remove_free(&mut self, id: u32) {
        let (pool, private, key) = {
            let b = &self.arena[id];
            (b.pool, b.private, b.size_key())
        };
        let removed = self.pool_mut(pool, private).blocks.remove(key);
        debug_assert_eq!(removed, Some(id));
    }

    fn insert_unmapped(&mut self, id: u32) {
        let (pool, private, key) = {
            let b = &self.arena[id];
            (b.pool, b.private, b.addr_key())
        };
        self.pool_mut(pool, private).unmapped.insert(key, id);
    }

    fn remove_unmapped(&mut self, id: u32) {
        let (pool, private, key) = {
            let b = &self.arena[id];
            (b.pool, b.private, b.addr_key())
        };
        let removed = self.pool_mut(pool, private).unmapped.remove(&key);
        debug_assert_eq!(removed, Some(id));
    }

    fn should_split(&self, block: u32, size: u64) -> bool {
        let b = &self.arena[block];
        if b.private != NIL && self.no_split_pools.contains(&b.private) {
            return false;
        }
        let remaining = b.size - size;
        if b.pool == PoolKind::Small || self.config.expandable_segments {
            remaining >= super::consts::MIN_BLOCK_SIZE
        } else {
            size < self.max_split_size && remaining > SMALL_SIZE
        }
    }

    /// Best-fit lookup (`get_free_block`); removes the block from its pool.
    fn get_free_block(&mut self, req: &Request) -> Option<u32> {
        let gc = self.gc_enabled();
        let expandable_on = self.config.expandable_segments;
        let max_split = self.max_split_size;
        let max_non_split_rounding = self.config.max_non_split_rounding;
        let arena = &self.arena;
        let pool = block_pool(&mut self.small, &mut self.large, &mut self.private_pools, req.pool, req.private);
        if gc {
            pool.get_free_blocks_call_count += 1;
        }
        let (mut k, mut id) = pool.blocks.first_from(free_set::key(req.stream, req.size, 0))?;
        if arena[id].stream != req.stream {
            return None;
        }
        if arena[id].expandable != NIL {
            if expandable_on {
                // Best fit counts what an expandable block could grow to.
                let expandable_size =
                    |b: &Block| b.size + if b.next != NIL && !arena[b.next].mapped { arena[b.next].size } else { 0 };
                while let Some((nk, next)) = pool.blocks.first_after(k) {
                    let nb = &arena[next];
                    if arena[id].expandable != NIL
                        && nb.stream == req.stream
                        && expandable_size(nb) < expandable_size(&arena[id])
                    {
                        (k, id) = (nk, next);
                    } else {
                        break;
                    }
                }
            } else {
                // Expandable segments were turned off: only plain blocks qualify.
                loop {
                    (k, id) = pool.blocks.first_after(k)?;
                    let b = &arena[id];
                    if b.stream != req.stream {
                        return None;
                    }
                    if b.expandable == NIL {
                        break;
                    }
                }
            }
        }
        let size = arena[id].size;
        if req.size < max_split && size >= max_split {
            return None;
        }
        if req.size >= max_split && size >= req.size.saturating_add(max_non_split_rounding) {
            return None;
        }
        pool.blocks.remove(k);
        Some(id)
    }

    /// Steps 3–4 of the malloc path: garbage collection, a new segment, and the two
    /// release-and-retry attempts. `Ok(None)` is out of memory.
    /// Steps 3–4 of the malloc path: garbage collection, a new segment, the
    /// `use_on_oom` pools' free blocks (which may switch `req` to such a pool), and
    /// the two release-and-retry attempts (the second only when no pool is being
    /// allocated to). `Ok(None)` is out of memory.
    fn allocate_new(&mut self, dev: &Device, req: &mut Request) -> Result<Option<u32>, AllocError> {
        if self.gc_enabled() {
            self.garbage_collect_cached_blocks(dev);
        }
        if let Some(b) = self.alloc_block(dev, req, false)? {
            return Ok(Some(b));
        }
        if let Some(b) = self.try_mempool_fallback(req) {
            return Ok(Some(b));
        }
        if self.release_available_cached_blocks(dev, req)
            && let Some(b) = self.alloc_block(dev, req, false)?
        {
            return Ok(Some(b));
        }
        if !self.captures_underway.is_empty() {
            return Ok(None);
        }
        self.release_cached_blocks(dev, None);
        self.alloc_block(dev, req, true)
    }

    /// A default-pool request about to fail takes a free block of a `use_on_oom`
    /// pool, if one fits (`try_mempool_fallback`).
    fn try_mempool_fallback(&mut self, req: &mut Request) -> Option<u32> {
        if req.private != NIL || self.use_on_oom_pools.is_empty() {
            return None;
        }
        let pools: Vec<u32> = self.use_on_oom_pools.iter().filter_map(|id| self.pool_slots.get(id).copied()).collect();
        for slot in pools {
            let trial = Request { private: slot, ..*req };
            if let Some(b) = self.get_free_block(&trial) {
                *req = trial;
                return Some(b);
            }
        }
        None
    }

    fn out_of_memory(&mut self, dev: &Device, req: &Request, orig_size: u64) -> AllocError {
        let info = dev.raw.mem_info();
        if self.emitter.is_active() {
            self.emit_raw(AllocatorAction::Oom, req.stream, info.free_bytes, orig_size, req.size, None);
        }
        self.stats.num_ooms += 1;
        let allocated = self.stats.allocated_bytes.all.current as u64;
        let reserved = self.stats.reserved_bytes.all.current as u64;
        // `allocated_in_private_pools`: the free blocks of every private pool.
        let private_pool_cached_bytes = self
            .private_pools
            .iter()
            .flatten()
            .map(|p| p.small.blocks.sizes().chain(p.large.blocks.sizes()).sum::<u64>())
            .sum();
        AllocError::OutOfMemory(Box::new(OutOfMemoryError {
            device: dev.name.clone(),
            stream: req.stream,
            requested_bytes: orig_size,
            rounded_bytes: req.size,
            segment_bytes: req.alloc_size,
            total_bytes: info.total_bytes,
            free_bytes: info.free_bytes,
            allowed_bytes: self.allowed_memory_maximum,
            allocated_bytes: allocated,
            reserved_unallocated_bytes: reserved.saturating_sub(allocated),
            private_pool_cached_bytes,
        }))
    }

    /// Gets a new segment (or maps expandable pages). `Ok(None)`: no memory.
    fn alloc_block(&mut self, dev: &Device, req: &Request, is_retry: bool) -> Result<Option<u32>, AllocError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        let size = req.alloc_size;
        if let Some(allowed) = self.allowed_memory_maximum
            && self.total_allocated_memory + size > allowed
        {
            return Ok(None);
        }
        if self.config.expandable_segments {
            let block = self.try_allocate_expandable_block(dev, req)?;
            if block.is_some() {
                // As in PyTorch, every successful expandable allocation counts,
                // mapped or not.
                self.count_pool_device_malloc(req.private);
            }
            return Ok(block);
        }
        let addr = match dev.raw.malloc(size) {
            Ok(addr) => addr,
            Err(RawError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(dev.device_error(e)),
        };
        self.count_pool_device_malloc(req.private);
        self.total_allocated_memory += size;
        let id = self.arena.insert(Block::new(addr, size, req.stream, req.pool, req.private));
        self.stats.segment.increase(req.pool, 1);
        self.stats.reserved_bytes.increase(req.pool, size);
        if size >= self.max_split_size {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.emit(AllocatorAction::SegmentAlloc, id, size, size);
        Ok(Some(id))
    }

    #[inline]
    fn count_pool_device_malloc(&mut self, private: u32) {
        if private != NIL {
            self.private_pools[private as usize].as_mut().expect("a request's pool is live").device_malloc_count += 1;
        }
    }

    /// Hands out `block` for the request, splitting off the remainder when `split`.
    // `inline(always)`: the hot path (`malloc`) and the checkpoint restore both
    // call it, and with two callers LLVM stopped inlining it into `malloc`
    // (~4 ns more per alloc+free pair); the same for `free` below.
    #[inline(always)]
    fn alloc_found_block(&mut self, block: u32, req: &Request, orig_size: u64, tag: Option<Tag>, split: bool) -> u32 {
        let pool = req.pool;
        let already_split = self.arena[block].is_split();
        let expandable = self.arena[block].expandable != NIL;
        let mut id = block;
        if split {
            let remaining = block;
            let (addr, prev, seg) = {
                let r = &self.arena[remaining];
                (r.addr, r.prev, r.expandable)
            };
            let mut new = Block::new(addr, req.size, req.stream, pool, req.private);
            new.expandable = seg;
            new.prev = prev;
            new.next = remaining;
            id = self.arena.insert(new);
            if prev != NIL {
                self.arena[prev].next = id;
            }
            {
                let r = &mut self.arena[remaining];
                r.prev = id;
                r.addr += req.size;
                r.size -= req.size;
            }
            self.insert_free(remaining);
            if !expandable {
                if already_split {
                    // An already-split inactive block shrinks by the handed-out size.
                    self.stats.inactive_split_bytes.decrease(pool, req.size);
                } else {
                    // A new inactive split block appears.
                    let rem = self.arena[remaining].size;
                    self.stats.inactive_split_bytes.increase(pool, rem);
                    self.stats.inactive_split.increase(pool, 1);
                }
            }
        } else if already_split && !expandable {
            // An already-split block becomes active whole.
            let size = self.arena[block].size;
            self.stats.inactive_split_bytes.decrease(pool, size);
            self.stats.inactive_split.decrease(pool, 1);
        }

        let b = &mut self.arena[id];
        b.allocated = true;
        b.requested = orig_size;
        b.tag = tag;
        let size = b.size;
        self.emit(AllocatorAction::Alloc, id, orig_size, size);
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, size);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, size);
        s.requested_bytes.increase(pool, orig_size);
        if size >= self.max_split_size {
            s.oversize_allocations.increase(1);
        }
        id
    }

    #[inline(always)]
    fn free(&mut self, dev: &Device, id: u32) {
        let (pool, size, requested) = {
            let b = &mut self.arena[id];
            b.allocated = false;
            (b.pool, b.size, b.requested)
        };
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        self.emit(AllocatorAction::FreeRequested, id, requested, size);
        if size >= self.max_split_size {
            self.stats.oversize_allocations.decrease(1);
        }
        if self.arena[id].stream_uses.is_empty() {
            self.free_block(id);
        } else if !self.captures_underway.is_empty() {
            // Events may not be recorded during a capture.
            self.deferred_blocks.push(id);
        } else {
            self.insert_events(dev, id);
        }
    }

    /// Records an event on every stream that used the block; the block is freed
    /// when the last completes.
    fn insert_events(&mut self, dev: &Device, id: u32) {
        let streams = std::mem::take(&mut self.arena[id].stream_uses);
        for s in streams {
            let event = dev.raw.record_event(s);
            self.arena[id].event_count += 1;
            self.pending_events.entry(s).or_default().push_back((event, id));
            self.num_pending_events += 1;
        }
    }

    /// Frees the blocks whose streams' events have completed (`process_events`).
    fn process_events(&mut self, dev: &Device) {
        let streams: Vec<StreamId> = self.pending_events.keys().copied().collect();
        for s in streams {
            while let Some(&(event, id)) = self.pending_events.get(&s).and_then(|q| q.front()) {
                if !dev.raw.event_completed(event) {
                    break;
                }
                self.pending_events.get_mut(&s).map(VecDeque::pop_front);
                self.num_pending_events -= 1;
                self.event_done(id);
            }
            if self.pending_events.get(&s).is_some_and(VecDeque::is_empty) {
                self.pending_events.remove(&s);
            }
        }
    }

    fn event_done(&mut self, id: u32) {
        let b = &mut self.arena[id];
        b.event_count -= 1;
        if b.event_count == 0 {
            self.free_block(id);
        }
    }

    /// Waits for every outstanding event and frees their blocks
    /// (`synchronize_and_free_events`).
    /// With `pool` (a slot), only the events of that private pool's blocks.
    fn synchronize_and_free_events(&mut self, dev: &Device, pool: Option<u32>) {
        self.stats.num_sync_all_streams += 1;
        self.insert_events_deferred_until_no_capture(dev);
        let pending = std::mem::take(&mut self.pending_events);
        self.num_pending_events = 0;
        for (stream, queue) in pending {
            for (event, id) in queue {
                if pool.is_some_and(|p| self.arena[id].private != p) {
                    self.pending_events.entry(stream).or_default().push_back((event, id));
                    self.num_pending_events += 1;
                    continue;
                }
                dev.raw.synchronize_event(event);
                self.event_done(id);
            }
        }
    }

    /// Returns a block to its pool, merging it with free neighbours (`free_block`).
    fn free_block(&mut self, id: u32) {
        let (pool, original_size, requested) = {
            let b = &self.arena[id];
            debug_assert!(!b.allocated && b.event_count == 0 && b.stream_uses.is_empty());
            (b.pool, b.size, b.requested)
        };
        self.emit(AllocatorAction::FreeCompleted, id, requested, original_size);
        self.arena[id].tag = None;

        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        let (prev, next) = (self.arena[id].prev, self.arena[id].next);
        for candidate in [prev, next] {
            let subsumed = self.try_merge_blocks(id, candidate);
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        self.insert_free(id);
        let b = &self.arena[id];
        if b.is_split() {
            net_blocks += 1;
            net_bytes += b.size as i64;
        }
        let expandable = b.expandable != NIL;
        let s = &mut self.stats;
        // Expandable segments are left out of inactive_split, as in PyTorch.
        if !expandable {
            if net_blocks > 0 {
                s.inactive_split.increase(pool, net_blocks as u64);
            } else if net_blocks < 0 {
                s.inactive_split.decrease(pool, (-net_blocks) as u64);
            }
            if net_bytes > 0 {
                s.inactive_split_bytes.increase(pool, net_bytes as u64);
            } else if net_bytes < 0 {
                s.inactive_split_bytes.decrease(pool, (-net_bytes) as u64);
            }
        }
        s.active.decrease(pool, 1);
        s.active_bytes.decrease(pool, original_size);
        s.requested_bytes.decrease(pool, requested);
    }

    /// Merges free neighbour `src` into `dst`; returns the bytes subsumed (0: none).
    fn try_merge_blocks(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        {
            let s = &self.arena[src];
            if s.allocated || s.event_count > 0 || !s.stream_uses.is_empty() || s.mapped != self.arena[dst].mapped {
                return 0;
            }
        }
        if self.arena[src].mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let (s_addr, s_size, s_prev, s_next) = {
            let s = &self.arena[src];
            (s.addr, s.size, s.prev, s.next)
        };
        if self.arena[dst].prev == src {
            // [src dst]
            let d = &mut self.arena[dst];
            d.addr = s_addr;
            d.prev = s_prev;
            if s_prev != NIL {
                self.arena[s_prev].next = dst;
            }
        } else {
            // [dst src]
            self.arena[dst].next = s_next;
            if s_next != NIL {
                self.arena[s_next].prev = dst;
            }
        }
        self.arena[dst].size += s_size;
        self.arena.remove(src);
        s_size
    }

    /// Frees cached oversize blocks to make room for a request
    /// (`release_available_cached_blocks`). Only acts with a max_split_size.
    fn release_available_cached_blocks(&mut self, dev: &Device, req: &Request) -> bool {
        if self.config.max_split_size.is_none() {
            return false;
        }
        let max_split = self.max_split_size;
        let key_size = req.size.max(max_split);
        let pool = &*block_pool(&mut self.small, &mut self.large, &mut self.private_pools, req.pool, req.private);
        let search = free_set::key(req.stream, key_size.min(MAX_KEY_SIZE), 0);
        let found = pool
            .blocks
            .first_from(search)
            .map(|(_, id)| id)
            .filter(|&id| self.arena[id].stream == req.stream && self.arena[id].expandable == NIL);
        match found {
            Some(id) => {
                self.release_block(dev, id);
                true
            }
            None => {
                // No single block is large enough: free oversize blocks, largest first.
                let mut victims = Vec::new();
                let mut total = 0u64;
                let mut cursor = search;
                while let Some((k, id)) = pool.blocks.last_before(cursor) {
                    cursor = k;
                    let b = &self.arena[id];
                    if total >= key_size || b.size < max_split || b.stream != req.stream {
                        break;
                    }
                    if b.expandable == NIL {
                        total += b.size;
                        victims.push(id);
                    }
                }
                for id in victims {
                    self.release_block(dev, id);
                }
                total >= key_size
            }
        }
    }

    /// `release_cached_blocks(context, mempool_id)`. For the default pool
    /// (`None`) with no pool being allocated to: waits for outstanding events and
    /// frees every fully free segment of both default pools. Then, for every
    /// freeable private pool (use count 0) — or only `pool`, after waiting for its
    /// events — frees its fully free segments and deletes the pool once it holds
    /// no device allocation.
    fn release_cached_blocks(&mut self, dev: &Device, pool: Option<MempoolId>) -> bool {
        if pool.is_none() && self.captures_underway.is_empty() {
            self.synchronize_and_free_events(dev, None);
            self.release_blocks(dev, PoolKind::Large, NIL);
            self.release_blocks(dev, PoolKind::Small, NIL);
        }
        let freeable: Vec<MempoolId> = self.freeable_pools.iter().copied().collect();
        for id in freeable {
            if pool.is_some_and(|p| p != id) {
                continue;
            }
            let slot = self.pool_slots[&id];
            if pool.is_some() {
                self.synchronize_and_free_events(dev, Some(slot));
            }
            self.release_blocks(dev, PoolKind::Small, slot);
            self.release_blocks(dev, PoolKind::Large, slot);
            let p = self.private_pools[slot as usize].as_ref().expect("listed pools are live");
            // With expandable segments the count is one per successful
            // `alloc_block` against one per `unmap_block`, which need not pair
            // up: PyTorch then erases a pool that may still hold a live block
            // (its blocks keep pointing at the deleted pool). The model keeps
            // such a pool until no block of it is left.
            if p.device_malloc_count == 0 && !self.arena.live().any(|(_, b)| b.private == slot) {
                debug_assert!(p.use_count == 0 && p.small.blocks.ids().is_empty() && p.large.blocks.ids().is_empty());
                self.private_pools[slot as usize] = None;
                self.pool_slots.remove(&id);
                self.freeable_pools.remove(&id);
                self.use_on_oom_pools.remove(&id);
                self.no_split_pools.remove(&slot);
            }
        }
        true
    }

    fn release_blocks(&mut self, dev: &Device, pool: PoolKind, private: u32) {
        let ids = self.pool_mut(pool, private).blocks.ids();
        let mut to_unmap = Vec::new();
        for id in ids {
            let b = &self.arena[id];
            if b.expandable != NIL {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(dev, id);
            }
        }
        for id in to_unmap {
            self.unmap_block(dev, id);
            let b = &self.arena[id];
            if !b.is_split() {
                self.release_expandable_segment(dev, id);
            }
        }
    }

    /// Gives a whole free segment back to the device (`release_block`).
    fn release_block(&mut self, dev: &Device, id: u32) {
        debug_assert!(self.arena[id].expandable == NIL && !self.arena[id].is_split());
        self.remove_free(id);
        let (addr, size, pool, private) = {
            let b = &self.arena[id];
            (b.addr, b.size, b.pool, b.private)
        };
        if private != NIL {
            let p = self.private_pools[private as usize].as_mut().expect("a block's pool is live");
            debug_assert!(p.device_malloc_count > 0);
            p.device_malloc_count -= 1;
        }
        self.stats.num_device_free += 1;
        self.emit(AllocatorAction::SegmentFree, id, size, size);
        dev.raw.free(addr, size);
        self.total_allocated_memory -= size;
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size);
        if size >= self.max_split_size {
            self.stats.oversize_segments.decrease(1);
        }
        self.arena.remove(id);
    }

    /// Frees cached, unsplit large blocks that have waited at least the mean age
    /// until enough is reclaimed (`garbage_collect_cached_blocks`).
    fn garbage_collect_cached_blocks(&mut self, dev: &Device) {
        let (Some(allowed), Some(threshold)) = (self.allowed_memory_maximum, self.config.garbage_collection_threshold)
        else {
            return;
        };
        let gc_threshold = (threshold * allowed as f64) as u64;
        if self.total_allocated_memory <= gc_threshold {
            return;
        }
        let target = self.total_allocated_memory - gc_threshold;
        let now = self.large.get_free_blocks_call_count;
        let age = |b: &Block| now - b.gc_count_base;
        let mut total_age: i64 = 0;
        let mut freeable: i64 = 0;
        for id in self.large.blocks.ids() {
            let b = &self.arena[id];
            if !b.is_split() {
                total_age += age(b);
                freeable += 1;
            }
        }
        if freeable == 0 {
            return;
        }
        let mut reclaimed = 0u64;
        let mut block_freed = true;
        while reclaimed < target && block_freed && freeable > 0 {
            let age_threshold = total_age as f64 / freeable as f64;
            block_freed = false;
            for id in self.large.blocks.ids() {
                let b = &self.arena[id];
                if !b.is_split() && b.expandable == NIL && age(b) as f64 >= age_threshold {
                    block_freed = true;
                    reclaimed += b.size;
                    total_age -= age(b);
                    freeable -= 1;
                    self.release_block(dev, id);
                }
            }
        }
    }

    // ----- expandable segments -----

    fn try_allocate_expandable_block(&mut self, dev: &Device, req: &Request) -> Result<Option<u32>, AllocError> {
        let size = req.size;
        let mut candidate = self.find_expandable_block(dev, req.stream, req.pool, req.private, size)?;
        if !self.arena[candidate].mapped {
            let len = self.arena[candidate].size.min(size);
            if !self.map_block(dev, candidate, len)? {
                return Ok(None);
            }
        }
        while self.arena[candidate].size < size {
            // Invariant: free -> unmapped -> …; mapping merges into the free block.
            let remaining = size - self.arena[candidate].size;
            let next = self.arena[candidate].next;
            let len = remaining.min(self.arena[next].size);
            if !self.map_block(dev, next, len)? {
                return Ok(None);
            }
            candidate = next;
        }
        self.remove_free(candidate);
        Ok(Some(candidate))
    }

    fn allocatable(&self, id: u32) -> bool {
        id != NIL && {
            let b = &self.arena[id];
            !b.allocated && b.event_count == 0 && b.stream_uses.is_empty()
        }
    }

    /// The lowest-addressed run of free and unmapped blocks with room for `size`,
    /// or a new segment's unmapped range (`find_expandable_block`).
    fn find_expandable_block(
        &mut self,
        dev: &Device,
        stream: StreamId,
        pool: PoolKind,
        private: u32,
        size: u64,
    ) -> Result<u32, AllocError> {
        let candidates: Vec<u32> = {
            let p = self.pool_mut(pool, private);
            p.unmapped.range((stream, 0)..(stream + 1, 0)).map(|(_, &id)| id).collect()
        };
        for mut c in candidates {
            if self.allocatable(self.arena[c].prev) {
                c = self.arena[c].prev;
            }
            let mut bytes = 0;
            let mut b = c;
            while bytes < size && self.allocatable(b) {
                bytes += self.arena[b].size;
                b = self.arena[b].next;
            }
            if bytes >= size {
                return Ok(c);
            }
        }
        let page = if pool == PoolKind::Small { SMALL_BUFFER } else { self.config.large_segment_size };
        let total = dev.raw.mem_info().total_bytes;
        let segment =
            ExpandableSegment::reserve(&*dev.raw, page, total + total / 8).map_err(|e| dev.device_error(e))?;
        let (base, span) = (segment.base(), segment.size());
        let slot = self.expandable.iter().position(Option::is_none).unwrap_or_else(|| {
            self.expandable.push(None);
            self.expandable.len() - 1
        });
        self.expandable[slot] = Some(segment);
        let mut block = Block::new(base, span, stream, pool, private);
        block.mapped = false;
        block.expandable = slot as u32;
        let id = self.arena.insert(block);
        self.insert_unmapped(id);
        Ok(id)
    }

    /// Maps the first `size` bytes (rounded up to pages) of unmapped block `id`
    /// (`map_block`). `Ok(false)`: the device has no memory for it.
    fn map_block(&mut self, dev: &Device, id: u32, size: u64) -> Result<bool, AllocError> {
        let (addr, seg) = (self.arena[id].addr, self.arena[id].expandable);
        let segment = self.expandable[seg as usize].as_mut().expect("a block's expandable segment is live");
        let mapped = match segment.map(&*dev.raw, addr, size) {
            Ok(Some(len)) => len,
            Ok(None) => return Ok(false),
            Err(e) => return Err(dev.device_error(e)),
        };
        self.remove_unmapped(id);
        self.arena[id].mapped = true;
        if mapped < self.arena[id].size {
            let b = &self.arena[id];
            let mut rest = Block::new(b.addr + mapped, b.size - mapped, b.stream, b.pool, b.private);
            rest.mapped = false;
            rest.expandable = seg;
            rest.prev = id;
            rest.next = b.next;
            let next = b.next;
            let rest_id = self.arena.insert(rest);
            if next != NIL {
                self.arena[next].prev = rest_id;
            }
            self.arena[id].next = rest_id;
            self.arena[id].size = mapped;
            self.insert_unmapped(rest_id);
        }
        let prev = self.arena[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.arena[id].next;
        self.try_merge_blocks(id, next);
        self.insert_free(id);

        let pool = self.arena[id].pool;
        self.total_allocated_memory += mapped;
        self.stats.reserved_bytes.increase(pool, mapped);
        self.stats.num_device_alloc += 1;
        if self.emitter.is_active() {
            self.emit_raw(AllocatorAction::SegmentMap, self.arena[id].stream, addr, mapped, mapped, None);
        }
        Ok(true)
    }

    /// Unmaps the whole pages inside free block `id` (`unmap_block`).
    fn unmap_block(&mut self, dev: &Device, id: u32) {
        let (addr, size, seg, stream, pool, private) = {
            let b = &self.arena[id];
            (b.addr, b.size, b.expandable, b.stream, b.pool, b.private)
        };
        let segment = self.expandable[seg as usize].as_mut().expect("a block's expandable segment is live");
        let Some((u_addr, u_size)) = segment.unmap(&*dev.raw, addr, size) else {
            return;
        };
        self.remove_free(id);
        let before = u_addr - addr;
        if before > 0 {
            let mut bf = Block::new(addr, before, stream, pool, private);
            bf.expandable = seg;
            bf.prev = self.arena[id].prev;
            bf.next = id;
            let bf_id = self.arena.insert(bf);
            let prev = self.arena[id].prev;
            if prev != NIL {
                self.arena[prev].next = bf_id;
            }
            self.arena[id].prev = bf_id;
            self.insert_free(bf_id);
        }
        let after = size - before - u_size;
        if after > 0 {
            let mut af = Block::new(u_addr + u_size, after, stream, pool, private);
            af.expandable = seg;
            af.prev = id;
            af.next = self.arena[id].next;
            let af_id = self.arena.insert(af);
            let next = self.arena[id].next;
            if next != NIL {
                self.arena[next].prev = af_id;
            }
            self.arena[id].next = af_id;
            self.insert_free(af_id);
        }
        {
            let b = &mut self.arena[id];
            b.addr = u_addr;
            b.size = u_size;
            b.mapped = false;
        }
        let prev = self.arena[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.arena[id].next;
        self.try_merge_blocks(id, next);
        self.insert_unmapped(id);

        self.total_allocated_memory -= u_size;
        self.stats.reserved_bytes.decrease(pool, u_size);
        if private != NIL {
            // As in PyTorch's `unmap_block`: every unmap gives one of the
            // pool's device allocations back (`cudaMalloc_count--`). One
            // `alloc_block` can map pages that later go back in several unmaps,
            // where PyTorch's `TORCH_INTERNAL_ASSERT(cudaMalloc_count > 0)`
            // fails; the model stops the count at 0 instead.
            let p = self.private_pools[private as usize].as_mut().expect("a block's pool is live");
            p.device_malloc_count = (p.device_malloc_count - 1).max(0);
        }
        self.stats.num_device_free += 1;
        if self.emitter.is_active() {
            self.emit_raw(AllocatorAction::SegmentUnmap, stream, u_addr, u_size, u_size, None);
        }
    }

    /// Gives a fully unmapped expandable segment's address space back.
    fn release_expandable_segment(&mut self, dev: &Device, id: u32) {
        let (seg, mapped) = (self.arena[id].expandable, self.arena[id].mapped);
        debug_assert!(!mapped);
        self.remove_unmapped(id);
        self.arena.remove(id);
        if let Some(mut segment) = self.expandable[seg as usize].take() {
            segment.release_all(&*dev.raw);
        }
    }

    /// Sets the current `oversize_allocations` / `oversize_segments` to what the
    /// blocks and segments held count against `max_split_size` now.
    #[cold]
    fn recount_oversize(&mut self) {
        let max_split = self.max_split_size;
        let (mut allocations, mut segments) = (0i64, 0i64);
        for (_, b) in self.arena.live() {
            if b.allocated && b.size >= max_split {
                allocations += 1;
            }
            if b.expandable == NIL && b.prev == NIL {
                let mut size = 0;
                let mut cur = Some(b);
                while let Some(c) = cur {
                    size += c.size;
                    cur = (c.next != NIL).then(|| &self.arena[c.next]);
                }
                if size >= max_split {
                    segments += 1;
                }
            }
        }
        for (stat, want) in
            [(&mut self.stats.oversize_allocations, allocations), (&mut self.stats.oversize_segments, segments)]
        {
            match want - stat.current {
                d if d > 0 => stat.increase(d as u64),
                d if d < 0 => stat.decrease((-d) as u64),
                _ => {}
            }
        }
    }

    fn snapshot(&self) -> Vec<SegmentInfo> {
        let mut out = Vec::new();
        for (_, head) in self.arena.live() {
            if !head.mapped || (head.prev != NIL && self.arena[head.prev].mapped) {
                continue;
            }
            let mut seg = SegmentInfo {
                address: head.addr,
                total_size: 0,
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                stream: head.stream,
                pool: head.pool,
                pool_id: self.pool_id_of(head.private),
                is_expandable: head.expandable != NIL,
                blocks: Vec::new(),
            };
            let mut cur = Some(head);
            while let Some(b) = cur.filter(|b| b.mapped) {
                let active = b.allocated || b.event_count > 0 || !b.stream_uses.is_empty();
                seg.total_size += b.size;
                if b.allocated {
                    seg.allocated_size += b.size;
                }
                if active {
                    seg.active_size += b.size;
                    seg.requested_size += b.requested;
                }
                seg.blocks.push(BlockInfo {
                    address: b.addr,
                    size: b.size,
                    requested_size: if active { b.requested } else { 0 },
                    state: if b.allocated {
                        BlockState::ActiveAllocated
                    } else if active {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    },
                    tag: if active { b.tag } else { None },
                });
                cur = (b.next != NIL).then(|| &self.arena[b.next]);
            }
            out.push(seg);
        }
        out.sort_by_key(|s| s.address);
        out
    }
}
