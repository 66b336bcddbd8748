//! Losses: cross-entropy and mean squared error, computed in f32 whatever the
//! input's dtype (autocast's f32 list), and their backward into a model.

use super::mode::is_grad_enabled;
use super::{Module, NnError, Result};
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{DType, Tensor, tag_scope};

/// Which loss a training loop computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossFn {
    /// Mean cross-entropy of logits `[n, classes]` against i64 labels `[n]`.
    CrossEntropy,
    /// Mean squared error against f32 targets of the prediction's shape.
    Mse,
}

impl LossFn {
    pub fn compute(self, output: &Tensor, target: &Tensor) -> Result<Loss> {
        match self {
            LossFn::CrossEntropy => cross_entropy(output, target),
            LossFn::Mse => mse(output, target),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LossFn::CrossEntropy => "cross_entropy",
            LossFn::Mse => "mse",
        }
    }
}

/// What a loss's backward needs: its input (in its own dtype) and the target.
#[derive(Debug)]
enum Saved {
    CrossEntropy { logits: Tensor, labels: Tensor },
    Mse { pred: Tensor, target: Tensor },
}

/// A computed loss: its value (a 0-d f32 tensor) and, with grad mode on, what
/// its backward needs. `backward` consumes it, like `loss.backward()` frees
/// the graph.
#[derive(Debug)]
pub struct Loss {
    value: Tensor,
    /// The gradient of the final scalar with respect to `value`: 1, or the
    /// GradScaler's scale.
    seed: f32,
    saved: Option<Saved>,
}

/// `input` in f32 for the loss kernels (a temporary cast when it is not).
fn as_f32(t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F32 {
        return Ok(t.clone());
    }
    let _t = tag_scope(Tag::Temporary);
    Ok(t.to_dtype(DType::F32)?)
}

/// `F.cross_entropy(logits, labels)` (mean over rows), in f32.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Loss> {
    let value = {
        let l32 = as_f32(logits)?;
        let _t = tag_scope(Tag::Temporary);
        l32.cross_entropy(labels)?
    };
    let saved = is_grad_enabled().then(|| Saved::CrossEntropy { logits: logits.clone(), labels: labels.clone() });
    Ok(Loss { value, seed: 1.0, saved })
}

/// `F.mse_loss(pred, target)` (mean), in f32.
pub fn mse(pred: &Tensor, target: &Tensor) -> Result<Loss> {
    let value = {
        let (p, t) = (as_f32(pred)?, as_f32(target)?);
        let _t = tag_scope(Tag::Temporary);
        p.mse(&t)?
    };
    let saved = is_grad_enabled().then(|| Saved::Mse { pred: pred.clone(), target: target.clone() });
    Ok(Loss { value, seed: 1.0, saved })
}

impl Loss {
    /// The loss as a 0-d f32 tensor (scaled, after `GradScaler::scale`).
    pub fn value(&self) -> &Tensor {
        &self.value
    }

    /// `loss.item()`.
    pub fn item(&self) -> Result<f64> {
        Ok(self.value.item()?)
    }

    /// The factor backward starts from (1 unless scaled).
    pub fn grad_seed(&self) -> f32 {
        self.seed
    }

    /// This loss multiplied by `factor`: the value and the gradients backward
    /// will produce (what `GradScaler::scale` returns).
    pub fn scaled(self, factor: f32) -> Result<Loss> {
        let value = {
            let _t = tag_scope(Tag::Temporary);
            self.value.scale(factor)?
        };
        Ok(Loss { value, seed: self.seed * factor, saved: self.saved })
    }

    /// The gradient of the loss with respect to its input (the model's output),
    /// in the input's dtype, consuming the saved tensors.
    pub fn input_grad(self) -> Result<Tensor> {
        let _t = tag_scope(Tag::Temporary);
        let saved = self.saved.ok_or_else(|| NnError::NoSavedForward { module: "loss".into() })?;
        let (grad, dtype) = match saved {
            Saved::CrossEntropy { logits, labels } => {
                let dtype = logits.dtype();
                (as_f32(&logits)?.cross_entropy_backward(&labels, self.seed)?, dtype)
            }
            Saved::Mse { pred, target } => {
                let dtype = pred.dtype();
                (as_f32(&pred)?.mse_backward(&as_f32(&target)?, self.seed)?, dtype)
            }
        };
        Ok(grad.to_dtype(dtype)?)
    }

    /// `loss.backward()` for a loss computed on `model`'s last output:
    /// accumulates every parameter's gradient and frees what the forward saved.
    pub fn backward<M: Module + ?Sized>(self, model: &mut M) -> Result<()> {
        let g = self.input_grad()?;
        model.backward(g, false)?;
        Ok(())
    }
}
