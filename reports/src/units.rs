//! The unit a metric's name carries, and a metric's value written with it
//! (bytes and times through `vramlab_display::format`).

use vramlab_display::format::{fmt_bytes, fmt_ns};

/// The unit a metric's name ends in, and its value formatted with it.
pub fn metric_unit(name: &str) -> &'static str {
    const UNITS: [(&str, &str); 12] = [
        ("_bytes", "bytes"),
        ("_ns", "ns"),
        ("_gbps", "GB/s"),
        ("_tflops", "TFLOP/s"),
        ("_gflops", "GFLOP/s"),
        ("_ratio", "ratio"),
        ("_percent", "%"),
        ("_count", "count"),
        ("_ms", "ms"),
        ("_us", "µs"),
        ("_x", "x"),
        ("_b", "B"),
    ];
    UNITS.iter().find(|(s, _)| name.ends_with(s)).map_or("", |u| u.1)
}

/// A metric's value for a reader: bytes and times in their units, others with
/// 3 significant digits and the unit.
pub fn fmt_metric(name: &str, value: f64) -> String {
    match metric_unit(name) {
        "bytes" => fmt_bytes(value.max(0.0) as u64),
        "ns" => fmt_ns(value),
        "" | "ratio" | "count" => fmt_num(value),
        u => format!("{} {u}", fmt_num(value)),
    }
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units_and_times() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1536), "1.50 KiB");
        assert_eq!(fmt_bytes(3 << 20), "3.00 MiB");
        assert_eq!(fmt_bytes(2 << 30), "2.00 GiB");
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1024), "1.00 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1.00 MiB");
        assert_eq!(fmt_bytes(512 << 20), "512.00 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
        assert_eq!(fmt_bytes(5 << 40), "5.00 TiB");
        assert_eq!(fmt_bytes(u64::MAX), "16777216.00 TiB");
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(12_300.0), "12.30 µs");
        assert_eq!(fmt_ns(4_560_000.0), "4.56 ms");
        assert_eq!(fmt_metric("h2d_gbps", 12.5), "12.500 GB/s");
        assert_eq!(fmt_metric("peak_bytes", 1024.0), "1.00 KiB");
        assert_eq!(fmt_metric("oom_count", 3.0), "3");
    }
}
