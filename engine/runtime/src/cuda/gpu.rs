//! One opened GPU ([`Gpu`]): its context, streams, raw memory, compiled
//! kernels, and the timing of its kernels. The backend ([`super::CudaBackend`])
//! is this plus the cuBLAS and cuDNN handles.
//!
//! Kernel timing: when the device's hub has a subscriber, every launch is
//! bracketed by two timing-enabled events (cudarc's default events have timing
//! disabled). The kernel event is emitted once the closing event completes,
//! with the device's own duration, the host time the launch took, and a start
//! placed on the host clock through a calibration event. Nobody listening: no
//! events are recorded at all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, result, sys};

use super::error::{CudaError, CudaResult, DriverContext};
use super::library::CudaLib;
use super::memory::CudaMemory;
use super::streams::Streams;
use crate::alloc::StreamId;
use crate::cpu_kernels::KernelCall;
use crate::hooks::{Event, Hooks, KernelEvent, now_ns};

/// What the driver says about the device.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaInfo {
    pub ordinal: u32,
    pub name: String,
    /// Compute capability (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub total_memory_bytes: u64,
    pub l2_cache_bytes: u64,
    /// `cuDriverGetVersion`: 13000 for CUDA 13.0.
    pub driver_version: i32,
}

/// A launched kernel whose closing event has not been read yet.
struct PendingKernel {
    start: sys::CUevent,
    stop: sys::CUevent,
    name: &'static str,
    algorithm: &'static str,
    stream: StreamId,
    launch_ns: u64,
    call: KernelCall,
}

/// Timing events and the kernels waiting on them.
#[derive(Default)]
struct Timing {
    /// Reusable timing-enabled events (addresses of `CUevent`s).
    free: Vec<usize>,
    pending: VecDeque<PendingKernel>,
    /// An event recorded when the backend opened and the host time it completed
    /// at, to place device times on the host clock.
    reference: Option<(usize, u64)>,
}

// SAFETY: the raw events are only touched with the mutex held and belong to a
// context that outlives them.
unsafe impl Send for Timing {}

/// Above this many kernels waiting to be timed, a launch first waits for the
/// oldest ones (keeps the event pool bounded on long asynchronous runs).
const MAX_PENDING: usize = 4096;

/// One GPU opened: what [`super::CudaBackend`] runs its ops on.
pub struct Gpu {
    info: CudaInfo,
    ctx: Arc<CudaContext>,
    streams: Arc<Streams>,
    memory: Arc<CudaMemory>,
    hooks: Arc<Hooks>,
    event_device: u32,
    timing: Mutex<Timing>,
    functions: Mutex<std::collections::HashMap<&'static str, CudaFunction>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish_non_exhaustive()
    }
}

/// Checks for a usable driver and counts devices. Every failure says why.
pub fn probe() -> CudaResult<u32> {
    static PROBE: OnceLock<CudaResult<u32>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            CudaLib::Driver.require()?;
            result::init().during("cuInit")?;
            let mut version = 0;
            // SAFETY: the driver is loaded and initialized; `version` is written.
            unsafe { sys::cuDriverGetVersion(&mut version) }.result().during("cuDriverGetVersion")?;
            if version < 13000 {
                return Err(CudaError::DriverTooOld { found_major: version / 1000, found_minor: version % 1000 / 10 });
            }
            let n = result::device::get_count().during("cuDeviceGetCount")?;
            Ok(n.max(0) as u32)
        })
        .clone()
}

impl Gpu {
    /// Opens device `ordinal` (its primary context, as the CUDA runtime does).
    pub(super) fn open(ordinal: u32, hooks: Arc<Hooks>, event_device: u32) -> CudaResult<Gpu> {
        probe()?;
        let ctx = CudaContext::new(ordinal as usize).during("opening the device")?;
        let attr = |a: sys::CUdevice_attribute| ctx.attribute(a).during("reading a device attribute");
        let mut driver_version = 0;
        // SAFETY: the driver is initialized (`probe`).
        unsafe { sys::cuDriverGetVersion(&mut driver_version) };
        let info = CudaInfo {
            ordinal,
            name: ctx.name().during("cuDeviceGetName")?,
            compute_capability: ctx.compute_capability().during("reading the compute capability")?,
            multiprocessors: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            total_memory_bytes: ctx.total_mem().during("cuDeviceTotalMem")? as u64,
            l2_cache_bytes: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            driver_version,
        };
        let streams = Arc::new(Streams::new(&ctx)?);
        let memory = Arc::new(CudaMemory::new(format!("cuda:{ordinal}"), ctx.clone(), streams.clone()));
        let mut timing = Timing::default();
        let reference =
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).during("creating a timing event")?;
        // SAFETY: a new event recorded on the live default stream, then waited for.
        unsafe {
            result::event::record(reference, streams.cu_stream(0)).during("recording a timing event")?;
            result::event::synchronize(reference).during("waiting for a timing event")?;
        }
        timing.reference = Some((reference as usize, now_ns()));
        Ok(Gpu {
            info,
            ctx,
            streams,
            memory,
            hooks,
            event_device,
            timing: Mutex::new(timing),
            functions: Mutex::new(std::collections::HashMap::new()),
        })
    }

    pub fn info(&self) -> &CudaInfo {
        &self.info
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The raw memory the device's caching allocator sits on.
    pub fn memory(&self) -> Arc<CudaMemory> {
        self.memory.clone()
    }

    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// Stream `id` (0: the default stream).
    pub fn stream(&self, id: StreamId) -> Arc<CudaStream> {
        self.streams.get(id)
    }

    /// Makes the device's context current on this thread.
    pub fn bind(&self) -> CudaResult<()> {
        self.ctx.bind_to_thread().during("binding the context")
    }

    /// Waits for all queued work, then emits the kernel events still pending.
    pub fn synchronize(&self) -> CudaResult<()> {
        self.bind()?;
        self.streams.synchronize_all()?;
        self.poll_timings(true);
        self.refresh_reference();
        Ok(())
    }

    /// Re-stamps the calibration event while the device is idle: elapsed times
    /// are f32 milliseconds, whose resolution coarsens as the reference ages
    /// (0.25 ms after an hour), so kernel starts are placed from a recent one.
    fn refresh_reference(&self) {
        let mut timing = self.timing.lock().unwrap_or_else(|e| e.into_inner());
        if !timing.pending.is_empty() {
            return;
        }
        let Ok(e) = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT) else { return };
        // SAFETY: a new event recorded on the live default stream of an idle
        // device, then waited for; the old reference is no longer used.
        unsafe {
            if result::event::record(e, self.stream(0).cu_stream()).is_err() || result::event::synchronize(e).is_err() {
                let _ = result::event::destroy(e);
                return;
            }
            if let Some((old, _)) = timing.reference.replace((e as usize, now_ns())) {
                let _ = result::event::destroy(old as sys::CUevent);
            }
        }
    }

    /// A kernel of the backend's CUDA C source (compiled with NVRTC for this GPU
    /// on first use, then cached for the process: every backend on one GPU
    /// shares its primary context, so they share the module too).
    pub fn function(&self, name: &'static str) -> CudaResult<CudaFunction> {
        if let Some(f) = self.functions.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(f.clone());
        }
        let module = self.module()?;
        let f = module.load_function(name).during("loading a kernel")?;
        self.functions.lock().unwrap_or_else(|e| e.into_inner()).insert(name, f.clone());
        Ok(f)
    }

    fn module(&self) -> CudaResult<Arc<CudaModule>> {
        type Modules = Mutex<std::collections::HashMap<u32, Arc<CudaModule>>>;
        static MODULES: OnceLock<Modules> = OnceLock::new();
        let modules = MODULES.get_or_init(Default::default);
        // Held while compiling, so two threads do not compile the same source.
        let mut modules = modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(&self.info.ordinal) {
            return Ok(m.clone());
        }
        let (major, minor) = self.info.compute_capability;
        let ptx = super::kernels::compile(&format!("compute_{major}{minor}"))?;
        let module = self.ctx.load_module(ptx).during("loading the compiled kernels")?;
        modules.insert(self.info.ordinal, module.clone());
        Ok(module)
    }

    /// Runs `launch` (which queues work on `stream`), timing it with events when
    /// anybody listens to the device's hub, and emits a kernel event for it once
    /// the device has run it.
    pub fn run_kernel(
        &self,
        name: &'static str,
        algorithm: &'static str,
        stream: StreamId,
        call: KernelCall,
        launch: impl FnOnce(&CudaStream) -> CudaResult<()>,
    ) -> CudaResult<()> {
        self.bind()?;
        let s = self.stream(stream);
        if !self.hooks.is_active() {
            return launch(&s);
        }
        self.poll_timings(false);
        let (start, stop) = self.event_pair()?;
        // SAFETY: live events of this context; the stream is live.
        unsafe { result::event::record(start, s.cu_stream()) }.during("recording a timing event")?;
        let t0 = now_ns();
        let launched = launch(&s);
        let launch_ns = now_ns().saturating_sub(t0);
        // SAFETY: as above.
        let recorded = unsafe { result::event::record(stop, s.cu_stream()) }.during("recording a timing event");
        let mut timing = self.timing.lock().unwrap_or_else(|e| e.into_inner());
        match (launched, recorded) {
            (Ok(()), Ok(())) => {
                timing.pending.push_back(PendingKernel { start, stop, name, algorithm, stream, launch_ns, call });
                Ok(())
            }
            // Nothing ran, or it cannot be timed: no kernel event.
            (Err(e), _) | (_, Err(e)) => {
                timing.free.extend([start as usize, stop as usize]);
                Err(e)
            }
        }
    }

    /// Device time of the work `launch` queues on `stream`, in nanoseconds
    /// (waits for it, then emits the kernel events that completed). For timed
    /// ops and the autotuner.
    pub fn time_on_device(
        &self,
        stream: StreamId,
        launch: impl FnOnce(&CudaStream) -> CudaResult<()>,
    ) -> CudaResult<u64> {
        self.bind()?;
        let s = self.stream(stream);
        let (start, stop) = self.event_pair()?;
        let measured = (|| {
            // SAFETY: live events of this context; the stream is live.
            unsafe { result::event::record(start, s.cu_stream()) }.during("recording a timing event")?;
            launch(&s)?;
            // SAFETY: as above.
            unsafe {
                result::event::record(stop, s.cu_stream()).during("recording a timing event")?;
                result::event::synchronize(stop).during("waiting for a timing event")?;
                let ms = result::event::elapsed(start, stop).during("reading a timing event")?;
                Ok((f64::from(ms) * 1e6) as u64)
            }
        })();
        self.timing.lock().unwrap_or_else(|e| e.into_inner()).free.extend([start as usize, stop as usize]);
        // The timed work has finished: its kernel events (and any older ones)
        // go out now, so a timed op's event is there when the op returns.
        self.poll_timings(false);
        measured
    }

    fn event_pair(&self) -> CudaResult<(sys::CUevent, sys::CUevent)> {
        let mut timing = self.timing.lock().unwrap_or_else(|e| e.into_inner());
        let mut take = || match timing.free.pop() {
            Some(e) => Ok(e as sys::CUevent),
            None => result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).during("creating a timing event"),
        };
        Ok((take()?, take()?))
    }

    /// Emits the kernel events whose closing events have completed, oldest first;
    /// with `wait`, waits for all of them.
    pub fn poll_timings(&self, wait: bool) {
        let mut timing = self.timing.lock().unwrap_or_else(|e| e.into_inner());
        let must_wait = |t: &Timing| wait || t.pending.len() > MAX_PENDING;
        while let Some(k) = timing.pending.front() {
            // SAFETY: live events of this context.
            let done = unsafe {
                if must_wait(&timing) {
                    result::event::synchronize(k.stop).is_ok()
                } else {
                    !matches!(result::event::query(k.stop), Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY)
                }
            };
            if !done {
                break;
            }
            let k = timing.pending.pop_front().expect("front exists");
            let reference = timing.reference;
            // SAFETY: both events have completed.
            let (duration_ms, offset_ms) = unsafe {
                (
                    result::event::elapsed(k.start, k.stop).unwrap_or(0.0),
                    reference.and_then(|(e, _)| result::event::elapsed(e as sys::CUevent, k.start).ok()),
                )
            };
            let start_ns = match (reference, offset_ms) {
                (Some((_, host)), Some(ms)) => host.saturating_add_signed((f64::from(ms) * 1e6) as i64),
                _ => now_ns(),
            };
            timing.free.extend([k.start as usize, k.stop as usize]);
            let cost = k.call.cost();
            self.hooks.emit(&Event::Kernel(KernelEvent {
                name: k.name,
                algorithm: k.algorithm,
                device: self.event_device,
                stream: k.stream,
                start_ns,
                duration_ns: (f64::from(duration_ms) * 1e6) as u64,
                launch_ns: k.launch_ns,
                flops: cost.flops,
                bytes: cost.bytes,
            }));
        }
    }
}
