//! Chrome Trace Event export (JSON object format), for Perfetto and
//! `chrome://tracing`.
//!
//! Layout: process 0 is the host — phases as complete (`"X"`) events on the
//! thread that opened them, and the process's resident memory as a counter.
//! Each device is process `index + 1`: counters (`"C"`) for allocated and
//! reserved bytes and a stacked counter of allocated bytes by category; kernels
//! and copies as complete events on one track per stream; NVML samples as
//! counters. Every process and track is named with `"M"` metadata events.
//! Times are microseconds since the recording's start.

use std::io::Write;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::ProfilerError;
use crate::profile::Profile;
use crate::record::{NO_DEVICE, copy_kind_of, kind};
use crate::sampler::{GpuSample, NvmlStatus};
use crate::timeline::Category;

const EXPORT: &str = "chrome trace";

/// Process id of the host in the trace.
pub const HOST_PID: u32 = 0;

/// Process id of an NVML device that matches no device of the profile.
const NVML_PID_BASE: u32 = 1_000_000;

/// Options for [`Profile::write_chrome_trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChromeTraceOptions {
    /// Points per counter series, by min/max decimation (peaks kept).
    pub max_counter_points: usize,
    /// Include kernel and copy events.
    pub kernels: bool,
    /// Include NVML and host samples as counters.
    pub samples: bool,
}

impl Default for ChromeTraceOptions {
    fn default() -> Self {
        ChromeTraceOptions { max_counter_points: 20_000, kernels: true, samples: true }
    }
}

/// One trace event.
#[derive(Serialize)]
struct TraceEvent<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Value>,
}

struct Out<W: Write> {
    w: W,
    first: bool,
}

impl<W: Write> Out<W> {
    fn event(&mut self, e: &TraceEvent<'_>) -> Result<(), ProfilerError> {
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.w.write_all(sep).map_err(|source| ProfilerError::Write { export: EXPORT, source })?;
        serde_json::to_writer(&mut self.w, e).map_err(|source| ProfilerError::Json {
            export: EXPORT,
            what: "an event",
            source,
        })
    }

    fn meta(&mut self, name: &str, pid: u32, tid: u32, value: Value) -> Result<(), ProfilerError> {
        self.event(&TraceEvent { name, cat: None, ph: "M", ts: 0.0, dur: None, pid, tid, args: Some(value) })
    }

    fn counter(&mut self, name: &str, pid: u32, ts: f64, args: Value) -> Result<(), ProfilerError> {
        self.event(&TraceEvent { name, cat: Some("memory"), ph: "C", ts, dur: None, pid, tid: 0, args: Some(args) })
    }
}

impl Profile {
    fn ts(&self, time_ns: u64) -> f64 {
        time_ns.saturating_sub(self.start_ns) as f64 / 1000.0
    }

    /// Writes the profile as Chrome Trace Event JSON.
    pub fn write_chrome_trace<W: Write>(&self, writer: W, options: &ChromeTraceOptions) -> Result<(), ProfilerError> {
        let mut out = Out { w: std::io::BufWriter::new(writer), first: true };
        let write_err = |source| ProfilerError::Write { export: EXPORT, source };
        out.w.write_all(b"{\"traceEvents\":[").map_err(write_err)?;

        // Host: process and thread names, phases, resident memory.
        out.meta("process_name", HOST_PID, 0, json!({ "name": "host" }))?;
        out.meta("process_sort_index", HOST_PID, 0, json!({ "sort_index": 0 }))?;
        for (t, name) in &self.thread_names {
            out.meta("thread_name", HOST_PID, *t, json!({ "name": name }))?;
        }
        for p in &self.phases {
            out.event(&TraceEvent {
                name: &p.name,
                cat: Some("phase"),
                ph: "X",
                ts: self.ts(p.start_ns),
                dur: Some(p.end_ns.saturating_sub(p.start_ns) as f64 / 1000.0),
                pid: HOST_PID,
                tid: p.thread,
                args: Some(json!({ "path": p.path, "depth": p.depth, "closed": p.closed })),
            })?;
        }
        if options.samples {
            for s in &self.samples.host_samples {
                out.counter(
                    "resident_bytes",
                    HOST_PID,
                    self.ts(s.time_ns),
                    json!({ "resident_bytes": s.resident_bytes }),
                )?;
            }
        }

        // Devices: names, memory counters.
        for d in &self.devices {
            let pid = d.info.index.saturating_add(1);
            let name = format!("{} (device {})", d.info.name, d.info.index);
            out.meta("process_name", pid, 0, json!({ "name": name }))?;
            out.meta("process_sort_index", pid, 0, json!({ "sort_index": pid }))?;
            out.meta("thread_name", pid, 0, json!({ "name": "memory" }))?;
            let t = self.timeline_decimated(d.info.index, options.max_counter_points)?;
            for (name, series) in [("allocated_bytes", &t.allocated_bytes), ("reserved_bytes", &t.reserved_bytes)] {
                for (&time, &bytes) in series.time_ns.iter().zip(&series.bytes) {
                    let mut args = Map::new();
                    args.insert(name.to_owned(), bytes.into());
                    out.counter(name, pid, self.ts(time), Value::Object(args))?;
                }
            }
            let c = self.categories_decimated(d.info.index, options.max_counter_points)?;
            for (&time, by) in c.time_ns.iter().zip(&c.by_category) {
                let mut args = Map::new();
                for cat in Category::ALL {
                    args.insert(cat.as_str().to_owned(), by.get(cat).into());
                }
                out.counter("allocated_by_category", pid, self.ts(time), Value::Object(args))?;
            }
        }

        // Kernels and copies, one track per (device, stream).
        if options.kernels {
            self.write_device_work(&mut out)?;
        }

        if options.samples {
            self.write_gpu_samples(&mut out)?;
        }

        out.w
            .write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":")
            .map_err(|source| ProfilerError::Write { export: EXPORT, source })?;
        let other = json!({
            "producer": "vramlab-profiler",
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "nvml": self.samples.nvml.to_string(),
        });
        serde_json::to_writer(&mut out.w, &other).map_err(|source| ProfilerError::Json {
            export: EXPORT,
            what: "the trailer",
            source,
        })?;
        out.w.write_all(b"}\n").map_err(|source| ProfilerError::Write { export: EXPORT, source })?;
        out.w.flush().map_err(|source| ProfilerError::Write { export: EXPORT, source })
    }

    /// The Chrome trace as a string.
    pub fn chrome_trace(&self, options: &ChromeTraceOptions) -> Result<String, ProfilerError> {
        let mut buf = Vec::new();
        self.write_chrome_trace(&mut buf, options)?;
        String::from_utf8(buf).map_err(|e| ProfilerError::Write {
            export: EXPORT,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    fn write_device_work<W: Write>(&self, out: &mut Out<W>) -> Result<(), ProfilerError> {
        let rec = self.recording();
        let mut named: Vec<(u32, u32)> = Vec::new();
        let mut i = 0;
        while i < rec.len() {
            let r = rec.get(i);
            let ctx = rec.context(r);
            if ctx.device == NO_DEVICE || (r.kind != kind::KERNEL && r.kind != kind::COPY) {
                i += 1;
                continue;
            }
            let pid = ctx.device.saturating_add(1);
            let tid = ctx.stream.saturating_add(1);
            if !named.contains(&(pid, tid)) {
                named.push((pid, tid));
                out.meta("thread_name", pid, tid, json!({ "name": format!("stream {}", ctx.stream) }))?;
            }
            if r.kind == kind::KERNEL {
                let (duration, launch) = if i + 1 < rec.len() && rec.get(i + 1).kind == kind::KERNEL_CONT {
                    let c = rec.get(i + 1);
                    i += 1;
                    (c.time_ns, c.a)
                } else {
                    (0, 0)
                };
                let k = rec.kernels.get(r.c as usize);
                let name = k.map_or("kernel", |k| k.name.as_str());
                out.event(&TraceEvent {
                    name,
                    cat: Some("kernel"),
                    ph: "X",
                    ts: self.ts(r.time_ns),
                    dur: Some(duration as f64 / 1000.0),
                    pid,
                    tid,
                    args: Some(json!({
                        "algorithm": k.map_or("", |k| k.algorithm.as_str()),
                        "flops": r.a,
                        "bytes": r.b,
                        "launch_ns": launch,
                    })),
                })?;
            } else {
                let kind = copy_kind_of(r.c);
                out.event(&TraceEvent {
                    name: "copy",
                    cat: Some("copy"),
                    ph: "X",
                    ts: self.ts(r.time_ns),
                    dur: Some(r.a as f64 / 1000.0),
                    pid,
                    tid,
                    args: Some(json!({
                        "kind": kind,
                        "bytes": r.b,
                        "pinned": r.c & 4 != 0,
                        "non_blocking": r.c & 8 != 0,
                    })),
                })?;
            }
            i += 1;
        }
        Ok(())
    }

    fn write_gpu_samples<W: Write>(&self, out: &mut Out<W>) -> Result<(), ProfilerError> {
        let NvmlStatus::Available { devices, .. } = &self.samples.nvml else {
            return Ok(());
        };
        for nd in devices {
            // The profile device matched by UUID, else a process of its own.
            let matched = self.reconciliation.iter().find(|r| r.nvml_index == Some(nd.nvml_index)).map(|r| r.device);
            let pid = match matched {
                Some(d) => d.saturating_add(1),
                None => {
                    let pid = NVML_PID_BASE + nd.nvml_index;
                    let name = format!("nvml:{} {}", nd.nvml_index, nd.name.as_deref().unwrap_or(""));
                    out.meta("process_name", pid, 0, json!({ "name": name.trim_end() }))?;
                    pid
                }
            };
            for s in self.samples.gpu.iter().filter(|s| s.nvml_index == nd.nvml_index) {
                self.write_gpu_sample(out, pid, s)?;
            }
        }
        Ok(())
    }

    fn write_gpu_sample<W: Write>(&self, out: &mut Out<W>, pid: u32, s: &GpuSample) -> Result<(), ProfilerError> {
        let ts = self.ts(s.time_ns);
        let mut memory = Map::new();
        if let Some(v) = s.driver_used_bytes {
            memory.insert("nvml_driver_used_bytes".into(), v.into());
        }
        if let Some(v) = s.process_used_bytes {
            memory.insert("nvml_process_used_bytes".into(), v.into());
        }
        if !memory.is_empty() {
            out.counter("nvml_memory", pid, ts, Value::Object(memory))?;
        }
        let mut busy = Map::new();
        if let Some(v) = s.gpu_busy_percent {
            busy.insert("gpu_busy_percent".into(), v.into());
        }
        if let Some(v) = s.memory_busy_percent {
            busy.insert("memory_busy_percent".into(), v.into());
        }
        if !busy.is_empty() {
            out.counter("nvml_busy", pid, ts, Value::Object(busy))?;
        }
        if let Some(v) = s.power_milliwatts {
            out.counter("nvml_power", pid, ts, json!({ "power_watts": f64::from(v) / 1000.0 }))?;
        }
        if let Some(v) = s.temperature_celsius {
            out.counter("nvml_temperature", pid, ts, json!({ "temperature_celsius": v }))?;
        }
        let mut clocks = Map::new();
        if let Some(v) = s.sm_clock_mhz {
            clocks.insert("sm_clock_mhz".into(), v.into());
        }
        if let Some(v) = s.memory_clock_mhz {
            clocks.insert("memory_clock_mhz".into(), v.into());
        }
        if !clocks.is_empty() {
            out.counter("nvml_clocks", pid, ts, Value::Object(clocks))?;
        }
        Ok(())
    }
}
