//! A synthetic allocation trace for benches and tests: a valid, deterministic
//! stream of [`TraceOp`]s that looks like a training run, drawn from the
//! workspace's seeded generator. Test and bench support only (included with
//! `#[path]` by the replay crate's unit tests and bench and by the runtime's GPU
//! test, each with `Tag`, `TraceOp` and `write_trace` in scope), so the replay crate itself needs no generator.

#![allow(dead_code)]

// The includer has `Tag`, `TraceOp` and `write_trace` in scope.
use super::{Tag, TraceOp, write_trace};

/// A valid, deterministic trace of exactly `events` ops that looks like a
/// training run: parameters and optimizer state allocated first and kept, then
/// a stream of activations, gradients, temporaries and workspaces (small, medium
/// and large, mostly freed last-in first-out, some on a second stream), with an
/// occasional `empty_cache` and `reset_peak`.
pub fn synthetic_trace(events: usize, seed: u64) -> String {
    let mut out = Vec::with_capacity(events * 48);
    write_trace(&mut out, SyntheticTrace::new(events, seed)).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("traces are ASCII")
}

/// The ops of [`synthetic_trace`], one at a time.
#[derive(Debug, Clone)]
pub struct SyntheticTrace {
    remaining: usize,
    emitted: u64,
    rng: vramlab_rng::Rng,
    persistent: usize,
    next_id: u64,
    live: Vec<u64>,
    recycled: Vec<u64>,
}

impl SyntheticTrace {
    /// Live allocations the trace hovers around once past its set-up.
    const TARGET_LIVE: usize = 256;

    pub fn new(events: usize, seed: u64) -> SyntheticTrace {
        SyntheticTrace {
            remaining: events,
            emitted: 0,
            rng: vramlab_rng::Rng::new(seed),
            persistent: (events / 20).min(64),
            next_id: 1,
            live: Vec::new(),
            recycled: Vec::new(),
        }
    }

    /// A draw in `0..n`, from the workspace's one generator.
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn new_id(&mut self) -> u64 {
        // Reuse a freed id now and then, as PyTorch traces reuse addresses.
        if !self.recycled.is_empty() && self.below(5) == 0 {
            let i = self.below(self.recycled.len() as u64) as usize;
            return self.recycled.swap_remove(i);
        }
        self.next_id += 1;
        self.next_id - 1
    }

    fn alloc(&mut self) -> TraceOp {
        use vramlab_allocator::consts::MIB;
        let id = self.new_id();
        let class = self.below(100);
        let size = if class < 55 {
            4 * (1 + self.below(MIB / 4))
        } else if class < 85 {
            (MIB + self.below(15 * MIB)) & !3
        } else {
            2 * MIB * (8 + self.below(120))
        };
        let tag = match self.below(20) {
            0..10 => Tag::Activation,
            10..15 => Tag::Temporary,
            15..18 => Tag::Gradient,
            18 => Tag::Workspace,
            _ => Tag::Input,
        };
        let stream = if self.below(10) == 0 { 1 } else { 0 };
        self.live.push(id);
        TraceOp::Alloc { id, size, stream, tag: Some(tag) }
    }

    fn free(&mut self) -> TraceOp {
        let id = if self.below(4) == 0 {
            let i = self.below(self.live.len() as u64) as usize;
            self.live.swap_remove(i)
        } else {
            self.live.pop().expect("free is only chosen with live allocations")
        };
        if self.recycled.len() < 64 {
            self.recycled.push(id);
        }
        TraceOp::Free { id }
    }
}

impl Iterator for SyntheticTrace {
    type Item = TraceOp;

    fn next(&mut self) -> Option<TraceOp> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let i = self.emitted;
        self.emitted += 1;
        if (i as usize) < self.persistent {
            use vramlab_allocator::consts::KIB;
            let size = 64 * KIB * (1 + self.below(1024));
            let tag = if i.is_multiple_of(2) { Tag::Parameter } else { Tag::OptimizerState };
            self.next_id += 1;
            return Some(TraceOp::Alloc { id: self.next_id - 1, size, stream: 0, tag: Some(tag) });
        }
        if i % 5_000 == 4_999 {
            return Some(TraceOp::EmptyCache);
        }
        if i % 20_000 == 19_998 {
            return Some(TraceOp::ResetPeak);
        }
        let live = self.live.len();
        let alloc_percent = match live {
            0 => 100,
            n if n < Self::TARGET_LIVE => 55,
            n if n < 2 * Self::TARGET_LIVE => 45,
            _ => 0,
        };
        Some(if self.below(100) < alloc_percent { self.alloc() } else { self.free() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for SyntheticTrace {}
