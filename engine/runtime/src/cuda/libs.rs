//! Finding the CUDA libraries at run time.
//!
//! cudarc loads each library by name on its first call and panics when none of
//! its names load. So every library is *gated*: [`CudaLib::require`] runs once
//! per library, before anything of it is called, and turns absence into
//! [`CudaError::Unavailable`] naming where we looked.
//!
//! The search, in order:
//! 1. the names cudarc tries (`libcublas.so.13`, `libcublas.so`, …) on the
//!    system library path (`LD_LIBRARY_PATH`, `ldconfig`);
//! 2. the folders in `VRAMLAB_CUDA_LIBRARY_PATH` (`:`-separated);
//! 3. `$CUDA_HOME`/`$CUDA_PATH` `lib64` and `lib`, `/usr/local/cuda/lib64`;
//! 4. `nvidia/*/lib` under Python's site-packages (where PyTorch's wheels put
//!    cuBLAS, cuDNN and NVRTC): the site-packages of `$VIRTUAL_ENV`,
//!    `$CONDA_PREFIX`, `~/.local`, `/usr/local`, `/usr`, and last those that
//!    `python3` itself reports.
//!
//! A library found in a folder is loaded by full path, its companions first
//! (NVRTC's builtins, cuBLASLt, cuDNN's sub-libraries); the dynamic loader then
//! answers cudarc's load by name (`libcublas.so.13`) with the library already
//! loaded, because it matches the loaded library's `SONAME`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::{CudaError, CudaResult};
pub use super::library::CudaLib;

/// The environment variable with extra folders to search.
pub const LIBRARY_PATH_VAR: &str = "VRAMLAB_CUDA_LIBRARY_PATH";

impl CudaLib {
    /// Whether cudarc can load it now by its names.
    fn loadable(self) -> bool {
        // SAFETY: these only try to open the library (no function of it is called).
        unsafe {
            match self {
                CudaLib::Driver => cudarc::driver::sys::is_culib_present(),
                CudaLib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                CudaLib::Cublas => cudarc::cublas::sys::is_culib_present(),
                CudaLib::Cudnn => cudarc::cudnn::sys::is_culib_present(),
            }
        }
    }

    /// Makes sure the library is loadable, searching for it once per process.
    pub fn require(self) -> CudaResult<()> {
        static FOUND: [OnceLock<CudaResult<()>>; 4] = [const { OnceLock::new() }; 4];
        FOUND[self as usize].get_or_init(|| find(self)).clone()
    }

    /// Whether [`require`](Self::require) succeeds.
    pub fn is_available(self) -> bool {
        self.require().is_ok()
    }
}

fn find(lib: CudaLib) -> CudaResult<()> {
    if lib.loadable() {
        return Ok(());
    }
    let dirs = search_dirs(lib);
    for dir in &dirs {
        if preload_from(dir, lib) && lib.loadable() {
            return Ok(());
        }
    }
    let mut searched = format!("the system library path for {}", lib.stems().last().copied().unwrap_or_default());
    if !dirs.is_empty() {
        searched.push_str(", then ");
        searched.push_str(&dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Err(CudaError::Unavailable { library: lib, searched, hint: lib.hint() })
}

/// Folders to look in beyond the system path, in order, each once.
fn search_dirs(lib: CudaLib) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(extra) = std::env::var_os(LIBRARY_PATH_VAR) {
        dirs.extend(std::env::split_paths(&extra).filter(|p| !p.as_os_str().is_empty()));
    }
    if lib == CudaLib::Driver {
        // Container runtimes and WSL mount the driver's libraries here.
        dirs.extend(["/usr/local/nvidia/lib64", "/usr/lib/wsl/lib", "/usr/lib64/nvidia"].map(PathBuf::from));
    } else {
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(root) = std::env::var_os(var) {
                let root = PathBuf::from(root);
                dirs.push(root.join("lib64"));
                dirs.push(root.join("lib"));
            }
        }
        dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
        dirs.extend(wheel_dirs().iter().cloned());
    }
    let mut seen = BTreeSet::new();
    dirs.retain(|d| d.is_dir() && seen.insert(d.clone()));
    dirs
}

/// The `nvidia/*/lib` folders of every site-packages, looked up once per process
/// (it may run `python3`).
fn wheel_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| site_packages().iter().flat_map(|site| nvidia_wheel_dirs(site)).collect())
}

/// `site-packages` and `dist-packages` folders of the usual Python installs.
fn site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr"].map(PathBuf::from));
    let mut out = Vec::new();
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else { continue };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("python3") {
                    out.push(e.path().join("site-packages"));
                    out.push(e.path().join("dist-packages"));
                }
            }
        }
    }
    out.extend(python_sys_path());
    out
}

/// The folders of `python3`'s `sys.path`, for installs the fixed list misses
/// (a venv that is not activated but whose python is on `PATH`).
fn python_sys_path() -> Vec<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-I", "-c", "import sys; print('\\n'.join(p for p in sys.path if p))"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().map(PathBuf::from).collect(),
        _ => Vec::new(),
    }
}

/// `nvidia/<package>/lib` folders of NVIDIA's wheels under one site-packages
/// (`nvidia/cublas/lib` for CUDA 12 wheels, `nvidia/cu13/lib` for CUDA 13).
fn nvidia_wheel_dirs(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site.join("nvidia")) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("lib")).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

/// Loads the library's files from `dir`, dependencies first. True when the
/// library itself (the last stem) loaded.
fn preload_from(dir: &Path, lib: CudaLib) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    let names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let stems = lib.stems();
    let mut files: Vec<(usize, PathBuf)> = Vec::new();
    for (i, stem) in stems.iter().enumerate() {
        if let Some(name) = best_file(&names, stem) {
            files.push((i, dir.join(name)));
        }
    }
    if !files.iter().any(|(i, _)| *i == stems.len() - 1) {
        return false;
    }
    // Companions may depend on one another in an order we do not know: retry
    // the ones that failed for as long as some new one loads.
    let mut pending = files;
    let mut main_loaded = false;
    loop {
        let before = pending.len();
        pending.retain(|(i, path)| {
            // SAFETY: loading a CUDA library runs its initializers, as any CUDA
            // program does; nothing of it is called here.
            match unsafe { libloading::Library::new(path) } {
                Ok(l) => {
                    // Kept for the life of the process, as cudarc keeps its own.
                    std::mem::forget(l);
                    main_loaded |= *i == stems.len() - 1;
                    false
                }
                Err(_) => true,
            }
        });
        if pending.is_empty() || pending.len() == before {
            break;
        }
    }
    main_loaded
}

/// The file for `stem` in a folder listing: `stem.so.N` (the name the loader
/// matches) before `stem.so.N.M…` before `stem.so`.
fn best_file<'a>(names: &'a [String], stem: &str) -> Option<&'a str> {
    let prefix = format!("{stem}.so");
    names
        .iter()
        .filter(|n| n.strip_prefix(&prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('.')))
        .min_by_key(|n| {
            let rest = &n[prefix.len()..];
            let dots = rest.matches('.').count();
            (
                if dots == 1 {
                    0
                } else if dots == 0 {
                    2
                } else {
                    1
                },
                n.len(),
            )
        })
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn best_file_prefers_the_soname() {
        let n = names(&["libcublas.so", "libcublas.so.13.0.2.14", "libcublas.so.13", "libcublasLt.so.13"]);
        assert_eq!(best_file(&n, "libcublas"), Some("libcublas.so.13"));
        assert_eq!(best_file(&n, "libcublasLt"), Some("libcublasLt.so.13"));
        let n = names(&["libnvrtc-builtins.so.13.0", "libnvrtc.so.13", "libnvrtc.alt.so.13"]);
        assert_eq!(best_file(&n, "libnvrtc-builtins"), Some("libnvrtc-builtins.so.13.0"));
        assert_eq!(best_file(&n, "libnvrtc"), Some("libnvrtc.so.13"));
        assert_eq!(best_file(&names(&["libcudnn_ops.so.9"]), "libcudnn"), None);
        assert_eq!(best_file(&names(&["libcuda.so"]), "libcuda"), Some("libcuda.so"));
    }

    #[test]
    fn wheel_dirs_are_found() {
        let root = std::env::temp_dir().join(format!("vramlab-libs-{}", std::process::id()));
        for pkg in ["cublas", "cu13", "cudnn"] {
            std::fs::create_dir_all(root.join("nvidia").join(pkg).join("lib")).unwrap();
        }
        std::fs::create_dir_all(root.join("nvidia").join("nolib")).unwrap();
        let dirs = nvidia_wheel_dirs(&root);
        let got: Vec<String> =
            dirs.iter().map(|d| d.strip_prefix(&root).unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(got, ["nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cudnn/lib"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_folder_without_the_library_loads_nothing() {
        let dir = std::env::temp_dir().join(format!("vramlab-nolib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A file with the right name that is not a library: loading fails cleanly.
        std::fs::write(dir.join("libcudnn.so.9"), b"not an ELF file").unwrap();
        assert!(!preload_from(&dir, CudaLib::Cudnn));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn absence_is_a_typed_error_naming_the_search() {
        for lib in CudaLib::ALL {
            match lib.require() {
                Ok(()) => {}
                Err(e @ CudaError::Unavailable { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.starts_with("unavailable: "), "{msg}");
                    assert!(msg.contains("not found (searched the system library path"), "{msg}");
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }
}
