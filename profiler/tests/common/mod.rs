//! Helpers shared by the profiler's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use vramlab_engine::alloc::{AllocatorConfig, CachingAllocator, SimulatedMemory};
use vramlab_engine::hooks::{Hooks, Tag};
use vramlab_profiler::{DeviceInfo, Profiler, ProfilerConfig};

pub use vramlab_engine::alloc::consts::MIB;

/// The workspace's seeded generator with the draws these tests need, so
/// failures reproduce.
pub struct Rng(vramlab_rng::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(vramlab_rng::Rng::new(seed))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n as usize) as u64
    }

    /// A request size from both pools, odd sizes included.
    pub fn size(&mut self) -> u64 {
        match self.below(4) {
            0 => 1 + self.below(4096),
            1 => 1 + self.below(MIB),
            2 => MIB + self.below(8 * MIB),
            _ => 10 * MIB + self.below(40 * MIB),
        }
    }

    pub fn tag(&mut self) -> Option<Tag> {
        let i = self.below(Tag::ALL.len() as u64 + 1) as usize;
        Tag::ALL.get(i).copied()
    }
}

/// An allocator over simulated memory on its own hub, as device `device`.
pub fn allocator(hub: &Arc<Hooks>, capacity: Option<u64>, config: AllocatorConfig, device: u32) -> CachingAllocator {
    let raw = match capacity {
        Some(c) => SimulatedMemory::with_capacity(c),
        None => SimulatedMemory::unlimited(),
    };
    CachingAllocator::with_hooks(Arc::new(raw), config, hub.clone(), device).expect("allocator")
}

/// A profiler on `hub` without a sampler thread.
pub fn profiler(hub: &Arc<Hooks>, devices: &[u32]) -> Profiler {
    let mut config = ProfilerConfig::on(hub.clone()).without_sampling();
    for &d in devices {
        config = config.device(DeviceInfo::simulated(d));
    }
    Profiler::start(config).expect("profiler start")
}
