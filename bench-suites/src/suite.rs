//! What a suite is, what a case returns, and the context they run in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use vramlab_display::chart::ChartSpec;
use vramlab_engine::device::Device;
use vramlab_engine::hooks::Hooks;

use crate::harness::HarnessConfig;
use crate::schema::{CaseResult, Finding, RunOptions, SuiteResult, TimingStats};

/// Receives progress while suites run (xtask draws progress bars from it).
/// Suites never print: this is their only way to say how far they are.
pub trait Progress: Send + Sync {
    fn suite_started(&self, suite: &str, cases: usize);
    fn case_started(&self, suite: &str, case: &str, index: usize);
    fn case_finished(&self, suite: &str, case: &CaseResult);
    fn suite_finished(&self, suite: &str);
}

/// Progress nobody watches.
#[derive(Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn suite_started(&self, _: &str, _: usize) {}
    fn case_started(&self, _: &str, _: &str, _: usize) {}
    fn case_finished(&self, _: &str, _: &CaseResult) {}
    fn suite_finished(&self, _: &str) {}
}

/// Everything a case may use.
#[derive(Clone)]
pub struct Context {
    /// The device the run targets (cuda:0 or cpu for `auto`).
    pub device: Device,
    /// Why the device is not a GPU, when it is not.
    pub gpu_unavailable: Option<String>,
    pub options: RunOptions,
    pub harness: HarnessConfig,
    /// A hub for private devices the suites create (capacity-limited CPU devices).
    pub hooks: Arc<Hooks>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.device).field("options", &self.options).finish()
    }
}

impl Context {
    pub fn quick(&self) -> bool {
        self.options.quick
    }

    pub fn seed(&self) -> u64 {
        self.options.seed
    }
}

/// What a case measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaseOutput {
    pub timing: Option<TimingStats>,
    pub metrics: BTreeMap<String, f64>,
    pub notes: Vec<String>,
    /// Set when the case does not apply here; the rest is ignored.
    pub not_available: Option<String>,
    /// In a simulated run: what the counted call ran when it follows a choice
    /// made by the clock ([`SimulatedCpu::timed_choice`](crate::SimulatedCpu::timed_choice)).
    pub timed_choice: Option<String>,
}

impl CaseOutput {
    pub fn timed(timing: TimingStats) -> CaseOutput {
        CaseOutput { timing: Some(timing), ..CaseOutput::default() }
    }

    pub fn not_available(reason: impl Into<String>) -> CaseOutput {
        CaseOutput { not_available: Some(reason.into()), ..CaseOutput::default() }
    }

    /// Adds a metric; its name must carry its unit.
    pub fn metric(mut self, name: &str, value: f64) -> CaseOutput {
        self.metrics.insert(name.to_owned(), value);
        self
    }

    pub fn note(mut self, text: impl Into<String>) -> CaseOutput {
        self.notes.push(text.into());
        self
    }

    /// In a simulated run: the counted call follows this choice, made by the clock.
    pub fn timed_choice(mut self, choice: impl Into<String>) -> CaseOutput {
        self.timed_choice = Some(choice.into());
        self
    }
}

/// A case's failure: its message is what the results record.
pub type CaseError = Box<dyn std::error::Error + Send + Sync>;

type CaseFn = Box<dyn FnOnce(&Context) -> Result<CaseOutput, CaseError> + Send>;

/// One case, ready to run.
pub struct Case {
    pub name: String,
    pub params: BTreeMap<String, serde_json::Value>,
    /// Longer than this is a failure (the work is not interrupted, but recorded as over budget).
    pub budget: Duration,
    /// Record the case's memory with the profiler (off for cases whose timing a
    /// subscriber would distort).
    pub profile: bool,
    pub(crate) run: CaseFn,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).field("params", &self.params).finish()
    }
}

impl Case {
    pub fn new(
        name: impl Into<String>,
        run: impl FnOnce(&Context) -> Result<CaseOutput, CaseError> + Send + 'static,
    ) -> Case {
        Case {
            name: name.into(),
            params: BTreeMap::new(),
            budget: Duration::from_secs(60),
            profile: true,
            run: Box::new(run),
        }
    }

    pub fn param(mut self, key: &str, value: impl Into<serde_json::Value>) -> Case {
        self.params.insert(key.to_owned(), value.into());
        self
    }

    pub fn budget(mut self, budget: Duration) -> Case {
        self.budget = budget;
        self
    }

    pub fn without_profiling(mut self) -> Case {
        self.profile = false;
        self
    }
}

/// A suite: one claim of the guides, as cases.
pub trait Suite: Send + Sync {
    /// Short name (`cpu-vs-gpu`), as `--suite` takes it.
    fn name(&self) -> &'static str;
    /// The claim(s) it measures, in a sentence.
    fn description(&self) -> &'static str;
    /// The cases to run on this context.
    fn cases(&self, ctx: &Context) -> Vec<Case>;
    /// What the results say about the claims.
    fn findings(&self, ctx: &Context, cases: &[CaseResult]) -> Vec<Finding>;
    /// The charts that show the claim, computed from the suite's results
    /// alone (the runner stores them in [`SuiteResult::charts`]; the report
    /// also calls this for results files that store none). None by default:
    /// the report then draws its generic charts (median time and peak per case).
    fn charts(&self, _result: &SuiteResult) -> Vec<ChartSpec> {
        Vec::new()
    }
}

/// Contexts for the suites' unit tests: quick mode, three fixed samples.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;
    use std::time::Duration;

    use vramlab_engine::alloc::AllocatorConfig;
    use vramlab_engine::device::{Device, DeviceId, DeviceKind};
    use vramlab_engine::hooks::Hooks;

    use super::Context;
    use crate::harness::HarnessConfig;
    use crate::schema::RunOptions;

    /// A quick context on `device`, with `hooks` for the suites' private devices.
    pub(crate) fn quick_context_on(device: Device, hooks: Arc<Hooks>) -> Context {
        Context {
            device,
            gpu_unavailable: Some("CUDA unavailable: test context".into()),
            options: RunOptions {
                suites: vec![],
                device: "cpu".into(),
                quick: true,
                samples: Some(3),
                seed: 7,
                capacity_bytes: 4 << 30,
            },
            harness: HarnessConfig {
                warmup: Duration::from_millis(1),
                fixed_samples: Some(3),
                ..HarnessConfig::quick()
            },
            hooks,
        }
    }

    /// Serializes the tests that switch the process-wide autotuner's mode (the
    /// autotune suite's) with the tests whose memory figures depend on it (a
    /// case that tunes allocates scratch outputs, which raise its peak): run
    /// side by side, an AMP case could tune or not depending on timing.
    pub(crate) fn tuner_lock() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A quick context on the process-wide cpu device.
    pub(crate) fn quick_cpu_context() -> Context {
        quick_context_on(Device::cpu(), Hooks::new())
    }

    /// A quick context whose device is private (on the context's hub), so tests
    /// running beside it on the process-wide cpu device do not show up in the
    /// runner's profiles.
    pub(crate) fn quick_private_context() -> Context {
        let hooks = Hooks::new();
        let id = DeviceId { kind: DeviceKind::Cpu, index: 0 };
        let device = Device::host(id, 4 << 30, AllocatorConfig::default(), &hooks).expect("a host device");
        quick_context_on(device, hooks)
    }
}
