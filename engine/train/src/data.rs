//! Data loading: a [`DataLoader`] that batches, shuffles, transforms and copies
//! each batch of a [`Dataset`] (re-exported from `dataset.rs`) to the device.
//!
//! Samples are gathered (and transformed by [`LoaderConfig::transform`]) on
//! the training thread with `num_workers = 0`, or on worker threads with
//! bounded queues (see [`crate::workers`]) — in the same order and
//! bit-identical either way. Each batch is then written into a host staging
//! buffer — pinned ([`HostBuffer::pinned`]) when [`LoaderConfig::pin_memory`]
//! is set, as PyTorch's `pin_memory=True` does, else pageable — and copied to
//! the device with [`Tensor::from_host`] (`non_blocking` when pinned) under
//! [`Tag::Input`]. Pinned staging uses a pool of two buffers used in turn, so
//! the copy of batch k+1 can be written while batch k's copy may still run;
//! writing a buffer waits for its previous copy. The staging buffers are
//! reused for every batch of an epoch.
//!
//! Every call for the next batch is a `data_wait` phase on the device's hub
//! ([`hooks::phase_begin`]): the time the training loop sat waiting for data,
//! on the profiler's timeline next to `forward` and `backward`.

use std::sync::{Arc, Mutex, OnceLock};

use super::{NnError, Result};
pub use crate::dataset::{Dataset, Targets};
use crate::transform::SampleTransform;
use crate::workers::{HostBatch, LiveWorkers, LoadSpec, WorkerPool, gather};
use vramlab_engine::device::Device;
use vramlab_engine::hooks::{self, Hooks, Tag, now_ns};
use vramlab_engine::tensor::{DType, HostBuffer, Tensor, tag_scope};
use vramlab_rng::Rng;

/// `DataLoader(dataset, batch_size, shuffle, drop_last, num_workers,
/// pin_memory, prefetch_factor, persistent_workers)` with a seed and a
/// per-sample transform.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    pub batch_size: usize,
    /// Reshuffle every epoch (the order of epoch `e` depends on `seed` and `e` only).
    pub shuffle: bool,
    pub seed: u64,
    /// Drop the last batch when it is smaller than `batch_size`.
    pub drop_last: bool,
    /// Stage batches in pinned host memory before the copy to the device.
    pub pin_memory: bool,
    /// Worker threads that load batches; 0 loads in the training thread (PyTorch's default).
    pub num_workers: usize,
    /// Batches each worker may have ready ahead of the training loop (PyTorch's default 2).
    pub prefetch_factor: usize,
    /// Keep the workers between epochs instead of starting them at each epoch.
    pub persistent_workers: bool,
    /// Applied to every sample as it is loaded (decode/augment), with a
    /// generator derived from (seed, epoch, sample index).
    pub transform: Option<Arc<dyn SampleTransform>>,
}

impl LoaderConfig {
    /// `batch_size`, shuffled with seed 0, last batch kept, pageable memory,
    /// no workers (prefetch factor 2 once there are), no transform.
    pub fn new(batch_size: usize) -> LoaderConfig {
        LoaderConfig {
            batch_size,
            shuffle: true,
            seed: 0,
            drop_last: false,
            pin_memory: false,
            num_workers: 0,
            prefetch_factor: 2,
            persistent_workers: false,
            transform: None,
        }
    }
}

/// Where a loader's samples live.
#[derive(Debug, Clone)]
enum Source<'a> {
    Borrowed(&'a Dataset),
    Shared(Arc<Dataset>),
}

/// Batches of a [`Dataset`], copied to a device.
///
/// Workers need the dataset beyond any borrow: a loader made with
/// [`DataLoader::shared`] hands them its `Arc`; one made with
/// [`DataLoader::new`] copies the dataset once, at the first epoch with
/// workers (counted in [`LoaderMemory::dataset_copy_bytes`]).
#[derive(Debug)]
pub struct DataLoader<'a> {
    source: Source<'a>,
    cfg: LoaderConfig,
    /// The workers' copy of a borrowed dataset.
    copy: OnceLock<Arc<Dataset>>,
    /// Persistent workers between epochs.
    pool: Mutex<Option<WorkerPool>>,
}

impl Clone for DataLoader<'_> {
    /// A loader of the same dataset and config, with no workers started.
    fn clone(&self) -> Self {
        DataLoader { source: self.source.clone(), cfg: self.cfg.clone(), copy: OnceLock::new(), pool: Mutex::new(None) }
    }
}

/// One batch on the device: features `[b, sample_shape…]` (f32) and targets
/// (`[b]` i64 labels or `[b, dims]` f32 values), both under [`Tag::Input`].
#[derive(Debug, Clone)]
pub struct Batch {
    pub x: Tensor,
    pub y: Tensor,
    /// Time the training thread spent getting it, ns: waiting for a worker (or
    /// gathering and transforming itself), staging and the host-to-device copy.
    pub load_ns: u64,
}

impl Batch {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.x.shape().first().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Host memory a running epoch holds for loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoaderMemory {
    /// Staging buffers (the pinned pool when `pin_memory`).
    pub staging_bytes: u64,
    /// Of which page-locked.
    pub page_locked_bytes: u64,
    /// Batches the workers may hold at once: `num_workers × (prefetch_factor + 1)`
    /// batches (each worker's queue plus the one it is building).
    pub worker_batches_bytes: u64,
    /// The workers' copy of a borrowed dataset (0 for [`DataLoader::shared`]).
    pub dataset_copy_bytes: u64,
}

impl LoaderMemory {
    pub fn total_bytes(&self) -> u64 {
        self.staging_bytes + self.worker_batches_bytes + self.dataset_copy_bytes
    }
}

fn dataset_bytes(d: &Dataset) -> u64 {
    let t = match d.targets() {
        Targets::Classes { labels, .. } => labels.len() * 8,
        Targets::Values { values, .. } => values.len() * 4,
    };
    (d.features().len() * 4 + t) as u64
}

impl<'a> DataLoader<'a> {
    pub fn new(dataset: &'a Dataset, cfg: LoaderConfig) -> Result<DataLoader<'a>> {
        DataLoader::build(Source::Borrowed(dataset), cfg)
    }

    fn build(source: Source<'a>, cfg: LoaderConfig) -> Result<DataLoader<'a>> {
        if cfg.batch_size == 0 {
            return Err(NnError::Invalid { what: "DataLoader", reason: "batch_size must be at least 1".into() });
        }
        if cfg.num_workers > 0 && cfg.prefetch_factor == 0 {
            return Err(NnError::Invalid {
                what: "DataLoader",
                reason: "prefetch_factor must be at least 1 with workers (PyTorch's default is 2)".into(),
            });
        }
        Ok(DataLoader { source, cfg, copy: OnceLock::new(), pool: Mutex::new(None) })
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    pub fn dataset(&self) -> &Dataset {
        match &self.source {
            Source::Borrowed(d) => d,
            Source::Shared(d) => d,
        }
    }

    /// Batches per epoch (`len(loader)`).
    pub fn len(&self) -> usize {
        let n = self.dataset().len();
        if self.cfg.drop_last { n / self.cfg.batch_size } else { n.div_ceil(self.cfg.batch_size) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample order of epoch `epoch`.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset().len()).collect();
        if self.cfg.shuffle {
            Rng::derive(self.cfg.seed, 0x5EED ^ epoch).shuffle(&mut order);
        }
        order
    }

    /// The persistent workers' live-thread count, when they are running
    /// between epochs.
    pub fn persistent_workers_live(&self) -> Option<LiveWorkers> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|p| p.live().clone())
    }

    fn spec(&self) -> LoadSpec {
        LoadSpec { batch_size: self.cfg.batch_size, seed: self.cfg.seed, transform: self.cfg.transform.clone() }
    }

    /// The dataset the workers share, and whether it is a copy.
    fn worker_dataset(&self) -> (Arc<Dataset>, bool) {
        match &self.source {
            Source::Shared(d) => (d.clone(), false),
            Source::Borrowed(d) => (self.copy.get_or_init(|| Arc::new((*d).clone())).clone(), true),
        }
    }

    /// The batches of epoch `epoch`, each copied to `device` when the iterator
    /// reaches it. With workers, they start here (or are taken over from the
    /// previous epoch with `persistent_workers`) and begin loading at once.
    pub fn epoch(&self, epoch: u64, device: &Device) -> Batches<'_> {
        let dataset = self.dataset();
        let b = self.cfg.batch_size;
        let x_bytes = b * dataset.sample_len() * 4;
        let y_bytes = b * match dataset.targets() {
            Targets::Classes { .. } => 8,
            Targets::Values { dims, .. } => dims * 4,
        };
        let pinned = self.cfg.pin_memory;
        let buffer = |n| if pinned { HostBuffer::pinned(n) } else { HostBuffer::pageable(n) };
        let slots = if pinned { 2 } else { 1 };
        let order = Arc::new(self.order(epoch));
        let batches = self.len();
        let mut memory = LoaderMemory::default();
        let mut pending = None;
        let workers = if self.cfg.num_workers > 0 && batches > 0 {
            let (shared, copied) = self.worker_dataset();
            if copied {
                memory.dataset_copy_bytes = dataset_bytes(&shared);
            }
            memory.worker_batches_bytes =
                (self.cfg.num_workers * (self.cfg.prefetch_factor + 1)) as u64 * HostBatch::bytes(dataset, b) as u64;
            let kept = if self.cfg.persistent_workers {
                self.pool.lock().unwrap_or_else(|e| e.into_inner()).take()
            } else {
                None
            };
            let pool = match kept {
                Some(p) => Ok(p),
                None => WorkerPool::spawn(shared, self.spec(), self.cfg.num_workers, self.cfg.prefetch_factor),
            };
            match pool.and_then(|p| p.start_epoch(epoch, &order, batches).map(|()| p)) {
                Ok(p) => Some(p),
                Err(e) => {
                    pending = Some(e);
                    None
                }
            }
        } else {
            None
        };
        let x_stage: Vec<HostBuffer> = (0..slots).map(|_| buffer(x_bytes)).collect();
        let y_stage: Vec<HostBuffer> = (0..slots).map(|_| buffer(y_bytes)).collect();
        memory.staging_bytes = (slots * (x_bytes + y_bytes)) as u64;
        memory.page_locked_bytes =
            x_stage.iter().chain(&y_stage).filter(|h| h.is_page_locked()).map(|h| h.len() as u64).sum();
        Batches {
            dataset,
            cfg: self.cfg.clone(),
            spec: self.spec(),
            epoch,
            order,
            next_batch: 0,
            batches,
            device: device.clone(),
            hub: device.allocator().hooks().clone(),
            phase: Arc::from("data_wait"),
            x_stage,
            y_stage,
            slot: 0,
            host: HostBatch::default(),
            workers,
            home: self.cfg.persistent_workers.then_some(&self.pool),
            pending,
            memory,
        }
    }

    /// Stops persistent workers now (they also stop when the loader is dropped).
    pub fn shutdown_workers(&self) {
        drop(self.pool.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl DataLoader<'static> {
    /// A loader over a shared dataset: workers use the `Arc` (no copy).
    pub fn shared(dataset: Arc<Dataset>, cfg: LoaderConfig) -> Result<DataLoader<'static>> {
        DataLoader::build(Source::Shared(dataset), cfg)
    }
}

/// The iterator of one epoch.
#[derive(Debug)]
pub struct Batches<'l> {
    dataset: &'l Dataset,
    cfg: LoaderConfig,
    spec: LoadSpec,
    epoch: u64,
    order: Arc<Vec<usize>>,
    next_batch: usize,
    batches: usize,
    device: Device,
    /// Where `data_wait` phases go: the device's hub.
    hub: Arc<Hooks>,
    phase: Arc<str>,
    x_stage: Vec<HostBuffer>,
    y_stage: Vec<HostBuffer>,
    /// The staging slot the next batch is written into.
    slot: usize,
    /// Reused host batch of the training thread's own loading (`num_workers = 0`).
    host: HostBatch,
    workers: Option<WorkerPool>,
    /// The loader's slot for persistent workers, to hand them back at the epoch's end.
    home: Option<&'l Mutex<Option<WorkerPool>>>,
    /// An error starting the workers, reported by the first `next`.
    pending: Option<NnError>,
    memory: LoaderMemory,
}

impl Batches<'_> {
    /// Whether the staging buffers really are page-locked (pinning can fail
    /// where the process may not lock that much memory).
    pub fn staging_is_page_locked(&self) -> bool {
        self.x_stage.iter().chain(&self.y_stage).all(HostBuffer::is_page_locked)
    }

    /// Host memory this epoch's loading holds.
    pub fn memory(&self) -> LoaderMemory {
        self.memory
    }

    /// The running worker threads' count (`None` with `num_workers = 0`).
    pub fn live_workers(&self) -> Option<LiveWorkers> {
        self.workers.as_ref().map(|p| p.live().clone())
    }

    fn host_batch(&mut self, k: usize) -> Result<HostBatch> {
        if let Some(pool) = &self.workers {
            return pool.recv(k);
        }
        let start = k * self.cfg.batch_size;
        let end = (start + self.cfg.batch_size).min(self.order.len());
        let mut current = 0;
        let mut host = std::mem::take(&mut self.host);
        let r = gather(self.dataset, &self.order[start..end], &self.spec, self.epoch, &mut host, &mut current);
        match r {
            Ok(()) => Ok(host),
            Err(f) => Err(NnError::LoadSample { sample: f.sample, worker: None, reason: f.reason }),
        }
    }

    fn load(&mut self, k: usize) -> Result<Batch> {
        let start = now_ns();
        let host = self.host_batch(k)?;
        let slot = self.slot;
        self.slot = (self.slot + 1) % self.x_stage.len();
        let n = if self.dataset.sample_len() == 0 { 0 } else { host.x.len() / self.dataset.sample_len() };
        self.x_stage[slot].write(&host.x)?;
        let mut x_shape = vec![n];
        x_shape.extend_from_slice(self.dataset.sample_shape());
        let (y_shape, y_dtype) = match self.dataset.targets() {
            Targets::Classes { .. } => {
                self.y_stage[slot].write(&host.labels)?;
                (vec![n], DType::I64)
            }
            Targets::Values { dims, .. } => {
                self.y_stage[slot].write(&host.values)?;
                (vec![n, *dims], DType::F32)
            }
        };
        if self.workers.is_none() {
            self.host = host; // keep the vectors for the next batch
        }
        let non_blocking = self.cfg.pin_memory;
        let _t = tag_scope(Tag::Input);
        let x = Tensor::from_host(&self.x_stage[slot], &x_shape, DType::F32, &self.device, non_blocking)?;
        let y = Tensor::from_host(&self.y_stage[slot], &y_shape, y_dtype, &self.device, non_blocking)?;
        Ok(Batch { x, y, load_ns: now_ns().saturating_sub(start) })
    }

    /// Ends the epoch: persistent workers go back to the loader when every
    /// batch was delivered; otherwise (or without persistence) they stop here.
    fn finish(&mut self, clean: bool) {
        if let Some(pool) = self.workers.take() {
            match self.home {
                Some(home) if clean => *home.lock().unwrap_or_else(|e| e.into_inner()) = Some(pool),
                _ => drop(pool),
            }
        }
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if let Some(e) = self.pending.take() {
            self.next_batch = self.batches;
            return Some(Err(e));
        }
        if self.next_batch >= self.batches {
            return None;
        }
        let k = self.next_batch;
        self.next_batch += 1;
        let depth = hooks::phase_begin(&self.hub, &self.phase);
        let r = self.load(k);
        hooks::phase_end(&self.hub, &self.phase, depth);
        if r.is_err() {
            // A failed batch ends the epoch (the workers stop).
            self.next_batch = self.batches;
            self.finish(false);
        } else if self.next_batch == self.batches {
            self.finish(true);
        }
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batches - self.next_batch;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Batches<'_> {}

impl Drop for Batches<'_> {
    fn drop(&mut self) {
        let clean = self.next_batch >= self.batches;
        self.finish(clean);
    }
}
