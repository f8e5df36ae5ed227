//! The one translation from the core's `Error` to the `memini.errors` tree, and the helper
//! that runs core work with the GIL released (catching panics, which must never cross FFI).
//!
//! The exception classes are defined in Python (`memini/errors.py`: some derive from two
//! bases, e.g. `NotFoundError(MeminiError, LookupError)`) and imported once per process into
//! [`Classes`]; raising one is then a field read, never a lookup by name. An error with an
//! operating-system error beneath it (a full disk, a refused permission) raises with an
//! `OSError` of that errno as its `__cause__`, so Python callers tell them apart too.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::error::{Error, Interrupt};

/// The `memini.errors` classes the core's errors become.
struct Classes {
    memini: Py<PyType>,
    not_found: Py<PyType>,
    conflict: Py<PyType>,
    invalid_argument: Py<PyType>,
    dimension_mismatch: Py<PyType>,
    store_closed: Py<PyType>,
    store_locked: Py<PyType>,
    corruption: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

impl Classes {
    /// The classes, imported from `memini.errors` on first use.
    fn get(py: Python<'_>) -> PyResult<&'static Self> {
        CLASSES.get_or_try_init(py, || {
            let module = py.import("memini.errors")?;
            let class = |name: &str| -> PyResult<Py<PyType>> {
                Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind())
            };
            Ok(Self {
                memini: class("MeminiError")?,
                not_found: class("NotFoundError")?,
                conflict: class("ConflictError")?,
                invalid_argument: class("InvalidArgumentError")?,
                dimension_mismatch: class("DimensionMismatchError")?,
                store_closed: class("StoreClosedError")?,
                store_locked: class("StoreLockedError")?,
                corruption: class("CorruptionError")?,
            })
        })
    }

    /// The class of core error `e`.
    fn of(&self, e: &Error) -> &Py<PyType> {
        match e {
            Error::NotFound(_) => &self.not_found,
            Error::Conflict(_) => &self.conflict,
            Error::InvalidArgument(_) => &self.invalid_argument,
            Error::DimensionMismatch(_) => &self.dimension_mismatch,
            Error::Closed => &self.store_closed,
            Error::Locked(_) => &self.store_locked,
            Error::Corruption(_) => &self.corruption,
            // storage failures (I/O, redb, tantivy, usearch, ...) and kinds added later
            _ => &self.memini,
        }
    }
}

/// Converts a core error into its Python exception.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let classes = match Classes::get(py) {
        Ok(c) => c,
        Err(import) => return import,
    };
    let err = PyErr::from_type(classes.of(&e).bind(py).clone(), e.to_string());
    if let Some(errno) = e.io_error().and_then(std::io::Error::raw_os_error) {
        let cause = e.io_error().map(ToString::to_string).unwrap_or_default();
        err.set_cause(py, Some(PyOSError::new_err((errno, cause))));
    }
    err
}

/// Runs `f` without the GIL; errors and panics become `memini.errors` exceptions.
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> crate::Result<T> + Send) -> PyResult<T> {
    outcome(py, py.detach(|| catch_unwind(AssertUnwindSafe(f))))
}

/// [`run`] for long calls: `f` gets an [`Interrupt`] that takes the GIL back briefly to run
/// Python's signal handlers (they run on the main thread only), so Ctrl-C stops the call at
/// its next check and raises what the handler raised (`KeyboardInterrupt`).
pub fn run_interruptible<T: Send>(
    py: Python<'_>,
    f: impl FnOnce(&Interrupt) -> crate::Result<T> + Send,
) -> PyResult<T> {
    let raised: Arc<parking_lot::Mutex<Option<PyErr>>> = Arc::default();
    let seen = Arc::clone(&raised);
    #[allow(
        clippy::redundant_closure_for_method_calls,
        reason = "Python::check_signals itself is not general enough over the lifetime"
    )]
    let interrupt: Interrupt = Arc::new(move || {
        Python::attach(|py| py.check_signals()).map_err(|e| {
            *seen.lock() = Some(e);
            Error::Interrupted
        })
    });
    let done = py.detach(|| catch_unwind(AssertUnwindSafe(|| f(&interrupt))));
    // a handler that raised consumed its signal: its exception is the call's outcome
    if let Some(e) = raised.lock().take() {
        return Err(e);
    }
    outcome(py, done)
}

/// The result of core work run under `catch_unwind`: its error or panic as a `memini.errors`
/// exception (for `run`, and for the calls `spawn` runs on the binding's own threads).
pub fn outcome<T>(py: Python<'_>, done: std::thread::Result<crate::Result<T>>) -> PyResult<T> {
    match done {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let msg = format!("internal error in the memini core (please report it): {what}");
            Err(match Classes::get(py) {
                Ok(c) => PyErr::from_type(c.memini.bind(py).clone(), msg),
                Err(import) => import,
            })
        }
    }
}
