//! Ready-made models: the guides' MLP and a small CNN.

use super::{Conv2d, Flatten, Linear, MaxPool2d, NnError, ReLU, Result, Sequential};
use vramlab_engine::device::Device;
use vramlab_engine::tensor::Conv2dOptions;

/// `Flatten, Linear(d0 → d1), ReLU, …, Linear(dₖ₋₁ → dₖ)`: the guides' MLP
/// (`mlp(&[784, 1024, 1024, 10], …)`). The leading `Flatten` lets it take images
/// `[n, 1, 28, 28]` as well as rows `[n, 784]`. Layer `i` is initialized from
/// `seed + i`.
pub fn mlp(dims: &[usize], seed: u64, device: &Device) -> Result<Sequential> {
    if dims.len() < 2 || dims.contains(&0) {
        return Err(NnError::Invalid {
            what: "mlp",
            reason: format!("need at least two non-zero sizes, got {dims:?}"),
        });
    }
    let mut model = Sequential::new().add(Flatten::new());
    for (i, w) in dims.windows(2).enumerate() {
        model = model.add(Linear::new(w[0], w[1], seed.wrapping_add(i as u64), device)?);
        if i + 2 < dims.len() {
            model = model.add(ReLU::new());
        }
    }
    Ok(model)
}

/// A small CNN's shape: `[conv 3×3 (padding 1) → ReLU → max-pool 2×2]` per entry
/// of `channels`, then `Flatten` and a linear head to `classes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnnConfig {
    pub in_channels: usize,
    pub height: usize,
    pub width: usize,
    /// Output channels of each conv block.
    pub channels: Vec<usize>,
    pub classes: usize,
}

impl CnnConfig {
    /// Two blocks (16 and 32 channels) for `[1, 28, 28]` images and 10 classes.
    pub fn mnist_like() -> CnnConfig {
        CnnConfig { in_channels: 1, height: 28, width: 28, channels: vec![16, 32], classes: 10 }
    }
}

/// The CNN of `cfg`; block `i` is initialized from `seed + i`, the head from
/// `seed + blocks`.
pub fn cnn(cfg: &CnnConfig, seed: u64, device: &Device) -> Result<Sequential> {
    let (mut c, mut h, mut w) = (cfg.in_channels, cfg.height, cfg.width);
    let mut model = Sequential::new();
    for (i, &k) in cfg.channels.iter().enumerate() {
        if h < 2 || w < 2 {
            return Err(NnError::Invalid {
                what: "cnn",
                reason: format!("{} blocks pool a {}×{} input below 1×1", cfg.channels.len(), cfg.height, cfg.width),
            });
        }
        let conv = Conv2d::new(c, k, 3, Conv2dOptions::new(1, 1), seed.wrapping_add(i as u64), device)?;
        model = model.add(conv).add(ReLU::new()).add(MaxPool2d::new(2, 2));
        (c, h, w) = (k, h / 2, w / 2);
    }
    let head = Linear::new(c * h * w, cfg.classes, seed.wrapping_add(cfg.channels.len() as u64), device)?;
    Ok(model.add(Flatten::new()).add(head))
}
