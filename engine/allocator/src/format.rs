//! Human-readable byte sizes, as PyTorch's `c10::format_size` prints them.

/// Formats a byte count the way PyTorch's out-of-memory message does:
/// `"N bytes"` up to 1024 bytes, otherwise KiB, MiB or GiB with two decimals
/// (binary units, the unit chosen by the largest that the size does not exceed).
///
/// ```
/// use vramlab_allocator::format_size;
/// assert_eq!(format_size(1024), "1024 bytes");
/// assert_eq!(format_size(2 * 1024 * 1024), "2.00 MiB");
/// assert_eq!(format_size(3 << 30), "3.00 GiB");
/// ```
pub fn format_size(bytes: u64) -> String {
    use crate::consts::{GIB, KIB, MIB};
    let b = bytes as f64;
    if bytes <= KIB {
        format!("{bytes} bytes")
    } else if bytes <= MIB {
        format!("{:.2} KiB", b / KIB as f64)
    } else if bytes <= GIB {
        format!("{:.2} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::format_size;

    #[test]
    fn known_answers() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size((1 << 20) + 1), "1.00 MiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(80 << 30), "80.00 GiB");
    }
}
