//! Device memory of one tensor ([`Storage`]): an allocation from the device's
//! caching allocator with its element count and dtype, freed back on drop;
//! the element types it can hold ([`Pod`]); and the calling thread's
//! allocation tag ([`tag_scope`]). What the backends read and write: they take
//! storage, never tensors.

use std::cell::Cell;
use std::fmt;

use half::{bf16, f16};

use crate::alloc::{Allocation, StreamId};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::Tag;

thread_local! {
    static CURRENT_TAG: Cell<Option<Tag>> = const { Cell::new(None) };
}

/// Restores the previous tag when dropped.
#[derive(Debug)]
#[must_use = "the tag applies until the guard is dropped"]
pub struct TagScope {
    previous: Option<Tag>,
}

/// Tags every tensor this thread allocates until the guard drops
/// (`let _g = tag_scope(Tag::Activation);`). Scopes nest.
pub fn tag_scope(tag: Tag) -> TagScope {
    TagScope { previous: CURRENT_TAG.with(|t| t.replace(Some(tag))) }
}

impl Drop for TagScope {
    fn drop(&mut self) {
        CURRENT_TAG.with(|t| t.set(self.previous));
    }
}

/// The tag new allocations on this thread get.
pub fn current_tag() -> Option<Tag> {
    CURRENT_TAG.with(Cell::get)
}

/// Device memory owned by one tensor; freed back to the allocator on drop.
pub(crate) struct Storage {
    pub(crate) device: Device,
    pub(crate) allocation: Option<Allocation>,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
    pub(crate) tag: Option<Tag>,
}

impl Storage {
    pub(crate) fn new(device: &Device, len: usize, dtype: DType, tag: Option<Tag>) -> Result<Storage> {
        Storage::new_on(device, len, dtype, tag, 0)
    }

    /// Storage from the pool of `stream` (what allocating under
    /// `torch.cuda.stream(s)` does).
    pub(crate) fn new_on(
        device: &Device,
        len: usize,
        dtype: DType,
        tag: Option<Tag>,
        stream: StreamId,
    ) -> Result<Storage> {
        let bytes = (len as u64).checked_mul(dtype.size_bytes() as u64).ok_or_else(|| TensorError::BadShape {
            op: "alloc",
            shape: vec![len],
            reason: "too many elements".into(),
        })?;
        let allocation = device.allocator().malloc(bytes, stream, tag)?;
        Ok(Storage { device: device.clone(), allocation: Some(allocation), len, dtype, tag })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.allocation.as_ref().map_or(0, Allocation::addr)
    }

    /// The elements as `T`. Host devices only: callers check `is_cpu` first.
    pub(crate) fn slice<T: Pod>(&self) -> &[T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the allocation is live for as long as `self`, holds at least
        // `len * size_of::<T>()` bytes of host memory, is 512-byte aligned, and is
        // only written through `slice_mut` while the storage is uniquely owned.
        unsafe { std::slice::from_raw_parts(self.addr() as *const T, self.len) }
    }

    pub(crate) fn slice_mut<T: Pod>(&mut self) -> &mut [T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.addr() as *mut T, self.len) }
    }
}

impl Storage {
    /// The values converted to f64, whatever the dtype. Host storage only.
    pub(crate) fn to_f64_vec(&self) -> Vec<f64> {
        match self.dtype {
            DType::F32 => self.slice::<f32>().iter().map(|&v| v as f64).collect(),
            DType::F16 => self.slice::<f16>().iter().map(|v| v.to_f64()).collect(),
            DType::BF16 => self.slice::<bf16>().iter().map(|v| v.to_f64()).collect(),
            DType::I64 => self.slice::<i64>().iter().map(|&v| v as f64).collect(),
        }
    }

    /// Bytes of its elements.
    pub(crate) fn size_bytes(&self) -> usize {
        self.len * self.dtype.size_bytes()
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({} {}, {}, {:#x})", self.len, self.dtype, self.device, self.addr())
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            // The allocation came from this device's allocator and is live.
            let _ = self.device.allocator().free(a);
        }
    }
}

/// Plain element types a tensor can hold.
pub trait Pod: Copy + Default + Send + Sync + 'static + fmt::Debug {
    const DTYPE: DType;
}
impl Pod for f32 {
    const DTYPE: DType = DType::F32;
}
impl Pod for f16 {
    const DTYPE: DType = DType::F16;
}
impl Pod for bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Pod for i64 {
    const DTYPE: DType = DType::I64;
}
