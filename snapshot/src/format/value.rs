//! The pickle machine's values: [`Value`], a 16-byte handle (a tag word and a
//! payload word) into the reader's heap, cheap to copy.

/// A value on the pickle machine's stack: a handle, cheap to copy. Laid out
/// as two words (tag, payload) so that copies are whole-word moves.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(u64)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond 64 bits (its sign): kept only to be reported.
    BigInt(bool),
    Float(f64),
    Str(u32),
    Bytes,
    List(u32),
    Dict(u32),
    Tuple(u32),
    Set(u32),
    /// A finished trace entry not yet appended: its serial number (see `Heap::append_entries`).
    Entry(u32),
    /// A frames list already interned as a stack id.
    Stack(u32),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes => "bytes",
            Value::List(_) | Value::Stack(_) => "list",
            Value::Dict(_) => "dict",
            Value::Tuple(_) => "tuple",
            Value::Set(_) => "set",
            Value::Entry(_) => "dict (a trace entry)",
        }
    }
}
