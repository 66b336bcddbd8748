//! Dtype conversion (`tensor.to(dtype)`).

use crate::tensor::{DType, Result, Tensor};

/// Converts to `dtype` (a copy; the same tensor when the dtype already matches).
pub(in crate::tensor) fn cast(t: &Tensor, dtype: DType) -> Result<Tensor> {
    const OP: &str = "to_dtype";
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let out = t.device().backend().cast(OP, t.storage(), dtype)?;
    Ok(Tensor::from_storage(out, t.shape()))
}
