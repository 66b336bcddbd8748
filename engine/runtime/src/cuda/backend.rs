//! One CUDA device's backend ([`CudaBackend`]): the opened GPU ([`Gpu`]: context,
//! streams, raw memory, compiled kernels, kernel timing) and its library
//! handles, cuBLAS and cuDNN, each made on first use.
//!
//! The handles' modules ([`super::blas`], [`super::conv`]'s cuDNN wrapper) work
//! on the [`Gpu`] alone; the ops that need a handle ([`super::matmul`],
//! [`super::conv`]) take the backend.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use super::blas::Blas;
use super::conv::cudnn::Dnn;
use super::error::CudaResult;
pub use super::gpu::{CudaInfo, Gpu, probe};
use crate::hooks::Hooks;

/// A GPU with its cuBLAS and cuDNN handles. Dereferences to its [`Gpu`].
pub struct CudaBackend {
    gpu: Gpu,
    /// The cuBLAS and cuDNN handles, each made on first use.
    blas: OnceLock<CudaResult<Blas>>,
    dnn: OnceLock<CudaResult<Dnn>>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("info", self.gpu.info()).finish_non_exhaustive()
    }
}

impl Deref for CudaBackend {
    type Target = Gpu;

    #[inline]
    fn deref(&self) -> &Gpu {
        &self.gpu
    }
}

impl CudaBackend {
    /// Opens device `ordinal` (its primary context, as the CUDA runtime does).
    pub fn new(ordinal: u32, hooks: Arc<Hooks>, event_device: u32) -> CudaResult<Arc<CudaBackend>> {
        let gpu = Gpu::open(ordinal, hooks, event_device)?;
        Ok(Arc::new(CudaBackend { gpu, blas: OnceLock::new(), dnn: OnceLock::new() }))
    }

    /// The backend's cuBLAS handle, made on first use.
    pub(crate) fn blas(&self) -> CudaResult<&Blas> {
        self.blas.get_or_init(|| Blas::new(&self.gpu)).as_ref().map_err(Clone::clone)
    }

    /// The cuBLAS handle if a product has made it already.
    pub(crate) fn blas_if_made(&self) -> Option<&Blas> {
        match self.blas.get() {
            Some(Ok(blas)) => Some(blas),
            _ => None,
        }
    }

    /// The backend's cuDNN handle, made on first use, or why there is none.
    pub(crate) fn dnn_handle(&self) -> &CudaResult<Dnn> {
        self.dnn.get_or_init(|| Dnn::new(&self.gpu))
    }

    /// The backend's cuDNN handle, made on first use; `None` without cuDNN.
    pub(crate) fn dnn(&self) -> Option<&Dnn> {
        self.dnn_handle().as_ref().ok()
    }
}
