//! vramlab's runtime: devices, tensors, the CUDA backend and the autotuner.
//!
//! A [`device::Device`] pairs a backend (the host, or a CUDA GPU found at run
//! time) with a caching allocator from `vramlab-allocator`; a [`tensor::Tensor`]
//! holds storage allocated from it; tensor ops check their operands and call
//! their device's backend (one trait over storage, `backend::Backend`), which
//! takes outputs from the allocator and runs the CPU kernels of
//! `vramlab-cpu-kernels` or the GPU's, reporting each kernel through the
//! allocator's [`hooks`].
//!
//! The allocator model and the CPU kernels are re-exported under the paths
//! users of the engine know ([`alloc`], [`hooks`], [`cpu_kernels`]);
//! training lives on top, in `vramlab-train`.

pub use vramlab_allocator as alloc;
pub use vramlab_allocator::hooks;
pub use vramlab_cpu_kernels as cpu_kernels;

pub mod autotune;
mod backend;
pub mod cuda;
pub mod device;
mod dtype;
mod error;
mod storage;
pub mod tensor;
mod transfer;
