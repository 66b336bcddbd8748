//! What is here: the guides' `torch.cuda.is_available()`, `device_count()` and
//! `get_device_name()`, and why CUDA is not available when it is not.
//!
//! `cargo run -p vramlab-engine --example devices -- [--device cpu|cuda:N]`

mod common;

use vramlab_engine::alloc::format_size;
use vramlab_engine::device::{Device, cuda_probe};

fn main() {
    let chosen = common::device_from_args();
    match cuda_probe() {
        Ok(n) => println!("CUDA available: yes, {n} device(s)"),
        Err(why) => println!("CUDA available: no — {why}"),
    }
    let (auto, reason) = Device::auto();
    println!("Device::auto() picks {auto}{}", reason.map(|r| format!(" ({r})")).unwrap_or_default());
    let p = chosen.properties();
    println!();
    println!("device        {}", p.id);
    println!("name          {}", p.name);
    println!("compute units {}", p.compute_units);
    println!("capacity      {} (the allocator's limit for this device)", format_size(p.memory_capacity_bytes));
    for c in &p.caches {
        println!("cache {:<7} {}", c.level, format_size(c.size_bytes));
    }
}
