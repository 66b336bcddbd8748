//! Chrome Trace Event export, parsed back and checked against the format.

mod common;

use common::MIB;
use serde_json::Value;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::hooks::{CopyEvent, CopyKind, Event, Hooks, KernelEvent, Tag, now_ns};
use vramlab_profiler::{ChromeTraceOptions, HOST_PID, Profile};

fn kernel(name: &'static str, algorithm: &'static str, duration_ns: u64) -> Event {
    Event::Kernel(KernelEvent {
        name,
        algorithm,
        device: 0,
        stream: 0,
        start_ns: now_ns(),
        duration_ns,
        launch_ns: 1_000,
        flops: 2_000_000,
        bytes: 3_000_000,
    })
}

fn recorded() -> Profile {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, None, AllocatorConfig::default(), 0);
    let profiler = common::profiler(&hub, &[0]);
    let mut live = Vec::new();
    {
        let _step = profiler.phase("step");
        {
            let _fwd = profiler.phase("forward");
            for i in 0..50u64 {
                live.push(alloc.malloc((i + 1) * MIB / 2, 0, Some(Tag::Activation)).unwrap());
                hub.emit(&kernel("matmul", "gemm", 10_000 + i));
            }
            hub.emit(&kernel("relu", "simd", 2_000));
        }
        hub.emit(&Event::Copy(CopyEvent {
            kind: CopyKind::HostToDevice,
            device: 0,
            stream: 1,
            bytes: 8 * MIB,
            pinned: true,
            non_blocking: true,
            start_ns: now_ns(),
            duration_ns: 500_000,
        }));
        for a in live.drain(..) {
            alloc.free(a).unwrap();
        }
    }
    alloc.empty_cache();
    profiler.stop()
}

#[test]
fn chrome_trace_has_the_expected_structure() {
    let profile = recorded();
    let text = profile.chrome_trace(&ChromeTraceOptions::default()).unwrap();
    let v: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["displayTimeUnit"], "ns");
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    assert!(!events.is_empty());
    for e in events {
        for key in ["ph", "ts", "pid", "tid", "name"] {
            assert!(e.get(key).is_some(), "event without {key}: {e}");
        }
        assert!(e["ts"].as_f64().unwrap() >= 0.0);
        match e["ph"].as_str().unwrap() {
            "X" => assert!(e["dur"].as_f64().expect("X events have dur") >= 0.0, "{e}"),
            "C" => {
                let args = e["args"].as_object().expect("counters have args");
                assert!(!args.is_empty());
                assert!(args.values().all(Value::is_number), "{e}");
            }
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_number(), "{e}"),
            other => panic!("unexpected phase type {other}"),
        }
    }
    let of = |ph: &str, name: &str| -> Vec<&Value> {
        events.iter().filter(|e| e["ph"] == ph && e["name"] == name).collect()
    };
    // Metadata: the host and the device are named.
    let processes: Vec<&str> = of("M", "process_name").iter().map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert!(processes.contains(&"host"));
    assert!(processes.iter().any(|p| p.starts_with("simulated")));
    assert!(!of("M", "thread_name").is_empty());

    // Phases and kernels as complete events.
    assert_eq!(of("X", "step").len(), 1);
    assert_eq!(of("X", "forward").len(), 1);
    assert!(of("X", "step").iter().all(|e| e["pid"] == HOST_PID));
    assert_eq!(of("X", "matmul").len(), 50);
    assert_eq!(of("X", "relu").len(), 1);
    assert_eq!(of("X", "relu")[0]["args"]["algorithm"], "simd");
    assert_eq!(of("X", "copy").len(), 1);
    let fwd = of("X", "forward")[0];
    let step = of("X", "step")[0];
    let end = |e: &Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
    assert!(step["ts"].as_f64() <= fwd["ts"].as_f64() && end(fwd) <= end(step) + 1e-6);

    // Counters: allocated and reserved on the device's process; the largest
    // allocated value is the peak.
    let allocated = of("C", "allocated_bytes");
    assert!(!allocated.is_empty() && !of("C", "reserved_bytes").is_empty());
    assert!(allocated.iter().all(|e| e["pid"] == 1));
    let max = allocated.iter().map(|e| e["args"]["allocated_bytes"].as_u64().unwrap()).max().unwrap();
    assert_eq!(max, profile.device(0).unwrap().peak_allocated.bytes);
    let by_cat = of("C", "allocated_by_category");
    assert!(by_cat.iter().any(|e| e["args"]["activation"].as_u64().unwrap() == max));
}

#[test]
fn counters_are_decimated_to_the_limit() {
    let profile = recorded();
    let options = ChromeTraceOptions { max_counter_points: 8, kernels: false, samples: false };
    let v: Value = serde_json::from_str(&profile.chrome_trace(&options).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let allocated: Vec<u64> = events
        .iter()
        .filter(|e| e["name"] == "allocated_bytes")
        .map(|e| e["args"]["allocated_bytes"].as_u64().unwrap())
        .collect();
    assert!(allocated.len() <= 8);
    assert_eq!(allocated.iter().max().copied(), Some(profile.device(0).unwrap().peak_allocated.bytes));
    assert!(!events.iter().any(|e| e["cat"] == "kernel"));
}

#[test]
fn kernel_table_aggregates_per_kernel_and_algorithm() {
    let profile = recorded();
    assert_eq!(profile.kernels.len(), 2);
    let mm = profile.kernels.iter().find(|k| k.name == "matmul").unwrap();
    assert_eq!((mm.algorithm.as_str(), mm.device, mm.calls), ("gemm", 0, 50));
    let total: u64 = (0..50).map(|i| 10_000 + i).sum();
    assert_eq!(mm.total_ns, total);
    assert_eq!(mm.min_ns, 10_000);
    assert_eq!(mm.max_ns, 10_049);
    assert!((mm.mean_ns - total as f64 / 50.0).abs() < 1e-9);
    assert!((mm.median_ns - 10_024.5).abs() < 1e-9);
    assert_eq!(mm.total_flops, 50 * 2_000_000);
    assert!((mm.achieved_gflops - (50.0 * 2e6) / total as f64).abs() < 1e-9);
    assert!((mm.achieved_gbps - (50.0 * 3e6) / total as f64).abs() < 1e-9);
    assert_eq!(mm.launch_total_ns, 50_000);
    assert_eq!(profile.kernels[0].name, "matmul", "most total time first");

    assert_eq!(profile.copies.len(), 1);
    let c = &profile.copies[0];
    assert_eq!((c.kind, c.pinned, c.non_blocking, c.total_bytes), (CopyKind::HostToDevice, true, true, 8 * MIB));
    assert!((c.achieved_gbps - 8.0 * MIB as f64 / 500_000.0).abs() < 1e-9);
}
