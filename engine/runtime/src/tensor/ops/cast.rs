//! Dtype conversion (`tensor.to(dtype)`).

use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::value::Tensor;

impl Tensor {
    /// `tensor.to(dtype)`: this tensor when the dtype matches, else a converted copy.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        cast(self, dtype)
    }
}

/// Converts to `dtype` (a copy; the same tensor when the dtype already matches).
fn cast(t: &Tensor, dtype: DType) -> Result<Tensor> {
    const OP: &str = "to_dtype";
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let out = t.device().backend().cast(OP, t.storage(), dtype)?;
    Ok(Tensor::from_storage(out, t.shape()))
}
