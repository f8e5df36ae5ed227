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

use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::types::{civil, Memory, Micros, Scored};

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
}

crate::for_memory_fields!(memory_json);

fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"null");
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
