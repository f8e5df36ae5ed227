//! `memini._core.Front`: the HTTP front (`crate::serve`) as `memini.server` drives it.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use super::embed::PyLocalModel;
use super::engine::PyEngine;
use crate::serve::auth::{Key, Keys};
use crate::serve::events::Search;
use crate::serve::{Front, Limits};

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

    #[pyo3(signature = (app, token, max_body, body_timeout, header_timeout, max_connections, engine, embedder, event_rows))]
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
        event_rows: usize,
    ) {
        let limits = Limits {
            max_body,
            body_timeout: Duration::from_secs_f64(body_timeout),
            header_timeout: Duration::from_secs_f64(header_timeout),
            max_connections,
        };
        self.front.serve(
            app,
            token,
            limits,
            engine.map(|e| e.shared()),
            embedder.map(|e| e.shared()),
            event_rows,
        );
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

    /// The searches the front answered since the last call, for their event rows
    /// (`memini.server._events`): (method, (caller kind, key name), k, namespaces, query,
    /// created_at, [[(id, namespace, tier, summary, score), ...] per query]).
    fn take_events(&self) -> Vec<Search> {
        self.front.take_events()
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
