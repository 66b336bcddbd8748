//! The suites, one module per claim.

mod allocator;
mod amp;
mod async_timing;
mod autotune;
mod common;
mod cpu_vs_gpu;
mod devices;
mod memory;
mod transfer;

use crate::suite::Suite;

/// Every suite, in run order.
pub fn all() -> Vec<Box<dyn Suite>> {
    vec![
        Box::new(devices::DevicesSuite),
        Box::new(cpu_vs_gpu::CpuVsGpuSuite),
        Box::new(amp::AmpSuite),
        Box::new(autotune::AutotuneSuite::default()),
        Box::new(memory::MemorySuite),
        Box::new(transfer::TransferSuite),
        Box::new(async_timing::AsyncTimingSuite),
        Box::new(allocator::AllocatorSuite),
    ]
}
