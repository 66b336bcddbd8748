//! `Tensor` itself: its shape and shared storage, the constructors, the
//! accessors, reshaping, reading values on the host, moving between devices,
//! and allocation from the device's caching allocator. The ops (`ops/`) and
//! host buffers (`host.rs`) add methods from their own files.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use vramlab_rng::Rng;

use crate::alloc::Allocation;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Result, TensorError};
use crate::hooks::Tag;
use crate::storage::{Pod, Storage, current_tag};

/// An n-dimensional array on a device. Cloning (and reshaping) shares the storage.
#[derive(Clone)]
pub struct Tensor {
    pub(super) storage: Arc<Storage>,
    shape: Arc<[usize]>,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({:?}, {}, {}", self.shape(), self.dtype(), self.device())?;
        if let Some(t) = self.tag() {
            write!(f, ", {t}")?;
        }
        f.write_str(")")
    }
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    /// A tensor whose storage is filled by `fill` (called once, with exclusive access).
    fn build(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        fill: impl FnOnce(&mut Storage) -> Result<()>,
    ) -> Result<Tensor> {
        if !device.is_cpu() {
            // Values are made on the host and copied over, as `torch.tensor(data,
            // device="cuda")` does.
            return Tensor::build(shape, dtype, &Device::cpu(), fill)?.to(device);
        }
        let mut t = Tensor::uninit(shape, dtype, device)?;
        fill(Arc::get_mut(&mut t.storage).expect("a new tensor is not shared"))?;
        Ok(t)
    }

    /// A tensor of `value`s.
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::build(shape, dtype, device, |s| {
            match dtype {
                DType::F32 => s.slice_mut::<f32>().fill(value as f32),
                DType::F16 => s.slice_mut::<f16>().fill(f16::from_f64(value)),
                DType::BF16 => s.slice_mut::<bf16>().fill(bf16::from_f64(value)),
                DType::I64 => s.slice_mut::<i64>().fill(value as i64),
            }
            Ok(())
        })
    }

    /// `torch.zeros`.
    pub fn zeros(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype, device)
    }

    /// Values from a host slice (`torch.tensor(data).reshape(shape)`).
    pub fn from_slice<T: Pod>(data: &[T], shape: &[usize], device: &Device) -> Result<Tensor> {
        let expected = numel(shape).unwrap_or(usize::MAX);
        if data.len() != expected {
            return Err(TensorError::DataLength { op: "from_slice", shape: shape.to_vec(), len: data.len(), expected });
        }
        Tensor::build(shape, T::DTYPE, device, |s| {
            s.slice_mut::<T>().copy_from_slice(data);
            Ok(())
        })
    }

    /// Seeded standard-normal values (`torch.randn` with a generator), drawn from
    /// the workspace's generator (`vramlab_rng::Rng`).
    pub fn randn(shape: &[usize], dtype: DType, seed: u64, device: &Device) -> Result<Tensor> {
        let mut rng = Rng::new(seed);
        Tensor::from_fn(shape, dtype, device, move || rng.normal())
    }

    /// Seeded uniform values in [0, 1) (`torch.rand` with a generator).
    pub fn rand(shape: &[usize], dtype: DType, seed: u64, device: &Device) -> Result<Tensor> {
        let mut rng = Rng::new(seed);
        Tensor::from_fn(shape, dtype, device, move || rng.uniform())
    }

    fn from_fn(shape: &[usize], dtype: DType, device: &Device, mut f: impl FnMut() -> f64) -> Result<Tensor> {
        Tensor::build(shape, dtype, device, |s| {
            match dtype {
                DType::F32 => s.slice_mut::<f32>().iter_mut().for_each(|v| *v = f() as f32),
                DType::F16 => s.slice_mut::<f16>().iter_mut().for_each(|v| *v = f16::from_f64(f())),
                DType::BF16 => s.slice_mut::<bf16>().iter_mut().for_each(|v| *v = bf16::from_f64(f())),
                DType::I64 => s.slice_mut::<i64>().iter_mut().for_each(|v| *v = f() as i64),
            }
            Ok(())
        })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.storage.len
    }

    pub fn dtype(&self) -> DType {
        self.storage.dtype
    }

    pub fn device(&self) -> &Device {
        &self.storage.device
    }

    /// The tag its storage was allocated with.
    pub fn tag(&self) -> Option<Tag> {
        self.storage.tag
    }

    /// Bytes of its elements.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype().size_bytes()
    }

    /// Bytes the allocator handed out for it (the rounded block).
    pub fn allocated_bytes(&self) -> u64 {
        self.storage.allocation.as_ref().map_or(0, Allocation::size)
    }

    /// The same storage with another shape of the same element count.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if numel(shape) != Some(self.numel()) {
            return Err(TensorError::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
                reason: "the element counts differ".into(),
            });
        }
        Ok(Tensor { storage: self.storage.clone(), shape: shape.into() })
    }

    /// The elements as `T`, for kernels. Host tensors only.
    pub(crate) fn host_slice<T: Pod>(&self, op: &'static str) -> Result<&[T]> {
        self.check_host(op)?;
        if T::DTYPE != self.dtype() {
            return Err(TensorError::DTypeMismatch { op, lhs: self.dtype(), rhs: T::DTYPE });
        }
        Ok(self.storage.slice::<T>())
    }

    pub(super) fn check_host(&self, op: &'static str) -> Result<()> {
        if self.device().is_cpu() { Ok(()) } else { Err(TensorError::NotOnHost { op, device: self.device().id() }) }
    }

    /// The values, copied to a `Vec` (`tensor.tolist()`). A tensor on a GPU must
    /// be moved to the cpu first.
    pub fn to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        Ok(self.host_slice::<T>("to_vec")?.to_vec())
    }

    /// The values converted to f64, whatever the dtype.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        self.check_host("to_f64_vec")?;
        Ok(self.storage.to_f64_vec())
    }

    /// A tensor of `shape` over new storage of as many elements (what a
    /// backend returns).
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> Tensor {
        debug_assert_eq!(numel(shape), Some(storage.len));
        Tensor { storage: Arc::new(storage), shape: shape.into() }
    }

    /// The storage, for the backends.
    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// `tensor.to(device)`: this tensor when it is already there, else a copy on
    /// `device` (allocated from that device's allocator, with the current tag).
    /// Copies that leave a GPU wait for it; see [`transfer`].
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        let storage = crate::transfer::copy_to_device(&self.storage, device)?;
        Ok(Tensor::from_storage(storage, self.shape()))
    }

    /// Address of the first element: host memory on a host device, a
    /// `CUdeviceptr` on a CUDA device.
    pub(crate) fn data_ptr(&self) -> u64 {
        self.storage.addr()
    }

    /// A tensor on `device` whose storage is left as the allocator gives it
    /// (device kernels write every element before anyone reads it), tagged with
    /// the calling thread's current tag.
    pub(crate) fn uninit(shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::uninit_tagged(shape, dtype, device, current_tag())
    }

    /// [`Tensor::uninit`] with an explicit tag (`Some(Tag::Workspace)` for scratch).
    pub(crate) fn uninit_tagged(shape: &[usize], dtype: DType, device: &Device, tag: Option<Tag>) -> Result<Tensor> {
        Tensor::uninit_on(shape, dtype, device, tag, 0)
    }

    /// [`Tensor::uninit_tagged`] from the pool of `stream`.
    pub(crate) fn uninit_on(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        tag: Option<Tag>,
        stream: crate::alloc::StreamId,
    ) -> Result<Tensor> {
        let len = numel(shape).ok_or_else(|| TensorError::BadShape {
            op: "alloc",
            shape: shape.to_vec(),
            reason: "the element count overflows".into(),
        })?;
        let storage = Storage::new_on(device, len, dtype, tag, stream)?;
        Ok(Tensor { storage: Arc::new(storage), shape: shape.into() })
    }

    /// Marks the storage as used on `stream` (`tensor.record_stream(stream)`):
    /// when it is freed, its block is not reused before the work queued on
    /// `stream` so far has run.
    pub fn record_stream(&self, stream: crate::alloc::StreamId) {
        if let Some(a) = &self.storage.allocation {
            self.device().allocator().record_stream(a, stream);
        }
    }
}

/// Tensors whose values are bitwise equal on the host.
pub fn same_values(a: &Tensor, b: &Tensor) -> Result<bool> {
    Ok(a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_f64_vec()? == b.to_f64_vec()?)
}
