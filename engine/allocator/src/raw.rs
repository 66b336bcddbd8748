//! What the caching allocator asks of a device: plain malloc/free of segments,
//! capacity and free memory, virtual ranges with page mapping for expandable
//! segments, and stream events for cross-stream frees.
//!
//! Implementations here: [`HostMemory`] (real host memory, the CPU device) and
//! [`SimulatedMemory`] (addresses only, no backing bytes: for replaying traces of
//! devices larger than this machine, and for tests). The CUDA backend implements
//! the same trait over `cuMemAlloc`/`cuMemFree`/`cuMemGetInfo`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use super::consts::{GIB, MIB};

/// A stream of work on a device. Stream 0 is the default stream.
pub type StreamId = u32;

/// A recorded stream event, as handed out by [`RawAllocator::record_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId(pub u64);

/// Free and total memory of a device, as `cudaMemGetInfo` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// Why a raw device operation failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RawError {
    /// The device has no room for the request (the allocator may release cached
    /// segments and retry).
    #[error("device out of memory")]
    OutOfMemory,
    /// The operation is not available on this device (e.g. virtual memory for
    /// expandable segments).
    #[error("{operation} is not supported by {device}")]
    Unsupported { device: String, operation: &'static str },
    /// Any other device error; the allocator passes it on unchanged.
    #[error("{device}: {message}")]
    Device { device: String, message: String },
}

/// A device's raw memory operations. All methods are called with the caching
/// allocator's lock held.
pub trait RawAllocator: Send + Sync + std::fmt::Debug {
    /// The device's name in messages (`cpu`, `cuda:0`, `simulated`).
    fn name(&self) -> &str;

    /// Allocates `size` bytes (a segment). The address is at least 512-byte aligned.
    fn malloc(&self, size: u64) -> Result<u64, RawError>;

    /// Frees a segment returned by [`malloc`](Self::malloc) with its size.
    fn free(&self, addr: u64, size: u64);

    /// Free and total device memory.
    fn mem_info(&self) -> MemInfo;

    /// Reserves `size` bytes of address space without backing memory.
    fn reserve_address_space(&self, size: u64) -> Result<u64, RawError> {
        let _ = size;
        Err(RawError::Unsupported { device: self.name().to_owned(), operation: "virtual memory" })
    }

    /// Releases a range from [`reserve_address_space`](Self::reserve_address_space);
    /// every page in it has been unmapped.
    fn release_address_space(&self, addr: u64, size: u64) {
        let _ = (addr, size);
    }

    /// Backs `[addr, addr + size)` of a reserved range with memory, all or nothing.
    /// `size` is a whole number of the caller's pages.
    fn map(&self, addr: u64, size: u64) -> Result<(), RawError> {
        let _ = (addr, size);
        Err(RawError::Unsupported { device: self.name().to_owned(), operation: "virtual memory" })
    }

    /// Gives back the memory behind `[addr, addr + size)`; the range stays reserved.
    fn unmap(&self, addr: u64, size: u64) {
        let _ = (addr, size);
    }

    /// Records an event on `stream` marking the work queued so far.
    /// Devices that run synchronously complete it at once.
    fn record_event(&self, stream: StreamId) -> EventId {
        let _ = stream;
        EventId(0)
    }

    /// Whether the event has completed (`cudaEventQuery`).
    fn event_completed(&self, event: EventId) -> bool {
        let _ = event;
        true
    }

    /// Waits for the event (`cudaEventSynchronize`).
    fn synchronize_event(&self, event: EventId) {
        let _ = event;
    }
}

/// Capacity bookkeeping shared by the host implementations.
#[derive(Debug)]
struct Budget {
    capacity: u64,
    used: AtomicU64,
}

impl Budget {
    fn take(&self, size: u64) -> Result<(), RawError> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(size).filter(|&n| n <= self.capacity)
            })
            .map(|_| ())
            .map_err(|_| RawError::OutOfMemory)
    }

    fn give(&self, size: u64) {
        self.used.fetch_sub(size, Ordering::Relaxed);
    }

    fn info(&self) -> MemInfo {
        let used = self.used.load(Ordering::Relaxed);
        MemInfo { free_bytes: self.capacity.saturating_sub(used), total_bytes: self.capacity }
    }
}

/// Alignment of host segments: a page, more than the 512 bytes blocks need.
const HOST_ALIGN: u64 = 4096;

/// Real host memory for the CPU device, with a capacity: a CPU "device" of 4 GiB
/// really runs out of memory at 4 GiB of segments.
#[derive(Debug)]
pub struct HostMemory {
    budget: Budget,
}

impl HostMemory {
    /// Host memory limited to `capacity_bytes` of segments.
    pub fn with_capacity(capacity_bytes: u64) -> HostMemory {
        HostMemory { budget: Budget { capacity: capacity_bytes, used: AtomicU64::new(0) } }
    }

    /// Host memory limited by the machine's physical memory.
    pub fn physical() -> HostMemory {
        HostMemory::with_capacity(physical_memory_bytes().unwrap_or(16 * GIB))
    }
}

/// The machine's physical memory (`MemTotal` of /proc/meminfo), where known.
pub fn physical_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn host_layout(size: u64) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(usize::try_from(size).ok()?, HOST_ALIGN as usize).ok()
}

impl RawAllocator for HostMemory {
    fn name(&self) -> &str {
        "cpu"
    }

    fn malloc(&self, size: u64) -> Result<u64, RawError> {
        let layout = host_layout(size).ok_or(RawError::OutOfMemory)?;
        self.budget.take(size)?;
        // SAFETY: the layout has a non-zero size (segments are at least 2 MiB).
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            self.budget.give(size);
            return Err(RawError::OutOfMemory);
        }
        Ok(ptr as u64)
    }

    fn free(&self, addr: u64, size: u64) {
        let layout = host_layout(size).expect("a segment's layout was valid when allocated");
        // SAFETY: `addr` came from `malloc` with the same size and alignment.
        unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        self.budget.give(size);
    }

    fn mem_info(&self) -> MemInfo {
        self.budget.info()
    }

    #[cfg(unix)]
    fn reserve_address_space(&self, size: u64) -> Result<u64, RawError> {
        let len = usize::try_from(size).map_err(|_| RawError::OutOfMemory)?;
        // SAFETY: an anonymous private mapping with no access; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RawError::Device {
                device: "cpu".into(),
                message: format!("reserving {size} bytes of address space failed: {}", std::io::Error::last_os_error()),
            });
        }
        Ok(ptr as u64)
    }

    #[cfg(unix)]
    fn release_address_space(&self, addr: u64, size: u64) {
        // SAFETY: the range was mapped by `reserve_address_space` and nothing uses it.
        unsafe { libc::munmap(addr as *mut libc::c_void, size as usize) };
    }

    #[cfg(unix)]
    fn map(&self, addr: u64, size: u64) -> Result<(), RawError> {
        self.budget.take(size)?;
        // SAFETY: the range lies inside a reservation made by `reserve_address_space`.
        let rc =
            unsafe { libc::mprotect(addr as *mut libc::c_void, size as usize, libc::PROT_READ | libc::PROT_WRITE) };
        if rc != 0 {
            self.budget.give(size);
            return Err(RawError::OutOfMemory);
        }
        Ok(())
    }

    #[cfg(unix)]
    fn unmap(&self, addr: u64, size: u64) {
        // SAFETY: the range lies inside a reservation and no live block uses it.
        unsafe {
            libc::madvise(addr as *mut libc::c_void, size as usize, libc::MADV_DONTNEED);
            libc::mprotect(addr as *mut libc::c_void, size as usize, libc::PROT_NONE);
        }
        self.budget.give(size);
    }
}

/// Address space only: hands out addresses without backing bytes, so a trace
/// from an 80 GiB GPU replays on a laptop. Addresses are never reused. Stream
/// events complete at once unless [`hold_events`](Self::hold_events) is set,
/// which lets tests model work still running on another stream.
#[derive(Debug)]
pub struct SimulatedMemory {
    budget: Budget,
    next_addr: AtomicU64,
    /// How many ranges took fresh addresses (not the plan's).
    fresh_ranges: AtomicU64,
    events: Mutex<SimEvents>,
    plan: Mutex<AddressPlan>,
    /// Fresh addresses go down from `next_addr` rather than up
    /// ([`hand_out_downwards`](SimulatedMemory::hand_out_downwards)).
    downwards: std::sync::atomic::AtomicBool,
}

/// Addresses to hand out for the coming segment allocations, in order (a
/// recording's own, so that a replay breaks ties between equal free blocks by
/// address exactly as the recording did).
#[derive(Debug, Default)]
struct AddressPlan {
    /// (size, address) of each coming segment allocation.
    next: std::collections::VecDeque<(u64, u64)>,
    /// Whether allocations take their address from the plan yet.
    armed: bool,
    /// The planned segments still held (address → size): a planned address
    /// that overlaps one of them (a malformed recording, say one with a
    /// `segment_alloc` written twice) ends the plan rather than hand out
    /// memory that is in use.
    held: std::collections::BTreeMap<u64, u64>,
    /// A size other than the planned one came: the plan is over for good.
    ended: bool,
}

impl AddressPlan {
    /// Whether [addr, addr + size) overlaps a held planned segment.
    fn overlaps_held(&self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        self.held.range(..end).next_back().is_some_and(|(&a, &s)| a.saturating_add(s) > addr)
    }
}

#[derive(Debug, Default)]
struct SimEvents {
    hold: bool,
    next: u64,
    /// The events recorded while held and not completed yet, with the stream each
    /// was recorded on; every other event has completed.
    held: std::collections::BTreeMap<u64, StreamId>,
}

/// Where simulated addresses start (a recognisable, 2 MiB-aligned value).
const SIM_BASE: u64 = 0x7f00_0000_0000;
/// Where an open plan's fresh addresses start: above the 57-bit virtual
/// addresses of any CPU or GPU, so never inside a recorded range.
const OPEN_PLAN_FRESH_BASE: u64 = 1 << 58;
/// Where fresh addresses handed out downwards start (they end below it).
const DOWNWARDS_TOP: u64 = 1 << 57;

impl SimulatedMemory {
    /// A simulated device of `capacity_bytes`.
    pub fn with_capacity(capacity_bytes: u64) -> SimulatedMemory {
        SimulatedMemory {
            budget: Budget { capacity: capacity_bytes, used: AtomicU64::new(0) },
            next_addr: AtomicU64::new(SIM_BASE),
            fresh_ranges: AtomicU64::new(0),
            events: Mutex::new(SimEvents::default()),
            plan: Mutex::new(AddressPlan::default()),
            downwards: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// From now on, hands out each fresh range below the previous one (from
    /// far above any recorded address down), as a CUDA driver often places new
    /// segments. A trace without segment addresses (an estimate's capture)
    /// cannot say where the driver put them, and PyTorch breaks ties between
    /// free blocks of one size by address: replaying both directions shows
    /// what placement decides.
    pub fn hand_out_downwards(&self) {
        self.downwards.store(true, Ordering::Relaxed);
        self.next_addr.store(DOWNWARDS_TOP, Ordering::Relaxed);
    }

    /// A simulated device of `capacity_bytes` whose segment allocations, once
    /// [`arm_address_plan`](Self::arm_address_plan) is called, take their
    /// addresses from `plan` ((size, address) pairs, in order) for as long as
    /// each asks for the size planned next. The first allocation of another
    /// size ends the plan; it and every later one, and those before arming,
    /// take fresh addresses above every planned range, so none can overlap a
    /// planned one.
    pub fn with_address_plan(capacity_bytes: u64, plan: Vec<(u64, u64)>) -> SimulatedMemory {
        let above = plan.iter().map(|&(size, addr)| addr.saturating_add(size)).max().unwrap_or(0);
        let base = above.max(SIM_BASE).div_ceil(2 * MIB).saturating_mul(2 * MIB);
        let m = SimulatedMemory::with_capacity(capacity_bytes);
        m.next_addr.store(base, Ordering::Relaxed);
        *m.plan.lock().unwrap_or_else(|e| e.into_inner()) =
            AddressPlan { next: plan.into(), armed: false, held: Default::default(), ended: false };
        m
    }

    /// [`with_address_plan`](Self::with_address_plan) for a plan that arrives
    /// while the device is in use (a trace still being read): it starts empty
    /// and grows by [`extend_address_plan`](Self::extend_address_plan). Fresh
    /// addresses start far above any a GPU hands out, since the plan's end is
    /// not known; [`fresh_address_ranges`](Self::fresh_address_ranges) says
    /// whether any was taken (then the plan did not hold as it would have, whole).
    pub fn with_open_address_plan(capacity_bytes: u64) -> SimulatedMemory {
        let m = SimulatedMemory::with_capacity(capacity_bytes);
        m.next_addr.store(OPEN_PLAN_FRESH_BASE, Ordering::Relaxed);
        m
    }

    /// More of the address plan, in order (ignored once the plan has ended).
    pub fn extend_address_plan(&self, more: impl IntoIterator<Item = (u64, u64)>) {
        let mut plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if !plan.ended {
            plan.next.extend(more);
        }
    }

    /// How many segments (or reserved ranges) took fresh addresses rather than planned ones.
    pub fn fresh_address_ranges(&self) -> u64 {
        self.fresh_ranges.load(Ordering::Relaxed)
    }

    /// From now on, segment allocations follow the address plan.
    pub fn arm_address_plan(&self) {
        self.plan.lock().unwrap_or_else(|e| e.into_inner()).armed = true;
    }

    /// The planned address for a segment of `size`, if the plan is armed and
    /// plans this size next at an address no held planned segment overlaps;
    /// any other size, or an overlap, ends the plan.
    fn planned_address(&self, size: u64) -> Option<u64> {
        let mut plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if !plan.armed {
            return None;
        }
        match plan.next.pop_front() {
            Some((planned, addr)) if planned == size && !plan.overlaps_held(addr, size) => {
                plan.held.insert(addr, size);
                Some(addr)
            }
            Some(_) => {
                plan.next.clear();
                plan.ended = true;
                None
            }
            None => None,
        }
    }

    /// A simulated device with no practical capacity limit (1 PiB).
    pub fn unlimited() -> SimulatedMemory {
        SimulatedMemory::with_capacity(1 << 50)
    }

    /// While held, recorded events stay pending until [`complete_events`](Self::complete_events).
    pub fn hold_events(&self, hold: bool) {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.hold = hold;
        if !hold {
            ev.held.clear();
        }
    }

    /// Completes every event recorded so far.
    pub fn complete_events(&self) {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.held.clear();
    }

    /// Completes the events recorded on `stream` so far (its queued work finished);
    /// other streams' events stay pending.
    pub fn complete_stream_events(&self, stream: StreamId) {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.held.retain(|_, s| *s != stream);
    }

    fn take_addresses(&self, size: u64) -> u64 {
        // Keep segments 2 MiB aligned, like the GPU driver does.
        let span = size.div_ceil(2 * MIB) * 2 * MIB;
        self.fresh_ranges.fetch_add(1, Ordering::Relaxed);
        if self.downwards.load(Ordering::Relaxed) {
            self.next_addr.fetch_sub(span, Ordering::Relaxed) - span
        } else {
            self.next_addr.fetch_add(span, Ordering::Relaxed)
        }
    }
}

impl RawAllocator for SimulatedMemory {
    fn name(&self) -> &str {
        "simulated"
    }

    fn malloc(&self, size: u64) -> Result<u64, RawError> {
        self.budget.take(size)?;
        Ok(self.planned_address(size).unwrap_or_else(|| self.take_addresses(size)))
    }

    fn free(&self, addr: u64, size: u64) {
        self.plan.lock().unwrap_or_else(|e| e.into_inner()).held.remove(&addr);
        self.budget.give(size);
    }

    fn mem_info(&self) -> MemInfo {
        self.budget.info()
    }

    fn reserve_address_space(&self, size: u64) -> Result<u64, RawError> {
        Ok(self.take_addresses(size))
    }

    fn map(&self, _addr: u64, size: u64) -> Result<(), RawError> {
        self.budget.take(size)
    }

    fn unmap(&self, _addr: u64, size: u64) {
        self.budget.give(size);
    }

    fn record_event(&self, stream: StreamId) -> EventId {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.next += 1;
        let id = ev.next;
        if ev.hold {
            ev.held.insert(id, stream);
        }
        EventId(id)
    }

    fn event_completed(&self, event: EventId) -> bool {
        let ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        !ev.held.contains_key(&event.0)
    }

    fn synchronize_event(&self, event: EventId) {
        let mut ev = self.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.held.remove(&event.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_memory_hands_out_downwards_when_asked() {
        let up = SimulatedMemory::unlimited();
        let (a, b) = (up.malloc(3 * MIB).unwrap(), up.malloc(2 * MIB).unwrap());
        assert_eq!(b, a + 4 * MIB, "upwards, 2 MiB aligned");
        let down = SimulatedMemory::unlimited();
        down.hand_out_downwards();
        let (a, b) = (down.malloc(3 * MIB).unwrap(), down.malloc(2 * MIB).unwrap());
        assert_eq!(a, DOWNWARDS_TOP - 4 * MIB);
        assert_eq!(b, a - 2 * MIB, "each range below the last, never overlapping");
    }

    #[test]
    fn host_memory_enforces_capacity() {
        let host = HostMemory::with_capacity(4 * MIB);
        let a = host.malloc(2 * MIB).unwrap();
        assert_eq!(a % HOST_ALIGN, 0);
        // The memory is real: write to both ends.
        unsafe {
            *(a as *mut u8) = 1;
            *((a + 2 * MIB - 1) as *mut u8) = 2;
        }
        let b = host.malloc(2 * MIB).unwrap();
        assert_eq!(host.malloc(512), Err(RawError::OutOfMemory));
        assert_eq!(host.mem_info(), MemInfo { free_bytes: 0, total_bytes: 4 * MIB });
        host.free(a, 2 * MIB);
        host.free(b, 2 * MIB);
        assert_eq!(host.mem_info().free_bytes, 4 * MIB);
    }

    #[cfg(unix)]
    #[test]
    fn host_virtual_memory_maps_and_unmaps() {
        let host = HostMemory::with_capacity(8 * MIB);
        let base = host.reserve_address_space(64 * MIB).unwrap();
        host.map(base, 4 * MIB).unwrap();
        unsafe { *((base + 4 * MIB - 1) as *mut u8) = 7 };
        assert_eq!(host.map(base + 4 * MIB, 6 * MIB), Err(RawError::OutOfMemory));
        assert_eq!(host.mem_info().free_bytes, 4 * MIB);
        host.unmap(base, 4 * MIB);
        assert_eq!(host.mem_info().free_bytes, 8 * MIB);
        host.release_address_space(base, 64 * MIB);
    }

    #[test]
    fn simulated_events_can_be_held() {
        let sim = SimulatedMemory::unlimited();
        let e = sim.record_event(1);
        assert!(sim.event_completed(e));
        sim.hold_events(true);
        let e2 = sim.record_event(1);
        assert!(!sim.event_completed(e2));
        sim.complete_events();
        assert!(sim.event_completed(e2));
    }

    #[test]
    fn simulated_addresses_do_not_overlap() {
        let sim = SimulatedMemory::with_capacity(GIB);
        let a = sim.malloc(20 * MIB).unwrap();
        let b = sim.malloc(2 * MIB).unwrap();
        assert!(b >= a + 20 * MIB);
        assert_eq!(sim.malloc(GIB), Err(RawError::OutOfMemory));
    }

    #[test]
    fn an_open_plan_grows_and_says_when_it_ran_dry() {
        let sim = SimulatedMemory::with_open_address_plan(GIB);
        sim.arm_address_plan();
        sim.extend_address_plan([(20 * MIB, SIM_BASE)]);
        assert_eq!(sim.malloc(20 * MIB).unwrap(), SIM_BASE);
        assert_eq!(sim.fresh_address_ranges(), 0);
        sim.extend_address_plan([(2 * MIB, SIM_BASE + 40 * MIB)]);
        assert_eq!(sim.malloc(2 * MIB).unwrap(), SIM_BASE + 40 * MIB);
        // Nothing planned yet: a fresh address far above any recorded one, counted.
        let fresh = sim.malloc(2 * MIB).unwrap();
        assert!(fresh >= OPEN_PLAN_FRESH_BASE);
        assert_eq!(sim.fresh_address_ranges(), 1);
        // Another size than the plan's ends it for good: later plans are ignored.
        sim.extend_address_plan([(4 * MIB, SIM_BASE + 60 * MIB)]);
        assert!(sim.malloc(8 * MIB).unwrap() >= OPEN_PLAN_FRESH_BASE);
        sim.extend_address_plan([(4 * MIB, SIM_BASE + 70 * MIB)]);
        assert!(sim.malloc(4 * MIB).unwrap() >= OPEN_PLAN_FRESH_BASE);
        assert_eq!(sim.fresh_address_ranges(), 3);
    }

    #[test]
    fn a_planned_address_still_in_use_ends_the_plan() {
        // A recording with one segment_alloc written twice plans the same
        // address twice: the second must not get memory that is in use.
        let plan = vec![(20 * MIB, SIM_BASE), (20 * MIB, SIM_BASE), (2 * MIB, SIM_BASE + 30 * MIB)];
        let sim = SimulatedMemory::with_address_plan(GIB, plan);
        sim.arm_address_plan();
        let a = sim.malloc(20 * MIB).unwrap();
        assert_eq!(a, SIM_BASE);
        let b = sim.malloc(20 * MIB).unwrap();
        assert!(b >= SIM_BASE + 32 * MIB, "a fresh address above every planned range, not {b:#x}");
        assert_ne!(sim.malloc(2 * MIB).unwrap(), SIM_BASE + 30 * MIB, "the plan ended");
        // Freed, a planned address can be planned again.
        let sim = SimulatedMemory::with_address_plan(GIB, vec![(4 * MIB, SIM_BASE), (4 * MIB, SIM_BASE)]);
        sim.arm_address_plan();
        let a = sim.malloc(4 * MIB).unwrap();
        sim.free(a, 4 * MIB);
        assert_eq!(sim.malloc(4 * MIB).unwrap(), SIM_BASE);
    }
}
