//! The CUDA backend's errors. Every variant names what was being done, so a
//! failure deep in a kernel launch still says which op and which library.

use thiserror::Error;

use super::library::CudaLib;

/// Why something on a CUDA device failed or could not start.
#[derive(Debug, Clone, Error)]
pub enum CudaError {
    /// A library the operation needs could not be loaded.
    #[error("unavailable: {library} not found (searched {searched}); {hint}")]
    Unavailable { library: CudaLib, searched: String, hint: &'static str },
    /// The driver is older than the CUDA version this build calls.
    #[error(
        "unavailable: the NVIDIA driver supports CUDA {found_major}.{found_minor}, but this build of vramlab calls \
         CUDA 13.0 entry points (driver R580 or newer); update the driver"
    )]
    DriverTooOld { found_major: i32, found_minor: i32 },
    /// A driver call failed.
    #[error("{op}: CUDA driver error {name} ({message})")]
    Driver { op: &'static str, name: String, message: String },
    /// NVRTC could not compile the backend's kernels.
    #[error("NVRTC could not compile {source_name}: {log}")]
    Compile { source_name: &'static str, log: String },
    /// A cuBLAS call failed.
    #[error("{op}: cuBLAS error {status}")]
    Cublas { op: &'static str, status: String },
    /// A cuDNN call failed.
    #[error("{op}: cuDNN error {status}")]
    Cudnn { op: &'static str, status: String },
}

impl CudaError {
    /// A driver error from cudarc, with the op that made the call.
    pub fn driver(op: &'static str, e: cudarc::driver::DriverError) -> CudaError {
        let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
        let message = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        CudaError::Driver { op, name, message }
    }

    pub fn cublas(op: &'static str, e: cudarc::cublas::result::CublasError) -> CudaError {
        CudaError::Cublas { op, status: format!("{:?}", e.0) }
    }

    pub fn cudnn(op: &'static str, e: cudarc::cudnn::result::CudnnError) -> CudaError {
        CudaError::Cudnn { op, status: format!("{:?}", e.0) }
    }

    /// Whether the device ran out of memory (the allocator frees its cache and retries).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CudaError::Driver { name, .. } if name == "CUDA_ERROR_OUT_OF_MEMORY")
    }
}

/// `Result` with [`CudaError`].
pub type CudaResult<T> = std::result::Result<T, CudaError>;

/// Maps a cudarc driver result to ours, naming the op.
pub(crate) trait DriverContext<T> {
    fn during(self, op: &'static str) -> CudaResult<T>;
}

impl<T> DriverContext<T> for Result<T, cudarc::driver::DriverError> {
    fn during(self, op: &'static str) -> CudaResult<T> {
        self.map_err(|e| CudaError::driver(op, e))
    }
}
