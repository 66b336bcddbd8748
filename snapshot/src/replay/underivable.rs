//! The `torch.cuda.memory_stats()` keys a snapshot's trace cannot determine,
//! decided key by key from where PyTorch's `DeviceCachingAllocator` changes
//! them (c10/cuda/CUDACachingAllocator.cpp):
//!
//! - `num_sync_all_streams` is counted by every `synchronize_and_free_events`,
//!   which every `release_cached_blocks` runs (each `empty_cache()`, each release
//!   before an out-of-memory retry) whether or not it then releases a segment.
//!   Only releases that free a segment leave trace entries; `empty_cache()` calls
//!   that find nothing to release (cuDNN's benchmark path makes one after each
//!   algorithm search) leave none. The replay counts the releases the trace
//!   shows: a lower bound, on every recording.
//! - When the trace does not start at the process's first allocation (memory
//!   live, or segments reserved, before its first entry: a ring buffer that
//!   lost its start, recording begun late) or only a time window of it is
//!   replayed, what happened before is not in it: every cumulative count
//!   (`*.allocated`, `*.freed`, `num_device_alloc`, `num_device_free`,
//!   `num_alloc_retries`, `num_ooms`) and every peak (`*.peak`) is not known from
//!   the trace. The current values (`*.current`, and the counts of oversize
//!   blocks) follow from the final segments and are derivable.
//!
//! Every other key is what the replay's allocator reads: equal to PyTorch's for
//! a replay that agrees with the recording. (A program's own
//! `reset_peak_memory_stats()` / `reset_accumulated_memory_stats()` calls leave
//! no trace entry either; the replay assumes none was made.)

use std::collections::BTreeMap;

use serde::Serialize;

/// One statistic the trace cannot determine, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnderivableStat {
    /// The `torch.cuda.memory_stats()` key.
    pub key: String,
    pub reason: String,
    /// Whether the replay's value is a lower bound of PyTorch's (else it is not
    /// known from the trace at all).
    pub lower_bound: bool,
}

const SYNC_REASON: &str = "PyTorch counts every release of cached blocks, including empty_cache() calls that \
                           release nothing and leave no trace entry (cuDNN's benchmark calls one after each \
                           algorithm search); the replay counts only the releases the trace shows";

/// What the replay knows about where the trace starts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TraceStart {
    /// Blocks live, or segments reserved, before the first entry.
    pub(crate) live_before: bool,
    /// Only a time window of the trace was replayed.
    pub(crate) windowed: bool,
}

/// The keys of `stats` (a replay's `memory_stats()`) the trace cannot determine.
pub(crate) fn underivable_stats(stats: &BTreeMap<String, i64>, start: TraceStart) -> Vec<UnderivableStat> {
    let partial = start.live_before || start.windowed;
    let why_partial = if start.windowed {
        "only a time window of the trace was replayed: what came before it is not counted"
    } else {
        "the trace does not start at the process's first allocation (memory was live or reserved before its \
         first entry): counts and peaks from before it are not in it"
    };
    let cumulative = |k: &str| {
        k.ends_with(".allocated")
            || k.ends_with(".freed")
            || k.ends_with(".peak")
            || matches!(k, "num_device_alloc" | "num_device_free" | "num_alloc_retries" | "num_ooms")
    };
    stats
        .keys()
        .filter_map(|k| {
            if partial && (cumulative(k) || k == "num_sync_all_streams") {
                Some(UnderivableStat { key: k.clone(), reason: why_partial.to_owned(), lower_bound: false })
            } else if k == "num_sync_all_streams" {
                Some(UnderivableStat { key: k.clone(), reason: SYNC_REASON.to_owned(), lower_bound: true })
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> BTreeMap<String, i64> {
        ["num_sync_all_streams", "allocation.all.current", "allocation.all.peak", "num_device_alloc", "max_split_size"]
            .into_iter()
            .map(|k| (k.to_owned(), 1))
            .collect()
    }

    #[test]
    fn a_whole_trace_leaves_only_the_sync_count_underivable_as_a_lower_bound() {
        let u = underivable_stats(&keys(), TraceStart::default());
        assert_eq!(u.len(), 1);
        assert_eq!((u[0].key.as_str(), u[0].lower_bound), ("num_sync_all_streams", true));
    }

    #[test]
    fn a_partial_trace_leaves_counts_and_peaks_unknown_but_current_values_derivable() {
        let u = underivable_stats(&keys(), TraceStart { live_before: true, windowed: false });
        let k: Vec<_> = u.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(k, ["allocation.all.peak", "num_device_alloc", "num_sync_all_streams"]);
        assert!(u.iter().all(|s| !s.lower_bound && s.reason.contains("first allocation")));
    }
}
