//! Routes the front answers itself, without the GIL: the body parsed with serde, the same
//! checks, the engine call, the answer rendered as `memini._wire` renders it.
//!
//! Only a call the front is sure of is answered here: anything else (an argument it does not
//! take, a filter, a namespace the caller may not touch, an engine error, a server stopping)
//! returns `None` and the request goes to the Python app, which answers it exactly as
//! before, errors included. A route here changes nothing stored.
//!
//! A search answered here queues its event rows (`events`) as the app's `Service.finish`
//! would record them: the call is the app's in everything but the GIL.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::auth::{Decision, Keys};
use super::events::{self, Events};
use super::wire;
use super::writes::Written;
use crate::embed::Batcher;
use crate::engine::recall_defaults::{
    DEFAULT_ALPHA, DEFAULT_CONTEXT, DEFAULT_KEYWORD_HALF, MIN_POOL,
};
use crate::error::uninterrupted;
use crate::types::{FilterSpec, Memory, Micros, Scored};
use crate::{Engine, Fusion, RecallQuery, Source};

/// The routes answered here, by their path under `/v1/` (the writes' in `super::writes`).
pub const ROUTES: [&str; 11] = [
    "count",
    "get",
    "list",
    "vector_search",
    "vector_search_many",
    "keyword_search",
    "recall",
    "upsert",
    "upsert_many",
    "delete",
    "update",
];

/// The routes of [`ROUTES`] that write: answered off the runtime's threads (a durable
/// commit waits for the disk).
pub const WRITES: [&str; 4] = ["upsert", "upsert_many", "delete", "update"];

/// What a route answered here needs of the front.
pub struct Call<'a> {
    pub engine: &'a Engine,
    pub keys: &'a Keys,
    pub decision: &'a Decision,
    /// Where its event rows go (None: the server logs no events).
    pub events: Option<&'a Events>,
    /// The store's embedder when it is the core's (None: a text recall is forwarded).
    pub embedder: Option<&'a Batcher>,
    /// Whether the call may wait here (for the embedder): false on the runtime's threads,
    /// where a recall that embeds its query answers [`Waits`] instead.
    pub may_wait: bool,
    /// Where a write's store metrics go.
    pub written: &'a Written,
}

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
pub fn count(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: CountArgs = serde_json::from_slice(body).ok()?;
    if args.filter.is_some() || !may_read(call, &args.namespace) {
        return None;
    }
    let n = call.engine.count(&args.namespace, &live_rows()).ok()?;
    Some(n.to_string().into_bytes())
}

/// Whether the caller may read `namespace` here (a name the engine takes, which the caller
/// owns); anything else is the app's to answer.
pub(super) fn may_read(call: &Call<'_>, namespace: &str) -> bool {
    crate::limits::namespace(namespace).is_ok() && owns(call.keys, call.decision, namespace)
}

/// Who the caller is, by the name its event rows give (`memini.server._auth.Gate.caller`).
pub(super) fn caller(call: &Call<'_>) -> Option<String> {
    let names = call.events.map(|e| &e.callers);
    let name = |pick: fn(&(String, String)) -> &String| names.map(pick).cloned();
    match call.decision {
        Decision::Admin => Some(name(|n| &n.0).unwrap_or_default()),
        Decision::Open => Some(name(|n| &n.1).unwrap_or_default()),
        Decision::Key(hash) => call.keys.key(hash).map(|k| k.name.clone()),
        Decision::Missing | Decision::Malformed | Decision::Unknown => None,
    }
}

/// A query vector exactly as the app reads it, or an error (the call is forwarded): a
/// JSON array of numbers, each exact in float32 once rounded (`memini._values.query_to_array`),
/// or standard padded base64 of little-endian float32 bytes (`memini._wire.vector_from_base64`);
/// a value that is not finite in float32 is left to the app (it names it).
pub(super) struct Vector(pub(super) Vec<f32>);

impl<'de> Deserialize<'de> for Vector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(VectorVisitor)
    }
}

struct VectorVisitor;

/// Integers beyond this are rounded by numpy on a path that may differ from ours: forwarded.
const EXACT_INT: u64 = 1 << 24;

impl<'de> Visitor<'de> for VectorVisitor {
    type Value = Vector;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a vector")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vector, E> {
        let bytes = base64(v).ok_or_else(|| E::custom("not canonical base64"))?;
        if !bytes.len().is_multiple_of(4) {
            return Err(E::custom("not float32 values"));
        }
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if values.iter().all(|v| v.is_finite()) {
            Ok(Vector(values))
        } else {
            Err(E::custom("not finite"))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vector, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(n) = seq.next_element::<serde_json::Number>()? {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_precision_loss,
                reason = "rounded to float32 as numpy rounds; integers only while exact"
            )]
            let v = if let Some(i) = n.as_i64() {
                if i.unsigned_abs() > EXACT_INT {
                    return Err(de::Error::custom("a large integer"));
                }
                i as f32
            } else if n.is_f64() {
                n.as_f64().unwrap_or(f64::NAN) as f32
            } else {
                return Err(de::Error::custom("a large integer"));
            };
            if !v.is_finite() {
                return Err(de::Error::custom("not finite in float32"));
            }
            values.push(v);
        }
        Ok(Vector(values))
    }
}

/// Each byte's base64 sextet (standard alphabet), [`NOT_BASE64`] for any other byte
/// (`=` included: only padding, at the end, may hold it).
const SEXTETS: [u8; 256] = {
    let mut table = [NOT_BASE64; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        #[allow(clippy::cast_possible_truncation, reason = "i < 64")]
        let sextet = i as u8;
        table[alphabet[i] as usize] = sextet;
        i += 1;
    }
    table
};

const NOT_BASE64: u8 = 0x80;

/// Standard base64 with padding, decoded; None for anything but its canonical form (the app
/// reads the rest, or names what is wrong). A table lookup per character, one check per
/// four: a served query vector is 2 KB of it.
fn base64(text: &str) -> Option<Vec<u8>> {
    let raw = text.as_bytes();
    if !raw.len().is_multiple_of(4) {
        return None;
    }
    let pad = raw.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    let data = &raw[..raw.len() - pad];
    let mut out = Vec::with_capacity(raw.len() / 4 * 3);
    let mut quads = data.chunks_exact(4);
    for quad in &mut quads {
        let s = [quad[0], quad[1], quad[2], quad[3]].map(|c| SEXTETS[usize::from(c)]);
        if (s[0] | s[1] | s[2] | s[3]) & NOT_BASE64 != 0 {
            return None;
        }
        let n =
            u32::from(s[0]) << 18 | u32::from(s[1]) << 12 | u32::from(s[2]) << 6 | u32::from(s[3]);
        out.extend_from_slice(&n.to_be_bytes()[1..]);
    }
    // the last quad's characters before its padding: 2 (one byte) or 3 (two bytes)
    let rest = quads.remainder();
    if rest.is_empty() {
        return Some(out);
    }
    let mut n = 0u32;
    for &c in rest {
        let s = SEXTETS[usize::from(c)];
        if s & NOT_BASE64 != 0 {
            return None;
        }
        n = n << 6 | u32::from(s);
    }
    // the bits the padding leaves out must be zero (the canonical form)
    let bytes = match rest.len() {
        2 if n.trailing_zeros() >= 4 => &(n >> 4).to_be_bytes()[3..],
        3 if n.trailing_zeros() >= 2 => &(n >> 2).to_be_bytes()[2..],
        _ => return None,
    };
    out.extend_from_slice(bytes);
    Some(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorSearchArgs {
    namespace: String,
    vector: Vector,
    #[serde(default)]
    filter: Option<serde_json::Value>,
    #[serde(default = "ten")]
    k: u64,
}

fn ten() -> u64 {
    10
}

/// `POST /v1/vector_search` with no filter: the answer's JSON (its event rows queued), or
/// None to forward.
pub fn vector_search(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: VectorSearchArgs = serde_json::from_slice(body).ok()?;
    let who = may_search(call, &args.namespace, args.filter.as_ref(), args.k)?;
    let k = usize::try_from(args.k).ok()?;
    let hits = call
        .engine
        .vector_search(&args.namespace, &args.vector.0, &live_rows(), k)
        .ok()?;
    answer_search(
        call,
        "vector_search",
        &who,
        args.k,
        args.namespace,
        String::new(),
        hits,
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorSearchManyArgs {
    namespace: String,
    vectors: Vec<Vector>,
    #[serde(default)]
    filter: Option<serde_json::Value>,
    #[serde(default = "ten")]
    k: u64,
}

/// `POST /v1/vector_search_many` with no filter and 1 ..= `MAX_QUERIES` queries: the
/// answer's JSON (one list of hits per query; their event rows queued), or None to forward.
pub fn vector_search_many(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: VectorSearchManyArgs = serde_json::from_slice(body).ok()?;
    let who = may_search(call, &args.namespace, args.filter.as_ref(), args.k)?;
    let n = u64::try_from(args.vectors.len()).ok()?;
    if !(1..=crate::limits::MAX_QUERIES).contains(&n) {
        return None;
    }
    let queries: Vec<&[f32]> = args.vectors.iter().map(|v| v.0.as_slice()).collect();
    let k = usize::try_from(args.k).ok()?;
    let results = call
        .engine
        .vector_search_many(&args.namespace, &queries, &live_rows(), k)
        .ok()?;
    let json = wire::array(&results, 5120, |out, hits| {
        out.extend_from_slice(&wire::hits(hits)?);
        Some(())
    })?;
    if let Some(queue) = call.events {
        let searched = [args.namespace];
        let rows = search(
            "vector_search_many",
            &who,
            args.k,
            &searched,
            String::new(),
            results,
        );
        queue.push(rows);
    }
    Some(json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeywordSearchArgs {
    namespace: String,
    query: String,
    #[serde(default)]
    filter: Option<serde_json::Value>,
    #[serde(default = "ten")]
    k: u64,
}

/// `POST /v1/keyword_search` with no filter: the answer's JSON (its event rows queued, with
/// the query), or None to forward.
pub fn keyword_search(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: KeywordSearchArgs = serde_json::from_slice(body).ok()?;
    let who = may_search(call, &args.namespace, args.filter.as_ref(), args.k)?;
    crate::limits::query(&args.query).ok()?;
    let k = usize::try_from(args.k).ok()?;
    let hits = call
        .engine
        .keyword_search(&args.namespace, &args.query, &live_rows(), k)
        .ok()?;
    answer_search(
        call,
        "keyword_search",
        &who,
        args.k,
        args.namespace,
        args.query,
        hits,
    )
}

/// The caller of a search the front may answer (no filter, `k` in range, a namespace it may
/// read), None to forward.
fn may_search(
    call: &Call<'_>,
    namespace: &str,
    filter: Option<&serde_json::Value>,
    k: u64,
) -> Option<String> {
    if filter.is_some() || !(1..=crate::limits::MAX_K).contains(&k) || !may_read(call, namespace) {
        return None;
    }
    caller(call)
}

/// A search's answer, its event rows queued.
fn answer_search(
    call: &Call<'_>,
    method: &'static str,
    who: &str,
    k: u64,
    namespace: String,
    query: String,
    hits: Vec<Scored>,
) -> Option<Vec<u8>> {
    let json = wire::hits(&hits)?;
    if let Some(queue) = call.events {
        queue.push(search(method, who, k, &[namespace], query, vec![hits]));
    }
    Some(json)
}

/// recall's `namespace`: one, or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Namespaces {
    One(String),
    Many(Vec<String>),
}

fn quality() -> serde_json::Value {
    serde_json::Value::from("quality")
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallArgs {
    namespace: Namespaces,
    #[serde(default)]
    query: String,
    #[serde(default)]
    vector: Option<Vector>,
    #[serde(default)]
    filter: Option<serde_json::Value>,
    #[serde(default = "ten")]
    k: u64,
    #[serde(default)]
    fusion: Option<serde_json::Value>,
    #[serde(default)]
    alpha: Option<serde_json::Value>,
    #[serde(default)]
    rrf_k: Option<serde_json::Value>,
    #[serde(default)]
    pool: Option<serde_json::Value>,
    #[serde(default = "quality")]
    rerank: serde_json::Value,
    #[serde(default = "yes")]
    dedup: bool,
    #[serde(default)]
    linked: bool,
    #[serde(default)]
    reinforce: bool,
}

/// `POST /v1/recall` with no filter, the default fusion and pool, neither `linked` nor
/// `reinforce`, and a vector, a blank query (no vector then: `Store._embed_query`) or a query
/// the server's local embedder embeds here (blocking: its queue batches it with the other
/// callers'): the answer's JSON (its event rows queued, with the query), or None to forward
/// (the query of a store with another embedder, or none, included); [`Waits`] for a query
/// to embed when the call may not wait (nothing done: it is to be answered again where it
/// may).
pub fn recall(call: &Call<'_>, body: &[u8]) -> Result<Option<Vec<u8>>, Waits> {
    recall_answer(call, body).transpose()
}

/// A call that would wait (for the embedder) where it may not (`Call::may_wait`).
#[derive(Debug)]
pub struct Waits;

fn recall_answer(call: &Call<'_>, body: &[u8]) -> Option<Result<Vec<u8>, Waits>> {
    let args: RecallArgs = serde_json::from_slice(body).ok()?;
    let quality = match &args.rerank {
        serde_json::Value::Null => false,
        serde_json::Value::String(s) if s == "quality" => true,
        _ => return None,
    };
    if args.fusion.is_some()
        || args.alpha.is_some()
        || args.rrf_k.is_some()
        || args.pool.is_some()
        || args.linked
        || args.reinforce
    {
        return None;
    }
    let searched = match args.namespace {
        Namespaces::One(ns) => vec![ns],
        Namespaces::Many(names) => names,
    };
    let many = u64::try_from(searched.len()).ok()?;
    if !(1..=crate::limits::MAX_NAMESPACES).contains(&many) {
        return None;
    }
    let mut sources: Vec<Source> = Vec::with_capacity(searched.len());
    for ns in &searched {
        if !sources.iter().any(|s| &s.namespace == ns) {
            sources.push(Source {
                namespace: ns.clone(),
                tiers: None,
            });
        }
    }
    let who = may_search(call, &searched[0], args.filter.as_ref(), args.k)?;
    if !searched.iter().all(|ns| may_read(call, ns)) {
        return None;
    }
    crate::limits::query(&args.query).ok()?;
    let vector = match args.vector {
        Some(v) => Some(v.0),
        None if blank(&args.query) => None,
        None => {
            let embedder = call.embedder?;
            if !call.may_wait {
                return Some(Err(Waits));
            }
            Some(
                embedder
                    .embed(std::slice::from_ref(&args.query), &uninterrupted())
                    .ok()?,
            )
        }
    };
    let k = usize::try_from(args.k).ok()?;
    let pool = usize::try_from((5 * args.k).max(MIN_POOL)).ok()?;
    let spec = live_rows();
    let found = call
        .engine
        .recall(&RecallQuery {
            sources: &sources,
            text: &args.query,
            vector: vector.as_deref(),
            spec: &spec,
            k,
            pool,
            fusion: Fusion::Convex {
                alpha: DEFAULT_ALPHA,
            },
            context: DEFAULT_CONTEXT,
            keyword_half: DEFAULT_KEYWORD_HALF,
            quality,
            dedup: args.dedup,
        })
        .ok()?;
    let json = wire::recalled(&found)?;
    if let Some(queue) = call.events {
        let hits = found.into_iter().map(|r| hit(r.memory, r.score)).collect();
        let now = crate::types::now_micros();
        let k = args.k.to_string();
        queue.push(events::search(
            "recall",
            &who,
            &k,
            &searched,
            args.query,
            now,
            vec![hits],
        ));
    }
    Some(Ok(json))
}

/// Whether Python's `str.strip` leaves nothing of `text` (its whitespace is Unicode's
/// White_Space and the four information separators).
fn blank(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    namespace: String,
    #[serde(default)]
    filter: Option<serde_json::Value>,
    #[serde(default)]
    limit: i64,
    #[serde(default)]
    offset: i64,
}

/// `POST /v1/list` with no filter (the live rows, oldest first): the memories' JSON, or
/// None to forward (a `limit` or `offset` out of range included: the app names it).
pub fn list(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: ListArgs = serde_json::from_slice(body).ok()?;
    let max = i64::try_from(crate::limits::MAX_LIMIT).ok()?;
    if args.filter.is_some()
        || !may_read(call, &args.namespace)
        || args.limit > max
        || !(0..=max).contains(&args.offset)
    {
        return None;
    }
    let found = call
        .engine
        .list(&args.namespace, &live_rows(), args.limit, args.offset)
        .ok()?;
    wire::memories(&found)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    namespace: String,
    id: String,
}

/// `POST /v1/get`: the memory's JSON, or None to forward (an absent one included: the app
/// answers its 404).
pub fn get(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: GetArgs = serde_json::from_slice(body).ok()?;
    if !may_read(call, &args.namespace) {
        return None;
    }
    let m = call.engine.get(&args.namespace, &args.id).ok()?;
    wire::memory_answer(&m)
}

/// A search's event rows (`events::search`), made now.
fn search(
    method: &str,
    who: &str,
    k: u64,
    searched: &[String],
    query: String,
    results: Vec<Vec<Scored>>,
) -> events::Rows {
    let hits = results
        .into_iter()
        .map(|hits| hits.into_iter().map(|h| hit(h.memory, h.score)).collect())
        .collect();
    let now = crate::types::now_micros();
    events::search(method, who, &k.to_string(), searched, query, now, hits)
}

/// A hit as its event row names it.
fn hit(m: Memory, score: f64) -> events::Hit {
    let summary = events::summary(&m.summary, &m.content);
    (m.id, m.namespace, m.tier, summary, score)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_read_only_in_its_canonical_form() {
        // RFC 4648's test vectors
        for (text, bytes) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(base64(text).as_deref(), Some(bytes.as_bytes()), "{text}");
        }
        assert_eq!(base64("+/+/").as_deref(), Some(&[0xfb, 0xff, 0xbf][..]));
        // padding bits set, padding misplaced or too long, another alphabet, whitespace
        for text in [
            "Zh==", "Zm9=", "Zg=", "Z===", "====", "Zg==Zg==", "Zm=v", "-_-_", "Zm9v\n", " Zm9v",
        ] {
            assert_eq!(base64(text), None, "{text}");
        }
        // every byte value in every position, through each padding length
        let bytes: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        for len in 0..bytes.len() {
            let text = encoded(&bytes[..len]);
            assert_eq!(base64(&text).as_deref(), Some(&bytes[..len]), "{len}");
        }
    }

    /// Standard padded base64 of `bytes`, written the plain way (the test's reference).
    fn encoded(bytes: &[u8]) -> String {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(alphabet[(n >> (18 - 6 * i) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn blank_is_what_python_strips() {
        // every character for which Python 3.11's str.isspace() is true
        let python: Vec<u32> = [0x9..=0xd, 0x1c..=0x20, 0x2000..=0x200a]
            .into_iter()
            .flatten()
            .chain([0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000])
            .collect();
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            let s = c.to_string();
            assert_eq!(
                blank(&s),
                python.contains(&u32::from(c)),
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert!(blank(""));
        assert!(!blank(" \u{3000}x\t"));
    }
}
