//! Why a trace cannot be replayed: [`ReplayError`], every variant about the
//! trace's content naming the line at fault.

use std::io;

use thiserror::Error;
use vramlab_allocator::AllocError;
use vramlab_allocator::hooks::Tag;

use crate::report::{MAX_BYTES, MAX_DEVICES};

/// The ops of the format, for messages.
const OPS: &str = "alloc, free, empty_cache, reset_peak, record_stream, stream_done, set_memory_fraction, \
                   set_allocator_settings, create_pool, begin_allocate_to_pool, end_allocate_to_pool, release_pool or \
                   delete_pool";

/// A trace that cannot be replayed. Every variant about the trace's content
/// names the 1-based line at fault.
#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("line {line}: cannot read the trace: {source}")]
    Io {
        line: u64,
        #[source]
        source: io::Error,
    },
    #[error("line {line}: longer than {limit} bytes; is this a trace?")]
    LineTooLong { line: u64, limit: usize },
    #[error("line {line}, column {column}: malformed JSON: {message}")]
    Json { line: u64, column: usize, message: String },
    #[error("line {line}: unknown op '{op}' (expected {OPS})")]
    UnknownOp { line: u64, op: String },
    #[error("line {line}: missing field '{field}'{}", required_by(*.op))]
    MissingField { line: u64, op: Option<&'static str>, field: &'static str },
    #[error("line {line}: unknown tag '{tag}' (expected one of {})", tag_names())]
    UnknownTag { line: u64, tag: String },
    #[error("line {line}: size {value} {reason}")]
    BadSize { line: u64, value: String, reason: &'static str },
    #[error("line {line}: record_stream of id {id}, which is not live{}", freed_at_note(*.freed_at))]
    RecordStreamNotLive { line: u64, id: u64, freed_at: Option<u64> },
    #[error("line {line}: device {device} is out of range: device indices go from 0 to {}", MAX_DEVICES - 1)]
    BadDevice { line: u64, device: u64 },
    #[error("line {line}: free of id {id}, which is not live{}", freed_at_note(*.freed_at))]
    NotLive { line: u64, id: u64, freed_at: Option<u64> },
    #[error("line {line}: alloc of id {id}, which is already live (allocated at line {allocated_at}{}); free it first", if *.failed { ", where it ran out of memory" } else { "" })]
    IdInUse { line: u64, id: u64, allocated_at: u64, failed: bool },
    #[error("the capacity of {capacity_bytes} bytes is too large: at most {MAX_BYTES} bytes (1 PiB) can be simulated")]
    CapacityTooLarge { capacity_bytes: u64 },
    #[error("cannot set up the allocator: {0}")]
    Setup(#[source] AllocError),
    #[error("line {line}: {source}")]
    Allocator {
        line: u64,
        #[source]
        source: AllocError,
    },
}

impl ReplayError {
    /// The 1-based trace line the error is about, when there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            ReplayError::Io { line, .. }
            | ReplayError::LineTooLong { line, .. }
            | ReplayError::Json { line, .. }
            | ReplayError::UnknownOp { line, .. }
            | ReplayError::MissingField { line, .. }
            | ReplayError::UnknownTag { line, .. }
            | ReplayError::BadSize { line, .. }
            | ReplayError::BadDevice { line, .. }
            | ReplayError::RecordStreamNotLive { line, .. }
            | ReplayError::NotLive { line, .. }
            | ReplayError::IdInUse { line, .. }
            | ReplayError::Allocator { line, .. } => Some(*line),
            ReplayError::CapacityTooLarge { .. } | ReplayError::Setup(_) => None,
        }
    }
}

fn required_by(op: Option<&'static str>) -> String {
    op.map(|op| format!(" (required by op '{op}')")).unwrap_or_default()
}

fn tag_names() -> String {
    Tag::ALL.map(Tag::as_str).join(", ")
}

fn freed_at_note(freed_at: Option<u64>) -> String {
    match freed_at {
        Some(at) => format!(" (already freed at line {at})"),
        None => " (never allocated, or freed long ago)".to_owned(),
    }
}
