//! Byte sizes on the command line, in binary units written out (B, KiB, MiB,
//! GiB, TiB): reading them. Writing them is `vramlab_display::format::fmt_bytes`.

use std::fmt;

use vramlab_display::format::BYTE_UNITS;

/// The forms [`parse_size`] accepts, for messages and help.
pub const ACCEPTED_FORMS: &str =
    "a number of bytes (1048576) or a number with a binary unit B, KiB, MiB, GiB or TiB (64KiB, 512MiB, 1.5GiB)";

/// Why a size could not be read; the message names the value and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    value: String,
    reason: String,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' is not a size: {}; expected {ACCEPTED_FORMS}", self.value, self.reason)
    }
}

impl std::error::Error for SizeError {}

/// A size read from the command line: its bytes, and, when the text was not a
/// whole number of bytes (`4.8GiB` is 5153960755.2 bytes), the exact value it
/// was rounded down from, for the note that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Size {
    /// The size in whole bytes (rounded down).
    pub bytes: u64,
    /// The text as given, e.g. `4.8GiB`.
    pub text: String,
    /// The exact number of bytes the text means, in decimal (`5153960755.2`),
    /// when it was not whole; `None` when nothing was rounded.
    pub rounded_from: Option<String>,
}

impl Size {
    /// "--capacity 4.8GiB is 5153960755.2 bytes: rounded down to 5153960755
    /// bytes", or `None` when the size was whole.
    pub fn rounding_note(&self, flag: &str) -> Option<String> {
        self.rounded_from.as_ref().map(|exact| {
            format!(
                "{flag} {} is {exact} bytes: rounded down to {} bytes ({})",
                self.text.trim(),
                self.bytes,
                vramlab_display::format::fmt_bytes(self.bytes)
            )
        })
    }
}

/// Reads `4GiB`, `512MiB`, `64KiB`, `1.5GiB`, `1048576`, `1048576B`, `2 TiB`
/// (units case-insensitive, binary only) as whole bytes. Decimal units (`GB`,
/// `MB`, …) are refused rather than guessed at. A size that is not a whole
/// number of bytes (`4.8GiB`) is rounded down, and the [`Size`] keeps what
/// it was rounded from, for [`Size::rounding_note`].
pub fn parse_size(input: &str) -> Result<Size, SizeError> {
    let err = |reason: String| SizeError { value: input.to_owned(), reason };
    let s = input.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim_start());
    if number.is_empty() {
        let negative =
            s.strip_prefix('-').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'));
        return Err(err(if negative { "sizes cannot be negative".into() } else { "no number".into() }));
    }
    let multiplier = match BYTE_UNITS.iter().find(|(name, _)| name.eq_ignore_ascii_case(unit)) {
        Some(&(_, m)) => m,
        None if unit.is_empty() => 1,
        None => {
            let lower = unit.to_ascii_lowercase();
            let reason = match lower.as_str() {
                "kb" | "k" => "decimal and short units are ambiguous: write KiB (1024 bytes)".to_owned(),
                "mb" | "m" => "decimal and short units are ambiguous: write MiB (1024 KiB)".to_owned(),
                "gb" | "g" => "decimal and short units are ambiguous: write GiB (1024 MiB)".to_owned(),
                "tb" | "t" => "decimal and short units are ambiguous: write TiB (1024 GiB)".to_owned(),
                _ => format!("unknown unit '{unit}'"),
            };
            return Err(err(reason));
        }
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(err(format!("'{number}' is not a number")));
    }
    if fraction.len() > 18 {
        return Err(err("too many decimals".into()));
    }
    let too_large = || err("too large".into());
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    let fraction_value: u128 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| too_large())? };
    let scale = 10u128.pow(fraction.len() as u32);
    let multiplier = u128::from(multiplier);
    let fraction_bytes = fraction_value * multiplier;
    let bytes =
        whole.checked_mul(multiplier).and_then(|b| b.checked_add(fraction_bytes / scale)).ok_or_else(too_large)?;
    let bytes = u64::try_from(bytes).map_err(|_| too_large())?;
    let dropped = fraction_bytes % scale;
    let rounded_from = (dropped != 0).then(|| {
        let digits = format!("{dropped:0width$}", width = fraction.len());
        format!("{bytes}.{}", digits.trim_end_matches('0'))
    });
    Ok(Size { bytes, text: input.to_owned(), rounded_from })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        for (text, bytes) in [
            ("0", 0),
            ("1048576", 1 << 20),
            ("1048576B", 1 << 20),
            ("512b", 512),
            ("64KiB", 64 << 10),
            ("64kib", 64 << 10),
            ("512MiB", 512 << 20),
            ("512 MIB", 512 << 20),
            ("4GiB", 4 << 30),
            ("1.5GiB", 3 << 29),
            ("0.5KiB", 512),
            ("2TiB", 2 << 40),
            (" 24GiB ", 24 << 30),
            ("1.25MiB", 1_310_720),
            ("007KiB", 7 << 10),
            ("16777215TiB", 16_777_215 << 40),
        ] {
            assert_eq!(parse_size(text).map(|s| s.bytes), Ok(bytes), "{text}");
            assert_eq!(parse_size(text).unwrap().rounded_from, None, "{text}");
        }
    }

    #[test]
    fn fractions_of_a_byte_are_rounded_down_and_said() {
        for (text, bytes, exact) in [
            ("4.8GiB", 5_153_960_755, "5153960755.2"),
            ("1.5", 1, "1.5"),
            ("1.0001KiB", 1024, "1024.1024"),
            ("0.3B", 0, "0.3"),
            ("2.7 MiB", 2_831_155, "2831155.2"),
        ] {
            let s = parse_size(text).unwrap();
            assert_eq!(s.bytes, bytes, "{text}");
            assert_eq!(s.rounded_from.as_deref(), Some(exact), "{text}");
            let note = s.rounding_note("--capacity").unwrap();
            assert!(
                note.starts_with(&format!(
                    "--capacity {} is {exact} bytes: rounded down to {bytes} bytes",
                    text.trim()
                )),
                "{note}"
            );
        }
        assert_eq!(parse_size("1.5GiB").unwrap().rounding_note("--capacity"), None);
    }

    #[test]
    fn refused_forms_name_value_and_forms() {
        for (text, reason) in [
            ("", "no number"),
            ("GiB", "no number"),
            ("-1GiB", "negative"),
            ("--json", "no number"),
            ("4GB", "write GiB"),
            ("4gb", "write GiB"),
            ("512MB", "write MiB"),
            ("64K", "write KiB"),
            ("1TB", "write TiB"),
            ("4 bytes", "unknown unit 'bytes'"),
            ("4PiB", "unknown unit 'PiB'"),
            ("1.", "not a number"),
            (".5GiB", "not a number"),
            ("1.2.3MiB", "not a number"),
            ("16777216TiB", "too large"),
            ("99999999999999999999999999999999999999999", "too large"),
            ("1e9", "unknown unit 'e9'"),
            ("0x100", "unknown unit 'x100'"),
        ] {
            let e = parse_size(text).expect_err(text).to_string();
            assert!(e.contains(reason), "{text}: {e}");
            assert!(e.starts_with(&format!("'{text}' is not a size")), "{e}");
            assert!(e.contains("KiB, MiB, GiB or TiB"), "{e}");
        }
    }
}
