//! `vramlab._native`, the extension module of the Python package (`import
//! vramlab`; built by maturin from `../pyproject.toml`, PyO3 with the stable
//! ABI): the `vramlab` command and the snapshot commands in-process, over
//! `xtask::run` and `xtask::api`. The Python half (`python/vramlab/`) wraps it
//! in the package's API: `replay`, `whatif`, `diff`, `record`, their result
//! objects, the `vramlab.Error` hierarchy, the stubs.
//!
//! The GIL is released while a command runs; a snapshot's bytes are read
//! where Python holds them, not copied.
//!
//! The files:
//! - `src/lib.rs` — this file: the module's functions.
//! - `python/vramlab/__init__.py` — the package's surface; `__init__.pyi` its stubs, `py.typed`.
//! - `python/vramlab/_api.py` — `replay`, `whatif`, `diff` and their result objects.
//! - `python/vramlab/_record.py` — `record()`, the in-process recording.
//! - `python/vramlab/_errors.py` — the `vramlab.Error` hierarchy.
//! - `python/vramlab/_cli.py` — the `vramlab` console command.
//! - `tests/` — the pytest suite and its notebook, run by `../tests/tests/python.rs`.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use xtask::api::{self, ApiError, ErrorKind, Input, Source};

/// The `vramlab.Error` subclass of `e`, raised with its message and exit status.
fn raise(py: Python<'_>, e: ApiError) -> PyErr {
    let class = match e.kind {
        ErrorKind::Usage => "UsageError",
        ErrorKind::Snapshot => "SnapshotError",
        ErrorKind::Replay => "ReplayError",
        ErrorKind::Report => "ReportError",
    };
    let made = py
        .import("vramlab._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((e.message.clone(), e.exit_status)));
    match made {
        Ok(err) => PyErr::from_value(err),
        Err(import_failed) => import_failed,
    }
}

/// A snapshot as Python gave it: a pickle's bytes (read where Python holds
/// them) or a path.
enum Held<'a> {
    Bytes(&'a [u8]),
    Path(PathBuf),
}

impl<'a> Held<'a> {
    fn of(source: &'a Bound<'_, PyAny>) -> PyResult<Held<'a>> {
        match source.cast::<PyBytes>() {
            Ok(bytes) => Ok(Held::Bytes(bytes.as_bytes())),
            Err(_) => Ok(Held::Path(source.extract()?)),
        }
    }

    fn input(&self) -> Input<'_> {
        match self {
            Held::Bytes(bytes) => Input::Bytes(bytes),
            Held::Path(path) => Input::Path(path),
        }
    }
}

/// Runs `f` on the snapshot `source`, the GIL released.
fn with_source<T: Send>(
    py: Python<'_>,
    name: &str,
    source: &Bound<'_, PyAny>,
    f: impl FnOnce(&Source<'_>) -> Result<T, ApiError> + Send,
) -> PyResult<T> {
    let held = Held::of(source)?;
    let input = held.input();
    py.detach(|| f(&Source { name, input })).map_err(|e| raise(py, e))
}

/// The `vramlab` command on `argv` (its name first), in this process: its exit status.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| xtask::run(xtask::Program::Vramlab, argv))
}

/// `vramlab replay NAME FLAGS… --json` of `source` (a path or a pickle's bytes): the JSON.
#[pyfunction]
fn replay(py: Python<'_>, name: &str, source: &Bound<'_, PyAny>, flags: Vec<String>) -> PyResult<String> {
    let out = with_source(py, name, source, |src| api::replay(src, &flags))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `vramlab whatif NAME FLAGS… --json`: the JSON and the exit status.
#[pyfunction]
fn whatif(py: Python<'_>, name: &str, source: &Bound<'_, PyAny>, flags: Vec<String>) -> PyResult<(String, u8)> {
    let (out, status) = with_source(py, name, source, |src| api::whatif(src, &flags))?;
    Ok((String::from_utf8_lossy(&out).into_owned(), status))
}

/// `vramlab diff A B FLAGS… --json` (each a path or a pickle's bytes): the JSON.
#[pyfunction]
fn diff(
    py: Python<'_>,
    names: (String, String),
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    flags: Vec<String>,
) -> PyResult<String> {
    let b = Held::of(b)?;
    let b = Source { name: &names.1, input: b.input() };
    let out = with_source(py, &names.0, a, |a| api::diff(a, &b, &flags))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `record`'s report of the snapshots a recording of `what` wrote into `out`:
/// the summary and the index page's path.
#[pyfunction]
fn record_report(
    py: Python<'_>,
    out: PathBuf,
    snapshots: Vec<PathBuf>,
    what: String,
    status: u8,
) -> (String, Option<PathBuf>) {
    py.detach(|| api::record_report(&out, &snapshots, &what, status))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(whatif, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(record_report, m)?)?;
    Ok(())
}
