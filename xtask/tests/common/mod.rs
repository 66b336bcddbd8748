//! PyTorch's `torch/cuda/_memory_viz.py` (pure Python: no torch, no GPU) for the
//! tests that check it reads vramlab's pickles: where it is, and running it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `_memory_viz.py` from VRAMLAB_MEMORY_VIZ or /work/notes/_memory_viz.py, when
/// it exists and python3 runs; `None` (the caller skips that half) otherwise.
pub fn memory_viz() -> Option<PathBuf> {
    let path = std::env::var_os("VRAMLAB_MEMORY_VIZ")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/notes/_memory_viz.py"));
    let python = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    (path.exists() && python).then_some(path)
}

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
