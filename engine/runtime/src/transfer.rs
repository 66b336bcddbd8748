//! Moving storage between devices: host to host (a memcpy), host to GPU, GPU
//! to host and within a GPU, each reported as a copy event (`Tensor::to`, and
//! the CUDA backend's reads of a flag).
//!
//! The rules follow PyTorch's. A copy from a host tensor (pageable memory) is
//! staged by the driver and the source may be reused when the call returns; a
//! copy to the host waits for the GPU, since the caller will read the values.
//! Pinned buffers and non-blocking copies are in `host.rs`.

use crate::alloc::StreamId;
use crate::device::Device;
use crate::error::{Result, TensorError};
use crate::hooks::{CopyEvent, CopyKind, Event, now_ns};
use crate::storage::{Storage, current_tag};

/// Maps a CUDA error to the tensor error of `op`.
pub(crate) fn cuda_err(op: &'static str) -> impl Fn(crate::cuda::CudaError) -> TensorError {
    move |source| TensorError::Cuda { op, source }
}

/// `src` copied to `device` (which differs from `src`'s), allocated with the
/// current tag.
pub(crate) fn copy_to_device(src: &Storage, device: &Device) -> Result<Storage> {
    const OP: &str = "to";
    let started = now_ns();
    let bytes = src.size_bytes();
    let out = Storage::new_on(device, src.len, src.dtype, current_tag(), 0)?;
    let kind = match (src.device.cuda(), device.cuda()) {
        (None, None) => {
            if bytes > 0 {
                // SAFETY: both ranges are live host memory of `bytes` bytes owned by
                // two different tensors, so they do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(src.addr() as *const u8, out.addr() as *mut u8, bytes) };
            }
            CopyKind::HostToHost
        }
        (None, Some(gpu)) => {
            // SAFETY: `src` is host memory of `bytes` bytes that lives through the
            // call (pageable: the driver stages it before returning); `out` is new
            // device memory of the same size.
            unsafe { gpu.copy_htod(out.addr(), src.addr() as *const u8, bytes, 0) }.map_err(cuda_err(OP))?;
            CopyKind::HostToDevice
        }
        (Some(gpu), None) => {
            // SAFETY: `out` is new host memory of `bytes` bytes, read only after the
            // stream is synchronized below; `src` is device memory of `bytes`.
            unsafe { gpu.copy_dtoh(out.addr() as *mut u8, src.addr(), bytes, 0) }.map_err(cuda_err(OP))?;
            gpu.synchronize_stream(0).map_err(cuda_err(OP))?;
            CopyKind::DeviceToHost
        }
        (Some(a), Some(b)) if a.info().ordinal == b.info().ordinal => {
            // Two devices on one GPU (private allocators) share the context.
            b.copy_dtod(out.addr(), src.addr(), bytes, 0).map_err(cuda_err(OP))?;
            CopyKind::DeviceToDevice
        }
        (Some(_), Some(_)) => {
            // Between GPUs: through the host, which is simple and always works.
            return copy_to_device(&copy_to_device(src, &Device::cpu())?, device);
        }
    };
    let reported = if kind == CopyKind::DeviceToHost { &src.device } else { device };
    emit_copy(reported, kind, bytes, false, false, 0, started);
    Ok(out)
}

/// Reports a copy to the hub of `device` (the GPU side of a transfer).
pub(crate) fn emit_copy(
    device: &Device,
    kind: CopyKind,
    bytes: usize,
    pinned: bool,
    non_blocking: bool,
    stream: StreamId,
    start_ns: u64,
) {
    let hooks = device.allocator().hooks();
    if hooks.is_active() {
        hooks.emit(&Event::Copy(CopyEvent {
            kind,
            device: device.id().event_index(),
            stream,
            bytes: bytes as u64,
            pinned,
            non_blocking,
            start_ns,
            duration_ns: now_ns().saturating_sub(start_ns),
        }));
    }
}
