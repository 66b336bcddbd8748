//! What goes wrong reading a snapshot: [`SnapshotError`], every variant naming
//! where (a byte offset, or a path such as `device_traces[0][17].size`) and
//! what was expected there.

use thiserror::Error;

/// A file that cannot be read as a memory snapshot. Every variant says where
/// (a byte offset into the pickle, or a path such as `device_traces[0][17].size`)
/// and what was expected there.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("cannot read the snapshot at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "not a pickle: it starts with {found}; a PyTorch memory snapshot starts with the pickle PROTO opcode (0x80)"
    )]
    NotAPickle { found: String },
    #[error("pickle protocol {protocol} is not one PyTorch writes (expected 2 to 5)")]
    Protocol { protocol: u8 },
    #[error(
        "the pickle ends at byte {offset} in the middle of {what}; the file is truncated (was the dump interrupted?)"
    )]
    Truncated { offset: u64, what: &'static str },
    #[error("byte {offset}: pickle opcode {opcode:#04x} ({name}) {why}")]
    Opcode { offset: u64, opcode: u8, name: &'static str, why: &'static str },
    #[error("byte {offset}: malformed pickle: {what}")]
    Malformed { offset: u64, what: String },
    #[error("byte {offset}: {what} of {bytes} bytes is absurd (the limit is {limit} bytes); the file is corrupt")]
    TooLong { offset: u64, what: &'static str, bytes: u64, limit: u64 },
    #[error("{path}: expected {expected}, found {found}")]
    Shape { path: String, expected: &'static str, found: String },
    #[error("{path}: {value} is not a plausible byte count (expected 0 to 1 PiB); the snapshot is corrupt")]
    AbsurdSize { path: String, value: i128 },
}
