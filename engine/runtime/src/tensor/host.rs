//! Host buffers for transfers: pageable (ordinary memory) or pinned
//! (page-locked), the two kinds the guides compare for host-to-device copies.
//!
//! When a CUDA device is present, pinned buffers come from the driver
//! (`cuMemHostAlloc`, what `pin_memory()` uses), so copies from them run as
//! DMA without staging and can be asynchronous. Without one, "pinned" means the
//! pages are locked with `mlock` where the process may lock that much
//! (containers often allow only a few MiB); the buffer records whether locking
//! succeeded.
//!
//! A non-blocking copy to or from a driver-pinned buffer returns before the
//! copy has run; the buffer remembers it, and any access to its bytes (and its
//! drop) waits for it first, so the host never reads half-copied values or
//! frees memory a copy still uses.

use std::alloc::Layout;
use std::sync::{Arc, Mutex};

use crate::alloc::StreamId;
use crate::cuda::{CudaBackend, StreamEvent};
use crate::device::{Device, DeviceId};
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::{CopyKind, now_ns};
use crate::storage::{Pod, current_tag};
use crate::tensor::value::Tensor;
use crate::transfer::{cuda_err, emit_copy};

/// Alignment of host buffers (a page).
const ALIGN: usize = 4096;

/// A block of host memory used as the source or destination of copies.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
    pinned: bool,
    locked: bool,
    /// The GPU whose driver allocated it (page-locked, registered for DMA).
    cuda: Option<Arc<CudaBackend>>,
    /// A non-blocking copy that may still read or write it.
    in_flight: Mutex<Option<StreamEvent>>,
}

// SAFETY: the buffer owns its memory exclusively; access goes through &/&mut self.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only reads.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Ordinary (pageable) host memory of `len` bytes, zeroed.
    pub fn pageable(len: usize) -> HostBuffer {
        HostBuffer::new(len, false)
    }

    /// Pinned (page-locked) host memory of `len` bytes, zeroed: from the CUDA
    /// driver when a GPU is present, else locked with `mlock`. Whether the pages
    /// are really locked is [`is_page_locked`](Self::is_page_locked).
    pub fn pinned(len: usize) -> HostBuffer {
        if crate::device::cuda_probe().is_ok()
            && let Ok(device) = Device::get(DeviceId::cuda(0))
            && let Some(gpu) = device.cuda()
            && let Ok(ptr) = gpu.alloc_pinned(len)
        {
            return HostBuffer {
                ptr,
                len,
                pinned: true,
                locked: true,
                cuda: Some(gpu.clone()),
                in_flight: Mutex::new(None),
            };
        }
        HostBuffer::new(len, true)
    }

    fn new(len: usize, pinned: bool) -> HostBuffer {
        let size = len.max(1);
        let layout = Layout::from_size_align(size, ALIGN).expect("host buffer size fits a layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let locked = pinned && lock_pages(ptr, size);
        HostBuffer { ptr, len, pinned, locked, cuda: None, in_flight: Mutex::new(None) }
    }

    /// Whether the CUDA driver allocated it, so copies to and from a GPU can be
    /// asynchronous DMA.
    pub fn is_device_pinned(&self) -> bool {
        self.cuda.is_some()
    }

    /// Waits for a non-blocking copy that still uses the buffer, if any.
    pub fn wait(&self) -> Result<()> {
        let pending = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).take();
        match pending {
            Some(event) => event.synchronize().map_err(cuda_err("HostBuffer::wait")),
            None => Ok(()),
        }
    }

    fn set_in_flight(&self, event: StreamEvent) {
        *self.in_flight.lock().unwrap_or_else(|e| e.into_inner()) = Some(event);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it was asked for as pinned memory.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Whether its pages are really locked in memory.
    pub fn is_page_locked(&self) -> bool {
        self.locked
    }

    /// The bytes (after any copy still using the buffer has run).
    pub fn as_bytes(&self) -> &[u8] {
        let _ = self.wait();
        // SAFETY: `ptr` owns `len` initialized (zeroed or written) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let _ = self.wait();
        // SAFETY: as above, with exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Writes `values` at the start of the buffer (it must be large enough).
    pub fn write<T: Pod>(&mut self, values: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(values);
        if bytes > self.len {
            return Err(TensorError::DataLength {
                op: "HostBuffer::write",
                shape: vec![self.len],
                len: bytes,
                expected: self.len,
            });
        }
        self.wait()?;
        // SAFETY: `values` is plain data of `bytes` bytes; the buffer holds at least that.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), self.ptr, bytes) };
        Ok(())
    }

    /// Reads `n` values of `T` from the start of the buffer.
    pub fn read<T: Pod>(&self, n: usize) -> Result<Vec<T>> {
        let bytes = n * std::mem::size_of::<T>();
        if bytes > self.len {
            return Err(TensorError::DataLength {
                op: "HostBuffer::read",
                shape: vec![self.len],
                len: bytes,
                expected: self.len,
            });
        }
        self.wait()?;
        let mut out = vec![T::default(); n];
        // SAFETY: `out` has room for `bytes` bytes; the buffer holds them; every bit
        // pattern is a valid `T` for the plain types `Pod` is implemented for.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr().cast::<u8>(), bytes) };
        Ok(out)
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        let _ = self.wait();
        if let Some(gpu) = &self.cuda {
            // SAFETY: allocated by `alloc_pinned`; no copy uses it any more.
            unsafe { gpu.free_pinned(self.ptr) };
            return;
        }
        let size = self.len.max(1);
        if self.locked {
            unlock_pages(self.ptr, size);
        }
        let layout = Layout::from_size_align(size, ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

#[cfg(unix)]
fn lock_pages(ptr: *mut u8, len: usize) -> bool {
    // SAFETY: the range is memory we own.
    unsafe { libc::mlock(ptr.cast(), len) == 0 }
}

#[cfg(unix)]
fn unlock_pages(ptr: *mut u8, len: usize) {
    // SAFETY: the range was locked by `lock_pages`.
    unsafe { libc::munlock(ptr.cast(), len) };
}

#[cfg(not(unix))]
fn lock_pages(_: *mut u8, _: usize) -> bool {
    false
}

#[cfg(not(unix))]
fn unlock_pages(_: *mut u8, _: usize) {}

impl Tensor {
    /// A tensor on `device` with the first `shape`'s worth of `dtype` values from
    /// `buffer` (a host-to-device copy), like `buffer.to(device, non_blocking=...)`
    /// on PyTorch's default stream.
    ///
    /// On a GPU a blocking copy returns when the values have arrived. A
    /// non-blocking copy from a driver-pinned buffer is queued and returns at
    /// once: the host runs on, but the copy is ordered with the compute on the
    /// default stream, so it cannot overlap kernels queued after it — that takes
    /// a side stream ([`Tensor::from_host_on_stream`]). From a pageable buffer the
    /// driver stages the bytes, so the call returns once they are staged. On the
    /// synchronous CPU backend every copy is complete when this returns.
    pub fn from_host(
        buffer: &HostBuffer,
        shape: &[usize],
        dtype: DType,
        device: &Device,
        non_blocking: bool,
    ) -> Result<Tensor> {
        copy_from_host(buffer, shape, dtype, device, non_blocking, 0)
    }

    /// A non-blocking host-to-device copy on `stream` (PyTorch's
    /// `with torch.cuda.stream(s): t = buffer.to(device, non_blocking=True)`):
    /// the tensor is allocated from `stream`'s pool and the copy is queued there,
    /// so it overlaps with work on other streams. Before another stream uses the
    /// tensor, make it wait ([`Device::wait_stream`]) and record the tensor on it
    /// ([`Tensor::record_stream`]) — the allocator then keeps the block until
    /// that stream's work is done. Host devices have no streams: the copy is
    /// complete when this returns.
    pub fn from_host_on_stream(
        buffer: &HostBuffer,
        shape: &[usize],
        dtype: DType,
        device: &Device,
        stream: StreamId,
    ) -> Result<Tensor> {
        copy_from_host(buffer, shape, dtype, device, true, stream)
    }

    /// Copies the values into `buffer` (device-to-host). On a GPU a blocking copy
    /// returns when the values are in the buffer; a non-blocking copy into a
    /// driver-pinned buffer returns at once, and reading the buffer waits for it.
    pub fn copy_to_host(&self, buffer: &mut HostBuffer, non_blocking: bool) -> Result<()> {
        const OP: &str = "copy_to_host";
        let started = now_ns();
        let bytes = self.size_bytes();
        if bytes > buffer.len() {
            return Err(TensorError::DataLength {
                op: OP,
                shape: self.shape().to_vec(),
                len: buffer.len(),
                expected: bytes,
            });
        }
        buffer.wait()?;
        let Some(gpu) = self.device().cuda() else {
            self.check_host(OP)?;
            if bytes > 0 {
                // SAFETY: as in `from_host`.
                unsafe { std::ptr::copy_nonoverlapping(self.data_ptr() as *const u8, buffer.ptr, bytes) };
            }
            emit_copy(self.device(), CopyKind::DeviceToHost, bytes, buffer.is_pinned(), non_blocking, 0, started);
            return Ok(());
        };
        let asynchronous = non_blocking && buffer.is_device_pinned();
        // SAFETY: the buffer has room for `bytes` and is not read before the copy
        // has run (synchronized here, or waited for through `set_in_flight`).
        unsafe { gpu.copy_dtoh(buffer.ptr, self.data_ptr(), bytes, 0) }.map_err(cuda_err(OP))?;
        if asynchronous {
            buffer.set_in_flight(gpu.record_event(0).map_err(cuda_err(OP))?);
        } else {
            gpu.synchronize_stream(0).map_err(cuda_err(OP))?;
        }
        emit_copy(self.device(), CopyKind::DeviceToHost, bytes, buffer.is_page_locked(), non_blocking, 0, started);
        Ok(())
    }
}

fn copy_from_host(
    buffer: &HostBuffer,
    shape: &[usize],
    dtype: DType,
    device: &Device,
    non_blocking: bool,
    stream: StreamId,
) -> Result<Tensor> {
    const OP: &str = "from_host";
    let started = now_ns();
    let n: usize = shape.iter().product();
    let bytes = n * dtype.size_bytes();
    if bytes > buffer.len() {
        return Err(TensorError::DataLength {
            op: OP,
            shape: shape.to_vec(),
            len: buffer.len() / dtype.size_bytes(),
            expected: n,
        });
    }
    buffer.wait()?;
    let Some(gpu) = device.cuda() else {
        let out = Tensor::uninit(shape, dtype, device)?;
        if bytes > 0 {
            // SAFETY: both ranges hold `bytes` bytes and belong to different owners.
            unsafe { std::ptr::copy_nonoverlapping(buffer.ptr, out.data_ptr() as *mut u8, bytes) };
        }
        emit_copy(device, CopyKind::HostToDevice, bytes, buffer.is_pinned(), non_blocking, 0, started);
        return Ok(out);
    };
    let out = Tensor::uninit_on(shape, dtype, device, current_tag(), stream)?;
    // SAFETY: the buffer holds `bytes`; if pinned it is kept alive and unwritten
    // until the copy has run (`set_in_flight`), if pageable the driver stages it
    // before returning. `out` is new device memory of `bytes`.
    unsafe { gpu.copy_htod(out.data_ptr(), buffer.ptr, bytes, stream) }.map_err(cuda_err(OP))?;
    if non_blocking && buffer.is_device_pinned() {
        buffer.set_in_flight(gpu.record_event(stream).map_err(cuda_err(OP))?);
    } else if !non_blocking {
        gpu.synchronize_stream(stream).map_err(cuda_err(OP))?;
    }
    emit_copy(device, CopyKind::HostToDevice, bytes, buffer.is_page_locked(), non_blocking, stream, started);
    Ok(out)
}
