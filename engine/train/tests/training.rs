//! Training on the engine (issue 4): accuracy, mixed precision against f32,
//! the GradScaler's state machine, memory through the allocator (no_grad,
//! zero_grad(set_to_none), autocast), tags, data loading, and finite-difference
//! gradient checks of every module and loss.
//!
//! Small models and data sets throughout, so the file runs in well under a
//! minute in a debug build on 2 cores; the release-size MLP is the
//! `train_step` bench's.

use std::collections::HashMap;
use std::sync::Arc;

use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::alloc::consts::MIB;
use vramlab_engine::device::{Device, DeviceId, DeviceKind};
use vramlab_engine::hooks::{AllocatorAction, Event, EventLog, Hooks, Tag};
use vramlab_engine::tensor::{Conv2dOptions, DType, Tensor, TensorError, tag_scope};
use vramlab_train::{
    self as nn, Adam, AdamConfig, CnnConfig, Conv2d, DataLoader, Dataset, Flatten, GELU, GradScaler, GradScalerConfig,
    Linear, LoaderConfig, LossFn, MaxPool2d, Module, NnError, Optimizer, ReLU, Sequential, Sgd, SgdConfig, StepRecord,
    Trainer,
};

/// A private device (own allocator and hooks), so tests do not see each other.
fn device(index: u32) -> (Device, Arc<Hooks>) {
    let hooks = Hooks::new();
    let id = DeviceId { kind: DeviceKind::Cpu, index };
    (Device::host(id, 512 * MIB, AllocatorConfig::default(), &hooks).unwrap(), hooks)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

fn input(values: &[f32], shape: &[usize], d: &Device) -> Tensor {
    let _t = tag_scope(Tag::Input);
    Tensor::from_slice(values, shape, d).unwrap()
}

// ---------------------------------------------------------------------------
// Learning
// ---------------------------------------------------------------------------

/// Blobs in 16 dimensions, 4 classes, centres ~ N(0, 1.5²) per coordinate
/// (separable); 768 training and 256 held-out samples.
fn blobs(seed: u64) -> (Dataset, Dataset) {
    Dataset::classification(1024, 16, 4, 1.5, seed).unwrap().split(768)
}

#[test]
fn mlp_reaches_95_percent_on_a_separable_set() {
    let (d, _) = device(40);
    let (train, test) = blobs(7);
    let mut model = nn::mlp(&[16, 64, 64, 4], 1, &d).unwrap();
    let mut opt = Sgd::with_momentum(0.05, 0.9);
    let loader = DataLoader::new(&train, LoaderConfig { seed: 3, ..LoaderConfig::new(32) }).unwrap();
    let eval_loader = DataLoader::new(&test, LoaderConfig { shuffle: false, ..LoaderConfig::new(128) }).unwrap();
    let mut trainer = Trainer::new(LossFn::CrossEntropy);
    let mut losses = Vec::new();
    for epoch in 0..4 {
        let report = trainer.epoch(&mut model, &mut opt, &loader, epoch, &d).unwrap();
        assert_eq!(report.steps.len(), 24);
        losses.push(report.mean_loss());
    }
    let eval = trainer.evaluate(&mut model, &eval_loader, &d).unwrap();
    let acc = eval.accuracy.unwrap();
    println!("blobs MLP: epoch losses {losses:.4?}, held-out loss {:.4}, accuracy {:.2}%", eval.loss, acc * 100.0);
    assert_eq!(eval.samples, 256);
    assert!(acc > 0.95, "held-out accuracy {acc}");
    assert!(losses[3] < losses[0] * 0.5, "{losses:?}");
}

#[test]
fn cnn_and_adam_learn_images_and_mse_learns_regression() {
    let (d, _) = device(41);
    // Images 1×12×12, 3 classes: a CNN with Adam.
    let data = Dataset::images(192, [1, 12, 12], 3, 0.3, 5).unwrap();
    let cfg = CnnConfig { in_channels: 1, height: 12, width: 12, channels: vec![4, 8], classes: 3 };
    let mut model = nn::cnn(&cfg, 2, &d).unwrap();
    assert_eq!(model.len(), 8, "{model:?}");
    let mut opt = Adam::new(AdamConfig::new(0.01));
    let loader = DataLoader::new(&data, LoaderConfig::new(32)).unwrap();
    let mut trainer = Trainer::new(LossFn::CrossEntropy);
    let first = trainer.epoch(&mut model, &mut opt, &loader, 0, &d).unwrap();
    let mut last = first.clone();
    for epoch in 1..4 {
        last = trainer.epoch(&mut model, &mut opt, &loader, epoch, &d).unwrap();
    }
    println!(
        "images CNN: loss {:.4} -> {:.4}, accuracy {:.2} -> {:.2}",
        first.mean_loss(),
        last.mean_loss(),
        first.accuracy().unwrap(),
        last.accuracy().unwrap()
    );
    assert!(last.mean_loss() < first.mean_loss() * 0.7);
    assert!(last.accuracy().unwrap() > 0.8);

    // Regression with MSE: a linear target.
    let data = Dataset::regression(256, 8, 2, 0.01, 9).unwrap();
    let mut model = Sequential::new()
        .add(Linear::new(8, 32, 1, &d).unwrap())
        .add(GELU::new())
        .add(Linear::new(32, 2, 2, &d).unwrap());
    let mut opt = Sgd::with_momentum(0.05, 0.9);
    let loader = DataLoader::new(&data, LoaderConfig::new(32)).unwrap();
    let mut trainer = Trainer::new(LossFn::Mse);
    let first = trainer.epoch(&mut model, &mut opt, &loader, 0, &d).unwrap();
    let mut last = first.clone();
    for epoch in 1..6 {
        last = trainer.epoch(&mut model, &mut opt, &loader, epoch, &d).unwrap();
    }
    println!("regression MLP (GELU): loss {:.4} -> {:.4}", first.mean_loss(), last.mean_loss());
    assert!(first.steps.iter().all(|s| s.correct.is_none()));
    assert!(last.mean_loss() < first.mean_loss() * 0.1, "{} -> {}", first.mean_loss(), last.mean_loss());
}

// ---------------------------------------------------------------------------
// Mixed precision
// ---------------------------------------------------------------------------

/// Per-step training losses of the blobs MLP for `steps` steps.
fn loss_curve(d: &Device, amp: Option<DType>, scaler: Option<GradScaler>, steps: usize) -> (Vec<f64>, Vec<StepRecord>) {
    let (train, _) = blobs(11);
    let mut model = nn::mlp(&[16, 64, 64, 4], 4, d).unwrap();
    let mut opt = Sgd::with_momentum(0.05, 0.9);
    let loader = DataLoader::new(&train, LoaderConfig { seed: 1, ..LoaderConfig::new(32) }).unwrap();
    let mut trainer = Trainer::new(LossFn::CrossEntropy).with_autocast(amp);
    trainer.scaler = scaler;
    let mut records = Vec::new();
    let mut epoch = 0;
    while records.len() < steps {
        for batch in loader.epoch(epoch, d) {
            if records.len() == steps {
                break;
            }
            records.push(trainer.step(&mut model, &mut opt, &batch.unwrap()).unwrap());
        }
        epoch += 1;
    }
    (records.iter().map(|r| r.loss).collect(), records)
}

/// The stated tolerance: over 48 steps of SGD on the blobs MLP, every step's
/// loss under autocast is within `ABS + REL·loss` of the f32 loss at the same
/// step (same seed, same batches). bf16 keeps 8 significand bits, f16 11, so
/// bf16 gets the wider band.
const AMP_TOLERANCE: [(DType, f64, f64); 2] = [(DType::BF16, 0.02, 0.05), (DType::F16, 0.005, 0.02)];

#[test]
fn bf16_and_f16_loss_curves_stay_near_f32() {
    let (d, _) = device(42);
    let steps = 48;
    let (f32_curve, _) = loss_curve(&d, None, None, steps);
    for (dtype, abs, rel) in AMP_TOLERANCE {
        let scaler = (dtype == DType::F16).then(GradScaler::default);
        let (curve, records) = loss_curve(&d, Some(dtype), scaler, steps);
        let worst =
            curve.iter().zip(&f32_curve).map(|(a, b)| (a - b).abs() / (abs + rel * b.abs())).fold(0.0f64, f64::max);
        let max_abs = curve.iter().zip(&f32_curve).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
        let skipped = records.iter().filter(|r| !r.stepped).count();
        println!(
            "{dtype}: max |loss − f32 loss| = {max_abs:.4} ({:.0}% of the band {abs} + {rel}·loss); first/last loss \
             {:.4}/{:.4} vs f32 {:.4}/{:.4}; steps skipped {skipped}, final scale {:?}",
            worst * 100.0,
            curve[0],
            curve[steps - 1],
            f32_curve[0],
            f32_curve[steps - 1],
            records.last().unwrap().scale,
        );
        assert!(worst <= 1.0, "{dtype} left the tolerance band: {curve:?} vs {f32_curve:?}");
        assert!(curve[steps - 1] < curve[0] * 0.5, "{dtype} learns");
    }
}

#[test]
fn cnn_loss_curves_under_autocast_stay_near_f32() {
    // The conv path in half precision (conv forward, backward-data and
    // backward-weight in the autocast dtype), 16 steps of a small CNN.
    let (d, _) = device(54);
    let data = Dataset::images(256, [1, 12, 12], 4, 0.3, 21).unwrap();
    let cfg = CnnConfig { in_channels: 1, height: 12, width: 12, channels: vec![4, 8], classes: 4 };
    let curve = |amp: Option<DType>| -> Vec<f64> {
        let mut model = nn::cnn(&cfg, 6, &d).unwrap();
        let mut opt = Sgd::with_momentum(0.05, 0.9);
        let loader = DataLoader::new(&data, LoaderConfig { seed: 2, ..LoaderConfig::new(16) }).unwrap();
        let mut trainer = Trainer::new(LossFn::CrossEntropy).with_autocast(amp);
        if amp == Some(DType::F16) {
            trainer = trainer.with_scaler(GradScaler::default());
        }
        loader.epoch(0, &d).map(|b| trainer.step(&mut model, &mut opt, &b.unwrap()).unwrap().loss).collect()
    };
    let reference = curve(None);
    for (dtype, abs, rel) in AMP_TOLERANCE {
        let c = curve(Some(dtype));
        let max_abs = c.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f64, f64::max);
        println!("CNN {dtype}: max |loss − f32 loss| over {} steps = {max_abs:.4}", c.len());
        for (a, b) in c.iter().zip(&reference) {
            assert!((a - b).abs() <= abs + rel * b.abs(), "{dtype}: {c:?} vs {reference:?}");
        }
    }
}

#[test]
fn grad_scaler_skips_on_inf_backs_off_then_grows() {
    let (d, _) = device(43);
    let cfg = GradScalerConfig { growth_interval: 3, ..GradScalerConfig::default() };
    assert_eq!(
        (GradScalerConfig::default().init_scale, GradScalerConfig::default().growth_factor),
        (65536.0, 2.0),
        "PyTorch's defaults"
    );
    assert_eq!(GradScalerConfig::default().backoff_factor, 0.5);
    assert_eq!(GradScalerConfig::default().growth_interval, 2000);
    let mut scaler = GradScaler::new(cfg);
    let mut model = nn::mlp(&[4, 8, 2], 1, &d).unwrap();
    let mut opt = Sgd::with_momentum(0.1, 0.9);
    let x = input(&[0.5, -1.0, 2.0, 0.25, 1.0, 1.5, -0.5, 0.0], &[2, 4], &d);
    let y = Tensor::from_slice(&[1i64, 0], &[2], &d).unwrap();
    let params = |m: &Sequential| -> Vec<Vec<f64>> { m.parameters().iter().map(|p| values(p.data())).collect() };

    // One iteration; `poison` puts an inf or NaN into the first gradient after backward.
    let iteration = |model: &mut Sequential, opt: &mut Sgd, scaler: &mut GradScaler, poison: Option<f32>| -> bool {
        opt.zero_grad(model, true).unwrap();
        let out = model.forward(&x).unwrap();
        let loss = nn::cross_entropy(&out, &y).unwrap();
        let scaled = scaler.scale(loss).unwrap();
        assert_eq!(scaled.grad_seed(), scaler.get_scale());
        scaled.backward(model).unwrap();
        if let Some(bad) = poison {
            let p = &mut model.parameters_mut()[0];
            let mut g = p.grad().unwrap().to_vec::<f32>().unwrap();
            g[0] = bad;
            let _t = tag_scope(Tag::Gradient);
            p.set_grad(Some(Tensor::from_slice(&g, p.shape(), &d).unwrap())).unwrap();
        }
        let stepped = scaler.step(opt, model).unwrap();
        scaler.update();
        stepped
    };

    assert_eq!(scaler.get_scale(), 65536.0);
    assert!(iteration(&mut model, &mut opt, &mut scaler, None));
    assert_eq!(scaler.state().growth_tracker, 1);
    for (k, poison) in [f32::INFINITY, f32::NAN].into_iter().enumerate() {
        let before = params(&model);
        let scale = scaler.get_scale();
        assert!(!iteration(&mut model, &mut opt, &mut scaler, Some(poison)), "a non-finite gradient skips the step");
        assert_eq!(params(&model), before, "parameters untouched by a skipped step");
        let s = scaler.state();
        assert_eq!(s.scale, scale * 0.5, "backoff");
        assert_eq!((s.steps_skipped, s.growth_tracker, s.backoffs, s.found_inf), (k as u64 + 1, 0, k as u64 + 1, true));
    }
    assert_eq!(scaler.get_scale(), 16384.0);
    // Good steps: the scale grows after growth_interval (3) of them in a row.
    let before = params(&model);
    assert!(iteration(&mut model, &mut opt, &mut scaler, None));
    assert_ne!(params(&model), before, "a good step updates");
    assert!(iteration(&mut model, &mut opt, &mut scaler, None));
    assert_eq!(scaler.get_scale(), 16384.0);
    assert!(iteration(&mut model, &mut opt, &mut scaler, None));
    let s = scaler.state();
    assert_eq!((s.scale, s.growth_tracker, s.growths, s.steps_taken, s.steps_skipped), (32768.0, 0, 1, 4, 2));
    // Unscaled gradients are the true ones: compare with an unscaled backward.
    opt.zero_grad(&mut model, true).unwrap();
    let loss = nn::cross_entropy(&model.forward(&x).unwrap(), &y).unwrap();
    loss.backward(&mut model).unwrap();
    let plain: Vec<Vec<f64>> = model.parameters().iter().map(|p| values(p.grad().unwrap())).collect();
    opt.zero_grad(&mut model, true).unwrap();
    let loss = nn::cross_entropy(&model.forward(&x).unwrap(), &y).unwrap();
    scaler.scale(loss).unwrap().backward(&mut model).unwrap();
    assert!(!scaler.unscale_(&mut model).unwrap());
    assert!(scaler.unscale_(&mut model).is_err(), "unscale_ twice in one iteration is an error");
    for (p, want) in model.parameters().iter().zip(&plain) {
        for (g, w) in values(p.grad().unwrap()).iter().zip(want) {
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1e-3), "{g} vs {w}");
        }
    }
    // A real overflow: float16 autocast with a scale of 2⁴⁰ — the loss gradient
    // cast to float16 is inf, so every step is skipped and the scale halves.
    let mut huge = GradScaler::new(GradScalerConfig { init_scale: 2f32.powi(40), ..GradScalerConfig::default() });
    let before = params(&model);
    for k in 1..=3 {
        opt.zero_grad(&mut model, true).unwrap();
        let loss = {
            let _ac = nn::autocast(DType::F16).unwrap();
            let out = model.forward(&x).unwrap();
            assert_eq!(out.dtype(), DType::F16);
            nn::cross_entropy(&out, &y).unwrap()
        };
        huge.scale(loss).unwrap().backward(&mut model).unwrap();
        assert!(model.parameters().iter().all(|p| p.grad().unwrap().dtype() == DType::F32), "f32 master gradients");
        assert!(!huge.step(&mut opt, &mut model).unwrap());
        huge.update();
        assert_eq!(huge.get_scale(), 2f32.powi(40 - k));
    }
    assert_eq!(huge.state().steps_skipped, 3);
    assert_eq!(params(&model), before);
}

// ---------------------------------------------------------------------------
// Memory through the allocator
// ---------------------------------------------------------------------------

/// MLP 64→256→256→256→10 and a batch of 512: activations (512 KiB per hidden
/// layer) dominate the parameters.
fn memory_setup(d: &Device) -> (Sequential, Tensor, Tensor) {
    let model = nn::mlp(&[64, 256, 256, 256, 10], 3, d).unwrap();
    let x = {
        let _t = tag_scope(Tag::Input);
        Tensor::randn(&[512, 64], DType::F32, 1, d).unwrap()
    };
    let labels: Vec<i64> = (0..512).map(|i| i % 10).collect();
    let y = {
        let _t = tag_scope(Tag::Input);
        Tensor::from_slice(&labels, &[512], d).unwrap()
    };
    (model, x, y)
}

#[test]
fn no_grad_evaluation_peaks_below_training_and_frees_as_it_goes() {
    let (d, _) = device(44);
    let (mut model, x, y) = memory_setup(&d);
    let act = 512 * 256 * 4; // one hidden activation, bytes (a multiple of 512)
    let base = d.memory_allocated();

    // Training forward: the saved activations stay allocated until backward.
    d.allocator().reset_peak_stats();
    let out = model.forward(&x).unwrap();
    let loss = nn::cross_entropy(&out, &y).unwrap();
    let held = d.memory_allocated() - base;
    // Three ReLU outputs (each also the next Linear's saved input) and the logits.
    assert!(held >= 3 * act, "training forward holds {held} bytes");
    assert_eq!(model.saved_tensors().len(), 3 + 3 + 1, "3 Linear inputs beyond x, 3 ReLU outputs, x");
    loss.backward(&mut model).unwrap();
    drop(out);
    let train_peak = d.memory_stats().max_memory_allocated() - base;
    assert!(model.saved_tensors().is_empty(), "backward consumed what the forward saved");
    let grads = model.gradient_bytes();
    assert_eq!(d.memory_allocated() - base, grads, "after backward only the gradients remain");
    model.zero_grad(true).unwrap();
    assert_eq!(d.memory_allocated(), base);

    // Evaluation forward under no_grad: each activation is freed once consumed.
    d.allocator().reset_peak_stats();
    let eval_loss = {
        let _ng = nn::no_grad();
        let out = model.forward(&x).unwrap();
        assert!(model.saved_tensors().is_empty(), "no_grad saves nothing");
        nn::cross_entropy(&out, &y).unwrap().item().unwrap()
    };
    let eval_peak = d.memory_stats().max_memory_allocated() - base;
    assert_eq!(d.memory_allocated(), base);
    println!(
        "peak above parameters+batch: training step {} KiB, no_grad evaluation {} KiB (one hidden activation is {} \
         KiB); eval loss {eval_loss:.4}",
        train_peak / 1024,
        eval_peak / 1024,
        act / 1024
    );
    assert!(eval_peak < train_peak, "eval {eval_peak} vs train {train_peak}");
    // At most one layer's input and output at once (plus small tensors).
    assert!(eval_peak <= 2 * act + 64 * 1024, "eval peak {eval_peak}");
    assert!(train_peak >= 3 * act + grads, "train peak {train_peak}");

    // Backward after a no_grad forward is an error, not a silent no-op.
    let out = {
        let _ng = nn::no_grad();
        model.forward(&x).unwrap()
    };
    let err = {
        let _ng = nn::no_grad();
        nn::cross_entropy(&out, &y).unwrap().backward(&mut model).unwrap_err()
    };
    assert!(matches!(err, NnError::NoSavedForward { .. }), "{err}");
    assert!(err.to_string().contains("no_grad"), "{err}");
}

#[test]
fn zero_grad_set_to_none_frees_exactly_the_gradients() {
    let (d, _) = device(45);
    let (mut model, x, y) = memory_setup(&d);
    let backward = |model: &mut Sequential| {
        let out = model.forward(&x).unwrap();
        nn::cross_entropy(&out, &y).unwrap().backward(model).unwrap();
    };
    backward(&mut model);
    let grads = model.gradient_bytes();
    let param_bytes = model.parameter_bytes();
    assert!(grads > 0 && grads == param_bytes, "one f32 gradient per parameter: {grads} vs {param_bytes}");
    let before = d.memory_allocated();
    let reserved = d.memory_reserved();
    model.zero_grad(true).unwrap();
    let after = d.memory_allocated();
    println!("zero_grad(set_to_none=True): allocated {before} -> {after} bytes (gradients {grads} bytes)");
    assert_eq!(before - after, grads);
    assert_eq!(d.memory_reserved(), reserved, "freed memory stays cached in the allocator");
    assert!(model.parameters().iter().all(|p| p.grad().is_none()));

    // set_to_none = false keeps the memory and zero-fills; the next backward
    // accumulates in place (no new gradient allocation).
    backward(&mut model);
    let with_grads = d.memory_allocated();
    model.zero_grad(false).unwrap();
    assert_eq!(d.memory_allocated(), with_grads);
    assert!(model.parameters().iter().all(|p| values(p.grad().unwrap()).iter().all(|&v| v == 0.0)));
    backward(&mut model);
    assert_eq!(d.memory_allocated(), with_grads);
    // Accumulation: two backwards without zeroing give twice the gradient.
    let once: Vec<Vec<f64>> = model.parameters().iter().map(|p| values(p.grad().unwrap())).collect();
    backward(&mut model);
    for (p, g1) in model.parameters().iter().zip(&once) {
        for (g2, g1) in values(p.grad().unwrap()).iter().zip(g1) {
            assert!((g2 - 2.0 * g1).abs() <= 1e-5 * g1.abs().max(1e-3));
        }
    }
}

/// Bytes allocated under `tag` (rounded blocks) by `f`, from allocator events.
fn tagged_bytes(hooks: &Arc<Hooks>, tag: Tag, f: impl FnOnce()) -> u64 {
    let log = EventLog::new();
    let id = hooks.subscribe(log.clone());
    f();
    hooks.unsubscribe(id);
    log.allocator_events()
        .iter()
        .filter(|e| e.action == AllocatorAction::Alloc && e.tag == Some(tag))
        .map(|e| e.rounded_bytes)
        .sum()
}

#[test]
fn autocast_lowers_activation_bytes() {
    let (d, hooks) = device(46);
    let (mut model, x, y) = memory_setup(&d);
    let mut forward = |amp: Option<DType>| {
        tagged_bytes(&hooks, Tag::Activation, || {
            let _ac = nn::set_autocast(amp).unwrap();
            let out = model.forward(&x).unwrap();
            let loss = nn::cross_entropy(&out, &y).unwrap();
            loss.backward(&mut model).unwrap();
        })
    };
    let f32_bytes = forward(None);
    let bf16_bytes = forward(Some(DType::BF16));
    let f16_bytes = forward(Some(DType::F16));
    println!("MLP activation bytes per training step: f32 {f32_bytes}, bf16 {bf16_bytes}, f16 {f16_bytes}");
    for b in [bf16_bytes, f16_bytes] {
        assert!(b * 10 <= f32_bytes * 6, "{b} vs {f32_bytes}");
    }

    // A CNN: conv inputs and ReLU outputs halve; the pooling indices (i64) do not.
    let cfg = CnnConfig { in_channels: 2, height: 16, width: 16, channels: vec![8, 8], classes: 4 };
    let mut cnn = nn::cnn(&cfg, 1, &d).unwrap();
    let x = {
        let _t = tag_scope(Tag::Input);
        Tensor::randn(&[16, 2, 16, 16], DType::F32, 2, &d).unwrap()
    };
    let y = Tensor::from_slice(&(0..16).map(|i| i % 4).collect::<Vec<i64>>(), &[16], &d).unwrap();
    let mut forward = |amp: Option<DType>| {
        tagged_bytes(&hooks, Tag::Activation, || {
            let _ac = nn::set_autocast(amp).unwrap();
            let out = cnn.forward(&x).unwrap();
            nn::cross_entropy(&out, &y).unwrap().backward(&mut cnn).unwrap();
        })
    };
    let (f32_bytes, bf16_bytes) = (forward(None), forward(Some(DType::BF16)));
    println!("CNN activation bytes per training step: f32 {f32_bytes}, bf16 {bf16_bytes}");
    assert!(bf16_bytes * 4 <= f32_bytes * 3, "{bf16_bytes} vs {f32_bytes}");
}

/// Live bytes per tag from allocator events (allocs minus frees, by address).
fn live_by_tag(log: &EventLog) -> HashMap<Tag, u64> {
    let mut live: HashMap<u64, (Tag, u64)> = HashMap::new();
    for e in log.allocator_events() {
        match e.action {
            AllocatorAction::Alloc => {
                live.insert(e.addr, (e.tag.unwrap_or(Tag::Temporary), e.rounded_bytes));
            }
            AllocatorAction::FreeRequested => {
                live.remove(&e.addr);
            }
            _ => {}
        }
    }
    let mut by_tag = HashMap::new();
    for (tag, bytes) in live.into_values() {
        *by_tag.entry(tag).or_insert(0) += bytes;
    }
    by_tag
}

#[test]
fn every_allocation_is_tagged_for_what_it_is() {
    let (d, hooks) = device(47);
    let log = EventLog::new();
    hooks.subscribe(log.clone());
    let data = Dataset::classification(64, 8, 3, 1.0, 1).unwrap();
    let mut model = nn::mlp(&[8, 32, 3], 1, &d).unwrap();
    let mut opt = Adam::new(AdamConfig::new(0.01));
    let loader = DataLoader::new(&data, LoaderConfig { pin_memory: true, ..LoaderConfig::new(64) }).unwrap();
    let batch = loader.epoch(0, &d).next().unwrap().unwrap();
    assert_eq!((batch.x.tag(), batch.y.tag()), (Some(Tag::Input), Some(Tag::Input)));
    // Forward: the activations are tagged as such and still live.
    let out = model.forward(&batch.x).unwrap();
    let loss = nn::cross_entropy(&out, &batch.y).unwrap();
    let live = live_by_tag(&log);
    // Linear 1 saves the batch itself (an input); ReLU saves its output, which is
    // Linear 2's saved input too (one storage); the loss saves the logits.
    let hidden = 64 * 32 * 4;
    let saved = hidden + out.allocated_bytes();
    assert_eq!(live[&Tag::Activation], saved, "{live:?}");
    assert_eq!(live[&Tag::Parameter], model.parameter_bytes());
    loss.backward(&mut model).unwrap();
    opt.step(&mut model).unwrap();
    drop(out);
    let live = live_by_tag(&log);
    assert_eq!(live.get(&Tag::Activation), None, "activations freed by backward: {live:?}");
    assert_eq!(live[&Tag::Gradient], model.gradient_bytes());
    assert_eq!(live[&Tag::OptimizerState], opt.state_bytes());
    assert_eq!(opt.state_bytes(), 2 * model.parameter_bytes(), "Adam keeps two moments");
    assert_eq!(live[&Tag::Input], batch.x.allocated_bytes() + batch.y.allocated_bytes());
    assert_eq!(live.get(&Tag::Temporary), None, "no temporary outlives the step: {live:?}");
    // The copy to the device went through the (pinned) staging buffer.
    let copies: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Copy(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(copies.len(), 2);
    assert!(copies.iter().all(|c| c.pinned && c.non_blocking));
}

#[test]
fn model_to_moves_parameters_and_the_golden_rule_holds() {
    let (a, _) = device(48);
    let (b, _) = device(49);
    let mut model = nn::mlp(&[4, 8, 2], 1, &a).unwrap();
    let bytes = model.parameter_bytes();
    assert_eq!(a.memory_allocated(), bytes);
    let before: Vec<Vec<f64>> = model.parameters().iter().map(|p| values(p.data())).collect();
    model.to(&b).unwrap();
    assert_eq!(a.memory_allocated(), 0, "the old copies are freed");
    assert_eq!(b.memory_allocated(), bytes);
    assert!(model.parameters().iter().all(|p| p.data().device() == &b && p.data().tag() == Some(Tag::Parameter)));
    let after: Vec<Vec<f64>> = model.parameters().iter().map(|p| values(p.data())).collect();
    assert_eq!(before, after);
    // A batch left on the old device is an error naming both devices.
    let x = input(&[1.0; 8], &[2, 4], &a);
    match model.forward(&x) {
        Err(NnError::Tensor(TensorError::DeviceMismatch { lhs, rhs, .. })) => {
            assert_eq!((lhs.to_string(), rhs.to_string()), ("cpu:48".into(), "cpu:49".into()));
        }
        other => panic!("expected a device mismatch, got {other:?}"),
    }
    assert!(model.forward(&x.to(&b).unwrap()).is_ok());
}

#[test]
fn data_loader_batches_shuffles_and_drops_last() {
    let (d, _) = device(50);
    let data = Dataset::classification(10, 3, 2, 1.0, 4).unwrap();
    let cfg = LoaderConfig { batch_size: 4, shuffle: true, seed: 9, drop_last: false, ..LoaderConfig::new(4) };
    let loader = DataLoader::new(&data, cfg.clone()).unwrap();
    assert_eq!(loader.len(), 3);
    let sizes: Vec<usize> = loader.epoch(0, &d).map(|b| b.unwrap().len()).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    let drop = DataLoader::new(&data, LoaderConfig { drop_last: true, ..cfg.clone() }).unwrap();
    assert_eq!(drop.len(), 2);
    assert_eq!(drop.epoch(0, &d).count(), 2);
    // Same seed and epoch: same order; another epoch: another order; a permutation.
    assert_eq!(loader.order(0), loader.order(0));
    assert_ne!(loader.order(0), loader.order(1));
    let mut sorted = loader.order(1);
    sorted.sort_unstable();
    assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    let plain = DataLoader::new(&data, LoaderConfig { shuffle: false, ..cfg }).unwrap();
    assert_eq!(plain.order(3), (0..10).collect::<Vec<_>>());
    // A batch holds exactly the samples of its indices.
    let first = loader.epoch(0, &d).next().unwrap().unwrap();
    let order = loader.order(0);
    let want: Vec<f64> =
        order[..4].iter().flat_map(|&i| data.features()[i * 3..i * 3 + 3].to_vec()).map(f64::from).collect();
    assert_eq!(values(&first.x), want);
    assert_eq!(first.x.shape(), &[4, 3]);
    assert_eq!(first.y.dtype(), DType::I64);
    // Seeded generators are reproducible.
    assert_eq!(Dataset::images(8, [1, 8, 8], 2, 0.5, 3).unwrap(), Dataset::images(8, [1, 8, 8], 2, 0.5, 3).unwrap());
    assert_ne!(Dataset::regression(8, 2, 1, 0.1, 3).unwrap(), Dataset::regression(8, 2, 1, 0.1, 4).unwrap());
    assert!(DataLoader::new(&data, LoaderConfig::new(0)).is_err());
}

#[test]
fn step_records_time_kernels_and_overhead() {
    let (d, _) = device(51);
    let (train, _) = blobs(2);
    let mut model = nn::mlp(&[16, 32, 4], 1, &d).unwrap();
    let mut opt = Sgd::with_momentum(0.05, 0.9);
    let loader = DataLoader::new(&train, LoaderConfig::new(64)).unwrap();
    let mut trainer = Trainer::new(LossFn::CrossEntropy);
    let report = trainer.epoch(&mut model, &mut opt, &loader, 0, &d).unwrap();
    for s in &report.steps {
        assert!(s.step_ns > 0 && s.kernel_ns > 0 && s.kernel_ns <= s.step_ns, "{s:?}");
        // Forward: 2 matmul + 2 add_bias + relu; cross_entropy and its backward;
        // Linear 2: weight and input gradients (2 matmul) + bias_grad; relu_backward;
        // Linear 1: weight gradient + bias_grad only (its input needs no gradient);
        // 4 SGD steps. 17 kernels.
        assert_eq!(s.kernels, 17, "{s:?}");
        assert!((0.0..=1.0).contains(&s.outside_kernel_share()));
        assert!(s.accuracy().is_some() && s.load_ns > 0);
    }
    assert_eq!(report.steps.last().unwrap().step, 11);
}

// ---------------------------------------------------------------------------
// Gradient checks by finite differences (f32)
// ---------------------------------------------------------------------------

/// Central differences with step `EPS` of the scalar `L = Σ y·r` (r a fixed
/// random projection), against the analytic gradients of `module` for its input
/// and every parameter: `max |analytic − numeric| ≤ TOL · max(1, max |numeric|)`.
const EPS: f32 = 1e-2;
const TOL: f64 = 1e-2;

fn objective(y: &Tensor, r: &[f64]) -> f64 {
    values(y).iter().zip(r).map(|(a, b)| a * b).sum()
}

fn assert_grads_close(what: &str, analytic: &[f64], numeric: &[f64]) {
    assert_eq!(analytic.len(), numeric.len(), "{what}");
    let scale = numeric.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let err = analytic.iter().zip(numeric).map(|(a, n)| (a - n).abs()).fold(0.0f64, f64::max);
    assert!(err <= TOL * scale, "{what}: max error {err} (scale {scale})\nanalytic {analytic:?}\nnumeric  {numeric:?}");
}

fn grad_check(name: &str, module: &mut dyn Module, x: &Tensor) {
    let d = x.device().clone();
    let y = module.forward(x).unwrap();
    let r: Vec<f64> = values(&Tensor::randn(y.shape(), DType::F32, 99, &d).unwrap());
    let gy = Tensor::from_slice(&r.iter().map(|&v| v as f32).collect::<Vec<_>>(), y.shape(), &d).unwrap();
    module.zero_grad(true).unwrap();
    let gx = module.backward(gy, true).unwrap().expect("input gradient");
    let eval = |m: &mut dyn Module, x: &Tensor| {
        let _ng = nn::no_grad();
        objective(&m.forward(x).unwrap(), &r)
    };
    // Input.
    let xv: Vec<f32> = x.to_vec().unwrap();
    let numeric: Vec<f64> = (0..xv.len())
        .map(|i| {
            let mut p = xv.clone();
            p[i] += EPS;
            let plus = eval(module, &Tensor::from_slice(&p, x.shape(), &d).unwrap());
            p[i] = xv[i] - EPS;
            let minus = eval(module, &Tensor::from_slice(&p, x.shape(), &d).unwrap());
            (plus - minus) / (2.0 * f64::from(EPS))
        })
        .collect();
    assert_grads_close(&format!("{name} input"), &values(&gx), &numeric);
    // Parameters.
    let count = module.parameters().len();
    for k in 0..count {
        let (pname, pv, shape, analytic) = {
            let p = &module.parameters()[k];
            (p.name().to_owned(), p.data().to_vec::<f32>().unwrap(), p.shape().to_vec(), values(p.grad().unwrap()))
        };
        let set = |m: &mut dyn Module, v: &[f32]| {
            let _t = tag_scope(Tag::Parameter);
            m.parameters_mut()[k].set_data(Tensor::from_slice(v, &shape, &d).unwrap()).unwrap();
        };
        let numeric: Vec<f64> = (0..pv.len())
            .map(|i| {
                let mut p = pv.clone();
                p[i] += EPS;
                set(module, &p);
                let plus = eval(module, x);
                p[i] = pv[i] - EPS;
                set(module, &p);
                let minus = eval(module, x);
                set(module, &pv);
                (plus - minus) / (2.0 * f64::from(EPS))
            })
            .collect();
        assert_grads_close(&format!("{name} {pname}"), &analytic, &numeric);
    }
}

/// Values away from 0 (ReLU's kink) and pairwise at least 0.05 apart (no
/// max-pool ties within ±EPS).
fn distinct_inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n).map(|i| (i as f32 - n as f32 / 2.0) * 0.07 + 0.035).collect();
    vramlab_rng::Rng::new(seed).shuffle(&mut v);
    v
}

#[test]
fn gradient_checks_linear_conv_and_activations() {
    let (d, _) = device(52);
    let x = Tensor::randn(&[3, 5], DType::F32, 1, &d).unwrap();
    grad_check("Linear", &mut Linear::new(5, 4, 2, &d).unwrap(), &x);
    let x = Tensor::randn(&[2, 2, 5, 5], DType::F32, 3, &d).unwrap();
    grad_check("Conv2d 3×3 pad 1", &mut Conv2d::new(2, 3, 3, Conv2dOptions::new(1, 1), 4, &d).unwrap(), &x);
    grad_check("Conv2d 2×2 stride 2", &mut Conv2d::new(2, 2, 2, Conv2dOptions::new(2, 0), 5, &d).unwrap(), &x);
    let x = Tensor::from_slice(&distinct_inputs(24, 6), &[4, 6], &d).unwrap();
    grad_check("ReLU", &mut ReLU::new(), &x);
    grad_check("GELU", &mut GELU::new(), &x);
    let x = Tensor::from_slice(&distinct_inputs(2 * 2 * 4 * 4, 7), &[2, 2, 4, 4], &d).unwrap();
    grad_check("MaxPool2d 2×2", &mut MaxPool2d::new(2, 2), &x);
    grad_check("MaxPool2d 3×3 stride 1", &mut MaxPool2d::new(3, 1), &x);
    grad_check("Flatten", &mut Flatten::new(), &x);
    // A whole model through Sequential: conv → GELU → flatten → linear (smooth,
    // so finite differences see no kinks).
    let x = Tensor::randn(&[2, 1, 4, 4], DType::F32, 8, &d).unwrap();
    let mut model = Sequential::new()
        .add(Conv2d::new(1, 2, 3, Conv2dOptions::new(1, 1), 9, &d).unwrap())
        .add(GELU::new())
        .add(Flatten::new())
        .add(Linear::new(32, 3, 10, &d).unwrap());
    grad_check("Sequential(Conv2d, GELU, Flatten, Linear)", &mut model, &x);
}

#[test]
fn gradient_checks_losses() {
    let (d, _) = device(53);
    let logits_v: Vec<f32> =
        values(&Tensor::randn(&[4, 5], DType::F32, 1, &d).unwrap()).iter().map(|&v| v as f32).collect();
    let labels = Tensor::from_slice(&[0i64, 3, 4, 1], &[4], &d).unwrap();
    let target = Tensor::randn(&[4, 5], DType::F32, 2, &d).unwrap();
    for loss_fn in [LossFn::CrossEntropy, LossFn::Mse] {
        let t = if loss_fn == LossFn::CrossEntropy { &labels } else { &target };
        let logits = Tensor::from_slice(&logits_v, &[4, 5], &d).unwrap();
        let analytic = values(&loss_fn.compute(&logits, t).unwrap().input_grad().unwrap());
        let numeric: Vec<f64> = (0..logits_v.len())
            .map(|i| {
                let _ng = nn::no_grad();
                let mut p = logits_v.clone();
                p[i] += EPS;
                let plus = loss_fn.compute(&Tensor::from_slice(&p, &[4, 5], &d).unwrap(), t).unwrap().item().unwrap();
                p[i] = logits_v[i] - EPS;
                let minus = loss_fn.compute(&Tensor::from_slice(&p, &[4, 5], &d).unwrap(), t).unwrap().item().unwrap();
                (plus - minus) / (2.0 * f64::from(EPS))
            })
            .collect();
        // Loss gradients are O(1/n): compare against their own scale.
        let scale = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let err = analytic.iter().zip(&numeric).map(|(a, n)| (a - n).abs()).fold(0.0f64, f64::max);
        assert!(err <= TOL * scale, "{}: max error {err}, scale {scale}", loss_fn.name());
        // A scaled loss scales its gradient.
        let logits = Tensor::from_slice(&logits_v, &[4, 5], &d).unwrap();
        let scaled = values(&loss_fn.compute(&logits, t).unwrap().scaled(8.0).unwrap().input_grad().unwrap());
        for (s, a) in scaled.iter().zip(&analytic) {
            assert!((s - 8.0 * a).abs() <= 1e-6 * a.abs().max(1e-3));
        }
    }
}

// ---------------------------------------------------------------------------
// The tensor ops added for training
// ---------------------------------------------------------------------------

#[test]
fn training_ops_known_answers() {
    let (d, _) = device(55);
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &d).unwrap(); // [2, 3]
    let b = Tensor::from_slice(&[1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0], &[2, 3], &d).unwrap(); // [2, 3]
    // a · bᵀ = [[4, 5], [10, 11]]; aᵀ · b = [[1, 4, 5], [2, 5, 7], [3, 6, 9]].
    assert_eq!(a.matmul_transposed(&b, false, true).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 5.0, 10.0, 11.0]);
    let atb = a.matmul_transposed(&b, true, false).unwrap();
    assert_eq!(atb.shape(), &[3, 3]);
    assert_eq!(atb.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 5.0, 2.0, 5.0, 7.0, 3.0, 6.0, 9.0]);
    assert!(a.matmul_transposed(&b, false, false).is_err(), "[2, 3] · [2, 3] does not fit");
    // Bias over dimension 1: rows ([n, c]) and planes ([n, c, h, w]).
    let bias = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3], &d).unwrap();
    assert_eq!(a.add_bias(&bias).unwrap().to_vec::<f32>().unwrap(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let mut planes = Tensor::zeros(&[2, 3, 2, 2], DType::F32, &d).unwrap();
    planes.add_bias_(&bias).unwrap();
    let want: Vec<f32> = (0..24).map(|i| [10.0, 20.0, 30.0][(i / 4) % 3]).collect();
    assert_eq!(planes.to_vec::<f32>().unwrap(), want);
    assert_eq!(planes.bias_grad().unwrap().to_vec::<f32>().unwrap(), vec![80.0, 160.0, 240.0]);
    assert_eq!(a.bias_grad().unwrap().to_vec::<f32>().unwrap(), vec![5.0, 7.0, 9.0]);
    // A large in-place bias (the parallel path) matches the out-of-place op, in bf16 too.
    for dtype in [DType::F32, DType::BF16] {
        let x = Tensor::randn(&[4, 16, 64, 64], dtype, 3, &d).unwrap();
        let bias = Tensor::randn(&[16], dtype, 4, &d).unwrap();
        let want = values(&x.add_bias(&bias).unwrap());
        let mut y = x.scale(1.0).unwrap(); // a fresh copy
        y.add_bias_(&bias).unwrap();
        assert_eq!(values(&y), want, "{dtype}");
    }
    // In-place updates need the only reference.
    let mut g = Tensor::from_slice(&[1.0f32, -2.0], &[2], &d).unwrap();
    let other = Tensor::from_slice(&[0.5f32, 0.5], &[2], &d).unwrap();
    g.add_(&other).unwrap();
    g.scale_(2.0).unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![3.0, -3.0]);
    let shared = g.clone();
    assert!(matches!(g.fill_(0.0), Err(TensorError::BadShape { .. })), "a shared tensor is not updated in place");
    drop(shared);
    g.fill_(0.0).unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    // Unscale: multiplies and reports non-finite values.
    let mut g = Tensor::from_slice(&[4.0f32, 8.0], &[2], &d).unwrap();
    assert!(!g.unscale_and_check_(0.25).unwrap());
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let mut g = Tensor::from_slice(&[4.0f32, f32::INFINITY, 1.0], &[3], &d).unwrap();
    assert!(g.unscale_and_check_(0.5).unwrap());
    // Argmax over the last dimension; NaN wins, as in PyTorch.
    let x = Tensor::from_slice(&[0.1f32, 0.7, 0.2, 3.0, -1.0, 3.0, 0.0, f32::NAN, 9.0], &[3, 3], &d).unwrap();
    assert_eq!(x.argmax().unwrap().to_vec::<i64>().unwrap(), vec![1, 0, 1]);
    // Plain SGD needs no momentum buffer.
    let mut p = Tensor::from_slice(&[1.0f32, 1.0], &[2], &d).unwrap();
    let grad = Tensor::from_slice(&[1.0f32, -1.0], &[2], &d).unwrap();
    p.sgd_step_(&grad, None, &SgdConfig::new(0.5), 1).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.5, 1.5]);
    assert!(p.sgd_step_(&grad, None, &SgdConfig { momentum: 0.9, ..SgdConfig::new(0.5) }, 1).is_err());
    // The golden rule comes first in the new ops too.
    let (e, _) = device(56);
    let elsewhere = Tensor::from_slice(&[1.0f32, 1.0, 1.0], &[3], &e).unwrap();
    assert!(matches!(a.add_bias(&elsewhere), Err(TensorError::DeviceMismatch { .. })));
    assert!(matches!(
        a.matmul_transposed(&elsewhere.reshape(&[1, 3]).unwrap(), false, true),
        Err(TensorError::DeviceMismatch { .. })
    ));
}
