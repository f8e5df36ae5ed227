//! The HTTP front of `memini serve` (DESIGN.md, "Round 3"): HTTP/1.1 on hyper, on a tokio
//! runtime with one worker thread per core, listening on the public address.
//!
//! Every request is decided once here: its principal (`auth`), the body size and arrival
//! time limits and the connection cap (on every route, `/mcp` included). What the front does
//! not answer itself is forwarded to the Python app (uvicorn on a Unix socket in a private
//! directory) with the principal in [`PRINCIPAL`], which the app believes only beside the
//! per-process token in [`TOKEN`]: a client's own copies of both headers are dropped.
//!
//! The hot routes (`native::ROUTES`) are answered here when the front is sure of the call,
//! without the GIL; the Python app reads their latencies at scrape time ([`Front::observed`])
//! so `/metrics` counts them as before.
//!
//! A client connection forwards over one connection of its own to the app, opened on its
//! first request: HTTP/1.1 answers one request at a time per connection, so the two are
//! busy together and the app sees as many connections as the front has callers.

pub mod auth;
pub mod events;
mod native;
pub mod wire;
mod writes;

use std::convert::Infallible;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_LENGTH};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;
use tokio::net::{TcpListener, TcpSocket, UnixStream};
use tokio::sync::{watch, Semaphore};

use crate::Engine;
use auth::{Decision, Keys};
use events::{Events, Rows, Write};
pub use native::Embedder;
pub use writes::Upserted;
use writes::Written;

/// The header carrying the front's decision to the Python app.
pub const PRINCIPAL: &str = "memini-principal";
/// The header carrying the per-process token that makes [`PRINCIPAL`] believed.
pub const TOKEN: &str = "memini-front-token";

type Body = BoxBody<Bytes, hyper::Error>;

/// The limits applied to every request (`memini.server.ServerOptions`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body: usize,
    pub body_timeout: Duration,
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// What every connection shares.
struct Shared {
    keys: Arc<RwLock<Arc<Keys>>>,
    app: PathBuf,
    token: HeaderValue,
    limits: Limits,
    /// The store's engine, for the routes answered here (None: every route forwarded).
    engine: Option<Arc<Engine>>,
    /// What the store embeds text with (text recalls, memories without an embedding).
    embedder: Embedder,
    native: Arc<Native>,
    observed: Arc<Observed>,
    /// Where the calls answered here queue their event rows (None: no event log).
    events: Option<Arc<Events>>,
    written: Arc<Written>,
}

/// The calls being answered here, counted so that the server's shutdown waits for them
/// (their event rows) before its event log closes: none starts once stopping.
#[derive(Default)]
struct Native {
    /// (calls in flight, stopping)
    state: Mutex<(usize, bool)>,
    idle: Condvar,
}

/// A call counted in [`Native`] until dropped.
struct InFlight<'a>(&'a Native);

impl Native {
    /// A new call counted, None once stopping.
    fn enter(&self) -> Option<InFlight<'_>> {
        let mut state = self.state.lock();
        if state.1 {
            return None;
        }
        state.0 += 1;
        Some(InFlight(self))
    }

    fn stop(&self) {
        self.state.lock().1 = true;
    }

    fn in_flight(&self) -> usize {
        self.state.lock().0
    }

    /// Wait up to `timeout` for no call in flight; whether none is.
    fn idle(&self, timeout: Duration) -> bool {
        let mut state = self.state.lock();
        !self
            .idle
            .wait_while_for(&mut state, |s| s.0 > 0, timeout)
            .timed_out()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.0 -= 1;
        if state.0 == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// Latencies of the calls answered here since the last scrape (bounded: beyond
/// [`Observed::MAX`] a call is only counted, by route).
#[derive(Default)]
pub struct Observed {
    calls: Mutex<Vec<(&'static str, f64)>>,
    unobserved: Mutex<Vec<(&'static str, u64)>>,
}

/// What [`Observed::take`] gives: each call's (route, seconds), and the count of calls by
/// route beyond those.
pub type Calls = (Vec<(&'static str, f64)>, Vec<(&'static str, u64)>);

impl Observed {
    const MAX: usize = 1 << 20;

    fn record(&self, route: &'static str, seconds: f64) {
        let mut calls = self.calls.lock();
        if calls.len() < Self::MAX {
            calls.push((route, seconds));
            return;
        }
        drop(calls);
        let mut unobserved = self.unobserved.lock();
        match unobserved.iter_mut().find(|(r, _)| *r == route) {
            Some((_, n)) => *n += 1,
            None => unobserved.push((route, 1)),
        }
    }

    /// The calls since the last take.
    pub fn take(&self) -> Calls {
        let calls = std::mem::take(&mut *self.calls.lock());
        (calls, std::mem::take(&mut *self.unobserved.lock()))
    }
}

/// The front: bound at construction, serving from `serve` until `stop`.
pub struct Front {
    runtime: tokio::runtime::Runtime,
    listener: Mutex<Option<TcpListener>>,
    local: SocketAddr,
    stop: watch::Sender<bool>,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    keys: Arc<RwLock<Arc<Keys>>>,
    native: Arc<Native>,
    observed: Arc<Observed>,
    events: std::sync::OnceLock<Arc<Events>>,
    written: Arc<Written>,
}

impl Front {
    /// Bind `host:port` (port 0: any free one) with a listen backlog of `backlog`.
    pub fn bind(host: &str, port: u16, backlog: u32) -> std::io::Result<Self> {
        let addr = (host, port).to_socket_addrs()?.next().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to bind")
        })?;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .thread_name("memini-front")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(async {
            let socket = if addr.is_ipv6() {
                TcpSocket::new_v6()?
            } else {
                TcpSocket::new_v4()?
            };
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            socket.listen(backlog)
        })?;
        let local = listener.local_addr()?;
        Ok(Self {
            runtime,
            listener: Mutex::new(Some(listener)),
            local,
            stop: watch::channel(false).0,
            done: Mutex::new(None),
            keys: Arc::default(),
            native: Arc::default(),
            observed: Arc::default(),
            events: std::sync::OnceLock::new(),
            written: Arc::default(),
        })
    }

    /// The bound address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Start serving: auth from the keys of `set_keys` (none before), the hot routes
    /// answered from `engine` (when given; their event rows queued for `take_events`, up
    /// to `event_rows` rows, none when 0; `callers`: the names its rows give the admin and
    /// open access), text (recalls, memories without an embedding) as the store's
    /// `embedder` has it done, everything else forwarded to the app listening on the Unix
    /// socket `app` with `token`.
    /// Once only (later calls do nothing).
    #[allow(clippy::too_many_arguments, reason = "the server's options, by name")]
    pub fn serve(
        &self,
        app: PathBuf,
        token: &str,
        limits: Limits,
        engine: Option<Arc<Engine>>,
        embedder: Embedder,
        event_rows: usize,
        callers: (String, String),
    ) {
        let Some(listener) = self.listener.lock().take() else {
            return;
        };
        let Ok(token) = HeaderValue::from_str(token) else {
            return;
        };
        let shared = Arc::new(Shared {
            keys: self.keys.clone(),
            app,
            token,
            limits,
            engine,
            embedder,
            native: self.native.clone(),
            observed: self.observed.clone(),
            events: (event_rows > 0).then(|| {
                self.events
                    .get_or_init(|| Arc::new(Events::new(event_rows, callers)))
                    .clone()
            }),
            written: self.written.clone(),
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        *self.done.lock() = Some(done_rx);
        let stop = self.stop.subscribe();
        self.runtime.spawn(async move {
            accept(listener, shared, stop).await;
            let _ = done_tx.send(());
        });
    }

    /// Replace the key snapshot (every later request is decided from it).
    pub fn set_keys(&self, keys: Keys) {
        *self.keys.write() = Arc::new(keys);
    }

    /// Stop accepting, answer no more calls here (they go to the app, which refuses them
    /// while stopping) and close connections once their request in flight is answered
    /// (idle ones at once). Returns at once; `wait` waits for the end, `idle` for the calls
    /// answered here.
    pub fn stop(&self) {
        self.native.stop();
        self.stop.send_replace(true);
        self.listener.lock().take();
    }

    /// The calls answered here since the last call (`Observed::take`).
    pub fn observed(&self) -> Calls {
        self.observed.take()
    }

    /// The event rows of the searches answered here since the last call.
    pub fn take_events(&self) -> Vec<Rows> {
        self.events.get().map(|e| e.take()).unwrap_or_default()
    }

    /// The writes answered here since the last call, for their event rows (take them with
    /// `take_events`).
    pub fn take_writes(&self) -> Vec<Write> {
        self.events
            .get()
            .map(|e| e.take_writes())
            .unwrap_or_default()
    }

    /// The store metrics of the writes answered here since the last call: the upserts
    /// by (op, tier, memory type) and the deletes.
    pub fn written(&self) -> (Vec<(Upserted, u64)>, u64) {
        self.written.take()
    }

    /// Event rows dropped since the start because the queue was full.
    pub fn events_dropped(&self) -> u64 {
        self.events.get().map_or(0, |e| e.dropped())
    }

    /// The calls being answered here now.
    pub fn in_flight(&self) -> usize {
        self.native.in_flight()
    }

    /// Wait up to `timeout` for no call answered here to be in flight (after `stop`: for
    /// good, their event rows queued); whether none is.
    pub fn idle(&self, timeout: Duration) -> bool {
        self.native.idle(timeout)
    }

    /// Wait up to `timeout` for the connections to end after `stop`; whether they did.
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.done.lock().take() {
            Some(done) => done.recv_timeout(timeout).is_ok(),
            None => true,
        }
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let limits = shared.limits;
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // out of descriptors or the like: let connections end, then go on
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        if let Ok(permit) = open.clone().try_acquire_owned() {
            let shared = shared.clone();
            let upstream: Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>> =
                Arc::default();
            let service = hyper::service::service_fn(move |req| {
                handle(shared.clone(), upstream.clone(), req)
            });
            let conn = graceful.watch(http.serve_connection(io, service));
            tokio::spawn(async move {
                let _ = conn.await;
                drop(permit);
            });
        } else {
            // over the cap: answered at once, never left hanging
            let service = hyper::service::service_fn(|_req| async {
                let mut answer = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "UnavailableError",
                    "the server has as many connections as it serves at once; retry later",
                );
                answer
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
                Ok::<_, Infallible>(answer)
            });
            let conn = graceful.watch(http.serve_connection(io, service));
            tokio::spawn(conn);
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

#[derive(Serialize)]
struct ErrorFields<'a> {
    r#type: &'a str,
    message: &'a str,
}

/// The error answer every route gives (`{"error": {"type", "message"}}`).
fn error(status: StatusCode, type_name: &str, message: &str) -> Response<Body> {
    let body = serde_json::to_vec(&ErrorBody {
        error: ErrorFields {
            r#type: type_name,
            message,
        },
    })
    .unwrap_or_default();
    let mut answer = Response::new(full(body.into()));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// One request: its body read under the limits, decided, answered here or forwarded.
async fn handle(
    shared: Arc<Shared>,
    upstream: Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let t0 = Instant::now();
    let limits = shared.limits;
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > limits.max_body as u64) {
        return Ok(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "InvalidArgumentError",
            &format!(
                "the body has {n} bytes, more than the limit {}",
                limits.max_body
            ),
        ));
    }
    let read = tokio::time::timeout(
        limits.body_timeout,
        Limited::new(body, limits.max_body).collect(),
    )
    .await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "InvalidArgumentError",
                &format!(
                    "the body is larger than the limit of {} bytes",
                    limits.max_body
                ),
            ))
        }
        Ok(Err(_)) => {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                "InvalidArgumentError",
                "the client disconnected before its body arrived",
            ))
        }
        Err(_) => {
            return Ok(error(
                StatusCode::REQUEST_TIMEOUT,
                "InvalidArgumentError",
                &format!(
                    "the body did not arrive within {:?} s",
                    limits.body_timeout.as_secs_f64()
                ),
            ))
        }
    };
    // decided once the body is here, from the keys of this moment: a key disabled or moved
    // while its body arrived is decided as the app decides what it is forwarded
    let keys = shared.keys.read().clone();
    let decision = keys.decide(parts.headers.get(AUTHORIZATION).map(HeaderValue::as_bytes));
    let answer = match route_here(&shared, &parts) {
        // a durable commit waits for the disk: never on the runtime's threads
        Some(route) if native::WRITES.contains(&route) => {
            off_runtime(&shared, &keys, &decision, route, &body, t0).await
        }
        Some(route) => match answer_here(&shared, &keys, &decision, route, &body, t0, false) {
            Ok(answer) => answer,
            // a recall that embeds its query waits in the embedder's queue: off them too
            Err(native::Waits) => off_runtime(&shared, &keys, &decision, route, &body, t0).await,
        },
        None => None,
    };
    if let Some(answer) = answer {
        return Ok(answer);
    }
    Ok(forward(&shared, &upstream, parts, body, &decision).await)
}

/// `answer_here` on a blocking thread, where the call may wait.
async fn off_runtime(
    shared: &Arc<Shared>,
    keys: &Arc<Keys>,
    decision: &Decision,
    route: &'static str,
    body: &Bytes,
    t0: Instant,
) -> Option<Response<Body>> {
    let (shared, keys, decision, body) =
        (shared.clone(), keys.clone(), decision.clone(), body.clone());
    match tokio::task::spawn_blocking(move || {
        answer_here(&shared, &keys, &decision, route, &body, t0, true)
    })
    .await
    {
        // Waits is only answered where the call may not wait
        Ok(answer) => answer.ok().flatten(),
        // a bug: never forwarded, since a write may have committed before it
        Err(e) => {
            log::error!("{route}() failed inside the front: {e}");
            Some(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "MeminiError",
                &format!("{route}() failed inside the server (logged)"),
            ))
        }
    }
}

/// The route of `native::ROUTES` a request may be answered by here.
fn route_here(shared: &Shared, parts: &hyper::http::request::Parts) -> Option<&'static str> {
    shared.engine.as_ref()?;
    if parts.method != hyper::Method::POST {
        return None;
    }
    let route = parts.uri.path().strip_prefix("/v1/")?;
    native::ROUTES.into_iter().find(|r| *r == route)
}

/// The answer of a hot route the front is sure of (`native`, `writes`), None to forward;
/// [`native::Waits`] for a call that would wait where it may not (`may_wait`).
fn answer_here(
    shared: &Shared,
    keys: &Keys,
    decision: &Decision,
    route: &'static str,
    body: &[u8],
    t0: Instant,
    may_wait: bool,
) -> Result<Option<Response<Body>>, native::Waits> {
    let Some(engine) = shared.engine.as_deref() else {
        return Ok(None);
    };
    let Some(_counted) = shared.native.enter() else {
        return Ok(None);
    };
    let call = native::Call {
        engine,
        keys,
        decision,
        events: shared.events.as_deref(),
        embedder: &shared.embedder,
        written: &shared.written,
        may_wait,
    };
    let json = match route {
        "count" => native::count(&call, body),
        "get" => native::get(&call, body),
        "list" => native::list(&call, body),
        "vector_search" => native::vector_search(&call, body),
        "vector_search_many" => native::vector_search_many(&call, body),
        "keyword_search" => native::keyword_search(&call, body),
        "recall" => native::recall(&call, body)?,
        "upsert" => writes::upsert(&call, body),
        "upsert_many" => writes::upsert_many(&call, body),
        "delete" => writes::delete(&call, body),
        "update" => writes::update(&call, body),
        _ => None,
    };
    let Some(json) = json else {
        return Ok(None);
    };
    let mut answer = Response::new(full(json.into()));
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    shared.observed.record(route, t0.elapsed().as_secs_f64());
    Ok(Some(answer))
}

/// The request handed to the Python app with the front's decision, and its answer
/// (streamed: `/mcp` answers with server-sent events).
async fn forward(
    shared: &Shared,
    upstream: &tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
    mut parts: hyper::http::request::Parts,
    body: Bytes,
    decision: &Decision,
) -> Response<Body> {
    let headers = &mut parts.headers;
    for name in ["transfer-encoding", "expect", PRINCIPAL, TOKEN] {
        headers.remove(name);
    }
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    headers.insert(HeaderName::from_static(TOKEN), shared.token.clone());
    if let Ok(value) = HeaderValue::from_str(&decision.header()) {
        headers.insert(HeaderName::from_static(PRINCIPAL), value);
    }
    let mut sender = upstream.lock().await;
    if sender.as_ref().is_none_or(SendRequest::is_closed) {
        *sender = connect(&shared.app).await;
    }
    let Some(to_app) = sender.as_mut() else {
        return unavailable();
    };
    if to_app.ready().await.is_err() {
        *sender = None;
        return unavailable();
    }
    let req = Request::from_parts(parts, Full::new(body));
    match to_app.send_request(req).await {
        Ok(answer) => {
            let (mut parts, incoming) = answer.into_parts();
            parts.headers.remove(CONNECTION);
            Response::from_parts(parts, incoming.boxed())
        }
        Err(_) => {
            *sender = None;
            unavailable()
        }
    }
}

async fn connect(app: &PathBuf) -> Option<SendRequest<Full<Bytes>>> {
    let stream = UnixStream::connect(app).await.ok()?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

fn unavailable() -> Response<Body> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "UnavailableError",
        "the server is shutting down",
    )
}
