//! `memory_summary()`: the allocator's statistics as the table PyTorch's
//! `torch.cuda.memory_summary()` prints.
//!
//! Ported line for line from `memory_summary` in `torch/cuda/memory.py` of
//! `pytorch/pytorch` (read at commit 00b65a04a2d30e498eedcb1e3476abd547f428f1; the
//! function is character for character the same at the older commit
//! d0e3d96bcf375059f054aa04e03c76c6d943211e, so the releases in between print this
//! table too): same rows in the same order, the same `_format_size` /
//! `_format_count` unit choice, truncation and padding, 75 characters between the `|`
//! frame (77 per line with it), and a trailing newline. The one deliberate difference is
//! the title: `PyTorch CUDA memory summary, device ID {device:<17d}` becomes
//! `vramlab memory summary, device {device:<25}`, the device field widened by the eight
//! characters the shorter text frees, so the title still starts in the same column and the
//! line keeps its 75-character width. As in PyTorch, widths are minimums: a device name
//! longer than 25 characters, or a number too wide for its column, widens its line.

use super::stats::{MemoryStats, Stat, StatArray};

/// The width of the table between the `|` frame, as in PyTorch.
const WIDTH: usize = 75;

/// A column formatter: `(value, the value that picks the unit) -> 10 characters`.
type Formatter = fn(i64, i64) -> String;

/// PyTorch's `_format_size(sz, pref_sz)`: the unit is chosen from `pref_sz` (the value of
/// the row's `all` entry in the same column), dividing by 1024 while it is at least 768 KiB
/// in the current unit; `sz` is floor-divided alongside and printed right-aligned in 6.
///
/// Python divides `pref_sz` as a float; since 768·1024 is exactly representable, dividing
/// by a power of two is exact, and Python's int/int division is correctly rounded, the test
/// `pref_sz / 1024^k < 768·1024` is exactly the integer test `pref_sz < 768·1024^(k+1)`,
/// which is what this does (in `i128`, so that even `i64::MAX` reaches PiB without overflow).
fn format_size(sz: i64, pref_sz: i64) -> String {
    const PREFIXES: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut prefix = PREFIXES[0];
    let mut sz = sz;
    for (divisions, new_prefix) in PREFIXES.iter().skip(1).enumerate() {
        if i128::from(pref_sz) < (768 * 1024_i128) << (10 * divisions) {
            break;
        }
        prefix = new_prefix;
        sz = sz.div_euclid(1024); // Python's `//` floors
    }
    format!("{sz:6} {prefix}")
}

/// PyTorch's `_format_count(cnt, pref_cnt)`: like [`format_size`] with steps of 1000 while
/// `pref_cnt` is at least 750 000 (K, then M), printed right-aligned in 7 plus a space.
///
/// Python's float test `pref_cnt / 1000 < 750 000` equals the integer test
/// `pref_cnt < 750 000 000` (750 000 is exact, the quotient correctly rounded, and an
/// integer divided by 1000 never lies within rounding distance of it).
fn format_count(cnt: i64, pref_cnt: i64) -> String {
    const PREFIXES: [&str; 3] = [" ", "K", "M"];
    let mut prefix = PREFIXES[0];
    let mut cnt = cnt;
    for (divisions, new_prefix) in PREFIXES.iter().skip(1).enumerate() {
        if i128::from(pref_cnt) < 750_000 * 1000_i128.pow(divisions as u32) {
            break;
        }
        prefix = new_prefix;
        cnt = cnt.div_euclid(1000);
    }
    format!("{cnt:7} {prefix} ")
}

/// One table row: the name left-aligned in 21, then the four columns of `stat`, each unit
/// chosen from the matching column of `pref` (the metric's `all` entry).
fn row(name: &str, stat: &Stat, pref: &Stat, formatter: Formatter) -> String {
    format!(
        " {name:<21} | {} | {} | {} | {} ",
        formatter(stat.current, pref.current),
        formatter(stat.peak, pref.peak),
        formatter(stat.allocated, pref.allocated),
        formatter(stat.freed, pref.freed),
    )
}

/// The statistics as the table `torch.cuda.memory_summary()` prints (see the module
/// documentation for the PyTorch version followed and the one difference, the title).
///
/// `device` is the device's name (`cpu`, `cuda:0`, …); `abbreviated` leaves out the
/// "from large pool" / "from small pool" rows, as PyTorch's `abbreviated=True` does.
/// Every line is `|`, 75 characters, `|`; the string ends with a newline.
pub fn memory_summary(stats: &MemoryStats, device: &str, abbreviated: bool) -> String {
    let metrics: [(&StatArray, &str, Formatter); 9] = [
        (&stats.allocated_bytes, "Allocated memory", format_size),
        (&stats.active_bytes, "Active memory", format_size),
        (&stats.requested_bytes, "Requested memory", format_size),
        (&stats.reserved_bytes, "GPU reserved memory", format_size),
        (&stats.inactive_split_bytes, "Non-releasable memory", format_size),
        (&stats.allocation, "Allocations", format_count),
        (&stats.active, "Active allocs", format_count),
        (&stats.segment, "GPU reserved segments", format_count),
        (&stats.inactive_split, "Non-releasable allocs", format_count),
    ];
    let double = "=".repeat(WIDTH);
    let single = "-".repeat(WIDTH);

    let mut lines: Vec<String> = Vec::with_capacity(48);
    lines.push(double.clone());
    lines.push(format!(" {:16} vramlab memory summary, device {device:<25} ", ""));
    lines.push(single.clone());
    lines.push(format!(
        "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
        "", stats.num_ooms, "", stats.num_alloc_retries
    ));
    lines.push(double.clone());
    lines.push("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_owned());

    for (array, name, formatter) in metrics {
        lines.push(single.clone());
        lines.push(row(name, &array.all, &array.all, formatter));
        if !abbreviated {
            lines.push(row("      from large pool", &array.large_pool, &array.all, formatter));
            lines.push(row("      from small pool", &array.small_pool, &array.all, formatter));
        }
    }

    for (stat, name) in
        [(&stats.oversize_allocations, "Oversize allocations"), (&stats.oversize_segments, "Oversize GPU segments")]
    {
        lines.push(single.clone());
        lines.push(row(name, stat, stat, format_count));
    }
    lines.push(double);

    let mut out = String::with_capacity(lines.len() * (WIDTH + 3));
    for line in &lines {
        out.push('|');
        out.push_str(line);
        out.push_str("|\n");
    }
    out
}

impl super::CachingAllocator {
    /// `torch.cuda.memory_summary()`: this allocator's statistics as PyTorch's table
    /// (see [`memory_summary`](fn@memory_summary)).
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        memory_summary(&self.stats(), self.device_name(), abbreviated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The stats count in i64: the workspace's constants, signed.
    const KIB: i64 = crate::consts::KIB as i64;
    const MIB: i64 = crate::consts::MIB as i64;
    const GIB: i64 = crate::consts::GIB as i64;
    const TIB: i64 = 1024 * GIB;

    fn stat([current, peak, allocated, freed]: [i64; 4]) -> Stat {
        Stat { current, peak, allocated, freed }
    }

    /// A stat array from its large- and small-pool entries, `all` their sum.
    fn pools(large: [i64; 4], small: [i64; 4]) -> StatArray {
        StatArray {
            all: stat(std::array::from_fn(|i| large[i] + small[i])),
            small_pool: stat(small),
            large_pool: stat(large),
        }
    }

    /// Hand-built statistics covering B/KiB/MiB/GiB columns (and the 768 KiB boundary on
    /// both sides), plain/K/M counts (and the 750 000 boundary), and pool rows printed in
    /// the unit their `all` row chose.
    fn populated() -> MemoryStats {
        let mut stats = MemoryStats::new(None);
        stats.allocated_bytes = pools(
            [3 * GIB, 7 * GIB + 512 * MIB, TIB + 200 * GIB, TIB + 197 * GIB],
            [5 * MIB + 1536, 9 * MIB, 40 * GIB + 123, 40 * GIB - 5 * MIB + 123 - 1536],
        );
        stats.active_bytes = pools(
            [3 * GIB + 20 * MIB, 7 * GIB + 600 * MIB, TIB + 201 * GIB, TIB + 198 * GIB - 20 * MIB],
            [6 * MIB, 9 * MIB + 512, 40 * GIB + 4096, 40 * GIB - 2 * MIB + 4096],
        );
        stats.requested_bytes = pools(
            [3 * GIB - 777, 7 * GIB + 500 * MIB, TIB + 199 * GIB, TIB + 196 * GIB + 777],
            [5 * MIB - 100, 8 * MIB + 7, 39 * GIB, 39 * GIB - 5 * MIB + 100],
        );
        stats.reserved_bytes = pools(
            [4 * GIB + 40 * MIB, 8 * GIB, 60 * GIB, 56 * GIB - 40 * MIB],
            [12 * MIB, 16 * MIB, 900 * MIB, 888 * MIB],
        );
        stats.inactive_split_bytes =
            pools([784_895, 784_896, 5 * GIB, 5 * GIB - 784_895], [1536, 1536, 700 * KIB, 700 * KIB - 1536]);
        stats.allocation = pools([120, 749_999, 12_345_678, 12_345_558], [629_880, 1, 2_000_000_000, 1_999_370_120]);
        stats.active = pools([121, 300, 12_345_679, 12_345_558], [880, 1_000, 2_000_000_100, 1_999_999_220]);
        stats.segment = pools([3, 9, 4_321, 4_318], [6, 8, 450, 444]);
        stats.inactive_split = pools([2, 40, 1_000_000, 999_998], [1, 3, 987_654_321, 987_654_320]);
        stats.oversize_allocations = stat([2, 5, 1_234_567, 1_234_565]);
        stats.oversize_segments = stat([1, 2, 750_000, 749_999]);
        stats.num_ooms = 3;
        stats.num_alloc_retries = 12;
        stats
    }

    fn assert_framed(table: &str, rows: usize) {
        assert!(table.ends_with("|\n"));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), rows);
        for line in lines {
            assert_eq!(line.chars().count(), WIDTH + 2, "line {line:?}");
            assert!(line.starts_with('|') && line.ends_with('|'), "line {line:?}");
        }
    }

    // The expected tables below were produced by running PyTorch's `memory_summary` body
    // (commit 00b65a04a2d3) under Python 3 on the same numbers, with only the title changed.

    const FRESH: &str = r#"|===========================================================================|
|                  vramlab memory summary, device cpu                       |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Active memory         |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Requested memory      |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| GPU reserved memory   |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Active allocs         |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"#;

    const POPULATED: &str = r#"|===========================================================================|
|                  vramlab memory summary, device cuda:0                    |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 3            |        cudaMalloc retries: 12        |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   3077 MiB |   7689 MiB |   1264 GiB |   1260 GiB |
|       from large pool |   3072 MiB |   7680 MiB |   1224 GiB |   1221 GiB |
|       from small pool |      5 MiB |      9 MiB |     40 GiB |     39 GiB |
|---------------------------------------------------------------------------|
| Active memory         |   3098 MiB |   7777 MiB |   1265 GiB |   1261 GiB |
|       from large pool |   3092 MiB |   7768 MiB |   1225 GiB |   1221 GiB |
|       from small pool |      6 MiB |      9 MiB |     40 GiB |     39 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |   3076 MiB |   7676 MiB |   1262 GiB |   1258 GiB |
|       from large pool |   3071 MiB |   7668 MiB |   1223 GiB |   1220 GiB |
|       from small pool |      4 MiB |      8 MiB |     39 GiB |     38 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   4148 MiB |   8208 MiB |  62340 MiB |  58192 MiB |
|       from large pool |   4136 MiB |   8192 MiB |  61440 MiB |  57304 MiB |
|       from small pool |     12 MiB |     16 MiB |    900 MiB |    888 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory | 786431 B   |    768 KiB |   5120 MiB |   5119 MiB |
|       from large pool | 784895 B   |    766 KiB |   5120 MiB |   5119 MiB |
|       from small pool |   1536 B   |      1 KiB |      0 MiB |      0 MiB |
|---------------------------------------------------------------------------|
| Allocations           |  630000    |     750 K  |    2012 M  |    2011 M  |
|       from large pool |     120    |     749 K  |      12 M  |      12 M  |
|       from small pool |  629880    |       0 K  |    2000 M  |    1999 M  |
|---------------------------------------------------------------------------|
| Active allocs         |    1001    |    1300    |    2012 M  |    2012 M  |
|       from large pool |     121    |     300    |      12 M  |      12 M  |
|       from small pool |     880    |    1000    |    2000 M  |    1999 M  |
|---------------------------------------------------------------------------|
| GPU reserved segments |       9    |      17    |    4771    |    4762    |
|       from large pool |       3    |       9    |    4321    |    4318    |
|       from small pool |       6    |       8    |     450    |     444    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       3    |      43    |     988 M  |     988 M  |
|       from large pool |       2    |      40    |       1 M  |       0 M  |
|       from small pool |       1    |       3    |     987 M  |     987 M  |
|---------------------------------------------------------------------------|
| Oversize allocations  |       2    |       5    |    1234 K  |    1234 K  |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       1    |       2    |     750 K  |  749999    |
|===========================================================================|
"#;

    const POPULATED_ABBREVIATED: &str = r#"|===========================================================================|
|                  vramlab memory summary, device cuda:0                    |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 3            |        cudaMalloc retries: 12        |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   3077 MiB |   7689 MiB |   1264 GiB |   1260 GiB |
|---------------------------------------------------------------------------|
| Active memory         |   3098 MiB |   7777 MiB |   1265 GiB |   1261 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |   3076 MiB |   7676 MiB |   1262 GiB |   1258 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   4148 MiB |   8208 MiB |  62340 MiB |  58192 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory | 786431 B   |    768 KiB |   5120 MiB |   5119 MiB |
|---------------------------------------------------------------------------|
| Allocations           |  630000    |     750 K  |    2012 M  |    2011 M  |
|---------------------------------------------------------------------------|
| Active allocs         |    1001    |    1300    |    2012 M  |    2012 M  |
|---------------------------------------------------------------------------|
| GPU reserved segments |       9    |      17    |    4771    |    4762    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       3    |      43    |     988 M  |     988 M  |
|---------------------------------------------------------------------------|
| Oversize allocations  |       2    |       5    |    1234 K  |    1234 K  |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       1    |       2    |     750 K  |  749999    |
|===========================================================================|
"#;

    #[test]
    fn fresh_table_matches_pytorch() {
        let table = memory_summary(&MemoryStats::new(None), "cpu", false);
        assert_eq!(table, FRESH);
        assert_framed(&table, 47);
    }

    #[test]
    fn populated_table_matches_pytorch() {
        let table = memory_summary(&populated(), "cuda:0", false);
        assert_eq!(table, POPULATED);
        assert_framed(&table, 47);
    }

    #[test]
    fn abbreviated_table_drops_pool_rows() {
        let table = memory_summary(&populated(), "cuda:0", true);
        assert_eq!(table, POPULATED_ABBREVIATED);
        assert_framed(&table, 29);
        assert!(!table.contains("from large pool") && !table.contains("from small pool"));
    }

    #[test]
    fn size_units_match_pytorch() {
        // (sz, pref_sz, Python's `_format_size(sz, pref_sz)`)
        let cases = [
            (0, 0, "     0 B  "),
            (786_431, 786_431, "786431 B  "),
            (786_432, 786_432, "   768 KiB"),
            (805_306_367, 805_306_367, "786431 KiB"),
            (805_306_368, 805_306_368, "   768 MiB"),
            (768 * TIB - 1, 768 * TIB - 1, "786431 GiB"),
            (768 * TIB, 768 * TIB, "   768 TiB"),
            (1 << 62, 1 << 62, "  4096 PiB"),
            (i64::MAX, i64::MAX, "  8191 PiB"),
            (5, i64::MAX, "     0 PiB"),
            (-5, -5, "    -5 B  "),
            (-1, GIB, "    -1 MiB"),
            (1023, GIB, "     0 MiB"),
        ];
        for (sz, pref, want) in cases {
            assert_eq!(format_size(sz, pref), want, "format_size({sz}, {pref})");
        }
    }

    #[test]
    fn count_units_match_pytorch() {
        // (cnt, pref_cnt, Python's `_format_count(cnt, pref_cnt)`)
        let cases = [
            (0, 0, "      0   "),
            (749_999, 749_999, " 749999   "),
            (750_000, 750_000, "    750 K "),
            (749_999_999, 749_999_999, " 749999 K "),
            (750_000_000, 750_000_000, "    750 M "),
            (i64::MAX, i64::MAX, "9223372036854 M "),
            (-3, 1_000_000, "     -1 K "),
            (-3, -3, "     -3   "),
            (999, 1_000_000_000, "      0 M "),
        ];
        for (cnt, pref, want) in cases {
            assert_eq!(format_count(cnt, pref), want, "format_count({cnt}, {pref})");
        }
    }

    #[test]
    fn allocator_method_uses_its_stats_and_device() {
        use std::sync::Arc;

        use crate::{AllocatorConfig, CachingAllocator, SimulatedMemory};

        let alloc = CachingAllocator::new(Arc::new(SimulatedMemory::unlimited()), AllocatorConfig::default())
            .expect("default config is valid");
        let block = alloc.malloc(1, 0, None).expect("1 byte fits");
        let table = alloc.memory_summary(false);
        assert_eq!(table, memory_summary(&alloc.stats(), "simulated", false));
        assert_framed(&table, 47);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[1], "|                  vramlab memory summary, device simulated                 |");
        // 1 B rounds to one 512 B block in a 2 MiB small-pool segment.
        assert_eq!(lines[7], "| Allocated memory      |    512 B   |    512 B   |    512 B   |      0 B   |");
        assert_eq!(lines[19], "| GPU reserved memory   |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |");
        assert_eq!(alloc.memory_summary(true).lines().count(), 29);
        alloc.free(block).expect("live block");
    }
}
