//! `memini._core.Engine`: a frozen pyclass over the thread-safe core engine.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::convert;
use super::errors::{run, run_interruptible, to_py};
use super::spawn::{spawn, Completions, Reply};
use crate::engine::{Engine, FaultPoint, Options, RecallQuery, Source};
use crate::error::{Error, INTERRUPT_EVERY};
use crate::types::{Metric, Micros, Tier};

/// The Rust engine: rows, columns, both indexes. Thread-safe; every call releases the GIL.
#[pyclass(frozen, name = "Engine", module = "memini._core")]
pub struct PyEngine {
    /// Shared with the HTTP front (`crate::serve`), which answers hot routes itself.
    engine: Arc<Engine>,
}

impl PyEngine {
    /// The engine, for the HTTP front.
    pub fn shared(&self) -> Arc<Engine> {
        self.engine.clone()
    }
}

impl Drop for PyEngine {
    /// An engine garbage-collected without `close()` closes here with the GIL released: its
    /// background threads (keyword folding, tantivy merges) log through Python, and would wait
    /// forever for a GIL held by the thread that waits for them to stop.
    fn drop(&mut self) {
        let engine = &self.engine;
        if let Some(Err(e)) = Python::try_attach(|py| py.detach(|| engine.close())) {
            log::error!("closing the store: {e}");
        }
    }
}

fn tiers<'py>(py: Python<'py>, ts: Vec<Tier>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, ts.into_iter().map(Tier::as_str))
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (path, dims, metric, *, rebuild_indexes = false))]
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        dims: Option<i64>,
        metric: Option<String>,
        rebuild_indexes: bool,
    ) -> PyResult<Self> {
        let dims = match dims {
            Some(d) if d < 1 => {
                return Err(to_py(
                    py,
                    Error::invalid(format!("dims must be >= 1, got {d}")),
                ))
            }
            Some(d) => Some(
                usize::try_from(d).map_err(|_| to_py(py, Error::invalid("dims is too large")))?,
            ),
            None => None,
        };
        let metric = metric
            .map(|m| Metric::parse(&m).map_err(|e| to_py(py, Error::invalid(e.to_string()))))
            .transpose()?;
        let engine = run(py, || {
            Engine::open(
                path.as_deref(),
                &Options {
                    dims,
                    metric,
                    rebuild_indexes,
                    ..Options::default()
                },
            )
        })?;
        Ok(Self {
            engine: Arc::new(engine),
        })
    }

    #[getter]
    fn dims(&self, py: Python<'_>) -> PyResult<usize> {
        run(py, || self.engine.dims())
    }

    #[getter]
    fn metric(&self, py: Python<'_>) -> PyResult<&'static str> {
        run(py, || self.engine.metric().map(Metric::as_str))
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.engine.close())
    }

    fn set_search_breadth(&self, py: Python<'_>, breadth: usize) -> PyResult<()> {
        run(py, || self.engine.set_search_breadth(breadth))
    }

    fn ping(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.engine.ping())
    }

    /// For tests: the next `times` passes through a failpoint fail as a broken disk would.
    fn inject_fault(&self, py: Python<'_>, point: &str, times: u32) -> PyResult<()> {
        let point = match point {
            "vector_apply" => FaultPoint::VectorApply,
            "keyword_apply" => FaultPoint::KeywordApply,
            "repair" => FaultPoint::Repair,
            "write" => FaultPoint::Write,
            "checkpoint" => FaultPoint::Checkpoint,
            other => {
                return Err(to_py(
                    py,
                    Error::invalid(format!(
                        "unknown failpoint {other:?} \
                         (vector_apply, keyword_apply, repair, write, checkpoint)"
                    )),
                ))
            }
        };
        run(py, || self.engine.inject_fault(point, times))
    }

    fn upsert_many(&self, py: Python<'_>, rows: Vec<Bound<'_, PyDict>>) -> PyResult<Vec<bool>> {
        let mut ms = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            if i.is_multiple_of(INTERRUPT_EVERY) {
                py.check_signals()?;
            }
            ms.push(convert::new_memory(row)?);
        }
        run_interruptible(py, |interrupt| {
            self.engine.upsert_many_interruptible(ms, interrupt)
        })
    }

    fn update<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        id: String,
        fields: Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let patch = convert::patch(&fields)?;
        let m = run(py, || self.engine.update(&namespace, &id, patch))?;
        convert::memory(py, m)
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = run(py, || self.engine.get(&namespace, &id))?;
        convert::memory(py, m)
    }

    fn get_embedding<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        id: String,
    ) -> PyResult<Option<Bound<'py, numpy::PyArray1<f32>>>> {
        let v = run(py, || self.engine.get_embedding(&namespace, &id))?;
        Ok(v.map(|v| convert::array(py, v)))
    }

    fn ids_by_prefix(
        &self,
        py: Python<'_>,
        namespace: String,
        prefix: String,
        limit: i64,
    ) -> PyResult<Vec<String>> {
        run(py, || self.engine.ids_by_prefix(&namespace, &prefix, limit))
    }

    fn predecessor_ids(
        &self,
        py: Python<'_>,
        namespace: String,
        id: String,
    ) -> PyResult<Vec<String>> {
        run(py, || self.engine.predecessor_ids(&namespace, &id))
    }

    fn get_by_fingerprint<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        tier: String,
        fingerprint: String,
        now: Micros,
    ) -> PyResult<Bound<'py, PyAny>> {
        let tier = convert::tier(py, &tier)?;
        let m = run(py, || {
            self.engine
                .get_by_fingerprint(&namespace, tier, &fingerprint, now)
        })?;
        convert::memory(py, m)
    }

    fn delete<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = run(py, || self.engine.delete(&namespace, &id))?;
        convert::memory(py, m)
    }

    fn set_superseded(
        &self,
        py: Python<'_>,
        namespace: String,
        id: String,
        superseded_by: String,
        now: Micros,
    ) -> PyResult<()> {
        run(py, || {
            self.engine
                .set_superseded(&namespace, &id, &superseded_by, now)
        })
    }

    fn restore(&self, py: Python<'_>, namespace: String, id: String) -> PyResult<()> {
        run(py, || self.engine.restore(&namespace, &id))
    }

    #[pyo3(signature = (namespace, ids, accessed_at, new_expiry))]
    fn reinforce(
        &self,
        py: Python<'_>,
        namespace: String,
        ids: Vec<String>,
        accessed_at: Micros,
        new_expiry: Option<Micros>,
    ) -> PyResult<()> {
        run(py, || {
            self.engine
                .reinforce(&namespace, ids, accessed_at, new_expiry)
        })
    }

    fn delete_if_expired_before<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        id: String,
        cutoff: Micros,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = run(py, || {
            self.engine
                .delete_if_expired_before(&namespace, &id, cutoff)
        })?;
        convert::memory(py, m)
    }

    fn list_expired<'py>(
        &self,
        py: Python<'py>,
        now: Micros,
        limit: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let ms = run(py, || self.engine.list_expired(now, limit))?;
        convert::memories(py, ms)
    }

    fn list<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        filter: Bound<'py, PyDict>,
        limit: i64,
        offset: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let spec = convert::filter(&filter)?;
        let ms = run(py, || self.engine.list(&namespace, &spec, limit, offset))?;
        convert::memories(py, ms)
    }

    fn count(
        &self,
        py: Python<'_>,
        namespace: String,
        filter: Bound<'_, PyDict>,
    ) -> PyResult<usize> {
        let spec = convert::filter(&filter)?;
        run(py, || self.engine.count(&namespace, &spec))
    }

    fn sweep_expired<'py>(
        &self,
        py: Python<'py>,
        now: Micros,
        limit: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let ts = run(py, || self.engine.sweep_expired(now, limit))?;
        tiers(py, ts)
    }

    fn list_namespaces(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        run(py, || self.engine.list_namespaces())
    }

    fn delete_namespace<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
    ) -> PyResult<Bound<'py, PyList>> {
        let ts = run(py, || self.engine.delete_namespace(&namespace))?;
        tiers(py, ts)
    }

    fn reassign(
        &self,
        py: Python<'_>,
        from_ns: String,
        ids: Vec<String>,
        to_ns: String,
    ) -> PyResult<usize> {
        run(py, || self.engine.reassign(&from_ns, ids, &to_ns))
    }

    #[pyo3(signature = (namespace, id, tier, expires_at))]
    fn retier(
        &self,
        py: Python<'_>,
        namespace: String,
        id: String,
        tier: String,
        expires_at: Option<Micros>,
    ) -> PyResult<()> {
        let tier = convert::tier(py, &tier)?;
        run(py, || self.engine.retier(&namespace, &id, tier, expires_at))
    }

    fn set_confidence(
        &self,
        py: Python<'_>,
        namespace: String,
        id: String,
        confidence: f64,
        now: Micros,
    ) -> PyResult<()> {
        run(py, || {
            self.engine.set_confidence(&namespace, &id, confidence, now)
        })
    }

    fn mark_contradicted(
        &self,
        py: Python<'_>,
        namespace: String,
        id: String,
        contradicted_by: String,
        confidence: f64,
        now: Micros,
    ) -> PyResult<()> {
        run(py, || {
            self.engine
                .mark_contradicted(&namespace, &id, &contradicted_by, confidence, now)
        })
    }

    fn namespace_activity(
        &self,
        py: Python<'_>,
        now: Micros,
    ) -> PyResult<Vec<(String, usize, Micros)>> {
        run(py, || self.engine.namespace_activity(now))
    }

    fn active_by_tier(&self, py: Python<'_>, now: Micros) -> PyResult<Vec<(&'static str, usize)>> {
        let v = run(py, || self.engine.active_by_tier(now))?;
        Ok(v.into_iter().map(|(t, n)| (t.as_str(), n)).collect())
    }

    fn setting(&self, py: Python<'_>, key: String) -> PyResult<Option<String>> {
        run(py, || self.engine.setting(&key))
    }

    fn set_setting(&self, py: Python<'_>, key: String, value: String) -> PyResult<()> {
        run(py, || self.engine.set_setting(&key, &value))
    }

    fn embed_model(&self, py: Python<'_>) -> PyResult<String> {
        run(py, || self.engine.embed_model())
    }

    fn set_embed_model(&self, py: Python<'_>, model: String) -> PyResult<()> {
        run(py, || self.engine.set_embed_model(&model))
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = run(py, || self.engine.stats())?;
        let d = PyDict::new(py);
        d.set_item("rows", s.rows)?;
        let nss = PyDict::new(py);
        for (name, n, by_tier, vectors) in s.namespaces {
            let e = PyDict::new(py);
            e.set_item("rows", n)?;
            e.set_item("vectors", vectors)?;
            for t in Tier::ALL {
                e.set_item(t.as_str(), by_tier[*t as usize])?;
            }
            nss.set_item(name, e)?;
        }
        d.set_item("namespaces", nss)?;
        d.set_item("vector_graphs", s.vector_graphs)?;
        d.set_item("vector_flat_partitions", s.vector_flat_partitions)?;
        d.set_item("vector_memory_bytes", s.vector_memory_bytes)?;
        d.set_item("vector_index_entries", s.vector_index_entries)?;
        d.set_item("vector_pending", s.vector_pending)?;
        let routes = PyDict::new(py);
        for (route, n) in s.vector_routes {
            routes.set_item(route.as_str(), n)?;
        }
        d.set_item("vector_routes", routes)?;
        d.set_item("checkpoints", s.checkpoints)?;
        d.set_item("checkpoint_failures", s.checkpoint_failures.0)?;
        d.set_item("last_checkpoint_error", s.checkpoint_failures.1)?;
        d.set_item("keyword_failures", s.keyword_failures.0)?;
        d.set_item("last_keyword_error", s.keyword_failures.1)?;
        d.set_item("changes_since_checkpoint", s.changes_since_checkpoint)?;
        d.set_item("keyword_docs", s.keyword_docs)?;
        d.set_item("keyword_segments", s.keyword_segments)?;
        d.set_item("keyword_merging", s.keyword_merging)?;
        d.set_item("bytes_on_disk", s.bytes_on_disk)?;
        d.set_item("dims", s.dims)?;
        d.set_item("metric", s.metric.as_str())?;
        d.set_item("simd", super::simd_dict(py, s.simd)?)?;
        Ok(d)
    }

    fn backup(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        run(py, || self.engine.backup(&path))
    }

    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.engine.compact())
    }

    fn vector_search<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        vector: Bound<'py, PyArray1<f32>>,
        filter: Bound<'py, PyDict>,
        k: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let q = convert::vector(Some(&vector))?.unwrap_or_default();
        let spec = convert::filter(&filter)?;
        let k = usize::try_from(k).unwrap_or(0);
        let hits = run(py, || self.engine.vector_search(&namespace, &q, &spec, k))?;
        convert::hits(py, hits)
    }

    fn vector_search_many<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        vectors: PyReadonlyArray2<'py, f32>,
        filter: Bound<'py, PyDict>,
        k: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let arr = vectors.as_array();
        let qs: Vec<Vec<f32>> = arr
            .rows()
            .into_iter()
            .map(|r| r.iter().copied().collect())
            .collect();
        let spec = convert::filter(&filter)?;
        let k = usize::try_from(k).unwrap_or(0);
        let results = run(py, || {
            let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
            self.engine.vector_search_many(&namespace, &refs, &spec, k)
        })?;
        let lists = results
            .into_iter()
            .map(|h| convert::hits(py, h))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }

    /// `vector_search` on one of the binding's threads (see `spawn`): returns at once;
    /// `done(error, hits)` is called on that thread when the search is over, or, with
    /// `completions`, by the thread that drains them.
    #[pyo3(signature = (namespace, vector, filter, k, done, completions=None))]
    fn vector_search_then(
        slf: Bound<'_, Self>,
        namespace: String,
        vector: Bound<'_, PyArray1<f32>>,
        filter: Bound<'_, PyDict>,
        k: i64,
        done: Py<PyAny>,
        completions: Option<Bound<'_, Completions>>,
    ) -> PyResult<()> {
        let q = convert::vector(Some(&vector))?.unwrap_or_default();
        let spec = convert::filter(&filter)?;
        let k = usize::try_from(k).unwrap_or(0);
        spawn(
            slf.unbind(),
            done,
            Reply::from(completions.as_ref()),
            move |me| me.engine.vector_search(&namespace, &q, &spec, k),
            |py, hits| Ok(convert::hits(py, hits)?.into_any()),
        )
    }

    /// `keyword_search` on one of the binding's threads, as `vector_search_then`.
    #[pyo3(signature = (namespace, query, filter, k, done, completions=None))]
    fn keyword_search_then(
        slf: Bound<'_, Self>,
        namespace: String,
        query: String,
        filter: Bound<'_, PyDict>,
        k: i64,
        done: Py<PyAny>,
        completions: Option<Bound<'_, Completions>>,
    ) -> PyResult<()> {
        let spec = convert::filter(&filter)?;
        let k = usize::try_from(k).unwrap_or(0);
        spawn(
            slf.unbind(),
            done,
            Reply::from(completions.as_ref()),
            move |me| me.engine.keyword_search(&namespace, &query, &spec, k),
            |py, hits| Ok(convert::hits(py, hits)?.into_any()),
        )
    }

    fn keyword_search<'py>(
        &self,
        py: Python<'py>,
        namespace: String,
        query: String,
        filter: Bound<'py, PyDict>,
        k: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let spec = convert::filter(&filter)?;
        let k = usize::try_from(k).unwrap_or(0);
        let hits = run(py, || {
            self.engine.keyword_search(&namespace, &query, &spec, k)
        })?;
        convert::hits(py, hits)
    }

    #[pyo3(signature = (sources, query, vector, filter, k, pool, fusion, fusion_param, context, keyword_half, quality, dedup))]
    #[allow(
        clippy::too_many_arguments,
        reason = "recall's arguments, checked by the facade"
    )]
    fn recall<'py>(
        &self,
        py: Python<'py>,
        sources: Vec<(String, Option<Vec<String>>)>,
        query: String,
        vector: Option<Bound<'py, PyArray1<f32>>>,
        filter: Bound<'py, PyDict>,
        k: i64,
        pool: i64,
        fusion: &str,
        fusion_param: f64,
        context: f64,
        keyword_half: f64,
        quality: bool,
        dedup: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let sources = sources
            .into_iter()
            .map(|(namespace, tiers)| {
                let tiers = tiers
                    .map(|ts| ts.iter().map(|t| convert::tier(py, t)).collect())
                    .transpose()?;
                Ok(Source { namespace, tiers })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let fusion = convert::fusion(py, fusion, fusion_param)?;
        let v = convert::vector(vector.as_ref())?;
        let spec = convert::filter(&filter)?;
        let size = |n: i64| usize::try_from(n).unwrap_or(0);
        let q = RecallQuery {
            sources: &sources,
            text: &query,
            vector: v.as_deref(),
            spec: &spec,
            k: size(k),
            pool: size(pool),
            fusion,
            context,
            keyword_half,
            quality,
            dedup,
        };
        let rs = run(py, || self.engine.recall(&q))?;
        convert::recalled(py, rs)
    }

    fn reinforce_rows(
        &self,
        py: Python<'_>,
        rows: Vec<(String, String)>,
        accessed_at: Micros,
    ) -> PyResult<()> {
        run(py, || self.engine.reinforce_rows(rows, accessed_at, None))
    }
}
