//! The CUDA backend, through cudarc with dynamic loading: always compiled,
//! chosen at run time. Nothing here is called before [`libs::CudaLib::require`]
//! has found the library it needs, so a machine without CUDA gets a typed
//! "unavailable" error instead of cudarc's panic.
//!
//! - [`library`]: the libraries by name ([`CudaLib`]); [`libs`]: finding libcuda,
//!   NVRTC, cuBLAS and cuDNN;
//! - [`gpu`]: one opened GPU's context, streams, compiled kernels and timing;
//! - [`backend`]: the [`CudaBackend`], a GPU with its cuBLAS and cuDNN handles;
//! - [`memory`]: the raw memory under the caching allocator (`cuMemAlloc`);
//! - [`streams`]: numbered streams (0 default, 1 copies);
//! - [`kernels`]: the CUDA C source compiled with NVRTC;
//! - [`blas`]: the cuBLAS handle and its GEMMs; [`matmul`]: the matmul op on it;
//! - [`conv`]: convolutions through cuDNN, and im2col + cuBLAS without it;
//! - `ops`: the other tensor ops, on the NVRTC kernels.

pub mod backend;
pub mod blas;
pub mod conv;
pub mod copy;
pub mod error;
pub mod gpu;
pub mod kernels;
pub mod library;
pub mod libs;
pub mod matmul;
pub mod memory;
pub(crate) mod ops;
pub mod streams;

pub use backend::CudaBackend;
pub use blas::{matmul_allow_tf32, set_matmul_allow_tf32};
pub use conv::{cudnn_allow_tf32, cudnn_version, set_cudnn_allow_tf32};
pub use copy::StreamEvent;
pub use error::{CudaError, CudaResult};
pub use gpu::{CudaInfo, Gpu, probe};
pub use library::CudaLib;
pub use matmul::clear_cublas_workspace;
pub use streams::COPY_STREAM;
