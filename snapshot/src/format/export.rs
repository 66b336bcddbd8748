//! Writing snapshots: a [`Snapshot`] as a pickle shaped as PyTorch's
//! `_dump_snapshot` writes it (protocol 2, the one every reader takes:
//! pytorch.org/memory_viz, `torch/cuda/_memory_viz.py`, vramlab), and a device's
//! trace as a Chrome/Perfetto trace (counters for allocated and reserved bytes,
//! instant events for out-of-memory).

use std::collections::HashMap;
use std::io::{self, Write};

use super::estimate::{ESTIMATE_KEY, Estimate, Scalar};
use super::model::{Action, SegmentType, Snapshot, StackId};
use vramlab_allocator::BlockState;

/// A protocol-2 pickle writer with a memo for repeated strings and frames.
struct Pickler<W: Write> {
    out: W,
    memo: HashMap<String, u32>,
    frame_memo: Vec<Option<u32>>,
    next_memo: u32,
}

impl<W: Write> Pickler<W> {
    fn put(&mut self) -> io::Result<u32> {
        let id = self.next_memo;
        self.next_memo += 1;
        if id < 256 {
            self.out.write_all(&[b'q', id as u8])?;
        } else {
            self.out.write_all(b"r")?;
            self.out.write_all(&id.to_le_bytes())?;
        }
        Ok(id)
    }

    fn get(&mut self, id: u32) -> io::Result<()> {
        if id < 256 {
            self.out.write_all(&[b'h', id as u8])
        } else {
            self.out.write_all(b"j")?;
            self.out.write_all(&id.to_le_bytes())
        }
    }

    fn str(&mut self, s: &str) -> io::Result<()> {
        if let Some(&id) = self.memo.get(s) {
            return self.get(id);
        }
        self.out.write_all(b"X")?;
        self.out.write_all(&(s.len() as u32).to_le_bytes())?;
        self.out.write_all(s.as_bytes())?;
        // Memoize short strings only (keys, actions, file names).
        if s.len() <= 256 {
            let id = self.put()?;
            self.memo.insert(s.to_owned(), id);
        }
        Ok(())
    }

    fn int(&mut self, n: i128) -> io::Result<()> {
        if (0..256).contains(&n) {
            self.out.write_all(&[b'K', n as u8])
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&n) {
            self.out.write_all(b"J")?;
            self.out.write_all(&(n as i32).to_le_bytes())
        } else {
            // LONG1: little-endian two's complement, as short as it goes.
            let bytes = n.to_le_bytes();
            let mut len = 16;
            while len > 1 {
                let top = bytes[len - 1];
                let next_sign = bytes[len - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    len -= 1;
                } else {
                    break;
                }
            }
            self.out.write_all(&[0x8a, len as u8])?;
            self.out.write_all(&bytes[..len])
        }
    }

    /// A dict item: the key `key` and the integer `n`.
    fn key_int(&mut self, key: &str, n: i128) -> io::Result<()> {
        self.str(key)?;
        self.int(n)
    }

    fn float(&mut self, f: f64) -> io::Result<()> {
        self.out.write_all(b"G")?;
        self.out.write_all(&f.to_be_bytes())
    }

    fn bool(&mut self, b: bool) -> io::Result<()> {
        self.out.write_all(&[if b { 0x88 } else { 0x89 }])
    }

    fn dict_start(&mut self) -> io::Result<()> {
        self.out.write_all(b"}(")
    }

    fn dict_end(&mut self) -> io::Result<()> {
        self.out.write_all(b"u")
    }

    fn list_start(&mut self) -> io::Result<()> {
        self.out.write_all(b"](")
    }

    fn list_end(&mut self) -> io::Result<()> {
        self.out.write_all(b"e")
    }

    /// A frames list: frame dicts written once and shared through the memo, as PyTorch's are.
    fn frames(&mut self, snap: &Snapshot, stack: StackId) -> io::Result<()> {
        self.list_start()?;
        for &f in snap.frames.stacks.get(stack as usize).map(|s| &s[..]).unwrap_or(&[]) {
            if self.frame_memo.len() <= f as usize {
                self.frame_memo.resize(f as usize + 1, None);
            }
            match self.frame_memo[f as usize] {
                Some(id) => self.get(id)?,
                None => {
                    let frame = &snap.frames.frames[f as usize];
                    self.dict_start()?;
                    self.str("filename")?;
                    self.str(&frame.filename)?;
                    self.str("line")?;
                    self.int(frame.line as i128)?;
                    self.str("name")?;
                    self.str(&frame.name)?;
                    self.dict_end()?;
                    let id = self.put()?;
                    self.frame_memo[f as usize] = Some(id);
                }
            }
        }
        self.list_end()
    }
}

/// Writes `snap` as a memory-snapshot pickle (protocol 2) that PyTorch's
/// readers accept: `segments` (with blocks, frames, pool ids), `device_traces`
/// (each entry with action, addr or device_free, size, stream, time_us,
/// frames), `allocator_settings` when the snapshot has them, and the
/// `vramlab_estimate` marker of an estimate.
pub fn write_snapshot<W: Write>(snap: &Snapshot, out: W) -> io::Result<()> {
    let mut p = Pickler { out, memo: HashMap::new(), frame_memo: Vec::new(), next_memo: 0 };
    p.out.write_all(&[0x80, 2])?;
    p.dict_start()?;
    p.str("segments")?;
    p.list_start()?;
    for seg in &snap.segments {
        p.dict_start()?;
        p.key_int("device", seg.device as i128)?;
        p.key_int("address", seg.address as i128)?;
        p.key_int("total_size", seg.total_size as i128)?;
        let allocated: u64 = seg.allocated_bytes();
        let active: u64 = seg.blocks.iter().filter(|b| b.state != BlockState::Inactive).map(|b| b.size).sum();
        let requested: u64 =
            seg.blocks.iter().filter(|b| b.state != BlockState::Inactive).map(|b| b.requested_size).sum();
        p.key_int("allocated_size", allocated as i128)?;
        p.key_int("active_size", active as i128)?;
        p.key_int("requested_size", requested as i128)?;
        p.key_int("stream", seg.stream as i128)?;
        p.str("segment_type")?;
        let large = match seg.segment_type {
            SegmentType::Large => true,
            SegmentType::Small => false,
            SegmentType::Unknown => seg.total_size > vramlab_allocator::consts::SMALL_BUFFER,
        };
        p.str(if large { "large" } else { "small" })?;
        p.str("segment_pool_id")?;
        p.int(seg.segment_pool_id.0 as i128)?;
        p.int(seg.segment_pool_id.1 as i128)?;
        p.out.write_all(&[0x86])?; // TUPLE2
        p.str("is_expandable")?;
        p.bool(seg.is_expandable)?;
        p.str("frames")?;
        p.frames(snap, seg.frames)?;
        p.str("blocks")?;
        p.list_start()?;
        for b in &seg.blocks {
            p.dict_start()?;
            p.key_int("address", b.address as i128)?;
            p.key_int("size", b.size as i128)?;
            p.key_int("requested_size", if b.state == BlockState::Inactive { 0 } else { b.requested_size as i128 })?;
            p.str("state")?;
            p.str(match b.state {
                BlockState::ActiveAllocated => "active_allocated",
                BlockState::ActivePendingFree => "active_pending_free",
                BlockState::Inactive => "inactive",
            })?;
            p.str("frames")?;
            p.frames(snap, b.frames)?;
            p.dict_end()?;
        }
        p.list_end()?;
        p.dict_end()?;
    }
    p.list_end()?;
    p.str("device_traces")?;
    p.list_start()?;
    for trace in &snap.device_traces {
        p.list_start()?;
        for e in trace {
            p.dict_start()?;
            p.str("action")?;
            p.str(e.action.as_str())?;
            p.str(if e.action == Action::Oom { "device_free" } else { "addr" })?;
            p.int(e.addr as i128)?;
            p.key_int("size", e.size as i128)?;
            p.key_int("stream", e.stream as i128)?;
            p.key_int("time_us", e.time_us as i128)?;
            p.str("frames")?;
            p.frames(snap, e.frames)?;
            p.dict_end()?;
        }
        p.list_end()?;
    }
    p.list_end()?;
    if let Some(s) = &snap.allocator_settings {
        p.str("allocator_settings")?;
        p.dict_start()?;
        p.str("PYTORCH_CUDA_ALLOC_CONF")?;
        p.str(&s.alloc_conf)?;
        p.key_int("max_split_size", s.max_split_size.map_or(-1, |m| m as i128))?;
        p.str("garbage_collection_threshold")?;
        p.float(s.garbage_collection_threshold.unwrap_or(0.0))?;
        p.str("expandable_segments")?;
        p.bool(s.expandable_segments)?;
        p.str("roundup_power2_divisions")?;
        p.dict_start()?;
        for (i, d) in s.roundup_power2_divisions.iter().enumerate() {
            p.str(&(1u64 << i).to_string())?;
            p.int(*d as i128)?;
        }
        p.dict_end()?;
        p.dict_end()?;
    }
    if let Some(e) = &snap.estimate {
        p.str(ESTIMATE_KEY)?;
        estimate(&mut p, e)?;
    }
    p.str("external_annotations")?;
    p.list_start()?;
    p.list_end()?;
    p.dict_end()?;
    p.out.write_all(b".")?;
    p.out.flush()
}

/// The `vramlab_estimate` marker, as the capture writes it.
fn estimate<W: Write>(p: &mut Pickler<W>, e: &Estimate) -> io::Result<()> {
    p.dict_start()?;
    p.key_int("version", e.version as i128)?;
    p.str("torch")?;
    p.str(&e.torch)?;
    p.str("gpu")?;
    p.dict_start()?;
    p.str("name")?;
    p.str(&e.gpu.name)?;
    p.key_int("total_memory", e.gpu.total_memory as i128)?;
    p.key_int("sm_count", e.gpu.sm_count as i128)?;
    p.key_int("major", e.gpu.major as i128)?;
    p.key_int("minor", e.gpu.minor as i128)?;
    for (k, v) in &e.gpu.other {
        p.str(k)?;
        match v {
            Scalar::Bool(b) => p.bool(*b)?,
            Scalar::Int(n) => p.int(*n as i128)?,
            Scalar::Float(f) => p.float(*f)?,
            Scalar::Str(s) => p.str(s)?,
        }
    }
    p.dict_end()?;
    p.str("rules")?;
    p.list_start()?;
    for r in &e.rules {
        p.dict_start()?;
        p.str("name")?;
        p.str(&r.name)?;
        p.key_int("count", r.count as i128)?;
        p.key_int("bytes", r.bytes as i128)?;
        p.str("why")?;
        p.str(&r.why)?;
        if let Some(b) = &r.bound {
            p.str("bound")?;
            p.str(b)?;
        }
        p.dict_end()?;
    }
    p.list_end()?;
    p.str("capture_s")?;
    p.float(e.capture_s)?;
    p.str("startup_s")?;
    p.float(e.startup_s)?;
    p.str("argv")?;
    p.list_start()?;
    for a in &e.argv {
        p.str(a)?;
    }
    p.list_end()?;
    p.dict_end()
}

/// Writes device `device`'s trace of `snap` as a Chrome trace (JSON, for
/// chrome://tracing and ui.perfetto.dev): the counters `allocated` (requested
/// bytes live) and `reserved` (segment bytes) at every change, and an instant
/// event per out-of-memory. Times are the entries' `time_us` (or their index
/// when the snapshot has no times).
pub fn write_chrome_trace<W: Write>(snap: &Snapshot, device: usize, mut out: W) -> io::Result<()> {
    let empty = Vec::new();
    let trace = snap.device_traces.get(device).unwrap_or(&empty);
    let has_times = trace.iter().any(|e| e.time_us != 0);
    let t0 = trace.first().map_or(0, |e| e.time_us);
    let free_on_completed = trace.iter().any(|e| e.action == Action::FreeCompleted);
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    // Counted from the first entry: memory live before it is not in the counters.
    let mut allocated: i128 = 0;
    let mut reserved: i128 = 0;
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    writeln!(
        out,
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{device},\"args\":{{\"name\":\"vramlab replay, device {device}\"}}}}"
    )?;
    for (i, e) in trace.iter().enumerate() {
        let ts = if has_times { e.time_us - t0 } else { i as i64 };
        let before = (allocated, reserved);
        match e.action {
            Action::Alloc => {
                allocated += e.size as i128;
                sizes.insert(e.addr, e.size);
            }
            Action::FreeCompleted if free_on_completed => {
                allocated -= sizes.remove(&e.addr).unwrap_or(e.size) as i128;
            }
            Action::FreeRequested if !free_on_completed => {
                allocated -= sizes.remove(&e.addr).unwrap_or(e.size) as i128;
            }
            Action::SegmentAlloc | Action::SegmentMap => reserved += e.size as i128,
            Action::SegmentFree | Action::SegmentUnmap => reserved -= e.size as i128,
            Action::Oom => {
                let frame = snap.frames.stack(e.frames).next().map(|f| f.short()).unwrap_or_default();
                writeln!(
                    out,
                    ",{{\"name\":\"out of memory\",\"ph\":\"i\",\"s\":\"p\",\"pid\":{device},\"tid\":0,\"ts\":{ts},\
                     \"args\":{{\"requested_bytes\":{},\"device_free_bytes\":{},\"frame\":{}}}}}",
                    e.size,
                    e.addr,
                    serde_json::to_string(&frame).unwrap_or_else(|_| "\"\"".to_owned())
                )?;
            }
            _ => {}
        }
        if (allocated, reserved) != before {
            writeln!(
                out,
                ",{{\"name\":\"memory\",\"ph\":\"C\",\"pid\":{device},\"ts\":{ts},\"args\":{{\"allocated_bytes\":{allocated},\"reserved_bytes\":{reserved}}}}}"
            )?;
        }
    }
    out.write_all(b"]}\n")?;
    out.flush()
}
