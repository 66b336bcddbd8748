//! The CUDA backend, through cudarc with dynamic loading: always compiled,
//! chosen at run time. Nothing here is called before [`libs::CudaLib::require`]
//! has found the library it needs, so a machine without CUDA gets a typed
//! "unavailable" error instead of cudarc's panic.
//!
//! - [`libs`]: finding libcuda, NVRTC, cuBLAS and cuDNN;
//! - [`backend`]: one device's context, streams, compiled kernels and timing;
//! - [`memory`]: the raw memory under the caching allocator (`cuMemAlloc`);
//! - [`streams`]: numbered streams (0 default, 1 copies);
//! - [`kernels`]: the CUDA C source compiled with NVRTC.

pub mod backend;
pub mod copy;
pub mod error;
pub mod kernels;
pub mod libs;
pub mod memory;
pub mod streams;

pub use backend::{CudaBackend, CudaInfo, probe};
pub use copy::StreamEvent;
pub use error::{CudaError, CudaResult};
pub use libs::CudaLib;
pub use streams::COPY_STREAM;
