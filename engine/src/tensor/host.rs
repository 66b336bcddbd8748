//! Host buffers for transfers: pageable (ordinary memory) or pinned
//! (page-locked), the two kinds the guides compare for host-to-device copies.
//!
//! On the CPU backend "pinned" means the pages are locked with `mlock` where the
//! process may lock that much (containers often allow only a few MiB); the
//! buffer records whether locking succeeded. The CUDA backend allocates pinned
//! buffers with the driver instead.

use std::alloc::Layout;

use super::{DType, Pod, Result, Tensor, TensorError};
use crate::hooks::{CopyEvent, CopyKind, Event, now_ns};

/// Alignment of host buffers (a page).
const ALIGN: usize = 4096;

/// A block of host memory used as the source or destination of copies.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
    pinned: bool,
    locked: bool,
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

    /// Pinned (page-locked) host memory of `len` bytes, zeroed. Whether the pages
    /// could really be locked is [`is_page_locked`](Self::is_page_locked).
    pub fn pinned(len: usize) -> HostBuffer {
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
        HostBuffer { ptr, len, pinned, locked }
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

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` owns `len` initialized (zeroed or written) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
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
        let mut out = vec![T::default(); n];
        // SAFETY: `out` has room for `bytes` bytes; the buffer holds them; every bit
        // pattern is a valid `T` for the plain types `Pod` is implemented for.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr().cast::<u8>(), bytes) };
        Ok(out)
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
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
    /// `buffer` (a host-to-device copy; `non_blocking` is recorded, and on the
    /// synchronous CPU backend the copy is complete when this returns).
    pub fn from_host(
        buffer: &HostBuffer,
        shape: &[usize],
        dtype: DType,
        device: &crate::device::Device,
        non_blocking: bool,
    ) -> Result<Tensor> {
        let started = now_ns();
        let n: usize = shape.iter().product();
        let bytes = n * dtype.size_bytes();
        if bytes > buffer.len() {
            return Err(TensorError::DataLength {
                op: "from_host",
                shape: shape.to_vec(),
                len: buffer.len() / dtype.size_bytes(),
                expected: n,
            });
        }
        let out = Tensor::build(shape, dtype, device, |s| {
            if bytes > 0 {
                // SAFETY: both ranges hold `bytes` bytes and belong to different owners.
                unsafe { std::ptr::copy_nonoverlapping(buffer.ptr, s.addr() as *mut u8, bytes) };
            }
            Ok(())
        })?;
        emit_host_copy(&out, CopyKind::HostToDevice, buffer.is_pinned(), non_blocking, started);
        Ok(out)
    }

    /// Copies the values into `buffer` (device-to-host).
    pub fn copy_to_host(&self, buffer: &mut HostBuffer, non_blocking: bool) -> Result<()> {
        let started = now_ns();
        let bytes = self.size_bytes();
        if bytes > buffer.len() {
            return Err(TensorError::DataLength {
                op: "copy_to_host",
                shape: self.shape().to_vec(),
                len: buffer.len(),
                expected: bytes,
            });
        }
        self.check_host("copy_to_host")?;
        if bytes > 0 {
            // SAFETY: as in `from_host`.
            unsafe { std::ptr::copy_nonoverlapping(self.data_ptr() as *const u8, buffer.ptr, bytes) };
        }
        emit_host_copy(self, CopyKind::DeviceToHost, buffer.is_pinned(), non_blocking, started);
        Ok(())
    }
}

fn emit_host_copy(t: &Tensor, kind: CopyKind, pinned: bool, non_blocking: bool, started: u64) {
    let hooks = t.device().allocator().hooks();
    if hooks.is_active() {
        hooks.emit(&Event::Copy(CopyEvent {
            kind,
            device: t.device().id().event_index(),
            stream: 0,
            bytes: t.size_bytes() as u64,
            pinned,
            non_blocking,
            start_ns: started,
            duration_ns: now_ns().saturating_sub(started),
        }));
    }
}
