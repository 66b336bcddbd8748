//! `GradScaler`: dynamic loss scaling for float16 training, with PyTorch's
//! defaults and update rule (`torch.amp.GradScaler`).
//!
//! Per iteration: `scaler.scale(loss)?.backward(&mut model)?` multiplies the
//! gradients by the scale so small float16 gradients do not flush to zero;
//! `scaler.step(&mut opt, &mut model)?` unscales them in place (unless
//! [`unscale_`](GradScaler::unscale_) already did, e.g. for clipping), and
//! skips the optimizer step if any is infinite or NaN; `scaler.update()`
//! halves the scale after a skipped step (`backoff_factor`) and doubles it
//! after `growth_interval` good steps in a row (`growth_factor`).

use super::{Loss, Module, NnError, Optimizer, Result};

/// `GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScalerConfig {
    pub init_scale: f32,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub growth_interval: u32,
    /// A disabled scaler passes everything through (scale 1, never skips).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    /// PyTorch's defaults: 65536, 2.0, 0.5, 2000, enabled.
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// The scaler's observable state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerState {
    /// The current scale (`scaler.get_scale()`).
    pub scale: f32,
    /// Good steps in a row since the last growth or backoff (`_growth_tracker`).
    pub growth_tracker: u32,
    /// Optimizer steps skipped for inf/NaN gradients so far.
    pub steps_skipped: u64,
    /// Optimizer steps taken so far.
    pub steps_taken: u64,
    /// Times the scale grew, and backed off.
    pub growths: u64,
    pub backoffs: u64,
    /// Whether the current (or last) iteration found inf/NaN gradients.
    pub found_inf: bool,
}

/// Where the current iteration stands (PyTorch's `OptState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Ready,
    Unscaled,
    Stepped,
}

/// Dynamic loss scaling (`torch.amp.GradScaler`).
#[derive(Debug, Clone)]
pub struct GradScaler {
    cfg: GradScalerConfig,
    state: ScalerState,
    stage: Stage,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new(GradScalerConfig::default())
    }
}

impl GradScaler {
    pub fn new(cfg: GradScalerConfig) -> GradScaler {
        let scale = if cfg.enabled { cfg.init_scale } else { 1.0 };
        GradScaler {
            cfg,
            state: ScalerState {
                scale,
                growth_tracker: 0,
                steps_skipped: 0,
                steps_taken: 0,
                growths: 0,
                backoffs: 0,
                found_inf: false,
            },
            stage: Stage::Ready,
        }
    }

    pub fn config(&self) -> &GradScalerConfig {
        &self.cfg
    }

    pub fn is_enabled(&self) -> bool {
        self.cfg.enabled
    }

    /// `scaler.get_scale()`.
    pub fn get_scale(&self) -> f32 {
        self.state.scale
    }

    /// Scale, growth tracker, steps skipped and taken.
    pub fn state(&self) -> ScalerState {
        self.state
    }

    /// `scaler.scale(loss)`: the loss times the current scale (value and gradients).
    pub fn scale(&self, loss: Loss) -> Result<Loss> {
        if !self.cfg.enabled {
            return Ok(loss);
        }
        loss.scaled(self.state.scale)
    }

    /// `scaler.unscale_(optimizer)`: divides every gradient of `model` by the
    /// scale in place, recording whether any was inf/NaN. Once per iteration.
    pub fn unscale_(&mut self, model: &mut dyn Module) -> Result<bool> {
        if !self.cfg.enabled {
            return Ok(false);
        }
        match self.stage {
            Stage::Unscaled => {
                return Err(NnError::Invalid {
                    what: "GradScaler::unscale_",
                    reason: "unscale_() has already been called since the last update()".into(),
                });
            }
            Stage::Stepped => {
                return Err(NnError::Invalid {
                    what: "GradScaler::unscale_",
                    reason: "unscale_() is being called after step()".into(),
                });
            }
            Stage::Ready => {}
        }
        // In f64 then f32, as PyTorch computes `scale.double().reciprocal().float()`.
        let inv_scale = (1.0 / f64::from(self.state.scale)) as f32;
        let mut found = false;
        for p in model.parameters_mut() {
            if let Some(g) = p.grad_mut() {
                found |= g.unscale_and_check_(inv_scale)?;
            }
        }
        self.state.found_inf = found;
        self.stage = Stage::Unscaled;
        Ok(found)
    }

    /// `scaler.step(optimizer)`: unscales if needed, then steps unless a
    /// gradient was inf/NaN. Returns whether the optimizer stepped.
    pub fn step(&mut self, opt: &mut dyn Optimizer, model: &mut dyn Module) -> Result<bool> {
        if !self.cfg.enabled {
            opt.step(model)?;
            self.state.steps_taken += 1;
            return Ok(true);
        }
        if self.stage == Stage::Stepped {
            return Err(NnError::Invalid {
                what: "GradScaler::step",
                reason: "step() has already been called since the last update()".into(),
            });
        }
        if self.stage == Stage::Ready {
            self.unscale_(model)?;
        }
        self.stage = Stage::Stepped;
        if self.state.found_inf {
            self.state.steps_skipped += 1;
            Ok(false)
        } else {
            opt.step(model)?;
            self.state.steps_taken += 1;
            Ok(true)
        }
    }

    /// `scaler.update()`: backs off after inf/NaN, grows after `growth_interval`
    /// good iterations in a row (`torch._amp_update_scale_`). Does nothing if
    /// no gradients were checked since the last update (PyTorch asserts there).
    pub fn update(&mut self) {
        if !self.cfg.enabled || self.stage == Stage::Ready {
            return;
        }
        let s = &mut self.state;
        if s.found_inf {
            s.scale *= self.cfg.backoff_factor;
            s.growth_tracker = 0;
            s.backoffs += 1;
        } else {
            s.growth_tracker += 1;
            if s.growth_tracker >= self.cfg.growth_interval {
                let grown = s.scale * self.cfg.growth_factor;
                // PyTorch grows only while the result stays finite.
                if grown.is_finite() {
                    s.scale = grown;
                    s.growths += 1;
                }
                s.growth_tracker = 0;
            }
        }
        self.stage = Stage::Ready;
    }
}
