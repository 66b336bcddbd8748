//! The one formatting module: byte counts in binary units ([`fmt_bytes`]),
//! changes with their sign ([`fmt_change`], [`fmt_count_change`],
//! [`fmt_relative`]) and durations ([`fmt_ns`]), with the unit table size
//! arguments also accept ([`BYTE_UNITS`]).

/// Bytes in a kibibyte.
pub const KIB: u64 = 1 << 10;
/// Bytes in a mebibyte.
pub const MIB: u64 = 1 << 20;
/// Bytes in a gibibyte.
pub const GIB: u64 = 1 << 30;
/// Bytes in a tebibyte.
pub const TIB: u64 = 1 << 40;

/// The binary units [`fmt_bytes`] writes (and `vramlab`'s size arguments
/// accept), each with its size in bytes, smallest first.
pub const BYTE_UNITS: [(&str, u64); 5] = [("B", 1), ("KiB", KIB), ("MiB", MIB), ("GiB", GIB), ("TiB", TIB)];

/// `bytes` in the largest binary unit it reaches, two decimals: `512 B`,
/// `1.50 KiB`, `512.00 MiB`, `24.00 GiB`, `5.00 TiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    let (name, unit) = BYTE_UNITS.iter().rev().find(|(_, u)| bytes >= *u).copied().unwrap_or(BYTE_UNITS[0]);
    if unit == 1 { format!("{bytes} B") } else { format!("{:.2} {name}", bytes as f64 / unit as f64) }
}

/// A signed byte change as the pages and the terminal show it: "+12.00 MiB",
/// "−3.00 KiB", "no change".
pub fn fmt_change(bytes: i64) -> String {
    match bytes {
        0 => "no change".to_owned(),
        b if b > 0 => format!("+{}", fmt_bytes(b.unsigned_abs())),
        b => format!("−{}", fmt_bytes(b.unsigned_abs())),
    }
}

/// A signed count change: "+3", "−1", "no change".
pub fn fmt_count_change(before: u64, after: u64) -> String {
    match after.cmp(&before) {
        std::cmp::Ordering::Equal => "no change".to_owned(),
        std::cmp::Ordering::Greater => format!("+{}", after - before),
        std::cmp::Ordering::Less => format!("−{}", before - after),
    }
}

/// The change relative to `before`, " (+12.5 %)" (" (×100)" from tenfold up), or "" when
/// `before` is 0 or nothing changed.
pub fn fmt_relative(before: u64, change: i64) -> String {
    if before == 0 || change == 0 {
        return String::new();
    }
    let pct = change as f64 / before as f64 * 100.0;
    if pct >= 1000.0 {
        // "+204463.0 %" says less than "×2045".
        return format!(" (×{:.0})", (before as f64 + change as f64) / before as f64);
    }
    format!(" ({pct:+.1} %)").replace('-', "−")
}

/// Nanoseconds in the largest fitting unit, its sign kept: `850 ns`,
/// `12.30 µs`, `4.56 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    match ns.abs() {
        v if v < 1e3 => format!("{ns:.0} ns"),
        v if v < 1e6 => format!("{:.2} µs", ns / 1e3),
        v if v < 1e9 => format!("{:.2} ms", ns / 1e6),
        _ => format!("{:.2} s", ns / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1024), "1.00 KiB");
        assert_eq!(fmt_bytes(1536), "1.50 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1.00 MiB");
        assert_eq!(fmt_bytes(512 << 20), "512.00 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
        assert_eq!(fmt_bytes(5 << 40), "5.00 TiB");
        assert_eq!(fmt_bytes(u64::MAX), "16777216.00 TiB");
    }

    /// Moved from the suites' findings, which wrote sizes in MiB alone before.
    #[test]
    fn mib_writes_the_unit() {
        assert_eq!(fmt_bytes(3 * MIB), "3.00 MiB");
        assert_eq!(fmt_bytes(1536 * 1024), "1.50 MiB");
    }

    #[test]
    fn changes_read_with_their_sign() {
        assert_eq!(fmt_change(0), "no change");
        assert_eq!(fmt_change(2 << 20), "+2.00 MiB");
        assert_eq!(fmt_change(-(3 << 10)), "−3.00 KiB");
        assert_eq!(fmt_count_change(3, 1), "−2");
        assert_eq!(fmt_relative(200, 50), " (+25.0 %)");
        assert_eq!(fmt_relative(0, 50), "");
        assert_eq!(fmt_relative(400, -4), " (−1.0 %)");
        assert_eq!(fmt_relative(10, 990), " (×100)");
    }

    #[test]
    fn times_in_their_unit() {
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(12_300.0), "12.30 µs");
        assert_eq!(fmt_ns(4_560_000.0), "4.56 ms");
        assert_eq!(fmt_ns(1.2e9), "1.20 s");
        assert_eq!(fmt_ns(-12_300.0), "-12.30 µs");
    }
}
