//! The replay page's allocator state at a chosen entry (memory_viz's segment
//! map at a moment): a [`StateHistory`] of the replay written compactly for
//! `templates/timeline.js`, which rebuilds the segments at any state the
//! history holds from its keyframe and block changes. Sizes and offsets are
//! in units of 512 bytes where every one is a multiple of it (PyTorch's
//! smallest block), numbers in flat arrays: `[segment, offset, size, state]`
//! per block, state 0 free (cached), 1 allocated, 2 freed but waiting on a
//! stream, −1 gone.

use serde::Serialize;
use vramlab_engine::alloc::BlockState;
use vramlab_snapshot::StateHistory;

/// A pinned state the view offers to jump to: the peaks and out-of-memory errors.
#[derive(Debug, Clone, Serialize)]
pub struct StatePin {
    pub label: String,
    /// Entries applied (the state after entry `state − 1`).
    pub state: u64,
}

#[derive(Debug, Serialize)]
struct Window {
    start: u64,
    key: Vec<i64>,
    /// Changes at each next state.
    n: Vec<u32>,
    d: Vec<i64>,
}

/// What the page's script gets.
#[derive(Debug, Serialize)]
struct StateData<'a> {
    entries: u64,
    unit: u64,
    /// `[address, stream, small (1/0), expandable (1/0)]`
    segs: Vec<[u64; 4]>,
    windows: Vec<Window>,
    pins: &'a [StatePin],
    /// The state shown first (the reserved peak, else the last).
    first: u64,
    /// The last state the replay reached (before the trace's end where it stopped at an out-of-memory).
    last: u64,
}

fn code(s: BlockState) -> i64 {
    match s {
        BlockState::Inactive => 0,
        BlockState::ActiveAllocated => 1,
        BlockState::ActivePendingFree => 2,
    }
}

/// The unit of sizes and offsets: 512 where every one is a multiple of it, else 1.
fn unit(h: &StateHistory) -> u64 {
    let fits = |v: u64| v.is_multiple_of(512);
    let all = h.windows.iter().all(|w| {
        w.keyframe.iter().all(|b| fits(b.offset) && fits(b.size))
            && w.changes.iter().flatten().all(|c| fits(c.offset) && c.now.is_none_or(|(s, _)| fits(s)))
    });
    if all { 512 } else { 1 }
}

/// The JSON of `history` for the page (`first`: the state shown first;
/// `last`: the last the replay reached).
pub fn state_json(history: &StateHistory, pins: &[StatePin], first: u64, last: u64) -> serde_json::Value {
    let u = unit(history);
    let windows = history
        .windows
        .iter()
        .map(|w| Window {
            start: w.start,
            key: w
                .keyframe
                .iter()
                .flat_map(|b| [i64::from(b.segment), (b.offset / u) as i64, (b.size / u) as i64, code(b.state)])
                .collect(),
            n: w.changes.iter().map(|c| c.len() as u32).collect(),
            d: w.changes
                .iter()
                .flatten()
                .flat_map(|c| {
                    let (size, state) = c.now.map_or((0, -1), |(s, st)| ((s / u) as i64, code(st)));
                    [i64::from(c.segment), (c.offset / u) as i64, size, state]
                })
                .collect(),
        })
        .collect();
    let data = StateData {
        entries: history.entries,
        unit: u,
        segs: history
            .segments
            .iter()
            .map(|s| [s.address, u64::from(s.stream), u64::from(s.small), u64::from(s.expandable)])
            .collect(),
        windows,
        pins,
        first,
        last,
    };
    serde_json::to_value(data).expect("plain numbers and strings")
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramlab_snapshot::{BlockChange, StateBlock, StateSegment, StateWindow};

    #[test]
    fn sizes_go_in_units_of_512_and_changes_flat() {
        let h = StateHistory {
            entries: 2,
            segments: vec![StateSegment { address: 1 << 40, stream: 0, small: false, expandable: false }],
            windows: vec![StateWindow {
                start: 0,
                keyframe: vec![StateBlock { segment: 0, offset: 0, size: 2 << 20, state: BlockState::Inactive }],
                changes: vec![
                    vec![
                        BlockChange { segment: 0, offset: 0, now: Some((1 << 20, BlockState::ActiveAllocated)) },
                        BlockChange { segment: 0, offset: 1 << 20, now: Some((1 << 20, BlockState::Inactive)) },
                    ],
                    vec![BlockChange { segment: 0, offset: 1 << 20, now: None }],
                ],
            }],
        };
        let v = state_json(&h, &[], 1, 2);
        assert_eq!(v["unit"], 512);
        assert_eq!(v["segs"][0], serde_json::json!([1u64 << 40, 0, 0, 0]));
        assert_eq!(v["windows"][0]["key"], serde_json::json!([0, 0, 4096, 0]));
        assert_eq!(v["windows"][0]["n"], serde_json::json!([2, 1]));
        assert_eq!(v["windows"][0]["d"], serde_json::json!([0, 0, 2048, 1, 0, 2048, 2048, 0, 0, 2048, 0, -1]));
    }
}
