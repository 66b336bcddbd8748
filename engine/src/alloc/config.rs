//! The allocator's configuration, read from the same string syntax as
//! `PYTORCH_CUDA_ALLOC_CONF` (`c10/cuda/CUDAAllocatorConfig.cpp`).

use serde::{Deserialize, Serialize};

use super::consts::{LARGE_BUFFER, MIN_BLOCK_SIZE, MIB};

/// Number of `roundup_power2_divisions` buckets: bucket `i` covers
/// `[2^i MiB, 2^(i+1) MiB)`, sizes below 2 MiB fall in bucket 0, sizes past the
/// last bucket in bucket 15.
pub const ROUNDUP_BUCKETS: usize = 16;

/// The caching allocator's settings. [`Default`] is PyTorch's default: no
/// max_split_size, no power-of-two rounding, no garbage collection, no expandable
/// segments, no memory fraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorConfig {
    /// Blocks of at least this size are never split ("oversize"); `None` is unlimited.
    pub max_split_size: Option<u64>,
    /// A request at or above `max_split_size` only takes a free block smaller than
    /// request + this (`max_non_split_rounding_mb`, default 20 MiB).
    pub max_non_split_rounding: u64,
    /// Divisions per power-of-two interval, per bucket (0 or 1: plain 512-byte rounding).
    pub roundup_power2_divisions: [u64; ROUNDUP_BUCKETS],
    /// Fraction (0, 1) of the allowed memory above which cached blocks are reclaimed;
    /// acts only together with a memory fraction below 1.
    pub garbage_collection_threshold: Option<f64>,
    /// One growing segment per (stream, pool), mapped page by page.
    pub expandable_segments: bool,
    /// Share of the device's memory this process may reserve; acts only below 1.
    pub per_process_memory_fraction: Option<f64>,
    /// Segment size for large requests below 10 MiB (`large_segment_size_mb`, 20 MiB).
    pub large_segment_size: u64,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_BUCKETS],
            garbage_collection_threshold: None,
            expandable_segments: false,
            per_process_memory_fraction: None,
            large_segment_size: LARGE_BUFFER,
        }
    }
}

impl AllocatorConfig {
    /// `max_split_size` with "unlimited" as `u64::MAX`, the form the comparisons use.
    #[inline]
    pub fn max_split_size_bytes(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }

    /// The divisions configured for a request of `size` bytes
    /// (`CUDAAllocatorConfig::roundup_power2_divisions(size)`).
    #[inline]
    pub fn roundup_divisions_for(&self, size: u64) -> u64 {
        let log_size = 63 - size.max(1).leading_zeros() as i64;
        let index = (log_size - 20).clamp(0, ROUNDUP_BUCKETS as i64 - 1) as usize;
        self.roundup_power2_divisions[index]
    }

    /// The size a request is rounded to before the pools are searched
    /// (`DeviceCachingAllocator::round_size`).
    #[inline]
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let divisions = self.roundup_divisions_for(size);
        if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
        }
    }

    /// The memory fraction when it is below 1 (the only case in which it acts).
    #[inline]
    pub fn effective_memory_fraction(&self) -> Option<f64> {
        self.per_process_memory_fraction.filter(|f| *f < 1.0)
    }
}

/// Rounds `size` up to the next of `divisions` equal steps between the powers of
/// two around it; a power of two stays itself. `divisions` that are not powers of
/// two act as the power of two below them, as in PyTorch.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let power2_floor = 1u64 << (63 - size.leading_zeros());
    let power2_division = power2_floor >> (63 - divisions.leading_zeros());
    if power2_division == 0 {
        return power2_floor << 1;
    }
    let floor = size & !(power2_division - 1);
    if floor == size { size } else { floor + power2_division }
}

/// Bytes in `mb` mebibytes, as PyTorch reads the `_mb` keys.
#[cfg(test)]
pub(crate) const fn mb(mb: u64) -> u64 {
    mb * MIB
}

#[cfg(test)]
mod rounding_tests {
    use super::*;

    fn with_divisions(d: u64) -> AllocatorConfig {
        AllocatorConfig { roundup_power2_divisions: [d; ROUNDUP_BUCKETS], ..Default::default() }
    }

    #[test]
    fn default_rounding_is_512_multiples() {
        let c = AllocatorConfig::default();
        assert_eq!(c.round_size(0), 512);
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(512), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(11_534_337), 11_534_848);
    }

    #[test]
    fn power2_divisions_known_answers() {
        let c = with_divisions(4);
        assert_eq!(c.round_size(5000), 5120);
        assert_eq!(c.round_size(3 * mb(1) + 1), 3 * mb(1) + mb(1) / 2);
        assert_eq!(c.round_size(1200), 1536, "1200 is not above 512 × 4: plain rounding");
        assert_eq!(c.round_size(4096), 4096, "a power of two stays itself");
        assert_eq!(c.round_size(2049), 2560);
        assert_eq!(with_divisions(1).round_size(5000), 5120, "1 changes nothing");
        assert_eq!(with_divisions(1).round_size(5121), 5632);
    }

    #[test]
    fn bucket_index() {
        let mut c = AllocatorConfig::default();
        c.roundup_power2_divisions[0] = 8;
        c.roundup_power2_divisions[1] = 2;
        c.roundup_power2_divisions[15] = 4;
        assert_eq!(c.roundup_divisions_for(1), 8);
        assert_eq!(c.roundup_divisions_for(2 * mb(1) - 1), 8);
        assert_eq!(c.roundup_divisions_for(2 * mb(1)), 2);
        assert_eq!(c.roundup_divisions_for(4 * mb(1) - 1), 2);
        assert_eq!(c.roundup_divisions_for(1 << 60), 4);
    }
}

/// A configuration string that could not be read. Every variant names the key
/// (and the value) at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown allocator option '{key}' (known: {known})")]
    UnknownKey { key: String, known: &'static str },
    #[error("allocator option '{key}': bad value '{value}': {reason}")]
    BadValue { key: String, value: String, reason: String },
    #[error("allocator config '{config}': {reason}")]
    Syntax { config: String, reason: String },
}

impl AllocatorConfig {
    /// Checks the invariants PyTorch enforces when it parses a config, for
    /// configurations built in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, value: String, reason: &str| {
            Err(ConfigError::BadValue { key: key.into(), value, reason: reason.into() })
        };
        if let Some(m) = self.max_split_size
            && m <= self.large_segment_size
        {
            return bad(
                "max_split_size_mb",
                (m / MIB).to_string(),
                &format!("must be greater than the large segment size ({} MiB)", self.large_segment_size / MIB),
            );
        }
        if let Some(t) = self.garbage_collection_threshold
            && !(t > 0.0 && t < 1.0)
        {
            return bad("garbage_collection_threshold", t.to_string(), "must lie strictly between 0 and 1");
        }
        if let Some(f) = self.per_process_memory_fraction
            && !(0.0..=1.0).contains(&f)
        {
            return bad("per_process_memory_fraction", f.to_string(), "must lie between 0 and 1");
        }
        if let Some(d) = self.roundup_power2_divisions.iter().find(|d| **d != 0 && !d.is_power_of_two()) {
            return bad("roundup_power2_divisions", d.to_string(), "divisions must be a power of two (or 0)");
        }
        if self.large_segment_size == 0 || self.large_segment_size % (2 * MIB) != 0 {
            return bad(
                "large_segment_size_mb",
                (self.large_segment_size / MIB).to_string(),
                "must be a positive multiple of 2 MiB",
            );
        }
        Ok(())
    }
}
