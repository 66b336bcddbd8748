//! `trace.json`: a Chrome trace event file (JSON object format, opened by
//! ui.perfetto.dev and `chrome://tracing`) of one case, built from the results
//! file alone — so `cargo xtask report --from` on another machine writes it too.
//! It holds the case's memory counters (allocated, reserved), its allocated
//! bytes by category as a stacked counter, its phases as slices and its kernels
//! (the first `MAX_KERNEL_SLICES` the results carry) as slices on their own
//! tracks, one per device and stream. Also the
//! trace of a replay ([`replay_trace`]): its memory counters, peak and
//! out-of-memory events.

use serde_json::{Value, json};
use vramlab_replay::timeline::ReplayTimeline;
use vramlab_suites::{CaseResult, CategoryStack, KernelSlice, MemoryTimeline};

const PID: u32 = 1;
/// The first kernel track's thread id (0 holds the counters, 1 the phases).
const KERNEL_TID: u32 = 2;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace of `case` (which must have a timeline), as JSON text.
pub fn case_trace(suite: &str, case: &CaseResult, timeline: &MemoryTimeline) -> String {
    let mut events: Vec<Value> = vec![
        json!({"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
               "args": {"name": format!("{} · {} ({})", suite, case.name, timeline.device)}}),
        json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": 1, "args": {"name": "phases"}}),
    ];
    for (name, s) in [("allocated_bytes", &timeline.allocated), ("reserved_bytes", &timeline.reserved)] {
        for (&t, &b) in s.time_ns.iter().zip(&s.bytes) {
            events.push(json!({"name": name, "ph": "C", "ts": us(t), "pid": PID, "tid": 0, "args": {"bytes": b}}));
        }
    }
    if let Some(stack) = &case.categories {
        push_categories(&mut events, stack);
    }
    for p in &timeline.phases {
        events.push(json!({"name": p.name, "cat": "phase", "ph": "X", "ts": us(p.start_ns),
                           "dur": us(p.end_ns.saturating_sub(p.start_ns)), "pid": PID, "tid": 1,
                           "args": {"path": p.path}}));
    }
    push_kernels(&mut events, &case.kernels);
    events.push(json!({"name": "peak allocated", "ph": "i", "s": "p", "ts": us(timeline.peak_time_ns), "pid": PID,
                       "tid": 0, "args": {"bytes": timeline.peak_allocated_bytes, "phase": timeline.peak_phase}}));
    json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string()
}

/// The trace of one or more replays (`cargo xtask replay|whatif --report`):
/// one process per replay named `name`, with allocated and reserved bytes as
/// counters, the reserved peak and each out-of-memory as instant events. A
/// replay has no clock: `ts` counts `unit` (trace ops or entries), one per
/// microsecond.
pub fn replay_trace(unit: &str, runs: &[(&str, &ReplayTimeline)]) -> String {
    let mut events: Vec<Value> = Vec::new();
    for (k, (name, t)) in runs.iter().enumerate() {
        let pid = k as u32 + 1;
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": format!("{name} (x: {unit})")}}));
        for p in &t.points {
            let counters =
                [("allocated_bytes", p.allocated_bytes, p.ops), ("reserved_bytes", p.reserved_bytes, p.reserved_ops)];
            for (counter, bytes, ts) in counters {
                events.push(json!({"name": counter, "cat": "memory", "ph": "C", "ts": ts, "pid": pid, "tid": 0,
                                   "args": {"bytes": bytes}}));
            }
        }
        if let Some(p) = &t.peak {
            events.push(json!({"name": "peak reserved", "ph": "i", "s": "p", "ts": p.ops, "pid": pid, "tid": 0,
                               "args": {"reserved_bytes": p.reserved_bytes, "allocated_bytes": p.allocated_bytes,
                                        "largest_free_block_bytes": p.largest_free_block_bytes,
                                        "segments": p.segments.len()}}));
        }
        for o in &t.ooms {
            events.push(json!({"name": "out of memory", "cat": "oom", "ph": "i", "s": "p", "ts": o.index + 1,
                               "pid": pid, "tid": 0,
                               "args": {"index": o.index, "line": o.line, "requested_bytes": o.requested_bytes,
                                        "reserved_bytes": o.reserved_bytes, "allocated_bytes": o.allocated_bytes,
                                        "reserved_unallocated_bytes": o.reserved_unallocated_bytes,
                                        "largest_free_block_bytes": o.largest_free_block_bytes,
                                        "message": o.message}}));
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"producer": "vramlab replay", "x": unit}})
        .to_string()
}

/// Kernels as complete events, one track per (device, stream), after the phases' track.
fn push_kernels(events: &mut Vec<Value>, kernels: &[KernelSlice]) {
    let mut tracks: Vec<(&str, u32)> = Vec::new();
    for k in kernels {
        let tid = match tracks.iter().position(|t| *t == (k.device.as_str(), k.stream)) {
            Some(i) => KERNEL_TID + i as u32,
            None => {
                tracks.push((&k.device, k.stream));
                let tid = KERNEL_TID + tracks.len() as u32 - 1;
                events.push(json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                                   "args": {"name": format!("kernels · {} stream {}", k.device, k.stream)}}));
                tid
            }
        };
        events.push(json!({"name": k.name, "cat": "kernel", "ph": "X", "ts": us(k.start_ns),
                           "dur": us(k.duration_ns), "pid": PID, "tid": tid,
                           "args": {"algorithm": k.algorithm, "device": k.device, "stream": k.stream}}));
    }
}

fn push_categories(events: &mut Vec<Value>, stack: &CategoryStack) {
    for (i, &t) in stack.time_ns.iter().enumerate() {
        let args: serde_json::Map<String, Value> =
            stack.by_category_bytes.iter().map(|(k, v)| (k.clone(), json!(v.get(i).copied().unwrap_or(0)))).collect();
        events.push(json!({"name": "allocated_by_category", "ph": "C", "ts": us(t), "pid": PID, "tid": 0,
                           "args": args}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_has_counters_phases_and_the_peak() {
        let t = crate::charts::tests::known_timeline();
        let case = CaseResult::ok("train_step").with_duration_ns(1).with_timeline(t.clone()).with_kernels(vec![
            KernelSlice {
                name: "matmul<f32>".into(),
                algorithm: "gemm".into(),
                device: "cpu:0".into(),
                stream: 0,
                start_ns: 2_000_000,
                duration_ns: 500_000,
            },
            KernelSlice {
                name: "relu".into(),
                algorithm: String::new(),
                device: "cpu:0".into(),
                stream: 1,
                start_ns: 2_600_000,
                duration_ns: 1_000,
            },
        ]);
        let v: Value = serde_json::from_str(&case_trace("memory", &case, &t)).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let counters = ev.iter().filter(|e| e["ph"] == "C" && e["name"] == "allocated_bytes").count();
        assert_eq!(counters, 4);
        let phase = ev.iter().find(|e| e["ph"] == "X" && e["cat"] == "phase").unwrap();
        assert_eq!(phase["name"], "forward");
        assert_eq!(phase["ts"], 1000.0);
        assert_eq!(phase["dur"], 5000.0);
        let peak = ev.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(peak["args"]["bytes"], 3 << 20);
        // Kernels: complete events, one track per stream, named, apart from the phases.
        let kernels: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X" && e["cat"] == "kernel").collect();
        assert_eq!(kernels.len(), 2);
        assert_eq!(
            (kernels[0]["name"].as_str(), kernels[0]["ts"].as_f64(), kernels[0]["dur"].as_f64()),
            (Some("matmul<f32>"), Some(2000.0), Some(500.0))
        );
        assert_eq!(kernels[0]["args"]["algorithm"], "gemm");
        assert_ne!(kernels[0]["tid"], kernels[1]["tid"]);
        assert!(kernels.iter().all(|k| k["tid"] != phase["tid"] && k["tid"] != 0));
        let tracks: Vec<&str> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["args"]["name"].as_str().unwrap().starts_with("kernels"))
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tracks, ["kernels · cpu:0 stream 0", "kernels · cpu:0 stream 1"]);
    }

    #[test]
    fn results_without_kernels_still_load() {
        // A case as files written before `kernels` existed hold it.
        let json = r#"{"name":"c","params":{},"outcome":{"status":"ok"},"timing":null,"metrics":{},
                       "memory":null,"notes":[],"duration_ns":1}"#;
        let case: CaseResult = serde_json::from_str(json).unwrap();
        assert!(case.kernels.is_empty());
        // And an empty list is not written, so such files stay as they were.
        assert!(!serde_json::to_string(&case).unwrap().contains("kernels"));
    }
}
