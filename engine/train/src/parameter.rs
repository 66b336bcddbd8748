//! Parameters: a tensor allocated under [`Tag::Parameter`] and its gradient
//! (`.grad`), allocated under [`Tag::Gradient`] by the first backward after a
//! `zero_grad(set_to_none = true)` and accumulated into in place afterwards.

use std::fmt;

use super::{NnError, Result};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{DType, Tensor, tag_scope};

/// A learnable tensor and its gradient (`torch.nn.Parameter` with `.grad`).
pub struct Parameter {
    name: String,
    data: Tensor,
    grad: Option<Tensor>,
}

impl fmt::Debug for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parameter")
            .field("name", &self.name)
            .field("data", &self.data)
            .field("grad", &self.grad.as_ref().map(|g| g.shape().to_vec()))
            .finish()
    }
}

impl Parameter {
    /// Wraps `data` (which should have been allocated under [`Tag::Parameter`]).
    pub fn new(name: impl Into<String>, data: Tensor) -> Parameter {
        Parameter { name: name.into(), data, grad: None }
    }

    /// A parameter from host values, allocated on `device` under [`Tag::Parameter`].
    pub fn from_values(name: impl Into<String>, values: &[f32], shape: &[usize], device: &Device) -> Result<Parameter> {
        let _t = tag_scope(Tag::Parameter);
        Ok(Parameter::new(name, Tensor::from_slice(values, shape, device)?))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn data(&self) -> &Tensor {
        &self.data
    }

    /// The accumulated gradient (`None` before the first backward or after
    /// `zero_grad(set_to_none = true)`).
    pub fn grad(&self) -> Option<&Tensor> {
        self.grad.as_ref()
    }

    pub fn shape(&self) -> &[usize] {
        self.data.shape()
    }

    pub fn numel(&self) -> usize {
        self.data.numel()
    }

    /// Replaces the values (same shape and dtype).
    pub fn set_data(&mut self, data: Tensor) -> Result<()> {
        self.check_like("set_data", &data)?;
        self.data = data;
        Ok(())
    }

    /// Replaces the gradient (same shape and dtype as the data).
    pub fn set_grad(&mut self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            self.check_like("set_grad", g)?;
        }
        self.grad = grad;
        Ok(())
    }

    /// Takes the gradient out, leaving `None`.
    pub fn take_grad(&mut self) -> Option<Tensor> {
        self.grad.take()
    }

    fn check_like(&self, op: &'static str, t: &Tensor) -> Result<()> {
        if t.shape() != self.data.shape() || t.dtype() != self.data.dtype() {
            return Err(NnError::Invalid {
                what: op,
                reason: format!(
                    "parameter {} is {:?} {}, got {:?} {}",
                    self.name,
                    self.data.shape(),
                    self.data.dtype(),
                    t.shape(),
                    t.dtype()
                ),
            });
        }
        if t.device() != self.data.device() {
            return Err(NnError::Tensor(vramlab_engine::tensor::TensorError::DeviceMismatch {
                op,
                lhs: self.data.device().id(),
                rhs: t.device().id(),
            }));
        }
        Ok(())
    }

    /// The tag a freshly computed gradient of dtype `dtype` should be allocated
    /// under: [`Tag::Gradient`] when it will become `.grad` as it is (no gradient
    /// yet, same dtype), else [`Tag::Temporary`] (it is cast or added, then freed).
    pub fn grad_tag_for(&self, dtype: DType) -> Tag {
        if self.grad.is_none() && dtype == self.data.dtype() { Tag::Gradient } else { Tag::Temporary }
    }

    /// Adds `g` into `.grad` (in place when a gradient exists; otherwise `g`,
    /// cast to the parameter's dtype under [`Tag::Gradient`] if it differs,
    /// becomes the gradient), as autograd's `AccumulateGrad` does.
    pub fn accumulate_grad(&mut self, g: Tensor) -> Result<()> {
        if g.shape() != self.data.shape() {
            return Err(NnError::Invalid {
                what: "accumulate_grad",
                reason: format!("gradient {:?} for parameter {} of shape {:?}", g.shape(), self.name, self.shape()),
            });
        }
        let dtype = self.data.dtype();
        match &mut self.grad {
            None => {
                let g = {
                    let _t = tag_scope(Tag::Gradient);
                    g.to_dtype(dtype)?
                };
                self.grad = Some(g);
            }
            Some(existing) => {
                let g = {
                    let _t = tag_scope(Tag::Temporary);
                    g.to_dtype(dtype)?
                };
                existing.add_(&g)?;
            }
        }
        Ok(())
    }

    /// `zero_grad`: frees the gradient (`set_to_none`, PyTorch's default since
    /// 2.0) or fills it with zeros in place, keeping its memory.
    pub fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        if set_to_none {
            self.grad = None;
        } else if let Some(g) = &mut self.grad {
            g.fill_(0.0)?;
        }
        Ok(())
    }

    /// Moves the values (under [`Tag::Parameter`]) and the gradient (under
    /// [`Tag::Gradient`]) to `device`; the old copies are freed.
    pub fn to(&mut self, device: &Device) -> Result<()> {
        if self.data.device() == device {
            return Ok(());
        }
        self.data = {
            let _t = tag_scope(Tag::Parameter);
            self.data.to(device)?
        };
        let grad = match &self.grad {
            Some(g) => {
                let _t = tag_scope(Tag::Gradient);
                Some(g.to(device)?)
            }
            None => None,
        };
        self.grad = grad;
        Ok(())
    }

    /// The values to update in place and the gradient, for optimizers.
    pub(crate) fn data_and_grad(&mut self) -> (&mut Tensor, Option<&Tensor>) {
        (&mut self.data, self.grad.as_ref())
    }

    /// The gradient, mutable, for in-place unscaling.
    pub(crate) fn grad_mut(&mut self) -> Option<&mut Tensor> {
        self.grad.as_mut()
    }
}
