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
mod front;
mod rules;
mod spawn;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::rank::Standing;
use crate::serve::wire::{self, Answer, Shape};
use crate::types::{Metric, Micros};

/// The build profile of this extension ("release" or "debug"); benchmarks refuse debug.
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The SIMD kernels chosen at run time on this CPU for a store of `metric` ("l2", "cos",
/// "ip"), as `stats()["simd"]` shows them: `{"vector_graph": ..., "compact_scan": ...}`.
#[pyfunction]
fn simd<'py>(py: Python<'py>, metric: &str) -> PyResult<Bound<'py, PyDict>> {
    let metric = Metric::parse(metric).map_err(|e| errors::to_py(py, e))?;
    let kernels = errors::run(py, || crate::vector::simd(metric))?;
    simd_dict(py, kernels)
}

fn simd_dict<'py>(
    py: Python<'py>,
    kernels: Vec<(&'static str, String)>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (component, kernel) in kernels {
        d.set_item(component, kernel)?;
    }
    Ok(d)
}

fn standing(
    py: Python<'_>,
    tier: &str,
    importance: f64,
    confidence: Option<f64>,
    updated_at: Option<Micros>,
    last_accessed_at: Option<Micros>,
    access_count: i64,
) -> PyResult<Standing> {
    Ok(Standing {
        tier: convert::tier(py, tier)?,
        importance,
        confidence,
        updated_at,
        last_accessed_at,
        access_count,
    })
}

/// `Memory`'s ranking helpers (API.md section 2), one implementation with `recall`'s rerank:
/// `(salience, effective_confidence, durable_score, recency, quality)` at `now`.
#[pyfunction]
#[pyo3(signature = (tier, importance, confidence, updated_at, last_accessed_at, access_count, now))]
#[allow(clippy::too_many_arguments, reason = "the fields the ranking reads")]
fn ranking(
    py: Python<'_>,
    tier: &str,
    importance: f64,
    confidence: Option<f64>,
    updated_at: Option<Micros>,
    last_accessed_at: Option<Micros>,
    access_count: i64,
    now: Micros,
) -> PyResult<(f64, f64, f64, f64, f64)> {
    let s = standing(
        py,
        tier,
        importance,
        confidence,
        updated_at,
        last_accessed_at,
        access_count,
    )?;
    Ok((
        s.salience(),
        s.effective_confidence(now),
        s.durable_score(now),
        s.recency(now),
        s.quality(now),
    ))
}

/// `crate::limits::namespace`: refuses a namespace name outside the allowed form (the one
/// rule, also for the PostgreSQL backend and the meta database's links).
#[pyfunction]
fn check_namespace(py: Python<'_>, namespace: &str) -> PyResult<()> {
    crate::limits::namespace(namespace).map_err(|e| errors::to_py(py, e))
}

/// `crate::types::normalize_content` (the one rule; `memini.normalize_content` checks the
/// text first).
#[pyfunction]
fn normalize_content(content: &str) -> String {
    crate::types::normalize_content(content)
}

/// `crate::types::fingerprint` (the one rule; `memini.fingerprint` checks the text first).
#[pyfunction]
fn fingerprint(content: &str) -> String {
    crate::types::fingerprint(content)
}

/// A served answer holding memories (`crate::serve::wire::read`) as the objects the local
/// call returns (`convert`): `RemoteStore`'s reader of searches, recalls, `get`, `list`
/// and `update`.
#[pyfunction]
fn read_answer<'py>(py: Python<'py>, data: &[u8], shape: &str) -> PyResult<Bound<'py, PyAny>> {
    let shape = Shape::parse(shape).map_err(|e| errors::to_py(py, e))?;
    Ok(match errors::run(py, || wire::read(shape, data))? {
        Answer::Memory(m) => convert::memory(py, *m)?,
        Answer::Memories(ms) => convert::memories(py, ms)?.into_any(),
        Answer::Hits(hits) => convert::hits(py, hits)?.into_any(),
        Answer::HitsMany(all) => {
            let lists = all
                .into_iter()
                .map(|hits| convert::hits(py, hits))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, lists)?.into_any()
        }
        Answer::Recalled(found) => convert::recalled(py, found)?.into_any(),
    })
}

/// `crate::limits`' maxima as module attributes (read by `memini.limits`).
fn add_limits(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use crate::limits::{
        MAX_K, MAX_LIMIT, MAX_NAMESPACES, MAX_NAMESPACE_CHARS, MAX_POOL, MAX_QUERIES,
        MAX_QUERY_CHARS,
    };
    for (name, value) in [
        ("MAX_K", MAX_K),
        ("MAX_POOL", MAX_POOL),
        ("MAX_LIMIT", MAX_LIMIT),
        ("MAX_QUERIES", MAX_QUERIES),
        ("MAX_QUERY_CHARS", MAX_QUERY_CHARS),
        ("MAX_NAMESPACES", MAX_NAMESPACES),
        ("MAX_NAMESPACE_CHARS", MAX_NAMESPACE_CHARS),
    ] {
        m.add(name, value)?;
    }
    {
        use crate::engine::recall_defaults::{
            DEFAULT_ALPHA, DEFAULT_CONTEXT, DEFAULT_KEYWORD_HALF, DEFAULT_RRF_K, MIN_POOL,
        };
        m.add("RECALL_ALPHA", DEFAULT_ALPHA)?;
        m.add("RECALL_CONTEXT", DEFAULT_CONTEXT)?;
        m.add("RECALL_KEYWORD_HALF", DEFAULT_KEYWORD_HALF)?;
        m.add("RECALL_RRF_K", DEFAULT_RRF_K)?;
        m.add("RECALL_MIN_POOL", MIN_POOL)?;
    }
    m.add_function(wrap_pyfunction!(check_namespace, m)?)
}

/// The core's `log` records, sent to Python's `logging.getLogger("memini.<module>")` by
/// pyo3-log while the interpreter runs, and dropped once it has shut down: an engine left
/// open until exit still logs while it closes (tantivy releasing its lock file), and pyo3-log
/// would then panic attaching to the finalised interpreter.
struct ToPython(pyo3_log::Logger);

impl log::Log for ToPython {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        // None: the interpreter is gone, and the record with it
        let _ = Python::try_attach(|_| self.0.log(record));
    }

    fn flush(&self) {}
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Only logger objects are cached, not levels, so a level set later still applies; DEBUG
    // is the most a record can pass (pyo3-log's own default).
    if let Ok(logger) = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::Loggers) {
        if log::set_boxed_logger(Box::new(ToPython(logger))).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
    }
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<embed::PyLocalModel>()?;
    m.add_class::<spawn::Completions>()?;
    m.add_class::<front::PyFront>()?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    m.add_function(wrap_pyfunction!(simd, m)?)?;
    m.add_function(wrap_pyfunction!(front::event_summary, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_content, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(read_answer, m)?)?;
    m.add_function(wrap_pyfunction!(front::search_event_rows, m)?)?;
    m.add_function(wrap_pyfunction!(ranking, m)?)?;
    m.add_function(wrap_pyfunction!(rules::fuse, m)?)?;
    m.add_function(wrap_pyfunction!(rules::vector_scores, m)?)?;
    m.add_function(wrap_pyfunction!(rules::coherence_sample, m)?)?;
    m.add_function(wrap_pyfunction!(rules::coherence, m)?)?;
    add_limits(m)
}
