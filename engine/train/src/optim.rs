//! Optimizers over a model's parameters: SGD (with momentum) and Adam, with
//! PyTorch's semantics, updating the f32 master weights in place.
//!
//! State is created lazily at the first step that sees a gradient, under
//! [`Tag::OptimizerState`], on the parameter's device (PyTorch creates it
//! there too). It is matched to parameters by position in
//! `model.parameters_mut()`, so an optimizer belongs to one model; build it
//! after `model.to(device)`.

pub use vramlab_engine::cpu_kernels::{Adam as AdamConfig, Sgd as SgdConfig};

use super::{Module, NnError, Result};
use vramlab_engine::hooks::Tag;
use vramlab_engine::tensor::{DType, Tensor, tag_scope};

/// Updates parameters from their gradients (`torch.optim.Optimizer`).
pub trait Optimizer {
    /// `optimizer.step()`: updates every parameter that has a gradient.
    fn step(&mut self, model: &mut dyn Module) -> Result<()>;

    /// `optimizer.zero_grad(set_to_none)`.
    fn zero_grad(&mut self, model: &mut dyn Module, set_to_none: bool) -> Result<()> {
        model.zero_grad(set_to_none)
    }

    /// Bytes the allocator holds for the optimizer's state (rounded blocks).
    fn state_bytes(&self) -> u64;

    /// One line: name and hyper-parameters.
    fn describe(&self) -> String;

    /// Learning rate.
    fn lr(&self) -> f32;

    /// Sets the learning rate (for schedules).
    fn set_lr(&mut self, lr: f32);
}

/// Per-parameter state: step count and buffers.
#[derive(Debug, Default)]
struct Slot {
    step: u64,
    buffers: Vec<Tensor>,
}

/// The slot of parameter `index`, with `n` zero buffers shaped like `param`
/// created on first use.
fn slot<'a>(slots: &'a mut Vec<Slot>, index: usize, param: &Tensor, name: &str, n: usize) -> Result<&'a mut Slot> {
    if slots.len() <= index {
        slots.resize_with(index + 1, Slot::default);
    }
    let slot = &mut slots[index];
    if slot.buffers.len() < n {
        let _t = tag_scope(Tag::OptimizerState);
        while slot.buffers.len() < n {
            slot.buffers.push(Tensor::zeros(param.shape(), DType::F32, param.device())?);
        }
    }
    if let Some(b) = slot.buffers.first()
        && b.shape() != param.shape()
    {
        return Err(NnError::Invalid {
            what: "optimizer",
            reason: format!(
                "state of parameter {index} ({name}) is {:?} but the parameter is {:?}: this optimizer was built for \
                 another model",
                b.shape(),
                param.shape()
            ),
        });
    }
    Ok(slot)
}

fn state_bytes(slots: &[Slot]) -> u64 {
    slots.iter().flat_map(|s| &s.buffers).map(Tensor::allocated_bytes).sum()
}

/// `torch.optim.SGD`: momentum, dampening, weight decay, Nesterov. Plain SGD
/// (momentum 0) keeps no buffers.
#[derive(Debug)]
pub struct Sgd {
    cfg: SgdConfig,
    slots: Vec<Slot>,
}

impl Sgd {
    pub fn new(cfg: SgdConfig) -> Sgd {
        Sgd { cfg, slots: Vec::new() }
    }

    /// `SGD(lr, momentum)`.
    pub fn with_momentum(lr: f32, momentum: f32) -> Sgd {
        Sgd::new(SgdConfig { momentum, ..SgdConfig::new(lr) })
    }

    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let buffers = usize::from(self.cfg.momentum != 0.0);
        for (i, p) in model.parameters_mut().into_iter().enumerate() {
            let name = p.name().to_owned();
            let (data, grad) = p.data_and_grad();
            let Some(grad) = grad else { continue };
            let slot = slot(&mut self.slots, i, data, &name, buffers)?;
            slot.step += 1;
            data.sgd_step_(grad, slot.buffers.first_mut(), &self.cfg, slot.step)?;
        }
        Ok(())
    }

    fn state_bytes(&self) -> u64 {
        state_bytes(&self.slots)
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        let mut s = format!("SGD(lr {}", c.lr);
        if c.momentum != 0.0 {
            s += &format!(", momentum {}", c.momentum);
        }
        if c.nesterov {
            s += ", nesterov";
        }
        if c.weight_decay != 0.0 {
            s += &format!(", weight decay {}", c.weight_decay);
        }
        s + ")"
    }

    fn lr(&self) -> f32 {
        self.cfg.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.cfg.lr = lr;
    }
}

/// `torch.optim.Adam` (or `AdamW` with `decoupled_weight_decay`): two f32 moment
/// buffers per parameter.
#[derive(Debug)]
pub struct Adam {
    cfg: AdamConfig,
    slots: Vec<Slot>,
}

impl Adam {
    pub fn new(cfg: AdamConfig) -> Adam {
        Adam { cfg, slots: Vec::new() }
    }

    pub fn config(&self) -> &AdamConfig {
        &self.cfg
    }
}

impl Optimizer for Adam {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        for (i, p) in model.parameters_mut().into_iter().enumerate() {
            let name = p.name().to_owned();
            let (data, grad) = p.data_and_grad();
            let Some(grad) = grad else { continue };
            let slot = slot(&mut self.slots, i, data, &name, 2)?;
            slot.step += 1;
            let (m, v) = slot.buffers.split_at_mut(1);
            data.adam_step_(grad, &mut m[0], &mut v[0], &self.cfg, slot.step)?;
        }
        Ok(())
    }

    fn state_bytes(&self) -> u64 {
        state_bytes(&self.slots)
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        let name = if c.decoupled_weight_decay { "AdamW" } else { "Adam" };
        format!("{name}(lr {}, betas ({}, {}), eps {})", c.lr, c.beta1, c.beta2, c.eps)
    }

    fn lr(&self) -> f32 {
        self.cfg.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.cfg.lr = lr;
    }
}
