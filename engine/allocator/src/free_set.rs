//! The ordered set of a pool's free blocks, keyed by (stream, size, address).
//!
//! PyTorch keeps these in a `std::set`. Here the common case — a handful of free
//! blocks per pool, touched on every alloc and free — is a sorted vector, where a
//! lookup is a binary search and an insert or remove a short memmove; past
//! [`SPILL_LEN`] entries the set moves into a `BTreeMap` so that heavily
//! fragmented pools stay logarithmic. Keys pack into one `u128` so comparisons
//! are two machine compares.

use std::collections::BTreeMap;

/// Highest stream id a key can hold.
pub(crate) const MAX_STREAM: u32 = (1 << STREAM_BITS) - 1;
/// Largest size a key can hold (about 2 EiB; the allocator refuses requests of
/// 1 EiB or more, as PyTorch does, so every block fits).
pub(crate) const MAX_KEY_SIZE: u64 = ((1 << SIZE_BITS) - 1) << SIZE_SHIFT;

const STREAM_BITS: u32 = 12;
/// Sizes are stored in 512-byte units: every block size is a multiple of 512.
const SIZE_BITS: u32 = 52;
const SIZE_SHIFT: u32 = 9;

/// Above this many entries the vector spills into a B-tree …
const SPILL_LEN: usize = 48;
/// … and below this many it moves back.
const UNSPILL_LEN: usize = 16;

/// (stream, size, address) packed so that `u128` order is the lexicographic order.
#[inline]
pub(crate) fn key(stream: u32, size: u64, addr: u64) -> u128 {
    debug_assert!(stream <= MAX_STREAM && size <= MAX_KEY_SIZE && size.is_multiple_of(512));
    ((stream as u128) << (SIZE_BITS + 64)) | (((size >> SIZE_SHIFT) as u128) << 64) | addr as u128
}

#[derive(Debug)]
enum Repr {
    Sorted(Vec<(u128, u32)>),
    Tree(BTreeMap<u128, u32>),
}

/// An ordered map from packed keys to block ids.
#[derive(Debug)]
pub(crate) struct FreeSet {
    repr: Repr,
}

impl Default for FreeSet {
    fn default() -> Self {
        FreeSet { repr: Repr::Sorted(Vec::new()) }
    }
}

impl FreeSet {
    #[inline]
    pub(crate) fn insert(&mut self, k: u128, id: u32) {
        match &mut self.repr {
            Repr::Sorted(v) => {
                let i = v.partition_point(|e| e.0 < k);
                debug_assert!(v.get(i).is_none_or(|e| e.0 != k), "key inserted twice");
                if i == v.len() {
                    v.push((k, id));
                } else {
                    v.insert(i, (k, id));
                }
                if v.len() > SPILL_LEN {
                    self.repr = Repr::Tree(v.drain(..).collect());
                }
            }
            Repr::Tree(t) => {
                let old = t.insert(k, id);
                debug_assert!(old.is_none(), "key inserted twice");
            }
        }
    }

    /// Removes `k`; returns its id.
    #[inline]
    pub(crate) fn remove(&mut self, k: u128) -> Option<u32> {
        match &mut self.repr {
            Repr::Sorted(v) => {
                let i = v.partition_point(|e| e.0 < k);
                match v.get(i) {
                    Some(e) if e.0 == k && i + 1 == v.len() => v.pop().map(|e| e.1),
                    Some(e) if e.0 == k => Some(v.remove(i).1),
                    _ => None,
                }
            }
            Repr::Tree(t) => {
                let id = t.remove(&k);
                if t.len() < UNSPILL_LEN {
                    let v = std::mem::take(t).into_iter().collect();
                    self.repr = Repr::Sorted(v);
                }
                id
            }
        }
    }

    /// The first entry with key ≥ `k` (`lower_bound`).
    #[inline]
    pub(crate) fn first_from(&self, k: u128) -> Option<(u128, u32)> {
        match &self.repr {
            Repr::Sorted(v) => v.get(v.partition_point(|e| e.0 < k)).copied(),
            Repr::Tree(t) => t.range(k..).next().map(|(&k, &id)| (k, id)),
        }
    }

    /// The first entry with key > `k`.
    #[inline]
    pub(crate) fn first_after(&self, k: u128) -> Option<(u128, u32)> {
        k.checked_add(1).and_then(|k| self.first_from(k))
    }

    /// The last entry with key < `k`.
    pub(crate) fn last_before(&self, k: u128) -> Option<(u128, u32)> {
        match &self.repr {
            Repr::Sorted(v) => v.partition_point(|e| e.0 < k).checked_sub(1).map(|i| v[i]),
            Repr::Tree(t) => t.range(..k).next_back().map(|(&k, &id)| (k, id)),
        }
    }

    /// Every id, in key order.
    pub(crate) fn ids(&self) -> Vec<u32> {
        match &self.repr {
            Repr::Sorted(v) => v.iter().map(|e| e.1).collect(),
            Repr::Tree(t) => t.values().copied().collect(),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match &self.repr {
            Repr::Sorted(v) => v.len(),
            Repr::Tree(t) => t.len(),
        }
    }

    /// The size part of the largest key (0 when empty), for `largest_free_block`.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        let size = |k: u128| ((k >> 64) as u64 & ((1 << SIZE_BITS) - 1)) << SIZE_SHIFT;
        let (a, b) = match &self.repr {
            Repr::Sorted(v) => (Some(v.iter().map(move |e| size(e.0))), None),
            Repr::Tree(t) => (None, Some(t.keys().map(move |&k| size(k)))),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_order_is_stream_size_address() {
        assert!(key(0, 10 * 512, 99) < key(0, 11 * 512, 0));
        assert!(key(0, MAX_KEY_SIZE, u64::MAX) < key(1, 0, 0));
        assert!(key(2, 5 * 512, 1) < key(2, 5 * 512, 2));
    }

    proptest! {
        /// The set answers exactly as a BTreeMap would, across spills and unspills.
        #[test]
        fn behaves_like_a_btreemap(ops in prop::collection::vec((0u8..4, 0u32..3, 0u64..40, 0u64..8), 1..400)) {
            let mut set = FreeSet::default();
            let mut model = BTreeMap::new();
            for (i, (op, stream, size, addr)) in ops.into_iter().enumerate() {
                let k = key(stream, size * 512, addr);
                match op {
                    0 | 1 => {
                        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(k) {
                            e.insert(i as u32);
                            set.insert(k, i as u32);
                        }
                    }
                    2 => prop_assert_eq!(set.remove(k), model.remove(&k)),
                    _ => {
                        prop_assert_eq!(set.first_from(k), model.range(k..).next().map(|(&a, &b)| (a, b)));
                        prop_assert_eq!(set.last_before(k), model.range(..k).next_back().map(|(&a, &b)| (a, b)));
                        prop_assert_eq!(set.first_after(k), model.range(k + 1..).next().map(|(&a, &b)| (a, b)));
                    }
                }
                prop_assert_eq!(set.len(), model.len());
            }
            prop_assert_eq!(set.ids(), model.values().copied().collect::<Vec<_>>());
        }
    }
}
