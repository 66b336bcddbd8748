//! A replay's memory over its ops, for reports: allocated and reserved bytes
//! after each op (decimated to a bounded number of points, every peak kept at
//! the op that reaches it), the
//! segments and their blocks at the reserved peak, and the fragmentation figures
//! of every out-of-memory. Filled by [`crate::replay_with_timeline`] and
//! `vramlab_snapshot::replay_snapshot_timeline`; nothing here changes what a
//! plain replay does or reports.

use serde::Serialize;

use vramlab_allocator::{CachingAllocator, SegmentInfo};

/// Points a [`ReplayTimeline`] keeps at most. Past that, neighbouring points are
/// merged, each keeping the highest allocated and reserved bytes of the ops it
/// stands for, placed at the first op that reaches each (so the curve is the
/// upper envelope, no peak is lost, and a peak is drawn where it happened).
pub const MAX_TIMELINE_POINTS: usize = 2000;

/// Out-of-memory events whose figures a timeline keeps (later ones are counted).
pub const MAX_TIMELINE_OOMS: usize = 1000;

/// Memory after a number of ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// Ops (trace lines with an op, or snapshot trace entries) replayed when
    /// `allocated_bytes` held; 0 is before the first. Of a point standing for
    /// several ops, the first op whose allocated bytes are the highest.
    pub ops: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Ops replayed when `reserved_bytes` held: `ops`, or, of a point standing
    /// for several ops, the first whose reserved bytes are the highest.
    pub reserved_ops: u64,
}

impl TimelinePoint {
    /// The state after `ops` ops.
    pub fn at(ops: u64, allocated_bytes: u64, reserved_bytes: u64) -> TimelinePoint {
        TimelinePoint { ops, allocated_bytes, reserved_bytes, reserved_ops: ops }
    }

    /// `self` and the later point `next` as one: each value the higher, at the
    /// first op that reaches it.
    fn merge(self, next: TimelinePoint) -> TimelinePoint {
        let (ops, allocated_bytes) = if next.allocated_bytes > self.allocated_bytes {
            (next.ops, next.allocated_bytes)
        } else {
            (self.ops, self.allocated_bytes)
        };
        let (reserved_ops, reserved_bytes) = if next.reserved_bytes > self.reserved_bytes {
            (next.reserved_ops, next.reserved_bytes)
        } else {
            (self.reserved_ops, self.reserved_bytes)
        };
        TimelinePoint { ops, allocated_bytes, reserved_bytes, reserved_ops }
    }
}

/// The allocator's state when reserved memory first reached its maximum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeakState {
    /// Ops replayed then (see [`TimelinePoint::ops`]).
    pub ops: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// The largest free (cached) block then.
    pub largest_free_block_bytes: u64,
    /// Every segment with its blocks, by address.
    pub segments: Vec<SegmentInfo>,
}

/// The fragmentation figures of one out-of-memory, right after the failure
/// (PyTorch has released the cached segments it could by then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomState {
    /// 0-based index of the op (or snapshot trace entry) that failed.
    pub index: u64,
    /// 1-based trace line, for JSON Lines traces.
    pub line: Option<u64>,
    pub device: u32,
    pub requested_bytes: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Reserved but not allocated: cached blocks too small or too split to use.
    pub reserved_unallocated_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// The out-of-memory message.
    pub message: String,
}

/// A replay's memory over its ops (device 0 for a JSON Lines trace; the
/// replayed device for a snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayTimeline {
    /// In order of `ops`; the first is the state before the first op, the last
    /// the state at the end.
    pub points: Vec<TimelinePoint>,
    /// Ops each point stands for (1 until the trace has more than
    /// [`MAX_TIMELINE_POINTS`] ops).
    pub ops_per_point: u64,
    /// The reserved peak and its segments; `None` when nothing was ever reserved.
    pub peak: Option<PeakState>,
    /// The first [`MAX_TIMELINE_OOMS`] out-of-memory events.
    pub ooms: Vec<OomState>,
    pub ooms_not_recorded: u64,
}

impl ReplayTimeline {
    /// The highest allocated bytes among the points.
    pub fn peak_allocated_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.allocated_bytes).max().unwrap_or(0)
    }

    /// The highest reserved bytes among the points.
    pub fn peak_reserved_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.reserved_bytes).max().unwrap_or(0)
    }
}

/// Collects a [`ReplayTimeline`] while a replay runs.
#[derive(Debug)]
pub struct TimelineRecorder {
    max_points: usize,
    points: Vec<TimelinePoint>,
    stride: u64,
    /// The bucket being filled and how many ops it holds.
    open: Option<(TimelinePoint, u64)>,
    last: TimelinePoint,
    peak_reserved: u64,
    /// Ops replayed when reserved first reached `peak_reserved`.
    pub peak_ops: Option<u64>,
    ooms: Vec<OomState>,
    ooms_not_recorded: u64,
}

impl TimelineRecorder {
    /// Starts at `start` (the state before the first op).
    pub fn new(max_points: usize, start: TimelinePoint) -> TimelineRecorder {
        TimelineRecorder {
            max_points: max_points.max(4),
            points: vec![start],
            stride: 1,
            open: None,
            last: start,
            peak_reserved: start.reserved_bytes,
            peak_ops: (start.reserved_bytes > 0).then_some(start.ops),
            ooms: Vec::new(),
            ooms_not_recorded: 0,
        }
    }

    /// The state after `ops` ops.
    pub fn op(&mut self, ops: u64, allocated_bytes: u64, reserved_bytes: u64) {
        let p = TimelinePoint::at(ops, allocated_bytes, reserved_bytes);
        self.last = p;
        if reserved_bytes > self.peak_reserved {
            self.peak_reserved = reserved_bytes;
            self.peak_ops = Some(ops);
        }
        let (bucket, n) = match self.open.take() {
            None => (p, 1),
            Some((b, n)) => (b.merge(p), n + 1),
        };
        if n < self.stride {
            self.open = Some((bucket, n));
            return;
        }
        self.points.push(bucket);
        if self.points.len() >= self.max_points {
            // Merge neighbours (the start point stays on its own).
            let rest: Vec<TimelinePoint> =
                self.points[1..].chunks(2).map(|c| c.iter().skip(1).fold(c[0], |a, &b| a.merge(b))).collect();
            self.points.truncate(1);
            self.points.extend(rest);
            self.stride *= 2;
        }
    }

    /// An out-of-memory, with the figures read from `allocator` right after it.
    pub fn oom(
        &mut self,
        allocator: &CachingAllocator,
        (index, line, device): (u64, Option<u64>, u32),
        requested_bytes: u64,
        message: String,
    ) {
        if self.ooms.len() >= MAX_TIMELINE_OOMS {
            self.ooms_not_recorded += 1;
            return;
        }
        let reserved_bytes = allocator.memory_reserved();
        let allocated_bytes = allocator.memory_allocated();
        self.ooms.push(OomState {
            index,
            line,
            device,
            requested_bytes,
            reserved_bytes,
            allocated_bytes,
            reserved_unallocated_bytes: reserved_bytes.saturating_sub(allocated_bytes),
            largest_free_block_bytes: allocator.largest_free_block(),
            message,
        });
    }

    /// The timeline, without its peak state (the caller replays up to
    /// [`peak_ops`](Self::peak_ops) to take it).
    pub fn finish(mut self) -> ReplayTimeline {
        if let Some((bucket, _)) = self.open.take() {
            self.points.push(bucket);
        }
        // The final state, unless the last bucket already is it.
        if self.points.last() != Some(&self.last) && self.last.ops > 0 {
            self.points.push(self.last);
        }
        ReplayTimeline {
            points: self.points,
            ops_per_point: self.stride,
            peak: None,
            ooms: self.ooms,
            ooms_not_recorded: self.ooms_not_recorded,
        }
    }
}

/// The allocator's state now, as a [`PeakState`] at `ops`.
pub fn peak_state(allocator: &CachingAllocator, ops: u64) -> PeakState {
    let (stats, segments) = allocator.stats_and_snapshot();
    PeakState {
        ops,
        allocated_bytes: stats.memory_allocated(),
        reserved_bytes: stats.memory_reserved(),
        largest_free_block_bytes: allocator.largest_free_block(),
        segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_the_peaks_and_the_end() {
        let start = TimelinePoint::default();
        let mut r = TimelineRecorder::new(16, start);
        // A sawtooth with one spike at op 777.
        for ops in 1..=1000u64 {
            let allocated = if ops == 777 { 1 << 30 } else { (ops % 10) << 20 };
            r.op(ops, allocated, 64 << 20);
        }
        assert_eq!(r.peak_ops, Some(1));
        let t = r.finish();
        assert!(t.points.len() <= 17, "{} points", t.points.len());
        assert_eq!(t.points[0], start);
        assert_eq!(t.peak_allocated_bytes(), 1 << 30);
        assert_eq!(t.points.last().unwrap().ops, 1000);
        assert!(t.ops_per_point > 1);
        assert!(t.points.windows(2).all(|w| w[0].ops < w[1].ops), "{:?}", t.points);
        // The spike is drawn at op 777, the op that reached it, not at its group's first op.
        let spike = t.points.iter().find(|p| p.allocated_bytes == 1 << 30).unwrap();
        assert_eq!(spike.ops, 777);
        // Each group's reserved and allocated values sit where they were reached.
        let mut r = TimelineRecorder::new(4, start);
        for (ops, a, res) in [(1, 5, 10), (2, 9, 10), (3, 1, 30), (4, 2, 20), (5, 0, 0), (6, 0, 0), (7, 0, 0)] {
            r.op(ops, a, res);
        }
        let t = r.finish();
        assert!(t.ops_per_point > 1);
        let highest = t.points.iter().find(|p| p.allocated_bytes == 9).unwrap();
        assert_eq!((highest.ops, highest.reserved_bytes, highest.reserved_ops), (2, 30, 3), "{:?}", t.points);
    }

    #[test]
    fn short_replays_keep_every_op() {
        let mut r = TimelineRecorder::new(MAX_TIMELINE_POINTS, TimelinePoint::default());
        r.op(1, 10, 20);
        r.op(2, 0, 20);
        r.op(3, 0, 0);
        assert_eq!(r.peak_ops, Some(1));
        let t = r.finish();
        assert_eq!(t.ops_per_point, 1);
        let ops: Vec<u64> = t.points.iter().map(|p| p.ops).collect();
        assert_eq!(ops, [0, 1, 2, 3]);
    }
}
