//! Who holds the memory: the live blocks of one device's trace at a point (the
//! allocated peak, an out-of-memory) grouped by the call path of the user's own
//! code. Frames inside torch, site-packages, the standard library, `<built-in>`
//! and C++ are folded, so a row names the user's line (`train.py:77:backward`)
//! rather than the library line every allocation passes through
//! (`linear.py:134:forward`); each row keeps its full stacks for expanding.
//! Blocks without frames say why: live before the recording began (PyTorch
//! kept no stack for them) or recorded without stacks.
//!
//! Categories (parameter, gradient, optimizer state, activation, temporary)
//! come from vramlab's own tags where a snapshot has them (`vramlab` frames
//! `tag:activation`: exact), else are inferred from the frames and the block's
//! lifetime, as PyTorch's memory profiler infers them from the ops: module
//! `_apply`/`to`/`cuda` and `torch/nn/parameter.py` make parameters; the
//! optimizer's `_init_group` makes its state, its other frames temporaries;
//! a block made in the backward pass (the autograd engine, `backward`) and
//! still alive at the next optimizer step (or never freed) is a gradient, else
//! a temporary; a block made in a module's forward and alive when the backward
//! pass starts (or with no backward after it) is an activation, else a
//! temporary. Anything else is "unknown". Each row says whether its category
//! was tagged or inferred.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::Serialize;

use crate::format::model::{Action, Frame, Snapshot, StackId};
use crate::replay::report::SnapshotReplay;
use vramlab_allocator::BlockState;

/// Full stacks kept per row, largest first.
pub const STACKS_PER_GROUP: usize = 3;
/// Longest frame text kept in a full stack (C++ template names run to kilobytes).
const MAX_FRAME_TEXT: usize = 160;

/// Where a frame's code lives: the user's own, or folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// The user's own Python code (and vramlab's tag and phase frames).
    User,
    /// Inside torch (`…/torch/…`, fx-generated `<eval_with_key>`).
    Torch,
    /// Another installed package (`site-packages`, `dist-packages`).
    SitePackages,
    /// Python's standard library (`…/lib/python3.X/…`, `<frozen …>`).
    Stdlib,
    /// `<built-in>`.
    Builtin,
    /// A C++ (or other native) frame.
    Native,
}

impl FrameKind {
    /// Frames of every kind but the user's are folded in a call path.
    pub fn folded(self) -> bool {
        self != FrameKind::User
    }
}

/// The kind of a frame, from its file name.
pub fn frame_kind(frame: &Frame) -> FrameKind {
    let f: &str = &frame.filename;
    if f == "vramlab" {
        return FrameKind::User;
    }
    if f == "<built-in>" {
        return FrameKind::Builtin;
    }
    if f.starts_with("<frozen ") {
        return FrameKind::Stdlib;
    }
    if f.starts_with("<eval_with_key>") {
        return FrameKind::Torch;
    }
    let python = f.ends_with(".py") || (f.starts_with('<') && f.ends_with('>'));
    if !python {
        return FrameKind::Native;
    }
    let path = f.replace('\\', "/");
    let in_packages = path.contains("/site-packages/") || path.contains("/dist-packages/");
    if path.contains("/torch/") || path.starts_with("torch/") {
        return FrameKind::Torch;
    }
    if in_packages {
        return FrameKind::SitePackages;
    }
    if is_stdlib(&path) {
        return FrameKind::Stdlib;
    }
    FrameKind::User
}

/// `…/lib/python3.12/x.py`, `…/lib64/python3.12/…`, `…/Lib/x.py` (Windows).
fn is_stdlib(path: &str) -> bool {
    ["/lib/python", "/lib64/python", "/Lib/"].iter().any(|marker| {
        path.find(marker).is_some_and(|at| {
            let rest = &path[at + marker.len()..];
            *marker == "/Lib/" || rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}

/// What memory is for, as PyTorch's memory profiler names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    Temporary,
    Input,
    Workspace,
    Unknown,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activation => "activations",
            Category::Temporary => "temporaries",
            Category::Input => "inputs",
            Category::Workspace => "workspace",
            Category::Unknown => "unknown",
        }
    }

    fn from_tag(tag: &str) -> Option<Category> {
        Some(match tag {
            "parameter" => Category::Parameter,
            "gradient" => Category::Gradient,
            "optimizer_state" => Category::OptimizerState,
            "activation" => Category::Activation,
            "temporary" => Category::Temporary,
            "input" => Category::Input,
            "workspace" => Category::Workspace,
            _ => return None,
        })
    }
}

/// How a category was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CategorySource {
    /// From vramlab's own tag frames: exact.
    Tagged,
    /// From the frames and the block's lifetime: a best guess.
    Inferred,
    /// Nothing to go by.
    Unknown,
}

/// Why a block has no frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoFrames {
    /// Allocated before `_record_memory_history()` began: PyTorch kept no stack.
    LiveBeforeRecording,
    /// Allocated while recording, but the recording kept no stacks
    /// (`stacks` off, `context=None`, or a layout without frames).
    RecordedWithoutStacks,
    /// Allocated while recording, which kept stacks for other blocks, with no
    /// Python frame on its own: made by a thread running no Python code —
    /// most often autograd's backward thread (the trace cannot tell which).
    NoPythonFrames,
}

impl NoFrames {
    pub fn describe(self) -> &'static str {
        match self {
            NoFrames::LiveBeforeRecording => {
                "<no frames: live before the recording began — allocated before _record_memory_history(), so PyTorch kept no stack>"
            }
            NoFrames::RecordedWithoutStacks => {
                "<no frames: recorded without stacks — _record_memory_history() kept none for this block>"
            }
            NoFrames::NoPythonFrames => {
                "<no Python frames (autograd backward): made off the Python thread while the recording kept stacks>"
            }
        }
    }

    /// Why a block allocated at `alloc` (`None`: live before the recording)
    /// has no frames, where the recording `has_stacks` for other blocks or not.
    pub(crate) fn of(alloc_seen: bool, has_stacks: bool) -> NoFrames {
        match (alloc_seen, has_stacks) {
            (false, _) => NoFrames::LiveBeforeRecording,
            (true, true) => NoFrames::NoPythonFrames,
            (true, false) => NoFrames::RecordedWithoutStacks,
        }
    }
}

/// Whether `snapshot`'s recording kept a stack for any trace entry.
pub(crate) fn recorded_stacks(snapshot: &Snapshot) -> bool {
    snapshot.device_traces.iter().flatten().any(|e| e.frames != 0 && snapshot.frames.stack(e.frames).next().is_some())
}

/// One frame of a full stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackFrame {
    /// `path:line:function` (the whole path; long C++ names cut).
    pub text: String,
    pub kind: FrameKind,
}

/// A full stack of a row, innermost first, with the bytes made there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FullStack {
    pub bytes: u64,
    pub blocks: u64,
    pub frames: Vec<StackFrame>,
}

/// One row: the live blocks of one call path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallPathGroup {
    /// What the row is called: the innermost frame of the user's code
    /// (`train.py:77:backward`), or, without one, what there is instead.
    pub label: String,
    /// The user's frames, innermost first (`file:line:function`, file's last component).
    pub user_frames: Vec<String>,
    /// The innermost folded Python frame below the user's (what their line
    /// called into), e.g. `torch/nn/modules/linear.py:125:forward`.
    pub via: Option<String>,
    /// Frames folded away (torch, packages, standard library, built-in, C++), in the largest stack.
    pub folded_frames: u64,
    /// Why the blocks have no frames, for rows of frameless blocks.
    pub no_frames: Option<NoFrames>,
    /// Requested bytes of the live blocks.
    pub bytes: u64,
    /// Of all live bytes at the point, 0 to 1.
    pub share: f64,
    pub blocks: u64,
    /// The category holding most of the row's bytes, and how it was learned.
    pub category: Category,
    pub category_source: CategorySource,
    /// The largest distinct full stacks ([`STACKS_PER_GROUP`] at most).
    pub stacks: Vec<FullStack>,
}

/// Bytes of one category at the point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryShare {
    pub category: Category,
    pub bytes: u64,
    pub share: f64,
    pub blocks: u64,
    /// Bytes of it that were tagged (exact); the rest inferred.
    pub tagged_bytes: u64,
}

/// Which point in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PointKind {
    /// The allocated peak: live after `trace_index` ran (`None`: before the first entry).
    AllocatedPeak,
    /// An out-of-memory at `trace_index`: live before the failing request.
    OutOfMemory,
}

/// A point to attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub kind: PointKind,
    /// The peak's entry (after it ran) or the failing entry (before it ran).
    pub trace_index: Option<u64>,
}

impl Point {
    /// Entries applied before the live set is read.
    fn applied(&self) -> usize {
        match (self.kind, self.trace_index) {
            (_, None) => 0,
            (PointKind::AllocatedPeak, Some(i)) => i as usize + 1,
            (PointKind::OutOfMemory, Some(i)) => i as usize,
        }
    }
}

/// The failing request of an out-of-memory point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedRequest {
    pub bytes: u64,
    pub label: String,
    pub user_frames: Vec<String>,
}

/// The attribution of one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    pub kind: PointKind,
    pub trace_index: Option<u64>,
    pub time_us: Option<i64>,
    /// Requested bytes live at the point.
    pub total_bytes: u64,
    pub blocks: u64,
    /// Every row, largest first.
    pub groups: Vec<CallPathGroup>,
    /// Bytes per category, largest first.
    pub categories: Vec<CategoryShare>,
    /// For an out-of-memory: the request that failed.
    pub request: Option<FailedRequest>,
    /// Rows left out by [`Attribution::truncate`], and their bytes.
    pub groups_not_listed: u64,
    pub bytes_not_listed: u64,
}

impl Attribution {
    /// "the allocated peak (after entry 22)" / "the out-of-memory at entry 22".
    pub fn title(&self) -> String {
        match (self.kind, self.trace_index) {
            (PointKind::AllocatedPeak, Some(i)) => format!("the allocated peak (after entry {i})"),
            (PointKind::AllocatedPeak, None) => "the allocated peak (before the first entry)".to_owned(),
            (PointKind::OutOfMemory, Some(i)) => format!("the out-of-memory at entry {i}"),
            (PointKind::OutOfMemory, None) => "the out-of-memory".to_owned(),
        }
    }

    /// Keeps the `rows` largest rows, counting the rest.
    pub fn truncate(&mut self, rows: usize) {
        if self.groups.len() > rows {
            let rest = self.groups.split_off(rows);
            self.groups_not_listed += rest.len() as u64;
            self.bytes_not_listed += rest.iter().map(|g| g.bytes).sum::<u64>();
        }
    }

    /// Whether any row's category was inferred (not tagged).
    pub fn categories_inferred(&self) -> bool {
        self.groups.iter().any(|g| g.category_source == CategorySource::Inferred)
    }
}

/// What the frames of one stack say.
#[derive(Debug, Clone)]
pub(crate) struct StackInfo {
    /// Index into the group keys.
    pub(crate) key: usize,
    tag: Option<Category>,
    parameter: bool,
    optimizer_init: bool,
    optimizer: bool,
    backward: bool,
    forward: bool,
}

/// The key of a row: the user's frames, or the stand-in label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum GroupKey {
    User(Vec<String>),
    Other(String),
    NoFrames(NoFrames),
}

pub(crate) struct Classifier<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) stacks: HashMap<StackId, StackInfo>,
    pub(crate) keys: Vec<GroupKey>,
    pub(crate) key_index: HashMap<GroupKey, usize>,
    /// Whether the recording kept a stack for any entry ([`recorded_stacks`]).
    pub(crate) has_stacks: bool,
}

impl<'a> Classifier<'a> {
    pub(crate) fn new(snapshot: &'a Snapshot) -> Classifier<'a> {
        Classifier {
            snapshot,
            stacks: HashMap::default(),
            keys: Vec::new(),
            key_index: HashMap::default(),
            has_stacks: recorded_stacks(snapshot),
        }
    }

    pub(crate) fn key(&mut self, key: GroupKey) -> usize {
        if let Some(&k) = self.key_index.get(&key) {
            return k;
        }
        self.keys.push(key.clone());
        self.key_index.insert(key, self.keys.len() - 1);
        self.keys.len() - 1
    }

    pub(crate) fn info(&mut self, stack: StackId) -> StackInfo {
        if let Some(info) = self.stacks.get(&stack) {
            return info.clone();
        }
        let frames: Vec<&Frame> = self.snapshot.frames.stack(stack).collect();
        let user: Vec<String> =
            frames.iter().filter(|f| frame_kind(f) == FrameKind::User && !is_tag(f)).map(|f| f.short()).collect();
        let mut info = StackInfo {
            key: 0,
            tag: None,
            parameter: false,
            optimizer_init: false,
            optimizer: false,
            backward: false,
            forward: false,
        };
        for f in &frames {
            let file: &str = &f.filename;
            let name: &str = &f.name;
            if file == "vramlab" {
                if let Some(tag) = name.strip_prefix("tag:") {
                    info.tag = info.tag.or(Category::from_tag(tag));
                }
                match name {
                    "phase:backward" => info.backward = true,
                    "phase:forward" => info.forward = true,
                    "phase:optimizer" | "phase:optimizer_step" => info.optimizer = true,
                    _ => {}
                }
                continue;
            }
            let path = file.replace('\\', "/");
            if path.contains("torch/optim/") {
                info.optimizer = true;
                if name.starts_with("_init") || name == "_init_group" {
                    info.optimizer_init = true;
                }
            }
            if (path.ends_with("torch/nn/modules/module.py")
                && matches!(name, "_apply" | "to" | "cuda" | "half" | "bfloat16" | "float"))
                || path.ends_with("torch/nn/parameter.py")
                || (path.contains("torch/nn/modules/") && (name == "reset_parameters" || name == "__init__"))
            {
                info.parameter = true;
            }
            if ((path.ends_with("torch/autograd/__init__.py") || path.ends_with("torch/_tensor.py"))
                && name == "backward")
                || path.ends_with("torch/autograd/graph.py")
                || name.contains("torch::autograd::Engine")
                || file == "engine.cpp"
                || name.contains("AccumulateGrad")
            {
                info.backward = true;
            }
            if (path.contains("torch/nn/modules/") && matches!(name, "forward" | "_call_impl" | "_wrapped_call_impl"))
                || path.ends_with("torch/nn/functional.py")
            {
                info.forward = true;
            }
        }
        let key = if frames.is_empty() {
            // Decided per block (live before the recording or not): this for
            // a block allocated in the trace (and a failed request).
            GroupKey::NoFrames(NoFrames::of(true, self.has_stacks))
        } else if !user.is_empty() {
            GroupKey::User(user)
        } else {
            GroupKey::Other(library_label(&frames, info.backward))
        };
        info.key = self.key(key);
        self.stacks.insert(stack, info.clone());
        info
    }
}

fn is_tag(f: &Frame) -> bool {
    &*f.filename == "vramlab" && f.name.starts_with("tag:")
}

/// The label of a stack with no frame of the user's: its innermost Python
/// frame, else the ATen op and whether the autograd engine ran it.
fn library_label(frames: &[&Frame], backward: bool) -> String {
    if let Some(f) = frames.iter().find(|f| !matches!(frame_kind(f), FrameKind::Native)) {
        return format!("{} (no frame of your code)", library_frame_text(f));
    }
    let op = frames.iter().find_map(|f| {
        let rest = f.name.strip_prefix("at::_ops::")?;
        Some(rest.split("::").next().unwrap_or(rest).to_owned())
    });
    let op = op.map_or_else(String::new, |o| format!(", aten::{o}"));
    if backward {
        format!("autograd engine{op} (C++ frames only: the backward pass runs without Python frames)")
    } else {
        format!("C++ frames only{op}")
    }
}

/// A library frame as `torch/nn/modules/linear.py:125:forward`: the path from the package on.
fn library_frame_text(f: &Frame) -> String {
    let path = f.filename.replace('\\', "/");
    let short = ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| path.find(m).map(|at| path[at + m.len()..].to_owned()))
        .or_else(|| path.find("/torch/").map(|at| path[at + 1..].to_owned()))
        .unwrap_or_else(|| path.rsplit('/').next().unwrap_or(&path).to_owned());
    format!("{short}:{}:{}", f.line, f.name)
}

pub(crate) fn frame_text(f: &Frame) -> String {
    let mut s = format!("{}:{}:{}", f.filename, f.line, f.name);
    if s.len() > MAX_FRAME_TEXT {
        let mut cut = MAX_FRAME_TEXT;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// One live block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    pub(crate) size: u64,
    pub(crate) frames: StackId,
    /// The `alloc` entry; `None` when live before the recording began.
    pub(crate) alloc: Option<usize>,
}

/// The index of the entry after which the recording's live requested bytes
/// peak (memory live before the recording included); `None`: before the first
/// entry. The same under every allocator setting: a what-if's peak to attribute.
pub fn requested_peak_index(snapshot: &Snapshot, device: usize) -> Option<u64> {
    let trace = snapshot.device_traces.get(device)?;
    let free_action = free_action(trace);
    let start = live_at_start(snapshot, device, free_action);
    let mut current: u64 = start.values().map(|l| l.size).sum();
    let mut sizes: HashMap<u64, u64> = start.iter().map(|(a, l)| (*a, l.size)).collect();
    let (mut peak, mut index) = (current, None);
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                current += e.size;
                if let Some(old) = sizes.insert(e.addr, e.size) {
                    current -= old;
                }
            }
            a if a == free_action => current -= sizes.remove(&e.addr).unwrap_or(0),
            _ => {}
        }
        if current > peak {
            (peak, index) = (current, Some(i as u64));
        }
    }
    index
}

/// The action that ends a block's life as allocated memory: `free_requested`
/// when the trace has it (PyTorch counts a block unallocated from there),
/// else `free_completed`.
pub(crate) fn free_action(trace: &[crate::format::model::TraceEntry]) -> Action {
    if trace.iter().any(|e| e.action == Action::FreeRequested) { Action::FreeRequested } else { Action::FreeCompleted }
}

/// Blocks live before the first entry: freed in the trace before any alloc at
/// their address, or allocated in the final segments and never allocated in the trace.
pub(crate) fn live_at_start(snapshot: &Snapshot, device: usize, free_action: Action) -> HashMap<u64, Live> {
    let trace = &snapshot.device_traces[device];
    let mut live = HashMap::default();
    let mut seen_alloc = HashSet::default();
    let mut freed_first = HashSet::default();
    for e in trace {
        match e.action {
            Action::Alloc => {
                seen_alloc.insert(e.addr);
            }
            a if a == free_action && !seen_alloc.contains(&e.addr) && freed_first.insert(e.addr) => {
                live.insert(e.addr, Live { size: e.size, frames: e.frames, alloc: None });
            }
            _ => {}
        }
    }
    for seg in snapshot.segments.iter().filter(|s| s.device == device as i64) {
        for b in seg.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
            if !seen_alloc.contains(&b.address) {
                live.insert(b.address, Live { size: b.requested_size, frames: b.frames, alloc: None });
            }
        }
    }
    live
}

/// The attribution of each point of `device`'s trace, in the order given.
pub fn attribute(snapshot: &Snapshot, device: usize, points: &[Point]) -> Vec<Attribution> {
    let Some(trace) = snapshot.device_traces.get(device) else { return Vec::new() };
    let free_action = free_action(trace);
    let mut classifier = Classifier::new(snapshot);
    let (free_of, backward_at, optimizer_at, start) = lifetimes(&mut classifier, snapshot, device, free_action);
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&k| points[k].applied());
    let mut live = start;
    let mut applied = 0;
    let mut out: Vec<Option<Attribution>> = vec![None; points.len()];
    for k in order {
        let p = points[k];
        let end = p.applied().min(trace.len());
        for (i, e) in trace.iter().enumerate().take(end).skip(applied) {
            match e.action {
                Action::Alloc => {
                    live.insert(e.addr, Live { size: e.size, frames: e.frames, alloc: Some(i) });
                }
                a if a == free_action => {
                    live.remove(&e.addr);
                }
                _ => {}
            }
        }
        applied = applied.max(end);
        let ctx = Lifetimes { free_of: &free_of, backward_at: &backward_at, optimizer_at: &optimizer_at };
        let mut a = group(&mut classifier, &live, &ctx, p);
        if let Some(i) = p.trace_index
            && let Some(e) = trace.get(i as usize)
        {
            a.time_us = (e.time_us != 0).then_some(e.time_us);
            if p.kind == PointKind::OutOfMemory {
                let info = classifier.info(e.frames);
                let (label, user_frames) = describe_key(&classifier.keys[info.key]);
                a.request = Some(FailedRequest { bytes: e.size, label, user_frames });
            }
        }
        out[k] = Some(a);
    }
    out.into_iter().map(|a| a.expect("every point attributed")).collect()
}

/// Each alloc's free entry (`u32::MAX`: never freed), the entries of backward
/// and optimizer code, and, in the same pass, the blocks live before the first
/// entry (as [`live_at_start`] finds them): by address, the alloc still open
/// there, or whether the address was allocated and freed since, or freed
/// before any alloc.
fn lifetimes(
    classifier: &mut Classifier,
    snapshot: &Snapshot,
    device: usize,
    free_action: Action,
) -> (Vec<u32>, Vec<usize>, Vec<usize>, HashMap<u64, Live>) {
    const CLOSED: u32 = u32::MAX;
    const FREED_FIRST: u32 = u32::MAX - 1;
    let trace = &snapshot.device_traces[device];
    let mut free_of: Vec<u32> = vec![u32::MAX; trace.len()];
    let mut seen: HashMap<u64, u32> = HashMap::default();
    let mut start: HashMap<u64, Live> = HashMap::default();
    let (mut backward_at, mut optimizer_at) = (Vec::new(), Vec::new());
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                seen.insert(e.addr, i as u32);
                let info = classifier.info(e.frames);
                if info.backward {
                    backward_at.push(i);
                }
                if info.optimizer {
                    optimizer_at.push(i);
                }
            }
            a if a == free_action => match seen.get_mut(&e.addr) {
                Some(at) if *at < FREED_FIRST => {
                    free_of[*at as usize] = i as u32;
                    *at = CLOSED;
                }
                Some(_) => {}
                None => {
                    start.insert(e.addr, Live { size: e.size, frames: e.frames, alloc: None });
                    seen.insert(e.addr, FREED_FIRST);
                }
            },
            _ => {}
        }
    }
    for seg in snapshot.segments.iter().filter(|s| s.device == device as i64) {
        for b in seg.blocks.iter().filter(|b| b.state != BlockState::Inactive) {
            if seen.get(&b.address).is_none_or(|&at| at == FREED_FIRST) {
                start.insert(b.address, Live { size: b.requested_size, frames: b.frames, alloc: None });
            }
        }
    }
    (free_of, backward_at, optimizer_at, start)
}

/// The category of every `alloc` and `oom` entry of `device`'s trace (`None`
/// for other entries), as [`attribute`] gives it to the blocks at a point.
/// A failed request (`oom`) was never allocated, so its lifetime cannot tell:
/// from its frames, a forward-pass request is an activation (or a temporary:
/// both grow with the batch), a backward-pass one a gradient when its size is
/// that of a parameter or gradient allocated in the trace (in PyTorch's 512-byte
/// units: the entry holds the rounded request), else a temporary.
pub fn entry_categories(snapshot: &Snapshot, device: usize) -> Vec<Option<(Category, CategorySource)>> {
    let Some(trace) = snapshot.device_traces.get(device) else { return Vec::new() };
    let free_action = free_action(trace);
    let mut classifier = Classifier::new(snapshot);
    let (free_of, backward_at, optimizer_at, _) = lifetimes(&mut classifier, snapshot, device, free_action);
    let ctx = Lifetimes { free_of: &free_of, backward_at: &backward_at, optimizer_at: &optimizer_at };
    let mut out: Vec<Option<(Category, CategorySource)>> = vec![None; trace.len()];
    let mut weight_sizes: HashSet<u64> = HashSet::default();
    for (i, e) in trace.iter().enumerate().filter(|(_, e)| e.action == Action::Alloc) {
        let info = classifier.info(e.frames);
        let c = category(&info, &Live { size: e.size, frames: e.frames, alloc: Some(i) }, &ctx);
        if matches!(c.0, Category::Parameter | Category::Gradient) {
            weight_sizes.insert(e.size.div_ceil(512));
        }
        out[i] = Some(c);
    }
    for (i, e) in trace.iter().enumerate().filter(|(_, e)| e.action == Action::Oom) {
        let info = classifier.info(e.frames);
        let inferred = |c| (c, CategorySource::Inferred);
        out[i] = Some(match info {
            StackInfo { tag: Some(tag), .. } => (tag, CategorySource::Tagged),
            StackInfo { optimizer_init: true, .. } => inferred(Category::OptimizerState),
            StackInfo { parameter: true, .. } => inferred(Category::Parameter),
            StackInfo { backward: true, .. } if weight_sizes.contains(&e.size.div_ceil(512)) => {
                inferred(Category::Gradient)
            }
            StackInfo { backward: true, .. } | StackInfo { optimizer: true, .. } => inferred(Category::Temporary),
            StackInfo { forward: true, .. } => inferred(Category::Activation),
            _ => (Category::Unknown, CategorySource::Unknown),
        });
    }
    out
}

struct Lifetimes<'a> {
    free_of: &'a [u32],
    backward_at: &'a [usize],
    optimizer_at: &'a [usize],
}

impl Lifetimes<'_> {
    /// Whether a block allocated at `alloc` is still allocated at the first
    /// entry of `marks` after it; `None` when no such entry follows.
    fn alive_at_next(&self, alloc: usize, marks: &[usize]) -> Option<bool> {
        let next = marks.get(marks.partition_point(|&m| m <= alloc))?;
        Some(self.free_of[alloc] as usize > *next)
    }

    fn never_freed(&self, alloc: usize) -> bool {
        self.free_of[alloc] == u32::MAX
    }
}

/// The category of one block, and how it was learned.
fn category(info: &StackInfo, block: &Live, lifetimes: &Lifetimes) -> (Category, CategorySource) {
    if let Some(tag) = info.tag {
        return (tag, CategorySource::Tagged);
    }
    let inferred = |c| (c, CategorySource::Inferred);
    if info.optimizer_init {
        return inferred(Category::OptimizerState);
    }
    if info.parameter {
        return inferred(Category::Parameter);
    }
    let Some(alloc) = block.alloc else {
        return (Category::Unknown, CategorySource::Unknown);
    };
    if info.backward {
        let kept = lifetimes.alive_at_next(alloc, lifetimes.optimizer_at).unwrap_or(lifetimes.never_freed(alloc));
        return inferred(if kept { Category::Gradient } else { Category::Temporary });
    }
    if info.optimizer {
        return inferred(Category::Temporary);
    }
    if info.forward {
        let kept = lifetimes.alive_at_next(alloc, lifetimes.backward_at).unwrap_or(true);
        return inferred(if kept { Category::Activation } else { Category::Temporary });
    }
    (Category::Unknown, CategorySource::Unknown)
}

/// A row's label and user frames from its key.
pub(crate) fn describe_key(key: &GroupKey) -> (String, Vec<String>) {
    match key {
        GroupKey::User(frames) => (frames[0].clone(), frames.clone()),
        GroupKey::Other(label) => (label.clone(), Vec::new()),
        GroupKey::NoFrames(why) => (why.describe().to_owned(), Vec::new()),
    }
}

#[derive(Default)]
struct Acc {
    bytes: u64,
    blocks: u64,
    by_stack: HashMap<StackId, (u64, u64)>,
    by_category: HashMap<(Category, CategorySource), u64>,
}

fn group(classifier: &mut Classifier, live: &HashMap<u64, Live>, lifetimes: &Lifetimes, p: Point) -> Attribution {
    let mut groups: HashMap<GroupKey, Acc> = HashMap::default();
    let mut categories: HashMap<Category, (u64, u64, u64)> = HashMap::default();
    let (mut total, mut blocks) = (0u64, 0u64);
    for block in live.values() {
        let info = classifier.info(block.frames);
        let key = if block.frames == 0 || classifier.snapshot.frames.stack(block.frames).next().is_none() {
            GroupKey::NoFrames(NoFrames::of(block.alloc.is_some(), classifier.has_stacks))
        } else {
            classifier.keys[info.key].clone()
        };
        let (cat, source) = category(&info, block, lifetimes);
        let acc = groups.entry(key).or_default();
        acc.bytes += block.size;
        acc.blocks += 1;
        let s = acc.by_stack.entry(block.frames).or_default();
        s.0 += block.size;
        s.1 += 1;
        *acc.by_category.entry((cat, source)).or_default() += block.size;
        let c = categories.entry(cat).or_default();
        c.0 += block.size;
        c.1 += 1;
        if source == CategorySource::Tagged {
            c.2 += block.size;
        }
        total += block.size;
        blocks += 1;
    }
    let share = |b: u64| if total == 0 { 0.0 } else { b as f64 / total as f64 };
    let frames = &classifier.snapshot.frames;
    let mut rows: Vec<CallPathGroup> = groups
        .into_iter()
        .map(|(key, acc)| {
            let (label, user_frames) = describe_key(&key);
            let mut stacks: Vec<(StackId, u64, u64)> = acc.by_stack.into_iter().map(|(s, (b, n))| (s, b, n)).collect();
            // The most bytes first, then the most blocks; ties by the frames
            // themselves, not by stack ids (which depend on the order a reader
            // met the stacks in).
            let frame_key = |f: &Frame| (f.filename.clone(), f.line, f.name.clone());
            stacks.sort_by(|a, b| {
                (b.1, b.2)
                    .cmp(&(a.1, a.2))
                    .then_with(|| frames.stack(a.0).map(frame_key).cmp(frames.stack(b.0).map(frame_key)))
            });
            let largest = stacks.first().map_or(0, |s| s.0);
            let largest_frames: Vec<&Frame> = frames.stack(largest).collect();
            let first_user = largest_frames.iter().position(|f| frame_kind(f) == FrameKind::User && !is_tag(f));
            let via = first_user.and_then(|u| {
                largest_frames[..u]
                    .iter()
                    .rev()
                    .find(|f| !matches!(frame_kind(f), FrameKind::Native | FrameKind::User))
                    .map(|f| library_frame_text(f))
            });
            let folded_frames = largest_frames.iter().filter(|f| frame_kind(f).folded()).count() as u64;
            let ((category, category_source), _) = acc
                .by_category
                .iter()
                .map(|(k, b)| (*k, *b))
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.0.cmp(&a.0.0)))
                .unwrap_or(((Category::Unknown, CategorySource::Unknown), 0));
            CallPathGroup {
                label,
                user_frames,
                via,
                folded_frames,
                no_frames: match key {
                    GroupKey::NoFrames(why) => Some(why),
                    _ => None,
                },
                bytes: acc.bytes,
                share: share(acc.bytes),
                blocks: acc.blocks,
                category,
                category_source,
                stacks: stacks
                    .iter()
                    .take(STACKS_PER_GROUP)
                    .filter(|s| s.0 != 0)
                    .map(|&(s, bytes, n)| FullStack {
                        bytes,
                        blocks: n,
                        frames: frames
                            .stack(s)
                            .map(|f| StackFrame { text: frame_text(f), kind: frame_kind(f) })
                            .collect(),
                    })
                    .collect(),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
    let mut categories: Vec<CategoryShare> = categories
        .into_iter()
        .map(|(category, (bytes, n, tagged))| CategoryShare {
            category,
            bytes,
            share: share(bytes),
            blocks: n,
            tagged_bytes: tagged,
        })
        .collect();
    categories.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
    Attribution {
        kind: p.kind,
        trace_index: p.trace_index,
        time_us: None,
        total_bytes: total,
        blocks,
        groups: rows,
        categories,
        request: None,
        groups_not_listed: 0,
        bytes_not_listed: 0,
    }
}

/// The points of a replay: its allocated peak, each out-of-memory it ran into,
/// and each recorded failed request it could not serve either; attributed.
pub fn replay_attribution(snapshot: &Snapshot, replay: &SnapshotReplay) -> Vec<Attribution> {
    let mut points = vec![Point { kind: PointKind::AllocatedPeak, trace_index: replay.peak_allocated_index }];
    let mut ooms: Vec<u64> = replay.ooms.iter().map(|o| o.trace_index).collect();
    ooms.extend(replay.oom_requests.iter().filter(|o| !o.served).map(|o| o.trace_index));
    ooms.sort_unstable();
    ooms.dedup();
    points.extend(ooms.into_iter().map(|i| Point { kind: PointKind::OutOfMemory, trace_index: Some(i) }));
    attribute(snapshot, replay.device, &points)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::format::model::{FrameTable, Segment, SegmentType, TraceEntry};
    use vramlab_allocator::BlockState;

    fn frame(file: &str, line: i64, name: &str) -> Frame {
        Frame { filename: Arc::from(file), line, name: Arc::from(name) }
    }

    const USER: &str = "/home/me/proj/train_gpt.py";
    const LINEAR: &str = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";
    const MODULE: &str = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py";
    const ADAM: &str = "/opt/venv/lib/python3.12/site-packages/torch/optim/adam.py";
    const TENSOR: &str = "/opt/venv/lib/python3.12/site-packages/torch/_tensor.py";

    /// Stacks, innermost first: 1 the model's weights moved by `.cuda()`, 2 a
    /// forward through nn.Linear from two lines of the user's script, 3 the
    /// same line through another library path (einops in site-packages, the
    /// standard library's functools, `<built-in>`), 4 backward (C++ only, the
    /// autograd engine), 5 Adam's state, 6 a forward of the user's own.
    fn frames() -> FrameTable {
        let frames = vec![
            frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc"), // 0
            frame("RegisterCUDA_0.cpp", 0, "at::_ops::mm::call(at::Tensor const&)"), // 1
            frame(LINEAR, 125, "forward"),                             // 2
            frame(MODULE, 1747, "_call_impl"),                         // 3
            frame(USER, 41, "forward"),                                // 4
            frame(USER, 77, "train_step"),                             // 5
            frame(USER, 120, "main"),                                  // 6
            frame(MODULE, 965, "_apply"),                              // 7
            frame(MODULE, 1097, "cuda"),                               // 8
            frame(USER, 20, "build"),                                  // 9
            frame("/opt/venv/lib/python3.12/site-packages/einops/einops.py", 412, "rearrange"), // 10
            frame("/usr/lib/python3.12/functools.py", 909, "wrapper"), // 11
            frame("<built-in>", 0, "apply"),                           // 12
            frame("engine.cpp", 0, "torch::autograd::Engine::evaluate_function"), // 13
            frame(ADAM, 150, "_init_group"),                           // 14
            frame(ADAM, 230, "step"),                                  // 15
            frame(TENSOR, 626, "backward"),                            // 16
        ];
        let stacks: Vec<Box<[u32]>> = vec![
            Box::new([]),
            Box::new([0, 7, 8, 9, 6]),
            Box::new([0, 1, 2, 3, 4, 5, 6]),
            Box::new([0, 1, 10, 11, 12, 4, 5, 6]),
            Box::new([0, 1, 13]),
            Box::new([0, 14, 15, 5, 6]),
        ];
        FrameTable { frames, stacks }
    }

    fn entry(action: Action, addr: u64, size: u64, frames: StackId) -> TraceEntry {
        TraceEntry { action, addr, size, stream: 0, time_us: 1_000 + addr as i64, frames }
    }

    fn snapshot(trace: Vec<TraceEntry>, segments: Vec<Segment>) -> Snapshot {
        Snapshot::of_one_device(trace, segments, frames())
    }

    #[test]
    fn frames_are_folded_by_where_their_code_lives() {
        let t = frames();
        let kinds: Vec<FrameKind> = t.frames.iter().map(frame_kind).collect();
        use FrameKind::*;
        assert_eq!(
            kinds,
            [
                Native,
                Native,
                Torch,
                Torch,
                User,
                User,
                User,
                Torch,
                Torch,
                User,
                SitePackages,
                Stdlib,
                Builtin,
                Native,
                Torch,
                Torch,
                Torch
            ]
        );
        assert_eq!(frame_kind(&frame("<frozen runpy>", 88, "_run_code")), Stdlib);
        assert_eq!(frame_kind(&frame("<ipython-input-3-1f2e>", 4, "<module>")), User);
        assert_eq!(frame_kind(&frame("/tmp/ipykernel_12/3456.py", 4, "<module>")), User);
        assert_eq!(frame_kind(&frame("C:\\Python312\\Lib\\functools.py", 909, "wrapper")), Stdlib);
        assert_eq!(frame_kind(&frame("vramlab", 0, "tag:activation")), User);
        assert!(!User.folded() && Torch.folded() && Native.folded());
    }

    #[test]
    fn the_peak_is_grouped_by_the_users_call_path_first() {
        let trace = vec![
            entry(Action::Alloc, 0x1000, 64 << 20, 1), // 0 weights (.cuda())
            entry(Action::Alloc, 0x2000, 8 << 20, 2),  // 1 forward via nn.Linear
            entry(Action::Alloc, 0x3000, 4 << 20, 3),  // 2 same user line via einops
            entry(Action::Alloc, 0x4000, 1 << 20, 2),  // 3 a forward temporary, freed before backward
            entry(Action::FreeRequested, 0x4000, 1 << 20, 2),
            entry(Action::Alloc, 0x5000, 16 << 20, 4), // 5 backward, kept to the optimizer step: a gradient
            entry(Action::Alloc, 0x6000, 2 << 20, 4),  // 6 backward, freed at once: a temporary
            entry(Action::Alloc, 0x7000, 32 << 20, 0), // 7 no frames though recording
            entry(Action::FreeRequested, 0x6000, 2 << 20, 4),
            entry(Action::Alloc, 0x8000, 3 << 20, 5), // 9 Adam's state: the peak is after this entry
            entry(Action::FreeRequested, 0x2000, 8 << 20, 2),
            entry(Action::FreeRequested, 0x3000, 4 << 20, 3),
            entry(Action::FreeRequested, 0x9000, 5 << 20, 0), // freed, never allocated: live before the recording
        ];
        let snap = snapshot(trace, Vec::new());
        assert_eq!(requested_peak_index(&snap, 0), Some(9));
        let a = &attribute(&snap, 0, &[Point { kind: PointKind::AllocatedPeak, trace_index: Some(9) }])[0];
        assert_eq!(a.total_bytes, (64 + 8 + 4 + 16 + 32 + 3 + 5) << 20);
        assert_eq!(a.blocks, 7);
        assert_eq!(a.title(), "the allocated peak (after entry 9)");
        assert_eq!(a.time_us, Some(1_000 + 0x8000));
        let labels: Vec<&str> = a.groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "train_gpt.py:20:build",
                NoFrames::NoPythonFrames.describe(),
                "autograd engine, aten::mm (C++ frames only: the backward pass runs without Python frames)",
                "train_gpt.py:41:forward",
                NoFrames::LiveBeforeRecording.describe(),
                "train_gpt.py:77:train_step",
            ]
        );
        // The user's line that ran through nn.Linear and through einops is one row, user frames first.
        let fwd = a.groups.iter().find(|g| g.label == "train_gpt.py:41:forward").unwrap();
        assert_eq!(fwd.bytes, 12 << 20);
        assert_eq!(fwd.blocks, 2);
        assert_eq!(fwd.user_frames, ["train_gpt.py:41:forward", "train_gpt.py:77:train_step", "train_gpt.py:120:main"]);
        assert_eq!(fwd.via.as_deref(), Some("torch/nn/modules/module.py:1747:_call_impl"));
        assert_eq!(fwd.stacks.len(), 2);
        assert_eq!(fwd.stacks[0].bytes, 8 << 20);
        assert_eq!(fwd.stacks[0].frames.len(), 7);
        assert_eq!(fwd.stacks[0].frames[2].text, format!("{LINEAR}:125:forward"));
        assert_eq!(fwd.stacks[0].frames[2].kind, FrameKind::Torch);
        assert_eq!(fwd.folded_frames, 4);
        assert_eq!((fwd.category, fwd.category_source), (Category::Activation, CategorySource::Inferred));
        assert!((fwd.share - 12.0 / 132.0).abs() < 1e-9);
        // Weights by `.cuda()`: parameters, named by the user's line.
        let w = &a.groups[0];
        assert_eq!((w.label.as_str(), w.bytes, w.category), ("train_gpt.py:20:build", 64 << 20, Category::Parameter));
        // Adam's state: the user's line that called step(), category optimizer state.
        let adam = a.groups.iter().find(|g| g.bytes == 3 << 20).unwrap();
        assert_eq!(adam.label, "train_gpt.py:77:train_step");
        assert_eq!(adam.category, Category::OptimizerState);
        assert_eq!(adam.via.as_deref(), Some("torch/optim/adam.py:230:step"));
        // Backward: the gradient alive at the optimizer step; the temporary freed before it is not live.
        let bwd = a.groups.iter().find(|g| g.label.starts_with("autograd engine")).unwrap();
        assert_eq!((bwd.bytes, bwd.category), (16 << 20, Category::Gradient));
        // Blocks without frames say why.
        let lost = a.groups.iter().find(|g| g.no_frames == Some(NoFrames::LiveBeforeRecording)).unwrap();
        assert_eq!((lost.bytes, lost.category), (5 << 20, Category::Unknown));
        // The recording kept stacks for the other blocks: this one was made off the Python thread.
        let bare = a.groups.iter().find(|g| g.no_frames == Some(NoFrames::NoPythonFrames)).unwrap();
        assert_eq!(bare.bytes, 32 << 20);
        assert_eq!(NoFrames::of(true, false), NoFrames::RecordedWithoutStacks, "no stack anywhere: none recorded");
        assert!(a.categories_inferred());
        let cats: Vec<(Category, u64)> = a.categories.iter().map(|c| (c.category, c.bytes >> 20)).collect();
        assert_eq!(
            cats,
            [
                (Category::Parameter, 64),
                (Category::Unknown, 41), // the einops path has no module forward to go by
                (Category::Gradient, 16),
                (Category::Activation, 8),
                (Category::OptimizerState, 3)
            ]
        );
    }

    #[test]
    fn an_out_of_memory_is_attributed_before_its_request_and_names_it() {
        let trace = vec![
            entry(Action::Alloc, 0x1000, 10 << 20, 2),
            entry(Action::Alloc, 0x2000, 6 << 20, 2),
            entry(Action::FreeRequested, 0x2000, 6 << 20, 2),
            entry(Action::Oom, 1 << 20, 40 << 20, 3),
        ];
        // A block of the final segments never allocated in the trace: live before the recording.
        let seg = Segment {
            device: 0,
            address: 0x10_0000,
            total_size: 2 << 20,
            stream: 0,
            segment_type: SegmentType::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: 0,
            blocks: vec![crate::format::model::Block {
                address: 0x10_0000,
                size: 2 << 20,
                requested_size: 2 << 20,
                state: BlockState::ActiveAllocated,
                frames: 0,
            }],
        };
        let snap = snapshot(trace, vec![seg]);
        let a = &attribute(&snap, 0, &[Point { kind: PointKind::OutOfMemory, trace_index: Some(3) }])[0];
        assert_eq!(a.title(), "the out-of-memory at entry 3");
        assert_eq!(a.total_bytes, 12 << 20);
        let r = a.request.as_ref().unwrap();
        assert_eq!((r.bytes, r.label.as_str()), (40 << 20, "train_gpt.py:41:forward"));
        assert_eq!(a.groups[0].label, "train_gpt.py:41:forward");
        assert_eq!(a.groups[1].no_frames, Some(NoFrames::LiveBeforeRecording));
        // Points are answered in the order asked, whatever their order in the trace.
        let both = attribute(
            &snap,
            0,
            &[
                Point { kind: PointKind::OutOfMemory, trace_index: Some(3) },
                Point { kind: PointKind::AllocatedPeak, trace_index: Some(1) },
            ],
        );
        assert_eq!(both[0].total_bytes, 12 << 20);
        assert_eq!(both[1].total_bytes, 18 << 20);
    }

    #[test]
    fn vramlab_tags_are_exact_categories() {
        let mut t = FrameTable { frames: Vec::new(), stacks: vec![Box::new([])] };
        t.frames.push(frame("vramlab", 0, "tag:optimizer_state"));
        t.frames.push(frame("vramlab", 0, "phase:optimizer"));
        t.stacks.push(Box::new([0, 1]));
        let mut snap = snapshot(vec![entry(Action::Alloc, 0x1000, 1 << 20, 1)], Vec::new());
        snap.frames = t;
        let a = &attribute(&snap, 0, &[Point { kind: PointKind::AllocatedPeak, trace_index: Some(0) }])[0];
        assert_eq!(a.groups[0].label, "vramlab:0:phase:optimizer");
        assert_eq!(
            (a.groups[0].category, a.groups[0].category_source),
            (Category::OptimizerState, CategorySource::Tagged)
        );
        assert_eq!(a.categories[0].tagged_bytes, 1 << 20);
        assert!(!a.categories_inferred());
    }
}
