//! The event rows of the calls the front answers itself (API.md sections 5 and 8), queued
//! without the GIL for the owning process to write.
//!
//! A call is queued as the plain values its rows are made of (`memini.server._events`
//! makes the rows, one home for their shape): the `EventRecorder` thread takes the whole
//! queue each batch, in one GIL take, and appends the rows with its own. The queue is
//! bounded in rows: a call whose rows do not fit is dropped whole, never waited for, and its
//! rows counted (`dropped`, in the served `stats()` and `/metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::types::Micros;

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

/// A hit as its event row names it: (id, namespace, tier, summary, score).
pub type Hit = (String, String, &'static str, String, f64);

/// Who made a call: (`admin`, `open` or `key`, the key's name).
pub type Caller = (&'static str, String);

/// One search the front answered: (method, caller, k, namespaces searched, query,
/// created_at, one list of hits per query).
pub type Search = (
    &'static str,
    Caller,
    u64,
    Vec<String>,
    String,
    Micros,
    Vec<Vec<Hit>>,
);

/// A memory a write touched, as its event row names it: (id, namespace, tier, summary).
pub type Touched = (String, String, Option<&'static str>, String);

/// One write the front answered: (method, caller, the call's namespace, created_at, the
/// memories it touched, one row each, and for `update` the fields it named).
pub type Write = (
    &'static str,
    Caller,
    String,
    Micros,
    Vec<Touched>,
    Option<Vec<String>>,
);

/// The bounded queue of searches answered, by rows (the writes' rows counted with them).
pub struct Events {
    queue: Mutex<(Vec<Search>, usize)>,
    writes: Mutex<Vec<Write>>,
    max_rows: usize,
    dropped: AtomicU64,
}

impl Events {
    /// A queue of at most `max_rows` rows.
    #[must_use]
    pub fn new(max_rows: usize) -> Self {
        Self {
            queue: Mutex::default(),
            writes: Mutex::default(),
            max_rows,
            dropped: AtomicU64::new(0),
        }
    }

    /// Queue a search's rows, or count them dropped when they do not fit.
    pub fn push(&self, search: Search) {
        let searched = search.3.len();
        let rows: usize = search.6.iter().map(|h| h.len().max(searched)).sum();
        let mut queue = self.queue.lock();
        if queue.1 + rows > self.max_rows {
            drop(queue);
            self.dropped.fetch_add(rows as u64, Ordering::Relaxed);
            return;
        }
        queue.1 += rows;
        queue.0.push(search);
    }

    /// Queue a write's rows, or count them dropped when they do not fit.
    pub fn push_write(&self, write: Write) {
        let rows = write.4.len();
        let mut queue = self.queue.lock();
        if queue.1 + rows > self.max_rows {
            drop(queue);
            self.dropped.fetch_add(rows as u64, Ordering::Relaxed);
            return;
        }
        queue.1 += rows;
        self.writes.lock().push(write);
    }

    /// The writes queued, oldest first (taken with the searches: `take` starts the count
    /// of rows queued again).
    pub fn take_writes(&self) -> Vec<Write> {
        std::mem::take(&mut *self.writes.lock())
    }

    /// Everything queued, oldest first; the queue is empty after.
    pub fn take(&self) -> Vec<Search> {
        let mut queue = self.queue.lock();
        queue.1 = 0;
        std::mem::take(&mut queue.0)
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
        let events = Events::new(3);
        let hit = || {
            (
                "id".to_owned(),
                "ns".to_owned(),
                "semantic",
                String::new(),
                1.0,
            )
        };
        let search = |hits: Vec<Hit>| {
            let caller = ("admin", String::new());
            (
                "vector_search",
                caller,
                10,
                vec!["ns".to_owned()],
                String::new(),
                0,
                vec![hits],
            )
        };
        events.push(search(vec![hit(), hit()]));
        events.push(search(vec![hit(), hit()])); // 4 rows > 3: dropped
        events.push(search(vec![])); // one row: the namespace searched
        assert_eq!(events.dropped(), 2);
        assert_eq!(events.take().len(), 2);
        assert!(events.take().is_empty());
        events.push(search(vec![hit(), hit(), hit()]));
        assert_eq!(events.dropped(), 2);
        let write = |n: usize| {
            let touched = ("id".to_owned(), "ns".to_owned(), None, String::new());
            let caller = ("admin", String::new());
            ("delete", caller, "ns".to_owned(), 0, vec![touched; n], None)
        };
        events.push_write(write(1)); // 3 + 1 rows > 3: dropped
        assert_eq!(events.dropped(), 3);
        assert_eq!(events.take().len(), 1);
        events.push_write(write(2));
        events.push(search(vec![hit(), hit()])); // 2 + 2 > 3
        assert_eq!(events.dropped(), 5);
        assert_eq!(events.take_writes().len(), 1);
    }
}
