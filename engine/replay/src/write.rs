//! Writing traces: [`TraceOp`], one op as a trace line, and [`write_trace`]
//! (for tests, benches and exporters).

use std::io::{self, Write};

use vramlab_allocator::StreamId;
use vramlab_allocator::hooks::Tag;

// ----- writing traces -----

/// One op of a trace, for writing traces (tests, benches, exporters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    Alloc { id: u64, size: u64, stream: StreamId, tag: Option<Tag> },
    Free { id: u64 },
    EmptyCache,
    ResetPeak,
}

impl TraceOp {
    /// Writes the op as one trace line, newline included. Stream 0 and a missing
    /// tag are left out.
    pub fn write_line<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        match *self {
            TraceOp::Alloc { id, size, stream, tag } => {
                write!(w, r#"{{"op":"alloc","id":{id},"size":{size}"#)?;
                if stream != 0 {
                    write!(w, r#","stream":{stream}"#)?;
                }
                if let Some(tag) = tag {
                    write!(w, r#","tag":"{tag}""#)?;
                }
                w.write_all(b"}\n")
            }
            TraceOp::Free { id } => writeln!(w, r#"{{"op":"free","id":{id}}}"#),
            TraceOp::EmptyCache => w.write_all(b"{\"op\":\"empty_cache\"}\n"),
            TraceOp::ResetPeak => w.write_all(b"{\"op\":\"reset_peak\"}\n"),
        }
    }
}

/// Writes `ops` as a version-1 trace.
pub fn write_trace<W: Write, I: IntoIterator<Item = TraceOp>>(mut w: W, ops: I) -> io::Result<()> {
    for op in ops {
        op.write_line(&mut w)?;
    }
    w.flush()
}
