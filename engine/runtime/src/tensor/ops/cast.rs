//! Dtype conversion (`tensor.to(dtype)`).

use half::{bf16, f16};

use super::{emit_kernel, output};
use crate::cpu_kernels::{self as k, Element, KernelCall};
use crate::cuda::ops as gpu_ops;
use crate::hooks::now_ns;
use crate::tensor::{DType, Result, Tensor, TensorError, with_float};

/// Converts to `dtype` (a copy; the same tensor when the dtype already matches).
pub(in crate::tensor) fn cast(t: &Tensor, dtype: DType) -> Result<Tensor> {
    const OP: &str = "to_dtype";
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    if let Some(gpu) = t.device().cuda() {
        return gpu_ops::cast(gpu, OP, t, dtype);
    }
    let (Some(from), Some(to)) = (t.dtype().float(), dtype.float()) else {
        return cast_int(t, dtype);
    };
    let start = now_ns();
    let out = with_float!(t.dtype(), OP, |S| {
        let src = t.host_slice::<S>(OP)?;
        match dtype {
            DType::F32 => output::<f32>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::F16 => output::<f16>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::BF16 => output::<bf16>(t.shape(), t.device(), |d| k::cast(src, d))?,
            DType::I64 => unreachable!("handled by cast_int"),
        }
    });
    emit_kernel(t.device(), "cast", "cpu", start, KernelCall::Cast { len: t.numel(), from, to });
    Ok(out)
}

/// Casts to or from i64 (through f64, truncating toward zero like PyTorch).
fn cast_int(t: &Tensor, dtype: DType) -> Result<Tensor> {
    let values = t.to_f64_vec()?;
    match dtype {
        DType::I64 => Tensor::from_slice(&values.iter().map(|&v| v as i64).collect::<Vec<_>>(), t.shape(), t.device()),
        DType::F32 => Tensor::from_slice(&values.iter().map(|&v| v as f32).collect::<Vec<_>>(), t.shape(), t.device()),
        // One rounding (`Element::from_f64`), as the CUDA kernels round.
        DType::F16 => Tensor::from_slice(
            &values.iter().map(|&v| <f16 as Element>::from_f64(v)).collect::<Vec<_>>(),
            t.shape(),
            t.device(),
        ),
        DType::BF16 => Tensor::from_slice(
            &values.iter().map(|&v| <bf16 as Element>::from_f64(v)).collect::<Vec<_>>(),
            t.shape(),
            t.device(),
        ),
    }
}
