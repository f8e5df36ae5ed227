//! Answers rendered as `memini._wire.dumps` (orjson) renders the Python objects the app
//! answers with, byte for byte: a `Memory` as an object of its fields in the order of
//! `for_memory_fields` (which is the dataclass's) ending with `"embedding":null`, a
//! datetime as RFC 3339 with `+00:00` (microseconds only when not zero), a float in the
//! shortest form that reads back the same (`e+16`, `1e-7`), metadata as the object the
//! stored JSON text parses to, keys in their stored order.
//!
//! Anything that cannot be rendered so (a timestamp outside Python's datetime range, a
//! damaged metadata text) makes the whole answer None: the caller forwards the request and
//! the app answers it, errors included.
//!
//! [`read`] is the client's side: an answer holding memories (`hits`, `recalled`,
//! `memories`, `memory_answer`, the same from the app) read back into the core's types, for
//! `memini._core.read_answer` to build the objects a local call returns. It takes the forms
//! written here and refuses the rest: a field unknown, missing (but the optional ones) or of
//! another JSON type, an unknown tier or level, a datetime not in the form above, metadata
//! that is not an object, an embedding that is not null. Whatever it reads, the Python
//! decoder of the same slot reads alike (`tests/test_client.py` checks it on any answer).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::engine::Recalled;
use crate::error::{Error, Result};
use crate::types::{civil, from_civil, Civil, Level, Memory, Micros, Scored, Tier};

/// `[item, ...]`: each item written by `write` (`bytes_each`: a guess of its size).
pub fn array<T>(
    items: &[T],
    bytes_each: usize,
    mut write: impl FnMut(&mut Vec<u8>, &T) -> Option<()>,
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(items.len() * bytes_each + 2);
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(&mut out, item)?;
    }
    out.push(b']');
    Some(out)
}

/// `[{"memory": {...}, "score": s}, ...]`: a search's hits.
#[must_use]
pub fn hits(hits: &[Scored]) -> Option<Vec<u8>> {
    array(hits, 512, |out, h| {
        out.extend_from_slice(b"{\"memory\":");
        memory(out, &h.memory)?;
        out.extend_from_slice(b",\"score\":");
        float(out, h.score);
        out.push(b'}');
        Some(())
    })
}

/// `[{"memory", "score", "vector_score", "keyword_score", "via"}, ...]`: a recall's answer.
#[must_use]
pub fn recalled(found: &[crate::Recalled]) -> Option<Vec<u8>> {
    array(found, 600, |out, r| {
        out.extend_from_slice(b"{\"memory\":");
        memory(out, &r.memory)?;
        out.extend_from_slice(b",\"score\":");
        float(out, r.score);
        for (name, v) in [
            (&b",\"vector_score\":"[..], r.vector_score),
            (b",\"keyword_score\":", r.keyword_score),
        ] {
            out.extend_from_slice(name);
            match v {
                Some(f) => float(out, f),
                None => null(out),
            }
        }
        out.extend_from_slice(b",\"via\":");
        string(out, &r.via);
        out.push(b'}');
        Some(())
    })
}

/// `[{...}, ...]`: memories (`list`'s answer).
#[must_use]
pub fn memories(ms: &[Memory]) -> Option<Vec<u8>> {
    array(ms, 512, memory)
}

/// One memory's object (`get`'s answer).
#[must_use]
pub fn memory_answer(m: &Memory) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(512);
    memory(&mut out, m)?;
    Some(out)
}

macro_rules! memory_json {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
        /// One `memini.Memory` as an object (`embedding` is null: rows read carry none).
        fn memory(out: &mut Vec<u8>, m: &Memory) -> Option<()> {
            out.push(b'{');
            $( memory_json!(@field $py, out, m, $name); )*
            out.extend_from_slice(b"\"embedding\":null}");
            Some(())
        }
    };
    (@field digest, $out:ident, $m:ident, $name:ident) => {};
    (@field $py:ident, $out:ident, $m:ident, $name:ident) => {
        $out.extend_from_slice(concat!("\"", stringify!($name), "\":").as_bytes());
        memory_json!(@value $py, $out, $m.$name);
        $out.push(b',');
    };
    (@value text, $out:ident, $v:expr) => { string($out, &$v) };
    (@value opt_text, $out:ident, $v:expr) => {
        match &$v { Some(s) => string($out, s), None => null($out) }
    };
    (@value tier, $out:ident, $v:expr) => { string($out, $v.as_str()) };
    (@value level, $out:ident, $v:expr) => {
        match $v { Some(l) => string($out, l.as_str()), None => null($out) }
    };
    (@value json, $out:ident, $v:expr) => { metadata($out, &$v)? };
    (@value list, $out:ident, $v:expr) => { strings($out, &$v) };
    (@value float, $out:ident, $v:expr) => { float($out, $v) };
    (@value opt_float, $out:ident, $v:expr) => {
        match $v { Some(f) => float($out, f), None => null($out) }
    };
    (@value int, $out:ident, $v:expr) => { $out.extend_from_slice($v.to_string().as_bytes()) };
    (@value time, $out:ident, $v:expr) => { time($out, $v)? };
    (@value opt_time, $out:ident, $v:expr) => {
        match $v { Some(t) => time($out, t)?, None => null($out) }
    };

    (@set digest, $map:ident, $p:ident, $name:ident) => {
        return Err(de::Error::unknown_field(stringify!($name), MEMORY_FIELDS))
    };
    (@set $kind:ident, $map:ident, $p:ident, $name:ident) => {
        $p.$name = Some(memory_json!(@read $kind, $map, $name))
    };
    (@read tier, $map:ident, $name:ident) => {
        Tier::parse(&$map.next_value::<Key<'_>>()?.0).map_err(de::Error::custom)?
    };
    (@read level, $map:ident, $name:ident) => {
        $map.next_value::<Option<Key<'_>>>()?
            .map(|l| Level::parse(&l.0))
            .transpose()
            .map_err(de::Error::custom)?
    };
    (@read json, $map:ident, $name:ident) => {{
        let raw: &RawValue = $map.next_value()?;
        if !raw.get().starts_with('{') {
            return Err(de::Error::custom("metadata must be a JSON object"));
        }
        raw.get().to_owned()
    }};
    (@read float, $map:ident, $name:ident) => { $map.next_value::<Float>()?.0 };
    (@read opt_float, $map:ident, $name:ident) => {
        $map.next_value::<Option<Float>>()?.map(|f| f.0)
    };
    (@read time, $map:ident, $name:ident) => { $map.next_value::<Time>()?.0 };
    (@read opt_time, $map:ident, $name:ident) => {
        $map.next_value::<Option<Time>>()?.map(|t| t.0)
    };
    (@read $kind:ident, $map:ident, $name:ident) => { $map.next_value()? };

    // what an absent field reads as: the optional ones None, the others refused
    (@absent digest, $name:ident) => { String::new() };
    (@absent opt_text, $name:ident) => { None };
    (@absent level, $name:ident) => { None };
    (@absent opt_float, $name:ident) => { None };
    (@absent opt_time, $name:ident) => { None };
    (@absent $kind:ident, $name:ident) => {
        return Err(de::Error::missing_field(stringify!($name)))
    };
}

macro_rules! memory_read {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
        /// The fields of a memory's object, as `memory` writes them.
        const MEMORY_FIELDS: &[&str] = &[$( stringify!($name), )* "embedding"];

        /// The fields read so far (the last one given wins, as in Python's `json`).
        #[derive(Default)]
        struct Partial {
            $( $name: Option<$ty>, )*
        }

        impl<'de> Visitor<'de> for MemoryVisitor {
            type Value = Memory;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a memory's object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Memory, A::Error> {
                let mut p = Partial::default();
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        $( stringify!($name) => memory_json!(@set $py, map, p, $name), )*
                        "embedding" => {
                            map.next_value::<Option<Null>>()?;
                        }
                        other => return Err(de::Error::unknown_field(other, MEMORY_FIELDS)),
                    }
                }
                Ok(Memory {
                    $( $name: match p.$name {
                        Some(v) => v,
                        None => memory_json!(@absent $py, $name),
                    }, )*
                })
            }
        }
    };
}

crate::for_memory_fields!(memory_read);

crate::for_memory_fields!(memory_json);

fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"null");
}

/// The shapes of answer [`read`] reads, by the return type of their methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shape {
    /// `Memory` (`get`, `update`, `get_by_fingerprint`).
    Memory,
    /// `list[Memory]` (`list`, `list_expired`).
    Memories,
    /// `list[Scored]` (`vector_search`, `keyword_search`).
    Hits,
    /// `list[list[Scored]]` (`vector_search_many`).
    HitsMany,
    /// `list[Recalled]` (`recall`).
    Recalled,
}

impl Shape {
    /// Every shape, by the name `memini._core.read_answer` takes.
    pub const ALL: [(&'static str, Shape); 5] = [
        ("memory", Shape::Memory),
        ("memories", Shape::Memories),
        ("hits", Shape::Hits),
        ("hits_many", Shape::HitsMany),
        ("recalled", Shape::Recalled),
    ];

    /// The return type the shape is of.
    #[must_use]
    pub fn returns(self) -> &'static str {
        match self {
            Shape::Memory => "Memory",
            Shape::Memories => "list[Memory]",
            Shape::Hits => "list[Scored]",
            Shape::HitsMany => "list[list[Scored]]",
            Shape::Recalled => "list[Recalled]",
        }
    }

    /// The shape named `name`.
    ///
    /// # Errors
    /// `InvalidArgument` for another name, listing the names.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, s)| s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                Error::invalid(format!(
                    "unknown answer shape {name:?} (use one of: {})",
                    names.join(", ")
                ))
            })
    }
}

/// An answer [`read`] read, one variant per [`Shape`].
#[derive(Debug)]
pub enum Answer {
    /// [`Shape::Memory`]'s.
    Memory(Box<Memory>),
    /// [`Shape::Memories`]'s.
    Memories(Vec<Memory>),
    /// [`Shape::Hits`]'s.
    Hits(Vec<Scored>),
    /// [`Shape::HitsMany`]'s.
    HitsMany(Vec<Vec<Scored>>),
    /// [`Shape::Recalled`]'s.
    Recalled(Vec<Recalled>),
}

/// The answer `json` of the `shape` (see the module docs for what is refused).
///
/// # Errors
/// `InvalidArgument` naming what is wrong and where, for any JSON text not of the shape.
pub fn read(shape: Shape, json: &[u8]) -> Result<Answer> {
    fn of<'a, T: Deserialize<'a>>(json: &'a [u8]) -> serde_json::Result<T> {
        serde_json::from_slice(json)
    }
    let read = match shape {
        Shape::Memory => of::<MemoryIn>(json).map(|m| Answer::Memory(Box::new(m.0))),
        Shape::Memories => of::<Vec<MemoryIn>>(json)
            .map(|ms| Answer::Memories(ms.into_iter().map(|m| m.0).collect())),
        Shape::Hits => of::<Vec<ScoredIn>>(json).map(|hs| Answer::Hits(scored(hs))),
        Shape::HitsMany => of::<Vec<Vec<ScoredIn>>>(json)
            .map(|all| Answer::HitsMany(all.into_iter().map(scored).collect())),
        Shape::Recalled => of::<Vec<RecalledIn>>(json).map(|rs| {
            Answer::Recalled(
                rs.into_iter()
                    .map(|r| Recalled {
                        memory: r.memory.0,
                        score: r.score,
                        vector_score: r.vector_score,
                        keyword_score: r.keyword_score,
                        via: r.via,
                    })
                    .collect(),
            )
        }),
    };
    read.map_err(|e| {
        Error::invalid(format!(
            "the server's answer is not a {} as the server writes it: {e}",
            shape.returns()
        ))
    })
}

fn scored(hits: Vec<ScoredIn>) -> Vec<Scored> {
    hits.into_iter()
        .map(|h| Scored {
            memory: h.memory.0,
            score: h.score,
        })
        .collect()
}

/// A memory's object (`memory`), read.
struct MemoryIn(Memory);

struct MemoryVisitor;

impl<'de> Deserialize<'de> for MemoryIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(MemoryVisitor).map(MemoryIn)
    }
}

/// A hit's object (`hits`), read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScoredIn {
    memory: MemoryIn,
    #[serde(deserialize_with = "a_float")]
    score: f64,
}

/// A recalled memory's object (`recalled`), read: every field present, null or not.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecalledIn {
    memory: MemoryIn,
    #[serde(deserialize_with = "a_float")]
    score: f64,
    #[serde(deserialize_with = "present")]
    vector_score: Option<f64>,
    #[serde(deserialize_with = "present")]
    keyword_score: Option<f64>,
    via: String,
}

fn a_float<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Float::deserialize(d).map(|f| f.0)
}

/// An optional field that must be given (null or a value): serde reads an absent `Option`
/// field as None unless it is read through a function.
fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    Ok(Option::<Float>::deserialize(d)?.map(|f| f.0))
}

/// A float: a JSON number with a fraction or an exponent, or an integer a float holds
/// exactly (Python reads `3` as an int, equal to the float 3.0 only while exact).
struct Float(f64);

/// The integers up to this magnitude are exact in a float.
const EXACT: u64 = 1 << 53;

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct FloatVisitor;
        impl Visitor<'_> for FloatVisitor {
            type Value = Float;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Float, E> {
                Ok(Float(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Float, E> {
                #[allow(clippy::cast_precision_loss, reason = "exact: at most 2**53")]
                if v <= EXACT {
                    Ok(Float(v as f64))
                } else {
                    Err(E::custom("an integer beyond 2**53 where a float belongs"))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Float, E> {
                let f = self.visit_u64::<E>(v.unsigned_abs())?.0;
                Ok(Float(if v < 0 { -f } else { f }))
            }
        }
        d.deserialize_f64(FloatVisitor)
    }
}

/// An object key, borrowed from the answer unless it holds an escape.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A value only null reads as (`embedding`: rows read carry none).
enum Null {}

impl<'de> Deserialize<'de> for Null {
    fn deserialize<D: Deserializer<'de>>(_: D) -> std::result::Result<Self, D::Error> {
        Err(de::Error::custom("embedding must be null in an answer"))
    }
}

/// A timestamp as `time` writes it, read: `YYYY-MM-DDTHH:MM:SS`, then `.ffffff` (six
/// digits) or nothing, then `+00:00`; a date or time of day that does not exist is refused.
struct Time(Micros);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let Key(text) = Key::deserialize(d)?;
        parse_time(text.as_bytes()).map(Time).ok_or_else(|| {
            de::Error::custom(format_args!(
                "{:?} is not a datetime such as \"2026-01-31T12:00:00.000120+00:00\"",
                text.chars().take(40).collect::<String>()
            ))
        })
    }
}

fn parse_time(t: &[u8]) -> Option<Micros> {
    let micro = match t.len() {
        25 => 0,
        32 if t[19] == b'.' => number(&t[20..26])?,
        _ => return None,
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if &t[t.len() - 6..] != b"+00:00" || seps.iter().any(|&(i, c)| t[i] != c) {
        return None;
    }
    let two = |i: usize| number(&t[i..i + 2]).and_then(|v| u8::try_from(v).ok());
    let c = Civil {
        year: i32::try_from(number(&t[..4])?).ok()?,
        month: two(5)?,
        day: two(8)?,
        hour: two(11)?,
        minute: two(14)?,
        second: two(17)?,
        micro,
    };
    from_civil(&c)
}

/// The value of ASCII decimal digits (all digits, or None).
fn number(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
    })
}

/// A JSON string: `"`, `\` and control characters escaped (`\n`, `\u001f`), everything else
/// as its UTF-8.
pub fn string(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly the characters orjson escapes, in the same forms
    let _ = serde_json::to_writer(&mut *out, s);
}

fn strings(out: &mut Vec<u8>, items: &[String]) {
    out.push(b'[');
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, s);
    }
    out.push(b']');
}

/// A finite float as orjson writes it: the shortest digits that read back the same, fixed
/// notation for exponents -5 to 15 (`0.00001`, `1000000000000000.0`), else scientific with
/// a signed exponent (`1e-7`, `1.5e+16`). A non-finite one (never stored) as null.
pub fn float(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        return null(out);
    }
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f).as_bytes();
    match text.iter().position(|&b| b == b'e') {
        Some(e) if text.get(e + 1) != Some(&b'-') => {
            out.extend_from_slice(&text[..=e]);
            out.push(b'+');
            out.extend_from_slice(&text[e + 1..]);
        }
        _ => out.extend_from_slice(text),
    }
}

/// A timestamp as orjson writes an aware UTC datetime: `"2026-01-02T03:04:05.000120+00:00"`,
/// the fraction left out when it is zero; None outside Python's datetime range. Its digits
/// are written here, not through `fmt` (a served hit has four timestamps or more).
fn time(out: &mut Vec<u8>, us: Micros) -> Option<()> {
    let c = civil(us)?;
    out.push(b'"');
    digits(out, u32::try_from(c.year).ok()?, 4);
    for (sep, v) in [
        (b'-', c.month),
        (b'-', c.day),
        (b'T', c.hour),
        (b':', c.minute),
        (b':', c.second),
    ] {
        out.push(sep);
        digits(out, u32::from(v), 2);
    }
    if c.micro != 0 {
        out.push(b'.');
        digits(out, c.micro, 6);
    }
    out.extend_from_slice(b"+00:00\"");
    Some(())
}

/// `v`'s last `width` decimal digits, zero-padded.
fn digits(out: &mut Vec<u8>, mut v: u32, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for d in out[start..].iter_mut().rev() {
        #[allow(clippy::cast_possible_truncation, reason = "a digit")]
        let digit = (v % 10) as u8;
        *d = b'0' + digit;
        v /= 10;
    }
}

/// Stored metadata JSON text as the object Python parses it into, re-rendered: keys in
/// their order, numbers and strings as orjson writes them; None when it is not an object.
fn metadata(out: &mut Vec<u8>, text: &str) -> Option<()> {
    if text.is_empty() || text == "{}" {
        out.extend_from_slice(b"{}");
        return Some(());
    }
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    Transcode(out).deserialize(&mut de).ok()?;
    de.end().ok()
}

/// Writes the JSON value it reads, in orjson's forms.
struct Transcode<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Transcode<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.extend_from_slice(v.to_string().as_bytes());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.extend_from_slice(v.to_string().as_bytes());
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        float(self.0, v);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        string(self.0, v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        null(self.0);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(Transcode(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push(b'{');
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if !first {
                self.0.push(b',');
            }
            first = false;
            string(self.0, &key);
            self.0.push(b':');
            map.next_value_seed(Transcode(self.0))?;
        }
        self.0.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn floats_as_orjson() {
        // expected: orjson 3.13's output for each value
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-7, "1e-7"),
            (1e-5, "0.00001"),
            (2.5e-5, "0.000025"),
            (0.1, "0.1"),
            (1.234_567_890_123_456_8e20, "1.2345678901234568e+20"),
            (5e-324, "5e-324"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5e-6, "1.5e-6"),
        ];
        for (f, want) in cases {
            assert_eq!(rendered(|o| float(o, f)), want);
        }
    }

    #[test]
    fn times_as_orjson() {
        assert_eq!(
            rendered(|o| assert!(time(o, 0).is_some())),
            "\"1970-01-01T00:00:00+00:00\""
        );
        assert_eq!(
            rendered(|o| assert!(time(o, 120).is_some())),
            "\"1970-01-01T00:00:00.000120+00:00\""
        );
        assert!(time(&mut Vec::new(), Micros::MAX).is_none());
        // the extremes of Python's datetime, each field at its widest
        assert_eq!(
            rendered(|o| assert!(time(o, -62_135_596_800_000_000).is_some())),
            "\"0001-01-01T00:00:00+00:00\""
        );
        assert_eq!(
            rendered(|o| assert!(time(o, 253_402_300_799_999_999).is_some())),
            "\"9999-12-31T23:59:59.999999+00:00\""
        );
    }

    #[test]
    fn answers_read_back_as_written() {
        let m = Memory {
            id: "a\"\n\u{1}".into(),
            namespace: "n".into(),
            content: "é 😀".into(),
            tier: Tier::Working,
            level: Some(Level::Deduced),
            summary: "s".into(),
            metadata: r#"{"z":[1,2.5e-7,{"\\":null}]}"#.into(),
            tags: vec!["t".into(), String::new()],
            importance: -0.0,
            created_at: 120,
            updated_at: -62_135_596_800_000_000,
            last_accessed_at: 253_402_300_799_999_999,
            access_count: i64::MIN,
            expires_at: Some(1_000_000),
            superseded_by: Some("b".into()),
            valid_from: None,
            valid_to: Some(0),
            confidence: Some(0.1),
            linked_memory_ids: vec!["c".into()],
            fingerprint: String::new(),
        };
        let hit = Scored {
            memory: m.clone(),
            score: 1e16,
        };
        let json = hits(std::slice::from_ref(&hit)).unwrap_or_default();
        let Ok(Answer::Hits(got)) = read(Shape::Hits, &json) else {
            panic!("not read: {}", String::from_utf8_lossy(&json));
        };
        assert_eq!((&got[0].memory, got[0].score), (&m, hit.score));
        let json = memory_answer(&m).unwrap_or_default();
        assert!(matches!(read(Shape::Memory, &json), Ok(Answer::Memory(got)) if *got == m));
        // another shape's answer is refused
        assert!(read(Shape::Memories, &json).is_err());
    }

    #[test]
    fn times_read_back_as_written() {
        let mut us = -62_135_596_800_000_000;
        while us < 253_402_300_799_999_999 {
            let text = rendered(|o| assert!(time(o, us).is_some()));
            assert_eq!(
                parse_time(text.trim_matches('"').as_bytes()),
                Some(us),
                "{text}"
            );
            us += 3_599_999_999_937; // every hour of the day and every microsecond digit
        }
        for text in [
            "2026-02-29T00:00:00+00:00",
            "2026-01-31T24:00:00+00:00",
            "2026-01-31T12:60:00+00:00",
            "0000-01-01T00:00:00+00:00",
            "2026-01-31T12:00:00.000001Z",
            "2026-01-31T12:00:00.123+00:00",
            "2026-01-31T12:00:00-00:00",
            "2026-01-31 12:00:00+00:00",
            "+026-01-31T12:00:00+00:00",
        ] {
            assert_eq!(parse_time(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn metadata_keeps_key_order() {
        let text = r#"{"z":1,"a":[1.0,1e-07,true,null,"\u0001é"],"m":{"b":2,"a":1e+16}}"#;
        assert_eq!(
            rendered(|o| assert!(metadata(o, text).is_some())),
            r#"{"z":1,"a":[1.0,1e-7,true,null,"\u0001é"],"m":{"b":2,"a":1e+16}}"#
        );
        assert!(metadata(&mut Vec::new(), "[1]").is_none());
        assert!(metadata(&mut Vec::new(), "{\"a\":").is_none());
    }
}
