//! From a pickle to a typed [`Snapshot`]: the top-level dict (or the bare
//! segment list of the oldest `torch.cuda.memory_snapshot()` dumps), segments and
//! blocks in both the current and the legacy (`history`) layouts, the device
//! traces, and the allocator settings. Unknown keys are tolerated; values of the
//! wrong type, and sizes no device has, are errors naming their path.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::SnapshotError;
use super::model::{Action, AllocatorSettings, Block, FrameTable, Segment, SegmentType, Snapshot, TraceEntry};
use super::pickle::{self, HAS_ADDR, HAS_DEVICE_FREE, HAS_SIZE, Heap, Pickle, Value};
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
    let Pickle { protocol, top, mut heap } = pickle::read(input)?;
    let top_dict = match top {
        Value::Dict(d) => d,
        // `torch.cuda.memory_snapshot()` pickled directly: the segment list only.
        Value::List(_) => {
            let segments = segments(&mut heap, top, "segments")?;
            return Ok(Snapshot {
                protocol,
                segments,
                device_traces: Vec::new(),
                frames: frame_table(&mut heap),
                allocator_settings: None,
                legacy_layout: true,
                host_segments: 0,
                host_trace_entries: 0,
                external_annotations: 0,
                other_keys: Vec::new(),
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
    let (mut segs, mut traces, mut settings) = (None, None, None);
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
    let device_traces = match traces {
        None => Vec::new(),
        Some(t) => device_traces(&heap, t)?,
    };
    let allocator_settings = match settings {
        None | Some(Value::None) => None,
        Some(s) => Some(allocator_settings(&heap, s)?),
    };
    Ok(Snapshot {
        protocol,
        segments,
        device_traces,
        frames: frame_table(&mut heap),
        allocator_settings,
        legacy_layout,
        host_segments,
        host_trace_entries,
        external_annotations,
        other_keys,
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
        Value::List(l) => heap.lists[l as usize].len() as u64,
        Value::Tuple(t) => heap.tuples[t as usize].len() as u64,
        _ => 0,
    }
}

fn count_entries(heap: &Heap, v: Value) -> u64 {
    match v {
        Value::List(l) => {
            heap.lists[l as usize].iter().map(|&x| len_of(heap, x).max(matches!(x, Value::Entry(_)) as u64)).sum()
        }
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

fn device_traces(heap: &Heap, v: Value) -> Result<Vec<Vec<TraceEntry>>, SnapshotError> {
    let devices = items(heap, v, "device_traces", "a list with one list of trace entries per device")?;
    let mut out = Vec::with_capacity(devices.len());
    for (dev, t) in devices.into_iter().enumerate() {
        let p = format!("device_traces[{dev}]");
        let entries = match t {
            Value::List(l) => &heap.lists[l as usize],
            other => return Err(shape(p, "a list of trace entries", heap, other)),
        };
        let mut trace = Vec::with_capacity(entries.len());
        for (i, &e) in entries.iter().enumerate() {
            let Value::Entry(id) = e else {
                return Err(shape(format!("{p}[{i}]"), "a trace entry (a dict with an 'action')", heap, e));
            };
            let raw = &heap.entries[id as usize];
            let action = Action::from_name(heap.str(raw.action));
            let path =
                |field: &str| format!("{p}[{i}].{field} (the '{}' entry at byte {})", heap.str(raw.action), raw.offset);
            let size = match (raw.has & HAS_SIZE != 0).then_some(raw.size) {
                Some(s) if (0..=MAX_BYTES as i64).contains(&s) => s as u64,
                Some(s) => return Err(SnapshotError::AbsurdSize { path: path("size"), value: s as i128 }),
                None if action == Action::Other || action == Action::Snapshot => 0,
                None => {
                    return Err(SnapshotError::Shape {
                        path: format!("{p}[{i}]"),
                        expected: "a 'size' key in the trace entry",
                        found: format!("a '{}' entry without one", heap.str(raw.action)),
                    });
                }
            };
            let addr = match (action, raw.has & (HAS_ADDR | HAS_DEVICE_FREE) != 0) {
                (Action::Oom, true) => raw.addr.max(0) as u64,
                (_, true) if raw.addr >= 0 => raw.addr as u64,
                (_, true) => return Err(SnapshotError::AbsurdSize { path: path("addr"), value: raw.addr as i128 }),
                (
                    Action::Alloc
                    | Action::FreeRequested
                    | Action::FreeCompleted
                    | Action::SegmentAlloc
                    | Action::SegmentFree,
                    false,
                ) => {
                    return Err(SnapshotError::Shape {
                        path: format!("{p}[{i}]"),
                        expected: "an 'addr' key in the trace entry",
                        found: format!("a '{}' entry without one", heap.str(raw.action)),
                    });
                }
                _ => 0,
            };
            trace.push(TraceEntry { action, addr, size, stream: raw.stream, time_us: raw.time_us, frames: raw.frames });
        }
        out.push(trace);
    }
    Ok(out)
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
