//! The reader's heap ([`Heap`]): the containers the pickle machine builds,
//! strings interned, frames and stacks interned (each frame dict and frames
//! list converted once), and the trace entries read, each list's in its
//! [`EntryList`] — with a time window applied as they are appended, and the
//! first device trace's sent to a replay on another thread instead when a
//! [`Streamer`] is set. Emptied dicts and lists are kept for reuse.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use super::error::SnapshotError;
use super::fields::{ENTRY_KEYS, EntryProblem, Fields, K_ACTION, K_FRAMES};
use super::model::{Action, Frame, TraceEntry};
use super::stream::Streamer;
use super::value::Value;

/// The trace entries appended to one list, in order.
#[derive(Debug, Default)]
pub struct EntryList {
    pub entries: Vec<TraceEntry>,
    /// The first entry that does not pass the checks.
    pub problem: Option<Box<EntryProblem>>,
    /// Entries before `ReadOptions::from_us`, counted and dropped.
    pub skipped: u64,
    /// Entries sent to a replay on another thread instead ([`Streamer`]).
    pub streamed: usize,
}

/// Containers, interned strings, frames and stacks, and the trace entries read.
#[derive(Debug, Default)]
pub struct Heap {
    pub strings: Vec<Arc<str>>,
    string_ids: HashMap<Arc<str>, u32>,
    pub lists: Vec<Vec<Value>>,
    pub dicts: Vec<Vec<(Value, Value)>>,
    pub tuples: Vec<Box<[Value]>>,
    /// The entries appended to each list that received any, by list index.
    pub entry_lists: HashMap<u32, EntryList>,
    /// Finished entries not yet appended to a list (`None` once appended).
    /// Finished entries not yet appended to a list, in the order they were
    /// read (serial numbers `fresh_base..`), and the problems among them.
    fresh: Vec<TraceEntry>,
    fresh_problems: Vec<(u64, Box<EntryProblem>)>,
    fresh_base: u64,
    /// How many of `fresh` are appended already (they are appended in order).
    appended: usize,
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
    /// The action of each action string seen, by string id (`None`: not yet looked up).
    actions: Vec<Option<Action>>,
    /// Emptied dicts and lists (a trace entry's, its frames list's), kept for
    /// the next ones: no allocation each.
    spare_dicts: Vec<Vec<(Value, Value)>>,
    spare_lists: Vec<Vec<Value>>,
    /// The frame ids of the stack being interned.
    pub(crate) scratch: Vec<u32>,
    from_us: Option<i64>,
    /// Where a device trace's entries go as they are read, if anywhere.
    pub(crate) stream: Option<Streamer>,
}

/// How many emptied containers [`Heap`] keeps for reuse, and up to what capacity.
const SPARES: usize = 64;
const SPARE_CAPACITY: usize = 256;

/// The ids of a frame dict's keys.
#[derive(Debug, Default)]
struct Keys {
    filename: u32,
    line: u32,
    name: u32,
}

impl Heap {
    /// An empty heap, its entry keys interned first; `from_us`: entries before it are counted, not kept.
    pub(crate) fn new(from_us: Option<i64>) -> Heap {
        let mut heap = Heap { from_us, ..Heap::default() };
        for (id, key) in ENTRY_KEYS.iter().enumerate() {
            let interned = heap.intern(key);
            debug_assert_eq!(interned, id as u32, "the entry keys are interned first, in order");
        }
        heap.keys = Keys { filename: heap.intern("filename"), line: heap.intern("line"), name: heap.intern("name") };
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

    /// How many items a list holds, trace entries included.
    pub fn list_len(&self, list: u32) -> usize {
        self.lists[list as usize].len() + self.entry_lists.get(&list).map_or(0, |e| e.entries.len())
    }

    /// Interns a frames list (a list or tuple of frame dicts) as a stack id.
    pub fn stack_of(&mut self, frames: Value) -> Result<u32, String> {
        if let Value::Stack(id) = frames {
            return Ok(id);
        }
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
        let id = self.intern_stack(&ids);
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

    /// The stack id of these frame ids, innermost first.
    pub(crate) fn intern_stack(&mut self, ids: &[u32]) -> u32 {
        if ids.is_empty() {
            return 0;
        }
        match self.stack_ids.get(ids) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                let boxed: Box<[u32]> = ids.into();
                self.stacks.push(boxed.clone());
                self.stack_ids.insert(boxed, id);
                id
            }
        }
    }

    /// A new empty list, from the spares when there is one.
    pub(crate) fn new_list(&mut self) -> Vec<Value> {
        self.spare_lists.pop().unwrap_or_default()
    }

    /// A new empty dict, from the spares when there is one.
    pub(crate) fn new_dict(&mut self) -> Vec<(Value, Value)> {
        self.spare_dicts.pop().unwrap_or_default()
    }

    fn spare_list(&mut self, mut list: Vec<Value>) {
        if self.spare_lists.len() < SPARES && list.capacity() <= SPARE_CAPACITY {
            list.clear();
            self.spare_lists.push(list);
        }
    }

    /// The frame id of a frame dict (computed once per dict).
    pub(crate) fn frame_of(&mut self, v: Value) -> Result<u32, String> {
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

    /// Turns a completed dict with an `action` key into a trace entry; `None`
    /// when it is not a trace entry. The general machine's way; the entry
    /// reader (`Machine::entry`, pickle.rs) gets to the same entry without the dict.
    #[allow(clippy::type_complexity)]
    pub(crate) fn entry_of(
        &mut self,
        dict: u32,
        offset: u64,
    ) -> Result<Option<(TraceEntry, Option<Box<EntryProblem>>)>, SnapshotError> {
        let items = std::mem::take(&mut self.dicts[dict as usize]);
        let mut f = Fields::EMPTY;
        let mut frames = None;
        for &(k, v) in &items {
            let Value::Str(k) = k else { continue };
            if k == K_FRAMES {
                frames = Some(v);
            } else if k == K_ACTION {
                if let Value::Str(a) = v {
                    f.action = a;
                }
            } else {
                f.set(k, v).map_err(|name| SnapshotError::Malformed {
                    offset,
                    what: format!("a trace entry's '{name}' is a {}, expected an integer", v.type_name()),
                })?;
            }
        }
        if f.action == u32::MAX {
            self.dicts[dict as usize] = items;
            return Ok(None);
        }
        if let Some(frames) = frames {
            match self.stack_of(frames) {
                Ok(id) => f.frames = id,
                Err(what) => {
                    if self.bad_frames.is_none() {
                        self.bad_frames = Some((offset, what));
                    }
                }
            }
        }
        // The dict is not needed any more: keep its storage for the next one.
        if self.spare_dicts.len() < SPARES && items.capacity() <= SPARE_CAPACITY {
            let mut items = items;
            items.clear();
            self.spare_dicts.push(items);
        }
        Ok(Some(self.checked(&f, offset)))
    }

    /// The checked entry, waiting for its list ([`Heap::append_entries`]).
    #[inline]
    pub(crate) fn finish(&mut self, f: &Fields, offset: u64) -> Value {
        let (entry, problem) = self.checked(f, offset);
        let serial = self.fresh_base + self.fresh.len() as u64;
        if let Some(p) = problem {
            self.fresh_problems.push((serial, p));
        }
        self.fresh.push(entry);
        Value::Entry(serial as u32)
    }

    /// The entry the fields make, and what is wrong with it.
    #[inline]
    fn checked(&mut self, f: &Fields, offset: u64) -> (TraceEntry, Option<Box<EntryProblem>>) {
        let action = match self.actions.get(f.action as usize) {
            Some(&Some(a)) => a,
            _ => {
                let a = Action::from_name(self.str(f.action));
                if self.actions.len() <= f.action as usize {
                    self.actions.resize(f.action as usize + 1, None);
                }
                self.actions[f.action as usize] = Some(a);
                a
            }
        };
        let (entry, problem) = f.entry(action);
        let problem = problem.map(|kind| {
            Box::new(EntryProblem { index: 0, offset, action: self.strings[f.action as usize].clone(), kind })
        });
        (entry, problem)
    }

    /// Appends an entry the general machine made (from a dict) to list `list`.
    pub(crate) fn push_entry(&mut self, list: u32, entry: TraceEntry, problem: Option<Box<EntryProblem>>) {
        let from_us = self.from_us;
        let target = self.entry_lists.entry(list).or_default();
        if target.entries.is_empty() && target.streamed == 0 && from_us.is_some_and(|f| entry.time_us < f) {
            target.skipped += 1;
            return;
        }
        if let Some(mut p) = problem
            && target.problem.is_none()
        {
            p.index = target.streamed + target.entries.len();
            target.problem = Some(p);
        }
        match &mut self.stream {
            Some(st) if st.sends(list) => {
                target.streamed += 1;
                if st.push(&[entry]) {
                    self.flush_stream();
                }
            }
            _ => target.entries.push(entry),
        }
    }

    /// Sends the entries buffered for the replay on the other thread.
    pub(crate) fn flush_stream(&mut self) {
        if let Some(st) = &mut self.stream {
            st.flush(&self.stacks, &self.frames);
        }
    }

    /// Chooses list `list`, item `device` of `device_traces` (`None`: it is
    /// not one), as the trace to send, if none is chosen yet.
    pub(crate) fn choose_stream(&mut self, list: u32, device: Option<usize>) {
        // Only a list with no entries yet: the replay must get them all.
        let fresh = self.entry_lists.get(&list).is_none_or(|l| l.entries.is_empty() && l.skipped == 0);
        if let Some(st) = &mut self.stream {
            st.choose(list, device, fresh);
        }
    }

    /// Whether a trace to send is still to be chosen.
    pub(crate) fn choosing_stream(&self) -> bool {
        self.stream.as_ref().is_some_and(Streamer::choosing)
    }

    /// Appends the `n` entries from serial number `first` to list `list`:
    /// entries are appended in the order they were read (Python's pickler
    /// writes a list's items right after building them), and each once.
    pub(crate) fn append_entries(&mut self, list: u32, first: u32, n: usize, at: u64) -> Result<(), SnapshotError> {
        let next = self.fresh_base + self.appended as u64;
        if first as u64 != next as u32 as u64 || self.appended + n > self.fresh.len() {
            return Err(SnapshotError::Malformed {
                offset: at,
                what: "a trace entry appended twice, or out of the order it was read in".to_owned(),
            });
        }
        let from_us = self.from_us;
        let target = self.entry_lists.entry(list).or_default();
        let mut batch = &self.fresh[self.appended..self.appended + n];
        let mut serial = next;
        if let Some(f) = from_us
            && target.entries.is_empty()
            && target.streamed == 0
        {
            let before = batch.iter().take_while(|e| e.time_us < f).count();
            target.skipped += before as u64;
            batch = &batch[before..];
            serial += before as u64;
        }
        if target.problem.is_none()
            && let Some((s, p)) = self.fresh_problems.iter().find(|(s, _)| (serial..next + n as u64).contains(s))
        {
            let mut p = p.clone();
            p.index = target.streamed + target.entries.len() + (s - serial) as usize;
            target.problem = Some(p);
        }
        let mut full = false;
        match &mut self.stream {
            Some(st) if st.sends(list) => {
                target.streamed += batch.len();
                full = st.push(batch);
            }
            _ => target.entries.extend_from_slice(batch),
        }
        self.appended += n;
        if self.appended == self.fresh.len() {
            self.fresh_base += self.fresh.len() as u64;
            self.fresh.clear();
            self.fresh_problems.clear();
            self.appended = 0;
        }
        if full {
            self.flush_stream();
        }
        Ok(())
    }
}
