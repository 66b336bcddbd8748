//! The CUDA libraries the backend loads ([`CudaLib`]): their names for
//! messages, the files each is made of, and what to tell a user who lacks one.
//! Finding and loading them is `libs.rs`.

use std::fmt;

/// A library the backend loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaLib {
    /// `libcuda`, the driver (installed with the NVIDIA driver, not the toolkit).
    Driver,
    /// NVRTC, the run-time compiler for the backend's kernels.
    Nvrtc,
    Cublas,
    /// cuDNN is optional: convolutions fall back to im2col + cuBLAS without it.
    Cudnn,
}

impl fmt::Display for CudaLib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CudaLib::Driver => "libcuda (the NVIDIA driver)",
            CudaLib::Nvrtc => "NVRTC (libnvrtc)",
            CudaLib::Cublas => "cuBLAS (libcublas)",
            CudaLib::Cudnn => "cuDNN (libcudnn)",
        })
    }
}

impl CudaLib {
    pub const ALL: [CudaLib; 4] = [CudaLib::Driver, CudaLib::Nvrtc, CudaLib::Cublas, CudaLib::Cudnn];

    /// File-name stems to load from a folder, dependencies first; the last is the
    /// library itself.
    pub(super) fn stems(self) -> &'static [&'static str] {
        match self {
            CudaLib::Driver => &["libcuda"],
            CudaLib::Nvrtc => &["libnvrtc-builtins", "libnvrtc"],
            CudaLib::Cublas => &["libcublasLt", "libcublas"],
            CudaLib::Cudnn => &[
                "libcudnn_graph",
                "libcudnn_engines_precompiled",
                "libcudnn_engines_runtime_compiled",
                "libcudnn_heuristic",
                "libcudnn_ops",
                "libcudnn_cnn",
                "libcudnn_adv",
                "libcudnn",
            ],
        }
    }

    /// What to tell the user when it is missing.
    pub(super) fn hint(self) -> &'static str {
        match self {
            CudaLib::Driver => "install the NVIDIA driver, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH",
            _ => {
                "install the CUDA toolkit or PyTorch's CUDA wheels, or name the folder holding it in \
                 VRAMLAB_CUDA_LIBRARY_PATH"
            }
        }
    }
}
