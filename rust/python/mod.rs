//! The Python binding (`memini._core`): the only place pyo3 and numpy appear.
//!
//! Every method does three steps: (a) extract Python arguments into owned Rust values
//! (`convert`), (b) run the core with the GIL released, converting the error in one place
//! (`errors::run`), (c) build the Python result.

#![allow(
    clippy::needless_pass_by_value,
    reason = "pyo3 extracts arguments into owned values: step (a) of every binding method"
)]

mod convert;
mod embed;
mod engine;
mod errors;

use pyo3::prelude::*;

/// The build profile of this extension ("release" or "debug"); benchmarks refuse debug.
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The core's `log` records go to Python's `logging.getLogger("memini.<module>")`.
    // Only logger objects are cached, not levels, so a level set later still applies.
    if let Ok(logger) = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::Loggers) {
        let _ = logger.install();
    }
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<embed::PyLocalModel>()?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    Ok(())
}
