//! `trace.json`: a Chrome trace event file (JSON object format, opened by
//! ui.perfetto.dev and `chrome://tracing`) of one case, built from the results
//! file alone — so `cargo xtask report --from` on another machine writes it too.
//! It holds the case's memory counters (allocated, reserved), its allocated
//! bytes by category as a stacked counter, and its phases as slices. Also the
//! trace of a replay ([`replay_trace`]): its memory counters, peak and
//! out-of-memory events.

use serde_json::{Value, json};
use vramlab_engine::alloc::replay_timeline::ReplayTimeline;
use vramlab_suites::{CaseResult, CategoryStack, MemoryTimeline};

const PID: u32 = 1;

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
            for (counter, bytes) in [("allocated_bytes", p.allocated_bytes), ("reserved_bytes", p.reserved_bytes)] {
                events.push(json!({"name": counter, "cat": "memory", "ph": "C", "ts": p.ops, "pid": pid, "tid": 0,
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
        let case = CaseResult {
            name: "train_step".into(),
            params: Default::default(),
            outcome: vramlab_suites::Outcome::Ok,
            timing: None,
            metrics: Default::default(),
            memory: None,
            notes: vec![],
            duration_ns: 1,
            timeline: Some(t.clone()),
            categories: None,
        };
        let v: Value = serde_json::from_str(&case_trace("memory", &case, &t)).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let counters = ev.iter().filter(|e| e["ph"] == "C" && e["name"] == "allocated_bytes").count();
        assert_eq!(counters, 4);
        let phase = ev.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(phase["name"], "forward");
        assert_eq!(phase["ts"], 1000.0);
        assert_eq!(phase["dur"], 5000.0);
        let peak = ev.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(peak["args"]["bytes"], 3 << 20);
    }
}
