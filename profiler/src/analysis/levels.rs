//! Levels: the one place that says how an allocator record moves the
//! counters (PyTorch's semantics).

use crate::record::{Record, Recording, kind};
use crate::timeline::CATEGORY_COUNT;

use super::types::MemoryLevels;

/// Bits of what [`apply_levels`] changed.
pub(crate) const CH_ALLOCATED: u8 = 1;
pub(crate) const CH_RESERVED: u8 = 2;
pub(crate) const CH_ACTIVE: u8 = 4;
pub(crate) const CH_REQUESTED: u8 = 8;

/// Applies an allocator record to the counters (PyTorch's semantics) and
/// returns which of them changed. Ignored records change nothing.
#[inline]
pub(crate) fn apply_levels(
    lv: &mut MemoryLevels,
    by_cat: &mut [u64; CATEGORY_COUNT],
    rec: &Recording,
    index: usize,
    r: &Record,
) -> u8 {
    if r.ignored() {
        return 0;
    }
    match r.kind {
        kind::ALLOC => {
            lv.allocated_bytes += r.b;
            lv.active_bytes += r.b;
            lv.requested_bytes += rec.requested(index, r);
            by_cat[r.category_index()] += r.b;
            CH_ALLOCATED | CH_ACTIVE | CH_REQUESTED
        }
        kind::FREE_REQUESTED => {
            lv.allocated_bytes = lv.allocated_bytes.saturating_sub(r.b);
            let c = &mut by_cat[r.category_index()];
            *c = c.saturating_sub(r.b);
            CH_ALLOCATED
        }
        kind::FREE_COMPLETED => {
            lv.active_bytes = lv.active_bytes.saturating_sub(r.b);
            lv.requested_bytes = lv.requested_bytes.saturating_sub(rec.requested(index, r));
            CH_ACTIVE | CH_REQUESTED
        }
        kind::SEGMENT_ALLOC | kind::SEGMENT_MAP => {
            lv.reserved_bytes += r.b;
            CH_RESERVED
        }
        kind::SEGMENT_FREE | kind::SEGMENT_UNMAP => {
            lv.reserved_bytes = lv.reserved_bytes.saturating_sub(r.b);
            CH_RESERVED
        }
        _ => 0,
    }
}
