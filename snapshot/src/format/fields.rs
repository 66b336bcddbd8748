//! A trace entry's fields as the pickle holds them, in one place: the keys
//! the reader interns first ([`ENTRY_KEYS`], ids `K_*`), how each key's value
//! is taken ([`Fields::set`]), and the checks that make a [`TraceEntry`] of
//! them ([`Fields::entry`]: sizes 0..1 PiB, addresses non-negative, the keys
//! each action needs). Both ways of reading an entry end here: the entry
//! reader (straight from the buffer) and the general machine (from a dict).
//! A new trace entry field is a key here, a member of [`TraceEntry`]
//! (model.rs) and a line of the writer (export.rs).

use std::sync::Arc;

use super::model::{Action, TraceEntry};
use super::value::Value;
use vramlab_replay::MAX_BYTES;

/// The keys the reader interns first, in this order: their string ids are the
/// `K_*` constants below.
pub(crate) const ENTRY_KEYS: [&str; 7] = ["action", "addr", "size", "stream", "time_us", "frames", "device_free"];

pub(crate) const K_ACTION: u32 = 0;
pub(crate) const K_ADDR: u32 = 1;
pub(crate) const K_SIZE: u32 = 2;
pub(crate) const K_STREAM: u32 = 3;
pub(crate) const K_TIME_US: u32 = 4;
pub(crate) const K_FRAMES: u32 = 5;
pub(crate) const K_DEVICE_FREE: u32 = 6;

const HAS_ADDR: u8 = 1;
const HAS_SIZE: u8 = 2;
const HAS_DEVICE_FREE: u8 = 4;

/// What is wrong with a trace entry, found as it is read and reported when the
/// list holding it turns out to be a device's trace (the error names it by path).
#[derive(Debug, Clone)]
pub struct EntryProblem {
    /// The entry's position in its list.
    pub index: usize,
    /// Byte offset where the entry was completed.
    pub offset: u64,
    /// The entry's action, as written.
    pub action: Arc<str>,
    pub kind: ProblemKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ProblemKind {
    /// `size`, `addr` out of range.
    Absurd { field: &'static str, value: i128 },
    /// A key the action needs is absent.
    Missing { field: &'static str },
}

impl ProblemKind {
    /// What the import's error says an entry with a [`ProblemKind::Missing`] lacks.
    pub(crate) fn missing_key(field: &str) -> &'static str {
        if field == "size" { "a 'size' key in the trace entry" } else { "an 'addr' key in the trace entry" }
    }
}

/// A trace entry's fields as read, before the checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    /// The action string's id (`u32::MAX`: none).
    pub(crate) action: u32,
    has: u8,
    /// The address, or for `oom` entries the device's free bytes. Integers
    /// beyond 64 bits are saturated (and then fail the range checks).
    addr: i64,
    size: i64,
    stream: i64,
    time_us: i64,
    /// The frames list's stack id.
    pub(crate) frames: u32,
}

impl Fields {
    pub(crate) const EMPTY: Fields =
        Fields { action: u32::MAX, has: 0, addr: 0, size: 0, stream: 0, time_us: 0, frames: 0 };

    /// Whether key `key` (a string id) holds a number [`Fields::set`] takes.
    #[inline(always)]
    pub(crate) fn is_number(key: u32) -> bool {
        matches!(key, K_ADDR | K_SIZE | K_STREAM | K_TIME_US | K_DEVICE_FREE)
    }

    /// Sets the number under key `key` (a string id; keys other than the
    /// numeric fields are ignored); `Err(key name)` when `v` is not a number.
    #[inline(always)]
    pub(crate) fn set(&mut self, key: u32, v: Value) -> Result<(), &'static str> {
        let int = |name: &'static str| match v {
            Value::Int(n) => Ok(n),
            Value::BigInt(neg) => Ok(if neg { i64::MIN } else { i64::MAX }),
            Value::Bool(b) => Ok(b as i64),
            _ => Err(name),
        };
        match key {
            K_ADDR => {
                let n = int("addr")?;
                if self.has & HAS_DEVICE_FREE == 0 {
                    self.addr = n;
                }
                self.has |= HAS_ADDR;
            }
            K_SIZE => {
                self.size = int("size")?;
                self.has |= HAS_SIZE;
            }
            K_DEVICE_FREE => {
                self.addr = int("device_free")?;
                self.has |= HAS_DEVICE_FREE;
            }
            K_STREAM => self.stream = int("stream")?,
            // Integral or not, a time is a time.
            K_TIME_US => {
                self.time_us = match v {
                    Value::Float(x) => x as i64,
                    _ => int("time_us")?.max(0),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The entry the fields make for `action`, and what is wrong with it.
    #[inline]
    pub(crate) fn entry(&self, action: Action) -> (TraceEntry, Option<ProblemKind>) {
        let mut problem = None;
        let size = match (self.has & HAS_SIZE != 0).then_some(self.size) {
            Some(s) if (0..=MAX_BYTES as i64).contains(&s) => s as u64,
            Some(s) => {
                problem = Some(ProblemKind::Absurd { field: "size", value: s as i128 });
                0
            }
            None if matches!(action, Action::Other | Action::Snapshot | Action::EmptyCache) => 0,
            None => {
                problem = Some(ProblemKind::Missing { field: "size" });
                0
            }
        };
        let addr = match (action, self.has & (HAS_ADDR | HAS_DEVICE_FREE) != 0) {
            (Action::Oom, true) => self.addr.max(0) as u64,
            (_, true) if self.addr >= 0 => self.addr as u64,
            (_, true) => {
                problem.get_or_insert(ProblemKind::Absurd { field: "addr", value: self.addr as i128 });
                0
            }
            (
                Action::Alloc
                | Action::FreeRequested
                | Action::FreeCompleted
                | Action::SegmentAlloc
                | Action::SegmentFree,
                false,
            ) => {
                problem.get_or_insert(ProblemKind::Missing { field: "addr" });
                0
            }
            _ => 0,
        };
        let entry = TraceEntry { action, addr, size, stream: self.stream, time_us: self.time_us, frames: self.frames };
        (entry, problem)
    }
}
