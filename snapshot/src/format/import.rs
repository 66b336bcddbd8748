//! From a pickle to a typed [`Snapshot`]: the top-level dict (or the bare
//! segment list of the oldest `torch.cuda.memory_snapshot()` dumps), segments and
//! blocks in both the current and the legacy (`history`) layouts, the device
//! traces, and the allocator settings. Unknown keys are tolerated; values of the
//! wrong type, and sizes no device has, are errors naming their path.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::error::SnapshotError;
use super::estimate::ESTIMATE_KEY;
use super::estimate_import::estimate;
use super::fields::ProblemKind;
use super::model::{AllocatorSettings, Block, FrameTable, Segment, SegmentType, Snapshot, TraceEntry};
use super::pickle::{self, Heap, Pickle, ReadOptions};
use super::stream::Message;
use super::value::Value;
use vramlab_allocator::{BlockState, ROUNDUP_BUCKETS};
use vramlab_replay::MAX_BYTES;

/// Whether `head` (a file's first bytes) looks like a pickle of protocol 2 to 5.
pub fn is_pickle(head: &[u8]) -> bool {
    head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1])
}

/// Reads a snapshot file.
pub fn read_snapshot_file(path: &Path) -> Result<Snapshot, SnapshotError> {
    let file = File::open(path).map_err(|source| SnapshotError::Io { offset: 0, source })?;
    read_snapshot(BufReader::with_capacity(1 << 20, file))
}

/// Reads a snapshot pickle.
pub fn read_snapshot<R: Read>(input: R) -> Result<Snapshot, SnapshotError> {
    read_snapshot_with(input, ReadOptions::default())
}

/// Reads a snapshot pickle, the leading trace entries before
/// `opts.from_us` dropped as they are read ([`Snapshot::skipped_entries`]
/// counts them).
pub fn read_snapshot_with<R: Read>(input: R, opts: ReadOptions) -> Result<Snapshot, SnapshotError> {
    snapshot_of(pickle::read_with(input, opts)?)
}

/// The allocator settings of a snapshot, read from the last bytes of its file
/// (`tail`; PyTorch writes `allocator_settings` after the traces): `None` when
/// they are not there, or refer to something written before the tail. What
/// lets a replay start before the whole file is read (`replay/overlap.rs`, which
/// checks it against the settings read in full).
pub fn peek_allocator_settings(tail: &[u8]) -> Option<AllocatorSettings> {
    const KEY: &[u8] = b"allocator_settings";
    let mut end = tail.len();
    while let Some(at) = tail[..end].windows(KEY.len()).rposition(|w| w == KEY) {
        end = at + KEY.len() - 1;
        // The key as a SHORT_BINUNICODE or a BINUNICODE string.
        let short = at >= 2 && tail[at - 2] == 0x8c && tail[at - 1] as usize == KEY.len();
        let long = at >= 5 && tail[at - 5] == b'X' && tail[at - 4..at] == (KEY.len() as u32).to_le_bytes();
        if !short && !long {
            continue;
        }
        let mut i = at + KEY.len();
        skip_memo_put(tail, &mut i);
        let mut gets = Vec::new();
        let value = skim_value(&tail[i..], &mut gets)?;
        // A memo get names a string written before the tail (PyTorch's conf
        // string is often the empty string met before): taken as "". A wrong
        // guess costs only the head start: the reader checks.
        let mut pickle = vec![0x80, 4];
        let mut from = i;
        for (at, n) in gets {
            pickle.extend_from_slice(&tail[from..i + at]);
            pickle.extend_from_slice(&[0x8c, 0]);
            from = i + at + n;
        }
        pickle.extend_from_slice(&tail[from..i + value]);
        pickle.push(b'.');
        let Pickle { top, heap, .. } = pickle::read(&pickle[..]).ok()?;
        return allocator_settings(&heap, top).ok();
    }
    None
}

/// Steps over a memo put at `b[*i]`, if there is one.
fn skip_memo_put(b: &[u8], i: &mut usize) {
    match b.get(*i) {
        Some(0x94) => *i += 1,
        Some(b'q') => *i += 2,
        Some(b'r') => *i += 5,
        _ => {}
    }
}

/// The length of the one pickled value at the start of `b` (the opcodes of
/// dicts, lists, strings and numbers), with its memo puts and items; the
/// memo gets in it in `gets` (offset, length).
fn skim_value(b: &[u8], gets: &mut Vec<(usize, usize)>) -> Option<usize> {
    let (mut i, mut depth, mut marks) = (0usize, 0usize, Vec::new());
    loop {
        if depth == 1 && marks.is_empty() && !matches!(b.get(i), Some(0x94 | b'q' | b'r' | b'(' | 0x95)) {
            return Some(i);
        }
        let op = *b.get(i)?;
        i += 1;
        let arg = |n: usize| b.get(i..i + n).map(|_| n);
        let len = |n: usize| -> Option<usize> {
            let bytes = b.get(i..i + n)?;
            let mut le = [0u8; 8];
            le[..n].copy_from_slice(bytes);
            Some(n + u64::from_le_bytes(le) as usize)
        };
        i += match op {
            b'}' | b']' | b')' | b'N' | 0x88 | 0x89 => {
                depth += 1;
                0
            }
            b'K' => {
                depth += 1;
                arg(1)?
            }
            b'h' | b'j' => {
                depth += 1;
                let n = if op == b'h' { 1 } else { 4 };
                gets.push((i - 1, n + 1));
                arg(n)?
            }
            b'M' => {
                depth += 1;
                arg(2)?
            }
            b'J' => {
                depth += 1;
                arg(4)?
            }
            b'G' => {
                depth += 1;
                arg(8)?
            }
            0x8a | 0x8c => {
                depth += 1;
                len(1)?
            }
            0x8b | b'X' => {
                depth += 1;
                len(4)?
            }
            0x8d => {
                depth += 1;
                len(8)?
            }
            0x94 => 0,
            b'q' => arg(1)?,
            b'r' => arg(4)?,
            0x95 => arg(8)?,
            b'(' => {
                marks.push(depth);
                0
            }
            b'u' | b'e' => {
                depth = marks.pop()?;
                0
            }
            b't' => {
                depth = marks.pop()? + 1;
                0
            }
            b's' => {
                depth = depth.checked_sub(2)?;
                0
            }
            b'a' => {
                depth = depth.checked_sub(1)?;
                0
            }
            0x85..=0x87 => {
                depth = (depth + 1).checked_sub((op - 0x84) as usize)?;
                0
            }
            _ => return None,
        };
        if i > b.len() {
            return None;
        }
    }
}

/// [`read_snapshot_with`], the entries of the first device trace sent to
/// `tx` as they are read (see `replay/overlap.rs`): the snapshot comes back with that
/// trace empty, and its device index.
pub(crate) fn read_snapshot_streaming<R: Read>(
    input: R,
    opts: ReadOptions,
    tx: std::sync::mpsc::SyncSender<Message>,
) -> Result<(Snapshot, Option<usize>), SnapshotError> {
    let pickle = pickle::read_streaming(input, opts, tx)?;
    let streamed = pickle.heap.stream.as_ref().and_then(|s| s.device);
    Ok((snapshot_of(pickle)?, streamed))
}

fn snapshot_of(pickle: Pickle) -> Result<Snapshot, SnapshotError> {
    let Pickle { protocol, top, mut heap } = pickle;
    let top_dict = match top {
        Value::Dict(d) => d,
        // `torch.cuda.memory_snapshot()` pickled directly: the segment list only.
        Value::List(_) => {
            let segments = segments(&mut heap, top, "segments")?;
            return Ok(Snapshot {
                protocol,
                segments,
                device_traces: Vec::new(),
                skipped_entries: Vec::new(),
                frames: frame_table(&mut heap),
                allocator_settings: None,
                legacy_layout: true,
                host_segments: 0,
                host_trace_entries: 0,
                external_annotations: 0,
                other_keys: Vec::new(),
                estimate: None,
            });
        }
        other => {
            return Err(shape(
                "the pickle",
                "a dict with 'segments' and 'device_traces' (torch.cuda.memory._snapshot())",
                &heap,
                other,
            ));
        }
    };
    let items = heap.dicts[top_dict as usize].clone();
    let (mut segs, mut traces, mut settings, mut marker) = (None, None, None, None);
    let (mut host_segments, mut host_trace_entries, mut external_annotations) = (0, 0, 0);
    let mut other_keys = Vec::new();
    for (k, v) in items {
        let Value::Str(k) = k else {
            other_keys.push(format!("<a {} key>", k.type_name()));
            continue;
        };
        match heap.str(k) {
            "segments" => segs = Some(v),
            "device_traces" => traces = Some(v),
            // The legacy name of the same list.
            "traces" if traces.is_none() => traces = Some(v),
            "allocator_settings" => settings = Some(v),
            ESTIMATE_KEY => marker = Some(v),
            "host_segments" => host_segments = len_of(&heap, v),
            "host_traces" => host_trace_entries = count_entries(&heap, v),
            "external_annotations" => external_annotations = len_of(&heap, v),
            other => other_keys.push(other.to_owned()),
        }
    }
    let segs = segs.ok_or_else(|| SnapshotError::Shape {
        path: "the snapshot".to_owned(),
        expected: "a 'segments' key (torch.cuda.memory._snapshot())",
        found: format!("the keys {}", keys_text(&heap, top_dict)),
    })?;
    let legacy_layout = is_legacy(&heap, segs);
    let segments = segments(&mut heap, segs, "segments")?;
    let (device_traces, skipped_entries) = match traces {
        None => (Vec::new(), Vec::new()),
        Some(t) => device_traces(&mut heap, t)?,
    };
    let allocator_settings = match settings {
        None | Some(Value::None) => None,
        Some(s) => Some(allocator_settings(&heap, s)?),
    };
    let estimate = match marker {
        None | Some(Value::None) => None,
        Some(m) => Some(estimate(&heap, m)?),
    };
    Ok(Snapshot {
        protocol,
        segments,
        device_traces,
        skipped_entries,
        frames: frame_table(&mut heap),
        allocator_settings,
        legacy_layout,
        host_segments,
        host_trace_entries,
        external_annotations,
        other_keys,
        estimate,
    })
}

fn frame_table(heap: &mut Heap) -> FrameTable {
    FrameTable { frames: std::mem::take(&mut heap.frames), stacks: std::mem::take(&mut heap.stacks) }
}

fn describe(heap: &Heap, v: Value) -> String {
    match v {
        Value::Str(s) => format!("the str '{}'", heap.str(s).chars().take(60).collect::<String>()),
        Value::Int(n) => format!("the int {n}"),
        other => format!("a {}", other.type_name()),
    }
}

fn shape(path: impl Into<String>, expected: &'static str, heap: &Heap, found: Value) -> SnapshotError {
    SnapshotError::Shape { path: path.into(), expected, found: describe(heap, found) }
}

fn keys_text(heap: &Heap, dict: u32) -> String {
    let keys: Vec<String> = heap.dicts[dict as usize]
        .iter()
        .take(12)
        .map(|(k, _)| match k {
            Value::Str(s) => format!("'{}'", heap.str(*s)),
            other => format!("<{}>", other.type_name()),
        })
        .collect();
    if keys.is_empty() { "none (an empty dict)".to_owned() } else { keys.join(", ") }
}

fn len_of(heap: &Heap, v: Value) -> u64 {
    match v {
        Value::List(l) => heap.list_len(l) as u64,
        Value::Tuple(t) => heap.tuples[t as usize].len() as u64,
        _ => 0,
    }
}

fn count_entries(heap: &Heap, v: Value) -> u64 {
    match v {
        Value::List(l) => heap.lists[l as usize].iter().map(|&x| len_of(heap, x)).sum(),
        _ => 0,
    }
}

fn items(heap: &Heap, v: Value, path: &str, expected: &'static str) -> Result<Vec<Value>, SnapshotError> {
    match v {
        Value::List(l) => Ok(heap.lists[l as usize].clone()),
        Value::Tuple(t) => Ok(heap.tuples[t as usize].to_vec()),
        other => Err(shape(path, expected, heap, other)),
    }
}

/// A non-negative byte count no larger than 1 PiB.
fn bytes(heap: &Heap, v: Value, path: impl Fn() -> String) -> Result<u64, SnapshotError> {
    match v {
        Value::Int(n) if (0..=MAX_BYTES as i64).contains(&n) => Ok(n as u64),
        Value::Int(n) => Err(SnapshotError::AbsurdSize { path: path(), value: n as i128 }),
        Value::BigInt(neg) => {
            Err(SnapshotError::AbsurdSize { path: path(), value: if neg { i128::MIN } else { i128::MAX } })
        }
        other => Err(shape(path(), "a byte count (an int)", heap, other)),
    }
}

/// An address: any unsigned 64-bit value (PyTorch writes them as Python ints).
fn address(heap: &Heap, v: Value, path: impl Fn() -> String) -> Result<u64, SnapshotError> {
    match v {
        Value::Int(n) if n >= 0 => Ok(n as u64),
        Value::None => Ok(0),
        other => Err(shape(path(), "an address (a non-negative int)", heap, other)),
    }
}

fn int(heap: &Heap, v: Value, path: impl Fn() -> String) -> Result<i64, SnapshotError> {
    match v {
        Value::Int(n) => Ok(n),
        Value::Bool(b) => Ok(b as i64),
        other => Err(shape(path(), "an int", heap, other)),
    }
}

fn is_legacy(heap: &Heap, segs: Value) -> bool {
    let Value::List(l) = segs else { return false };
    heap.lists[l as usize].iter().any(|&s| {
        let Value::Dict(d) = s else { return false };
        let Some(Value::List(blocks)) = heap.get(d, "blocks") else { return false };
        heap.lists[blocks as usize].iter().any(|&b| matches!(b, Value::Dict(bd) if heap.get(bd, "history").is_some()))
    })
}

fn segments(heap: &mut Heap, v: Value, path: &str) -> Result<Vec<Segment>, SnapshotError> {
    let list = items(heap, v, path, "a list of segment dicts")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.into_iter().enumerate() {
        let p = format!("{path}[{i}]");
        let Value::Dict(d) = s else { return Err(shape(p, "a segment dict", heap, s)) };
        let seg_address = address(heap, need(heap, d, "address", &p)?, || format!("{p}.address"))?;
        let total_size = bytes(heap, need(heap, d, "total_size", &p)?, || format!("{p}.total_size"))?;
        let device = heap.get(d, "device").map(|v| int(heap, v, || format!("{p}.device"))).transpose()?.unwrap_or(0);
        let stream = heap.get(d, "stream").map(|v| int(heap, v, || format!("{p}.stream"))).transpose()?.unwrap_or(0);
        let segment_type = match heap.get(d, "segment_type") {
            Some(Value::Str(s)) if heap.str(s) == "large" => SegmentType::Large,
            Some(Value::Str(s)) if heap.str(s) == "small" => SegmentType::Small,
            _ => SegmentType::Unknown,
        };
        let segment_pool_id = match heap.get(d, "segment_pool_id") {
            Some(Value::Tuple(t)) if heap.tuples[t as usize].len() == 2 => {
                let t = &heap.tuples[t as usize];
                (
                    int(heap, t[0], || format!("{p}.segment_pool_id[0]"))?,
                    int(heap, t[1], || format!("{p}.segment_pool_id[1]"))?,
                )
            }
            // PyTorch 2.x before the tuple, or absent: the default pool.
            _ => (0, 0),
        };
        let is_expandable = matches!(heap.get(d, "is_expandable"), Some(Value::Bool(true)));
        let seg_frames = heap.get(d, "frames").map(|f| heap.stack_of(f).unwrap_or(0)).unwrap_or(0);
        let block_values = items(heap, need(heap, d, "blocks", &p)?, &format!("{p}.blocks"), "a list of block dicts")?;
        let mut blocks = Vec::with_capacity(block_values.len());
        let mut next_address = seg_address;
        let mut sum = 0u64;
        for (j, b) in block_values.into_iter().enumerate() {
            let bp = format!("{p}.blocks[{j}]");
            let Value::Dict(bd) = b else { return Err(shape(bp, "a block dict", heap, b)) };
            let size = match heap.get(bd, "size") {
                Some(v) => bytes(heap, v, || format!("{bp}.size"))?,
                None => {
                    return Err(SnapshotError::Shape {
                        path: bp,
                        expected: "a 'size' key in the block",
                        found: format!("the keys {}", keys_text(heap, bd)),
                    });
                }
            };
            let state = match heap.get(bd, "state") {
                Some(Value::Str(s)) => match heap.str(s) {
                    "active_allocated" => BlockState::ActiveAllocated,
                    "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
                    "inactive" => BlockState::Inactive,
                    _ => {
                        return Err(shape(
                            format!("{bp}.state"),
                            "'active_allocated', 'active_pending_free' or 'inactive'",
                            heap,
                            Value::Str(s),
                        ));
                    }
                },
                Some(other) => return Err(shape(format!("{bp}.state"), "a state string", heap, other)),
                None => BlockState::Inactive,
            };
            let (mut requested_size, mut frames) = (0, 0);
            if let Some(r) = heap.get(bd, "requested_size") {
                requested_size = bytes(heap, r, || format!("{bp}.requested_size"))?;
            } else if let Some(h) = heap.get(bd, "history") {
                // Legacy: the first history entry's real_size and frames.
                if let Some(&Value::Dict(hd)) = items(heap, h, &format!("{bp}.history"), "a list")?.first() {
                    if let Some(r) = heap.get(hd, "real_size") {
                        requested_size = bytes(heap, r, || format!("{bp}.history[0].real_size"))?;
                    }
                    if let Some(f) = heap.get(hd, "frames") {
                        frames = heap.stack_of(f).unwrap_or(0);
                    }
                }
            } else if state == BlockState::ActiveAllocated {
                requested_size = size;
            }
            if frames == 0
                && let Some(f) = heap.get(bd, "frames")
            {
                frames = heap.stack_of(f).unwrap_or(0);
            }
            let block_address = match heap.get(bd, "address") {
                Some(a) => address(heap, a, || format!("{bp}.address"))?,
                None => next_address,
            };
            next_address = block_address.saturating_add(size);
            sum = sum.saturating_add(size);
            blocks.push(Block { address: block_address, size, requested_size, state, frames });
        }
        if sum != total_size && !blocks.is_empty() && !is_expandable {
            return Err(SnapshotError::Shape {
                path: format!("{p}.blocks"),
                expected: "blocks whose sizes add up to the segment's total_size",
                found: format!("{sum} bytes of blocks in a segment of {total_size} bytes"),
            });
        }
        out.push(Segment {
            device,
            address: seg_address,
            total_size,
            stream,
            segment_type,
            segment_pool_id,
            is_expandable,
            frames: seg_frames,
            blocks,
        });
    }
    Ok(out)
}

fn need(heap: &Heap, d: u32, name: &'static str, path: &str) -> Result<Value, SnapshotError> {
    heap.get(d, name).ok_or_else(|| SnapshotError::Shape {
        path: path.to_owned(),
        expected: match name {
            "address" => "an 'address' key in the segment",
            "total_size" => "a 'total_size' key in the segment",
            _ => "a 'blocks' key in the segment",
        },
        found: format!("the keys {}", keys_text(heap, d)),
    })
}

/// Each device's trace, and how many leading entries the read dropped.
#[allow(clippy::type_complexity)]
fn device_traces(heap: &mut Heap, v: Value) -> Result<(Vec<Vec<TraceEntry>>, Vec<u64>), SnapshotError> {
    let devices = items(heap, v, "device_traces", "a list with one list of trace entries per device")?;
    let (mut out, mut skipped) = (Vec::with_capacity(devices.len()), Vec::with_capacity(devices.len()));
    for (dev, t) in devices.into_iter().enumerate() {
        let p = format!("device_traces[{dev}]");
        let l = match t {
            Value::List(l) => l,
            other => return Err(shape(p, "a list of trace entries", heap, other)),
        };
        let list = heap.entry_lists.remove(&l).unwrap_or_default();
        if let Some(&other) = heap.lists[l as usize].first() {
            return Err(shape(p, "only trace entries (dicts with an 'action')", heap, other));
        }
        if let Some(problem) = list.problem {
            let i = problem.index;
            let path =
                |field: &str| format!("{p}[{i}].{field} (the '{}' entry at byte {})", problem.action, problem.offset);
            return Err(match problem.kind {
                ProblemKind::Absurd { field, value } => SnapshotError::AbsurdSize { path: path(field), value },
                ProblemKind::Missing { field } => SnapshotError::Shape {
                    path: format!("{p}[{i}]"),
                    expected: ProblemKind::missing_key(field),
                    found: format!("a '{}' entry without one", problem.action),
                },
            });
        }
        skipped.push(list.skipped);
        out.push(list.entries);
    }
    Ok((out, skipped))
}

fn allocator_settings(heap: &Heap, v: Value) -> Result<AllocatorSettings, SnapshotError> {
    let Value::Dict(d) = v else { return Err(shape("allocator_settings", "a dict", heap, v)) };
    let alloc_conf = match heap.get(d, "PYTORCH_CUDA_ALLOC_CONF") {
        Some(Value::Str(s)) => heap.str(s).to_owned(),
        _ => String::new(),
    };
    let max_split_size = match heap.get(d, "max_split_size") {
        Some(Value::Int(n)) if n > 0 && (n as u64) < MAX_BYTES => Some(n as u64),
        // -1 (SIZE_MAX as int64) or absent: unlimited.
        Some(Value::Int(_)) | Some(Value::BigInt(_)) | None => None,
        Some(other) => return Err(shape("allocator_settings.max_split_size", "an int", heap, other)),
    };
    let garbage_collection_threshold = match heap.get(d, "garbage_collection_threshold") {
        Some(Value::Float(f)) if f > 0.0 && f < 1.0 => Some(f),
        Some(Value::Float(_)) | Some(Value::Int(_)) | None => None,
        Some(other) => return Err(shape("allocator_settings.garbage_collection_threshold", "a float", heap, other)),
    };
    let expandable_segments = matches!(heap.get(d, "expandable_segments"), Some(Value::Bool(true)));
    let mut roundup_power2_divisions = [0u64; ROUNDUP_BUCKETS];
    if let Some(Value::Dict(r)) = heap.get(d, "roundup_power2_divisions") {
        for &(k, v) in &heap.dicts[r as usize] {
            let (Value::Str(k), Value::Int(n)) = (k, v) else { continue };
            let Ok(key) = heap.str(k).parse::<u64>() else { continue };
            if key.is_power_of_two() && (key.trailing_zeros() as usize) < ROUNDUP_BUCKETS && n >= 0 {
                roundup_power2_divisions[key.trailing_zeros() as usize] = n as u64;
            }
        }
    }
    Ok(AllocatorSettings {
        alloc_conf,
        max_split_size,
        garbage_collection_threshold,
        expandable_segments,
        roundup_power2_divisions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every snapshot pickle under `dir`, recursively.
    fn pickles(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                pickles(&path, out);
            } else if std::fs::read(&path).is_ok_and(|b| is_pickle(&b)) {
                out.push(path);
            }
        }
    }

    /// The snapshot with every stack id replaced by its frames (the readers
    /// number stacks in the order they meet them).
    fn resolved(s: &Snapshot) -> (Snapshot, Vec<Vec<crate::format::model::Frame>>) {
        let mut s = s.clone();
        let mut stacks = Vec::new();
        let frames = std::mem::take(&mut s.frames);
        let mut resolve = |id: &mut u32| {
            stacks.push(frames.stack(*id).cloned().collect::<Vec<_>>());
            *id = 0;
        };
        for seg in &mut s.segments {
            resolve(&mut seg.frames);
            seg.blocks.iter_mut().for_each(|b| resolve(&mut b.frames));
        }
        s.device_traces.iter_mut().flatten().for_each(|e| resolve(&mut e.frames));
        (s, stacks)
    }

    /// The entry reader (trace entries read straight from the buffer) and the
    /// general machine give the same snapshot, and the same errors, on every
    /// recorded and written snapshot the tests have, whole, cut short, and
    /// windowed.
    #[test]
    fn the_entry_reader_agrees_with_the_general_machine() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        pickles(&root.join("../tests/data"), &mut files);
        assert!(files.len() >= 5, "snapshot fixtures not found: {files:?}");
        let mut entries = 0;
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            let whole = snapshot_of(pickle::read_with(&bytes[..], ReadOptions::default()).unwrap());
            let general = snapshot_of(pickle::read_general(&bytes[..], ReadOptions::default()).unwrap());
            match (&whole, &general) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(resolved(a), resolved(b), "{}", path.display());
                    entries += a.device_traces.iter().map(Vec::len).sum::<usize>();
                    // A window from the middle of the busiest trace.
                    if let Some(d) = a.busiest_device() {
                        let t = &a.device_traces[d];
                        let from = t[t.len() / 2].time_us;
                        let opts = ReadOptions { from_us: Some(from) };
                        let w = snapshot_of(pickle::read_with(&bytes[..], opts).unwrap()).unwrap();
                        let g = snapshot_of(pickle::read_general(&bytes[..], opts).unwrap()).unwrap();
                        assert_eq!(resolved(&w), resolved(&g), "{} windowed", path.display());
                        let skipped = w.skipped_entries[d] as usize;
                        assert_eq!(&t[skipped..], &w.device_traces[d][..], "{} windowed", path.display());
                        assert!(t[..skipped].iter().all(|e| e.time_us < from));
                    }
                }
                (a, b) => assert_eq!(a.as_ref().err().map(|e| e.to_string()), b.as_ref().err().map(|e| e.to_string())),
            }
            // Cut short anywhere: the same error either way.
            for cut in [bytes.len() / 3, bytes.len() / 2 + 7, bytes.len() - 1] {
                let a = pickle::read_with(&bytes[..cut], ReadOptions::default()).map(|_| ()).map_err(|e| e.to_string());
                let b =
                    pickle::read_general(&bytes[..cut], ReadOptions::default()).map(|_| ()).map_err(|e| e.to_string());
                assert_eq!(a, b, "{} cut at {cut}", path.display());
            }
        }
        assert!(entries > 1000, "too few trace entries to compare: {entries}");
    }
}
