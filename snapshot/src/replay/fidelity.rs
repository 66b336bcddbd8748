//! The fidelity check's side of the replay: the segment events of the
//! recording and of the replay, side by side as the walk meets them
//! ([`SegmentCheck`]), each allocation's place in both (segment in
//! allocation order, offset), and at the end the [`FidelityReport`]: the
//! first segment event and the first allocation where they part, and the
//! final segments and totals compared.

use super::report::{FidelityReport, Misplacement, Placement, SegmentDisagreement};
use crate::format::model::{Action, Segment, Snapshot, TraceEntry};
use vramlab_allocator::{BlockState, CachingAllocator};

/// The segment events of the recording and of the replay, as the walk meets
/// them, and the first allocation placed differently.
#[derive(Default)]
pub(crate) struct SegmentCheck {
    /// Whether placements are compared (not with expandable segments).
    check_placement: bool,
    /// Segment events: the trace index (for the replay's, of the entry that
    /// caused it), action, size.
    recorded: Vec<(u64, Action, u64)>,
    replayed: Vec<(u64, Action, u64)>,
    recorded_segs: LiveSegments,
    replayed_segs: LiveSegments,
    first_misplaced: Option<Misplacement>,
}

impl SegmentCheck {
    pub(crate) fn new(check_placement: bool) -> SegmentCheck {
        SegmentCheck { check_placement, ..SegmentCheck::default() }
    }

    /// The recorded segment allocation (or mapping) at entry `i`.
    #[inline]
    pub(crate) fn recorded_alloc(&mut self, i: u64, e: &TraceEntry) {
        self.recorded.push((i, e.action, e.size));
        self.recorded_segs.alloc(e.addr, e.size);
    }

    /// The recorded segment free (or unmapping) at entry `i`.
    #[inline]
    pub(crate) fn recorded_free(&mut self, i: u64, e: &TraceEntry) {
        self.recorded.push((i, e.action, e.size));
        self.recorded_segs.free(e.addr);
    }

    /// A segment event of the replay's (action, size, address) caused by entry
    /// `i`; whether it allocated a segment.
    #[inline(always)]
    pub(crate) fn replayed(&mut self, i: u64, a: Action, size: u64, addr: u64) -> bool {
        let alloc = matches!(a, Action::SegmentAlloc | Action::SegmentMap);
        if alloc {
            self.replayed_segs.alloc(addr, size);
        } else {
            self.replayed_segs.free(addr);
        }
        self.replayed.push((i, a, size));
        alloc
    }

    /// The allocation of entry `i` (`requested` bytes), recorded at
    /// `recorded_addr` and replayed at `replayed_addr`: the first one placed
    /// elsewhere is kept. The same address is the same place: while the
    /// address plan holds, the replay's segments sit at the recording's (and
    /// fresh addresses lie above every recorded segment), so only a different
    /// address is looked up.
    #[inline(always)]
    pub(crate) fn placed(&mut self, i: u64, requested: u64, recorded_addr: u64, replayed_addr: u64) {
        if self.check_placement
            && self.first_misplaced.is_none()
            && recorded_addr != replayed_addr
            && let Some(recorded) = self.recorded_segs.place(recorded_addr)
        {
            let replayed = self.replayed_segs.place(replayed_addr);
            if replayed != Some(recorded) {
                self.first_misplaced =
                    Some(Misplacement { trace_index: i, requested_bytes: requested, recorded, replayed });
            }
        }
    }

    /// The fidelity report of the replay by `allocator` of `device`'s trace of `snapshot`.
    pub(crate) fn report(self, snapshot: &Snapshot, device: usize, allocator: &CachingAllocator) -> FidelityReport {
        let mut report = fidelity(snapshot, device, allocator, &self.recorded, &self.replayed);
        report.first_misplaced_alloc = self.first_misplaced;
        report
    }
}

/// The live segments of the recording or of the replay, by address, each with
/// its number in allocation order.
#[derive(Default)]
struct LiveSegments {
    by_addr: std::collections::BTreeMap<u64, (u64, u64)>,
    allocated: u64,
}

impl LiveSegments {
    fn alloc(&mut self, addr: u64, size: u64) {
        self.by_addr.insert(addr, (size, self.allocated));
        self.allocated += 1;
    }

    fn free(&mut self, addr: u64) {
        self.by_addr.remove(&addr);
    }

    /// Where `addr` lies, if in a live segment.
    fn place(&self, addr: u64) -> Option<Placement> {
        let (&base, &(size, segment)) = self.by_addr.range(..=addr).next_back()?;
        (addr < base + size).then_some(Placement { segment, segment_bytes: size, offset: addr - base })
    }
}

type SegKey = (u64, Vec<(u64, bool)>);

fn fidelity(
    snapshot: &Snapshot,
    device: usize,
    allocator: &CachingAllocator,
    recorded: &[(u64, Action, u64)],
    replayed: &[(u64, Action, u64)],
) -> FidelityReport {
    let first_segment_disagreement = (0..recorded.len().max(replayed.len())).find_map(|k| {
        let rec = recorded.get(k).copied();
        let rep = replayed.get(k).copied();
        let same = matches!((rec, rep), (Some((_, a, s)), Some((_, b, t))) if a == b && s == t);
        (!same).then_some(SegmentDisagreement { position: k as u64, recorded: rec, replayed: rep })
    });
    let mut rec_segs: Vec<SegKey> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device as i64)
        .map(|s| (s.total_size, s.blocks.iter().map(|b| (b.size, b.state != BlockState::Inactive)).collect()))
        .collect();
    let ours = allocator.snapshot();
    let mut rep_segs: Vec<SegKey> = ours
        .iter()
        .map(|s| (s.total_size, s.blocks.iter().map(|b| (b.size, b.state != BlockState::Inactive)).collect()))
        .collect();
    rec_segs.sort();
    rep_segs.sort();
    let final_segments_disagreement = if rec_segs == rep_segs {
        None
    } else {
        let k = rec_segs.iter().zip(&rep_segs).position(|(a, b)| a != b).unwrap_or(rec_segs.len().min(rep_segs.len()));
        let show = |s: Option<&SegKey>| match s {
            None => "none".to_owned(),
            Some((total, blocks)) => format!(
                "a segment of {total} bytes with blocks [{}]",
                blocks
                    .iter()
                    .map(|(size, active)| format!("{size}{}", if *active { " active" } else { " free" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Some(format!(
            "{} recorded and {} replayed segments; in size order, #{k} is {} in the snapshot but {} in the replay",
            rec_segs.len(),
            rep_segs.len(),
            show(rec_segs.get(k)),
            show(rep_segs.get(k))
        ))
    };
    let rec_iter = || snapshot.segments.iter().filter(|s| s.device == device as i64);
    FidelityReport {
        recorded_segment_events: recorded.len() as u64,
        replayed_segment_events: replayed.len() as u64,
        first_segment_disagreement,
        first_misplaced_alloc: None,
        recorded_segments: rec_segs.len() as u64,
        replayed_segments: rep_segs.len() as u64,
        final_segments_disagreement,
        // A block whose free waits for other streams (active_pending_free) is
        // active but allocated no more.
        recorded_allocated_bytes: rec_iter().map(Segment::allocated_bytes).sum(),
        replayed_allocated_bytes: allocator.memory_allocated(),
        recorded_reserved_bytes: rec_iter().map(|s| s.total_size).sum(),
        replayed_reserved_bytes: allocator.memory_reserved(),
        memory_stats: None,
    }
}
