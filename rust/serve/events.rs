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
//! text (`str.casefold`, Python's: [`Fold::Python`]).
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
}
