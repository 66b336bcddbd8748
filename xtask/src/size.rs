//! Byte sizes on the command line, in binary units written out (B, KiB, MiB,
//! GiB, TiB): reading them. Writing them is `vramlab_reports::units::fmt_bytes`.

use std::fmt;

use vramlab_reports::units::BYTE_UNITS;

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

/// Reads `4GiB`, `512MiB`, `64KiB`, `1.5GiB`, `1048576`, `1048576B`, `2 TiB`
/// (units case-insensitive, binary only). Decimal units (`GB`, `MB`, …) are
/// refused rather than guessed at. The result must be a whole number of bytes.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
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
    if !fraction_bytes.is_multiple_of(scale) {
        return Err(err("not a whole number of bytes".into()));
    }
    let bytes =
        whole.checked_mul(multiplier).and_then(|b| b.checked_add(fraction_bytes / scale)).ok_or_else(too_large)?;
    u64::try_from(bytes).map_err(|_| too_large())
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
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
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
            ("1.5", "whole number of bytes"),
            ("1.0001KiB", "whole number of bytes"),
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
