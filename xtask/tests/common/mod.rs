//! PyTorch's `torch/cuda/_memory_viz.py` (pure Python: no torch, no GPU) for the
//! tests that check it reads vramlab's pickles: where it is, and running it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/fetch_memory_viz.sh` puts PyTorch's `_memory_viz.py`.
pub const DEFAULT_MEMORY_VIZ: &str = "target/memory_viz/_memory_viz.py";

/// `_memory_viz.py` from VRAMLAB_MEMORY_VIZ, else [`DEFAULT_MEMORY_VIZ`] in the
/// repository, when it exists and python3 runs. Missing in CI (env `CI` set),
/// the test fails: `.ci/run` fetches it. Elsewhere `None`: the caller skips
/// that half with a note.
pub fn memory_viz() -> Option<PathBuf> {
    let path = std::env::var_os("VRAMLAB_MEMORY_VIZ")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(DEFAULT_MEMORY_VIZ));
    let python = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    let found = path.exists() && python;
    assert!(
        found || std::env::var_os("CI").is_none(),
        "PyTorch's _memory_viz.py is needed in CI: {} (python3 {}); run scripts/fetch_memory_viz.sh \
         or set VRAMLAB_MEMORY_VIZ to a torch/cuda/_memory_viz.py",
        if path.exists() { format!("{} is there", path.display()) } else { format!("{} is missing", path.display()) },
        if python { "runs" } else { "is missing" }
    );
    found.then_some(path)
}

/// The note a test prints where it skips the `_memory_viz.py` half (never in CI).
pub const SKIPPED: &str = "skipped the _memory_viz.py half: run scripts/fetch_memory_viz.sh, or set VRAMLAB_MEMORY_VIZ to PyTorch's torch/cuda/_memory_viz.py";

/// `python3 _memory_viz.py ARGS PICKLE`'s output; a failure fails the test.
pub fn run_viz(viz: &Path, args: &[&str], pickle: &Path) -> String {
    let o = Command::new("python3").arg(viz).args(args).arg(pickle).output().unwrap();
    assert!(o.status.success(), "_memory_viz.py {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `segments` and `segsum` of the pickle through the module's functions (the
/// CLI's `segments` would download flamegraph.pl): their output, one after
/// the other.
pub fn segments_and_segsum(viz: &Path, pickle: &Path) -> String {
    let code = format!(
        "import sys, pickle; sys.path.insert(0, {dir:?}); import _memory_viz as m; \
         d = pickle.load(open({file:?}, 'rb')); print(m.segments(d, format_flamegraph=lambda x: x)); print(m.segsum(d))",
        dir = viz.parent().unwrap().to_str().unwrap(),
        file = pickle.to_str().unwrap()
    );
    let o = Command::new("python3").args(["-c", &code]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
