//! PyTorch's two-step free, as a trace shows it. `DeviceCachingAllocator::free`
//! lowers `allocation` and `allocated_bytes` at once and records
//! `free_requested`; a block no other stream used goes back to its pool right
//! there (`free_block`, `free_completed` next in the trace). A block used on
//! other streams (`Tensor.record_stream`) gets an event on each of them
//! (`insert_events`) and stays active until `process_events` (the start of a
//! later `malloc`) or `synchronize_and_free_events` (`empty_cache`, the release
//! before an OOM retry) finds them complete — its `free_completed` comes later,
//! or not before the dump.
//!
//! The trace does not say which streams used the block, only when their work
//! was done. The replay therefore marks each such block as used on a stand-in
//! stream of its own (events on the simulated device are held until released),
//! frees it at `free_requested`, and completes that stream's event and
//! processes events at its `free_completed`.

use rustc_hash::FxHashMap as HashMap;

use vramlab_allocator::{AllocError, Allocation, CachingAllocator, SimulatedMemory, StreamId};

/// The first stand-in stream: far above the trace's own (the replay numbers
/// those from 0 and refuses more than 1024).
const FIRST_STAND_IN: StreamId = 1 << 30;

/// The frees requested and not completed yet.
#[derive(Debug)]
pub(crate) struct PendingFrees {
    /// Address → the stand-in stream of a block whose free waits for other streams.
    requested: HashMap<u64, StreamId>,
    /// The block freed at once whose `free_completed` is the next entry: one
    /// slot, not the map, since almost every free is of this kind.
    immediate: Option<u64>,
    next: StreamId,
    /// Frees whose completion came after other entries (or never).
    pub(crate) deferred: u64,
}

impl Default for PendingFrees {
    fn default() -> PendingFrees {
        PendingFrees { requested: HashMap::default(), immediate: None, next: FIRST_STAND_IN, deferred: 0 }
    }
}

impl PendingFrees {
    /// `free_requested` of the live block `allocation` at `addr`; `completes_now`
    /// when the trace's next entry is its `free_completed`.
    pub(crate) fn request(
        &mut self,
        allocator: &CachingAllocator,
        addr: u64,
        allocation: Allocation,
        completes_now: bool,
    ) -> Result<(), AllocError> {
        if completes_now {
            self.immediate = Some(addr);
            return allocator.free(allocation);
        }
        let stream = self.next;
        self.next = self.next.wrapping_add(1).max(FIRST_STAND_IN);
        allocator.record_stream(&allocation, stream);
        self.requested.insert(addr, stream);
        self.deferred += 1;
        allocator.free(allocation)
    }

    /// `free_completed` at `addr`: whether its free was requested (and is now
    /// done); `false` leaves the entry to the caller (a free whose request the
    /// ring buffer lost).
    pub(crate) fn complete(&mut self, allocator: &CachingAllocator, raw: &SimulatedMemory, addr: u64) -> bool {
        if self.immediate == Some(addr) {
            self.immediate = None;
            return true;
        }
        if self.requested.is_empty() {
            return false;
        }
        match self.requested.remove(&addr) {
            None => false,
            Some(stream) => {
                raw.complete_stream_events(stream);
                allocator.process_events();
                true
            }
        }
    }

    /// Whether the free of the block at `addr` is requested and not completed.
    pub(crate) fn holds(&self, addr: u64) -> bool {
        self.immediate == Some(addr) || (!self.requested.is_empty() && self.requested.contains_key(&addr))
    }

    /// How many frees are requested and not completed.
    pub(crate) fn len(&self) -> usize {
        self.requested.len() + usize::from(self.immediate.is_some())
    }

    /// Blocks whose free waits for other streams still (at the dump, once the
    /// trace is replayed).
    pub(crate) fn waiting(&self) -> u64 {
        self.requested.len() as u64
    }
}
