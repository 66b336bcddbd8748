//! How vramlab shows its figures to a person, in one place below every other
//! crate: [`format`] writes bytes, times and signed changes the same way on
//! the command line, in Markdown, on pages and on charts.
//!
//! PyTorch's own strings (c10's `format_size` in an out-of-memory message,
//! `memory_summary()`'s table) are not here: they reproduce PyTorch's text
//! and live beside the allocator model that prints them
//! (`vramlab_allocator::format_size`, `vramlab_allocator::summary`).

pub mod format;
