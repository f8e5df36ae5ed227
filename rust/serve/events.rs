//! The event rows of served searches (API.md sections 5 and 8), made in the core and queued
//! without the GIL for the owning process to write.
//!
//! [`search`] is the one home of a search's rows: one per hit (0-based `rank`, `score`, the
//! hit's id, namespace, tier and [`summary`]) under the hit's own namespace, or one per
//! namespace searched when nothing was found, each with the call's `detail` JSON; the query
//! once, for `event_queries`. The front makes them when it answers a call; the app's
//! recorder (`memini.server._events.search_events`) calls it through the binding for the
//! searches Python answers. Each row is final but for its operation id, given when the
//! rows are taken (`memini.types.new_id`, the one home of ids), and the fold of a non-ASCII
//! text (`str.casefold`, Python's: [`Fold::Python`]). A batch of them crosses into SQLite
//! as one JSON text ([`pack`]), which SQLite expands itself, so the GIL is not held per row.
//!
//! The queue is bounded in rows: a call whose rows do not fit is dropped whole, never
//! waited for, and its rows counted (`dropped`, in the served `stats()` and `/metrics`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::types::{Micros, Tier};

/// The longest summary an event row keeps, in characters.
const SUMMARY_CHARS: usize = 200;

/// The summary an event row keeps of a memory: its summary, else its content, cut to
/// [`SUMMARY_CHARS`] characters with `…` as the last one (the one home of the rule; the
/// Python recorder calls it as `memini._core.event_summary`).
#[must_use]
pub fn summary(summary: &str, content: &str) -> String {
    let text = if summary.is_empty() { content } else { summary };
    match text.char_indices().nth(SUMMARY_CHARS - 1) {
        Some((cut, _)) if text.chars().count() > SUMMARY_CHARS => {
            let mut s = String::with_capacity(cut + 3);
            s.push_str(&text[..cut]);
            s.push('…');
            s
        }
        _ => text.to_owned(),
    }
}

/// A text's `*_fold` column (`memini.events._fold`: `str.casefold()`, NULL when that
/// changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fold {
    /// Folding changes nothing: NULL.
    Same,
    /// The folded text.
    Folded(String),
    /// Not ASCII: folded by Python's `str.casefold` when the rows are taken (Rust's
    /// lowercase is not casefold beyond ASCII, e.g. `ß`).
    Python,
}

impl Fold {
    /// The fold of `text`: exact for ASCII (where casefold is ASCII lowercase), else
    /// [`Fold::Python`].
    #[must_use]
    pub fn of(text: &str) -> Self {
        if !text.is_ascii() {
            Self::Python
        } else if text.bytes().any(|b| b.is_ascii_uppercase()) {
            Self::Folded(text.to_ascii_lowercase())
        } else {
            Self::Same
        }
    }
}

/// A hit as its event row names it: (id, namespace, tier, summary, score).
pub type Hit = (String, String, Tier, String, f64);

/// One row of a search (`memini.events.event_row` with `kind = "recall"`, `query = ""`,
/// `query_fold` NULL): a hit's row, or a namespace searched that found nothing
/// (`memory_id`, `memory_ns` and `summary` empty, no tier, no score).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub namespace: String,
    pub memory_id: String,
    pub tier: Option<Tier>,
    pub summary: String,
    pub summary_fold: Fold,
    pub rank: usize,
    pub score: Option<f64>,
    /// Its `detail`: an index into [`Rows::details`].
    pub detail: usize,
}

impl Row {
    /// Its `memory_ns`: the hit's namespace, empty for a row that names no memory.
    #[must_use]
    pub fn memory_ns(&self) -> &str {
        if self.memory_id.is_empty() {
            ""
        } else {
            &self.namespace
        }
    }
}

/// The rows of one search, with what they share.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    /// The `detail` JSON texts (one per query of a `vector_search_many`, else one).
    pub details: Vec<String>,
    pub rows: Vec<Row>,
    /// The query (`event_queries`, when not empty) and its fold.
    pub query: String,
    pub query_fold: Fold,
    pub created_at: Micros,
}

/// A search's `detail` JSON text, as `memini._values.metadata_to_json` writes the dict
/// `{"method", "caller", "k", "namespaces"[, "query_index"]}` (compact, key order kept,
/// non-ASCII kept; `k_json`: `k` as JSON, which the app keeps as the caller typed it).
#[must_use]
pub fn search_detail(
    method: &str,
    caller: &str,
    k_json: &str,
    searched: &[String],
    query_index: Option<usize>,
) -> String {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut out = format!(
        r#"{{"method":{},"caller":{},"k":{k_json},"namespaces":{}"#,
        text(method),
        text(caller),
        serde_json::to_string(searched).unwrap_or_default()
    );
    if let Some(i) = query_index {
        let _ = write!(out, r#","query_index":{i}"#);
    }
    out.push('}');
    out
}

/// The rows of one search made at `created_at` (`results`: one list of hits per query,
/// several only for `vector_search_many`; `searched`: the namespaces searched).
#[must_use]
pub fn search(
    method: &str,
    caller: &str,
    k_json: &str,
    searched: &[String],
    query: String,
    created_at: Micros,
    results: Vec<Vec<Hit>>,
) -> Rows {
    let many = method == "vector_search_many";
    let mut details = Vec::with_capacity(results.len());
    let mut rows = Vec::new();
    for (i, hits) in results.into_iter().enumerate() {
        let detail = details.len();
        details.push(search_detail(
            method,
            caller,
            k_json,
            searched,
            many.then_some(i),
        ));
        if hits.is_empty() {
            rows.extend(searched.iter().map(|ns| Row {
                namespace: ns.clone(),
                memory_id: String::new(),
                tier: None,
                summary: String::new(),
                summary_fold: Fold::Same,
                rank: 0,
                score: None,
                detail,
            }));
        }
        rows.extend(hits.into_iter().enumerate().map(
            |(rank, (id, namespace, tier, summary, score))| Row {
                namespace,
                memory_id: id,
                tier: Some(tier),
                summary_fold: Fold::of(&summary),
                summary,
                rank,
                score: Some(score),
                detail,
            },
        ));
    }
    let query_fold = Fold::of(&query);
    Rows {
        details,
        rows,
        query,
        query_fold,
        created_at,
    }
}

/// A score as `[m, a, b, c]`, `score == m / 2^a / 2^b / 2^c` exactly (`|m| < 2^53`, each
/// shift <= 62), how [`pack`] sends a REAL: SQLite computes `CAST(m AS REAL) / (1 << a) /
/// (1 << b) / (1 << c)`, each step exact (a power of two divides a value whose end result
/// is representable without rounding), where its parse of decimal text is not guaranteed
/// correctly rounded (before 3.43 it uses `long double`). Every `f32` below 2^63 in
/// magnitude travels (a vector search's scores); -0.0 is sent as 0 (a REAL column stores either as integer 0). None
/// when the score is not finite, needs a shift beyond 186 (below ~2^-133 for a full
/// mantissa) or |score| >= 2^63: its batch goes as tuples.
#[must_use]
pub fn dyadic(score: f64) -> Option<[i64; 4]> {
    if !score.is_finite() {
        return None;
    }
    if score == 0.0 {
        return Some([0, 0, 0, 0]);
    }
    let bits = score.to_bits();
    let exp = i64::try_from((bits >> 52) & 0x7ff).ok()?;
    let frac = i64::try_from(bits & ((1 << 52) - 1)).ok()?;
    // |score| = mantissa * 2^exp2
    let (mut mantissa, mut exp2) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, exp - 1075)
    };
    let zeros = mantissa.trailing_zeros();
    mantissa >>= zeros;
    exp2 += i64::from(zeros);
    if exp2 > 0 {
        // an integer: the mantissa shifted while it stays below 2^63
        if exp2 >= i64::from(mantissa.leading_zeros()) {
            return None;
        }
        mantissa <<= exp2;
        exp2 = 0;
    }
    let shift = -exp2;
    if shift > 3 * 62 {
        return None;
    }
    let first = shift.min(62);
    let second = (shift - 62).clamp(0, 62);
    let signed = if score < 0.0 { -mantissa } else { mantissa };
    Some([signed, first, second, shift - first - second])
}

/// A batch of searches' rows as two JSON texts, for SQLite to expand in C
/// (`memini.events.append_events`' `json_each`): `rows`, one array per row of its 14 columns
/// in `memini.events.EventRow` order, the score as [`dyadic`]'s `[m, a, b, c]` (or null);
/// `queries`, one `[op_id, query, query_fold, created_at]` per operation with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub rows: String,
    pub queries: String,
    /// The number of rows.
    pub count: usize,
}

/// `calls` (each under its operation id, its folds decided: no [`Fold::Python`] left) as
/// one [`Packed`], or None when a value cannot travel exactly: a score [`dyadic`] refuses,
/// or a text holding U+0000 (SQLite's `json_extract` before 3.45 cuts a string at `\u0000`).
/// The JSON is ASCII (any other character escaped, as a UTF-16 pair beyond the BMP), so
/// Python makes its `str` and hands SQLite its UTF-8 by copying bytes, with the GIL held,
/// where non-ASCII text was decoded and encoded again (measured: most of a batch's GIL
/// time with non-ASCII summaries).
#[must_use]
pub fn pack(calls: &[(String, Rows)]) -> Option<Packed> {
    fn text(out: &mut String, s: &str) -> Option<()> {
        out.push('"');
        let mut rest = s;
        // runs of printable ASCII but `"` and `\` copied whole, most of a batch's bytes
        // (measured, rows of 10-hit searches made and packed: 1.04 -> 0.74 us of CPU per
        // row, a character at a time before); a byte outside them starts a character
        // (ASCII, or the lead byte of a longer one)
        while let Some(at) = rest
            .bytes()
            .position(|b| !(b' '..=b'~').contains(&b) || b == b'"' || b == b'\\')
        {
            out.push_str(&rest[..at]);
            let c = rest[at..].chars().next()?;
            match c {
                '\0' => return None,
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                _ => {
                    for unit in c.encode_utf16(&mut [0; 2]) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
            }
            rest = &rest[at + c.len_utf8()..];
        }
        out.push_str(rest);
        out.push('"');
        Some(())
    }
    fn fold(out: &mut String, f: &Fold) -> Option<()> {
        match f {
            Fold::Same => out.push_str("null"),
            Fold::Folded(s) => text(out, s)?,
            Fold::Python => return None,
        }
        Some(())
    }
    let mut rows = String::from("[");
    let mut queries = String::from("[");
    let mut count = 0;
    for (op, call) in calls {
        for row in &call.rows {
            if count > 0 {
                rows.push(',');
            }
            count += 1;
            rows.push('[');
            text(&mut rows, op)?;
            rows.push_str(r#","recall","#);
            text(&mut rows, &row.namespace)?;
            rows.push_str(r#","","#);
            text(&mut rows, &row.memory_id)?;
            rows.push(',');
            text(&mut rows, row.memory_ns())?;
            match row.tier {
                Some(t) => {
                    let _ = write!(rows, r#","{}","#, t.as_str());
                }
                None => rows.push_str(",null,"),
            }
            text(&mut rows, &row.summary)?;
            let _ = write!(rows, ",{},", row.rank);
            match row.score {
                Some(score) => {
                    let [m, a, b, c] = dyadic(score)?;
                    let _ = write!(rows, "[{m},{a},{b},{c}],");
                }
                None => rows.push_str("null,"),
            }
            text(&mut rows, &call.details[row.detail])?;
            let _ = write!(rows, ",{},null,", call.created_at);
            fold(&mut rows, &row.summary_fold)?;
            rows.push(']');
        }
        if !call.query.is_empty() {
            if queries.len() > 1 {
                queries.push(',');
            }
            queries.push('[');
            text(&mut queries, op)?;
            queries.push(',');
            text(&mut queries, &call.query)?;
            queries.push(',');
            fold(&mut queries, &call.query_fold)?;
            let _ = write!(queries, ",{}]", call.created_at);
        }
    }
    rows.push(']');
    queries.push(']');
    Some(Packed {
        rows,
        queries,
        count,
    })
}

/// A memory a write touched, as its event row names it: (id, namespace, tier, summary).
pub type Touched = (String, String, Option<&'static str>, String);

/// One write the front answered: (method, the caller's name, the call's namespace,
/// created_at, the memories it touched, one row each, and for `update` the fields it named).
pub type Write = (
    &'static str,
    String,
    String,
    Micros,
    Vec<Touched>,
    Option<Vec<String>>,
);

/// The calls queued: searches and writes, and the rows they make (the bound's count).
#[derive(Default)]
struct Queued {
    searches: Vec<Rows>,
    writes: Vec<Write>,
    rows: usize,
}

/// The bounded queue of searches and writes answered, by rows.
pub struct Events {
    queue: Mutex<Queued>,
    max_rows: usize,
    dropped: AtomicU64,
    /// The callers' names of the admin and of open access (`memini.server._auth`'s
    /// `ADMIN.name` and `OPEN.name`; a key's caller is its name).
    pub callers: (String, String),
}

impl Events {
    /// A queue of at most `max_rows` rows, naming the admin and open access `callers`.
    #[must_use]
    pub fn new(max_rows: usize, callers: (String, String)) -> Self {
        Self {
            queue: Mutex::default(),
            max_rows,
            dropped: AtomicU64::new(0),
            callers,
        }
    }

    /// Queue a search's rows, or count them dropped when they do not fit.
    pub fn push(&self, search: Rows) {
        self.admit(search.rows.len(), |queue| queue.searches.push(search));
    }

    /// Queue a write's rows, or count them dropped when they do not fit.
    pub fn push_write(&self, write: Write) {
        self.admit(write.4.len(), |queue| queue.writes.push(write));
    }

    /// Queue a call of `rows` rows with `add` if they fit, else count them dropped.
    fn admit(&self, rows: usize, add: impl FnOnce(&mut Queued)) {
        let mut queue = self.queue.lock();
        if queue.rows + rows > self.max_rows {
            drop(queue);
            self.dropped.fetch_add(rows as u64, Ordering::Relaxed);
            return;
        }
        queue.rows += rows;
        add(&mut queue);
    }

    /// The writes queued, oldest first (taken with the searches: `take` starts the count
    /// of rows queued again).
    pub fn take_writes(&self) -> Vec<Write> {
        std::mem::take(&mut self.queue.lock().writes)
    }

    /// Everything queued, oldest first; the queue is empty after.
    pub fn take(&self) -> Vec<Rows> {
        let mut queue = self.queue.lock();
        queue.rows = 0;
        std::mem::take(&mut queue.searches)
    }

    /// Rows dropped since the start because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_cut_to_200_characters() {
        assert_eq!(summary("", "abc"), "abc");
        assert_eq!(summary("s", "abc"), "s");
        let long = "é".repeat(201);
        let cut = summary("", &long);
        assert_eq!(cut.chars().count(), 200);
        assert!(cut.ends_with("é…"));
        assert_eq!(summary(&"x".repeat(200), ""), "x".repeat(200));
    }

    #[test]
    fn a_full_queue_drops_whole_calls_and_counts_their_rows() {
        let events = Events::new(3, ("admin".to_owned(), "open".to_owned()));
        let hit = || {
            let ns = "ns".to_owned();
            (String::from("id"), ns, Tier::Semantic, String::new(), 1.0)
        };
        let searched = ["ns".to_owned()];
        let rows = |hits: Vec<Hit>| {
            search(
                "vector_search",
                "a",
                "10",
                &searched,
                String::new(),
                0,
                vec![hits],
            )
        };
        events.push(rows(vec![hit(), hit()]));
        events.push(rows(vec![hit(), hit()])); // 4 rows > 3: dropped
        events.push(rows(vec![])); // one row: the namespace searched
        assert_eq!(events.dropped(), 2);
        assert_eq!(events.take().len(), 2);
        assert!(events.take().is_empty());
        events.push(rows(vec![hit(), hit(), hit()]));
        assert_eq!(events.dropped(), 2);
        let write = |n: usize| {
            let touched = ("id".to_owned(), "ns".to_owned(), None, String::new());
            (
                "delete",
                "a".to_owned(),
                "ns".to_owned(),
                0,
                vec![touched; n],
                None,
            )
        };
        events.push_write(write(1)); // 3 + 1 rows > 3: dropped
        assert_eq!(events.dropped(), 3);
        assert_eq!(events.take().len(), 1);
        events.push_write(write(2));
        events.push(rows(vec![hit(), hit()])); // 2 + 2 > 3
        assert_eq!(events.dropped(), 5);
        assert_eq!(events.take_writes().len(), 1);
    }

    #[test]
    fn ascii_is_folded_here_and_the_rest_left_to_python() {
        assert_eq!(Fold::of("abc 1!"), Fold::Same);
        assert_eq!(Fold::of(""), Fold::Same);
        assert_eq!(Fold::of("AbC"), Fold::Folded("abc".to_owned()));
        assert_eq!(Fold::of("straße"), Fold::Python);
    }

    #[test]
    fn a_search_gives_a_row_per_hit_or_per_namespace_searched() {
        let searched = ["a".to_owned(), "b".to_owned()];
        let hit = (
            String::from("m1"),
            "b".to_owned(),
            Tier::Episodic,
            "Hi".to_owned(),
            0.5,
        );
        let many = vec![vec![hit], vec![]];
        let rows = search(
            "vector_search_many",
            "k\"1",
            "3",
            &searched,
            String::new(),
            7,
            many,
        );
        assert_eq!(
            rows.details,
            [
                r#"{"method":"vector_search_many","caller":"k\"1","k":3,"namespaces":["a","b"],"query_index":0}"#,
                r#"{"method":"vector_search_many","caller":"k\"1","k":3,"namespaces":["a","b"],"query_index":1}"#,
            ]
        );
        let names: Vec<_> = rows
            .rows
            .iter()
            .map(|r| (r.namespace.as_str(), r.memory_ns(), r.detail))
            .collect();
        assert_eq!(names, [("b", "b", 0), ("a", "", 1), ("b", "", 1)]);
        assert_eq!(rows.rows[0].summary_fold, Fold::Folded("hi".to_owned()));
        assert_eq!(rows.rows[0].score, Some(0.5));
        assert_eq!(rows.rows[1].score, None);
    }

    #[test]
    fn a_score_travels_as_an_exact_dyadic_fraction() {
        // m / 2^a / 2^b / 2^c, as SQLite computes it (powers of two: exact)
        #[allow(clippy::cast_precision_loss, reason = "|m| < 2^53: exact")]
        let back = |[m, a, b, c]: [i64; 4]| {
            let two = |s: i64| 2f64.powi(i32::try_from(s).unwrap_or(i32::MAX));
            m as f64 / two(a) / two(b) / two(c)
        };
        for x in [
            0.5,
            -0.25,
            1.0,
            0.1,
            -0.333_333_333_333_333_3,
            f64::from(0.7_f32),
            f64::from(f32::MIN_POSITIVE),
            f64::from(f32::from_bits(1)), // f32's smallest subnormal: 2^-149
            2f64.powi(-186) * 3.0,
            2f64.powi(-71),
            9_007_199_254_740_993.0,
            -(2f64.powi(62)),
        ] {
            let d = dyadic(x).unwrap_or_else(|| panic!("{x} travels"));
            assert!(d[1..].iter().all(|s| (0..=62).contains(s)), "{x}: {d:?}");
            assert_eq!(back(d).to_bits(), x.to_bits(), "{x}: {d:?}");
        }
        assert_eq!(dyadic(-0.0), Some([0, 0, 0, 0]));
        for x in [
            f64::NAN,
            f64::INFINITY,
            2f64.powi(63),
            f64::MIN_POSITIVE,
            2f64.powi(-187) * 3.0,
        ] {
            assert_eq!(dyadic(x), None, "{x}");
        }
    }

    #[test]
    fn a_batch_packs_as_json_arrays_or_not_at_all() {
        let searched = ["a".to_owned()];
        let hit = |summary: &str, score: f64| {
            let (id, ns) = ("m\"1".to_owned(), "a".to_owned());
            (id, ns, Tier::Episodic, summary.to_owned(), score)
        };
        let call = |hits: Vec<Hit>, query: &str| {
            let q = query.to_owned();
            search("recall", "c", "10", &searched, q, 7, vec![hits])
        };
        let calls = [
            ("op1".to_owned(), call(vec![hit("Hi\n", 0.5)], "Q")),
            ("op2".to_owned(), call(vec![], "")),
        ];
        let detail =
            r#""{\"method\":\"recall\",\"caller\":\"c\",\"k\":10,\"namespaces\":[\"a\"]}""#;
        assert_eq!(
            pack(&calls),
            Some(Packed {
                rows: format!(
                    r#"[["op1","recall","a","","m\"1","a","episodic","Hi\n",0,[1,1,0,0],{detail},7,null,"hi\n"],["op2","recall","a","","","",null,"",0,null,{detail},7,null,null]]"#
                ),
                queries: r#"[["op1","Q","q",7]]"#.to_owned(),
                count: 2,
            })
        );
        // escapes between, before and after runs of plain ASCII; DEL and other controls
        let mixed = [(
            "o".to_owned(),
            call(vec![hit("\\a\"b\u{7f}c\td\re\u{1f}", 0.5)], ""),
        )];
        let packed = pack(&mixed).map(|p| p.rows).unwrap_or_default();
        assert!(
            packed.contains(r#","\\a\"b\u007fc\td\re\u001f",0,"#),
            "{packed}"
        );
        let nul = [("op".to_owned(), call(vec![hit("a\0b", 0.5)], ""))];
        assert_eq!(pack(&nul), None);
        let tiny = [("op".to_owned(), call(vec![hit("", 1e-45)], ""))];
        assert_eq!(pack(&tiny), None);
        let mut python = [("op".to_owned(), call(vec![hit("é😀", 0.5)], ""))];
        assert_eq!(pack(&python), None); // its fold is decided by Python first
        python[0].1.rows[0].summary_fold = Fold::Same;
        let packed = pack(&python).map(|p| p.rows).unwrap_or_default();
        assert!(
            packed.is_ascii() && packed.contains(r#""\u00e9\ud83d\ude00""#),
            "{packed}"
        );
    }
}
