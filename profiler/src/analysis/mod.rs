//! Turning a [`Recording`](crate::record::Recording) into answers: a replay of
//! the allocator's state (levels, live blocks, segments, phases) that runs
//! twice — once to find the peaks, OOMs, phase peaks, kernel and copy tables,
//! once more to take the snapshots at the peaks. The answers' types live in
//! [`types`] (with the limits of what is reported); [`levels`] says how one record moves the counters; [`state`] is
//! the replayed allocator state; [`passes`] runs the two passes.

mod levels;
mod passes;
mod state;
mod types;

pub(crate) use levels::{CH_ACTIVE, CH_ALLOCATED, CH_REQUESTED, CH_RESERVED, apply_levels};
pub(crate) use passes::analyze;
pub(crate) use state::Phases;
pub use types::*;
