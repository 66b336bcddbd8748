//! A streaming reader of the pickle subset that memory snapshots use (protocols
//! 2 to 5: dicts, lists, tuples, strings, integers, floats, booleans, None, the
//! memo, framing). It runs the pickle machine over a [`Read`] with a small
//! buffer; values are 16-byte handles into a [`Heap`]; strings are interned; and
//! every dict appended to a list that has an `action` key (a trace entry) is
//! turned into a compact [`RawEntry`] at once and its dict freed, so a
//! 2-million-entry trace never exists as a tree of dicts. Classes, reductions and
//! out-of-band buffers are refused: a snapshot has none.

use rustc_hash::FxHashMap as HashMap;
use std::io::{ErrorKind, Read};
use std::sync::Arc;

use super::SnapshotError;
use super::model::Frame;

/// The longest string or bytes object accepted (a frame name, a conf string…).
const MAX_STRING_BYTES: u64 = 64 << 20;
/// The most memo slots a `BINPUT`/`LONG_BINPUT` index may name.
const MAX_MEMO: u64 = 1 << 32;

/// A value on the pickle machine's stack: a handle, cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond 64 bits (its sign): kept only to be reported.
    BigInt(bool),
    Float(f64),
    Str(u32),
    Bytes,
    List(u32),
    Dict(u32),
    Tuple(u32),
    Set(u32),
    /// A trace entry, converted: an index into [`Heap::entries`].
    Entry(u32),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes => "bytes",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Tuple(_) => "tuple",
            Value::Set(_) => "set",
            Value::Entry(_) => "dict (a trace entry)",
        }
    }
}

/// A trace entry as read, before its fields are checked against the snapshot's rules.
#[derive(Debug, Clone, Copy)]
pub struct RawEntry {
    pub action: u32,
    /// Which of `addr`, `size` and `device_free` the entry has ([`HAS_ADDR`]…).
    pub has: u8,
    /// The address, or for `oom` entries the device's free bytes. Integers
    /// beyond 64 bits are saturated (and then fail the range checks).
    pub addr: i64,
    pub size: i64,
    pub stream: i64,
    pub time_us: i64,
    pub frames: u32,
    /// Byte offset of the list append that completed it, for messages.
    pub offset: u64,
}

pub const HAS_ADDR: u8 = 1;
pub const HAS_SIZE: u8 = 2;
pub const HAS_DEVICE_FREE: u8 = 4;

/// Containers, interned strings, converted trace entries and interned frames.
#[derive(Debug, Default)]
pub struct Heap {
    pub strings: Vec<Arc<str>>,
    string_ids: HashMap<Arc<str>, u32>,
    pub lists: Vec<Vec<Value>>,
    pub dicts: Vec<Vec<(Value, Value)>>,
    pub tuples: Vec<Box<[Value]>>,
    pub entries: Vec<RawEntry>,
    pub frames: Vec<Frame>,
    frame_ids: HashMap<(u32, i64, u32), u32>,
    /// Frame id + 1 of a frame dict already seen (PyTorch shares frame dicts), by dict index.
    frame_of_dict: Vec<u32>,
    /// Stack id + 1 of a frames list already converted (its items are freed), by list index.
    stack_of_list: Vec<u32>,
    /// The interned empty string.
    empty: u32,
    pub stacks: Vec<Box<[u32]>>,
    stack_ids: HashMap<Box<[u32]>, u32>,
    /// The first trace entry whose `frames` was not a list of frame dicts.
    pub bad_frames: Option<(u64, String)>,
    keys: Keys,
    /// Emptied dicts and lists (a trace entry's, its frames list's), kept for
    /// the next ones: millions of entries, no allocation each.
    spare_dicts: Vec<Vec<(Value, Value)>>,
    spare_lists: Vec<Vec<Value>>,
    /// The frame ids of the stack being interned.
    scratch: Vec<u32>,
}

/// How many emptied containers [`Heap`] keeps for reuse, and up to what capacity.
const SPARES: usize = 64;
const SPARE_CAPACITY: usize = 256;

#[derive(Debug, Default)]
struct Keys {
    action: u32,
    addr: u32,
    size: u32,
    stream: u32,
    time_us: u32,
    frames: u32,
    device_free: u32,
    filename: u32,
    line: u32,
    name: u32,
}

impl Heap {
    fn new() -> Heap {
        let mut heap = Heap::default();
        heap.keys = Keys {
            action: heap.intern("action"),
            addr: heap.intern("addr"),
            size: heap.intern("size"),
            stream: heap.intern("stream"),
            time_us: heap.intern("time_us"),
            frames: heap.intern("frames"),
            device_free: heap.intern("device_free"),
            filename: heap.intern("filename"),
            line: heap.intern("line"),
            name: heap.intern("name"),
        };
        heap.empty = heap.intern("");
        heap.stacks.push(Box::new([]));
        heap.stack_ids.insert(Box::new([]), 0);
        heap
    }

    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let s: Arc<str> = Arc::from(s);
        self.strings.push(s.clone());
        self.string_ids.insert(s, id);
        id
    }

    pub fn str(&self, id: u32) -> &str {
        &self.strings[id as usize]
    }

    /// The value under string key `key` in dict `dict`.
    pub fn get(&self, dict: u32, key: &str) -> Option<Value> {
        let id = *self.string_ids.get(key)?;
        self.dicts[dict as usize].iter().find(|(k, _)| *k == Value::Str(id)).map(|(_, v)| *v)
    }

    /// Interns a frames list (a list or tuple of frame dicts) as a stack id.
    pub fn stack_of(&mut self, frames: Value) -> Result<u32, String> {
        if let Value::List(l) = frames
            && let Some(&id) = self.stack_of_list.get(l as usize)
            && id != 0
        {
            return Ok(id - 1);
        }
        let len = match frames {
            Value::List(l) => self.lists[l as usize].len(),
            Value::Tuple(t) => self.tuples[t as usize].len(),
            Value::None => return Ok(0),
            other => return Err(format!("'frames' is a {}, expected a list of frame dicts", other.type_name())),
        };
        if len == 0 {
            return Ok(0);
        }
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for k in 0..len {
            let item = match frames {
                Value::List(l) => self.lists[l as usize][k],
                Value::Tuple(t) => self.tuples[t as usize][k],
                _ => Value::None,
            };
            match self.frame_of(item) {
                Ok(f) => ids.push(f),
                Err(e) => {
                    self.scratch = ids;
                    return Err(e);
                }
            }
        }
        let id = match self.stack_ids.get(ids.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                let boxed: Box<[u32]> = ids.as_slice().into();
                self.stacks.push(boxed.clone());
                self.stack_ids.insert(boxed, id);
                id
            }
        };
        self.scratch = ids;
        if let Value::List(l) = frames {
            if self.stack_of_list.len() <= l as usize {
                self.stack_of_list.resize(self.lists.len().max(l as usize + 1), 0);
            }
            self.stack_of_list[l as usize] = id + 1;
            let list = std::mem::take(&mut self.lists[l as usize]);
            self.spare_list(list);
        }
        Ok(id)
    }

    /// A new empty list, from the spares when there is one.
    fn new_list(&mut self) -> Vec<Value> {
        self.spare_lists.pop().unwrap_or_default()
    }

    /// A new empty dict, from the spares when there is one.
    fn new_dict(&mut self) -> Vec<(Value, Value)> {
        self.spare_dicts.pop().unwrap_or_default()
    }

    fn spare_list(&mut self, mut list: Vec<Value>) {
        if self.spare_lists.len() < SPARES && list.capacity() <= SPARE_CAPACITY {
            list.clear();
            self.spare_lists.push(list);
        }
    }

    fn frame_of(&mut self, v: Value) -> Result<u32, String> {
        let Value::Dict(d) = v else {
            return Err(format!("a frame is a {}, expected a dict with filename, line and name", v.type_name()));
        };
        if let Some(&id) = self.frame_of_dict.get(d as usize)
            && id != 0
        {
            return Ok(id - 1);
        }
        let id = self.frame_of_contents(d);
        if self.frame_of_dict.len() <= d as usize {
            self.frame_of_dict.resize(self.dicts.len().max(d as usize + 1), 0);
        }
        self.frame_of_dict[d as usize] = id + 1;
        Ok(id)
    }

    fn frame_of_contents(&mut self, d: u32) -> u32 {
        let (mut filename, mut line, mut name) = (None, 0i64, None);
        for &(k, v) in &self.dicts[d as usize] {
            match (k, v) {
                (Value::Str(k), Value::Str(s)) if k == self.keys.filename => filename = Some(s),
                (Value::Str(k), Value::Str(s)) if k == self.keys.name => name = Some(s),
                (Value::Str(k), Value::Int(n)) if k == self.keys.line => line = n,
                _ => {}
            }
        }
        let key = (filename.unwrap_or(self.empty), line, name.unwrap_or(self.empty));
        if let Some(&id) = self.frame_ids.get(&key) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(Frame {
            filename: self.strings[key.0 as usize].clone(),
            line,
            name: self.strings[key.2 as usize].clone(),
        });
        self.frame_ids.insert(key, id);
        id
    }

    /// Turns a completed dict with an `action` key into a [`RawEntry`]; `None`
    /// when it is not a trace entry.
    fn entry_of(&mut self, dict: u32, offset: u64) -> Result<Option<u32>, SnapshotError> {
        let keys = &self.keys;
        let items = &self.dicts[dict as usize];
        let Some(action) = items.iter().find_map(|(k, v)| match (k, v) {
            (Value::Str(k), Value::Str(a)) if *k == keys.action => Some(*a),
            _ => None,
        }) else {
            return Ok(None);
        };
        let mut e = RawEntry { action, has: 0, addr: 0, size: 0, stream: 0, time_us: 0, frames: 0, offset };
        let mut frames = None;
        let bad = |key: &str, v: &Value| SnapshotError::Malformed {
            offset,
            what: format!("a trace entry's '{key}' is a {}, expected an integer", v.type_name()),
        };
        for &(k, v) in items {
            let Value::Str(k) = k else { continue };
            let int = |v: &Value| match v {
                Value::Int(n) => Some(*n),
                Value::BigInt(neg) => Some(if *neg { i64::MIN } else { i64::MAX }),
                Value::Bool(b) => Some(*b as i64),
                _ => None,
            };
            if k == keys.addr {
                if e.has & HAS_DEVICE_FREE == 0 {
                    e.addr = int(&v).ok_or_else(|| bad("addr", &v))?;
                }
                e.has |= HAS_ADDR;
            } else if k == keys.size {
                e.size = int(&v).ok_or_else(|| bad("size", &v))?;
                e.has |= HAS_SIZE;
            } else if k == keys.device_free {
                e.addr = int(&v).ok_or_else(|| bad("device_free", &v))?;
                e.has |= HAS_DEVICE_FREE;
            } else if k == keys.stream {
                e.stream = int(&v).ok_or_else(|| bad("stream", &v))?;
            } else if k == keys.time_us {
                // Integral or not, a time is a time.
                e.time_us = match v {
                    Value::Float(f) => f as i64,
                    v => int(&v).ok_or_else(|| bad("time_us", &v))?.max(0),
                };
            } else if k == keys.frames {
                frames = Some(v);
            }
        }
        if let Some(frames) = frames {
            match self.stack_of(frames) {
                Ok(id) => e.frames = id,
                Err(what) => {
                    if self.bad_frames.is_none() {
                        self.bad_frames = Some((offset, what));
                    }
                }
            }
        }
        // The dict is not needed any more: free it (for the next entry's).
        let mut items = std::mem::take(&mut self.dicts[dict as usize]);
        if self.spare_dicts.len() < SPARES && items.capacity() <= SPARE_CAPACITY {
            items.clear();
            self.spare_dicts.push(items);
        }
        let id = self.entries.len() as u32;
        self.entries.push(e);
        Ok(Some(id))
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
        if let Some(b) = self.buf.get(self.pos..self.pos + 4)
            && self.pos + 4 <= self.end
        {
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
    let mut inp = Input { inner: input, buf: vec![0; 1 << 16], pos: 0, end: 0, base: 0 };
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
    let mut heap = Heap::new();
    let mut stack: Vec<Slot> = Vec::with_capacity(256);
    let mut memo: Vec<Option<Value>> = Vec::new();
    let mut sparse_memo: HashMap<u64, Value> = HashMap::default();
    let mut sbuf: Vec<u8> = Vec::new();

    macro_rules! malformed {
        ($off:expr, $($t:tt)*) => {
            return Err(SnapshotError::Malformed { offset: $off, what: format!($($t)*) })
        };
    }

    loop {
        let at = inp.offset();
        let op = inp.byte("an opcode")?;
        let pop = |stack: &mut Vec<Slot>, what: &str| -> Result<Value, SnapshotError> {
            match stack.pop() {
                Some(Slot::V(v)) => Ok(v),
                Some(Slot::Mark) => Err(SnapshotError::Malformed { offset: at, what: format!("{what}: found a mark") }),
                None => Err(SnapshotError::Malformed { offset: at, what: format!("{what}: the stack is empty") }),
            }
        };
        // Index of the topmost mark.
        let mark = |stack: &Vec<Slot>| -> Result<usize, SnapshotError> {
            stack.iter().rposition(|s| matches!(s, Slot::Mark)).ok_or_else(|| SnapshotError::Malformed {
                offset: at,
                what: format!("opcode {op:#04x} needs a mark and there is none"),
            })
        };
        let v = match op {
            b'.' => {
                let top = pop(&mut stack, "STOP with nothing to return")?;
                return Ok(Pickle { protocol, top, heap });
            }
            0x95 => {
                inp.u64("a FRAME length")?;
                continue;
            }
            0x80 => {
                inp.byte("a PROTO version")?;
                continue;
            }
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
                if n > MAX_STRING_BYTES {
                    return Err(SnapshotError::TooLong {
                        offset: at,
                        what: "an integer",
                        bytes: n,
                        limit: MAX_STRING_BYTES,
                    });
                }
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
            b'F' => {
                let line = inp.line("a FLOAT")?;
                match String::from_utf8_lossy(&line).parse::<f64>() {
                    Ok(f) => Value::Float(f),
                    Err(_) => malformed!(at, "FLOAT opcode without a number"),
                }
            }
            b'X' | 0x8c | 0x8d | b'U' | b'T' | b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    0x8c | b'U' | b'C' => inp.byte("a string length")? as u64,
                    0x8d | 0x8e | 0x96 => inp.u64("a string length")?,
                    _ => inp.u32("a string length")? as u64,
                };
                if n > MAX_STRING_BYTES {
                    return Err(SnapshotError::TooLong {
                        offset: at,
                        what: "a string",
                        bytes: n,
                        limit: MAX_STRING_BYTES,
                    });
                }
                let bytes = inp.take(n as usize, "a string")?;
                match op {
                    b'X' | 0x8c | 0x8d => match std::str::from_utf8(bytes) {
                        Ok(s) => Value::Str(heap.intern(s)),
                        Err(_) => malformed!(at, "a str that is not UTF-8"),
                    },
                    // Python 2 strings read as text where they are text.
                    b'U' | b'T' => {
                        sbuf.clear();
                        sbuf.extend_from_slice(bytes);
                        Value::Str(heap.intern(&String::from_utf8_lossy(&sbuf)))
                    }
                    _ => Value::Bytes,
                }
            }
            b']' => {
                let list = heap.new_list();
                heap.lists.push(list);
                Value::List(heap.lists.len() as u32 - 1)
            }
            b'}' => {
                let dict = heap.new_dict();
                heap.dicts.push(dict);
                Value::Dict(heap.dicts.len() as u32 - 1)
            }
            b')' => {
                heap.tuples.push(Box::new([]));
                Value::Tuple(heap.tuples.len() as u32 - 1)
            }
            0x8f => {
                heap.lists.push(Vec::new());
                Value::Set(heap.lists.len() as u32 - 1)
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = vec![Value::None; n];
                for i in (0..n).rev() {
                    items[i] = pop(&mut stack, "TUPLE with too few items")?;
                }
                heap.tuples.push(items.into());
                Value::Tuple(heap.tuples.len() as u32 - 1)
            }
            b'(' => {
                stack.push(Slot::Mark);
                continue;
            }
            b't' | b'l' | b'd' | 0x91 => {
                let m = mark(&stack)?;
                let items: Vec<Value> = stack
                    .drain(m..)
                    .skip(1)
                    .map(|s| match s {
                        Slot::V(v) => v,
                        Slot::Mark => Value::None,
                    })
                    .collect();
                match op {
                    b't' => {
                        heap.tuples.push(items.into());
                        Value::Tuple(heap.tuples.len() as u32 - 1)
                    }
                    b'l' | 0x91 => {
                        heap.lists.push(items);
                        if op == b'l' {
                            Value::List(heap.lists.len() as u32 - 1)
                        } else {
                            Value::Set(heap.lists.len() as u32 - 1)
                        }
                    }
                    _ => {
                        if !items.len().is_multiple_of(2) {
                            malformed!(at, "DICT with an odd number of items");
                        }
                        heap.dicts.push(items.chunks(2).map(|p| (p[0], p[1])).collect());
                        Value::Dict(heap.dicts.len() as u32 - 1)
                    }
                }
            }
            b'a' | b'e' | 0x90 => {
                let (start, target_at) = if op == b'a' {
                    (stack.len().saturating_sub(1), stack.len().saturating_sub(2))
                } else {
                    let m = mark(&stack)?;
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
                heap.lists[target as usize].reserve(stack.len() - start);
                for &slot in &stack[start..] {
                    let Slot::V(mut v) = slot else { malformed!(at, "a mark among the items to append") };
                    if let Value::Dict(d) = v
                        && let Some(id) = heap.entry_of(d, at)?
                    {
                        v = Value::Entry(id);
                    }
                    heap.lists[target as usize].push(v);
                }
                // The items, and the mark for APPENDS/ADDITEMS.
                stack.truncate(if op == b'a' { start } else { start - 1 });
                continue;
            }
            b's' | b'u' => {
                let start = if op == b's' { stack.len().saturating_sub(2) } else { mark(&stack)? + 1 };
                let target_at = start.wrapping_sub(if op == b's' { 1 } else { 2 });
                let target = match stack.get(target_at) {
                    Some(Slot::V(Value::Dict(d))) => *d,
                    Some(Slot::V(v)) => malformed!(at, "SETITEM on a {}, not a dict", v.type_name()),
                    _ => malformed!(at, "SETITEM with no dict below the items"),
                };
                if !(stack.len() - start).is_multiple_of(2) {
                    malformed!(at, "SETITEMS with a key and no value");
                }
                let dict = &mut heap.dicts[target as usize];
                dict.reserve((stack.len() - start) / 2);
                for pair in stack[start..].chunks(2) {
                    let (Slot::V(k), Slot::V(v)) = (pair[0], pair[1]) else {
                        malformed!(at, "a mark among the items to set")
                    };
                    dict.push((k, v));
                }
                stack.truncate(if op == b's' { start } else { start - 1 });
                continue;
            }
            b'0' => {
                stack.pop();
                continue;
            }
            b'1' => {
                let m = mark(&stack)?;
                stack.truncate(m);
                continue;
            }
            b'2' => {
                let top = pop(&mut stack, "DUP")?;
                stack.push(Slot::V(top));
                top
            }
            b'q' | b'r' | 0x94 | b'p' => {
                let index = match op {
                    b'q' => inp.byte("a BINPUT index")? as u64,
                    b'r' => inp.u32("a LONG_BINPUT index")? as u64,
                    0x94 => memo.len() as u64,
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
                    return Err(SnapshotError::TooLong {
                        offset: at,
                        what: "a memo index",
                        bytes: index,
                        limit: MAX_MEMO,
                    });
                }
                // Python numbers its memo slots in order; any other index goes
                // to a side table, so a stray index cannot make the table huge.
                match (index as usize).cmp(&memo.len()) {
                    std::cmp::Ordering::Less => memo[index as usize] = Some(top),
                    std::cmp::Ordering::Equal => memo.push(Some(top)),
                    std::cmp::Ordering::Greater => {
                        sparse_memo.insert(index, top);
                    }
                }
                continue;
            }
            b'h' | b'j' | b'g' => {
                let index = match op {
                    b'h' => inp.byte("a BINGET index")? as u64,
                    b'j' => inp.u32("a LONG_BINGET index")? as u64,
                    _ => {
                        let line = inp.line("a GET index")?;
                        String::from_utf8_lossy(&line).parse::<u64>().unwrap_or(u64::MAX)
                    }
                };
                match memo.get(index as usize).copied().flatten().or_else(|| sparse_memo.get(&index).copied()) {
                    Some(v) => v,
                    None => malformed!(at, "memo get of slot {index}, which was never put"),
                }
            }
            b'c' | 0x93 | b'R' | b'b' | 0x81 | 0x92 | b'i' | b'o' => {
                return Err(SnapshotError::Opcode {
                    offset: at,
                    opcode: op,
                    name: opcode_name(op),
                    why: "builds a Python object of a class; a memory snapshot holds only dicts, lists, strings and numbers (is this a snapshot from torch.cuda.memory._dump_snapshot?)",
                });
            }
            0x97 | 0x98 => {
                return Err(SnapshotError::Opcode {
                    offset: at,
                    opcode: op,
                    name: opcode_name(op),
                    why: "refers to an out-of-band buffer, which a snapshot file cannot carry",
                });
            }
            _ => {
                return Err(SnapshotError::Opcode {
                    offset: at,
                    opcode: op,
                    name: "unknown",
                    why: "is not a pickle opcode; the file is corrupt",
                });
            }
        };
        stack.push(Slot::V(v));
        if stack.len() > (1 << 24) {
            malformed!(at, "more than 16 million values on the stack; not a snapshot");
        }
    }
}

/// A little-endian two's-complement integer (LONG1/LONG4).
fn long_value(b: &[u8]) -> Value {
    if b.is_empty() {
        return Value::Int(0);
    }
    let negative = b[b.len() - 1] & 0x80 != 0;
    if b.len() > 8 {
        // Fits when the extra bytes are only sign extension.
        let fill = if negative { 0xff } else { 0 };
        if b[8..].iter().any(|&x| x != fill) || ((b[7] & 0x80 != 0) != negative) {
            return Value::BigInt(negative);
        }
    }
    let mut bytes = [if negative { 0xff } else { 0 }; 8];
    let n = b.len().min(8);
    bytes[..n].copy_from_slice(&b[..n]);
    Value::Int(i64::from_le_bytes(bytes))
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
