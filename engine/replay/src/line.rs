//! Reading one trace line: [`Line`], its fields as written (strings borrowed
//! from the line unless escaped), and the checks that name what is wrong.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use vramlab_allocator::StreamId;

use crate::error::ReplayError;

// ----- parsing -----

/// One trace line as it is written. Strings are borrowed from the line unless they
/// contain escapes; nothing is buffered.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object such as {\"op\":\"free\",\"id\":7}")]
pub(crate) struct Line<'a> {
    #[serde(borrow)]
    pub(crate) op: Option<Text<'a>>,
    pub(crate) id: Option<u64>,
    pub(crate) size: Option<SizeValue>,
    pub(crate) stream: Option<StreamId>,
    #[serde(borrow)]
    pub(crate) tag: Option<Text<'a>>,
    pub(crate) device: Option<u64>,
    pub(crate) fraction: Option<f64>,
    #[serde(borrow)]
    pub(crate) settings: Option<Text<'a>>,
    pub(crate) pool: Option<[u64; 2]>,
    pub(crate) streams: Option<Vec<StreamId>>,
    pub(crate) use_on_oom: Option<bool>,
    pub(crate) no_split: Option<bool>,
}

impl Line<'_> {
    /// Parses trace line `line`, which is not blank.
    #[inline]
    pub(crate) fn parse(line: u64, text: &[u8]) -> Result<Line<'_>, ReplayError> {
        // serde would read `[...]` as a struct too; name what a line must be instead.
        if let Some(column) = text.iter().position(|b| !b.is_ascii_whitespace())
            && text[column] != b'{'
        {
            return Err(ReplayError::Json {
                line,
                column: column + 1,
                message: "expected a JSON object such as {\"op\":\"free\",\"id\":7}".to_owned(),
            });
        }
        serde_json::from_slice(text).map_err(|e| ReplayError::Json {
            line,
            column: e.column(),
            message: json_message(&e),
        })
    }
}

/// A string borrowed from the input when possible.
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor(PhantomData))
    }
}

/// A JSON number as written, checked after parsing so that the message can name
/// the line and what is wrong with the value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SizeValue {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

impl<'de> Deserialize<'de> for SizeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = SizeValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count (a non-negative integer)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeValue, E> {
                Ok(SizeValue::Unsigned(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeValue, E> {
                Ok(if v < 0 { SizeValue::Negative(v) } else { SizeValue::Unsigned(v as u64) })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<SizeValue, E> {
                Ok(SizeValue::Float(v))
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}

impl SizeValue {
    /// The size in bytes: any `u64` (PyTorch's `size_t`); integral floats (`1e6`,
    /// `1024.0`) are accepted.
    pub(crate) fn bytes(self, line: u64) -> Result<u64, ReplayError> {
        let bad = |value: String, reason| Err(ReplayError::BadSize { line, value, reason });
        match self {
            SizeValue::Unsigned(n) => Ok(n),
            SizeValue::Negative(n) => bad(n.to_string(), "is negative"),
            SizeValue::Float(f) if f < 0.0 => bad(f.to_string(), "is negative"),
            SizeValue::Float(f) if f.fract() != 0.0 => bad(f.to_string(), "is not a whole number of bytes"),
            // 2^64 and above do not fit a size_t.
            SizeValue::Float(f) if f >= 18_446_744_073_709_551_616.0 => {
                bad(f.to_string(), "is too large (a size is at most 2^64 - 1 bytes)")
            }
            SizeValue::Float(f) => Ok(f as u64),
        }
    }
}

/// serde_json's message without its " at line 1 column N" (each line is parsed
/// on its own, so that position would mislead).
pub(crate) fn json_message(e: &serde_json::Error) -> String {
    let mut message = e.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    message
}
