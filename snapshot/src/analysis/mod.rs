//! The ANALYSES of a snapshot and its replays: who holds the memory
//! (attribution), live memory stacked by call path over the trace (each band split by its
//! next frames), two
//! snapshots compared, and what-if under other settings or a smaller batch.

pub(crate) mod attribution;
pub(crate) mod band_split;
pub(crate) mod diff;
pub(crate) mod gate;
pub(crate) mod path_timeline;
pub(crate) mod whatif;
