//! Stores that keep an engine part's state in a file, for the engine parts that
//! persist something but never write files themselves: [`FileTuningStore`]
//! keeps the autotuner's cache (`cudnn.benchmark`'s choices) between runs.

use std::path::{Path, PathBuf};

use vramlab_engine::autotune::TuningStore;

use crate::write_atomic;

/// The autotuner's cache in a JSON file, rewritten atomically after every new
/// tuning: `autotune::global().persist(Arc::new(FileTuningStore::new(path)))`.
#[derive(Debug, Clone)]
pub struct FileTuningStore {
    path: PathBuf,
}

impl FileTuningStore {
    pub fn new(path: impl Into<PathBuf>) -> FileTuningStore {
        FileTuningStore { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TuningStore for FileTuningStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn load(&self) -> std::io::Result<Option<Vec<u8>>> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn save(&self, bytes: &[u8]) -> std::io::Result<()> {
        write_atomic(&self.path, bytes).map_err(|e| match e {
            crate::ReportError::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vramlab_engine::autotune::{Autotuner, CacheLoad, TuneMode};
    use vramlab_engine::cpu_kernels::{Conv2dShape, ConvAlgo, ConvPass, ConvProblem, FloatDType};
    use vramlab_engine::device::Device;

    use super::*;

    #[test]
    fn the_autotuners_choices_survive_in_a_file() {
        let dir = std::env::temp_dir().join(format!("vramlab-tuning-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("nested/autotune.json");
        let problem = ConvProblem { pass: ConvPass::Forward, shape: Conv2dShape::new(1, 2, 6, 6, 2, 3, 3) };
        let fake = |a: ConvAlgo| if a == ConvAlgo::Im2colGemm { 5 } else { 50 };

        let t = Autotuner::default();
        t.set_mode(TuneMode::Benchmark);
        assert_eq!(t.persist(Arc::new(FileTuningStore::new(&path))).unwrap(), CacheLoad::Empty);
        let _: ConvAlgo = t.choose(&Device::cpu(), &problem, FloatDType::F32, |a| Ok::<_, ()>(fake(a))).unwrap();
        assert!(path.is_file(), "saved after the tuning, its folder created");

        let t2 = Autotuner::default();
        t2.set_mode(TuneMode::Benchmark);
        assert_eq!(t2.persist(Arc::new(FileTuningStore::new(&path))).unwrap(), CacheLoad::Loaded(1));
        let a: ConvAlgo = t2
            .choose(&Device::cpu(), &problem, FloatDType::F32, |_| -> Result<u64, ()> { panic!("from the file") })
            .unwrap();
        assert_eq!(a, ConvAlgo::Im2colGemm);

        std::fs::write(&path, "{ truncated").unwrap();
        let err = Autotuner::default().persist(Arc::new(FileTuningStore::new(&path))).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("not a vramlab autotuner cache"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
