//! The [`DataLoader`](crate::DataLoader)'s worker threads and the host-side
//! batch assembly they share with the training thread.
//!
//! With `num_workers = n`, worker `w` builds batches `w, w + n, w + 2n, …` of
//! the epoch (PyTorch's round-robin) and sends each, in order, through its own
//! bounded queue of `prefetch_factor` batches; the training thread receives
//! batch `k` from worker `k % n`. So batches arrive in epoch order with no
//! reordering, each worker runs at most `prefetch_factor` batches ahead, and
//! because a sample's transform draws from a generator derived from (seed,
//! epoch, sample index) only, every batch is bit-identical to the one the
//! training thread builds itself with `num_workers = 0`.
//!
//! A transform error or a panic while building a batch (caught with
//! `catch_unwind`) travels through the same queue, naming the sample index,
//! and ends that worker's epoch. Shutdown ([`WorkerPool`]'s `Drop`): a stop
//! flag, the job queues closed (idle workers return), the result queues
//! dropped (a worker blocked on a full queue gets a send error and returns),
//! then every thread is joined — so dropping a loader mid-epoch neither hangs
//! nor leaks a thread. [`LiveWorkers`] counts the threads still running.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use vramlab_rng::Rng;

use crate::dataset::{Dataset, Targets};
use crate::transform::SampleTransform;
use crate::{NnError, Result};

/// A batch gathered (and transformed) in host memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HostBatch {
    pub x: Vec<f32>,
    pub labels: Vec<i64>,
    pub values: Vec<f32>,
}

impl HostBatch {
    /// Bytes of a batch of `batch_size` samples of `dataset`.
    pub fn bytes(dataset: &Dataset, batch_size: usize) -> usize {
        let y = match dataset.targets() {
            Targets::Classes { .. } => 8,
            Targets::Values { dims, .. } => dims * 4,
        };
        batch_size * (dataset.sample_len() * 4 + y)
    }
}

/// Why a sample could not be loaded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadFailure {
    pub sample: usize,
    pub reason: String,
}

/// What a batch's samples need besides the dataset: the transform and the
/// seed its generators derive from.
#[derive(Debug, Clone)]
pub(crate) struct LoadSpec {
    pub batch_size: usize,
    pub seed: u64,
    pub transform: Option<Arc<dyn SampleTransform>>,
}

/// The generator seed of epoch `epoch`'s transforms.
fn epoch_base(seed: u64, epoch: u64) -> u64 {
    Rng::derive(seed, 0x7A45_F02D ^ epoch.wrapping_mul(0x9E37_79B9)).next_u64()
}

/// Gathers samples `idx` of `dataset` into `out` (cleared first), applying
/// the transform; `current` follows the sample being worked on, so a panic
/// can be blamed on it.
pub(crate) fn gather(
    dataset: &Dataset,
    idx: &[usize],
    spec: &LoadSpec,
    epoch: u64,
    out: &mut HostBatch,
    current: &mut usize,
) -> std::result::Result<(), LoadFailure> {
    let per = dataset.sample_len();
    let features = dataset.features();
    out.x.clear();
    out.labels.clear();
    out.values.clear();
    let base = spec.transform.as_ref().map(|_| epoch_base(spec.seed, epoch));
    for &i in idx {
        *current = i;
        let start = out.x.len();
        out.x.extend_from_slice(&features[i * per..(i + 1) * per]);
        if let (Some(t), Some(base)) = (&spec.transform, base) {
            let mut rng = Rng::derive(base, i as u64);
            t.apply(i, dataset.sample_shape(), &mut out.x[start..], &mut rng)
                .map_err(|reason| LoadFailure { sample: i, reason })?;
        }
    }
    match dataset.targets() {
        Targets::Classes { labels, .. } => out.labels.extend(idx.iter().map(|&i| labels[i])),
        Targets::Values { values, dims } => {
            out.values.extend(idx.iter().flat_map(|&i| values[i * dims..(i + 1) * dims].iter().copied()))
        }
    }
    Ok(())
}

/// One epoch's work for one worker.
#[derive(Debug)]
struct Job {
    epoch: u64,
    order: Arc<Vec<usize>>,
    /// Its first batch (the worker's index) and the stride (the worker count).
    first: usize,
    stride: usize,
    batches: usize,
}

type Msg = std::result::Result<HostBatch, LoadFailure>;

/// Counts a pool's running worker threads (for tests and diagnostics).
#[derive(Debug, Clone, Default)]
pub struct LiveWorkers(Arc<AtomicUsize>);

impl LiveWorkers {
    /// Worker threads that have not finished yet.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Decrements the live count when its thread ends, however it ends.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The worker threads of a loader and their queues.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    jobs: Vec<SyncSender<Job>>,
    results: Vec<Receiver<Msg>>,
    handles: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    live: LiveWorkers,
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

impl WorkerPool {
    /// Starts `workers` threads over `dataset`, each with a result queue of `prefetch` batches.
    pub fn spawn(dataset: Arc<Dataset>, spec: LoadSpec, workers: usize, prefetch: usize) -> Result<WorkerPool> {
        let live = LiveWorkers::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut pool =
            WorkerPool { jobs: Vec::new(), results: Vec::new(), handles: Vec::new(), stop: stop.clone(), live };
        for w in 0..workers {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let (tx, rx) = sync_channel::<Msg>(prefetch);
            let (dataset, spec, stop) = (dataset.clone(), spec.clone(), stop.clone());
            pool.live.0.fetch_add(1, Ordering::SeqCst);
            let alive = Alive(pool.live.0.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("vramlab-loader-{w}"))
                .spawn(move || worker(&dataset, &spec, &job_rx, &tx, &stop, alive));
            match spawned {
                Ok(h) => pool.handles.push(h),
                Err(e) => {
                    // The closure (and its `Alive`) was dropped with the failed spawn.
                    return Err(NnError::LoaderWorker {
                        worker: w,
                        reason: format!("could not start the thread ({e}); lower num_workers"),
                    });
                }
            }
            pool.jobs.push(job_tx);
            pool.results.push(rx);
        }
        Ok(pool)
    }

    pub fn live(&self) -> &LiveWorkers {
        &self.live
    }

    /// Hands every worker its share of epoch `epoch`.
    pub fn start_epoch(&self, epoch: u64, order: &Arc<Vec<usize>>, batches: usize) -> Result<()> {
        let stride = self.jobs.len();
        for (w, tx) in self.jobs.iter().enumerate() {
            tx.send(Job { epoch, order: order.clone(), first: w, stride, batches }).map_err(|_| {
                NnError::LoaderWorker { worker: w, reason: "the worker has exited and takes no more work".into() }
            })?;
        }
        Ok(())
    }

    /// Batch `k` of the running epoch (blocks until its worker has built it).
    pub fn recv(&self, k: usize) -> Result<HostBatch> {
        let w = k % self.results.len();
        match self.results[w].recv() {
            Ok(Ok(batch)) => Ok(batch),
            Ok(Err(f)) => Err(NnError::LoadSample { sample: f.sample, worker: Some(w), reason: f.reason }),
            Err(_) => {
                Err(NnError::LoaderWorker { worker: w, reason: format!("the worker exited before sending batch {k}") })
            }
        }
    }

    /// Stops and joins every worker.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.jobs.clear();
        self.results.clear();
        for h in self.handles.drain(..) {
            // A worker's panics are caught per batch; a join error would be a
            // panic outside that (nothing left to report it to while dropping).
            let _ = h.join();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn worker(
    dataset: &Dataset,
    spec: &LoadSpec,
    jobs: &Receiver<Job>,
    results: &SyncSender<Msg>,
    stop: &AtomicBool,
    _alive: Alive,
) {
    let bs = spec.batch_size;
    while let Ok(job) = jobs.recv() {
        let mut k = job.first;
        while k < job.batches {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let start = k * bs;
            let end = (start + bs).min(job.order.len());
            let idx = &job.order[start..end];
            let mut current = idx.first().copied().unwrap_or(0);
            let mut out = HostBatch::default();
            let built =
                catch_unwind(AssertUnwindSafe(|| gather(dataset, idx, spec, job.epoch, &mut out, &mut current)));
            let msg = match built {
                Ok(Ok(())) => Ok(out),
                Ok(Err(f)) => Err(f),
                Err(payload) => {
                    Err(LoadFailure { sample: current, reason: format!("panicked: {}", panic_text(payload.as_ref())) })
                }
            };
            let failed = msg.is_err();
            if results.send(msg).is_err() || failed {
                // The loader is gone, or this epoch ended with the failure.
                break;
            }
            k += job.stride;
        }
    }
}
