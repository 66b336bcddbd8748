//! Trace replay: feeds an allocation trace through a [`CachingAllocator`](vramlab_allocator::CachingAllocator) over
//! [`SimulatedMemory`](vramlab_allocator::SimulatedMemory) (addresses only, no backing bytes, so a trace from an
//! 80 GiB GPU replays on a laptop) and reports PyTorch's memory statistics, the
//! peaks, and every out-of-memory on the way.
//!
//! # Trace format, version 1
//!
//! JSON Lines: one object per line, one operation per object. Blank lines are
//! skipped; fields other than those below are ignored.
//!
//! ```text
//! {"op":"alloc","id":7,"size":1048576,"stream":0,"tag":"activation"}
//! {"op":"free","id":7}
//! {"op":"empty_cache"}
//! {"op":"reset_peak"}
//! ```
//!
//! - `alloc` needs `id` (any `u64`, unique among the live allocations) and `size`
//!   (bytes, any integer from 0 to 2^64 − 1: see "Request sizes" below); `stream` (default 0; a stream
//!   id the allocator does not track is an error) and `tag` (one of `parameter`,
//!   `gradient`, `activation`, `optimizer_state`, `input`, `temporary`,
//!   `workspace`) are optional.
//! - `free` needs the `id` of a live allocation. An id may be allocated again once
//!   it has been freed.
//! - `empty_cache` is `torch.cuda.empty_cache()`; `reset_peak` is
//!   `torch.cuda.reset_peak_memory_stats()` (every peak becomes its current value).
//!
//! # Trace format, version 2
//!
//! Version 2 adds ops and one field; every version-1 trace is a version-2 trace
//! and means the same.
//!
//! ```text
//! {"op":"alloc","id":8,"size":4096,"stream":1,"device":1}
//! {"op":"record_stream","id":8,"stream":2,"device":1}
//! {"op":"free","id":8}
//! {"op":"stream_done","stream":2,"device":1}
//! {"op":"set_memory_fraction","fraction":0.5}
//! {"op":"set_allocator_settings","settings":"max_split_size_mb:128"}
//! ```
//!
//! - `device` (default 0, below [`MAX_DEVICES`]) on any op: one allocator per
//!   device, each on its own simulated device of the replay's capacity. Ids are
//!   one namespace across devices; `free` and `record_stream` act on the device the
//!   id was allocated on (their `device` field is ignored).
//! - `record_stream` is `Tensor.record_stream(stream)` on a live id: when it is
//!   freed, its block stays `active_pending_free` (the snapshots' `free_requested`)
//!   until the work queued on `stream` so far has completed.
//! - `stream_done` says that work has completed (the snapshots' `free_completed`
//!   follows at the next allocator call): the work of `stream`, or of every stream
//!   when `stream` is absent (`torch.cuda.synchronize()`). Until then such blocks
//!   are not reused, except that an out-of-memory retry or `empty_cache`
//!   synchronizes, as in PyTorch.
//! - `set_memory_fraction` is `torch.cuda.set_per_process_memory_fraction(fraction)`
//!   (`fraction` in [0, 1]).
//! - `set_allocator_settings` is `torch.cuda.memory._set_allocator_settings(settings)`
//!   (see `CachingAllocator::set_allocator_settings`).
//!
//! The report's top-level figures are device 0's; `devices` lists every device the
//! trace used, with its own statistics.
//!
//! ## Private pools (CUDA graphs and `torch.cuda.MemPool`)
//!
//! ```text
//! {"op":"create_pool","pool":[0,1],"use_on_oom":true,"no_split":false}
//! {"op":"begin_allocate_to_pool","pool":[0,1]}
//! {"op":"begin_allocate_to_pool","pool":[7,0],"streams":[1]}
//! {"op":"end_allocate_to_pool","pool":[7,0]}
//! {"op":"release_pool","pool":[7,0]}
//! {"op":"empty_cache","pool":[0,1]}
//! {"op":"delete_pool","pool":[0,1]}
//! ```
//!
//! A pool is named by its `MempoolId_t`, two integers (`(capture id, 0)` for a
//! graph's own pool, `(0, n)` for `graph_pool_handle()` and `MemPool`; `[0,0]` is the
//! default pool and cannot be named). Each op acts on the allocator of `device`.
//!
//! - `create_pool` is `torch.cuda.MemPool(use_on_oom=…, no_split=…)`: creates the
//!   pool with use count 1 (or adds a user to an existing one). `use_on_oom`: a
//!   default-pool allocation that would run out of memory may take a free block of
//!   this pool; `no_split`: the pool's blocks are handed out whole. Both default to
//!   false.
//! - `begin_allocate_to_pool` is `beginAllocateToPool` (a graph's `capture_begin`, or
//!   entering `torch.cuda.use_mem_pool`): creates the pool or adds a user, and sends
//!   the allocations of `streams` (every stream when absent, as `use_mem_pool` takes
//!   the whole thread) to it until `end_allocate_to_pool`; the latest begun pool
//!   whose streams match wins. While any pool is begun, stream events are not
//!   processed and an out-of-memory does not release the cached blocks, as in PyTorch.
//! - `end_allocate_to_pool` is `endAllocateToPool` (`capture_end`, leaving
//!   `use_mem_pool`; leaving `use_mem_pool` is followed by a `release_pool`).
//! - `release_pool` is `releasePool` (`CUDAGraph.reset()`, deleting the graph): one
//!   user fewer. At 0 the pool's free segments go back to the device at the next
//!   `empty_cache`, and the pool is deleted once it holds none.
//! - `empty_cache` with `pool` is `emptyCache(pool)` (`torch.cuda.empty_cache()`
//!   inside `use_mem_pool`): only that pool, and only once its use count is 0.
//! - `delete_pool` is `MemPool`'s destructor: it stops serving as `use_on_oom`, is
//!   released once, and its cache is emptied (`empty_cache` with `pool`).
//!
//! Blocks of a private pool are never handed out outside it (but by the `use_on_oom`
//! fallback); their statistics count in `small_pool`/`large_pool` by size.
//!
//! Every malformed line is a [`ReplayError`] naming its 1-based line number. An
//! out-of-memory is not an error but data: an [`OomRecord`] in the report. With
//! [`OnOom::Continue`] the replay goes on, the failed allocation's id counts as
//! live for the trace, and its later `free` is ignored; with [`OnOom::Stop`] the
//! replay ends at the first one.
//!
//! # Request sizes, as PyTorch treats them
//!
//! Every `u64` size is valid input; what happens to it is what PyTorch does
//! (`CUDACachingAllocator.cpp`, `NativeCachingAllocator::allocate` and
//! `DeviceCachingAllocator::malloc`):
//!
//! - 0 bytes: a null allocation that never reaches the allocator (no statistic moves).
//! - [`MAX_REQUEST`](vramlab_allocator::MAX_REQUEST) (1 EiB) or more: refused before the allocator ("Tried to allocate
//!   more than 1EB memory", an `OutOfMemoryError` in PyTorch). No statistic changes
//!   (`num_ooms` included); the refusal is a [`TooLargeRecord`] in the report and,
//!   like an out-of-memory, ends the replay under [`OnOom::Stop`].
//! - Anything else goes through the allocator: a request larger than the simulated
//!   device releases the cached blocks, retries once (`num_alloc_retries` + 1) and
//!   fails with an out-of-memory (`num_ooms` + 1), as on a GPU.
//!
//! The simulated device's capacity has its own, separate limit, [`MAX_BYTES`] (1 PiB).
//!
//! # Files
//!
//! - `src/lib.rs` — the trace formats, documented, and the re-exports.
//! - `src/report.rs` — the limits, `ReplayOptions` and `OnOom`, and `ReplayReport` with its records.
//! - `src/error.rs` — `ReplayError`, naming the line at fault.
//! - `src/line.rs` — one trace line parsed (`Line`) and its size checked.
//! - `src/replayer.rs` — the replay: `replay`, `replay_with_timeline`.
//! - `src/timeline.rs` — `ReplayTimeline`: memory over the ops, the segments at the peak, each OOM's
//!   fragmentation.
//! - `src/write.rs` — `TraceOp` and `write_trace`.
//! - `tests/support/synthetic.rs` — a seeded synthetic trace that looks like a training run (test and bench
//!   support).
//! - `benches/replay.rs` — a 1-million-event trace, parse included.

mod error;
mod line;
mod replayer;
mod report;
pub mod timeline;
mod write;

/// The synthetic trace of the tests and the bench (test support, not the crate's API).
#[cfg(test)]
#[path = "../tests/support/synthetic.rs"]
mod synthetic;
/// The name the synthetic trace takes its tags by (`super::Tag`), as in its other includers.
#[cfg(test)]
use vramlab_allocator::hooks::Tag;

pub use error::ReplayError;
pub use replayer::{replay, replay_with_timeline};
pub use report::{
    DeviceReport, MAX_BYTES, MAX_DEVICES, MAX_LINE_BYTES, MAX_OOM_RECORDS, OnOom, OomRecord, ReplayOptions,
    ReplayReport, TooLargeRecord,
};
pub use write::{TraceOp, write_trace};

#[cfg(test)]
mod tests {
    use super::*;

    use std::io;

    use crate::synthetic::synthetic_trace;

    use vramlab_allocator::consts::MIB;
    use vramlab_allocator::{AllocatorConfig, MAX_REQUEST};

    fn run(trace: &str) -> Result<ReplayReport, ReplayError> {
        replay(trace.as_bytes(), &ReplayOptions::default())
    }

    fn run_with(trace: &str, capacity: u64, on_oom: OnOom) -> ReplayReport {
        let opts = ReplayOptions { capacity_bytes: Some(capacity), on_oom, ..Default::default() };
        replay(trace.as_bytes(), &opts).unwrap()
    }

    /// The error's message, checked to name `line`.
    fn error_at(trace: &str, line: u64) -> String {
        let err = run(trace).expect_err("the trace is bad");
        assert_eq!(err.line(), Some(line), "{err}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("line {line}")), "{message}");
        message
    }

    fn stat(report: &ReplayReport, key: &str) -> i64 {
        *report.memory_stats.get(key).unwrap_or_else(|| panic!("no stat {key}"))
    }

    /// The spec's known-answer vectors as a trace (a blank line included).
    const SPEC_TRACE: &str = "\
{\"op\":\"alloc\",\"id\":1,\"size\":3145728}
{\"op\":\"alloc\",\"id\":2,\"size\":5242880,\"tag\":\"activation\"}

{\"op\":\"free\",\"id\":1}
{\"op\":\"free\",\"id\":2}
{\"op\":\"empty_cache\"}
";

    #[test]
    fn spec_vectors_as_a_trace() {
        let trace = SPEC_TRACE;
        let r = run(trace).unwrap();
        assert_eq!(r.events, 5);
        assert_eq!(r.lines, 6);
        assert!(!r.stopped_early);
        assert!(r.ooms.is_empty());
        assert_eq!(r.current_allocated_bytes, 0);
        assert_eq!(r.current_reserved_bytes, 0);
        assert_eq!(r.peak_allocated_bytes, 8_388_608);
        assert_eq!(r.peak_reserved_bytes, 20_971_520);
        assert_eq!(r.live_allocations, 0);
        assert_eq!(r.last_reset_peak_line, None);
        assert_eq!(stat(&r, "num_device_alloc"), 1);
        assert_eq!(stat(&r, "num_device_free"), 1);
        assert_eq!(stat(&r, "allocation.all.allocated"), 2);
        assert_eq!(stat(&r, "allocation.all.freed"), 2);
        assert_eq!(stat(&r, "inactive_split_bytes.all.peak"), 17_825_792);
        assert_eq!(stat(&r, "requested_bytes.large_pool.allocated"), 8_388_608);
        assert_eq!(stat(&r, "max_split_size"), -1);
        assert_eq!(r.memory_stats.len(), 9 * 3 * 4 + 2 * 4 + 6);
    }

    #[test]
    fn timeline_of_the_spec_vectors() {
        let trace = SPEC_TRACE;
        let (report, t) = replay_with_timeline(trace.as_bytes(), &ReplayOptions::default()).unwrap();
        assert_eq!(report, run(trace).unwrap(), "the report is the plain replay's");
        let points: Vec<(u64, u64, u64)> =
            t.points.iter().map(|p| (p.ops, p.allocated_bytes, p.reserved_bytes)).collect();
        assert_eq!(
            points,
            [
                (0, 0, 0),
                (1, 3 * MIB, 20 * MIB),
                (2, 8 * MIB, 20 * MIB),
                (3, 5 * MIB, 20 * MIB),
                (4, 0, 20 * MIB),
                (5, 0, 0)
            ]
        );
        let peak = t.peak.clone().expect("memory was reserved");
        // The 20 MiB segment is first reserved by the first alloc: 3 MiB used, 17 MiB free.
        assert_eq!((peak.ops, peak.allocated_bytes, peak.reserved_bytes), (1, 3 * MIB, 20 * MIB));
        assert_eq!(peak.largest_free_block_bytes, 17 * MIB);
        assert_eq!(peak.segments.len(), 1);
        let blocks: Vec<(u64, bool)> = peak.segments[0]
            .blocks
            .iter()
            .map(|b| (b.size, b.state != vramlab_allocator::BlockState::Inactive))
            .collect();
        assert_eq!(blocks, [(3 * MIB, true), (17 * MIB, false)]);
        assert!(t.ooms.is_empty());
    }

    #[test]
    fn timeline_of_the_fragmentation_example() {
        let trace = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/traces/fragmentation.jsonl"))
            .expect("the README's example trace");
        let opts = ReplayOptions { capacity_bytes: Some(1 << 30), ..Default::default() };
        let (report, t) = replay_with_timeline(&trace, &opts).unwrap();
        assert_eq!(report, replay(&trace[..], &opts).unwrap());
        // 101 allocations of 8 MiB reserve the 51st 20 MiB segment.
        let peak = t.peak.clone().expect("memory was reserved");
        assert_eq!((peak.ops, peak.allocated_bytes, peak.reserved_bytes), (101, 808 * MIB, 1020 * MIB));
        assert_eq!(peak.segments.len(), 51);
        assert_eq!(peak.largest_free_block_bytes, 12 * MIB);
        // The README's figures: at line 154, 408 MiB allocated, 612 MiB reserved but
        // unallocated, and no free piece of 16 MiB.
        assert_eq!(t.ooms.len(), 1);
        let oom = &t.ooms[0];
        assert_eq!((oom.index, oom.line, oom.requested_bytes), (153, Some(154), 16 * MIB));
        assert_eq!((oom.allocated_bytes, oom.reserved_bytes), (408 * MIB, 1020 * MIB));
        assert_eq!(oom.reserved_unallocated_bytes, 612 * MIB);
        assert_eq!(oom.largest_free_block_bytes, 8 * MIB);
        assert!(oom.message.contains("612.00 MiB is reserved by vramlab but unallocated"), "{}", oom.message);
        assert_eq!(t.peak_reserved_bytes(), report.peak_reserved_bytes);
        assert_eq!(t.peak_allocated_bytes(), report.peak_allocated_bytes);
    }

    #[test]
    fn spec_vector_unsplit_and_one_byte() {
        let r = run("{\"op\":\"alloc\",\"id\":0,\"size\":11534337}\n{\"op\":\"alloc\",\"id\":1,\"size\":1}").unwrap();
        assert_eq!(r.current_allocated_bytes, 12_582_912 + 512);
        assert_eq!(r.current_reserved_bytes, 12_582_912 + 2_097_152);
        assert_eq!(stat(&r, "requested_bytes.all.current"), 11_534_338);
        assert_eq!(stat(&r, "segment.small_pool.current"), 1);
        assert_eq!(stat(&r, "segment.large_pool.current"), 1);
        assert_eq!(r.live_allocations, 2);
    }

    #[test]
    fn thousand_small_allocations() {
        let trace: String = (0..1000).map(|i| format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":1000}}\n")).collect();
        let r = run(&trace).unwrap();
        assert_eq!(r.current_allocated_bytes, 1_024_000);
        assert_eq!(r.current_reserved_bytes, 2_097_152);
        assert_eq!(stat(&r, "segment.all.current"), 1);
    }

    #[test]
    fn reset_peak_and_streams_and_tags() {
        let trace = r#"{"op":"alloc","id":1,"size":4194304,"stream":0,"tag":"parameter"}
{"op":"alloc","id":2,"size":4194304,"stream":3,"tag":"optimizer_state"}
{"op":"free","id":2}
{"op":"reset_peak"}
{"op":"alloc","id":2,"size":1024,"stream":3,"tag":"workspace"}
"#;
        let r = run(trace).unwrap();
        // Blocks are never shared across streams: two large segments.
        assert_eq!(stat(&r, "segment.large_pool.current"), 2);
        assert_eq!(r.peak_allocated_bytes, 4 * MIB + 1024, "peak restarts from current at reset_peak");
        assert_eq!(r.last_reset_peak_line, Some(4));
        assert_eq!(r.current_allocated_bytes, 4 * MIB + 1024);
    }

    #[test]
    fn zero_byte_allocations_replay() {
        let r = run("{\"op\":\"alloc\",\"id\":1,\"size\":0}\n{\"op\":\"free\",\"id\":1}\n").unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(r.current_reserved_bytes, 0);
        assert_eq!(stat(&r, "allocation.all.allocated"), 0);
    }

    #[test]
    fn integral_floats_and_escaped_strings_are_accepted() {
        let r = run(
            "{\"op\":\"alloc\",\"id\":1,\"size\":1e6,\"tag\":\"activ\\u0061tion\"}\n{\"op\":\"fr\\u0065e\",\"id\":1}\n",
        )
        .unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(stat(&r, "requested_bytes.all.allocated"), 1_000_000);
    }

    #[test]
    fn unknown_fields_crlf_and_missing_final_newline_are_fine() {
        let r = run(
            "{\"op\":\"alloc\",\"id\":1,\"size\":512,\"time_us\":12,\"frames\":[]}\r\n  \r\n{\"op\":\"free\",\"id\":1}",
        )
        .unwrap();
        assert_eq!(r.events, 2);
        assert_eq!(r.lines, 3);
    }

    #[test]
    fn empty_trace() {
        let r = run("").unwrap();
        assert_eq!(r.events, 0);
        assert_eq!(r.current_reserved_bytes, 0);
        assert!(!r.summary.is_empty());
    }

    #[test]
    fn malformed_json() {
        let m = error_at("{\"op\":\"empty_cache\"}\n{\"op\":\"alloc\",\"id\":1,\n", 2);
        assert!(m.contains("malformed JSON"), "{m}");
        assert!(!m.contains("at line 1"), "serde's own position is dropped: {m}");
        let m = error_at("not json\n", 1);
        assert!(m.contains("column"), "{m}");
        let m = error_at("[1,2]\n", 1);
        assert!(m.contains("a JSON object"), "{m}");
        error_at("{\"op\":\"free\",\"id\":1} trailing\n", 1);
        error_at("{\"op\":\"free\",\"id\":1,\"id\":2}\n", 1);
    }

    #[test]
    fn wrong_field_types() {
        let m = error_at("{\"op\":7}\n", 1);
        assert!(m.contains("expected a string"), "{m}");
        let m = error_at("{\"op\":\"alloc\",\"id\":1,\"size\":\"1024\"}\n", 1);
        assert!(m.contains("expected a byte count"), "{m}");
        let m = error_at("{\"op\":\"free\",\"id\":-1}\n", 1);
        assert!(m.contains("-1"), "{m}");
        error_at("{\"op\":\"free\",\"id\":1.5}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":-2}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4294967296}\n", 1);
        error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"tag\":3}\n", 1);
        error_at("{\"op\":\"free\",\"id\":18446744073709551616}\n", 1);
    }

    #[test]
    fn missing_fields() {
        assert_eq!(error_at("{\"id\":1}\n", 1), "line 1: missing field 'op'");
        assert_eq!(
            error_at("\n{\"op\":\"alloc\",\"size\":1}\n", 2),
            "line 2: missing field 'id' (required by op 'alloc')"
        );
        assert_eq!(
            error_at("{\"op\":\"alloc\",\"id\":1}\n", 1),
            "line 1: missing field 'size' (required by op 'alloc')"
        );
        assert_eq!(error_at("{\"op\":\"free\"}\n", 1), "line 1: missing field 'id' (required by op 'free')");
        assert_eq!(error_at("{\"op\":null}\n", 1), "line 1: missing field 'op'");
    }

    #[test]
    fn unknown_op_and_tag() {
        assert_eq!(
            error_at("{\"op\":\"allocate\",\"id\":1,\"size\":1}\n", 1),
            "line 1: unknown op 'allocate' (expected alloc, free, empty_cache, reset_peak, record_stream, stream_done, \
             set_memory_fraction, set_allocator_settings, create_pool, begin_allocate_to_pool, end_allocate_to_pool, \
             release_pool or delete_pool)"
        );
        let m = error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1,\"tag\":\"weights\"}\n", 1);
        assert_eq!(
            m,
            "line 1: unknown tag 'weights' (expected one of parameter, gradient, activation, optimizer_state, \
             input, temporary, workspace)"
        );
    }

    #[test]
    fn bad_sizes() {
        let size = |s: &str| error_at(&format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{s}}}\n"), 1);
        assert_eq!(size("-5"), "line 1: size -5 is negative");
        assert_eq!(size("-0.5"), "line 1: size -0.5 is negative");
        assert_eq!(size("1.5"), "line 1: size 1.5 is not a whole number of bytes");
        // 2^64 does not fit a size_t: malformed (serde reads it as a float).
        assert!(size("18446744073709551616").contains("is too large"));
        assert!(size("1e300").contains("is too large"));
        assert!(size("true").contains("malformed JSON"));
        assert!(size("null").contains("missing field 'size'"));
        // The capacity limit fits the unlimited device exactly.
        let r = run("{\"op\":\"alloc\",\"id\":1,\"size\":1125899906842624}\n").unwrap();
        assert_eq!(r.current_allocated_bytes, MAX_BYTES);
    }

    #[test]
    fn v2_record_stream_holds_the_block_until_its_stream_is_done() {
        let alloc_again = "{\"op\":\"alloc\",\"id\":3,\"size\":512}\n";
        let head = "{\"op\":\"alloc\",\"id\":1,\"size\":512}\n{\"op\":\"alloc\",\"id\":2,\"size\":512}\n\
                    {\"op\":\"record_stream\",\"id\":1,\"stream\":2}\n{\"op\":\"free\",\"id\":1}\n";
        // Still pending: the block stays active, a new alloc takes other memory.
        let r = run(&format!("{head}{alloc_again}")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 3);
        assert_eq!(stat(&r, "allocation.all.current"), 2);
        // Another stream's completion does not release it …
        let r = run(&format!("{head}{{\"op\":\"stream_done\",\"stream\":5}}\n{alloc_again}")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 3);
        // … its own stream's, or a synchronize, does (at the next allocator call).
        for done in ["{\"op\":\"stream_done\",\"stream\":2}\n", "{\"op\":\"stream_done\"}\n"] {
            let r = run(&format!("{head}{done}{alloc_again}")).unwrap();
            assert_eq!(stat(&r, "active.all.current"), 2, "{done}");
            assert_eq!(r.current_allocated_bytes, 1024);
        }
        // empty_cache synchronizes, as in PyTorch.
        let r = run(&format!("{head}{{\"op\":\"empty_cache\"}}\n")).unwrap();
        assert_eq!(stat(&r, "active.all.current"), 1);
        assert_eq!(
            error_at("{\"op\":\"record_stream\",\"id\":9,\"stream\":1}\n", 1),
            "line 1: record_stream of id 9, which is not live (never allocated, or freed long ago)"
        );
        assert!(
            error_at("{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"record_stream\",\"id\":1}\n", 2)
                .contains("missing field 'stream'")
        );
    }

    #[test]
    fn v2_fraction_settings_and_devices() {
        let trace =
            "{\"op\":\"set_memory_fraction\",\"fraction\":0.5}\n{\"op\":\"alloc\",\"id\":1,\"size\":1073741824}\n";
        let r = run_with(trace, 1 << 30, OnOom::Stop);
        assert_eq!(r.ooms.len(), 1);
        assert_eq!(r.ooms[0].error.allowed_bytes, Some(1 << 29));
        assert!(
            error_at("{\"op\":\"set_memory_fraction\",\"fraction\":1.5}\n", 1)
                .contains("Invalid fraction value: 1.5. Allowed range: 0~1")
        );
        assert!(error_at("{\"op\":\"set_memory_fraction\"}\n", 1).contains("missing field 'fraction'"));

        let trace = "{\"op\":\"set_allocator_settings\",\"settings\":\"roundup_power2_divisions:4\"}\n\
                     {\"op\":\"alloc\",\"id\":1,\"size\":5000}\n";
        assert_eq!(run(trace).unwrap().current_allocated_bytes, 5120);
        assert!(
            error_at("{\"op\":\"set_allocator_settings\",\"settings\":\"foo:1\"}\n", 1)
                .contains("Unrecognized key 'foo' in CUDA allocator config.")
        );

        // One allocator per device; ids are one namespace; free finds the device.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"alloc\",\"id\":2,\"size\":3145728,\"device\":3}\n\
                     {\"op\":\"free\",\"id\":2}\n{\"op\":\"empty_cache\",\"device\":3}\n";
        let r = run(trace).unwrap();
        assert_eq!(r.current_allocated_bytes, 512);
        assert_eq!(r.devices.iter().map(|d| d.device).collect::<Vec<_>>(), vec![0, 3]);
        let d3 = &r.devices[1];
        assert_eq!((d3.current_allocated_bytes, d3.peak_allocated_bytes, d3.current_reserved_bytes), (0, 3 << 20, 0));
        assert_eq!(d3.memory_stats["num_device_free"], 1);
        assert_eq!(
            error_at("{\"op\":\"empty_cache\",\"device\":64}\n", 1),
            "line 1: device 64 is out of range: device indices go from 0 to 63"
        );
    }

    #[test]
    fn v2_graph_pools_keep_their_segments_until_released_and_emptied() {
        // A capture on stream 1 into pool (7,0): its blocks never serve stream 1's
        // allocations outside the capture, nor survive the graph's release + empty_cache.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"begin_allocate_to_pool\",\"pool\":[7,0],\"streams\":[1]}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"alloc\",\"id\":3,\"size\":4096,\"stream\":0}\n\
                     {\"op\":\"end_allocate_to_pool\",\"pool\":[7,0]}\n\
                     {\"op\":\"free\",\"id\":2}\n\
                     {\"op\":\"alloc\",\"id\":4,\"size\":4096,\"stream\":1}\n\
                     {\"op\":\"empty_cache\"}\n";
        let r = run(trace).unwrap();
        // Three 2 MiB segments: stream 1's default, the pool's, stream 0's default.
        assert_eq!(r.current_reserved_bytes, 3 * (2 << 20));
        assert_eq!(r.memory_stats["segment.small_pool.current"], 3);
        // The graph still lives: empty_cache leaves its (free) segment.
        let released = format!("{trace}{{\"op\":\"release_pool\",\"pool\":[7,0]}}\n{{\"op\":\"empty_cache\"}}\n");
        let r = run(&released).unwrap();
        assert_eq!(r.current_reserved_bytes, 2 * (2 << 20));
        assert_eq!(r.memory_stats["num_device_free"], 1);
    }

    #[test]
    fn v2_mem_pools_use_on_oom_and_delete() {
        // 40 MiB allowed: the pool's free 40 MiB segment serves a default-pool request.
        let trace = "{\"op\":\"create_pool\",\"pool\":[0,1],\"use_on_oom\":true}\n\
                     {\"op\":\"begin_allocate_to_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"alloc\",\"id\":1,\"size\":41943040}\n\
                     {\"op\":\"end_allocate_to_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"release_pool\",\"pool\":[0,1]}\n\
                     {\"op\":\"free\",\"id\":1}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":20971520}\n";
        let r = run_with(trace, 40 << 20, OnOom::Stop);
        assert!(r.ooms.is_empty());
        assert_eq!((r.current_allocated_bytes, r.current_reserved_bytes), (20 << 20, 40 << 20));
        // Without use_on_oom the same request runs out of memory.
        let r = run_with(&trace.replace(",\"use_on_oom\":true", ""), 40 << 20, OnOom::Stop);
        assert_eq!(r.ooms.len(), 1);
        // delete_pool gives the pool's free segment back.
        let deleted = format!(
            "{}{{\"op\":\"delete_pool\",\"pool\":[0,1]}}\n",
            trace.rsplit_once("{\"op\":\"alloc\",\"id\":2").unwrap().0
        );
        let r = run_with(&deleted, 40 << 20, OnOom::Stop);
        assert_eq!((r.current_reserved_bytes, r.memory_stats["num_device_free"]), (0, 1));
    }

    #[test]
    fn v2_pool_op_errors_name_the_line_and_the_fix() {
        assert!(
            error_at("{\"op\":\"release_pool\"}\n", 1).contains("missing field 'pool' (required by op 'release_pool')")
        );
        assert!(error_at("{\"op\":\"release_pool\",\"pool\":[0,5]}\n", 1).contains("no private pool (0, 5)"));
        assert!(error_at("{\"op\":\"end_allocate_to_pool\",\"pool\":[1,0]}\n", 1).contains("not currently recording"));
        assert!(error_at("{\"op\":\"create_pool\",\"pool\":[0,0]}\n", 1).contains("default pool"));
        let twice =
            "{\"op\":\"begin_allocate_to_pool\",\"pool\":[1,0]}\n{\"op\":\"begin_allocate_to_pool\",\"pool\":[1,0]}\n";
        assert!(error_at(twice, 2).contains("already recording"));
        let released = "{\"op\":\"create_pool\",\"pool\":[0,1]}\n{\"op\":\"release_pool\",\"pool\":[0,1]}\n\
                        {\"op\":\"release_pool\",\"pool\":[0,1]}\n";
        assert!(error_at(released, 3).contains("released by all its users"));
        assert!(error_at("{\"op\":\"create_pool\",\"pool\":[1]}\n", 1).starts_with("line 1, column"));
    }

    #[test]
    fn sizes_past_the_device_go_through_the_allocator_as_in_pytorch() {
        // 800 000 000 GiB: below 1 EiB, so PyTorch's allocator sees it, releases the
        // cache, retries once and raises its out-of-memory error.
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n{\"op\":\"free\",\"id\":1}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":858993459200000000}\n";
        let r = run(trace).unwrap();
        assert!(r.stopped_early);
        assert_eq!(r.ooms.len(), 1);
        assert!(r.ooms[0].error.to_string().contains("Tried to allocate 800000000.00 GiB"), "{}", r.ooms[0].error);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(stat(&r, "num_alloc_retries"), 1);
        // The retry released the cached 2 MiB segment first.
        assert_eq!(stat(&r, "num_device_free"), 1);
        assert_eq!(r.current_reserved_bytes, 0);
        assert!(r.too_large.is_empty());
    }

    #[test]
    fn sizes_of_an_exbibyte_are_refused_before_the_allocator() {
        for size in [MAX_REQUEST, u64::MAX] {
            let trace = format!(
                "{{\"op\":\"alloc\",\"id\":1,\"size\":1}}\n{{\"op\":\"alloc\",\"id\":2,\"size\":{size}}}\n\
                 {{\"op\":\"free\",\"id\":2}}\n{{\"op\":\"free\",\"id\":1}}\n"
            );
            let before = run("{\"op\":\"alloc\",\"id\":1,\"size\":1}\n").unwrap();
            let stopped = run(&trace).unwrap();
            assert!(stopped.stopped_early);
            assert_eq!(stopped.events, 2);
            // Every statistic is as it was before the refused request.
            assert_eq!(stopped.memory_stats, before.memory_stats);
            assert_eq!(stopped.too_large.len(), 1);
            let record = &stopped.too_large[0];
            assert_eq!((record.line, record.event_index, record.requested_bytes), (2, 1, size));
            assert!(record.message.contains("Tried to allocate more than 1EB memory"), "{}", record.message);
            assert!(stopped.ooms.is_empty());
            // Under Continue the failed id's free is ignored, like a failed allocation's.
            let went_on = run_with(&trace, MAX_BYTES, OnOom::Continue);
            assert!(!went_on.stopped_early);
            assert_eq!(went_on.events, 4);
            assert_eq!(stat(&went_on, "num_ooms"), 0);
            assert_eq!(stat(&went_on, "num_alloc_retries"), 0);
            assert_eq!(went_on.too_large.len(), 1);
        }
        // Just below 1 EiB reaches the allocator.
        let r = run(&format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{}}}\n", MAX_REQUEST - 1)).unwrap();
        assert_eq!((r.ooms.len(), r.too_large.len(), stat(&r, "num_ooms")), (1, 0, 1));
    }

    #[test]
    fn free_of_an_id_that_is_not_live() {
        assert_eq!(
            error_at("{\"op\":\"free\",\"id\":7}\n", 1),
            "line 1: free of id 7, which is not live (never allocated, or freed long ago)"
        );
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"empty_cache\"}\n{\"op\":\"free\",\"id\":7}\n\
                     {\"op\":\"free\",\"id\":7}\n";
        assert_eq!(error_at(trace, 4), "line 4: free of id 7, which is not live (already freed at line 3)");
    }

    #[test]
    fn alloc_of_a_live_id() {
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"alloc\",\"id\":7,\"size\":2}\n";
        assert_eq!(
            error_at(trace, 2),
            "line 2: alloc of id 7, which is already live (allocated at line 1); free it first"
        );
        // After a free the id may be used again.
        let trace = "{\"op\":\"alloc\",\"id\":7,\"size\":1}\n{\"op\":\"free\",\"id\":7}\n{\"op\":\"alloc\",\"id\":7,\"size\":2}\n";
        assert_eq!(run(trace).unwrap().live_allocations, 1);
    }

    #[test]
    fn io_errors_name_the_line() {
        struct Failing(usize);
        impl io::Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("disk on fire"));
                }
                let line = b"{\"op\":\"empty_cache\"}\n";
                self.0 -= 1;
                buf[..line.len()].copy_from_slice(line);
                Ok(line.len())
            }
        }
        let err = replay(io::BufReader::with_capacity(64, Failing(2)), &ReplayOptions::default()).unwrap_err();
        assert!(matches!(err, ReplayError::Io { line: 3, .. }), "{err:?}");
        assert_eq!(err.to_string(), "line 3: cannot read the trace: disk on fire");
        // Invalid UTF-8 inside a string is a JSON error, not a panic.
        let err = replay(&b"{\"op\":\"fr\xffee\",\"id\":1}\n"[..], &ReplayOptions::default()).unwrap_err();
        assert_eq!(err.line(), Some(1));
    }

    #[test]
    fn overlong_lines_are_refused_without_reading_them_whole() {
        let mut trace = b"{\"op\":\"empty_cache\"}\n".to_vec();
        trace.resize(trace.len() + MAX_LINE_BYTES, b' ');
        trace.extend_from_slice(b"{\"op\":\"empty_cache\"}\n");
        let err = replay(&trace[..], &ReplayOptions::default()).unwrap_err();
        assert!(matches!(err, ReplayError::LineTooLong { line: 2, .. }), "{err:?}");
        // Exactly at the limit, newline included, is fine.
        let mut trace = vec![b' '; MAX_LINE_BYTES - 21];
        trace.extend_from_slice(b"{\"op\":\"empty_cache\"}\n");
        assert_eq!(trace.len(), MAX_LINE_BYTES);
        assert_eq!(replay(&trace[..], &ReplayOptions::default()).unwrap().events, 1);
    }

    #[test]
    fn bad_options() {
        let opts = ReplayOptions { capacity_bytes: Some(MAX_BYTES + 1), ..Default::default() };
        let err = replay(&b""[..], &opts).unwrap_err();
        assert!(matches!(err, ReplayError::CapacityTooLarge { .. }));
        assert_eq!(err.line(), None);
        let opts = ReplayOptions {
            config: AllocatorConfig { large_segment_size: 3 * MIB, ..Default::default() },
            ..Default::default()
        };
        assert!(matches!(replay(&b""[..], &opts).unwrap_err(), ReplayError::Setup(_)));
    }

    const OOM_TRACE: &str = r#"{"op":"alloc","id":1,"size":41943040}
{"op":"alloc","id":2,"size":41943040,"tag":"activation"}
{"op":"alloc","id":3,"size":1}
{"op":"free","id":2}
{"op":"free","id":1}
{"op":"alloc","id":4,"size":41943040}
"#;

    #[test]
    fn oom_stop_ends_the_replay_with_stats() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Stop);
        assert!(r.stopped_early);
        assert_eq!(r.events, 2, "the failed alloc counts as applied");
        assert_eq!(r.lines, 2);
        assert_eq!(r.ooms.len(), 1);
        let oom = &r.ooms[0];
        assert_eq!((oom.event_index, oom.line, oom.requested_bytes), (1, 2, 41_943_040));
        assert_eq!(oom.error.segment_bytes, 41_943_040);
        assert_eq!(oom.error.total_bytes, 64 * MIB);
        assert_eq!(oom.error.free_bytes, 24 * MIB);
        assert_eq!(oom.error.allocated_bytes, 40 * MIB);
        assert_eq!(oom.memory_stats["num_ooms"], 1);
        assert_eq!(oom.memory_stats["allocated_bytes.all.current"], 40 * MIB as i64);
        assert!(oom.error.to_string().contains("out of memory"));
        assert_eq!(r.current_allocated_bytes, 40 * MIB);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(r.live_allocations, 1);
    }

    #[test]
    fn oom_continue_ignores_frees_of_failed_allocations() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Continue);
        assert!(!r.stopped_early);
        assert_eq!(r.events, 6);
        assert_eq!(r.ooms.len(), 1);
        assert_eq!(r.ooms[0].line, 2);
        assert_eq!(stat(&r, "num_ooms"), 1);
        assert_eq!(r.current_allocated_bytes, 40 * MIB + 512, "id 4 reuses id 1's cached segment");
        assert_eq!(r.live_allocations, 2, "ids 3 and 4");
        // A failed alloc's id stays taken until the trace frees it; a second free is an error.
        let reuse = "{\"op\":\"alloc\",\"id\":1,\"size\":41943040}\n{\"op\":\"alloc\",\"id\":2,\"size\":41943040}\n\
                     {\"op\":\"alloc\",\"id\":2,\"size\":1}\n";
        let opts = ReplayOptions { capacity_bytes: Some(64 * MIB), on_oom: OnOom::Continue, ..Default::default() };
        let err = replay(reuse.as_bytes(), &opts).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: alloc of id 2, which is already live (allocated at line 2, where it ran out of memory); free it first"
        );
        let twice =
            "{\"op\":\"alloc\",\"id\":1,\"size\":104857600}\n{\"op\":\"free\",\"id\":1}\n{\"op\":\"free\",\"id\":1}\n";
        let err = replay(twice.as_bytes(), &opts).unwrap_err();
        assert_eq!(err.to_string(), "line 3: free of id 1, which is not live (already freed at line 2)");
    }

    #[test]
    fn oom_records_are_capped() {
        let mut trace = String::from("{\"op\":\"alloc\",\"id\":0,\"size\":1}\n");
        for i in 1..=(MAX_OOM_RECORDS as u64 + 5) {
            trace.push_str(&format!("{{\"op\":\"alloc\",\"id\":{i},\"size\":4194304}}\n"));
        }
        let r = run_with(&trace, 2 * MIB, OnOom::Continue);
        assert_eq!(r.ooms.len(), MAX_OOM_RECORDS);
        assert_eq!(r.ooms_not_recorded, 5);
        assert_eq!(stat(&r, "num_ooms"), MAX_OOM_RECORDS as i64 + 5);
    }

    #[test]
    fn report_serializes_with_messages() {
        let r = run_with(OOM_TRACE, 64 * MIB, OnOom::Stop);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["events"], 2);
        assert_eq!(v["stopped_early"], true);
        assert_eq!(v["memory_stats"]["num_ooms"], 1);
        let oom = &v["ooms"][0];
        assert_eq!(oom["line"], 2);
        assert_eq!(oom["event_index"], 1);
        assert_eq!(oom["requested_bytes"], 41_943_040);
        assert!(oom["message"].as_str().unwrap().contains("Tried to allocate 40.00 MiB"));
        assert_eq!(oom["error"]["free_bytes"], 24 * MIB);
        assert_eq!(oom["memory_stats"]["allocated_bytes.all.current"], 40 * MIB);
    }

    #[test]
    fn alloc_conf_changes_the_replay() {
        let trace = "{\"op\":\"alloc\",\"id\":1,\"size\":5000}\n";
        let config =
            AllocatorConfig { roundup_power2_divisions: [4; vramlab_allocator::ROUNDUP_BUCKETS], ..Default::default() };
        let r = replay(trace.as_bytes(), &ReplayOptions { config, ..Default::default() }).unwrap();
        assert_eq!(r.current_allocated_bytes, 5120);
        assert_eq!(stat(&r, "max_split_size"), -1);
    }

    #[test]
    fn synthetic_trace_is_valid_deterministic_and_exact() {
        let a = synthetic_trace(20_000, 7);
        assert_eq!(a, synthetic_trace(20_000, 7));
        assert_ne!(a, synthetic_trace(20_000, 8));
        assert_eq!(a.lines().count(), 20_000);
        let r = run(&a).unwrap();
        assert_eq!(r.events, 20_000);
        assert!(r.ooms.is_empty());
        assert!(r.peak_reserved_bytes > 1 << 30, "large tensors appear: {}", r.peak_reserved_bytes);
        assert!(stat(&r, "segment.small_pool.allocated") > 0);
        assert!(stat(&r, "num_device_free") > 0, "empty_cache released something");
        for tag in Tag::ALL {
            if tag != Tag::Parameter && tag != Tag::OptimizerState {
                assert!(a.contains(&format!("\"tag\":\"{tag}\"")), "{tag}");
            }
        }
        assert!(a.contains("\"stream\":1"));
        assert_eq!(a.matches("empty_cache").count(), 4);
        assert_eq!(a.matches("reset_peak").count(), 1);
        assert!(synthetic_trace(0, 1).is_empty());
        assert_eq!(run(&synthetic_trace(3, 1)).unwrap().events, 3);
    }

    #[test]
    fn synthetic_trace_runs_out_of_memory_on_a_small_device() {
        let trace = synthetic_trace(5_000, 3);
        let r = run_with(&trace, 2 << 30, OnOom::Continue);
        assert_eq!(r.events, 5_000);
        assert!(!r.ooms.is_empty());
        assert_eq!(r.ooms.len() as i64 + r.ooms_not_recorded as i64, stat(&r, "num_ooms"));
    }

    #[test]
    fn write_trace_round_trips() {
        let ops = [
            TraceOp::Alloc { id: u64::MAX, size: 1, stream: 2, tag: Some(Tag::Gradient) },
            TraceOp::Alloc { id: 0, size: 0, stream: 0, tag: None },
            TraceOp::Free { id: u64::MAX },
            TraceOp::EmptyCache,
            TraceOp::ResetPeak,
        ];
        let mut out = Vec::new();
        write_trace(&mut out, ops).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"op\":\"alloc\",\"id\":18446744073709551615,\"size\":1,\"stream\":2,\"tag\":\"gradient\"}\n\
             {\"op\":\"alloc\",\"id\":0,\"size\":0}\n{\"op\":\"free\",\"id\":18446744073709551615}\n\
             {\"op\":\"empty_cache\"}\n{\"op\":\"reset_peak\"}\n"
        );
        let r = run(&text).unwrap();
        assert_eq!(r.events, 5);
        assert_eq!(r.live_allocations, 1);
    }

    #[test]
    fn streams_the_allocator_refuses_are_errors_with_lines() {
        let expandable = AllocatorConfig { expandable_segments: true, ..Default::default() };
        let ok = "{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4095}\n\
                  {\"op\":\"alloc\",\"id\":2,\"size\":30000000,\"stream\":4095}\n\
                  {\"op\":\"free\",\"id\":1}\n{\"op\":\"empty_cache\"}\n";
        let bad = "{\"op\":\"empty_cache\"}\n{\"op\":\"alloc\",\"id\":1,\"size\":1,\"stream\":4294967295}\n";
        for config in [AllocatorConfig::default(), expandable] {
            let opts = ReplayOptions { config, ..Default::default() };
            assert_eq!(replay(ok.as_bytes(), &opts).unwrap().events, 4);
            let err = replay(bad.as_bytes(), &opts).unwrap_err();
            assert!(matches!(err, ReplayError::Allocator { line: 2, .. }), "{err:?}");
            assert!(err.to_string().contains("4294967295"), "{err}");
        }
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn quiet(trace: &[u8]) {
            let opts = ReplayOptions { capacity_bytes: Some(256 * MIB), on_oom: OnOom::Continue, ..Default::default() };
            let _ = replay(trace, &opts);
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                quiet(&bytes);
            }

            #[test]
            fn on_mutated_traces(seed in 0u64..1000, cuts in proptest::collection::vec((0usize..4000, any::<u8>()), 1..8)) {
                let mut bytes = synthetic_trace(60, seed).into_bytes();
                for (at, byte) in cuts {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                quiet(&bytes);
            }

            #[test]
            fn on_arbitrary_ops(
                ops in proptest::collection::vec(
                    (0u8..5, 0u64..6, prop_oneof![Just(0u64), 0u64..(4 << 20), 0u64..(1 << 31), any::<u64>()], 0u32..3),
                    0..60,
                ),
                expandable in any::<bool>(),
            ) {
                let mut text = String::new();
                for (kind, id, size, stream) in ops {
                    text.push_str(&match kind {
                        0 | 1 => format!("{{\"op\":\"alloc\",\"id\":{id},\"size\":{size},\"stream\":{stream}}}\n"),
                        2 => format!("{{\"op\":\"free\",\"id\":{id}}}\n"),
                        3 => "{\"op\":\"empty_cache\"}\n".to_owned(),
                        _ => "{\"op\":\"reset_peak\"}\n".to_owned(),
                    });
                }
                let config = AllocatorConfig { expandable_segments: expandable, ..Default::default() };
                let opts = ReplayOptions { capacity_bytes: Some(1 << 30), on_oom: OnOom::Continue, config };
                let _ = replay(text.as_bytes(), &opts);
            }
        }
    }
}
