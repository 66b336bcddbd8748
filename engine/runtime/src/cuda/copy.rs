//! Copies between host and device and within a device, on numbered streams,
//! and the events that order streams against each other and against the host.

use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::backend::CudaBackend;
use super::error::{CudaResult, DriverContext};
use crate::alloc::StreamId;

/// A recorded event that a host buffer or another stream waits on. Destroyed
/// when dropped (the driver releases it once it completes).
pub struct StreamEvent {
    backend: Arc<CudaBackend>,
    event: usize,
}

impl std::fmt::Debug for StreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamEvent(cuda:{})", self.backend.info().ordinal)
    }
}

// SAFETY: a CUevent may be used from any thread once its context is bound.
unsafe impl Send for StreamEvent {}
// SAFETY: as above; every use binds the context first.
unsafe impl Sync for StreamEvent {}

impl StreamEvent {
    fn raw(&self) -> sys::CUevent {
        self.event as sys::CUevent
    }

    /// Blocks the host until the work before the event has run.
    pub fn synchronize(&self) -> CudaResult<()> {
        self.backend.bind()?;
        // SAFETY: a live event of the backend's context.
        unsafe { result::event::synchronize(self.raw()) }.during("waiting for a copy")
    }

    /// Makes `stream` wait (on the device) for the work before the event.
    pub fn wait_on(&self, stream: StreamId) -> CudaResult<()> {
        self.backend.bind()?;
        let s = self.backend.stream(stream);
        // SAFETY: live stream and event of the same context.
        unsafe { result::stream::wait_event(s.cu_stream(), self.raw(), sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .during("making a stream wait for an event")
    }
}

impl Drop for StreamEvent {
    fn drop(&mut self) {
        if self.backend.bind().is_ok() {
            // SAFETY: created by `record_event`; destroying an incomplete event is allowed.
            let _ = unsafe { result::event::destroy(self.raw()) };
        }
    }
}

impl CudaBackend {
    /// Records an event (timing disabled) marking the work queued on `stream` so far.
    pub fn record_event(self: &Arc<Self>, stream: StreamId) -> CudaResult<StreamEvent> {
        self.bind()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).during("creating an event")?;
        let recorded = StreamEvent { backend: self.clone(), event: event as usize };
        // SAFETY: live event and stream of this context.
        unsafe { result::event::record(event, self.stream(stream).cu_stream()) }.during("recording an event")?;
        Ok(recorded)
    }

    /// Blocks the host until `stream`'s queued work has run.
    pub fn synchronize_stream(&self, stream: StreamId) -> CudaResult<()> {
        self.bind()?;
        self.stream(stream).synchronize().during("synchronizing a stream")
    }

    /// Queues a host-to-device copy of `bytes` bytes on `stream`.
    ///
    /// # Safety
    /// `src` must hold `bytes` readable bytes until the copy has run (for
    /// pageable memory the driver stages it before returning; page-locked memory
    /// is read by the device later), and `dst` must be device memory of this
    /// backend with room for `bytes`.
    pub unsafe fn copy_htod(&self, dst: u64, src: *const u8, bytes: usize, stream: StreamId) -> CudaResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller's contract.
        let src = unsafe { std::slice::from_raw_parts(src, bytes) };
        // SAFETY: as above.
        unsafe { result::memcpy_htod_async(dst, src, self.stream(stream).cu_stream()) }.during("copying host to device")
    }

    /// Queues a device-to-host copy of `bytes` bytes on `stream`.
    ///
    /// # Safety
    /// `dst` must be writable for `bytes` bytes and not read until the copy has
    /// run; `src` must be device memory of this backend holding `bytes`.
    pub unsafe fn copy_dtoh(&self, dst: *mut u8, src: u64, bytes: usize, stream: StreamId) -> CudaResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller's contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
        // SAFETY: as above.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream(stream).cu_stream()) }.during("copying device to host")
    }

    /// Queues a device-to-device copy within this device on `stream`.
    pub fn copy_dtod(&self, dst: u64, src: u64, bytes: usize, stream: StreamId) -> CudaResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both are allocations of this device (tensor storage) of at least `bytes`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream(stream).cu_stream()) }
            .during("copying device to device")
    }

    /// Page-locked host memory of `len` bytes (`cuMemHostAlloc`, portable across
    /// contexts), zeroed.
    pub fn alloc_pinned(&self, len: usize) -> CudaResult<*mut u8> {
        self.bind()?;
        // SAFETY: a new allocation, freed with `free_pinned`.
        let ptr = unsafe { result::malloc_host(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }.during("cuMemHostAlloc")?;
        // SAFETY: `len` bytes were just allocated.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, len) };
        Ok(ptr.cast())
    }

    /// Frees memory from [`alloc_pinned`](Self::alloc_pinned).
    ///
    /// # Safety
    /// `ptr` came from `alloc_pinned` and no copy still reads or writes it.
    pub unsafe fn free_pinned(&self, ptr: *mut u8) {
        if self.bind().is_ok() {
            // SAFETY: the caller's contract.
            let _ = unsafe { result::free_host(ptr.cast()) };
        }
    }
}
