//! The suites, one module per claim, and the list a run takes them from.

mod allocator;
mod amp;
mod async_timing;
mod autotune;
mod common;
mod cpu_vs_gpu;
mod devices;
mod input_pipeline;
mod memory;
mod transfer;

use crate::suite::Suite;

/// Every suite, in the order a full run takes them.
pub fn all_suites() -> Vec<Box<dyn Suite>> {
    vec![
        Box::new(devices::DevicesSuite),
        Box::new(cpu_vs_gpu::CpuVsGpuSuite),
        Box::new(amp::AmpSuite),
        Box::new(autotune::AutotuneSuite::default()),
        Box::new(memory::MemorySuite),
        Box::new(transfer::TransferSuite),
        Box::new(input_pipeline::InputPipelineSuite),
        Box::new(async_timing::AsyncTimingSuite),
        Box::new(allocator::AllocatorSuite),
    ]
}

/// The suite called `name`.
pub fn suite_by_name(name: &str) -> Option<Box<dyn Suite>> {
    all_suites().into_iter().find(|s| s.name() == name)
}
