//! `Tensor.record_stream`'s two-step free, in a snapshot written by hand from
//! PyTorch's `DeviceCachingAllocator::free`, `insert_events` and
//! `process_events` (c10/cuda/CUDACachingAllocator.cpp): a block used on a side
//! stream is allocated no more at its `free_requested` (`allocation` and
//! `allocated_bytes` drop there), stays active and unusable until its
//! `free_completed` (emitted by `process_events` at the start of a later
//! `malloc`), and one such free is still pending at the dump.

use vramlab_allocator::BlockState;
use vramlab_allocator::consts::MIB;
use vramlab_snapshot::{
    Action, Block, FrameTable, Segment, SegmentType, Snapshot, SnapshotReplayOptions, TraceEntry, replay_snapshot,
};

const STREAM: i64 = 94_000_000;
const BASE: u64 = 0x7f00_0020_0000;

fn entry(action: Action, addr: u64, size: u64) -> TraceEntry {
    TraceEntry { action, addr, size, stream: STREAM, time_us: 0, frames: 0 }
}

fn block(offset: u64, size: u64, state: BlockState) -> Block {
    let requested_size = if state == BlockState::Inactive { 0 } else { size };
    Block { address: BASE + offset, size, requested_size, state, frames: 0 }
}

/// A and B allocated; A freed after `record_stream` (its free completes only at
/// the next malloc but one, so C cannot take A's block and goes after B); D then
/// takes A's block; B freed after `record_stream` and still pending at the dump.
fn record_stream_snapshot() -> Snapshot {
    let (a, b, c) = (BASE, BASE + 512, BASE + 1024);
    let trace = vec![
        entry(Action::SegmentAlloc, BASE, 2 * MIB),
        entry(Action::Alloc, a, 512),
        entry(Action::Alloc, b, 512),
        entry(Action::FreeRequested, a, 512), // insert_events: the side stream's event is pending
        entry(Action::Alloc, c, 512),         // process_events: not done yet, A's block is not free
        entry(Action::FreeCompleted, a, 512), // process_events at the next malloc: done, free_block(A)
        entry(Action::Alloc, a, 512),         // D: best fit, A's block
        entry(Action::FreeRequested, b, 512), // pending at the dump
    ];
    let segment = Segment {
        device: 0,
        address: BASE,
        total_size: 2 * MIB,
        stream: STREAM,
        segment_type: SegmentType::Small,
        segment_pool_id: (0, 0),
        is_expandable: false,
        frames: 0,
        blocks: vec![
            block(0, 512, BlockState::ActiveAllocated),
            block(512, 512, BlockState::ActivePendingFree),
            block(1024, 512, BlockState::ActiveAllocated),
            block(1536, 2 * MIB - 1536, BlockState::Inactive),
        ],
    };
    Snapshot::of_one_device(trace, vec![segment], FrameTable::default())
}

#[test]
fn a_record_stream_free_is_allocated_no_more_at_free_requested_and_reusable_at_free_completed() {
    let r = replay_snapshot(&record_stream_snapshot(), &SnapshotReplayOptions::default()).unwrap();
    assert_eq!(r.skipped_entries, 0, "{:?}", r.first_skipped);
    let f = r.fidelity.as_ref().unwrap();
    // C lands after B, not in A's pending block; D takes A's block once free.
    assert!(f.agrees(), "{f:#?}");
    assert_eq!((r.frees_deferred, r.frees_pending_at_end), (2, 1));

    // PyTorch's memory_stats() at the dump, from its free()/free_block():
    // allocation and allocated_bytes count C and D; active, active_bytes and
    // requested_bytes count B too, until its free_completed.
    let s = &r.final_memory_stats;
    let expect = [
        ("allocation.all.current", 2),
        ("allocation.all.allocated", 4),
        ("allocation.all.freed", 2),
        ("allocation.all.peak", 3),
        ("allocated_bytes.all.current", 1024),
        ("allocated_bytes.small_pool.freed", 1024),
        ("active.all.current", 3),
        ("active.all.freed", 1),
        ("active.all.peak", 3),
        ("active_bytes.all.current", 1536),
        ("requested_bytes.all.current", 1536),
        ("inactive_split.all.current", 1),
        ("inactive_split_bytes.all.current", 2 * MIB as i64 - 1536),
        ("segment.all.current", 1),
        ("reserved_bytes.all.current", 2 * MIB as i64),
    ];
    for (key, value) in expect {
        assert_eq!(s[key], value, "{key}");
    }
    assert_eq!(r.final_allocated_bytes, 1024);
}

#[test]
fn an_immediate_free_is_one_step() {
    // The same start with A's free completed at once (no record_stream): the
    // next allocation takes A's block, as PyTorch's free_block would have it.
    let mut s = record_stream_snapshot();
    let a = BASE;
    let t = &mut s.device_traces[0];
    t.truncate(3);
    t.extend([
        entry(Action::FreeRequested, a, 512),
        entry(Action::FreeCompleted, a, 512),
        entry(Action::Alloc, a, 512),
    ]);
    s.segments[0].blocks = vec![
        block(0, 512, BlockState::ActiveAllocated),
        block(512, 512, BlockState::ActiveAllocated),
        block(1024, 2 * MIB - 1024, BlockState::Inactive),
    ];
    let r = replay_snapshot(&s, &SnapshotReplayOptions::default()).unwrap();
    assert!(r.fidelity.as_ref().unwrap().agrees(), "{:#?}", r.fidelity);
    assert_eq!((r.frees_deferred, r.frees_pending_at_end), (0, 0));
    assert_eq!(r.final_memory_stats["active.all.current"], 2);
}
