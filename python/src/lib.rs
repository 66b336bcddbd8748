//! `vramlab._native`, the extension module of the Python package (`import
//! vramlab`; built by maturin from `../pyproject.toml`, PyO3 with the stable
//! ABI): the `vramlab` command and the snapshot commands in-process, over
//! `xtask::run` and `xtask::api`. The Python half (`python/vramlab/`) wraps it
//! in the package's API: `replay`, `whatif`, `diff`, `record`, their result
//! objects, the `vramlab.Error` hierarchy, the stubs.
//!
//! PyO3 without its macros (see `Cargo.toml`): the module's functions are
//! closures taking positional arguments, made in `PyInit__native`. The GIL is
//! released while a command runs; a snapshot's bytes are read where Python
//! holds them, not copied.
//!
//! The files:
//! - `src/lib.rs` — this file: the module's functions.
//! - `python/vramlab/__init__.py` — the package's surface; `__init__.pyi` its stubs, `py.typed`.
//! - `python/vramlab/_api.py` — `replay`, `whatif`, `diff` and their result objects.
//! - `python/vramlab/_record.py` — `record()`, the in-process recording.
//! - `python/vramlab/_errors.py` — the `vramlab.Error` hierarchy.
//! - `python/vramlab/_cli.py` — the `vramlab` console command.
//! - `tests/` — the pytest suite and its notebook, run by `../tests/tests/python.rs`.

use std::cell::UnsafeCell;
use std::ffi::{CStr, OsString};
use std::path::PathBuf;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCFunction, PyDict, PyTuple};
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

/// Positional argument `i` of `args`, extracted.
fn arg<'py, T: FromPyObjectOwned<'py>>(args: &Bound<'py, PyTuple>, i: usize) -> PyResult<T> {
    args.get_item(i)?.extract().map_err(Into::into)
}

/// `cli(argv)`: the `vramlab` command on `argv` (its name first), in this
/// process: its exit status.
fn cli(args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let py = args.py();
    let argv: Vec<OsString> = arg(args, 0)?;
    let status = py.detach(|| xtask::run(xtask::Program::Vramlab, argv));
    Ok(status.into_pyobject(py)?.into_any().unbind())
}

/// `replay(name, source, flags)`: `vramlab replay NAME FLAGS… --json` of
/// `source` (a path or a pickle's bytes): the JSON.
fn replay(args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let py = args.py();
    let (name, flags): (String, Vec<String>) = (arg(args, 0)?, arg(args, 2)?);
    let out = with_source(py, &name, &args.get_item(1)?, |src| api::replay(src, &flags))?;
    Ok(String::from_utf8_lossy(&out).into_pyobject(py)?.into_any().unbind())
}

/// `whatif(name, source, flags)`: `vramlab whatif NAME FLAGS… --json`: the
/// JSON and the exit status.
fn whatif(args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let py = args.py();
    let (name, flags): (String, Vec<String>) = (arg(args, 0)?, arg(args, 2)?);
    let (out, status) = with_source(py, &name, &args.get_item(1)?, |src| api::whatif(src, &flags))?;
    Ok((String::from_utf8_lossy(&out), status).into_pyobject(py)?.into_any().unbind())
}

/// `diff((name_a, name_b), a, b, flags)`: `vramlab diff A B FLAGS… --json`
/// (each a path or a pickle's bytes): the JSON.
fn diff(args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let py = args.py();
    let ((a_name, b_name), flags): ((String, String), Vec<String>) = (arg(args, 0)?, arg(args, 3)?);
    let b = args.get_item(2)?;
    let b = Held::of(&b)?;
    let b = Source { name: &b_name, input: b.input() };
    let out = with_source(py, &a_name, &args.get_item(1)?, |a| api::diff(a, &b, &flags))?;
    Ok(String::from_utf8_lossy(&out).into_pyobject(py)?.into_any().unbind())
}

/// `record_report(out, snapshots, what, status)`: `record`'s report of the
/// snapshots a recording of `what` wrote into `out`: the summary and the
/// index page's path.
fn record_report(args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let py = args.py();
    let (out, snapshots): (PathBuf, Vec<PathBuf>) = (arg(args, 0)?, arg(args, 1)?);
    let (what, status): (String, u8) = (arg(args, 2)?, arg(args, 3)?);
    let (text, index) = py.detach(|| api::record_report(&out, &snapshots, &what, status));
    Ok((text, index).into_pyobject(py)?.into_any().unbind())
}

type Function = fn(&Bound<'_, PyTuple>) -> PyResult<Py<PyAny>>;

/// The module's functions: name, docstring, body.
const FUNCTIONS: &[(&CStr, &CStr, Function)] = &[
    (c"cli", c"cli(argv): the vramlab command in this process; its exit status.", cli),
    (c"replay", c"replay(name, source, flags): vramlab replay --json; the JSON.", replay),
    (c"whatif", c"whatif(name, source, flags): vramlab whatif --json; the JSON, the exit status.", whatif),
    (c"diff", c"diff((name_a, name_b), a, b, flags): vramlab diff --json; the JSON.", diff),
    (c"record_report", c"record_report(out, snapshots, what, status): the summary, the index.", record_report),
];

/// The module's definition: CPython wants an extension module made from one.
struct Definition(UnsafeCell<ffi::PyModuleDef>);

// SAFETY: CPython reads and writes the definition only with the GIL held.
unsafe impl Sync for Definition {}

static DEFINITION: Definition = Definition(UnsafeCell::new(ffi::PyModuleDef {
    m_base: ffi::PyModuleDef_HEAD_INIT,
    m_name: c"vramlab._native".as_ptr(),
    m_doc: c"vramlab's commands in-process; the package `vramlab` wraps them.".as_ptr(),
    m_size: -1,
    m_methods: std::ptr::null_mut(),
    m_slots: std::ptr::null_mut(),
    m_traverse: None,
    m_clear: None,
    m_free: None,
}));

fn module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    // SAFETY: the definition lives as long as the process; the GIL is held.
    let m = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyModule_Create(DEFINITION.0.get()))? };
    let m = m.cast_into::<PyModule>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    for &(name, doc, body) in FUNCTIONS {
        let f =
            PyCFunction::new_closure(py, Some(name), Some(doc), move |args, _kwargs: Option<&Bound<'_, PyDict>>| {
                body(args)
            })?;
        m.add(name.to_str().unwrap_or_default(), f)?;
    }
    Ok(m)
}

/// The module's initialisation, which CPython calls on `import vramlab._native`.
///
/// # Safety
/// Called by the interpreter, with the GIL held, once per import.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn PyInit__native() -> *mut ffi::PyObject {
    Python::attach(|py| match module(py) {
        Ok(m) => m.into_ptr(),
        Err(e) => {
            e.restore(py);
            std::ptr::null_mut()
        }
    })
}
