//! Training on a real GPU against the same training on the CPU backend: an MLP
//! to the same losses, and a CNN under autocast (with a `GradScaler` in
//! float16) staying within the band `training.rs` allows against float32.
//!
//! Without a CUDA device each test prints `skipped: no CUDA device (<reason>)`
//! and passes; `cargo xtask gpu-check` runs them on a GPU. The op-by-op GPU
//! checks are the runtime's `tests/cuda.rs`.

#[path = "../../runtime/tests/gpu/mod.rs"]
mod gpu;

use std::collections::HashMap;

use gpu::{Tf32, TunerMode, cpu, gpu, settings};
use vramlab_engine::autotune::TuneMode;
use vramlab_engine::device::Device;
use vramlab_engine::tensor::DType;
use vramlab_train::{self as nn, DataLoader, Dataset, GradScaler, LoaderConfig, LossFn, Sgd as SgdOpt, Trainer};

#[test]
fn an_mlp_trains_to_the_same_losses_on_the_gpu() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let _tf32 = Tf32::set(false, false);
    let _mode = TunerMode::set(TuneMode::Off);
    let (train, _) = Dataset::classification(1024, 16, 4, 1.5, 7).unwrap().split(768);
    let loader = DataLoader::new(&train, LoaderConfig { seed: 3, ..LoaderConfig::new(32) }).unwrap();
    let mut losses = HashMap::new();
    for device in [cpu(), gpu.clone()] {
        let mut model = nn::mlp(&[16, 64, 64, 4], 1, &device).unwrap();
        let mut opt = SgdOpt::with_momentum(0.05, 0.9);
        let mut trainer = Trainer::new(LossFn::CrossEntropy);
        let report = trainer.epoch(&mut model, &mut opt, &loader, 0, &device).unwrap();
        losses.insert(device.is_cpu(), report.steps.iter().map(|s| s.loss).collect::<Vec<_>>());
    }
    let (c, g) = (&losses[&true], &losses[&false]);
    assert_eq!(c.len(), g.len());
    for (i, (lc, lg)) in c.iter().zip(g).enumerate() {
        assert!((lc - lg).abs() <= 1e-3 * lc.abs().max(1.0), "step {i}: GPU loss {lg} vs CPU {lc}");
    }
}

/// `training.rs`'s band for autocast against f32: `ABS + REL·loss` per step.
const AMP_TOLERANCE: [(DType, f64, f64); 2] = [(DType::BF16, 0.02, 0.05), (DType::F16, 0.005, 0.02)];

#[test]
fn a_cnn_under_autocast_with_a_grad_scaler_stays_near_f32_on_the_gpu() {
    let Some(gpu) = gpu() else { return };
    let _lock = settings();
    let _tf32 = Tf32::set(false, false);
    let _mode = TunerMode::set(TuneMode::Off);
    let data = Dataset::images(256, [1, 12, 12], 4, 0.3, 21).unwrap();
    let cfg = nn::CnnConfig { in_channels: 1, height: 12, width: 12, channels: vec![4, 8], classes: 4 };
    let curve = |amp: Option<DType>, d: &Device| -> Vec<f64> {
        let mut model = nn::cnn(&cfg, 6, d).unwrap();
        let mut opt = SgdOpt::with_momentum(0.05, 0.9);
        let loader = DataLoader::new(&data, LoaderConfig { seed: 2, ..LoaderConfig::new(16) }).unwrap();
        let mut trainer = Trainer::new(LossFn::CrossEntropy).with_autocast(amp);
        if amp == Some(DType::F16) {
            trainer = trainer.with_scaler(GradScaler::default());
        }
        loader.epoch(0, d).map(|b| trainer.step(&mut model, &mut opt, &b.unwrap()).unwrap().loss).collect()
    };
    let on_cpu = curve(None, &cpu());
    let reference = curve(None, &gpu);
    for (i, (g, c)) in reference.iter().zip(&on_cpu).enumerate() {
        assert!((g - c).abs() <= 1e-3 * c.abs().max(1.0), "f32 step {i}: GPU loss {g} vs CPU {c}");
    }
    for (dtype, abs, rel) in AMP_TOLERANCE {
        let c = curve(Some(dtype), &gpu);
        let max_abs = c.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
        println!("CNN on the GPU under autocast {dtype}: max |loss − f32 loss| over {} steps = {max_abs:.4}", c.len());
        assert_eq!(c.len(), reference.len());
        for (a, b) in c.iter().zip(&reference) {
            assert!((a - b).abs() <= abs + rel * b.abs(), "{dtype}: {c:?} vs {reference:?}");
        }
    }
}
