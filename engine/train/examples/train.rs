//! The guides' complete GPU-aware training loop on the engine: the model moves to
//! the device once, the optimizer is built after the move, each batch is copied
//! to the device, forward (under autocast when asked) → loss → backward (through
//! a GradScaler for float16) → step, and evaluation runs under `no_grad`. Prints
//! per-epoch loss and accuracy, then peak allocated/reserved memory and the time
//! per step with its share outside kernels.
//!
//! ```text
//! cargo run --release -p vramlab-engine --example train -- [--device cpu|cuda:N] [--model mlp|cnn]
//!     [--amp off|f16|bf16] [--epochs N] [--batch-size N] [--samples N] [--optimizer sgd|adam]
//!     [--lr X] [--pin-memory] [--seed N]
//! ```
//!
//! Data: synthetic 1×28×28 images of 10 classes (`Dataset::images`), 80% for
//! training and 20% held out. Models: the guides' MLP 784→1024→1024→10 or a
//! small CNN (two conv-ReLU-pool blocks with 16 and 32 channels, linear head).
//! Exit status: 0 on success, 2 for a bad command line, 1 when the device cannot
//! be had or training fails.

use std::process::ExitCode;
use std::str::FromStr;

use vramlab_engine::alloc::format_size;
use vramlab_engine::device::{Device, DeviceId};
use vramlab_engine::tensor::DType;
use vramlab_train::{
    self as nn, Adam, AdamConfig, CnnConfig, DataLoader, Dataset, GradScaler, LoaderConfig, LossFn, Module, Optimizer,
    Sequential, Sgd, StepRecord, Trainer,
};

const USAGE: &str = "usage: train [--device cpu|cpu:N|cuda|cuda:N] [--model mlp|cnn] [--amp off|f16|bf16] \
                     [--epochs N] [--batch-size N] [--samples N] [--optimizer sgd|adam] [--lr X] [--pin-memory] \
                     [--seed N]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelKind {
    Mlp,
    Cnn,
}

#[derive(Debug)]
struct Args {
    device: DeviceId,
    model: ModelKind,
    amp: Option<DType>,
    epochs: u64,
    batch_size: usize,
    samples: usize,
    adam: bool,
    lr: Option<f32>,
    pin_memory: bool,
    seed: u64,
}

/// Parses the command line; `Err` is the message for a bad one.
fn parse_args(args: &[String]) -> Result<Option<Args>, String> {
    let mut a = Args {
        device: DeviceId::CPU,
        model: ModelKind::Mlp,
        amp: None,
        epochs: 2,
        batch_size: 64,
        samples: 2560,
        adam: false,
        lr: None,
        pin_memory: false,
        seed: 0,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |what: &str| it.next().cloned().ok_or_else(|| format!("{flag} needs a value ({what})"));
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--device" => {
                let v = value("cpu, cpu:N, cuda or cuda:N")?;
                a.device = v.parse().map_err(|e| format!("--device: {e}"))?;
            }
            "--model" => {
                a.model = match value("mlp or cnn")?.as_str() {
                    "mlp" => ModelKind::Mlp,
                    "cnn" => ModelKind::Cnn,
                    other => return Err(format!("--model: unknown model '{other}' (expected mlp or cnn)")),
                }
            }
            "--amp" => {
                a.amp = match value("off, f16 or bf16")?.as_str() {
                    "off" | "none" | "f32" => None,
                    "f16" | "fp16" | "float16" => Some(DType::F16),
                    "bf16" | "bfloat16" => Some(DType::BF16),
                    other => return Err(format!("--amp: unknown mode '{other}' (expected off, f16 or bf16)")),
                }
            }
            "--epochs" => a.epochs = number(flag, &value("a count")?, 1)?,
            "--batch-size" => a.batch_size = number(flag, &value("a count")?, 1)?,
            "--samples" => a.samples = number(flag, &value("a count")?, 10)?,
            "--seed" => a.seed = number(flag, &value("an integer")?, 0)?,
            "--lr" => {
                let v = value("a learning rate")?;
                match v.parse::<f32>() {
                    Ok(lr) if lr > 0.0 && lr.is_finite() => a.lr = Some(lr),
                    _ => return Err(format!("--lr: '{v}' is not a positive number")),
                }
            }
            "--optimizer" => {
                a.adam = match value("sgd or adam")?.as_str() {
                    "sgd" => false,
                    "adam" => true,
                    other => return Err(format!("--optimizer: unknown optimizer '{other}' (expected sgd or adam)")),
                }
            }
            "--pin-memory" => a.pin_memory = true,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(a))
}

/// `v` as a number of at least `min`.
fn number<T: FromStr + PartialOrd + std::fmt::Display>(flag: &str, v: &str, min: T) -> Result<T, String> {
    match v.parse::<T>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{flag}: '{v}' is not a number ≥ {min}")),
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("error: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let device = match Device::get(args.device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match run(&args, &device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn run(args: &Args, device: &Device) -> Result<(), nn::NnError> {
    // Data: synthetic images, 80% train / 20% held out.
    let data = Dataset::images(args.samples, [1, 28, 28], 10, 0.5, args.seed)?;
    let (train, test) = data.split(args.samples * 4 / 5);
    let loader_cfg = LoaderConfig {
        batch_size: args.batch_size,
        shuffle: true,
        seed: args.seed,
        drop_last: false,
        pin_memory: args.pin_memory,
        ..LoaderConfig::new(args.batch_size)
    };
    let loader = DataLoader::new(&train, loader_cfg.clone())?;
    let eval_loader = DataLoader::new(&test, LoaderConfig { shuffle: false, ..loader_cfg })?;

    // The model is built (on the host), then moved to the device once.
    let host = Device::cpu();
    let mut model: Sequential = match args.model {
        ModelKind::Mlp => nn::mlp(&[784, 1024, 1024, 10], args.seed, &host)?,
        ModelKind::Cnn => nn::cnn(&CnnConfig::mnist_like(), args.seed, &host)?,
    };
    model.to(device)?;
    // The optimizer is built after the move, so its state lives on the device too.
    let mut opt: Box<dyn Optimizer> = if args.adam {
        Box::new(Adam::new(AdamConfig::new(args.lr.unwrap_or(1e-3))))
    } else {
        Box::new(Sgd::with_momentum(args.lr.unwrap_or(0.02), 0.9))
    };
    let mut trainer = Trainer::new(LossFn::CrossEntropy).with_autocast(args.amp);
    if args.amp == Some(DType::F16) {
        trainer = trainer.with_scaler(GradScaler::default());
    }

    println!("vramlab train on {device} ({})", device.properties().name);
    println!("  model     {} ({} parameters)", model.describe(), model.num_parameters());
    println!(
        "  amp       {}{}",
        args.amp.map_or("off (float32)".to_owned(), |d| format!("autocast {d}")),
        if trainer.scaler.is_some() { " + GradScaler" } else { "" }
    );
    println!("  optimizer {}", opt.describe());
    println!(
        "  data      {} train / {} held-out images 1×28×28, 10 classes; batch {}, {} batches/epoch{}",
        train.len(),
        test.len(),
        args.batch_size,
        loader.len(),
        if args.pin_memory { ", pinned staging" } else { "" }
    );
    device.allocator().reset_peak_stats();

    let mut steps: Vec<StepRecord> = Vec::new();
    for epoch in 0..args.epochs {
        let started = std::time::Instant::now();
        let mut epoch_steps = Vec::with_capacity(loader.len());
        for (i, batch) in loader.epoch(epoch, device).enumerate() {
            let batch = batch?; // copied to the device
            let mut rec = trainer.step(&mut model, opt.as_mut(), &batch)?;
            (rec.epoch, rec.step) = (epoch, i);
            epoch_steps.push(rec);
        }
        let seconds = started.elapsed().as_secs_f64();
        let eval = trainer.evaluate(&mut model, &eval_loader, device)?; // under no_grad
        let n: usize = epoch_steps.iter().map(|s| s.batch_size).sum();
        let loss = epoch_steps.iter().map(|s| s.loss * s.batch_size as f64).sum::<f64>() / n as f64;
        let correct: usize = epoch_steps.iter().filter_map(|s| s.correct).sum();
        println!(
            "epoch {}/{}  train loss {loss:.4}  acc {:5.1}%   held-out loss {:.4}  acc {:5.1}%   ({seconds:.2} s)",
            epoch + 1,
            args.epochs,
            100.0 * correct as f64 / n as f64,
            eval.loss,
            100.0 * eval.accuracy.unwrap_or(f64::NAN),
        );
        steps.extend(epoch_steps);
    }

    let stats = device.memory_stats();
    println!(
        "memory (allocator, {device}): peak allocated {}, peak reserved {}; parameters {}, gradients {}, optimizer \
         state {}",
        format_size(stats.max_memory_allocated()),
        format_size(stats.max_memory_reserved()),
        format_size(model.parameter_bytes()),
        format_size(model.gradient_bytes()),
        format_size(opt.state_bytes()),
    );
    // The first step pays for first-touch page faults and the allocator's first
    // segments; report the steady state.
    let steady = if steps.len() > 1 { &steps[1..] } else { &steps[..] };
    let step_ns = median(steady.iter().map(|s| s.step_ns).collect());
    let kernel_ns = median(steady.iter().map(|s| s.kernel_ns).collect());
    let outside: f64 = steady.iter().map(|s| s.outside_kernels_ns() as f64).sum::<f64>()
        / steady.iter().map(|s| s.step_ns as f64).sum::<f64>().max(1.0);
    println!(
        "time per step (median of {}): {:.2} ms (kernels {:.2} ms, outside kernels {:.1}%), batch load + copy {:.3} ms",
        steady.len(),
        ms(step_ns),
        ms(kernel_ns),
        100.0 * outside,
        ms(median(steady.iter().map(|s| s.load_ns).collect())),
    );
    if let Some(s) = &trainer.scaler {
        let st = s.state();
        println!(
            "GradScaler: scale {}, steps skipped {}, taken {}, backoffs {}, growths {}",
            st.scale, st.steps_skipped, st.steps_taken, st.backoffs, st.growths
        );
    }
    Ok(())
}
