//! Writes the front answers itself, without the GIL: `upsert`, `upsert_many`, `update` and
//! `delete` of bodies it is sure of, with the checks `memini.Store` makes and the same engine call,
//! durable as before (the engine's group commit) when the answer leaves.
//!
//! A memory is written here only when every field it sends is one this module reads
//! exactly as `memini._wire` decodes it and `memini._convert.memory_to_row` checks it: an
//! `id`, a valid `namespace` the caller owns, `content`, an `embedding` of the store's
//! dims (a JSON array or base64, `native::Vector`), known `tier` and `level` values, text
//! `summary`, `tags` and `linked_memory_ids`, finite `importance`, `confidence` in [0, 1],
//! a non-negative integer `access_count`, `superseded_by` other than the id, metadata of
//! strings, integers, booleans and nulls (no float: Python writes its own digits, and
//! serde_json reads an integer beyond 64 bits as one), and no timestamp (null: the store
//! stamps them). A memory without an `embedding` (absent or null) is written here when its
//! content is blank (keyword-only, as the app stores it) or when the store's embedder is
//! the core's: the call's contents to embed ([`to_embed`]) in one call of its batching
//! queue, as `memini.Store._embed_rows` makes it. Anything else (such a memory with
//! another embedder or none, which the app embeds, stores keyword-only or refuses; a
//! timestamp, a marker, an engine error) returns None: the app answers it exactly as
//! before, errors included, and nothing was written here.
//!
//! A write answered here queues its event rows (`events::Write`) and its store metrics
//! (`Written`), which the owning process reports as `memini.Store` would have.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::events;
use super::native::{blank, caller, may_read, Call, Embedder, Vector};
use super::wire;
use crate::error::uninterrupted;
use crate::types::{Level, Memory, MemoryPatch, NewMemory, Tier, Unstamped};

/// Store metrics of the writes answered here, for the owning process to report
/// (`memini.metrics.Metrics.upsert` and `delete`).
#[derive(Default)]
pub struct Written {
    /// ((op, tier, memory type), calls): bounded by the few values each takes.
    upserts: Mutex<Vec<(Upserted, u64)>>,
    deletes: AtomicU64,
}

/// An upsert as the metrics name it: ("insert" or "update", tier, memory type or "").
pub type Upserted = (&'static str, &'static str, &'static str);

impl Written {
    fn upserted(&self, key: Upserted) {
        let mut upserts = self.upserts.lock();
        match upserts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => upserts.push((key, 1)),
        }
    }

    /// The upserts and deletes counted since the last call.
    pub fn take(&self) -> (Vec<(Upserted, u64)>, u64) {
        let upserts = std::mem::take(&mut *self.upserts.lock());
        (upserts, self.deletes.swap(0, Ordering::Relaxed))
    }
}

/// A field sent as null only (a timestamp: the store stamps it).
#[derive(Deserialize)]
enum Never {}

/// A JSON number as `memini._values.check_float` reads it: an integer within 64 bits, or
/// a finite float.
struct Real(f64);

impl<'de> Deserialize<'de> for Real {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        let text = raw.get();
        #[allow(
            clippy::cast_precision_loss,
            reason = "Python's float(int) rounds to nearest, as `as` does"
        )]
        let value = if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            text.parse::<f64>().ok()
        } else if let Ok(i) = text.parse::<i64>() {
            Some(i as f64)
        } else {
            text.parse::<u64>().ok().map(|u| u as f64)
        };
        value
            .filter(|v| v.is_finite())
            .map(Self)
            .ok_or_else(|| de::Error::custom("not a number the front reads"))
    }
}

/// A JSON integer literal (`3.0` is left to the app, which reads it as 3) that is >= 0.
#[derive(Default)]
struct Count(i64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        raw.get()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Self)
            .ok_or_else(|| de::Error::custom("not a count the front reads"))
    }
}

fn zero() -> Real {
    Real(0.0)
}

fn semantic() -> String {
    Tier::Semantic.as_str().to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "the timestamps are read only to be null")]
struct MemoryArgs {
    id: String,
    namespace: String,
    content: String,
    #[serde(default = "semantic")]
    tier: String,
    #[serde(default)]
    level: Option<String>,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default = "zero")]
    importance: Real,
    #[serde(default)]
    created_at: Option<Never>,
    #[serde(default)]
    updated_at: Option<Never>,
    #[serde(default)]
    last_accessed_at: Option<Never>,
    #[serde(default)]
    access_count: Count,
    #[serde(default)]
    expires_at: Option<Never>,
    #[serde(default)]
    superseded_by: Option<String>,
    #[serde(default)]
    valid_from: Option<Never>,
    #[serde(default)]
    valid_to: Option<Never>,
    #[serde(default)]
    confidence: Option<Real>,
    #[serde(default)]
    linked_memory_ids: Vec<String>,
    #[serde(default)]
    embedding: Option<Vector>,
}

/// Whether a memory's content is to be embedded by the store's embedder: it came without
/// an embedding (absent or null) and its content is not blank. The rule of
/// `memini.Store._embed_rows` (`test_front_text.py::test_fuzz_the_front_embeds_the_rows_the_app_embeds`
/// checks that they agree).
fn to_embed(memory: &NewMemory) -> bool {
    memory.embedding.is_none() && !blank(&memory.memory.content)
}

/// A memory to write and what its metrics and event row say of it, or None to forward.
fn new_memory(call: &Call<'_>, args: MemoryArgs, dims: usize) -> Option<(NewMemory, Upserted)> {
    let tier = Tier::parse(&args.tier).ok()?;
    let level = args.level.map(|l| Level::parse(&l)).transpose().ok()?;
    let confidence = args.confidence.map(|c| c.0);
    if args.id.is_empty()
        || !may_read(call, &args.namespace)
        || args.superseded_by.as_deref() == Some(args.id.as_str())
        || confidence.is_some_and(|c| !(0.0..=1.0).contains(&c))
        || args
            .embedding
            .as_ref()
            .is_some_and(|v| v.0.is_empty() || v.0.len() != dims)
    {
        return None;
    }
    let (metadata, memory_type) = match args.metadata {
        Some(m) => (m.text, m.memory_type),
        None => ("{}".to_owned(), ""),
    };
    let memory = Memory {
        fingerprint: crate::types::fingerprint(&args.content),
        id: args.id,
        namespace: args.namespace,
        content: args.content,
        tier,
        level,
        summary: args.summary,
        metadata,
        tags: args.tags,
        importance: args.importance.0,
        access_count: args.access_count.0,
        superseded_by: args.superseded_by,
        confidence,
        linked_memory_ids: args.linked_memory_ids,
        ..Memory::default()
    };
    let unstamped = Unstamped {
        created_at: true,
        updated_at: true,
        last_accessed_at: true,
    };
    let new = NewMemory {
        memory,
        unstamped,
        embedding: args.embedding.map(|v| v.0),
    };
    Some((new, ("", tier.as_str(), memory_type)))
}

/// The vectors of the memories [`to_embed`], made in one call of the store's embedder when
/// it is the core's; None (to forward) when any is to embed otherwise, or on its error.
fn embedded(call: &Call<'_>, rows: &mut [NewMemory]) -> Option<()> {
    let todo: Vec<usize> = (0..rows.len()).filter(|&i| to_embed(&rows[i])).collect();
    if todo.is_empty() {
        return Some(());
    }
    let Embedder::Local(embedder) = call.embedder else {
        return None;
    };
    let texts: Vec<String> = todo
        .iter()
        .map(|&i| rows[i].memory.content.clone())
        .collect();
    let vectors = embedder.embed(&texts, &uninterrupted()).ok()?;
    let dims = embedder.model().dims();
    if dims == 0 || vectors.len() != todo.len() * dims {
        return None;
    }
    for (&i, v) in todo.iter().zip(vectors.chunks_exact(dims)) {
        rows[i].embedding = Some(v.to_vec());
    }
    Some(())
}

/// Write `memories` (checked already) in one durable commit, their contents to embed
/// embedded first, their metrics counted and their event rows queued; None (nothing
/// written) to forward: a content to embed the front may not, an engine error.
fn write(
    call: &Call<'_>,
    method: &'static str,
    who: String,
    memories: Vec<(NewMemory, Upserted)>,
) -> Option<()> {
    let (mut rows, mut metrics): (Vec<NewMemory>, Vec<Upserted>) = memories.into_iter().unzip();
    embedded(call, &mut rows)?;
    let touched: Vec<events::Touched> = rows
        .iter()
        .map(|r| {
            let m = &r.memory;
            let summary = events::summary(&m.summary, &m.content);
            (
                m.id.clone(),
                m.namespace.clone(),
                Some(m.tier.as_str()),
                summary,
            )
        })
        .collect();
    let inserted = call.engine.upsert_many(rows).ok()?;
    for (key, inserted) in metrics.iter_mut().zip(inserted) {
        key.0 = if inserted { "insert" } else { "update" };
        call.written.upserted(*key);
    }
    if let Some(queue) = call.events {
        let now = crate::types::now_micros();
        queue.push_write((method, who, String::new(), now, touched, None));
    }
    Some(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpsertArgs {
    memory: MemoryArgs,
}

/// `POST /v1/upsert` of a memory the front is sure of: its id's JSON, or None to forward.
pub fn upsert(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: UpsertArgs = serde_json::from_slice(body).ok()?;
    let who = caller(call)?;
    let dims = call.engine.dims().ok()?;
    let (memory, metrics) = new_memory(call, args.memory, dims)?;
    let mut json = Vec::with_capacity(memory.memory.id.len() + 2);
    wire::string(&mut json, &memory.memory.id);
    write(call, "upsert", who, vec![(memory, metrics)])?;
    Some(json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpsertManyArgs {
    memories: Vec<MemoryArgs>,
}

/// `POST /v1/upsert_many` of 1 or more memories the front is sure of (all or none): their
/// count, or None to forward.
pub fn upsert_many(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: UpsertManyArgs = serde_json::from_slice(body).ok()?;
    let who = caller(call)?;
    let dims = call.engine.dims().ok()?;
    if args.memories.is_empty() {
        return None;
    }
    let n = args.memories.len();
    let memories = args
        .memories
        .into_iter()
        .map(|m| new_memory(call, m, dims))
        .collect::<Option<Vec<_>>>()?;
    write(call, "upsert_many", who, memories)?;
    Some(n.to_string().into_bytes())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteArgs {
    namespace: String,
    id: String,
}

/// `POST /v1/delete`: `null`, or None to forward (an absent memory included: the app
/// answers its 404, and nothing was deleted here).
pub fn delete(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: DeleteArgs = serde_json::from_slice(body).ok()?;
    let who = caller(call)?;
    if !may_read(call, &args.namespace) {
        return None;
    }
    call.engine.delete(&args.namespace, &args.id).ok()?;
    call.written.deletes.fetch_add(1, Ordering::Relaxed);
    if let Some(queue) = call.events {
        let now = crate::types::now_micros();
        let touched = vec![(args.id, args.namespace.clone(), None, String::new())];
        queue.push_write(("delete", who, args.namespace, now, touched, None));
    }
    Some(b"null".to_vec())
}

/// A field given (even as null): `Some`, read as `T`; absent: None (`#[serde(default)]`).
fn given<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `update`'s fields the front takes: no timestamp, no key field, and `content` only
/// with its `embedding` (new content without one may need the server's embedder).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
#[allow(clippy::option_option, reason = "Some(None): the field given as null")]
struct Fields {
    #[serde(default, deserialize_with = "given")]
    content: Option<String>,
    #[serde(default, deserialize_with = "given")]
    tier: Option<String>,
    #[serde(default, deserialize_with = "given")]
    level: Option<Option<String>>,
    #[serde(default, deserialize_with = "given")]
    summary: Option<String>,
    #[serde(default, deserialize_with = "given")]
    metadata: Option<Option<Metadata>>,
    #[serde(default, deserialize_with = "given")]
    tags: Option<Vec<String>>,
    #[serde(default, deserialize_with = "given")]
    importance: Option<Real>,
    #[serde(default, deserialize_with = "given")]
    access_count: Option<Count>,
    #[serde(default, deserialize_with = "given")]
    superseded_by: Option<Option<String>>,
    #[serde(default, deserialize_with = "given")]
    confidence: Option<Option<Real>>,
    #[serde(default, deserialize_with = "given")]
    linked_memory_ids: Option<Vec<String>>,
    #[serde(default, deserialize_with = "given")]
    embedding: Option<Vector>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    namespace: String,
    id: String,
    #[serde(default)]
    fields: Fields,
}

/// The names of the fields an update gives, sorted (its event row's `fields`).
fn named(f: &Fields) -> Vec<String> {
    let mut names: Vec<String> = [
        ("content", f.content.is_some()),
        ("tier", f.tier.is_some()),
        ("level", f.level.is_some()),
        ("summary", f.summary.is_some()),
        ("metadata", f.metadata.is_some()),
        ("tags", f.tags.is_some()),
        ("importance", f.importance.is_some()),
        ("access_count", f.access_count.is_some()),
        ("superseded_by", f.superseded_by.is_some()),
        ("confidence", f.confidence.is_some()),
        ("linked_memory_ids", f.linked_memory_ids.is_some()),
        ("embedding", f.embedding.is_some()),
    ]
    .into_iter()
    .filter(|(_, given)| *given)
    .map(|(name, _)| name.to_owned())
    .collect();
    names.sort_unstable();
    names
}

/// `POST /v1/update` of fields the front is sure of: the stored memory's JSON, or None to
/// forward (an absent memory included: nothing was changed here).
pub fn update(call: &Call<'_>, body: &[u8]) -> Option<Vec<u8>> {
    let args: UpdateArgs = serde_json::from_slice(body).ok()?;
    let who = caller(call)?;
    let dims = call.engine.dims().ok()?;
    let f = args.fields;
    let fields = named(&f);
    let confidence = f.confidence.map(|c| c.map(|c| c.0));
    let embedding = f.embedding.map(|v| v.0);
    if !may_read(call, &args.namespace)
        || (f.content.is_some() && embedding.is_none())
        || embedding.as_ref().is_some_and(|v| v.len() != dims)
        || f.superseded_by
            .as_ref()
            .is_some_and(|s| s.as_deref() == Some(args.id.as_str()))
        || confidence.is_some_and(|c| c.is_some_and(|c| !(0.0..=1.0).contains(&c)))
    {
        return None;
    }
    let patch = MemoryPatch {
        fingerprint: f.content.as_deref().map(crate::types::fingerprint),
        content: f.content,
        tier: f.tier.map(|t| Tier::parse(&t)).transpose().ok()?,
        level: f
            .level
            .map(|l| l.map(|l| Level::parse(&l)).transpose())
            .transpose()
            .ok()?,
        summary: f.summary,
        metadata: f
            .metadata
            .map(|m| m.map_or_else(|| "{}".to_owned(), |m| m.text)),
        tags: f.tags,
        importance: f.importance.map(|r| r.0),
        access_count: f.access_count.map(|c| c.0),
        superseded_by: f.superseded_by,
        confidence,
        linked_memory_ids: f.linked_memory_ids,
        embedding: embedding.map(Some),
        ..MemoryPatch::default()
    };
    let stored = call.engine.update(&args.namespace, &args.id, patch).ok()?;
    let json = wire::memory_answer(&stored)?;
    call.written.upserted((
        "update",
        stored.tier.as_str(),
        memory_type(&stored.metadata),
    ));
    if let Some(queue) = call.events {
        let now = crate::types::now_micros();
        let summary = events::summary(&stored.summary, &stored.content);
        let touched = vec![(
            stored.id,
            args.namespace.clone(),
            Some(stored.tier.as_str()),
            summary,
        )];
        queue.push_write(("update", who, args.namespace, now, touched, Some(fields)));
    }
    Some(json)
}

/// The memory type the metrics name a stored row by (its metadata's top-level
/// `memory_type`, when one of [`MEMORY_TYPES`]), "" otherwise.
fn memory_type(metadata: &str) -> &'static str {
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(borrow)]
        memory_type: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Typed<'_>>(metadata)
        .ok()
        .and_then(|t| t.memory_type)
        .and_then(|t| MEMORY_TYPES.into_iter().find(|m| *m == t))
        .unwrap_or("")
}

/// Metadata as `memini._values.metadata_to_json` stores it (`json.dumps` with
/// `ensure_ascii=False` and compact separators: keys in their order, serde_json's string
/// escapes, which are Python's), and its top-level `memory_type` as the metrics name it.
struct Metadata {
    text: String,
    memory_type: &'static str,
}

/// Containers nested deeper than this are refused by the app (`_MAX_JSON_DEPTH`).
const MAX_DEPTH: usize = 100;

/// The memory types the metrics count by name (`memini.store._METRICS_MEMORY_TYPES`).
const MEMORY_TYPES: [&str; 3] = ["decision", "preference", "problem"];

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = Vec::with_capacity(64);
        let mut memory_type = "";
        d.deserialize_map(Json {
            out: &mut out,
            depth: 0,
            memory_type: Some(&mut memory_type),
        })?;
        let text = String::from_utf8(out).map_err(de::Error::custom)?;
        Ok(Self { text, memory_type })
    }
}

/// Writes the JSON value it reads as Python's `json.dumps` does; refuses a float, a
/// duplicate key, a `$memini:` marker key and nesting deeper than [`MAX_DEPTH`].
struct Json<'a, 'm> {
    out: &'a mut Vec<u8>,
    depth: usize,
    /// Set at the top level: where the `memory_type` value goes.
    memory_type: Option<&'m mut &'static str>,
}

impl<'de> DeserializeSeed<'de> for Json<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Json<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON without floats")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.out.extend_from_slice(v.to_string().as_bytes());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.out.extend_from_slice(v.to_string().as_bytes());
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        wire::string(self.out, v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth > MAX_DEPTH || self.memory_type.is_some() {
            return Err(de::Error::custom("nested too deeply, or not an object"));
        }
        self.out.push(b'[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            let item = Json {
                out: &mut *self.out,
                depth: self.depth + 1,
                memory_type: None,
            };
            if seq.next_element_seed(item)?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if self.depth > MAX_DEPTH {
            return Err(de::Error::custom("nested too deeply"));
        }
        self.out.push(b'{');
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.starts_with("$memini:") || !keys.insert(key.clone()) {
                return Err(de::Error::custom("a marker or a repeated key"));
            }
            if keys.len() > 1 {
                self.out.push(b',');
            }
            wire::string(self.out, &key);
            self.out.push(b':');
            let mark = self.out.len();
            map.next_value_seed(Json {
                out: &mut *self.out,
                depth: self.depth + 1,
                memory_type: None,
            })?;
            if key == "memory_type" {
                if let Some(slot) = self.memory_type.as_mut() {
                    let value = &self.out[mark..];
                    if let Some(t) = MEMORY_TYPES
                        .into_iter()
                        .find(|t| value.len() == t.len() + 2 && &value[1..=t.len()] == t.as_bytes())
                    {
                        **slot = t;
                    }
                }
            }
        }
        self.out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(json: &str) -> Option<(String, &'static str)> {
        serde_json::from_str::<Metadata>(json)
            .ok()
            .map(|m| (m.text, m.memory_type))
    }

    #[test]
    fn metadata_is_stored_as_python_dumps_it() {
        let (text, kind) = stored(
            r#"{ "z": [1, -2, true, null], "a": {"b": "\u0001é\"\n"},
            "memory_type": "decision", "": 18446744073709551615 }"#,
        )
        .unwrap_or_default();
        assert_eq!(
            text,
            r#"{"z":[1,-2,true,null],"a":{"b":"\u0001é\"\n"},"memory_type":"decision","":18446744073709551615}"#
        );
        assert_eq!(kind, "decision");
        assert_eq!(stored("{}"), Some(("{}".to_owned(), "")));
        assert_eq!(stored(r#"{"memory_type": "other"}"#).map(|m| m.1), Some(""));
        assert_eq!(
            stored(r#"{"m": {"memory_type": "problem"}}"#).map(|m| m.1),
            Some("")
        );
    }

    #[test]
    fn metadata_the_front_is_unsure_of_is_refused() {
        for json in [
            r#"{"a": 1.5}"#,
            r#"{"a": 1e2}"#,
            r#"{"a": 100000000000000000000}"#,
            r#"{"a": 1, "a": 2}"#,
            r#"{"$memini:float": "nan"}"#,
            r#"{"a": {"$memini:set": []}}"#,
            "[1]",
            r#""text""#,
        ] {
            assert!(stored(json).is_none(), "{json}");
        }
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        assert!(stored(&deep(100)).is_some());
        assert!(stored(&deep(101)).is_none());
    }

    #[test]
    fn numbers_are_read_as_python_reads_them() {
        let real = |s: &str| serde_json::from_str::<Real>(s).ok().map(|r| r.0);
        assert_eq!(real("3"), Some(3.0));
        assert_eq!(real("-0.0"), Some(-0.0));
        assert_eq!(real("0.1"), Some(0.1));
        assert_eq!(
            real("18446744073709551615"),
            Some(18_446_744_073_709_551_615.0)
        );
        assert_eq!(real("18446744073709551616"), None);
        assert_eq!(real("1e400"), None);
        assert_eq!(real("true"), None);
        let count = |s: &str| serde_json::from_str::<Count>(s).ok().map(|c| c.0);
        assert_eq!(count("3"), Some(3));
        assert_eq!(count("3.0"), None);
        assert_eq!(count("-1"), None);
    }
}
