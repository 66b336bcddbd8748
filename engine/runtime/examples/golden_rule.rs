//! The golden rule of every GPU guide: all operands of an op live on one device.
//! Breaking it is an error that names both devices — never a silent copy — and
//! the fix is to move one tensor with `.to(&device)`.
//!
//! Without a GPU the second device is `cpu:1`, a host device with its own
//! allocator: a separate memory space, so the rule applies the same way.
//!
//! `cargo run -p vramlab-engine --example golden_rule -- [--device cpu|cuda:N]`

mod common;

use vramlab_engine::device::Device;
use vramlab_engine::tensor::{DType, Tensor};

fn main() {
    let device = common::device_from_args();
    let other =
        if device.is_cpu() { Device::parse("cpu:1").expect("host devices always exist") } else { Device::cpu() };
    let run = || -> Result<(), vramlab_engine::tensor::TensorError> {
        let model_weight = Tensor::randn(&[4, 4], DType::F32, 1, &device)?;
        let batch = Tensor::randn(&[2, 4], DType::F32, 2, &other)?;
        println!("weight on {}, batch on {}", model_weight.device(), batch.device());

        println!("\n1. batch.matmul(&weight) with the operands on different devices:");
        match batch.matmul(&model_weight) {
            Ok(_) => println!("   unexpectedly succeeded"),
            Err(e) => println!("   error: {e}"),
        }

        println!("\n2. the fix: move the batch to the weight's device first:");
        let batch = batch.to(&device)?;
        let out = batch.matmul(&model_weight)?;
        println!("   batch.to(&{device}).matmul(&weight) -> {:?}", out);
        println!("   values: {:?}", out.to_vec::<f32>()?);
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
