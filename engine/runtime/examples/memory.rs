//! The caching allocator as the guides describe it: freed memory stays
//! reserved until `empty_cache()`; `memory_allocated` / `memory_reserved` /
//! `max_memory_allocated` tell you where you stand.
//!
//! `cargo run -p vramlab-engine --example memory -- [--device cpu|cuda:N]`

mod common;

use vramlab_engine::alloc::format_size;
use vramlab_engine::tensor::{DType, Tensor};

fn main() {
    let device = common::device_from_args();
    let show = |when: &str| {
        let s = device.memory_stats();
        println!(
            "{when:<40} allocated {:>12}   reserved {:>12}   peak allocated {:>12}",
            format_size(s.memory_allocated()),
            format_size(s.memory_reserved()),
            format_size(s.max_memory_allocated()),
        );
    };
    show("start");
    let run = || -> Result<(), vramlab_engine::tensor::TensorError> {
        let a = Tensor::zeros(&[1024, 1024], DType::F32, &device)?; // 4 MiB
        let b = Tensor::zeros(&[256, 1024], DType::F32, &device)?; // 1 MiB
        show("after a (4 MiB) and b (1 MiB)");
        let c = a.matmul(&Tensor::zeros(&[1024, 1024], DType::F32, &device)?)?;
        show("after c = a @ zeros (temporary freed)");
        drop((a, b, c));
        show("after dropping a, b, c");
        device.empty_cache();
        show("after empty_cache()");
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    println!("\n{}", device.memory_summary(true));
}
