//! Device memory for the caching allocator: synchronous `cuMemAlloc`/`cuMemFree`
//! (what `cudaMalloc`/`cudaFree` do), `cuMemGetInfo`, the virtual-memory calls
//! behind expandable segments, and stream events for cross-stream frees.
//!
//! Never the driver's stream-ordered pool (`cuMemAllocAsync`): it caches
//! underneath and would hide exactly the behaviour the allocator models.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, result, sys};

use super::streams::Streams;
use crate::alloc::{EventId, MemInfo, RawAllocator, RawError, StreamId};

/// Raw memory of one CUDA device.
pub struct CudaMemory {
    name: String,
    ctx: Arc<CudaContext>,
    streams: Arc<Streams>,
    /// Outstanding allocator events (`CUevent` as an address).
    events: Mutex<HashMap<u64, usize>>,
    next_event: AtomicU64,
    /// Physical allocations backing mapped pages of expandable segments, by
    /// address; each covers `granularity` bytes.
    handles: Mutex<BTreeMap<u64, sys::CUmemGenericAllocationHandle>>,
    granularity: u64,
}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory").field("device", &self.name).finish_non_exhaustive()
    }
}

impl CudaMemory {
    pub(crate) fn new(name: String, ctx: Arc<CudaContext>, streams: Arc<Streams>) -> CudaMemory {
        let granularity = ctx.bind_to_thread().ok().and_then(|()| granularity(ctx.cu_device())).unwrap_or(2 << 20);
        CudaMemory {
            name,
            ctx,
            streams,
            events: Mutex::new(HashMap::new()),
            next_event: AtomicU64::new(1),
            handles: Mutex::new(BTreeMap::new()),
            granularity,
        }
    }

    fn bind(&self) -> Result<(), RawError> {
        self.ctx.bind_to_thread().map_err(|e| self.device_error("binding the context", e))
    }

    fn device_error(&self, what: &str, e: cudarc::driver::DriverError) -> RawError {
        let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
        RawError::Device { device: self.name.clone(), message: format!("{what}: {name}") }
    }

    fn take_event(&self, id: EventId) -> Option<sys::CUevent> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).get(&id.0).map(|&e| e as sys::CUevent)
    }

    fn drop_event(&self, id: EventId) {
        if let Some(e) = self.events.lock().unwrap_or_else(|e| e.into_inner()).remove(&id.0) {
            // SAFETY: created by `record_event` and no longer used.
            let _ = unsafe { result::event::destroy(e as sys::CUevent) };
        }
    }

    fn prop(&self) -> sys::CUmemAllocationProp {
        alloc_prop(self.ctx.cu_device())
    }
}

fn alloc_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is the documented default.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

/// The device's minimum mapping granularity (2 MiB on current GPUs).
fn granularity(device: sys::CUdevice) -> Option<u64> {
    let prop = alloc_prop(device);
    let mut g = 0usize;
    // SAFETY: `prop` describes device memory; `g` is written by the call.
    let rc = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    (rc == sys::CUresult::CUDA_SUCCESS && g > 0).then_some(g as u64)
}

impl RawAllocator for CudaMemory {
    fn name(&self) -> &str {
        &self.name
    }

    fn malloc(&self, size: u64) -> Result<u64, RawError> {
        self.bind()?;
        // SAFETY: the context is current; the memory is freed by `free`.
        match unsafe { result::malloc_sync(size as usize) } {
            Ok(ptr) => Ok(ptr),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(RawError::OutOfMemory),
            Err(e) => Err(self.device_error("cuMemAlloc", e)),
        }
    }

    fn free(&self, addr: u64, _size: u64) {
        if self.bind().is_ok() {
            // SAFETY: `addr` came from `malloc` and no block of it is in use.
            let _ = unsafe { result::free_sync(addr) };
        }
    }

    fn mem_info(&self) -> MemInfo {
        if self.bind().is_err() {
            return MemInfo { free_bytes: 0, total_bytes: 0 };
        }
        let (free, total) = result::mem_get_info().unwrap_or((0, 0));
        MemInfo { free_bytes: free as u64, total_bytes: total as u64 }
    }

    fn reserve_address_space(&self, size: u64) -> Result<u64, RawError> {
        self.bind()?;
        let size = size.div_ceil(self.granularity) * self.granularity;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves address space only; `ptr` is written by the call.
        unsafe { sys::cuMemAddressReserve(&mut ptr, size as usize, 0, 0, 0) }
            .result()
            .map_err(|e| self.device_error("cuMemAddressReserve", e))?;
        Ok(ptr)
    }

    fn release_address_space(&self, addr: u64, size: u64) {
        if self.bind().is_ok() {
            let size = size.div_ceil(self.granularity) * self.granularity;
            // SAFETY: the range came from `reserve_address_space` and is unmapped.
            let _ = unsafe { sys::cuMemAddressFree(addr, size as usize) };
        }
    }

    fn map(&self, addr: u64, size: u64) -> Result<(), RawError> {
        self.bind()?;
        let g = self.granularity;
        let prop = self.prop();
        let mut mapped: Vec<(u64, sys::CUmemGenericAllocationHandle)> = Vec::new();
        let mut failure = None;
        let mut chunk = addr;
        while chunk < addr + size {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: `prop` describes device memory of this context's device.
            let rc = unsafe { sys::cuMemCreate(&mut handle, g as usize, &prop, 0) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                failure = Some(("cuMemCreate", rc));
                break;
            }
            // SAFETY: `chunk` lies in a reserved, unmapped range; `handle` is g bytes.
            let rc = unsafe { sys::cuMemMap(chunk, g as usize, 0, handle, 0) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                // SAFETY: the handle was created above and is not mapped.
                let _ = unsafe { sys::cuMemRelease(handle) };
                failure = Some(("cuMemMap", rc));
                break;
            }
            mapped.push((chunk, handle));
            chunk += g;
        }
        if failure.is_none() {
            // SAFETY: a plain C struct; all-zero is a valid start.
            let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
            access.location = prop.location;
            access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            // SAFETY: the range was mapped above.
            let rc = unsafe { sys::cuMemSetAccess(addr, size as usize, &access, 1) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                failure = Some(("cuMemSetAccess", rc));
            }
        }
        if let Some((call, rc)) = failure {
            for (chunk, handle) in mapped {
                // SAFETY: undoing the mappings made above.
                unsafe {
                    let _ = sys::cuMemUnmap(chunk, g as usize);
                    let _ = sys::cuMemRelease(handle);
                }
            }
            return Err(if rc == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                RawError::OutOfMemory
            } else {
                self.device_error(call, cudarc::driver::DriverError(rc))
            });
        }
        self.handles.lock().unwrap_or_else(|e| e.into_inner()).extend(mapped);
        Ok(())
    }

    fn unmap(&self, addr: u64, size: u64) {
        if self.bind().is_err() {
            return;
        }
        // Memory being unmapped may still be read by queued work.
        let _ = self.ctx.synchronize();
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        let chunks: Vec<u64> = handles.range(addr..addr + size).map(|(&a, _)| a).collect();
        for chunk in chunks {
            if let Some(handle) = handles.remove(&chunk) {
                // SAFETY: the chunk was mapped with this handle by `map`.
                unsafe {
                    let _ = sys::cuMemUnmap(chunk, self.granularity as usize);
                    let _ = sys::cuMemRelease(handle);
                }
            }
        }
    }

    fn record_event(&self, stream: StreamId) -> EventId {
        let id = self.next_event.fetch_add(1, Ordering::Relaxed);
        let Ok(()) = self.bind() else { return EventId(0) };
        let Ok(event) = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) else {
            // Without an event the block waits for a full synchronize instead.
            return EventId(0);
        };
        let cu_stream = self.streams.cu_stream(stream);
        // SAFETY: both handles are live and belong to this context.
        if unsafe { result::event::record(event, cu_stream) }.is_err() {
            // SAFETY: never recorded; nothing waits on it.
            let _ = unsafe { result::event::destroy(event) };
            return EventId(0);
        }
        self.events.lock().unwrap_or_else(|e| e.into_inner()).insert(id, event as usize);
        EventId(id)
    }

    fn event_completed(&self, event: EventId) -> bool {
        let Some(e) = self.take_event(event) else {
            // Event 0 (recording failed): complete only once the device is idle.
            return event.0 != 0 || self.ctx.synchronize().is_ok();
        };
        // SAFETY: a live event of this context.
        match unsafe { result::event::query(e) } {
            Err(err) if err.0 == sys::CUresult::CUDA_ERROR_NOT_READY => false,
            _ => {
                self.drop_event(event);
                true
            }
        }
    }

    fn synchronize_event(&self, event: EventId) {
        match self.take_event(event) {
            // SAFETY: a live event of this context.
            Some(e) => {
                let _ = unsafe { result::event::synchronize(e) };
                self.drop_event(event);
            }
            None => {
                let _ = self.ctx.synchronize();
            }
        }
    }
}
