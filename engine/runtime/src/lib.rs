//! vramlab's runtime: devices, tensors, the CUDA backend and the autotuner.
//!
//! A [`device::Device`] pairs a backend (the host, or a CUDA GPU found at run
//! time) with a caching allocator from `vramlab-allocator`; a [`tensor::Tensor`]
//! holds an allocation from it; tensor ops check their operands, take outputs
//! from the allocator and run the CPU kernels of `vramlab-cpu-kernels` or the
//! GPU's, reporting each kernel through the allocator's [`hooks`].
//!
//! The allocator model and the CPU kernels are re-exported under the paths
//! users of the engine know ([`alloc`], [`hooks`], [`replay`], [`cpu_kernels`]);
//! training lives on top, in `vramlab-train`.

pub use vramlab_allocator as alloc;
pub use vramlab_allocator::{hooks, replay};
pub use vramlab_cpu_kernels as cpu_kernels;

pub mod autotune;
pub mod cuda;
pub mod device;
pub mod tensor;
