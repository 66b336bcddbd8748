//! The REPLAY of a snapshot's trace through the allocator model: the state at
//! the first entry (rewound from the final segments), the walk over the trace
//! with its fidelity check, the private pools, the recorded out-of-memory
//! errors and releases, the two-step free, and reading and replaying at once.

pub(crate) mod feed;
pub(crate) mod fidelity;
pub(crate) mod oom;
pub(crate) mod overlap;
pub(crate) mod pools;
pub(crate) mod recording;
pub(crate) mod report;
pub(crate) mod rewind;
pub(crate) mod run;
pub(crate) mod states;
pub(crate) mod stats_check;
pub(crate) mod two_step;
pub(crate) mod underivable;
pub(crate) mod walk;
