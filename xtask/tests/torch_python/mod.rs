//! Where the tests find a Python with torch (the capture runs the user's own torch):
//! `VRAMLAB_TORCH_PYTHON` if set, else `<target>/torch-venv/bin/python`, which
//! `scripts/torch_venv.sh` installs (torch 2.11.0, the version that recorded
//! `tests/data/torch-snapshots`). Missing, the test FAILS with the fix, under CI
//! and locally alike: a capture test never passes silently.

use std::path::PathBuf;

/// The Python with torch the capture tests run.
pub fn torch_python() -> PathBuf {
    if let Some(p) = std::env::var_os("VRAMLAB_TORCH_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.exists(), "VRAMLAB_TORCH_PYTHON={} does not exist", p.display());
        return p;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let python = target.join("torch-venv/bin/python");
    assert!(
        python.exists(),
        "no Python with torch for the capture tests at {}: run scripts/torch_venv.sh (it installs \
         torch 2.11.0 into target/torch-venv, a ~3 GB download) or set VRAMLAB_TORCH_PYTHON to a \
         python that imports torch",
        python.display()
    );
    python
}
