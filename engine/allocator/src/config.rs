//! The allocator's configuration, read from and written in the same string syntax as
//! `PYTORCH_CUDA_ALLOC_CONF` (`c10/core/AllocatorConfig.cpp` and
//! `c10/cuda/CUDAAllocatorConfig.cpp`; see the notes above [`AllocatorConfig::parse`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::consts::{LARGE_BUFFER, MIB, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC};

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
    #[error("Unrecognized key '{key}' in CUDA allocator config. (vramlab knows: {known})")]
    UnknownKey { key: String, known: &'static str },
    #[error("allocator option '{key}': bad value '{value}': {reason}")]
    BadValue { key: String, value: String, reason: String },
    #[error("allocator config '{config}': {reason}")]
    Syntax { config: String, reason: String },
}

impl AllocatorConfig {
    /// Checks the invariants PyTorch enforces when it parses a config, for
    /// configurations built in code. The configurations that pass are exactly the
    /// ones a config string can produce, so `parse(&cfg.to_string()) == cfg` holds
    /// for each of them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad =
            |key: &str, value: String, reason: String| Err(ConfigError::BadValue { key: key.into(), value, reason });
        let large = self.large_segment_size;
        if large <= MIN_LARGE_ALLOC || !large.is_multiple_of(MIB) {
            return bad(
                "large_segment_size_mb",
                mib_text(large),
                format!("must be a whole number of MiB greater than {}", MIN_LARGE_ALLOC / MIB),
            );
        }
        for (key, bytes) in [
            ("max_split_size_mb", self.max_split_size),
            ("max_non_split_rounding_mb", Some(self.max_non_split_rounding)),
        ] {
            let Some(bytes) = bytes else { continue };
            if bytes % MIB != 0 {
                return bad(key, mib_text(bytes), "must be a whole number of MiB".into());
            }
            if bytes < large {
                return bad(key, mib_text(bytes), too_small(key, large / MIB));
            }
        }
        if let Some(t) = self.garbage_collection_threshold
            && !(t > 0.0 && t < 1.0)
        {
            return bad("garbage_collection_threshold", t.to_string(), GC_THRESHOLD_INVALID.into());
        }
        if let Some(f) = self.per_process_memory_fraction
            && !(0.0..=1.0).contains(&f)
        {
            return bad("per_process_memory_fraction", f.to_string(), PER_PROCESS_FRACTION_INVALID.into());
        }
        if let Some(d) = self.roundup_power2_divisions.iter().find(|d| **d != 0 && !d.is_power_of_two()) {
            return bad("roundup_power2_divisions", d.to_string(), ROUNDUP_DIVISIONS_IN_LIST.into());
        }
        Ok(())
    }
}

/// `bytes` as the `_mb` keys spell it: a count of MiB, or bytes where it is not whole.
fn mib_text(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) { (bytes / MIB).to_string() } else { format!("{bytes} bytes") }
}

// ---------------------------------------------------------------------------------------------
// Reading and writing the `PYTORCH_CUDA_ALLOC_CONF` syntax.
//
// Followed: PyTorch 2.9–2.11, where the common keys are read by
// `AcceleratorAllocatorConfig::parseArgs` (`c10/core/AllocatorConfig.cpp`, tokens from
// `ConfigTokenizer` in `c10/core/AllocatorConfig.h`) and the CUDA-only keys by
// `CUDAAllocatorConfig::parseArgs` (`c10/cuda/CUDAAllocatorConfig.cpp`). What we took from them:
//
// - Tokens: each of `,` `:` `[` `]` is a token of its own; every other run of characters is one
//   word, and whitespace (C `isspace`) is dropped wherever it stands, even inside a word
//   (`max_split_size_mb: 1 28` reads as 128). An empty (or all-blank) string is the default.
// - `key:value` pairs separated by `,`. One trailing `,` is accepted (`parseArgs` only checks for
//   a comma when another token follows; PyTorch's own test uses `expandable_segments:False,`);
//   an empty entry (leading `,` or `,,`) is an error (PyTorch: "Unrecognized key ','").
// - An unknown key is an error ("Unrecognized key '…' in CUDA allocator config").
// - `large_segment_size_mb` is read in a pass of its own before every other key, must be greater
//   than 10 (`kMinLargeAlloc`), and then `max_non_split_rounding` is reset to the large segment
//   size: its default follows `large_segment_size_mb`.
// - `max_split_size_mb` and `max_non_split_rounding_mb` must be at least the large segment size in
//   MiB (`>=`: PyTorch up to 2.8 required `> 20`; from the move to `AcceleratorAllocatorConfig`
//   the check is `val_env >= min_allowed_split_size_mb`, and PyTorch's test sets
//   `large_segment_size_mb:15,max_split_size_mb:20`). Both are clamped to `SIZE_MAX / 1 MiB` MiB.
//   Because the large segment size is read first, `max_split_size_mb:20,large_segment_size_mb:25`
//   fails whatever the order.
// - `garbage_collection_threshold` in (0, 1), exclusive; `per_process_memory_fraction` in
//   [0, 1], inclusive; booleans are exactly `True` or `False` (`ConfigTokenizer::toBool`).
// - `roundup_power2_divisions`: a single number (a power of two, 0 refused) fills all 16
//   buckets; a list `[a:x,b:y,>:z]` works on the current buckets, item by item: an interval `a`
//   (MB, a power of two) selects bucket `log2(a)` clamped to 0..=15; the first interval also
//   fills every bucket below its own; divisions must be a power of two or 0; `>` fills from
//   `last_index + 1` to the end, i.e. EXCLUSIVE of the last interval given before it, which
//   keeps its own value (`last_index` starts at 0, so a leading `>` fills buckets 1..=15 and
//   leaves bucket 0; a later interval is then still "first" and fills the buckets below it).
//   PyTorch's test: `[128:8,256:16,512:1,2048:8,>:2]` gives 1024 MB → 0, 2048 MB → 8,
//   4096 MB → 2. (The older parser in `CUDAAllocatorConfig.cpp`, before the move to
//   `AcceleratorAllocatorConfig`, i.e. up to about 2.8, filled from `last_index` inclusive,
//   overwriting the last interval with the `>` value.) A trailing `,`
//   inside the list is accepted, an empty list changes nothing, and a second
//   `roundup_power2_divisions` list in one string works on the buckets the first one left.
// - `backend`: `native` or `cudaMallocAsync`; vramlab models only `native`.
// - Accepted and checked but without effect on this model: `release_lock_on_cudamalloc`,
//   `pinned_use_cuda_host_register` (and their `hip` spellings), `pinned_use_background_threads`,
//   `graph_capture_record_stream_reuse` (booleans), `pinned_num_register_threads` (a power of two,
//   at most 128 = `pinned_max_register_threads()`), `pinned_reserve_segment_size_mb` (> 0).
// - Later keys override earlier ones.
// - `validate()` holds configurations built in code to the same rules; in particular the large
//   segment size is any whole number of MiB above 10, as in PyTorch (whose test uses 15), not
//   only multiples of 2 MiB.
//
// Where vramlab is stricter than PyTorch: PyTorch's `checkToken` returns a bool that `parseArgs`
// ignores, so a missing `:` or `,` slips through there; here it is an error. Numbers must be the
// whole word (`std::stoull`/`std::stod` accept `128abc` as 128 and wrap `-1` around); floats use
// Rust's syntax (`1e-3`, `.5`; no hex floats).
// ---------------------------------------------------------------------------------------------

/// The option names [`AllocatorConfig::parse`] accepts, as [`ConfigError::UnknownKey`] lists them.
const KNOWN_KEYS: &str = "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, \
     garbage_collection_threshold, expandable_segments, per_process_memory_fraction, large_segment_size_mb, \
     backend, release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_num_register_threads, \
     pinned_use_background_threads, pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse, \
     release_lock_on_hipmalloc, pinned_use_hip_host_register";

/// `pinned_max_register_threads()` in `CUDAAllocatorConfig.h`.
const PINNED_MAX_REGISTER_THREADS: u64 = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    MaxSplitSize,
    MaxNonSplitRounding,
    RoundupPower2Divisions,
    GarbageCollectionThreshold,
    ExpandableSegments,
    PerProcessMemoryFraction,
    LargeSegmentSize,
    Backend,
    ReleaseLockOnMalloc,
    PinnedUseHostRegister,
    PinnedNumRegisterThreads,
    PinnedUseBackgroundThreads,
    PinnedReserveSegmentSize,
    GraphCaptureRecordStreamReuse,
}

impl Key {
    fn from_name(name: &str) -> Option<Key> {
        Some(match name {
            "max_split_size_mb" => Key::MaxSplitSize,
            "max_non_split_rounding_mb" => Key::MaxNonSplitRounding,
            "roundup_power2_divisions" => Key::RoundupPower2Divisions,
            "garbage_collection_threshold" => Key::GarbageCollectionThreshold,
            "expandable_segments" => Key::ExpandableSegments,
            "per_process_memory_fraction" => Key::PerProcessMemoryFraction,
            "large_segment_size_mb" => Key::LargeSegmentSize,
            "backend" => Key::Backend,
            "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => Key::ReleaseLockOnMalloc,
            "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => Key::PinnedUseHostRegister,
            "pinned_num_register_threads" => Key::PinnedNumRegisterThreads,
            "pinned_use_background_threads" => Key::PinnedUseBackgroundThreads,
            "pinned_reserve_segment_size_mb" => Key::PinnedReserveSegmentSize,
            "graph_capture_record_stream_reuse" => Key::GraphCaptureRecordStreamReuse,
            _ => return None,
        })
    }
}

/// A token of the config string (`ConfigTokenizer`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Colon,
    Comma,
    Open,
    Close,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => f.write_str(w),
            Token::Colon => f.write_str(":"),
            Token::Comma => f.write_str(","),
            Token::Open => f.write_str("["),
            Token::Close => f.write_str("]"),
        }
    }
}

/// Whitespace as C's `isspace` sees it in the "C" locale.
fn is_c_space(ch: char) -> bool {
    matches!(ch, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

fn tokenize(s: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for ch in s.chars() {
        let punct = match ch {
            ':' => Token::Colon,
            ',' => Token::Comma,
            '[' => Token::Open,
            ']' => Token::Close,
            _ => {
                if !is_c_space(ch) {
                    word.push(ch);
                }
                continue;
            }
        };
        if !word.is_empty() {
            tokens.push(Token::Word(std::mem::take(&mut word)));
        }
        tokens.push(punct);
    }
    if !word.is_empty() {
        tokens.push(Token::Word(word));
    }
    tokens
}

// PyTorch's own texts for the refusals it words (`c10/core/AllocatorConfig.cpp` at
// pytorch/pytorch commit 0ac716637f, `c10/cuda/CUDAAllocatorConfig.cpp` as stored at
// 01f9ef32ea), without their trailing spaces; vramlab puts the key and the value
// in front ("allocator option 'k': bad value 'v': …").

/// `parseGarbageCollectionThreshold`'s refusal (PyTorch's text says
/// "garbage_collect_threshold").
const GC_THRESHOLD_INVALID: &str = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
/// `CUDAAllocatorConfig::parsePerProcessMemoryFraction`'s refusal.
const PER_PROCESS_FRACTION_INVALID: &str = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]";
/// `parseRoundUpPower2Divisions`: a single number that is not a power of two.
const ROUNDUP_DIVISIONS: &str = "For roundups, the divisions has to be power of 2";
/// … a list value that is neither a power of two nor 0.
const ROUNDUP_DIVISIONS_IN_LIST: &str = "For roundups, the divisions has to be power of 2 or 0 to disable roundup";
/// … a list interval that is not a power of two.
const ROUNDUP_INTERVALS: &str = "For roundups, the intervals have to be power of 2";

/// `parseMaxSplitSize` / `parseMaxNonSplitRoundingSize`: below the smallest
/// allowed number of MiB (the large segment size, 20 by default).
fn too_small(key: &str, min_mb: u64) -> String {
    format!("CachingAllocator option {key} too small, must be >= {min_mb}")
}

/// An option's value: one word, or the tokens between `[` and `]`.
#[derive(Debug)]
enum Value {
    Scalar(String),
    List(Vec<Token>),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Scalar(s) => s.clone(),
            Value::List(tokens) => format!("[{}]", tokens.iter().map(ToString::to_string).collect::<String>()),
        }
    }
}

/// One `key:value` of the config string; `name` is the key as written.
#[derive(Debug)]
struct Entry {
    key: Key,
    name: String,
    value: Value,
    /// The value's index among the string's tokens (`ConfigTokenizer`'s `i`,
    /// which PyTorch's messages quote).
    index: usize,
}

impl Entry {
    fn bad_value(&self, value: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError::BadValue { key: self.name.clone(), value: value.into(), reason: reason.into() }
    }

    fn bad(&self, reason: impl Into<String>) -> ConfigError {
        self.bad_value(self.value.text(), reason)
    }

    /// The single-word value; `expected` describes it for the error.
    fn scalar(&self, expected: &str) -> Result<&str, ConfigError> {
        match &self.value {
            Value::Scalar(s) => Ok(s),
            Value::List(_) => Err(self.bad(format!("expected {expected}, not a list"))),
        }
    }

    /// A whole number (`ConfigTokenizer::toSizeT`, `std::stoull`, whose own
    /// message is the bare word "stoull").
    fn whole(&self, expected: &str) -> Result<u64, ConfigError> {
        let s = self.scalar(expected)?;
        parse_whole(s)
            .map_err(|why| self.bad(format!("expected {expected}{why} (PyTorch: std::stoull fails, \"stoull\")")))
    }

    /// A float (`ConfigTokenizer::toDouble`, `std::stod`: "stod").
    fn number(&self, expected: &str) -> Result<f64, ConfigError> {
        let s = self.scalar(expected)?;
        s.parse::<f64>().map_err(|_| self.bad(format!("expected {expected} (PyTorch: std::stod fails, \"stod\")")))
    }

    /// `True` or `False` (`ConfigTokenizer::toBool`), refused in its words.
    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.scalar("True or False")? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => Err(self.bad(format!(
                "Expected 'True' or 'False' at index {} in ConfigTokenizer but got '{other}'",
                self.index
            ))),
        }
    }
}

/// A whole number as `std::stoull` reads one, but the whole word must be digits. The error
/// is a suffix for "expected …".
fn parse_whole(s: &str) -> Result<u64, &'static str> {
    s.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => " below 2^64",
        _ => "",
    })
}

/// Splits the tokens into `key:value` entries, checking the syntax and the key names.
fn split_entries(config: &str, tokens: Vec<Token>) -> Result<Vec<Entry>, ConfigError> {
    let syntax = |reason: String| ConfigError::Syntax { config: config.to_owned(), reason };
    let mut entries = Vec::new();
    let mut tokens = tokens.into_iter().enumerate().peekable();
    while let Some((_, token)) = tokens.next() {
        let name = match token {
            Token::Word(w) => w,
            other => {
                return Err(syntax(format!("expected an option name (such as max_split_size_mb), found '{other}'")));
            }
        };
        let Some(key) = Key::from_name(&name) else {
            return Err(ConfigError::UnknownKey { key: name, known: KNOWN_KEYS });
        };
        match tokens.next().map(|(_, t)| t) {
            Some(Token::Colon) => {}
            Some(other) => {
                return Err(syntax(format!("option '{name}' must be followed by ':' and its value, found '{other}'")));
            }
            None => return Err(syntax(format!("option '{name}' must be followed by ':' and its value"))),
        }
        let index = tokens.peek().map_or(0, |(i, _)| *i);
        let value = match tokens.next().map(|(_, t)| t) {
            Some(Token::Word(w)) => Value::Scalar(w),
            Some(Token::Open) => {
                let mut items = Vec::new();
                loop {
                    match tokens.next().map(|(_, t)| t) {
                        Some(Token::Close) => break,
                        Some(t) => items.push(t),
                        None => return Err(syntax(format!("the '[' of option '{name}' is never closed by ']'"))),
                    }
                }
                Value::List(items)
            }
            Some(other) => return Err(syntax(format!("option '{name}' has no value: found '{other}' after ':'"))),
            None => return Err(syntax(format!("option '{name}' has no value after ':'"))),
        };
        match tokens.next().map(|(_, t)| t) {
            None | Some(Token::Comma) => {}
            Some(other) => {
                return Err(syntax(format!("expected ',' after the value of option '{name}', found '{other}'")));
            }
        }
        entries.push(Entry { key, name, value, index });
    }
    Ok(entries)
}

/// `mb` MiB in bytes, clamped as PyTorch clamps the `_mb` keys (`SIZE_MAX / 1 MiB`).
fn mib_bytes(mb: u64) -> u64 {
    mb.min(u64::MAX / MIB) * MIB
}

impl AllocatorConfig {
    /// Reads a configuration in `PYTORCH_CUDA_ALLOC_CONF` syntax, e.g.
    /// `max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True`.
    /// Starts from [`Default`], applies the keys in order (`large_segment_size_mb` first, as
    /// PyTorch does), then [`validate`](Self::validate)s. An empty string is the default.
    pub fn parse(s: &str) -> Result<AllocatorConfig, ConfigError> {
        let entries = split_entries(s, tokenize(s))?;
        let mut cfg = AllocatorConfig::default();
        for entry in entries.iter().filter(|e| e.key == Key::LargeSegmentSize) {
            cfg.apply(entry)?;
        }
        cfg.max_non_split_rounding = cfg.large_segment_size;
        for entry in entries.iter().filter(|e| e.key != Key::LargeSegmentSize) {
            cfg.apply(entry)?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// `torch.cuda.memory._set_allocator_settings(s)` on a running allocator whose
    /// configuration is `self`: as `AcceleratorAllocatorConfig::parseArgs` (PyTorch
    /// 2.9–2.11, pytorch/pytorch commit 0ac716637f), `max_split_size_mb`,
    /// `roundup_power2_divisions` and `garbage_collection_threshold` go back to their
    /// defaults unless `s` sets them; every other key keeps its value unless `s` sets
    /// it. The keys are read and checked as [`parse`](Self::parse) reads them.
    pub fn with_settings(&self, s: &str) -> Result<AllocatorConfig, ConfigError> {
        let entries = split_entries(s, tokenize(s))?;
        let mut cfg = AllocatorConfig {
            max_split_size: None,
            roundup_power2_divisions: [0; ROUNDUP_BUCKETS],
            garbage_collection_threshold: None,
            ..self.clone()
        };
        for entry in entries.iter().filter(|e| e.key == Key::LargeSegmentSize) {
            cfg.apply(entry)?;
            cfg.max_non_split_rounding = cfg.large_segment_size;
        }
        for entry in entries.iter().filter(|e| e.key != Key::LargeSegmentSize) {
            cfg.apply(entry)?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn apply(&mut self, e: &Entry) -> Result<(), ConfigError> {
        const MIB_COUNT: &str = "a whole number of MiB";
        match e.key {
            Key::LargeSegmentSize => {
                let mb = e.whole(MIB_COUNT)?;
                let min = MIN_LARGE_ALLOC / MIB;
                if mb <= min {
                    return Err(e.bad(format!("must be greater than {min} MiB (the smallest large allocation)")));
                }
                self.large_segment_size = mib_bytes(mb);
            }
            Key::MaxSplitSize | Key::MaxNonSplitRounding => {
                let mb = e.whole(MIB_COUNT)?;
                let min = self.large_segment_size / MIB;
                if mb < min {
                    return Err(e.bad(too_small(&e.name, min)));
                }
                if e.key == Key::MaxSplitSize {
                    self.max_split_size = Some(mib_bytes(mb));
                } else {
                    self.max_non_split_rounding = mib_bytes(mb);
                }
            }
            Key::GarbageCollectionThreshold => {
                let t = e.number("a number strictly between 0 and 1")?;
                if !(t > 0.0 && t < 1.0) {
                    return Err(e.bad(GC_THRESHOLD_INVALID));
                }
                self.garbage_collection_threshold = Some(t);
            }
            Key::PerProcessMemoryFraction => {
                let f = e.number("a number between 0 and 1")?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(e.bad(PER_PROCESS_FRACTION_INVALID));
                }
                self.per_process_memory_fraction = Some(f);
            }
            Key::ExpandableSegments => self.expandable_segments = e.boolean()?,
            Key::RoundupPower2Divisions => self.apply_roundup(e)?,
            Key::Backend => match e.scalar("'native'")? {
                "native" => {}
                "cudaMallocAsync" | "hipMallocAsync" => {
                    return Err(e.bad(
                        "the cudaMallocAsync backend is not modelled by vramlab: only 'native' (PyTorch's \
                         caching allocator) is; leave the key out or write backend:native",
                    ));
                }
                _ => return Err(e.bad("Unknown allocator backend, options are native and cudaMallocAsync")),
            },
            Key::ReleaseLockOnMalloc
            | Key::PinnedUseHostRegister
            | Key::PinnedUseBackgroundThreads
            | Key::GraphCaptureRecordStreamReuse => {
                e.boolean()?;
            }
            Key::PinnedNumRegisterThreads => {
                let n = e.whole("a whole number of threads")?;
                if !n.is_power_of_two() {
                    return Err(e.bad(format!("Number of register threads has to be power of 2, got {n}")));
                }
                if n > PINNED_MAX_REGISTER_THREADS {
                    return Err(e.bad(format!(
                        "Number of register threads should be less than or equal to {PINNED_MAX_REGISTER_THREADS}, \
                         got {n}"
                    )));
                }
            }
            Key::PinnedReserveSegmentSize => {
                if e.whole(MIB_COUNT)? == 0 {
                    return Err(e.bad("Pinned reserve segment size has to be greater than 0"));
                }
            }
        }
        Ok(())
    }

    /// `roundup_power2_divisions`, exactly as `parseRoundUpPower2Divisions` fills the buckets.
    fn apply_roundup(&mut self, e: &Entry) -> Result<(), ConfigError> {
        let tokens = match &e.value {
            Value::Scalar(s) => {
                let d = parse_whole(s).map_err(|why| {
                    e.bad(format!(
                        "expected a power of two number of divisions{why}, or a list such as [64:8,128:2,>:1]"
                    ))
                })?;
                if !d.is_power_of_two() {
                    return Err(e.bad(format!("{ROUNDUP_DIVISIONS} (0 is allowed only in a list)")));
                }
                self.roundup_power2_divisions = [d; ROUNDUP_BUCKETS];
                return Ok(());
            }
            Value::List(tokens) => tokens,
        };
        const ITEM: &str = "expected items '<interval in MB>:<divisions>' or '>:<divisions>' separated by ','";
        let divisions = &mut self.roundup_power2_divisions;
        let mut first = true;
        let mut last_index = 0usize;
        let mut i = 0;
        while i < tokens.len() {
            let Token::Word(interval) = &tokens[i] else {
                return Err(e.bad(format!("{ITEM}, found '{}'", tokens[i])));
            };
            if tokens.get(i + 1) != Some(&Token::Colon) {
                return Err(e.bad(format!("{ITEM}: interval '{interval}' has no ':<divisions>'")));
            }
            let Some(Token::Word(value)) = tokens.get(i + 2) else {
                return Err(e.bad(format!("{ITEM}: interval '{interval}' has no number of divisions")));
            };
            let d = parse_whole(value).map_err(|why| {
                e.bad_value(
                    value,
                    format!("expected a number of divisions{why} (a power of two, or 0) for interval '{interval}'"),
                )
            })?;
            if d != 0 && !d.is_power_of_two() {
                return Err(e.bad_value(value, ROUNDUP_DIVISIONS_IN_LIST));
            }
            if interval == ">" {
                divisions[(last_index + 1).min(ROUNDUP_BUCKETS)..].fill(d);
            } else {
                let mb = parse_whole(interval).map_err(|why| {
                    e.bad_value(interval, format!("expected an interval size in MB{why} (a power of two) or '>'"))
                })?;
                if !mb.is_power_of_two() {
                    return Err(e.bad_value(interval, ROUNDUP_INTERVALS));
                }
                let index = (mb.ilog2() as usize).min(ROUNDUP_BUCKETS - 1);
                if first {
                    divisions[..index].fill(d);
                    first = false;
                }
                divisions[index] = d;
                last_index = index;
            }
            i += 3;
            match tokens.get(i) {
                None => {}
                Some(Token::Comma) => i += 1,
                Some(other) => return Err(e.bad(format!("{ITEM}, found '{other}' after interval '{interval}'"))),
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for AllocatorConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<AllocatorConfig, ConfigError> {
        AllocatorConfig::parse(s)
    }
}

/// The canonical list form of the buckets: `None` when all are 0 (the default); one number
/// when all are equal; otherwise the first interval at the end of the leading run (it also
/// fills the buckets below), the buckets that differ from 0 after it, and a `>` item for a
/// nonzero run at the end (preceded by the bucket just before that run, so that `>` starts
/// right after it).
fn roundup_text(d: &[u64; ROUNDUP_BUCKETS]) -> Option<String> {
    if d.iter().all(|&x| x == 0) {
        return None;
    }
    if d.iter().all(|&x| x == d[0]) {
        return Some(d[0].to_string());
    }
    let first = d.iter().take_while(|&&x| x == d[0]).count() - 1;
    let tail = d[ROUNDUP_BUCKETS - 1];
    let tail_start =
        if tail == 0 { ROUNDUP_BUCKETS } else { ROUNDUP_BUCKETS - d.iter().rev().take_while(|&&x| x == tail).count() };
    let mut items = vec![format!("{}:{}", 1u64 << first, d[0])];
    for (i, &x) in d.iter().enumerate().take(tail_start).skip(first + 1) {
        if x != 0 || (tail != 0 && i + 1 == tail_start) {
            items.push(format!("{}:{x}", 1u64 << i));
        }
    }
    if tail != 0 {
        items.push(format!(">:{tail}"));
    }
    Some(format!("[{}]", items.join(",")))
}

impl fmt::Display for AllocatorConfig {
    /// The canonical config string: only the keys that differ from the default, in PyTorch's
    /// syntax (empty for the default config). For a configuration that passes
    /// [`validate`](AllocatorConfig::validate), [`AllocatorConfig::parse`] gives it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = Vec::new();
        if self.large_segment_size != LARGE_BUFFER {
            items.push(format!("large_segment_size_mb:{}", self.large_segment_size / MIB));
        }
        if let Some(m) = self.max_split_size {
            items.push(format!("max_split_size_mb:{}", m / MIB));
        }
        // Its default is the large segment size (parseArgs resets it so).
        if self.max_non_split_rounding != self.large_segment_size {
            items.push(format!("max_non_split_rounding_mb:{}", self.max_non_split_rounding / MIB));
        }
        if let Some(r) = roundup_text(&self.roundup_power2_divisions) {
            items.push(format!("roundup_power2_divisions:{r}"));
        }
        if let Some(t) = self.garbage_collection_threshold {
            items.push(format!("garbage_collection_threshold:{t}"));
        }
        if self.expandable_segments {
            items.push("expandable_segments:True".to_owned());
        }
        if let Some(p) = self.per_process_memory_fraction {
            items.push(format!("per_process_memory_fraction:{p}"));
        }
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;
    use proptest::prelude::*;

    fn with(f: impl FnOnce(&mut AllocatorConfig)) -> AllocatorConfig {
        let mut c = AllocatorConfig::default();
        f(&mut c);
        c
    }

    fn divs(d: [u64; ROUNDUP_BUCKETS]) -> AllocatorConfig {
        with(|c| c.roundup_power2_divisions = d)
    }

    /// Config strings and the configuration PyTorch 2.9–2.11 reads from them.
    fn known_answers() -> Vec<(&'static str, AllocatorConfig)> {
        let default = AllocatorConfig::default();
        vec![
            ("", default.clone()),
            (" \t\r\n ", default.clone()),
            // The example.
            (
                "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6,\
                 expandable_segments:True",
                with(|c| {
                    c.max_split_size = Some(mb(128));
                    c.roundup_power2_divisions = [1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8];
                    c.garbage_collection_threshold = Some(0.6);
                    c.expandable_segments = true;
                }),
            ),
            // PyTorch's c10/test/core/AllocatorConfig_test.cpp vectors.
            (
                "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,\
                 roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,\
                 pinned_use_background_threads:True",
                with(|c| {
                    c.max_split_size = Some(mb(40));
                    c.max_non_split_rounding = mb(30);
                    c.garbage_collection_threshold = Some(0.5);
                    c.roundup_power2_divisions = [8, 8, 8, 8, 8, 8, 8, 2, 4, 2, 4, 1, 1, 1, 1, 1];
                    c.expandable_segments = true;
                }),
            ),
            (
                "large_segment_size_mb:15,max_split_size_mb:20,max_non_split_rounding_mb:40,garbage_collection_threshold:0.8",
                with(|c| {
                    c.large_segment_size = mb(15);
                    c.max_split_size = Some(mb(20));
                    c.max_non_split_rounding = mb(40);
                    c.garbage_collection_threshold = Some(0.8);
                }),
            ),
            (
                "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
                divs([8, 8, 8, 8, 8, 8, 8, 8, 16, 1, 0, 8, 2, 2, 2, 2]),
            ),
            ("roundup_power2_divisions:4", divs([4; ROUNDUP_BUCKETS])),
            ("expandable_segments:False,", default.clone()),
            // `>` starts after the last interval given before it.
            ("roundup_power2_divisions:[1:4,2:2,>:1]", divs([4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])),
            ("roundup_power2_divisions:[64:8,>:0]", divs([8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
            // A leading `>` leaves bucket 0; the next interval is still the first one.
            ("roundup_power2_divisions:[>:4]", divs([0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4])),
            ("roundup_power2_divisions:[>:4,64:8]", divs([8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4])),
            // Out of order: `>` follows the last interval written, not the largest.
            ("roundup_power2_divisions:[512:2,64:8,>:1]", divs([2, 2, 2, 2, 2, 2, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1])),
            // Interval keys past 32768 MB clamp to the last bucket.
            ("roundup_power2_divisions:[65536:2]", divs([2; ROUNDUP_BUCKETS])),
            ("roundup_power2_divisions:[1:0,1099511627776:4]", divs([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4])),
            ("roundup_power2_divisions:[64:0,128:4]", divs([0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0])),
            ("roundup_power2_divisions:[64:8,]", divs([8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
            ("roundup_power2_divisions:[]", default.clone()),
            // A second list works on what the first left.
            (
                "roundup_power2_divisions:[64:8],roundup_power2_divisions:[256:2]",
                divs([2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0]),
            ),
            ("roundup_power2_divisions:[64:8],roundup_power2_divisions:1", divs([1; ROUNDUP_BUCKETS])),
            // Whitespace is dropped everywhere, even inside a word.
            (
                "  max_split_size_mb : 128 ,\texpandable_segments :\nTrue ",
                with(|c| {
                    c.max_split_size = Some(mb(128));
                    c.expandable_segments = true;
                }),
            ),
            ("max_split_size_mb:1 28", with(|c| c.max_split_size = Some(mb(128)))),
            ("roundup_power2_divisions: [ 64 : 8 , > : 2 ]", divs([8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2])),
            // max_split_size_mb may equal the large segment size; large_segment_size_mb is read first.
            ("max_split_size_mb:20", with(|c| c.max_split_size = Some(mb(20)))),
            (
                "max_split_size_mb:30,large_segment_size_mb:30",
                with(|c| {
                    c.large_segment_size = mb(30);
                    c.max_split_size = Some(mb(30));
                    c.max_non_split_rounding = mb(30);
                }),
            ),
            (
                "large_segment_size_mb:64",
                with(|c| {
                    c.large_segment_size = mb(64);
                    c.max_non_split_rounding = mb(64);
                }),
            ),
            ("max_non_split_rounding_mb:20", default.clone()),
            ("max_split_size_mb:128,max_split_size_mb:256", with(|c| c.max_split_size = Some(mb(256)))),
            ("max_split_size_mb:+0128", with(|c| c.max_split_size = Some(mb(128)))),
            ("max_split_size_mb:18446744073709551615", with(|c| c.max_split_size = Some(u64::MAX / MIB * MIB))),
            ("garbage_collection_threshold:.5", with(|c| c.garbage_collection_threshold = Some(0.5))),
            ("garbage_collection_threshold:1e-1", with(|c| c.garbage_collection_threshold = Some(0.1))),
            ("per_process_memory_fraction:0.5", with(|c| c.per_process_memory_fraction = Some(0.5))),
            ("per_process_memory_fraction:0", with(|c| c.per_process_memory_fraction = Some(0.0))),
            ("per_process_memory_fraction:1", with(|c| c.per_process_memory_fraction = Some(1.0))),
            ("expandable_segments:True,expandable_segments:False", default.clone()),
            ("backend:native", default.clone()),
            // Known to PyTorch, checked, no effect on this model.
            (
                "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False,pinned_num_register_threads:8,\
                 pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,\
                 graph_capture_record_stream_reuse:True,release_lock_on_hipmalloc:False,\
                 pinned_use_hip_host_register:True,pinned_num_register_threads:128",
                default.clone(),
            ),
        ]
    }

    #[test]
    fn known_answer_vectors() {
        for (input, want) in known_answers() {
            let got = AllocatorConfig::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(got, want, "{input:?}");
            let canonical = got.to_string();
            assert_eq!(AllocatorConfig::parse(&canonical).as_ref(), Ok(&got), "{input:?} → {canonical:?}");
        }
    }

    #[test]
    fn canonical_strings() {
        let cases = [
            (AllocatorConfig::default(), ""),
            (
                AllocatorConfig::parse(
                    "expandable_segments:True,garbage_collection_threshold:0.6,max_split_size_mb:128,\
                     roundup_power2_divisions:[256:1,512:2,>:8]",
                )
                .unwrap(),
                "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6,\
                 expandable_segments:True",
            ),
            (
                with(|c| {
                    c.max_split_size = Some(mb(128));
                    c.roundup_power2_divisions = [4, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
                    c.expandable_segments = true;
                }),
                "max_split_size_mb:128,roundup_power2_divisions:[1:4,2:2,>:1],expandable_segments:True",
            ),
            (divs([4; ROUNDUP_BUCKETS]), "roundup_power2_divisions:4"),
            (
                divs([8, 8, 8, 8, 8, 8, 8, 2, 4, 2, 4, 1, 1, 1, 1, 1]),
                "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
            ),
            (
                divs([8, 8, 8, 8, 8, 8, 8, 8, 16, 1, 0, 8, 2, 2, 2, 2]),
                "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
            ),
            // A zero just before the `>` run is written, so that `>` starts after it.
            (divs([8, 8, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]), "roundup_power2_divisions:[2:8,8:0,>:4]"),
            (divs([8, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), "roundup_power2_divisions:[2:8,32:4]"),
            (divs([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]), "roundup_power2_divisions:[16384:0,>:2]"),
            (divs([0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]), "roundup_power2_divisions:[1:0,>:4]"),
            (
                with(|c| {
                    c.large_segment_size = mb(30);
                    c.max_split_size = Some(mb(30));
                    c.max_non_split_rounding = mb(30);
                }),
                "large_segment_size_mb:30,max_split_size_mb:30",
            ),
            (with(|c| c.max_non_split_rounding = mb(40)), "max_non_split_rounding_mb:40"),
            (with(|c| c.per_process_memory_fraction = Some(0.25)), "per_process_memory_fraction:0.25"),
        ];
        for (cfg, want) in cases {
            assert_eq!(cfg.to_string(), want);
            assert_eq!(AllocatorConfig::parse(want).as_ref(), Ok(&cfg), "{want:?}");
        }
    }

    #[derive(Debug)]
    enum Want {
        /// `UnknownKey` for this key.
        Unknown(&'static str),
        /// `BadValue` for this key and value.
        Bad(&'static str, &'static str),
        /// `Syntax`.
        Syntax,
    }

    /// Every way a config string can be wrong, with words its message must contain.
    fn error_cases() -> Vec<(&'static str, Want, &'static [&'static str])> {
        use Want::*;
        vec![
            ("foo:1", Unknown("foo"), &[]),
            ("foo:1,bar:2", Unknown("foo"), &[]),
            ("expandable_segments:True,typo_key:[1,2]", Unknown("typo_key"), &[]),
            ("Max_split_size_mb:128", Unknown("Max_split_size_mb"), &[]),
            ("max_split_size:128", Unknown("max_split_size"), &[]),
            ("max_split_size_mb 128", Unknown("max_split_size_mb128"), &[]),
            ("max_split_size_mb=128", Unknown("max_split_size_mb=128"), &[]),
            ("throw_on_cudamalloc_oom:True", Unknown("throw_on_cudamalloc_oom"), &[]),
            ("max_split_size_mb", Syntax, &["'max_split_size_mb'", "':'"]),
            ("max_split_size_mb:", Syntax, &["'max_split_size_mb'", "no value"]),
            ("max_split_size_mb:,expandable_segments:True", Syntax, &["'max_split_size_mb'", "no value"]),
            ("expandable_segments::True", Syntax, &["'expandable_segments'", "no value"]),
            ("expandable_segments,True", Syntax, &["'expandable_segments'", "':'"]),
            (",expandable_segments:True", Syntax, &["option name", "','"]),
            ("expandable_segments:True,,max_split_size_mb:128", Syntax, &["option name"]),
            ("expandable_segments:True,,", Syntax, &["option name"]),
            (":", Syntax, &["option name"]),
            ("[", Syntax, &["option name"]),
            ("expandable_segments:True:False", Syntax, &["'expandable_segments'", "','"]),
            ("expandable_segments:True]", Syntax, &["'expandable_segments'", "','"]),
            ("roundup_power2_divisions:[64:8", Syntax, &["'roundup_power2_divisions'", "never closed"]),
            ("roundup_power2_divisions:[[64:8]]", Syntax, &["'roundup_power2_divisions'"]),
            ("max_split_size_mb:abc", Bad("max_split_size_mb", "abc"), &["expected a whole number of MiB"]),
            ("max_split_size_mb:-5", Bad("max_split_size_mb", "-5"), &["whole number"]),
            ("max_split_size_mb:12.5", Bad("max_split_size_mb", "12.5"), &["whole number"]),
            ("max_split_size_mb:128abc", Bad("max_split_size_mb", "128abc"), &["whole number"]),
            ("max_split_size_mb:99999999999999999999", Bad("max_split_size_mb", "99999999999999999999"), &["2^64"]),
            ("max_split_size_mb:19", Bad("max_split_size_mb", "19"), &["too small, must be >= 20"]),
            ("max_split_size_mb:0", Bad("max_split_size_mb", "0"), &["too small"]),
            ("max_split_size_mb:[128]", Bad("max_split_size_mb", "[128]"), &["not a list"]),
            ("large_segment_size_mb:25,max_split_size_mb:20", Bad("max_split_size_mb", "20"), &[">= 25"]),
            ("max_split_size_mb:20,large_segment_size_mb:25", Bad("max_split_size_mb", "20"), &[">= 25"]),
            (
                "max_non_split_rounding_mb:19",
                Bad("max_non_split_rounding_mb", "19"),
                &["CachingAllocator option max_non_split_rounding_mb too small, must be >= 20"],
            ),
            (
                "large_segment_size_mb:40,max_non_split_rounding_mb:30",
                Bad("max_non_split_rounding_mb", "30"),
                &[">= 40"],
            ),
            ("large_segment_size_mb:10", Bad("large_segment_size_mb", "10"), &["greater than 10"]),
            ("large_segment_size_mb:0", Bad("large_segment_size_mb", "0"), &["greater than 10"]),
            ("large_segment_size_mb:big", Bad("large_segment_size_mb", "big"), &["whole number"]),
            ("garbage_collection_threshold:0", Bad("garbage_collection_threshold", "0"), &[GC_THRESHOLD_INVALID]),
            ("garbage_collection_threshold:1", Bad("garbage_collection_threshold", "1"), &[GC_THRESHOLD_INVALID]),
            ("garbage_collection_threshold:1.2", Bad("garbage_collection_threshold", "1.2"), &["(0.0, 1.0)"]),
            ("garbage_collection_threshold:-0.1", Bad("garbage_collection_threshold", "-0.1"), &["(0.0, 1.0)"]),
            ("garbage_collection_threshold:nan", Bad("garbage_collection_threshold", "nan"), &["(0.0, 1.0)"]),
            ("garbage_collection_threshold:inf", Bad("garbage_collection_threshold", "inf"), &["(0.0, 1.0)"]),
            ("garbage_collection_threshold:abc", Bad("garbage_collection_threshold", "abc"), &["expected a number"]),
            ("per_process_memory_fraction:1.5", Bad("per_process_memory_fraction", "1.5"), &["set it in [0.0, 1.0]"]),
            ("per_process_memory_fraction:-0.1", Bad("per_process_memory_fraction", "-0.1"), &["set it in [0.0, 1.0]"]),
            ("per_process_memory_fraction:NaN", Bad("per_process_memory_fraction", "NaN"), &["set it in [0.0, 1.0]"]),
            ("per_process_memory_fraction:half", Bad("per_process_memory_fraction", "half"), &["expected a number"]),
            (
                "expandable_segments:true",
                Bad("expandable_segments", "true"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            ("expandable_segments:1", Bad("expandable_segments", "1"), &["Expected 'True' or 'False' at index 2"]),
            (
                "expandable_segments:TRUE",
                Bad("expandable_segments", "TRUE"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            ("expandable_segments:[True]", Bad("expandable_segments", "[True]"), &["not a list"]),
            ("roundup_power2_divisions:3", Bad("roundup_power2_divisions", "3"), &[ROUNDUP_DIVISIONS]),
            ("roundup_power2_divisions:0", Bad("roundup_power2_divisions", "0"), &[ROUNDUP_DIVISIONS, "list"]),
            ("roundup_power2_divisions:abc", Bad("roundup_power2_divisions", "abc"), &["power of two"]),
            ("roundup_power2_divisions:-4", Bad("roundup_power2_divisions", "-4"), &["power of two"]),
            ("roundup_power2_divisions:[64:3]", Bad("roundup_power2_divisions", "3"), &[ROUNDUP_DIVISIONS_IN_LIST]),
            ("roundup_power2_divisions:[>:3]", Bad("roundup_power2_divisions", "3"), &[ROUNDUP_DIVISIONS_IN_LIST]),
            ("roundup_power2_divisions:[100:4]", Bad("roundup_power2_divisions", "100"), &[ROUNDUP_INTERVALS]),
            ("roundup_power2_divisions:[0:4]", Bad("roundup_power2_divisions", "0"), &[ROUNDUP_INTERVALS]),
            ("roundup_power2_divisions:[abc:4]", Bad("roundup_power2_divisions", "abc"), &["interval size"]),
            ("roundup_power2_divisions:[64:abc]", Bad("roundup_power2_divisions", "abc"), &["'64'"]),
            ("roundup_power2_divisions:[64:-1]", Bad("roundup_power2_divisions", "-1"), &["number of divisions"]),
            ("roundup_power2_divisions:[64]", Bad("roundup_power2_divisions", "[64]"), &["'64'", "':<divisions>'"]),
            ("roundup_power2_divisions:[64:]", Bad("roundup_power2_divisions", "[64:]"), &["'64'"]),
            ("roundup_power2_divisions:[64:8:2]", Bad("roundup_power2_divisions", "[64:8:2]"), &["':'"]),
            ("roundup_power2_divisions:[64:8,,128:2]", Bad("roundup_power2_divisions", "[64:8,,128:2]"), &["','"]),
            ("roundup_power2_divisions:[,64:8]", Bad("roundup_power2_divisions", "[,64:8]"), &["','"]),
            ("backend:cudaMallocAsync", Bad("backend", "cudaMallocAsync"), &["not modelled", "native"]),
            ("backend:hipMallocAsync", Bad("backend", "hipMallocAsync"), &["not modelled"]),
            (
                "backend:foo",
                Bad("backend", "foo"),
                &["Unknown allocator backend, options are native and cudaMallocAsync"],
            ),
            (
                "release_lock_on_cudamalloc:yes",
                Bad("release_lock_on_cudamalloc", "yes"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            (
                "release_lock_on_hipmalloc:1",
                Bad("release_lock_on_hipmalloc", "1"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            (
                "pinned_use_cuda_host_register:true",
                Bad("pinned_use_cuda_host_register", "true"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            (
                "pinned_use_hip_host_register:no",
                Bad("pinned_use_hip_host_register", "no"),
                &["Expected 'True' or 'False' at index 2"],
            ),
            ("pinned_use_background_threads:False1", Bad("pinned_use_background_threads", "False1"), &["True"]),
            ("graph_capture_record_stream_reuse:on", Bad("graph_capture_record_stream_reuse", "on"), &["True"]),
            (
                "pinned_num_register_threads:3",
                Bad("pinned_num_register_threads", "3"),
                &["Number of register threads has to be power of 2, got 3"],
            ),
            (
                "pinned_num_register_threads:256",
                Bad("pinned_num_register_threads", "256"),
                &["Number of register threads should be less than or equal to 128, got 256"],
            ),
            ("pinned_num_register_threads:0", Bad("pinned_num_register_threads", "0"), &["has to be power of 2"]),
            ("pinned_num_register_threads:x", Bad("pinned_num_register_threads", "x"), &["number of threads"]),
            (
                "pinned_reserve_segment_size_mb:0",
                Bad("pinned_reserve_segment_size_mb", "0"),
                &["Pinned reserve segment size has to be greater than 0"],
            ),
            ("pinned_reserve_segment_size_mb:-1", Bad("pinned_reserve_segment_size_mb", "-1"), &["whole number"]),
            // The first bad key is the one reported.
            ("max_split_size_mb:128,expandable_segments:yes,foo:1", Unknown("foo"), &[]),
            ("max_split_size_mb:1,expandable_segments:yes", Bad("max_split_size_mb", "1"), &[]),
        ]
    }

    #[test]
    fn every_error_names_the_key_and_value() {
        for (input, want, words) in error_cases() {
            let err = AllocatorConfig::parse(input).expect_err(input);
            let msg = err.to_string();
            match (&want, &err) {
                (Want::Unknown(k), ConfigError::UnknownKey { key, known }) => {
                    assert_eq!(key, k, "{input:?}: {msg}");
                    assert_eq!(*known, KNOWN_KEYS);
                }
                (Want::Bad(k, v), ConfigError::BadValue { key, value, reason }) => {
                    assert_eq!((key.as_str(), value.as_str()), (*k, *v), "{input:?}: {msg}");
                    assert!(
                        [
                            "expected",
                            "must",
                            "not modelled",
                            "has to be",
                            "have to be",
                            "set it in",
                            "should be",
                            "options are",
                            "Expected"
                        ]
                        .iter()
                        .any(|w| reason.contains(w)),
                        "{input:?}: the reason should say what is expected: {msg}"
                    );
                }
                (Want::Syntax, ConfigError::Syntax { config, .. }) => assert_eq!(config, input),
                _ => panic!("{input:?}: wanted {want:?}, got {err:?}"),
            }
            for w in words {
                assert!(msg.contains(w), "{input:?}: {msg:?} should contain {w:?}");
            }
        }
    }

    #[test]
    fn error_message_wording() {
        let msg = |s: &str| AllocatorConfig::parse(s).unwrap_err().to_string();
        assert_eq!(
            msg("max_split_size_mb:abc"),
            "allocator option 'max_split_size_mb': bad value 'abc': expected a whole number of MiB (PyTorch: \
             std::stoull fails, \"stoull\")"
        );
        assert_eq!(
            msg("max_split_size_mb:128,expandable_segments:true"),
            "allocator option 'expandable_segments': bad value 'true': Expected 'True' or 'False' at index 6 in \
             ConfigTokenizer but got 'true'"
        );
        assert_eq!(
            msg("per_process_memory_fraction:1.5"),
            "allocator option 'per_process_memory_fraction': bad value '1.5': per_process_memory_fraction is \
             invalid, set it in [0.0, 1.0]"
        );
        assert_eq!(
            msg("max_split_size_mb:19"),
            "allocator option 'max_split_size_mb': bad value '19': CachingAllocator option max_split_size_mb too small, \
             must be >= 20"
        );
        assert_eq!(
            msg("foo:1"),
            format!("Unrecognized key 'foo' in CUDA allocator config. (vramlab knows: {KNOWN_KEYS})")
        );
        assert_eq!(
            msg("max_split_size_mb"),
            "allocator config 'max_split_size_mb': option 'max_split_size_mb' must be followed by ':' and its value"
        );
    }

    #[test]
    fn every_listed_key_is_known() {
        let names: Vec<&str> = KNOWN_KEYS.split(", ").collect();
        assert_eq!(names.len(), 16);
        for name in names {
            assert!(Key::from_name(name).is_some(), "{name}");
        }
    }

    #[test]
    fn settings_reset_three_keys_and_keep_the_others() {
        let base = AllocatorConfig::parse(
            "expandable_segments:True,max_split_size_mb:40,roundup_power2_divisions:4,\
             garbage_collection_threshold:0.5,max_non_split_rounding_mb:30",
        )
        .unwrap();
        let next = base.with_settings("").unwrap();
        assert!(next.expandable_segments);
        assert_eq!(next.max_non_split_rounding, mb(30));
        assert_eq!((next.max_split_size, next.garbage_collection_threshold), (None, None));
        assert_eq!(next.roundup_power2_divisions, [0; ROUNDUP_BUCKETS]);
        let next = base.with_settings("expandable_segments:False,max_split_size_mb:20").unwrap();
        assert!(!next.expandable_segments);
        assert_eq!(next.max_split_size, Some(mb(20)));
        assert!(base.with_settings("max_split_size_mb:2").is_err());
        assert!(base.with_settings("foo:1,bar:2").is_err());
    }

    #[test]
    fn from_str_parses() {
        let c: AllocatorConfig = "expandable_segments:True".parse().unwrap();
        assert!(c.expandable_segments);
        assert!("expandable_segments:yes".parse::<AllocatorConfig>().is_err());
    }

    #[test]
    fn validate_follows_the_parse_rules() {
        let ok = |c: AllocatorConfig| c.validate().is_ok();
        assert!(ok(with(|c| c.max_split_size = Some(mb(20)))), "equal to the large segment size is allowed");
        assert!(!ok(with(|c| c.max_split_size = Some(mb(19)))));
        assert!(!ok(with(|c| c.max_split_size = Some(mb(64) + 1))), "not a whole MiB");
        assert!(!ok(with(|c| c.max_non_split_rounding = mb(19))));
        assert!(!ok(with(|c| c.max_non_split_rounding = mb(32) + 512)));
        assert!(ok(with(|c| {
            c.large_segment_size = mb(11);
            c.max_non_split_rounding = mb(11);
        })));
        assert!(!ok(with(|c| c.large_segment_size = mb(10))));
        assert!(!ok(with(|c| c.large_segment_size = mb(24) + 1)));
        assert!(!ok(with(|c| c.large_segment_size = mb(24))), "max_non_split_rounding (20 MiB) is below it");
        assert!(!ok(with(|c| c.garbage_collection_threshold = Some(1.0))));
        assert!(!ok(with(|c| c.per_process_memory_fraction = Some(f64::NAN))));
        assert!(!ok(divs([3; ROUNDUP_BUCKETS])));
        let err = with(|c| c.max_split_size = Some(mb(64) + 1)).validate().unwrap_err();
        assert!(err.to_string().contains(&format!("'{} bytes'", mb(64) + 1)), "{err}");
    }

    fn division() -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => Just(0u64),
            4 => (0u32..4).prop_map(|k| 1u64 << k),
            1 => (0u32..64).prop_map(|k| 1u64 << k),
        ]
    }

    fn buckets() -> impl Strategy<Value = [u64; ROUNDUP_BUCKETS]> {
        prop_oneof![
            Just([0; ROUNDUP_BUCKETS]),
            division().prop_map(|d| [d; ROUNDUP_BUCKETS]),
            prop::array::uniform16(division()),
            // A leading run, a middle run and a tail run, as lists usually make them.
            (division(), 0..=ROUNDUP_BUCKETS, division(), 0..=ROUNDUP_BUCKETS, division()).prop_map(
                |(a, i, b, j, c)| {
                    let mut d = [b; ROUNDUP_BUCKETS];
                    d[..i].fill(a);
                    d[j.max(i)..].fill(c);
                    d
                }
            ),
        ]
    }

    fn unit_interval() -> impl Strategy<Value = f64> {
        prop_oneof![Just(0.5), (1u64..(1 << 53)).prop_map(|n| n as f64 / (1u64 << 53) as f64), 0.0f64..1.0]
    }

    prop_compose! {
        fn valid_config()(
            large in prop_oneof![Just(20u64), 11u64..=64, 11u64..=1 << 20],
            split in prop::option::of(prop_oneof![0u64..1000, Just(u64::MAX)]),
            non_split in prop::option::of(prop_oneof![0u64..1000, Just(u64::MAX)]),
            roundup in buckets(),
            gc in prop::option::of(unit_interval().prop_filter("above 0", |t| *t > 0.0)),
            expandable in any::<bool>(),
            fraction in prop::option::of(prop_oneof![Just(0.0), Just(1.0), unit_interval()]),
        ) -> AllocatorConfig {
            // Extra MiB above the large segment size, capped where PyTorch clamps.
            let at_least_large = |extra: u64| mib_bytes(large.saturating_add(extra));
            AllocatorConfig {
                max_split_size: split.map(at_least_large),
                max_non_split_rounding: non_split.map_or(mb(large), at_least_large),
                roundup_power2_divisions: roundup,
                garbage_collection_threshold: gc,
                expandable_segments: expandable,
                per_process_memory_fraction: fraction,
                large_segment_size: mb(large),
            }
        }
    }

    /// Strings close to real configs (known keys, plausible values, a little noise), to reach
    /// deep into the parser.
    fn config_like() -> impl Strategy<Value = String> {
        let key = prop::sample::select(KNOWN_KEYS.split(", ").collect::<Vec<_>>()).prop_map(str::to_owned);
        let number = prop_oneof![
            (0u32..64).prop_map(|k| (1u64 << k).to_string()),
            "[0-9]{1,3}",
            "[0-9]{1,22}",
            "0\\.[0-9]{1,4}",
            prop::sample::select(vec!["-1", "nan", "inf", "1e308", "0.", "+", ">", "", "True", "False", "native"])
                .prop_map(str::to_owned),
        ];
        let item = prop_oneof![
            (number.clone(), number.clone()).prop_map(|(a, b)| format!("{a}:{b}")),
            number.clone().prop_map(|b| format!(">:{b}")),
            "\\PC{0,3}",
        ];
        let list = prop::collection::vec(item, 0..6).prop_map(|items| format!("[{}]", items.join(",")));
        let value = prop_oneof![number, list, "\\PC{0,3}"];
        let entry = prop_oneof![
            8 => (key.clone(), value).prop_map(|(k, v)| format!("{k}:{v}")),
            1 => key,
            1 => "\\PC{0,4}",
        ];
        let separator = prop_oneof![
            12 => Just(","),
            1 => prop::sample::select(vec![", ", ":", "", ",,", "]"]),
        ];
        prop::collection::vec((entry, separator), 0..5)
            .prop_map(|parts| parts.into_iter().flat_map(|(e, sep)| [e, sep.to_owned()]).collect())
    }

    /// Whatever `parse` accepts is valid and survives printing and reading back.
    fn check_parse_result(s: &str) -> Result<(), TestCaseError> {
        if let Ok(cfg) = AllocatorConfig::parse(s) {
            prop_assert!(cfg.validate().is_ok(), "{s:?} gave an invalid config");
            let printed = cfg.to_string();
            prop_assert_eq!(AllocatorConfig::parse(&printed), Ok(cfg), "{:?} → {:?}", s, printed);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn valid_configs_round_trip(cfg in valid_config()) {
            prop_assert_eq!(cfg.validate(), Ok(()));
            let printed = cfg.to_string();
            let back = AllocatorConfig::parse(&printed);
            prop_assert_eq!(back.as_ref(), Ok(&cfg), "printed as {:?}", printed);
            prop_assert_eq!(back.unwrap().to_string(), printed);
        }

        #[test]
        fn arbitrary_strings_never_panic(s in any::<String>()) {
            check_parse_result(&s)?;
        }

        #[test]
        fn config_like_strings_never_panic(s in config_like()) {
            check_parse_result(&s)?;
        }
    }
}
