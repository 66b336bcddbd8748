//! The reader's side of reading and replaying at once (`replay/overlap.rs`):
//! the [`Message`]s the reading thread sends the replaying one, the
//! [`Streamer`] that sends the first device trace's entries in chunks as they
//! are read instead of keeping them, and what each new stack's frames say of a
//! segment free made under it ([`stack_flags`], worked out on the reading
//! thread so that the replay need not wait for the frames).

use std::sync::mpsc::SyncSender;

use super::error::SnapshotError;
use super::model::{Frame, Snapshot, TraceEntry};

/// What the reading thread sends the replaying one.
pub(crate) enum Message {
    /// The entries that follow are those of `device_traces[device]`.
    Start { device: usize },
    /// More of them, and what each stack interned since the last message
    /// names ([`stack_flags`], by stack id in order).
    Entries { entries: Vec<TraceEntry>, stack_flags: Vec<u8> },
    /// The snapshot, read: the sent trace left empty, and its device.
    Done(Box<Result<(Snapshot, Option<usize>), SnapshotError>>),
}

/// How many entries go to the replay at a time.
const STREAM_CHUNK: usize = 1 << 16;

/// Sends the entries of the first device trace read to a replay on another
/// thread as they are read, with what each new stack's frames say
/// ([`stack_flags`]), instead of keeping them.
pub(crate) struct Streamer {
    tx: SyncSender<Message>,
    /// Whether the trace to send is chosen (the first list to get entries, if
    /// it is an item of `device_traces`).
    decided: bool,
    list: Option<u32>,
    /// Its index in `device_traces`.
    pub(crate) device: Option<usize>,
    buf: Vec<TraceEntry>,
    stacks_sent: usize,
}

impl Streamer {
    pub(crate) fn new(tx: SyncSender<Message>) -> Streamer {
        Streamer { tx, decided: false, list: None, device: None, buf: Vec::new(), stacks_sent: 0 }
    }

    /// Whether the entries of list `list` are the ones sent.
    #[inline]
    pub(crate) fn sends(&self, list: u32) -> bool {
        self.list == Some(list)
    }

    /// Buffers `entries` to send; whether a chunk is full (then [`Streamer::flush`]).
    #[inline]
    pub(crate) fn push(&mut self, entries: &[TraceEntry]) -> bool {
        self.buf.extend_from_slice(entries);
        self.buf.len() >= STREAM_CHUNK
    }

    /// Sends the entries buffered, with the flags of the stacks interned since
    /// the last send (`stacks` and `frames`: the reader's interned stacks and frames).
    pub(crate) fn flush(&mut self, stacks: &[Box<[u32]>], frames: &[Frame]) {
        if self.buf.is_empty() {
            return;
        }
        let stack_flags = stacks[self.stacks_sent..]
            .iter()
            .map(|s| self::stack_flags(s.iter().map(|&f| &frames[f as usize])))
            .collect();
        self.stacks_sent = stacks.len();
        let entries = std::mem::take(&mut self.buf);
        // A replay that went away has panicked; its thread's join says so.
        let _ = self.tx.send(Message::Entries { entries, stack_flags });
    }

    /// Whether a trace to send is still to be chosen.
    #[inline]
    pub(crate) fn choosing(&self) -> bool {
        !self.decided
    }

    /// Chooses list `list`, item `device` of `device_traces` (`None`: it is
    /// not one), as the trace to send, if none is chosen yet; `fresh`: the
    /// list has no entries yet (the replay must get them all).
    pub(crate) fn choose(&mut self, list: u32, device: Option<usize>, fresh: bool) {
        if self.decided {
            return;
        }
        self.decided = true;
        if let Some(device) = device
            && fresh
            && self.tx.send(Message::Start { device }).is_ok()
        {
            self.list = Some(list);
            self.device = Some(device);
        }
    }
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer").field("device", &self.device).field("buffered", &self.buf.len()).finish()
    }
}

/// What a stack's frames say about a segment free made under it ([`stack_flags`]).
pub(crate) const NAMES_EMPTY_CACHE: u8 = 1;
pub(crate) const NAMES_ALLOCATOR_RELEASE: u8 = 2;

/// Whether a stack names a call of `empty_cache` (Python) or c10's
/// `emptyCache` ([`NAMES_EMPTY_CACHE`]), and whether it names the allocator's
/// own release paths ([`NAMES_ALLOCATOR_RELEASE`]).
pub(crate) fn stack_flags<'a>(frames: impl Iterator<Item = &'a Frame>) -> u8 {
    let mut flags = 0;
    for f in frames {
        if &*f.name == "empty_cache" || f.name.contains("emptyCache") {
            flags |= NAMES_EMPTY_CACHE;
        }
        if f.name.contains("garbage_collect_cached_blocks")
            || f.name.contains("release_cached_blocks")
            || f.name.contains("release_available_cached_blocks")
            || f.name.contains("DeviceCachingAllocator::malloc")
        {
            flags |= NAMES_ALLOCATOR_RELEASE;
        }
    }
    flags
}
