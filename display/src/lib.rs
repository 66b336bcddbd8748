//! How vramlab shows its figures to a person, in one place below every other
//! crate: [`format`] writes bytes, times and signed changes the same way on
//! the command line, in Markdown, on pages and on charts; [`chart`] is the one
//! chart model — what a chart shows, as data — that the suites declare (and
//! `results.json` stores), the report draws, and the replay and what-if pages
//! build.
//!
//! PyTorch's own strings (c10's `format_size` in an out-of-memory message,
//! `memory_summary()`'s table) are not here: they reproduce PyTorch's text
//! and live beside the allocator model that prints them
//! (`vramlab_allocator::format_size`, `vramlab_allocator::summary`).
//!
//! Files:
//! - `src/lib.rs` — this map and the two modules
//! - `src/format.rs` — bytes in binary units, signed byte changes, durations; the byte units
//! - `src/chart.rs` — the chart model (lines, bars, axes, units and their labels, the palette), serde types

pub mod chart;
pub mod format;
