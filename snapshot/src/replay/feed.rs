//! Where a replay takes its trace entries from: a trace read whole
//! ([`SliceFeed`]), or one still being read on another thread
//! (`overlap::StreamFeed`), which the replay waits on entry by entry.
//! Everything the replay's loop asks of the trace goes through [`Feed`]:
//! an entry (and the next, for two-step frees), a run of segment frees
//! classified, the simulated device with the recording's segment addresses,
//! and the whole snapshot once the loop is over.

use std::sync::Arc;

use super::oom::{self, ReleaseKind};
use crate::format::model::{Action, FrameTable, Snapshot, TraceEntry};
use vramlab_allocator::SimulatedMemory;

pub(crate) trait Feed {
    /// The simulated device of `device_bytes` whose segment allocations take
    /// the recording's addresses: `start`'s (the rewound start's segments),
    /// then the trace's `segment_alloc`s in the window (`marks` indexes the
    /// trace's segment events).
    fn memory(
        &mut self,
        device_bytes: u64,
        start: Vec<(u64, u64)>,
        marks: &[usize],
        in_window: &dyn Fn(&TraceEntry) -> bool,
    ) -> Arc<SimulatedMemory>;

    /// Entry `i`, once it is read; `None` past the trace's end.
    fn get(&mut self, i: usize) -> Option<&TraceEntry>;

    /// Whose release the run of segment frees from entry `i` was ([`oom::classify_run`]).
    fn classify_run(&mut self, i: usize, keep: &dyn Fn(&TraceEntry) -> bool) -> ReleaseKind;

    /// How many entries from `i` on have entry `i`'s action.
    fn run_len(&mut self, i: usize) -> usize {
        let Some(action) = self.get(i).map(|e| e.action) else { return 0 };
        let mut k = i + 1;
        while self.get(k).is_some_and(|e| e.action == action) {
            k += 1;
        }
        k - i
    }

    /// The whole trace, once it is read.
    fn whole(&mut self) -> &[TraceEntry];

    /// The whole snapshot, once it is read (`partial` is the one the replay
    /// began with: for a trace read whole, the snapshot itself).
    fn snapshot<'s>(&'s mut self, partial: &'s Snapshot) -> &'s Snapshot;
}

/// A trace read whole.
pub(crate) struct SliceFeed<'a> {
    pub trace: &'a [TraceEntry],
    pub frames: &'a FrameTable,
}

impl Feed for SliceFeed<'_> {
    fn memory(
        &mut self,
        device_bytes: u64,
        start: Vec<(u64, u64)>,
        marks: &[usize],
        in_window: &dyn Fn(&TraceEntry) -> bool,
    ) -> Arc<SimulatedMemory> {
        let trace = self.trace;
        let plan = start
            .into_iter()
            .chain(
                marks
                    .iter()
                    .map(|&i| &trace[i])
                    .filter(|e| in_window(e) && e.action == Action::SegmentAlloc)
                    .map(|e| (e.size, e.addr)),
            )
            .collect();
        Arc::new(SimulatedMemory::with_address_plan(device_bytes, plan))
    }

    #[inline]
    fn get(&mut self, i: usize) -> Option<&TraceEntry> {
        self.trace.get(i)
    }

    fn classify_run(&mut self, i: usize, keep: &dyn Fn(&TraceEntry) -> bool) -> ReleaseKind {
        oom::classify_run(self.trace, i, self.frames, keep)
    }

    fn whole(&mut self) -> &[TraceEntry] {
        self.trace
    }

    fn snapshot<'s>(&'s mut self, partial: &'s Snapshot) -> &'s Snapshot {
        partial
    }
}
