//! Routes the front answers itself, without the GIL: the body parsed with serde, the same
//! checks, the engine call, the answer rendered as `memini._wire` renders it.
//!
//! Only a call the front is sure of is answered here: anything else (an argument it does not
//! take, a filter, a namespace the caller may not touch, an engine error, a server stopping)
//! returns `None` and the request goes to the Python app, which answers it exactly as
//! before, errors included. A route here changes nothing stored.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::auth::{Decision, Keys};
use crate::types::{FilterSpec, Micros};
use crate::Engine;

/// The routes answered here, by their path under `/v1/`.
pub const ROUTES: [&str; 1] = ["count"];

/// Whether the caller may touch `namespace` (the Python gate's `Principal.owns`).
fn owns(keys: &Keys, decision: &Decision, namespace: &str) -> bool {
    match decision {
        Decision::Admin | Decision::Open => true,
        Decision::Key(hash) => keys.key(hash).is_some_and(|k| {
            let home = k.home_ns.as_str();
            !home.is_empty()
                && (namespace == home
                    || namespace
                        .strip_prefix(home)
                        .is_some_and(|rest| rest.starts_with('/')))
        }),
        Decision::Missing | Decision::Malformed | Decision::Unknown => false,
    }
}

/// `memini.Filter()`, the live rows at the wall clock (`memini._convert.filter_to_spec(None)`).
fn live_rows() -> FilterSpec {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        Micros::try_from(d.as_micros()).unwrap_or(Micros::MAX)
    });
    FilterSpec {
        now,
        ..FilterSpec::default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountArgs {
    namespace: String,
    #[serde(default)]
    filter: Option<serde_json::Value>,
}

/// `POST /v1/count` with no filter: the answer's JSON, or None to forward.
pub fn count(engine: &Engine, keys: &Keys, decision: &Decision, body: &[u8]) -> Option<Vec<u8>> {
    let args: CountArgs = serde_json::from_slice(body).ok()?;
    if args.filter.is_some()
        || crate::limits::namespace(&args.namespace).is_err()
        || !owns(keys, decision, &args.namespace)
    {
        return None;
    }
    let n = engine.count(&args.namespace, &live_rows()).ok()?;
    Some(n.to_string().into_bytes())
}
