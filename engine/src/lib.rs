//! vramlab's instrumented engine.
//!
//! The part every other vramlab feature observes: [`alloc::CachingAllocator`], a
//! faithful model of PyTorch's CUDA caching allocator over a device's raw memory,
//! and [`hooks`], the single event mechanism through which the allocator (and,
//! later, kernels, copies and phases) report what they do.

pub mod alloc;
pub mod autotune;
pub mod cpu_kernels;
pub mod cuda;
pub mod device;
pub mod hooks;
pub mod nn;
pub mod replay;
pub mod tensor;
