//! What the tests of real H200 recordings share: the folder of PyTorch 2.11
//! snapshots recorded on an H200 (`tests/data/torch-2.11-h200`, its README
//! says how each was made) and the `torch.cuda.memory_stats()` PyTorch read
//! beside each. A missing file fails the test that needs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// `tests/data/torch-2.11-h200`, which must be there.
pub fn h200_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/torch-2.11-h200");
    assert!(dir.is_dir(), "{} is missing: the H200 recordings belong to the repository", dir.display());
    dir
}

/// The `memory_stats` PyTorch read at `NAME.pickle`'s dump, from `NAME.stats.json`.
pub fn torch_stats(dir: &Path, name: &str) -> BTreeMap<String, i64> {
    let path = dir.join(format!("{name}.stats.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v["memory_stats"].as_object().unwrap().iter().map(|(k, n)| (k.clone(), n.as_i64().unwrap())).collect()
}
