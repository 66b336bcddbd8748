//! A streaming reader of the pickle subset that memory snapshots use (protocols
//! 2 to 5: dicts, lists, tuples, strings, integers, floats, booleans, None, the
//! memo, framing). It runs the pickle machine over a [`Read`] with a small
//! buffer; values are 16-byte handles into a [`Heap`]; strings are interned.
//!
//! Trace entries never become dicts. Where a dict starts, [`Machine::entry`]
//! reads its keys and values straight from the buffer when they are what a
//! trace entry holds (memoized keys, integers, an action string, a frames list
//! of frames already seen) and writes a finished [`TraceEntry`]; anything else
//! (a frame seen for the first time, an unknown value type, the buffer's end)
//! sends that dict through the general machine instead, which ends in the same
//! conversion ([`Heap::entry_of`]). Entries appended to a list go into that
//! list's [`EntryList`]. The memo keeps 4 bytes a slot, and an entry or a
//! frames list read this way leaves no container behind, so the memory a trace
//! costs is its entries' (40 bytes each) and two memo slots each.
//!
//! A time window ([`ReadOptions::from_us`]) is applied as entries are appended:
//! the leading entries before it are counted, not kept. Classes, reductions and
//! out-of-band buffers are refused: a snapshot has none.

use rustc_hash::FxHashMap as HashMap;
use std::io::{ErrorKind, Read};

use std::sync::mpsc::SyncSender;

use super::error::SnapshotError;
pub use super::fields::{EntryProblem, ProblemKind};
use super::fields::{Fields, K_ACTION, K_FRAMES};
pub use super::heap::{EntryList, Heap};
use super::stream::{Message, Streamer};
pub use super::value::Value;

/// The longest string or bytes object accepted (a frame name, a conf string…).
const MAX_STRING_BYTES: u64 = 64 << 20;
/// The most memo slots a `BINPUT`/`LONG_BINPUT` index may name.
const MAX_MEMO: u64 = 1 << 32;
/// The input buffer: reads this large bypass a caller's `BufReader` (1 MiB
/// in vramlab's commands) instead of being copied through it.
const INPUT_BUFFER: usize = 2 << 20;
/// How many bytes the entry reader wants in the buffer before it tries a dict
/// (an entry with a 40-frame stack is well under 1 KiB).
const ENTRY_LOOKAHEAD: usize = 4096;

/// What [`read_with`] does besides reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReadOptions {
    /// Drop the leading entries of each trace whose `time_us` is before this.
    pub from_us: Option<i64>,
}

/// The memo: 4 bytes a slot (a tag and a 28-bit index), values that do not
/// fit that (numbers, which Python never memoizes) in a side table, and
/// indices far beyond the slots' end in a sparse table.
#[derive(Debug, Default)]
struct Memo {
    slots: Vec<u32>,
    others: HashMap<u64, Value>,
}

const TAG_BITS: u32 = 28;
const ID_MASK: u32 = (1 << TAG_BITS) - 1;
const T_EMPTY: u32 = 0;
const T_STR: u32 = 1;
const T_LIST: u32 = 2;
const T_DICT: u32 = 3;
const T_TUPLE: u32 = 4;
const T_SET: u32 = 5;
const T_STACK: u32 = 6;
/// A trace entry, appended where it was read: it cannot be fetched again.
const T_ENTRY: u32 = 7;
const T_OTHER: u32 = 8;

impl Memo {
    fn pack(v: Value) -> Option<u32> {
        let (tag, id) = match v {
            Value::Str(i) => (T_STR, i),
            Value::List(i) => (T_LIST, i),
            Value::Dict(i) => (T_DICT, i),
            Value::Tuple(i) => (T_TUPLE, i),
            Value::Set(i) => (T_SET, i),
            Value::Stack(i) => (T_STACK, i),
            Value::Entry(_) => (T_ENTRY, 0),
            _ => return None,
        };
        (id <= ID_MASK).then_some(tag << TAG_BITS | id)
    }

    fn put(&mut self, index: u64, v: Value) {
        let slot = match Memo::pack(v) {
            Some(s) => s,
            None => {
                self.others.insert(index, v);
                T_OTHER << TAG_BITS
            }
        };
        match (index as usize).cmp(&self.slots.len()) {
            std::cmp::Ordering::Less => self.slots[index as usize] = slot,
            std::cmp::Ordering::Equal => self.slots.push(slot),
            // Python numbers its memo slots in order; any other index goes
            // to the side table, so a stray index cannot make the table huge.
            std::cmp::Ordering::Greater => {
                self.others.insert(index, v);
            }
        }
    }

    /// The slot's packed value (`T_OTHER` and beyond-the-end slots: [`Memo::get`]).
    #[inline]
    fn raw(&self, index: u64) -> u32 {
        self.slots.get(index as usize).copied().unwrap_or(T_EMPTY)
    }

    fn get(&self, index: u64) -> Result<Value, &'static str> {
        let slot = self.raw(index);
        let id = slot & ID_MASK;
        Ok(match slot >> TAG_BITS {
            T_STR => Value::Str(id),
            T_LIST => Value::List(id),
            T_DICT => Value::Dict(id),
            T_TUPLE => Value::Tuple(id),
            T_SET => Value::Set(id),
            T_STACK => Value::Stack(id),
            T_ENTRY => return Err("a trace entry already read"),
            _ => return self.others.get(&index).copied().ok_or("never put"),
        })
    }
}

/// The buffered input, with the byte offset for messages.
struct Input<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Offset of `buf[0]` in the file.
    base: u64,
}

impl<R: Read> Input<R> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Makes at least `n` bytes available from `pos`; false at the end of the file.
    fn fill(&mut self, n: usize) -> Result<bool, SnapshotError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < n {
            // Grow with the data that actually arrives, so a length field that
            // promises gigabytes in a short file costs nothing.
            if self.end == self.buf.len() {
                let len = (self.buf.len() * 2).min(n.next_power_of_two()).max(n).max(1 << 16);
                self.buf.resize(len, 0);
            }
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => return Err(SnapshotError::Io { offset: self.base + self.end as u64, source }),
            }
        }
        Ok(true)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], SnapshotError> {
        if !self.fill(n)? {
            return Err(SnapshotError::Truncated { offset: self.base + self.end as u64, what });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn byte(&mut self, what: &'static str) -> Result<u8, SnapshotError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1, what)?[0])
    }

    #[inline]
    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotError> {
        if self.pos + 4 <= self.end {
            let b = &self.buf[self.pos..self.pos + 4];
            self.pos += 4;
            return Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap_or_default()))
    }

    /// A text line (protocol 0 opcodes), without its newline.
    fn line(&mut self, what: &'static str) -> Result<Vec<u8>, SnapshotError> {
        let mut out = Vec::new();
        loop {
            let b = self.byte(what)?;
            if b == b'\n' {
                return Ok(out);
            }
            if out.len() > 4096 {
                return Err(SnapshotError::TooLong { offset: self.offset(), what, bytes: 4096, limit: 4096 });
            }
            out.push(b);
        }
    }
}

/// The result of running the pickle machine: the top value and everything it refers to.
#[derive(Debug)]
pub struct Pickle {
    pub protocol: u8,
    pub top: Value,
    pub heap: Heap,
}

/// The stack holds values and marks.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Mark,
    V(Value),
}

/// Runs the pickle in `input` to its STOP opcode.
pub fn read<R: Read>(input: R) -> Result<Pickle, SnapshotError> {
    read_with(input, ReadOptions::default())
}

/// [`read`], with a time window applied to the trace entries as they are read.
pub fn read_with<R: Read>(input: R, opts: ReadOptions) -> Result<Pickle, SnapshotError> {
    run_machine(input, opts, true, None)
}

/// [`read_with`], sending the entries of the first device trace to `tx` as
/// they are read ([`Streamer`]) instead of keeping them.
pub(crate) fn read_streaming<R: Read>(
    input: R,
    opts: ReadOptions,
    tx: SyncSender<Message>,
) -> Result<Pickle, SnapshotError> {
    run_machine(input, opts, true, Some(Streamer::new(tx)))
}

/// [`read_with`] without the entry reader: every dict through the general
/// machine (what the entry reader must agree with).
#[cfg(test)]
pub(crate) fn read_general<R: Read>(input: R, opts: ReadOptions) -> Result<Pickle, SnapshotError> {
    run_machine(input, opts, false, None)
}

fn run_machine<R: Read>(
    input: R,
    opts: ReadOptions,
    entry_reader: bool,
    stream: Option<Streamer>,
) -> Result<Pickle, SnapshotError> {
    let mut inp = Input { inner: input, buf: vec![0; INPUT_BUFFER], pos: 0, end: 0, base: 0 };
    if !inp.fill(2)? {
        let found = if inp.end == 0 { "nothing (the file is empty)".to_owned() } else { "1 byte".to_owned() };
        return Err(SnapshotError::NotAPickle { found });
    }
    if inp.buf[0] != 0x80 {
        let head: String = inp.buf[..inp.end.min(8)]
            .iter()
            .map(|&b| if b.is_ascii_graphic() { (b as char).to_string() } else { format!("\\x{b:02x}") })
            .collect();
        return Err(SnapshotError::NotAPickle { found: format!("\"{head}\"") });
    }
    let protocol = inp.buf[1];
    if !(2..=5).contains(&protocol) {
        return Err(SnapshotError::Protocol { protocol });
    }
    inp.pos = 2;
    let mut heap = Heap::new(opts.from_us);
    heap.stream = stream;
    let mut m = Machine { inp, heap, memo: Memo::default(), undo: Vec::new(), entry_reader };
    let top = m.run()?;
    m.heap.flush_stream();
    Ok(Pickle { protocol, top, heap: m.heap })
}

/// The pickle machine's state besides its stack.
struct Machine<R> {
    inp: Input<R>,
    heap: Heap,
    memo: Memo,
    /// The entry reader's memo puts (index, the slot before), to undo them
    /// when the dict is left to the general machine.
    undo: Vec<(u64, Option<u32>)>,
    /// Whether dicts are tried as trace entries first ([`Machine::entry`]).
    entry_reader: bool,
}

/// Returns a [`SnapshotError::Malformed`] at byte `$off` saying what, from
/// the function it is used in.
macro_rules! malformed {
    ($off:expr, $($t:tt)*) => {
        return Err(SnapshotError::Malformed { offset: $off, what: format!($($t)*) })
    };
}

/// A length field of `n` bytes at byte `at` within [`MAX_STRING_BYTES`].
fn fits(at: u64, what: &'static str, n: u64) -> Result<(), SnapshotError> {
    if n > MAX_STRING_BYTES {
        return Err(SnapshotError::TooLong { offset: at, what, bytes: n, limit: MAX_STRING_BYTES });
    }
    Ok(())
}

/// The slot a memo get opcode (BINGET, LONG_BINGET) at `b[*i]` names, `*i`
/// moved past it; `None` (and `*i` unmoved) for anything else.
#[inline]
fn memo_get_at(b: &[u8], i: &mut usize) -> Option<u64> {
    let (index, len) = match *b.get(*i)? {
        b'h' => (*b.get(*i + 1)? as u64, 2),
        b'j' => (u32::from_le_bytes(b.get(*i + 1..*i + 5)?.try_into().ok()?) as u64, 5),
        _ => return None,
    };
    *i += len;
    Some(index)
}

/// A memo put opcode at `b[*i]`, if there is one: its index.
#[inline]
fn put_at(b: &[u8], i: &mut usize, memo_len: u64) -> Option<Option<u64>> {
    match *b.get(*i)? {
        0x94 => {
            *i += 1;
            Some(Some(memo_len))
        }
        b'q' => {
            let n = *b.get(*i + 1)?;
            *i += 2;
            Some(Some(n as u64))
        }
        b'r' => {
            let n = u32::from_le_bytes(b.get(*i + 1..*i + 5)?.try_into().ok()?);
            *i += 5;
            Some(Some(n as u64))
        }
        _ => Some(None),
    }
}

impl<R: Read> Machine<R> {
    /// A string at `b[*i]`: a memo get of one, or a short one written out
    /// (interned, its memo put queued).
    #[inline]
    fn entry_str(&mut self, b: &[u8], i: &mut usize) -> Option<u32> {
        let index = match *b.get(*i)? {
            b'h' | b'j' => memo_get_at(b, i)?,
            0x8c | b'X' => {
                let (len, head) = if b[*i] == 0x8c {
                    (*b.get(*i + 1)? as usize, 2)
                } else {
                    (u32::from_le_bytes(b.get(*i + 1..*i + 5)?.try_into().ok()?) as usize, 5)
                };
                let s = std::str::from_utf8(b.get(*i + head..*i + head + len)?).ok()?;
                let id = self.heap.intern(s);
                *i += head + len;
                if let Some(index) = put_at(b, i, self.memo.slots.len() as u64)? {
                    self.entry_put(index, Value::Str(id));
                }
                return Some(id);
            }
            _ => return None,
        };
        let slot = self.memo.raw(index);
        (slot >> TAG_BITS == T_STR).then_some(slot & ID_MASK)
    }

    /// An integer at `b[*i]`.
    #[inline]
    fn entry_int(b: &[u8], i: &mut usize) -> Option<Value> {
        let v = match *b.get(*i)? {
            b'K' => {
                *i += 2;
                Value::Int(*b.get(*i - 1)? as i64)
            }
            b'M' => {
                let n = u16::from_le_bytes(b.get(*i + 1..*i + 3)?.try_into().ok()?);
                *i += 3;
                Value::Int(n as i64)
            }
            b'J' => {
                let n = i32::from_le_bytes(b.get(*i + 1..*i + 5)?.try_into().ok()?);
                *i += 5;
                Value::Int(n as i64)
            }
            0x8a => {
                let n = *b.get(*i + 1)? as usize;
                let v = match b.get(*i + 2..*i + 10) {
                    // One 8-byte load, the bytes past the number shifted out.
                    Some(word) if (1..=8).contains(&n) => {
                        let shift = 64 - 8 * n as u32;
                        Value::Int((i64::from_le_bytes(word.try_into().ok()?) << shift) >> shift)
                    }
                    _ => long_value(b.get(*i + 2..*i + 2 + n)?),
                };
                *i += 2 + n;
                v
            }
            b'G' => {
                let x = f64::from_be_bytes(b.get(*i + 1..*i + 9)?.try_into().ok()?);
                *i += 9;
                Value::Float(x)
            }
            b'N' => {
                *i += 1;
                Value::None
            }
            0x88 | 0x89 => {
                *i += 1;
                Value::Bool(b[*i - 1] == 0x88)
            }
            _ => return None,
        };
        Some(v)
    }

    /// A frame dict fetched from the memo at `b[*i]`: its frame id.
    #[inline]
    fn entry_frame(&mut self, b: &[u8], i: &mut usize) -> Option<u32> {
        let index = memo_get_at(b, i)?;
        let slot = self.memo.raw(index);
        if slot >> TAG_BITS != T_DICT {
            return None;
        }
        self.heap.frame_of(Value::Dict(slot & ID_MASK)).ok()
    }

    /// A frames list at `b[*i]`: fetched from the memo, or written out with
    /// frames already seen. Its stack id.
    fn entry_frames(&mut self, b: &[u8], i: &mut usize) -> Option<u32> {
        match *b.get(*i)? {
            b'h' | b'j' => {
                let slot = self.memo.raw(memo_get_at(b, i)?);
                match slot >> TAG_BITS {
                    T_STACK => Some(slot & ID_MASK),
                    T_LIST => self.heap.stack_of(Value::List(slot & ID_MASK)).ok(),
                    _ => None,
                }
            }
            b'N' => {
                *i += 1;
                Some(0)
            }
            b']' => {
                *i += 1;
                let put = put_at(b, i, self.memo.slots.len() as u64)?;
                let mut ids = std::mem::take(&mut self.heap.scratch);
                ids.clear();
                let ok = match *b.get(*i)? {
                    b'(' => {
                        *i += 1;
                        loop {
                            if *b.get(*i)? == b'e' {
                                *i += 1;
                                break true;
                            }
                            match self.entry_frame(b, i) {
                                Some(f) => ids.push(f),
                                None => break false,
                            }
                        }
                    }
                    b'h' | b'j' => match self.entry_frame(b, i) {
                        Some(f) if b.get(*i) == Some(&b'a') => {
                            *i += 1;
                            ids.push(f);
                            true
                        }
                        _ => false,
                    },
                    // An empty list.
                    _ => true,
                };
                let id = ok.then(|| self.heap.intern_stack(&ids));
                self.heap.scratch = ids;
                let id = id?;
                if let Some(index) = put {
                    self.entry_put(index, Value::Stack(id));
                }
                Some(id)
            }
            _ => None,
        }
    }

    /// A memo put by the entry reader, undone if the entry is left to the
    /// general machine.
    #[inline]
    fn entry_put(&mut self, index: u64, v: Value) {
        self.undo.push((index, self.memo.slots.get(index as usize).copied()));
        self.memo.put(index, v);
    }

    /// At an EMPTY_DICT (already consumed): the trace entry it starts, read
    /// straight from the buffer, or `None` (nothing consumed, nothing changed
    /// but interned strings and frames) for the general machine to read it.
    fn entry(&mut self, at: u64) -> Result<Option<Value>, SnapshotError> {
        self.inp.fill(ENTRY_LOOKAHEAD)?;
        // The buffer is moved out for the reading (no fill happens meanwhile).
        let buf = std::mem::take(&mut self.inp.buf);
        let b = &buf[self.inp.pos..self.inp.end];
        self.undo.clear();
        let mut i = 0;
        let read = self.entry_fields(b, &mut i);
        self.inp.buf = buf;
        match read {
            Some(f) => {
                self.inp.pos += i;
                Ok(Some(self.heap.finish(&f, at)))
            }
            None => {
                // Undo the memo puts, last first.
                while let Some((index, old)) = self.undo.pop() {
                    match old {
                        Some(slot) => self.memo.slots[index as usize] = slot,
                        None if index as usize + 1 == self.memo.slots.len() => {
                            self.memo.slots.pop();
                        }
                        None => {
                            self.memo.others.remove(&index);
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// The fields of the entry in `b` (from after its EMPTY_DICT to its
    /// SETITEMS); `None` for a dict this reader leaves to the general machine
    /// (which also reports a field of the wrong type).
    #[inline(always)]
    fn entry_fields(&mut self, b: &[u8], i: &mut usize) -> Option<Fields> {
        let dict_put = put_at(b, i, self.memo.slots.len() as u64)?;
        if let Some(index) = dict_put {
            // An entry cannot be fetched again: its slot says so.
            self.entry_put(index, Value::Entry(0));
        }
        if *b.get(*i)? != b'(' {
            return None;
        }
        *i += 1;
        let mut f = Fields::EMPTY;
        loop {
            if *b.get(*i)? == b'u' {
                *i += 1;
                break;
            }
            let key = self.entry_str(b, i)?;
            match key {
                K_ACTION => f.action = self.entry_str(b, i)?,
                K_FRAMES => f.frames = self.entry_frames(b, i)?,
                // A number: a field's (a value of another type is left to
                // the general machine, which reports it) or one this reader
                // does not use; else a string.
                _ => match Machine::<R>::entry_int(b, i) {
                    Some(v) => f.set(key, v).ok()?,
                    None if Fields::is_number(key) => return None,
                    None => {
                        self.entry_str(b, i)?;
                    }
                },
            }
        }
        (f.action != u32::MAX).then_some(f)
    }

    /// The pickle machine: every opcode to STOP, its value returned.
    fn run(&mut self) -> Result<Value, SnapshotError> {
        let mut stack: Vec<Slot> = Vec::with_capacity(256);
        let mut sbuf: Vec<u8> = Vec::new();
        loop {
            let at = self.inp.offset();
            let op = self.inp.byte("an opcode")?;
            let v = match op {
                b'.' => return pop(&mut stack, at, "STOP with nothing to return"),
                0x95 => {
                    self.inp.u64("a FRAME length")?;
                    continue;
                }
                0x80 => {
                    self.inp.byte("a PROTO version")?;
                    continue;
                }
                b'N' | 0x88 | 0x89 | b'K' | b'M' | b'J' | 0x8a | 0x8b | b'I' | b'L' | b'G' | b'F' => {
                    self.number(op, at)?
                }
                b'X' | 0x8c | 0x8d | b'U' | b'T' | b'B' | b'C' | 0x8e | 0x96 => self.string(op, at, &mut sbuf)?,
                b']' | b'}' | b')' | 0x8f => self.empty_container(op, at)?,
                0x85..=0x87 => self.small_tuple(op, at, &mut stack)?,
                b'(' => {
                    stack.push(Slot::Mark);
                    continue;
                }
                b't' | b'l' | b'd' | 0x91 => self.build(op, at, &mut stack)?,
                b'a' | b'e' | 0x90 => {
                    self.append(op, at, &mut stack)?;
                    continue;
                }
                b's' | b'u' => {
                    self.set_items(op, at, &mut stack)?;
                    continue;
                }
                b'0' => {
                    stack.pop();
                    continue;
                }
                b'1' => {
                    let m = mark(&stack, at, op)?;
                    stack.truncate(m);
                    continue;
                }
                b'2' => {
                    let top = pop(&mut stack, at, "DUP")?;
                    stack.push(Slot::V(top));
                    top
                }
                b'q' | b'r' | 0x94 | b'p' => {
                    self.memo_put(op, at, &stack)?;
                    continue;
                }
                b'h' | b'j' | b'g' => self.memo_get(op, at)?,
                _ => return Err(refused(op, at)),
            };
            stack.push(Slot::V(v));
            if stack.len() > (1 << 24) {
                malformed!(at, "more than 16 million values on the stack; not a snapshot");
            }
        }
    }

    /// The numbers: None, booleans, integers of every width and text, floats.
    #[inline]
    fn number(&mut self, op: u8, at: u64) -> Result<Value, SnapshotError> {
        let inp = &mut self.inp;
        Ok(match op {
            b'N' => Value::None,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            b'K' => Value::Int(inp.byte("a BININT1")? as i64),
            b'M' => {
                let b = inp.take(2, "a BININT2")?;
                Value::Int(u16::from_le_bytes([b[0], b[1]]) as i64)
            }
            b'J' => Value::Int(inp.u32("a BININT")? as i32 as i64),
            0x8a | 0x8b => {
                let n = if op == 0x8a { inp.byte("a LONG1 length")? as u64 } else { inp.u32("a LONG4 length")? as u64 };
                fits(at, "an integer", n)?;
                let b = inp.take(n as usize, "a long integer")?;
                long_value(b)
            }
            b'I' | b'L' => {
                let line = inp.line("an INT or LONG")?;
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches('L');
                match text {
                    "00" => Value::Bool(false),
                    "01" => Value::Bool(true),
                    t => match t.parse::<i64>() {
                        Ok(n) => Value::Int(n),
                        Err(_) if t.parse::<i128>().is_ok() || t.bytes().skip(1).all(|c| c.is_ascii_digit()) => {
                            Value::BigInt(t.starts_with('-'))
                        }
                        Err(_) => malformed!(at, "INT opcode with '{t}', not an integer"),
                    },
                }
            }
            b'G' => Value::Float(f64::from_be_bytes(inp.take(8, "a BINFLOAT")?.try_into().unwrap_or_default())),
            _ => {
                let line = inp.line("a FLOAT")?;
                match String::from_utf8_lossy(&line).parse::<f64>() {
                    Ok(f) => Value::Float(f),
                    Err(_) => malformed!(at, "FLOAT opcode without a number"),
                }
            }
        })
    }

    /// The strings and bytes objects (`sbuf`: scratch for Python 2 strings).
    #[inline]
    fn string(&mut self, op: u8, at: u64, sbuf: &mut Vec<u8>) -> Result<Value, SnapshotError> {
        let (inp, heap) = (&mut self.inp, &mut self.heap);
        let n = match op {
            0x8c | b'U' | b'C' => inp.byte("a string length")? as u64,
            0x8d | 0x8e | 0x96 => inp.u64("a string length")?,
            _ => inp.u32("a string length")? as u64,
        };
        fits(at, "a string", n)?;
        let bytes = inp.take(n as usize, "a string")?;
        Ok(match op {
            b'X' | 0x8c | 0x8d => match std::str::from_utf8(bytes) {
                Ok(s) => Value::Str(heap.intern(s)),
                Err(_) => malformed!(at, "a str that is not UTF-8"),
            },
            // Python 2 strings read as text where they are text.
            b'U' | b'T' => {
                sbuf.clear();
                sbuf.extend_from_slice(bytes);
                Value::Str(heap.intern(&String::from_utf8_lossy(sbuf)))
            }
            _ => Value::Bytes,
        })
    }

    /// EMPTY_LIST, EMPTY_DICT (a trace entry, where the entry reader reads
    /// one), EMPTY_TUPLE, EMPTY_SET.
    #[inline]
    fn empty_container(&mut self, op: u8, at: u64) -> Result<Value, SnapshotError> {
        let heap = &mut self.heap;
        Ok(match op {
            b']' => {
                let list = heap.new_list();
                heap.lists.push(list);
                Value::List(heap.lists.len() as u32 - 1)
            }
            b'}' => match if self.entry_reader { self.entry(at)? } else { None } {
                Some(entry) => entry,
                None => {
                    let heap = &mut self.heap;
                    let dict = heap.new_dict();
                    heap.dicts.push(dict);
                    Value::Dict(heap.dicts.len() as u32 - 1)
                }
            },
            b')' => {
                heap.tuples.push(Box::new([]));
                Value::Tuple(heap.tuples.len() as u32 - 1)
            }
            _ => {
                heap.lists.push(Vec::new());
                Value::Set(heap.lists.len() as u32 - 1)
            }
        })
    }

    /// TUPLE1 to TUPLE3: the top items as a tuple.
    #[inline]
    fn small_tuple(&mut self, op: u8, at: u64, stack: &mut Vec<Slot>) -> Result<Value, SnapshotError> {
        let n = (op - 0x84) as usize;
        let mut items = vec![Value::None; n];
        for i in (0..n).rev() {
            items[i] = pop(stack, at, "TUPLE with too few items")?;
        }
        self.heap.tuples.push(items.into());
        Ok(Value::Tuple(self.heap.tuples.len() as u32 - 1))
    }

    /// TUPLE, LIST, DICT, FROZENSET: a container of the items above the top
    /// mark (a list's trace entries into its entry list).
    #[inline]
    fn build(&mut self, op: u8, at: u64, stack: &mut Vec<Slot>) -> Result<Value, SnapshotError> {
        let heap = &mut self.heap;
        let m = mark(stack, at, op)?;
        let items: Vec<Value> = stack
            .drain(m..)
            .skip(1)
            .map(|s| match s {
                Slot::V(v) => v,
                Slot::Mark => Value::None,
            })
            .collect();
        Ok(match op {
            b't' => {
                heap.tuples.push(items.into());
                Value::Tuple(heap.tuples.len() as u32 - 1)
            }
            b'l' | 0x91 => {
                // Entries in a list built at once (protocol 0/1 style).
                let list = heap.lists.len() as u32;
                let mut plain = Vec::with_capacity(items.len());
                for v in items {
                    match v {
                        Value::Entry(id) if op == b'l' => heap.append_entries(list, id, 1, at)?,
                        Value::Dict(d) if op == b'l' => match heap.entry_of(d, at)? {
                            Some((entry, problem)) => heap.push_entry(list, entry, problem),
                            None => plain.push(v),
                        },
                        v => plain.push(v),
                    }
                }
                heap.lists.push(plain);
                if op == b'l' { Value::List(list) } else { Value::Set(list) }
            }
            _ => {
                if !items.len().is_multiple_of(2) {
                    malformed!(at, "DICT with an odd number of items");
                }
                heap.dicts.push(items.chunks(2).map(|p| (p[0], p[1])).collect());
                Value::Dict(heap.dicts.len() as u32 - 1)
            }
        })
    }

    /// APPEND, APPENDS, ADDITEMS: the items into the list (or set) below
    /// them; trace entries into its entry list, a run of them in the order
    /// they were read at once.
    #[inline]
    fn append(&mut self, op: u8, at: u64, stack: &mut Vec<Slot>) -> Result<(), SnapshotError> {
        let heap = &mut self.heap;
        let (start, target_at) = if op == b'a' {
            (stack.len().saturating_sub(1), stack.len().saturating_sub(2))
        } else {
            let m = mark(stack, at, op)?;
            (m + 1, m.wrapping_sub(1))
        };
        let target = match stack.get(target_at) {
            Some(Slot::V(Value::List(l))) => *l,
            Some(Slot::V(Value::Set(l))) if op == 0x90 => *l,
            Some(Slot::V(v)) => malformed!(at, "APPEND to a {}, not a list", v.type_name()),
            _ => malformed!(at, "APPEND with no list below the items"),
        };
        if start > stack.len() || (op == b'a' && stack.len() < 2) {
            malformed!(at, "APPEND with nothing to append");
        }
        if heap.choosing_stream() && stack[start..].iter().any(|s| matches!(s, Slot::V(Value::Entry(_)))) {
            heap.choose_stream(target, trace_position(stack, target_at, heap));
        }
        // A run of entries in the order they were read goes in at once.
        let run = match (stack.get(start), stack.last()) {
            (Some(Slot::V(Value::Entry(a))), Some(Slot::V(Value::Entry(b))))
                if (b.wrapping_sub(*a) as usize) == stack.len() - start - 1 =>
            {
                Some(*a)
            }
            _ => None,
        };
        match run {
            Some(first) => heap.append_entries(target, first, stack.len() - start, at)?,
            None => {
                for &slot in &stack[start..] {
                    let Slot::V(v) = slot else { malformed!(at, "a mark among the items to append") };
                    match v {
                        Value::Entry(id) => heap.append_entries(target, id, 1, at)?,
                        Value::Dict(d) => match heap.entry_of(d, at)? {
                            Some((entry, problem)) => heap.push_entry(target, entry, problem),
                            None => heap.lists[target as usize].push(v),
                        },
                        v => heap.lists[target as usize].push(v),
                    }
                }
            }
        }
        // The items, and the mark for APPENDS/ADDITEMS.
        stack.truncate(if op == b'a' { start } else { start - 1 });
        Ok(())
    }

    /// SETITEM, SETITEMS: the key-value pairs into the dict below them.
    #[inline]
    fn set_items(&mut self, op: u8, at: u64, stack: &mut Vec<Slot>) -> Result<(), SnapshotError> {
        let start = if op == b's' { stack.len().saturating_sub(2) } else { mark(stack, at, op)? + 1 };
        let target_at = start.wrapping_sub(if op == b's' { 1 } else { 2 });
        let target = match stack.get(target_at) {
            Some(Slot::V(Value::Dict(d))) => *d,
            Some(Slot::V(v)) => malformed!(at, "SETITEM on a {}, not a dict", v.type_name()),
            _ => malformed!(at, "SETITEM with no dict below the items"),
        };
        if !(stack.len() - start).is_multiple_of(2) {
            malformed!(at, "SETITEMS with a key and no value");
        }
        let dict = &mut self.heap.dicts[target as usize];
        dict.reserve((stack.len() - start) / 2);
        for pair in stack[start..].chunks(2) {
            let (Slot::V(k), Slot::V(v)) = (pair[0], pair[1]) else { malformed!(at, "a mark among the items to set") };
            dict.push((k, v));
        }
        stack.truncate(if op == b's' { start } else { start - 1 });
        Ok(())
    }

    /// BINPUT, LONG_BINPUT, MEMOIZE, PUT: the top value into the memo.
    #[inline]
    fn memo_put(&mut self, op: u8, at: u64, stack: &[Slot]) -> Result<(), SnapshotError> {
        let inp = &mut self.inp;
        let index = match op {
            b'q' => inp.byte("a BINPUT index")? as u64,
            b'r' => inp.u32("a LONG_BINPUT index")? as u64,
            0x94 => self.memo.slots.len() as u64,
            _ => {
                let line = inp.line("a PUT index")?;
                match String::from_utf8_lossy(&line).parse::<u64>() {
                    Ok(n) => n,
                    Err(_) => malformed!(at, "PUT without an index"),
                }
            }
        };
        let top = match stack.last() {
            Some(Slot::V(v)) => *v,
            _ => malformed!(at, "a memo put with no value on the stack"),
        };
        if index >= MAX_MEMO {
            return Err(SnapshotError::TooLong { offset: at, what: "a memo index", bytes: index, limit: MAX_MEMO });
        }
        self.memo.put(index, top);
        Ok(())
    }

    /// BINGET, LONG_BINGET, GET: a value from the memo.
    #[inline]
    fn memo_get(&mut self, op: u8, at: u64) -> Result<Value, SnapshotError> {
        let inp = &mut self.inp;
        let index = match op {
            b'h' => inp.byte("a BINGET index")? as u64,
            b'j' => inp.u32("a LONG_BINGET index")? as u64,
            _ => {
                let line = inp.line("a GET index")?;
                String::from_utf8_lossy(&line).parse::<u64>().unwrap_or(u64::MAX)
            }
        };
        match self.memo.get(index) {
            Ok(v) => Ok(v),
            Err(why) => malformed!(at, "memo get of slot {index}, which was {why}"),
        }
    }
}

/// The top value of the stack, popped (`what`: the opcode's need, for the error).
#[inline]
fn pop(stack: &mut Vec<Slot>, at: u64, what: &str) -> Result<Value, SnapshotError> {
    match stack.pop() {
        Some(Slot::V(v)) => Ok(v),
        Some(Slot::Mark) => Err(SnapshotError::Malformed { offset: at, what: format!("{what}: found a mark") }),
        None => Err(SnapshotError::Malformed { offset: at, what: format!("{what}: the stack is empty") }),
    }
}

/// Index of the topmost mark, which opcode `op` at byte `at` needs.
#[inline]
fn mark(stack: &[Slot], at: u64, op: u8) -> Result<usize, SnapshotError> {
    stack.iter().rposition(|s| matches!(s, Slot::Mark)).ok_or_else(|| SnapshotError::Malformed {
        offset: at,
        what: format!("opcode {op:#04x} needs a mark and there is none"),
    })
}

/// The error for opcode `op` at byte `at`, which a snapshot cannot hold.
fn refused(op: u8, at: u64) -> SnapshotError {
    match op {
        b'c' | 0x93 | b'R' | b'b' | 0x81 | 0x92 | b'i' | b'o' => SnapshotError::Opcode {
            offset: at,
            opcode: op,
            name: opcode_name(op),
            why: "builds a Python object of a class; a memory snapshot holds only dicts, lists, strings and numbers (is this a snapshot from torch.cuda.memory._dump_snapshot?)",
        },
        0x97 | 0x98 => SnapshotError::Opcode {
            offset: at,
            opcode: op,
            name: opcode_name(op),
            why: "refers to an out-of-band buffer, which a snapshot file cannot carry",
        },
        _ => SnapshotError::Opcode {
            offset: at,
            opcode: op,
            name: "unknown",
            why: "is not a pickle opcode; the file is corrupt",
        },
    }
}

/// Which item of `device_traces` the list at `stack[at]` is being built as,
/// if it is one: the stack then holds the key, the outer list, its mark and
/// the lists before this one.
fn trace_position(stack: &[Slot], at: usize, heap: &Heap) -> Option<usize> {
    let outer = |k: usize| match (stack.get(k.checked_sub(2)?), stack.get(k - 1)) {
        (Some(Slot::V(Value::Str(key))), Some(Slot::V(Value::List(_)))) => Some(heap.str(*key) == "device_traces"),
        _ => Some(false),
    };
    // The only item (Python appends a list of one with APPEND, no mark) …
    if outer(at) == Some(true) {
        return Some(0);
    }
    // … or one of several after the outer list's mark.
    let m = stack[..at].iter().rposition(|s| matches!(s, Slot::Mark))?;
    (outer(m) == Some(true)).then_some(at - m - 1)
}

/// A little-endian two's-complement integer (LONG1/LONG4).
#[inline]
fn long_value(b: &[u8]) -> Value {
    let n = b.len();
    if (1..=8).contains(&n) {
        let mut bytes = [0u8; 8];
        bytes[..n].copy_from_slice(b);
        // Sign-extended from the top byte written.
        let shift = 64 - 8 * n as u32;
        return Value::Int((i64::from_le_bytes(bytes) << shift) >> shift);
    }
    if n == 0 {
        return Value::Int(0);
    }
    // Fits when the extra bytes are only sign extension.
    let negative = b[n - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0 };
    if b[8..].iter().any(|&x| x != fill) || ((b[7] & 0x80 != 0) != negative) {
        return Value::BigInt(negative);
    }
    Value::Int(i64::from_le_bytes(b[..8].try_into().unwrap_or_default()))
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_decode_as_twos_complement() {
        assert_eq!(long_value(&[]), Value::Int(0));
        assert_eq!(long_value(&[0xff]), Value::Int(-1));
        assert_eq!(long_value(&[0x00, 0x80, 0x00]), Value::Int(0x8000));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0]), Value::BigInt(false));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Value::Int(i64::MIN));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt(false));
    }
}
