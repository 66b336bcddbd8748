//! Phases: nested scopes recorded as events, attributed to allocations and peaks.

mod common;

use std::sync::Arc;

use common::MIB;
use vramlab_engine::alloc::AllocatorConfig;
use vramlab_engine::hooks::{Event, EventLog, Hooks, Tag};
use vramlab_profiler::phase;

#[test]
fn phases_nest_and_carry_the_peak() {
    let hub = Hooks::new();
    let alloc = common::allocator(&hub, None, AllocatorConfig::default(), 0);
    let profiler = common::profiler(&hub, &[0]);
    let params = alloc.malloc(8 * MIB, 0, Some(Tag::Parameter)).unwrap();
    for _ in 0..2 {
        let step = profiler.phase("step");
        assert_eq!(step.depth(), 1);
        let acts = {
            let fwd = profiler.phase("forward");
            assert_eq!(fwd.depth(), 2);
            let a = alloc.malloc(16 * MIB, 0, Some(Tag::Activation)).unwrap();
            let b = {
                let _attn = profiler.phase("attention");
                let tmp = alloc.malloc(32 * MIB, 0, Some(Tag::Temporary)).unwrap();
                let b = alloc.malloc(4 * MIB, 0, Some(Tag::Activation)).unwrap();
                alloc.free(tmp).unwrap();
                b
            };
            vec![a, b]
        };
        {
            let _bwd = profiler.phase("backward");
            let g = alloc.malloc(8 * MIB, 0, Some(Tag::Gradient)).unwrap();
            for a in acts {
                alloc.free(a).unwrap();
            }
            alloc.free(g).unwrap();
        }
        drop(step);
    }
    let profile = profiler.stop();

    // Spans: 2 × (step, forward, attention, backward), properly nested.
    assert_eq!(profile.phases.len(), 8);
    let paths: Vec<&str> = profile.phases.iter().take(4).map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["step", "step/forward", "step/forward/attention", "step/backward"]);
    for p in &profile.phases {
        assert!(p.closed && p.end_ns >= p.start_ns);
        assert_eq!(p.depth as usize, p.path.split('/').count());
        if let Some((parent, _)) = p.path.rsplit_once('/') {
            let outer = profile
                .phases
                .iter()
                .filter(|q| q.path == parent && q.start_ns <= p.start_ns)
                .max_by_key(|q| q.start_ns)
                .unwrap();
            assert!(outer.end_ns >= p.end_ns, "{} ends after its parent", p.path);
        }
    }

    // The peak: params + activation + temporary + the second activation.
    let d = profile.device(0).unwrap();
    assert_eq!(d.peak_allocated.bytes, (8 + 16 + 32 + 4) * MIB);
    assert_eq!(d.peak_allocated.phase.as_deref(), Some("step/forward/attention"));
    let snap = d.at_peak_allocated.as_ref().unwrap();
    let made_in: Vec<(u64, Option<&str>)> =
        snap.live_allocations.iter().map(|l| (l.size_bytes / MIB, l.phase.as_deref())).collect();
    assert_eq!(
        made_in,
        [
            (32, Some("step/forward/attention")),
            (16, Some("step/forward")),
            (8, None),
            (4, Some("step/forward/attention")),
        ]
    );
    assert_eq!(snap.by_category.temporary_bytes, 32 * MIB);

    // Per-phase peaks: nested phases count toward their parents.
    let peak = |name: &str| profile.phase_peaks.iter().find(|p| p.phase == name && p.device == 0).unwrap();
    assert_eq!(peak("step").peak_allocated_bytes, 60 * MIB);
    assert_eq!(peak("step").instances, 2);
    assert_eq!(peak("forward").peak_allocated_bytes, 60 * MIB);
    assert_eq!(peak("forward").max_rise_bytes, 52 * MIB);
    assert_eq!(peak("attention").max_rise_bytes, 36 * MIB);
    assert_eq!(peak("backward").peak_allocated_bytes, (8 + 16 + 4 + 8) * MIB);
    assert_eq!(peak("backward").max_rise_bytes, 8 * MIB);
    assert_eq!(profile.unmatched_phase_ends, 0);
    alloc.free(params).unwrap();
}

#[test]
fn phases_are_events_on_the_hub() {
    let hub = Hooks::new();
    let log = EventLog::new();
    hub.subscribe(log.clone());
    {
        let _outer = phase(&hub, "outer");
        let _inner = phase(&hub, Arc::<str>::from("inner"));
    }
    let phases: Vec<(String, bool, u32)> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Phase(p) => Some((p.name.to_string(), p.begin, p.depth)),
            _ => None,
        })
        .collect();
    assert_eq!(
        phases,
        [
            ("outer".to_owned(), true, 1),
            ("inner".to_owned(), true, 2),
            ("inner".to_owned(), false, 2),
            ("outer".to_owned(), false, 1),
        ]
    );
}

#[test]
fn allocations_on_other_threads_belong_to_the_open_phase() {
    let hub = Hooks::new();
    let alloc = Arc::new(common::allocator(&hub, None, AllocatorConfig::default(), 0));
    let profiler = common::profiler(&hub, &[0]);
    let block = {
        let _p = profiler.phase("load");
        let a = alloc.clone();
        std::thread::spawn(move || a.malloc(3 * MIB, 0, Some(Tag::Input)).unwrap()).join().unwrap()
    };
    let profile = profiler.stop();
    let live = profile.live_at_peak(0).unwrap();
    assert_eq!(live[0].phase.as_deref(), Some("load"));
    assert_eq!(live[0].category, vramlab_profiler::Category::Input);
    // Two recording threads: this one (phases) and the worker (the allocation).
    assert!(profile.thread_names.len() >= 2);
    alloc.free(block).unwrap();
}

#[test]
fn phases_left_open_end_with_the_recording() {
    let hub = Hooks::new();
    let profiler = common::profiler(&hub, &[]);
    let guard = profiler.phase("unfinished");
    let profile = profiler.stop();
    drop(guard);
    assert_eq!(profile.phases.len(), 1);
    assert!(!profile.phases[0].closed);
    assert_eq!(profile.phases[0].end_ns, profile.end_ns);
}
