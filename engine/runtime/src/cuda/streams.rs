//! A device's streams, numbered as the allocator numbers them: stream 0 is the
//! legacy default stream (PyTorch's default current stream), stream 1 the copy
//! stream that non-blocking transfers use, and further streams are made on
//! request ([`Streams::create`]). Every stream but 0 is non-blocking, so it
//! overlaps with the default stream.

use std::sync::{Arc, RwLock};

use cudarc::driver::{CudaContext, CudaStream, sys};

use super::error::{CudaResult, DriverContext};
use crate::alloc::StreamId;

/// The stream non-blocking copies run on.
pub const COPY_STREAM: StreamId = 1;

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.table.read().map_or(0, |t| t.len());
        f.debug_struct("Streams").field("count", &n).finish_non_exhaustive()
    }
}

pub struct Streams {
    ctx: Arc<CudaContext>,
    table: RwLock<Vec<Arc<CudaStream>>>,
}

impl Streams {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> CudaResult<Streams> {
        let default = ctx.default_stream();
        let copy = ctx.new_stream().during("creating the copy stream")?;
        Ok(Streams { ctx: ctx.clone(), table: RwLock::new(vec![default, copy]) })
    }

    /// The stream with this number (the default stream for an unknown one).
    pub fn get(&self, id: StreamId) -> Arc<CudaStream> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        table.get(id as usize).unwrap_or(&table[0]).clone()
    }

    pub(crate) fn cu_stream(&self, id: StreamId) -> sys::CUstream {
        self.get(id).cu_stream()
    }

    /// A new non-blocking stream and its number.
    pub fn create(&self) -> CudaResult<StreamId> {
        let stream = self.ctx.new_stream().during("creating a stream")?;
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        table.push(stream);
        Ok((table.len() - 1) as StreamId)
    }

    /// Waits for every stream's queued work.
    pub fn synchronize_all(&self) -> CudaResult<()> {
        self.ctx.synchronize().during("synchronizing the device")
    }
}
