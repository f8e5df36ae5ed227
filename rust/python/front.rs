//! `memini._core.Front`: the HTTP front (`crate::serve`) as `memini.server` drives it.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyString, PyTuple};

use super::embed::PyLocalModel;
use super::engine::PyEngine;
use crate::serve::auth::{Key, Keys};
use crate::serve::events::{self, Fold, Rows, Write};
use crate::serve::{Embedder, Front, Limits};
use crate::types::{Micros, Tier};

/// A key as Python pushes it: (hash, name, home_ns, default_ns, disabled).
type KeyRow = (String, String, String, String, bool);

fn snapshot(admin: Option<&str>, open: bool, keys: Vec<KeyRow>) -> Keys {
    let keys = keys
        .into_iter()
        .map(|(hash, name, home_ns, default_ns, disabled)| {
            let key = Key {
                hash,
                name,
                home_ns,
                default_ns,
            };
            (key, disabled)
        })
        .collect();
    Keys::new(admin, open, keys)
}

#[pyclass(name = "Front", module = "memini._core", frozen)]
pub struct PyFront {
    front: Front,
    admin: Option<String>,
}

#[pymethods]
impl PyFront {
    #[new]
    #[pyo3(signature = (host, port, backlog, admin))]
    fn new(host: &str, port: u16, backlog: u32, admin: Option<String>) -> PyResult<Self> {
        let front = Front::bind(host, port, backlog)
            .map_err(|e| PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")))?;
        Ok(Self { front, admin })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.front.local_addr().port()
    }

    /// Serve (`crate::serve::Front::serve`): text with `embedder` (the store's core model),
    /// or keyword-only when `unembedded` (the store has no embedder), else by the app.
    #[pyo3(signature = (app, token, max_body, body_timeout, header_timeout, max_connections, engine, embedder, unembedded, event_rows, callers))]
    #[allow(clippy::too_many_arguments, reason = "the server's options, by name")]
    fn serve(
        &self,
        app: PathBuf,
        token: &str,
        max_body: usize,
        body_timeout: f64,
        header_timeout: f64,
        max_connections: usize,
        engine: Option<PyRef<'_, PyEngine>>,
        embedder: Option<PyRef<'_, PyLocalModel>>,
        unembedded: bool,
        event_rows: usize,
        callers: (String, String),
    ) {
        let limits = Limits {
            max_body,
            body_timeout: Duration::from_secs_f64(body_timeout),
            header_timeout: Duration::from_secs_f64(header_timeout),
            max_connections,
        };
        let engine = engine.map(|e| e.shared());
        let embedder = match embedder {
            _ if unembedded => Embedder::Unembedded,
            Some(model) => Embedder::Local(model.shared()),
            None => Embedder::App,
        };
        self.front
            .serve(app, token, limits, engine, embedder, event_rows, callers);
    }

    fn set_keys(&self, open: bool, keys: Vec<KeyRow>) {
        self.front
            .set_keys(snapshot(self.admin.as_deref(), open, keys));
    }

    /// The (route, seconds) of the calls the front answered itself since the last call,
    /// and how many more it answered without keeping their latency.
    fn observed(&self) -> crate::serve::Calls {
        self.front.observed()
    }

    /// The event rows of the searches the front answered since the last call, ready to
    /// append (`memini.events.EventRow`, `OpQueryRow`): each call's operation id made
    /// by `new_id()`, a non-ASCII text folded by `fold(text)` (`memini.events.fold`);
    /// with `packed`, as one `memini.events.PackedRows` when the batch can travel so
    /// (`ready`).
    #[pyo3(signature = (new_id, fold, packed=false))]
    fn take_events<'py>(
        &self,
        py: Python<'py>,
        new_id: &Bound<'py, PyAny>,
        fold: &Bound<'py, PyAny>,
        packed: bool,
    ) -> PyResult<Taken<'py>> {
        let calls = self.front.take_events();
        let mut named = Vec::with_capacity(calls.len());
        for rows in calls {
            named.push((new_id.call0()?.extract::<String>()?, rows));
        }
        ready(py, named, fold, packed)
    }

    /// The writes the front answered since the last call, for their event rows (take them
    /// after `take_events`): (method, the caller's name, the call's namespace,
    /// created_at, [(id, namespace, tier or None, summary) per memory touched], the fields
    /// an `update` named or None).
    fn take_writes(&self) -> Vec<Write> {
        self.front.take_writes()
    }

    /// The store metrics of the writes the front answered since the last call: ([((op,
    /// tier, memory type), calls), ...], deletes).
    fn written(&self) -> (Vec<(crate::serve::Upserted, u64)>, u64) {
        self.front.written()
    }

    /// The calls the front is answering itself now.
    #[getter]
    fn in_flight(&self) -> usize {
        self.front.in_flight()
    }

    /// Event rows dropped since the start because the queue was full.
    #[getter]
    fn events_dropped(&self) -> u64 {
        self.front.events_dropped()
    }

    fn stop(&self) {
        self.front.stop();
    }

    /// Wait up to `timeout` s for no call answered here to be in flight; whether none is.
    fn idle(&self, py: Python<'_>, timeout: f64) -> bool {
        py.detach(|| self.front.idle(Duration::from_secs_f64(timeout)))
    }

    fn wait(&self, py: Python<'_>, timeout: f64) -> bool {
        py.detach(|| self.front.wait(Duration::from_secs_f64(timeout)))
    }
}

/// The summary an event row keeps of a memory (`crate::serve::events::summary`).
#[pyfunction]
pub fn event_summary(summary: &str, content: &str) -> String {
    crate::serve::events::summary(summary, content)
}

/// A search's hit as the app's recorder gives it: (id, namespace, tier, summary, score).
type PyHit = (String, String, String, String, f64);

/// Rows taken (`take_events`, `search_event_rows`): the rows and queries as tuples, or
/// both lists empty and the batch as (rows JSON, queries JSON, row count)
/// (`crate::serve::events::pack`).
type Taken<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Option<(String, String, usize)>,
);

/// The event rows of one search the app answered, and its query's row, ready to append
/// (`crate::serve::events::search`, the rule the front's searches follow too; `k_json`:
/// the call's `k` as JSON), as `take_events` gives them.
#[pyfunction]
#[pyo3(signature = (op_id, method, caller, k_json, searched, query, created_at, results, fold, packed=false))]
#[allow(clippy::too_many_arguments, reason = "a search's values, by name")]
pub fn search_event_rows<'py>(
    py: Python<'py>,
    op_id: String,
    method: &str,
    caller: &str,
    k_json: &str,
    searched: Vec<String>,
    query: String,
    created_at: Micros,
    results: Vec<Vec<PyHit>>,
    fold: &Bound<'py, PyAny>,
    packed: bool,
) -> PyResult<Taken<'py>> {
    let mut hits = Vec::with_capacity(results.len());
    for list in results {
        let mut out = Vec::with_capacity(list.len());
        for (id, ns, tier, summary, score) in list {
            let tier = Tier::parse(&tier).map_err(|e| super::errors::to_py(py, e))?;
            out.push((id, ns, tier, summary, score));
        }
        hits.push(out);
    }
    let rows = events::search(method, caller, k_json, &searched, query, created_at, hits);
    ready(py, vec![(op_id, rows)], fold, packed)
}

/// `calls` (each under its operation id) as `Taken`: every non-ASCII text folded by
/// `fold` (Python's casefold) first, then, with `packed`, packed without the GIL when the
/// batch can travel so, else as tuples.
fn ready<'py>(
    py: Python<'py>,
    mut calls: Vec<(String, Rows)>,
    fold: &Bound<'py, PyAny>,
    packed: bool,
) -> PyResult<Taken<'py>> {
    for (_, call) in &mut calls {
        for row in &mut call.rows {
            fold_python(fold, &row.summary, &mut row.summary_fold)?;
        }
        fold_python(fold, &call.query, &mut call.query_fold)?;
    }
    let out = (PyList::empty(py), PyList::empty(py));
    if packed {
        let (p, rest) = py.detach(move || match events::pack(&calls) {
            Some(p) => (Some(p), Vec::new()), // the calls freed here, without the GIL
            None => (None, calls),
        });
        if let Some(p) = p {
            return Ok((out.0, out.1, Some((p.rows, p.queries, p.count))));
        }
        calls = rest;
    }
    for (op, rows) in calls {
        append_rows(py, rows, PyString::new(py, &op).as_any(), &out)?;
    }
    Ok((out.0, out.1, None))
}

/// Decide a [`Fold::Python`] with `fold(text)` (None: [`Fold::Same`]).
fn fold_python(fold: &Bound<'_, PyAny>, text: &str, how: &mut Fold) -> PyResult<()> {
    if *how == Fold::Python {
        *how = match fold.call1((text,))?.extract::<Option<String>>()? {
            Some(s) => Fold::Folded(s),
            None => Fold::Same,
        };
    }
    Ok(())
}

/// A text's fold column: None or the folded text (decided: no [`Fold::Python`]).
fn fold_of<'py>(py: Python<'py>, how: &Fold) -> Bound<'py, PyAny> {
    match how {
        Fold::Folded(s) => PyString::new(py, s).into_any(),
        Fold::Same | Fold::Python => py.None().into_bound(py),
    }
}

/// Append a search's rows (`memini.events.event_row`'s tuples) and its query's row
/// (`op_query`'s, when it has one) to `out`, under the operation id `op`.
fn append_rows<'py>(
    py: Python<'py>,
    call: Rows,
    op: &Bound<'py, PyAny>,
    out: &(Bound<'py, PyList>, Bound<'py, PyList>),
) -> PyResult<()> {
    let kind = PyString::intern(py, "recall").into_any();
    let empty = PyString::intern(py, "").into_any();
    let none = py.None().into_bound(py);
    let created = call.created_at.into_pyobject(py)?.into_any();
    let details: Vec<_> = call
        .details
        .iter()
        .map(|d| PyString::new(py, d).into_any())
        .collect();
    let mut last: Option<(String, Bound<'py, PyAny>)> = None;
    for row in call.rows {
        let ns = match &last {
            Some((name, text)) if *name == row.namespace => text.clone(),
            _ => {
                let text = PyString::new(py, &row.namespace).into_any();
                last = Some((row.namespace.clone(), text.clone()));
                text
            }
        };
        let hit = !row.memory_id.is_empty();
        let items: [Bound<'py, PyAny>; 14] = [
            op.clone(),
            kind.clone(),
            ns.clone(),
            empty.clone(),
            if hit {
                PyString::new(py, &row.memory_id).into_any()
            } else {
                empty.clone()
            },
            if hit { ns } else { empty.clone() },
            match row.tier {
                Some(t) => PyString::intern(py, t.as_str()).into_any(),
                None => none.clone(),
            },
            PyString::new(py, &row.summary).into_any(),
            row.rank.into_pyobject(py)?.into_any(),
            match row.score {
                Some(s) => PyFloat::new(py, s).into_any(),
                None => none.clone(),
            },
            details[row.detail].clone(),
            created.clone(),
            none.clone(),
            fold_of(py, &row.summary_fold),
        ];
        out.0.append(PyTuple::new(py, items)?)?;
    }
    if !call.query.is_empty() {
        let folded = fold_of(py, &call.query_fold);
        out.1.append((op, call.query, folded, created))?;
    }
    Ok(())
}
