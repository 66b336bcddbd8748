//! Autocast-aware functional ops (`torch.nn.functional` / `torch.*` under
//! autocast): these run in float32 even when autocast is on, casting a
//! float16/bfloat16 input up first, as PyTorch's autocast f32 list does.
//! Outside autocast they run in the input's dtype.

use super::Result;
use super::mode::autocast_dtype;
use vramlab_engine::tensor::{DType, Tensor};

fn promoted(x: &Tensor) -> Result<Tensor> {
    if autocast_dtype().is_some() && matches!(x.dtype(), DType::F16 | DType::BF16) {
        Ok(x.to_dtype(DType::F32)?)
    } else {
        Ok(x.clone())
    }
}

/// Softmax over the last dimension (f32 under autocast).
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    Ok(promoted(x)?.softmax()?)
}

/// Log-softmax over the last dimension (f32 under autocast).
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    Ok(promoted(x)?.log_softmax()?)
}

/// Sum of all elements, a 0-d f32 tensor (always accumulated in f32 or wider).
pub fn sum(x: &Tensor) -> Result<Tensor> {
    Ok(promoted(x)?.sum()?)
}

/// Mean of all elements, a 0-d f32 tensor.
pub fn mean(x: &Tensor) -> Result<Tensor> {
    Ok(promoted(x)?.mean()?)
}

/// The fraction of rows whose largest logit is at the label: `(argmax(logits, -1)
/// == labels).float().mean()`. Reads the result on the host.
pub fn accuracy(logits: &Tensor, labels: &Tensor) -> Result<f64> {
    let (correct, total) = correct_count(logits, labels)?;
    Ok(if total == 0 { f64::NAN } else { correct as f64 / total as f64 })
}

/// (rows whose argmax equals the label, rows).
pub fn correct_count(logits: &Tensor, labels: &Tensor) -> Result<(usize, usize)> {
    let pred = logits.argmax()?;
    let (p, l) = (read_i64(&pred)?, read_i64(labels)?);
    if p.len() != l.len() {
        return Err(super::NnError::Invalid {
            what: "accuracy",
            reason: format!("{} predictions for {} labels", p.len(), l.len()),
        });
    }
    Ok((p.iter().zip(&l).filter(|(a, b)| a == b).count(), p.len()))
}

/// The values of an i64 tensor on the host (moved there first from a GPU).
fn read_i64(t: &Tensor) -> Result<Vec<i64>> {
    if t.device().is_cpu() {
        Ok(t.to_vec::<i64>()?)
    } else {
        Ok(t.to(&vramlab_engine::device::Device::cpu())?.to_vec::<i64>()?)
    }
}
