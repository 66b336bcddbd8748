//! Optimizer updates on f32 master weights, with PyTorch's semantics
//! (`torch.optim.SGD` and `torch.optim.Adam` / `AdamW`, single-tensor path).
//!
//! `step` is the 1-based number of this update for these parameters: SGD uses it to
//! start the momentum buffer from the first gradient, Adam for bias correction.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::{KernelError, Result, check_len};
use super::par::{CHUNK, PAR_THRESHOLD};

/// `torch.optim.SGD` hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub dampening: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
}

impl Sgd {
    /// Plain SGD with learning rate `lr` (no momentum, no weight decay).
    pub const fn new(lr: f32) -> Self {
        Sgd { lr, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: &str| Err(KernelError::InvalidArgument { op: "sgd_step", reason: reason.into() });
        if !(self.lr >= 0.0 && self.momentum >= 0.0 && self.weight_decay >= 0.0) {
            return bad("lr, momentum and weight_decay must be non-negative");
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return bad("Nesterov momentum requires a momentum and zero dampening");
        }
        Ok(())
    }
}

/// `torch.optim.Adam` hyper-parameters; `decoupled_weight_decay` gives `AdamW`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Adam {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub decoupled_weight_decay: bool,
}

impl Adam {
    /// PyTorch's defaults with learning rate `lr`: betas (0.9, 0.999), eps 1e-8, no weight decay.
    pub const fn new(lr: f32) -> Self {
        Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, decoupled_weight_decay: false }
    }

    fn validate(&self) -> Result<()> {
        let ok = self.lr >= 0.0
            && self.eps >= 0.0
            && (0.0..1.0).contains(&self.beta1)
            && (0.0..1.0).contains(&self.beta2)
            && self.weight_decay >= 0.0;
        if ok {
            Ok(())
        } else {
            Err(KernelError::InvalidArgument {
                op: "adam_step",
                reason: "need lr, eps, weight_decay ≥ 0 and betas in [0, 1)".into(),
            })
        }
    }
}

fn check_step(op: &'static str, step: u64) -> Result<()> {
    if step == 0 { Err(KernelError::InvalidArgument { op, reason: "step counts from 1".into() }) } else { Ok(()) }
}

/// One SGD update in place. `momentum_buf` (same length as `param`) is the momentum
/// state, ignored and allowed to be empty when `cfg.momentum == 0`; on `step == 1`
/// it is set to the first (decayed) gradient, as PyTorch does.
pub fn sgd_step(cfg: &Sgd, step: u64, param: &mut [f32], grad: &[f32], momentum_buf: &mut [f32]) -> Result<()> {
    const OP: &str = "sgd_step";
    cfg.validate()?;
    check_step(OP, step)?;
    check_len(OP, "grad", grad.len(), param.len())?;
    let Sgd { lr, momentum, dampening, weight_decay: wd, nesterov } = *cfg;
    let parallel = param.len() >= PAR_THRESHOLD;
    if momentum == 0.0 {
        let f = |(p, g): (&mut [f32], &[f32])| {
            for (p, &g) in p.iter_mut().zip(g) {
                let d = if wd != 0.0 { g + wd * *p } else { g };
                *p -= lr * d;
            }
        };
        if parallel {
            param.par_chunks_mut(CHUNK).zip(grad.par_chunks(CHUNK)).for_each(f);
        } else {
            f((param, grad));
        }
        return Ok(());
    }
    check_len(OP, "momentum_buf", momentum_buf.len(), param.len())?;
    let first = step == 1;
    let f = |((p, g), b): ((&mut [f32], &[f32]), &mut [f32])| {
        for ((p, &g), b) in p.iter_mut().zip(g).zip(b) {
            let d = if wd != 0.0 { g + wd * *p } else { g };
            *b = if first { d } else { momentum * *b + (1.0 - dampening) * d };
            let d = if nesterov { d + momentum * *b } else { *b };
            *p -= lr * d;
        }
    };
    if parallel {
        param.par_chunks_mut(CHUNK).zip(grad.par_chunks(CHUNK)).zip(momentum_buf.par_chunks_mut(CHUNK)).for_each(f);
    } else {
        f(((param, grad), momentum_buf));
    }
    Ok(())
}

/// Matching chunks of (param, grad), exp_avg and exp_avg_sq, as rayon's zips nest them.
type AdamChunk<'a> = (((&'a mut [f32], &'a [f32]), &'a mut [f32]), &'a mut [f32]);

/// One Adam (or AdamW) update in place, with bias correction:
/// `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`,
/// `p ← p − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)`.
pub fn adam_step(
    cfg: &Adam,
    step: u64,
    param: &mut [f32],
    grad: &[f32],
    exp_avg: &mut [f32],
    exp_avg_sq: &mut [f32],
) -> Result<()> {
    const OP: &str = "adam_step";
    cfg.validate()?;
    check_step(OP, step)?;
    check_len(OP, "grad", grad.len(), param.len())?;
    check_len(OP, "exp_avg", exp_avg.len(), param.len())?;
    check_len(OP, "exp_avg_sq", exp_avg_sq.len(), param.len())?;
    let Adam { lr, beta1, beta2, eps, weight_decay: wd, decoupled_weight_decay } = *cfg;
    // Bias corrections in f64, as PyTorch computes them on Python floats.
    let t = i32::try_from(step).unwrap_or(i32::MAX);
    let bc1 = 1.0 - f64::from(beta1).powi(t);
    let bc2 = 1.0 - f64::from(beta2).powi(t);
    let step_size = (f64::from(lr) / bc1) as f32;
    let bc2_sqrt = bc2.sqrt() as f32;
    let decay = if decoupled_weight_decay { 1.0 - lr * wd } else { 1.0 };
    let coupled = if decoupled_weight_decay { 0.0 } else { wd };
    let f = |(((p, g), m), v): AdamChunk<'_>| {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
            *p *= decay;
            let g = g + coupled * *p;
            *m += (1.0 - beta1) * (g - *m);
            *v = beta2 * *v + (1.0 - beta2) * g * g;
            let denom = v.sqrt() / bc2_sqrt + eps;
            *p -= step_size * *m / denom;
        }
    };
    if param.len() >= PAR_THRESHOLD {
        param
            .par_chunks_mut(CHUNK)
            .zip(grad.par_chunks(CHUNK))
            .zip(exp_avg.par_chunks_mut(CHUNK))
            .zip(exp_avg_sq.par_chunks_mut(CHUNK))
            .for_each(f);
    } else {
        f((((param, grad), exp_avg), exp_avg_sq));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_momentum_matches_pytorch_recurrence() {
        let cfg = Sgd { lr: 0.1, momentum: 0.9, dampening: 0.0, weight_decay: 0.0, nesterov: false };
        let mut p = [1.0f32];
        let mut buf = [123.0f32]; // garbage: overwritten on step 1
        sgd_step(&cfg, 1, &mut p, &[1.0], &mut buf).unwrap();
        assert_eq!((p[0], buf[0]), (0.9, 1.0));
        sgd_step(&cfg, 2, &mut p, &[1.0], &mut buf).unwrap();
        assert!((buf[0] - 1.9).abs() < 1e-7 && (p[0] - 0.71).abs() < 1e-7);
        assert!(sgd_step(&cfg, 0, &mut p, &[1.0], &mut buf).is_err());
        assert!(sgd_step(&Sgd { nesterov: true, ..Sgd::new(0.1) }, 1, &mut p, &[1.0], &mut []).is_err());
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        // After one step with bias correction, |Δp| = lr · |g| / (|g| + ε) ≈ lr.
        let mut p = [1.0f32, -1.0];
        let (mut m, mut v) = ([0.0f32; 2], [0.0f32; 2]);
        adam_step(&Adam::new(0.01), 1, &mut p, &[0.5, -3.0], &mut m, &mut v).unwrap();
        assert!((p[0] - 0.99).abs() < 1e-6 && (p[1] + 0.99).abs() < 1e-6, "{p:?}");
    }
}
