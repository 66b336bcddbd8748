//! The backend's CUDA C kernels (`kernels.cu`), compiled with NVRTC on first use.

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use super::error::{CudaError, CudaResult};
use super::libs::CudaLib;

/// The kernels' source.
pub const SOURCE: &str = include_str!("kernels.cu");

/// Compiles [`SOURCE`] to PTX for a virtual architecture (`compute_90`).
pub fn compile(arch: &str) -> CudaResult<Ptx> {
    CudaLib::Nvrtc.require()?;
    let opts = CompileOptions { options: vec![format!("--gpu-architecture={arch}")], ..Default::default() };
    compile_ptx_with_opts(SOURCE, opts).map_err(|e| CudaError::Compile { source_name: "kernels.cu", log: describe(&e) })
}

fn describe(e: &CompileError) -> String {
    match e {
        CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
        other => format!("{other:?}"),
    }
}
