//! The one translation from the core's `Error` to the `memini.errors` tree, and the helper
//! that runs core work with the GIL released (catching panics, which must never cross FFI).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::error::Error;

/// Raises the `memini.errors` class named `class` with `msg`.
pub fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    let ty = py
        .import("memini.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match ty {
        Ok(ty) => PyErr::from_type(ty, msg),
        Err(e) => e,
    }
}

/// Converts a core error into its Python exception.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::NotFound(_) => "NotFoundError",
        Error::Conflict(_) => "ConflictError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::DimensionMismatch(_) => "DimensionMismatchError",
        Error::Closed => "StoreClosedError",
        Error::Locked(_) => "StoreLockedError",
        Error::Corruption(_) => "CorruptionError",
        Error::Storage(_) => "MeminiError",
    };
    raise(py, class, e.to_string())
}

/// Runs `f` without the GIL; errors and panics become `memini.errors` exceptions.
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> crate::Result<T> + Send) -> PyResult<T> {
    outcome(py, py.detach(|| catch_unwind(AssertUnwindSafe(f))))
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
            Err(raise(
                py,
                "MeminiError",
                format!("internal error in the memini core (please report it): {what}"),
            ))
        }
    }
}
