//! The keyword index: tantivy BM25 over content + summary + tags, derived from the row store.
//!
//! - One analyzer for documents and queries: Unicode word tokenizer, lowercase, ASCII folding,
//!   English stemming. Queries are built from analyzer tokens (words of >= 2 characters),
//!   OR-ed, never parsed as query syntax, so any string is a valid query.
//! - The namespace is a required, zero-scored term: tenants never match each other's rows.
//!   BM25 statistics (document count, average length, document frequencies) are corpus-wide,
//!   across namespaces, as in any single tantivy index.
//! - Each document carries its row id and the row's `doc_version` as fast fields; the search
//!   callback drops documents that are deleted, stale (an older version of a row) or rejected
//!   by the filter, inside the top-k loop, so they never take a result slot.
//! - Read-your-writes without a commit per write (a tantivy commit + reload costs ~12 ms):
//!   every write is queued for the tantivy writer (the latest change per row) AND entered in
//!   a small in-memory delta (same analyzer). A search scores the delta's documents itself
//!   with tantivy's own `Bm25Weight` over combined statistics (committed + delta document
//!   counts, token counts and document frequencies, the same field-norm quantisation), merges
//!   them into the top-k and skips committed documents of rows that are in the delta; equal
//!   scores rank by row id wherever the documents are. A background thread folds
//!   the queue and the delta into tantivy (commit + reload) on a size/time threshold, so a
//!   write never waits for a commit in progress. A row's score does not change when it is
//!   folded in: deleted documents stay in tantivy's statistics until a merge, exactly as the
//!   delta's additions do; a document replaced before its fold never reaches tantivy; and
//!   when tantivy drops a segment whose documents are all deleted, its statistics are kept
//!   until the reader picks up a merge (when scores change anyway).
//! - Each document also carries its tags' hashes as terms. A filter whose tags pass few rows
//!   makes them required, zero-scored terms, so tantivy intersects posting lists instead of
//!   scoring every document that matches the words.
//! - The commit payload records the changelog sequence the index reflects. Segments merge in
//!   the background (a log merge policy); the reader picks merged segments up when idle.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tantivy::columnar::Column;
use tantivy::directory::MmapDirectory;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::{SegmentComponent, SegmentId};
use tantivy::indexer::LogMergePolicy;
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query,
    TermQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    TextAnalyzer,
};
use tantivy::{
    DocSet, FutureResult, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, SegmentMeta,
    SegmentReader, TantivyDocument, Term, TERMINATED,
};

use crate::error::{Error, Failures, Result};

const TOKENIZER: &str = "memini";
const WRITER_MEMORY: usize = 64 << 20;
/// Merge this many segments of one size class at a time (tantivy's default is 8): fewer
/// segments per search, for a little more merging while writing.
const MERGE_SEGMENTS: usize = 4;
/// Once no write has come for this long, the segments are merged into one (every search visits
/// each segment: at 99k rows, two segments of 58k and 41k documents searched ~15% slower than
/// one), leaving out the largest while the others hold under [`IDLE_MERGE_BULK`] of its
/// documents: trickling writes rewrite the bulk of the index only once they add that much.
const IDLE_MERGE_AFTER: Duration = Duration::from_secs(2);
const IDLE_MERGE_BULK: f64 = 0.25;
/// How long after a commit the reader looks for merged segments to pick up.
const MERGE_WATCH: Duration = Duration::from_secs(300);
/// Fold the delta into tantivy when it holds this many documents...
pub const FOLD_DOCS: usize = 4096;
/// ...or when its oldest change is this old.
const FOLD_AGE: Duration = Duration::from_secs(1);

/// English stopwords (NLTK's list, apostrophes dropped): a query's words in this list are left
/// out when it has others. They carry little meaning and, in a question ("what did she say
/// about ..."), match most documents; BM25's idf lowers them but their many small matches
/// still crowd the ranking. A query of stopwords alone keeps them.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Whether a query word (as written) is an English stopword, case-insensitively.
fn is_stopword(word: &str) -> bool {
    word.len() <= 10
        && STOPWORDS
            .binary_search(&word.to_lowercase().as_str())
            .is_ok()
}

fn kw_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::storage(&format!("keyword index: {context}"), e)
}

/// The analyzer shared by documents and queries.
fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        // a "word" of 255+ bytes (a hash, a blob) is never a search term; tantivy would drop
        // one past its own limit anyway, with a warning on stderr
        .filter(RemoveLongFilter::limit(255))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .build()
}

#[derive(Clone, Copy)]
struct Fields {
    rid: Field,
    ver: Field,
    ns: Field,
    text: Field,
    /// The row's tag hashes (`columns::tag_hash`), one term each.
    tag: Field,
}

struct Writer {
    /// The tantivy writer; taken at close, to wait for its merges.
    inner: Option<IndexWriter<TantivyDocument>>,
    /// Buffered changes not yet committed.
    dirty: bool,
    /// Changelog sequence of the newest buffered change.
    seq: u64,
    /// Changelog sequence the last commit reflects.
    committed: u64,
    /// When the last commit happened, and whether an idle merge followed it.
    committed_at: Instant,
    idle_merged: bool,
    /// The idle merge started last, until it completes.
    idle_merge: Option<FutureResult<Option<SegmentMeta>>>,
    /// Every document was deleted (a rebuild) and not committed yet: the segments the next
    /// commit drops are not kept in the statistics (see [`Dropped`]).
    cleared: bool,
}

impl Writer {
    fn tantivy(&mut self) -> Result<&mut IndexWriter<TantivyDocument>> {
        self.inner
            .as_mut()
            .ok_or_else(|| kw_err("write", "the index is closed"))
    }

    /// Buffers one change: (rid, new document or None = delete) at changelog sequence `seq`.
    fn apply(&mut self, rid_field: Field, change: Change, seq: u64) -> Result<()> {
        let (rid, doc) = change;
        let w = self.tantivy()?;
        w.delete_term(Term::from_field_u64(rid_field, rid));
        if let Some(td) = doc {
            w.add_document(td).map_err(|e| kw_err("add", e))?;
        }
        self.advance(seq);
        self.dirty = true;
        Ok(())
    }

    fn advance(&mut self, seq: u64) {
        if seq > self.seq {
            self.seq = seq;
            self.dirty = true;
        }
    }
}

/// A document change for tantivy: the row id and its new document (None = delete).
type Change = (u64, Option<TantivyDocument>);

/// What a commit folded into the segments: the changes up to changelog sequence `seq`;
/// `cleared`: it dropped every earlier segment (a rebuild), with their statistics.
#[derive(Clone, Copy)]
struct Folded {
    seq: u64,
    cleared: bool,
}

/// Searchable changes not yet handed to the tantivy writer. The writer is busy for the whole
/// of a commit (tens to hundreds of ms); queueing here means a write, which holds the store's
/// state lock, never waits for one (the delta already makes the change visible). The fold
/// hands the queue to the writer before it commits.
///
/// The queue holds one change per row, its latest: a document replaced or deleted before its
/// fold never reaches tantivy, whose statistics would count it (as a deleted document) after
/// the fold while the delta no longer does before it.
#[derive(Default)]
struct Pending {
    changes: Vec<(Change, u64)>,
    /// rid -> its change's index in `changes`.
    at: HashMap<u64, usize>,
    /// Newest changelog sequence reflected (changes and [`KeywordIndex::advance`]).
    seq: u64,
}

impl Pending {
    /// Queues row `rid`'s change, replacing the one queued before it (each change deletes
    /// the row's committed document first, so only the latest matters).
    fn push(&mut self, change: Change, seq: u64) {
        self.seq = self.seq.max(seq);
        match self.at.get(&change.0) {
            Some(&i) => self.changes[i] = (change, seq),
            None => {
                self.at.insert(change.0, self.changes.len());
                self.changes.push((change, seq));
            }
        }
    }
}

/// A document to index: the row's namespace, text, tag hashes and version.
pub struct Doc {
    /// Namespace.
    pub namespace: String,
    /// Content, summary and tags, joined.
    pub text: String,
    /// Hashes of the row's tags.
    pub tags: Vec<u64>,
    /// The row's doc version.
    pub version: u64,
}

/// An uncommitted document, analysed.
struct DeltaDoc {
    ns: String,
    version: u64,
    seq: u64,
    tokens: u32,
    /// (term, frequency in the document)
    terms: Vec<(String, u32)>,
}

/// The freshest writes, searchable before tantivy commits them, and the committed segments
/// searched beside them: the two change together (see [`Shared::reload`]).
struct Delta {
    /// The committed segments searches see (published by [`Shared::reload`], never taken from
    /// the reader directly).
    searcher: Searcher,
    docs: HashMap<u64, DeltaDoc>,
    /// term -> (rid -> term frequency)
    postings: HashMap<String, HashMap<u64, u32>>,
    tokens: u64,
    oldest: Option<Instant>,
    /// Statistics of the documents in the segments tantivy dropped (see [`Dropped`]).
    dropped: Dropped,
}

/// The statistics of committed segments that tantivy dropped at a commit because all their
/// documents were deleted: until then they counted in the statistics, as every deleted
/// document does until a merge, and the scores keep counting them until the reader picks up
/// a merge (when scores change anyway). Without them, the fold that deletes the last
/// document of a segment would change every score.
#[derive(Default)]
struct Dropped {
    docs: u64,
    /// Tokens of the text field.
    tokens: u64,
    /// Text term -> number of documents holding it.
    doc_freqs: HashMap<String, u64>,
}

impl Dropped {
    /// Adds the statistics counted in `other`.
    fn merge(&mut self, other: Self) {
        self.docs += other.docs;
        self.tokens += other.tokens;
        for (term, n) in other.doc_freqs {
            *self.doc_freqs.entry(term).or_default() += n;
        }
    }

    /// Adds the statistics of segment `seg` (all its documents, deleted ones included).
    fn add(&mut self, seg: &SegmentReader, text: Field) -> Result<()> {
        let index = seg.inverted_index(text).map_err(|e| kw_err("segment", e))?;
        self.docs += u64::from(seg.max_doc());
        self.tokens += index.total_num_tokens();
        let mut terms = index.terms().stream().map_err(|e| kw_err("segment", e))?;
        while terms.advance() {
            let term = String::from_utf8_lossy(terms.key()).into_owned();
            *self.doc_freqs.entry(term).or_default() += u64::from(terms.value().doc_freq);
        }
        Ok(())
    }
}

impl Delta {
    fn new(searcher: Searcher) -> Self {
        Self {
            searcher,
            docs: HashMap::new(),
            postings: HashMap::new(),
            tokens: 0,
            oldest: None,
            dropped: Dropped::default(),
        }
    }

    fn remove(&mut self, rid: u64) {
        if let Some(d) = self.docs.remove(&rid) {
            self.tokens -= u64::from(d.tokens);
            for (t, _) in d.terms {
                if let Some(p) = self.postings.get_mut(&t) {
                    p.remove(&rid);
                    if p.is_empty() {
                        self.postings.remove(&t);
                    }
                }
            }
        }
    }

    fn insert(&mut self, rid: u64, doc: &Doc, seq: u64) {
        self.remove(rid);
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(&doc.text);
        let mut freqs: HashMap<String, u32> = HashMap::new();
        let mut tokens = 0u32;
        while stream.advance() {
            tokens += 1;
            *freqs.entry(stream.token().text.clone()).or_default() += 1;
        }
        let analysed = DeltaDoc {
            ns: doc.namespace.clone(),
            version: doc.version,
            seq,
            tokens,
            terms: freqs.into_iter().collect(),
        };
        self.enter(rid, analysed);
        self.oldest.get_or_insert_with(Instant::now);
    }

    /// Enters an analysed document (its row holds none in the delta).
    fn enter(&mut self, rid: u64, doc: DeltaDoc) {
        for (t, f) in &doc.terms {
            self.postings.entry(t.clone()).or_default().insert(rid, *f);
        }
        self.tokens += u64::from(doc.tokens);
        self.docs.insert(rid, doc);
    }

    /// Takes out what a fold up to changelog sequence `seq` leaves: the documents of later
    /// changes (those written while it committed, usually a few) and the dropped segments'
    /// statistics, in a new delta searching the same segments. Cheap enough to run under the
    /// delta's lock: the folded documents stay in `self`, freed after the lock is let go.
    fn split_after(&mut self, seq: u64) -> Self {
        let mut rest = Self::new(self.searcher.clone());
        rest.dropped = std::mem::take(&mut self.dropped);
        for (rid, doc) in self.docs.iter().filter(|(_, d)| d.seq > seq) {
            let kept = DeltaDoc {
                ns: doc.ns.clone(),
                terms: doc.terms.clone(),
                ..*doc
            };
            rest.enter(*rid, kept);
        }
        if !rest.docs.is_empty() {
            rest.oldest = Some(Instant::now());
        }
        rest
    }
}

/// BM25 statistics of the committed index plus the delta (and the dropped segments).
struct Combined<'a> {
    searcher: &'a Searcher,
    delta: &'a Delta,
    /// The text field: the delta's tokens and terms are its.
    text: Field,
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let d = self.delta;
        let extra = if field == self.text {
            d.tokens + d.dropped.tokens
        } else {
            0
        };
        Ok(Bm25StatisticsProvider::total_num_tokens(self.searcher, field)? + extra)
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        let d = self.delta;
        Ok(Bm25StatisticsProvider::total_num_docs(self.searcher)?
            + d.docs.len() as u64
            + d.dropped.docs)
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let d = self.delta;
        let extra = match term.value().as_str() {
            Some(t) if term.field() == self.text => {
                d.postings.get(t).map_or(0, HashMap::len) as u64
                    + d.dropped.doc_freqs.get(t).copied().unwrap_or(0)
            }
            _ => 0,
        };
        Ok(self.searcher.doc_freq(term)? + extra)
    }
}

/// The `rid` and `ver` fast-field columns of one segment.
type Columns = (Column<u64>, Column<u64>);

struct Shared {
    fields: Fields,
    index: Index,
    /// Reloaded only by [`Shared::reload`], under `reloading`; searches use the searcher it
    /// publishes in the delta.
    reader: IndexReader,
    /// Held across a reload (one at a time); `delta` is locked inside it, never the reverse.
    reloading: Mutex<()>,
    /// Fast-field columns per segment, opened once rather than on every search.
    columns: Mutex<HashMap<SegmentId, Columns>>,
    writer: Mutex<Writer>,
    /// Locked after `writer` when both are held.
    pending: Mutex<Pending>,
    /// Locked before `pending` when both are held; never while `writer` is.
    delta: RwLock<Delta>,
    stop: Mutex<bool>,
    wake: Condvar,
    /// Background folds, reloads and merges that failed, and the last one's error (the
    /// changes stay in the delta, searched, and the next tick retries).
    failures: Failures,
    /// Test hook: how many more background ticks fail.
    #[cfg(test)]
    fail_ticks: std::sync::atomic::AtomicU32,
}

/// The tantivy index with its writer, reader, delta and folding thread.
pub struct KeywordIndex {
    index: Index,
    shared: Arc<Shared>,
    folder: Option<JoinHandle<()>>,
}

/// A heap entry (score, rid, document version) ordered so that `BinaryHeap` is a min-heap on
/// score (ties: the larger rid is evicted first; the version is carried along, not compared).
#[derive(Clone, Copy)]
struct Hit(f32, u64, u64);
impl PartialEq for Hit {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Hit {}
impl PartialOrd for Hit {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Hit {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
}

/// One top-k heap per namespace searched together, and the pruning threshold they allow:
/// tantivy offers only documents scoring above it, so it is the lowest k-th score of the
/// heaps (just below, so that a tie with it still reaches the heap, which keeps the lower
/// rid), or no threshold while any heap has room.
#[derive(Clone)]
struct Heaps {
    each: Vec<BinaryHeap<Hit>>,
    k: usize,
    threshold: f32,
}

impl Heaps {
    fn new(n: usize, k: usize) -> Self {
        Self {
            each: (0..n).map(|_| BinaryHeap::with_capacity(k + 1)).collect(),
            k,
            threshold: f32::MIN,
        }
    }

    fn threshold(&self) -> f32 {
        self.threshold
    }

    /// Whether a document scoring `score` with row id `rid` would enter some heap: asked
    /// before the row's filter, because at the threshold tantivy offers every document tied
    /// with a heap's worst hit (short texts tie often), and only the lower rids enter.
    fn admits(&self, score: f32, rid: u64) -> bool {
        let hit = Hit(score, rid, 0);
        self.each
            .iter()
            .any(|h| h.len() < self.k || h.peek().is_some_and(|worst| hit < *worst))
    }

    fn push(&mut self, group: usize, hit: Hit) {
        let heap = &mut self.each[group];
        heap.push(hit);
        if heap.len() > self.k {
            heap.pop();
        }
        if heap.len() >= self.k {
            self.threshold = self
                .each
                .iter()
                .map(|h| match h.peek() {
                    Some(top) if h.len() >= self.k => top.0.next_down(),
                    _ => f32::MIN,
                })
                .fold(f32::INFINITY, f32::min);
        }
    }

    /// Each heap's hits, best first, ties by row id.
    fn into_hits(self) -> Vec<Vec<(u64, f64)>> {
        self.each
            .into_iter()
            .map(|heap| {
                let mut hits: Vec<(u64, f64)> =
                    heap.into_iter().map(|h| (h.1, f64::from(h.0))).collect();
                hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                hits
            })
            .collect()
    }
}

impl Shared {
    /// Hands the queued changes to the writer, in order.
    fn flush_pending(&self, w: &mut Writer) -> Result<()> {
        let p = std::mem::take(&mut *self.pending.lock());
        for (change, seq) in p.changes {
            w.apply(self.fields.rid, change, seq)?;
        }
        w.advance(p.seq);
        Ok(())
    }

    /// Commits buffered and queued changes (if any), reloads the reader and drops the folded
    /// delta.
    fn fold(&self) -> Result<()> {
        let (seq, cleared) = {
            let mut w = self.writer.lock();
            self.flush_pending(&mut w)?;
            if !w.dirty {
                return Ok(());
            }
            let seq = w.seq;
            let mut prepared = w
                .tantivy()?
                .prepare_commit()
                .map_err(|e| kw_err("commit", e))?;
            prepared.set_payload(&seq.to_string());
            prepared.commit().map_err(|e| kw_err("commit", e))?;
            w.dirty = false;
            w.committed = seq;
            w.committed_at = Instant::now();
            w.idle_merged = false;
            (seq, std::mem::take(&mut w.cleared))
        };
        self.reload(Some(Folded { seq, cleared }))
    }

    /// The segments the reader searches.
    fn searched_segments(&self) -> HashSet<SegmentId> {
        let searcher = self.delta.read().searcher.clone();
        let readers = searcher.segment_readers();
        readers.iter().map(SegmentReader::segment_id).collect()
    }

    /// Reloads the reader and publishes its segments to searches together with the delta
    /// without what was `folded` into them (None: a merge, the documents are the same),
    /// keeping the statistics of the segments tantivy dropped (see [`Dropped`]); forgets the
    /// columns of segments no longer searched.
    ///
    /// Opening the new segments and reading the statistics of the gone ones (a walk of their
    /// terms) happen before the delta is locked, so writes (which put their documents in the
    /// delta) and searches never wait for them: the lock is held only to swap. Done under the
    /// lock, reloads held a single write for 64-137 ms in each of 4 runs of `bench_vector`'s
    /// writes across a checkpoint (100k rows, loaded 2-core machine; the median write took
    /// 4 ms); done before it, no write waited for one in 4 runs alternated with those. Removing
    /// the folded documents one by one under the lock still held a write for 8-19 ms at a fold
    /// of ~2,000 documents (quiet machine, median write 0.45 ms): the delta is now swapped for
    /// one holding only the later documents ([`Delta::split_after`]).
    fn reload(&self, folded: Option<Folded>) -> Result<()> {
        let _one = self.reloading.lock();
        let before = self.delta.read().searcher.clone();
        self.reader.reload().map_err(|e| kw_err("reload", e))?;
        let after = self.reader.searcher();
        let live: HashSet<SegmentId> = after
            .segment_readers()
            .iter()
            .map(SegmentReader::segment_id)
            .collect();
        let gone: Vec<&SegmentReader> = before
            .segment_readers()
            .iter()
            .filter(|s| !live.contains(&s.segment_id()))
            .collect();
        let mut merged = false;
        for seg in &gone {
            merged = merged || self.merged_away(seg, &after)?;
        }
        let mut dropped = Dropped::default();
        if !merged {
            for seg in gone {
                dropped.add(seg, self.fields.text)?;
            }
        }
        let mut delta = self.delta.write();
        let old = folded.map(|f| {
            let rest = delta.split_after(f.seq);
            std::mem::replace(&mut *delta, rest)
        });
        delta.searcher = after;
        if merged || folded.is_some_and(|f| f.cleared) {
            // a merge purged deleted documents: scores change now whatever is kept (and a
            // rebuild's commit keeps none of the segments it cleared)
            delta.dropped = Dropped::default();
        } else {
            delta.dropped.merge(dropped);
        }
        drop(delta);
        // the folded documents (thousands of allocations) are freed with no lock held
        drop(old);
        self.columns.lock().retain(|id, _| live.contains(id));
        Ok(())
    }

    /// Whether segment `seg`, gone from the reader, was merged into one of `after`'s
    /// segments (rather than dropped by tantivy with all its documents deleted): a document
    /// alive in it is still in `after`, alive or deleted (the same row id and version).
    fn merged_away(&self, seg: &SegmentReader, after: &Searcher) -> Result<bool> {
        let Some(doc) = seg.doc_ids_alive().next() else {
            return Ok(false);
        };
        let (rids, vers) = self.columns(seg)?;
        let (Some(rid), Some(ver)) = (rids.first(doc), vers.first(doc)) else {
            return Ok(false);
        };
        let term = Term::from_field_u64(self.fields.rid, rid);
        for s in after.segment_readers() {
            let index = s
                .inverted_index(self.fields.rid)
                .map_err(|e| kw_err("segment", e))?;
            let postings = index
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(|e| kw_err("segment", e))?;
            let Some(mut postings) = postings else {
                continue;
            };
            let (_, vers) = self.columns(s)?;
            while postings.doc() != TERMINATED {
                if vers.first(postings.doc()) == Some(ver) {
                    return Ok(true);
                }
                postings.advance();
            }
        }
        Ok(false)
    }

    /// Whether background merges changed the committed segments since the last reload.
    /// Merges follow commits, so only the minutes after one are watched (a file read a tick).
    fn merged(&self) -> bool {
        if self.writer.lock().committed_at.elapsed() > MERGE_WATCH {
            return false;
        }
        let ours = self.searched_segments();
        self.index
            .searchable_segment_ids()
            .is_ok_and(|ids| ids.len() != ours.len() || ids.iter().any(|i| !ours.contains(i)))
    }

    /// The `rid` and `ver` columns of a segment.
    fn columns(&self, seg: &SegmentReader) -> Result<Columns> {
        if let Some(c) = self.columns.lock().get(&seg.segment_id()) {
            return Ok(c.clone());
        }
        let ff = seg.fast_fields();
        let c = (
            ff.u64("rid").map_err(|e| kw_err("fast field", e))?,
            ff.u64("ver").map_err(|e| kw_err("fast field", e))?,
        );
        self.columns.lock().insert(seg.segment_id(), c.clone());
        Ok(c)
    }

    /// The segments the idle merge takes (see [`IDLE_MERGE_AFTER`]), None when it has
    /// nothing to merge.
    fn idle_merge_ids(&self) -> Result<Option<Vec<SegmentId>>> {
        let mut metas = self
            .index
            .searchable_segment_metas()
            .map_err(|e| kw_err("segments", e))?;
        metas.sort_by_key(|m| std::cmp::Reverse(m.num_docs()));
        let Some(largest) = metas.first().map(|m| f64::from(m.num_docs())) else {
            return Ok(None);
        };
        let rest: f64 = metas[1..].iter().map(|m| f64::from(m.num_docs())).sum();
        let skip = usize::from(rest < IDLE_MERGE_BULK * largest);
        let ids: Vec<SegmentId> = metas[skip..].iter().map(SegmentMeta::id).collect();
        Ok((ids.len() >= 2).then_some(ids))
    }

    /// Whether the idle merge has yet to run since the last commit (nothing written since).
    fn idle_merge_ahead(&self, w: &Writer) -> bool {
        !w.dirty && !w.idle_merged && self.pending.lock().changes.is_empty()
    }

    /// Whether the idle merge is due: ahead, and no write for [`IDLE_MERGE_AFTER`].
    fn idle_merge_due(&self, w: &Writer) -> bool {
        self.idle_merge_ahead(w) && w.committed_at.elapsed() >= IDLE_MERGE_AFTER
    }

    /// Starts the idle merge when due; it runs in the background and the reader picks its
    /// result up on a later tick.
    fn merge_if_idle(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if !self.idle_merge_due(&w) {
            return Ok(());
        }
        w.idle_merged = true;
        if let Some(ids) = self.idle_merge_ids()? {
            // a background merge may hold some of them: then this one fails and is not
            // retried before the next commit; the merge policy merges them anyway
            let merge = w.tantivy()?.merge(&ids);
            w.idle_merge = Some(merge);
        }
        Ok(())
    }

    /// Whether an idle merge is still to come (the index is clean but not merged yet), runs,
    /// or has merged segments the searches do not see yet. While a commit holds the writer
    /// (a fold, whose commit makes an idle merge due again), true.
    fn idle_merging(&self) -> bool {
        let Some(mut w) = self.writer.try_lock() else {
            return true;
        };
        let running = w.idle_merge.as_mut().is_some_and(|f| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            std::pin::Pin::new(f).poll(&mut cx).is_pending()
        });
        if !running {
            w.idle_merge = None;
        }
        let to_come =
            self.idle_merge_ahead(&w) && self.idle_merge_ids().is_ok_and(|ids| ids.is_some());
        drop(w);
        running || to_come || self.merged()
    }

    fn fold_due(&self) -> bool {
        let d = self.delta.read();
        d.docs.len() >= FOLD_DOCS || d.oldest.is_some_and(|t| t.elapsed() >= FOLD_AGE)
    }

    fn run_folder(&self) {
        let mut stop = self.stop.lock();
        while !*stop {
            self.wake.wait_for(&mut stop, Duration::from_millis(200));
            if *stop {
                break;
            }
            drop(stop);
            if let Err(e) = self.tick() {
                self.failures.record("the keyword fold thread", &e);
            }
            stop = self.stop.lock();
        }
    }

    /// One pass of the fold thread: folds the delta when due, else picks up merged segments,
    /// else starts the idle merge when due.
    fn tick(&self) -> Result<()> {
        #[cfg(test)]
        if self
            .fail_ticks
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .is_ok()
        {
            return Err(kw_err("fold", "injected fault"));
        }
        if self.fold_due() {
            self.fold()
        } else if self.merged() {
            // merged segments hold the same documents: no delta to drop
            self.reload(None)
        } else {
            self.merge_if_idle()
        }
    }
}

/// Opens the index in `d` and checks it whole: every file of its segments present and
/// matching its checksum (tantivy opens files lazily, so a damaged one would otherwise fail a
/// later search, or the reader).
fn open_checked(d: &Path, schema: &Schema) -> Result<Index> {
    let md = MmapDirectory::open(d).map_err(|e| kw_err("open", e))?;
    let index = Index::open_or_create(md, schema.clone()).map_err(|e| kw_err("open", e))?;
    let metas = index
        .searchable_segment_metas()
        .map_err(|e| kw_err("segments", e))?;
    for meta in &metas {
        // `list_files` names a deletes file even for a segment without deletes, which has none
        let deletes = meta.relative_path(SegmentComponent::Delete);
        let files = meta.list_files().into_iter();
        for path in files.filter(|p| meta.has_deletes() || *p != deletes) {
            // shorter than tantivy's footer fields (two u32), its checksum check would panic
            if !std::fs::metadata(d.join(&path)).is_ok_and(|m| m.is_file() && m.len() >= 8) {
                return Err(kw_err(
                    "check",
                    format!("{} is missing or cut short", path.display()),
                ));
            }
        }
    }
    let damaged = index.validate_checksum().map_err(|e| kw_err("check", e))?;
    if let Some(path) = damaged.iter().next() {
        return Err(kw_err(
            "check",
            format!("{} is damaged (checksum)", path.display()),
        ));
    }
    Ok(index)
}

impl KeywordIndex {
    /// Opens the index in `dir` (None = in memory), creating it when missing. Returns the
    /// index and whether it must be rebuilt from the rows (new, unreadable or corrupt).
    pub fn open(dir: Option<&Path>) -> Result<(Self, bool)> {
        let mut sb = Schema::builder();
        let text_opts = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let fields = Fields {
            rid: sb.add_u64_field("rid", INDEXED | FAST),
            ver: sb.add_u64_field("ver", FAST),
            ns: sb.add_text_field("ns", STRING),
            text: sb.add_text_field("text", text_opts),
            tag: sb.add_u64_field("tag", INDEXED),
        };
        let schema = sb.build();
        let (index, mut fresh) = match dir {
            None => (Index::create_in_ram(schema), true),
            Some(d) => {
                std::fs::create_dir_all(d)?;
                match open_checked(d, &schema) {
                    Ok(i) => (i, false),
                    Err(e) => {
                        log::warn!("{e}; rebuilding the keyword index from rows");
                        std::fs::remove_dir_all(d)?;
                        std::fs::create_dir_all(d)?;
                        let md = MmapDirectory::open(d).map_err(|e| kw_err("open", e))?;
                        (
                            Index::open_or_create(md, schema).map_err(|e| kw_err("create", e))?,
                            true,
                        )
                    }
                }
            }
        };
        index.tokenizers().register(TOKENIZER, analyzer());
        let committed = match index
            .load_metas()
            .ok()
            .and_then(|m| m.payload)
            .map(|p| p.parse::<u64>())
        {
            Some(Ok(seq)) => seq,
            _ => {
                fresh = true;
                0
            }
        };
        let writer: IndexWriter<TantivyDocument> = index
            .writer_with_num_threads(2, WRITER_MEMORY)
            .map_err(|e| kw_err("writer", e))?;
        let mut policy = LogMergePolicy::default();
        policy.set_min_num_segments(MERGE_SEGMENTS);
        writer.set_merge_policy(Box::new(policy));
        if fresh {
            writer
                .delete_all_documents()
                .map_err(|e| kw_err("clear", e))?;
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| kw_err("reader", e))?;
        let searcher = reader.searcher();
        let shared = Arc::new(Shared {
            fields,
            index: index.clone(),
            reader,
            reloading: Mutex::new(()),
            columns: Mutex::new(HashMap::new()),
            writer: Mutex::new(Writer {
                inner: Some(writer),
                dirty: fresh,
                seq: committed,
                committed,
                committed_at: Instant::now(),
                idle_merged: false,
                idle_merge: None,
                cleared: fresh,
            }),
            pending: Mutex::new(Pending::default()),
            delta: RwLock::new(Delta::new(searcher)),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            failures: Failures::default(),
            #[cfg(test)]
            fail_ticks: std::sync::atomic::AtomicU32::new(0),
        });
        let s = Arc::clone(&shared);
        let folder = std::thread::Builder::new()
            .name("memini-keyword-fold".into())
            .spawn(move || s.run_folder())
            .map_err(|e| kw_err("fold thread", e))?;
        Ok((
            Self {
                index,
                shared,
                folder: Some(folder),
            },
            fresh,
        ))
    }

    /// The changelog sequence the committed index reflects.
    #[must_use]
    pub fn committed_seq(&self) -> u64 {
        self.shared.writer.lock().committed
    }

    /// Replaces (doc = Some) or deletes (None) the document of row `rid`; `seq` is the
    /// changelog sequence of the change. With `searchable`, the change is visible to the
    /// next search at once (via the delta); bulk loads pass false and `commit` at the end.
    pub fn put(&self, rid: u64, doc: Option<Doc>, seq: u64, searchable: bool) -> Result<()> {
        let f = self.shared.fields;
        let td = doc.as_ref().map(|d| {
            let mut td = TantivyDocument::new();
            td.add_u64(f.rid, rid);
            td.add_u64(f.ver, d.version);
            td.add_text(f.ns, &d.namespace);
            td.add_text(f.text, &d.text);
            for t in &d.tags {
                td.add_u64(f.tag, *t);
            }
            td
        });
        if !searchable {
            // a bulk load goes straight to the writer (after what is queued) and commits
            let mut w = self.shared.writer.lock();
            self.shared.flush_pending(&mut w)?;
            w.apply(f.rid, (rid, td), seq)?;
            drop(w);
            self.shared.delta.write().remove(rid);
            return Ok(());
        }
        // the delta is locked before the change is queued: a fold that takes the change from
        // the queue finds its document in the delta, and drops it after the commit (were the
        // document entered after that, it would stay in the delta, counted twice)
        let mut delta = self.shared.delta.write();
        self.shared.pending.lock().push((rid, td), seq);
        match doc {
            Some(d) => delta.insert(rid, &d, seq),
            None => delta.remove(rid),
        }
        if delta.docs.len() >= FOLD_DOCS {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Notes that every change up to `seq` is reflected (even when none touched text).
    pub fn advance(&self, seq: u64) {
        let mut p = self.shared.pending.lock();
        p.seq = p.seq.max(seq);
    }

    /// Commits buffered changes (if any) and reloads the reader.
    pub fn commit(&self) -> Result<()> {
        self.shared.fold()
    }

    /// A handle that commits from another thread, without the engine's state lock.
    #[must_use]
    pub fn committer(&self) -> Committer {
        Committer(Arc::clone(&self.shared))
    }

    /// The query's terms: analyzer tokens of its words of >= 2 letters/digits, deduplicated,
    /// without English stopwords (see [`STOPWORDS`]) unless the query has nothing else.
    fn terms(&self, query: &str) -> Vec<(String, Term)> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(query);
        let mut seen = HashSet::new();
        let mut terms = Vec::new();
        let mut stop = Vec::new();
        while stream.advance() {
            let t = stream.token();
            let word = query.get(t.offset_from..t.offset_to).unwrap_or("");
            if word.chars().count() >= 2 && seen.insert(t.text.clone()) {
                let term = (
                    t.text.clone(),
                    Term::from_field_text(self.shared.fields.text, &t.text),
                );
                if is_stopword(word) {
                    stop.push(term);
                } else {
                    terms.push(term);
                }
            }
        }
        if terms.is_empty() {
            stop
        } else {
            terms
        }
    }

    /// The tantivy query of [`Self::search_many`]: the words OR-ed, and the required,
    /// zero-scored tag and namespace terms.
    fn query(
        &self,
        terms: &[(String, Term)],
        namespaces: &[&str],
        dominant: bool,
        tags: &[u64],
    ) -> Box<dyn Query> {
        let f = self.shared.fields;
        let words: Box<dyn Query> = Box::new(BooleanQuery::new(
            terms
                .iter()
                .map(|(_, t)| {
                    let q: Box<dyn Query> =
                        Box::new(TermQuery::new(t.clone(), IndexRecordOption::WithFreqs));
                    (Occur::Should, q)
                })
                .collect(),
        ));
        let required = |q: Box<dyn Query>| -> (Occur, Box<dyn Query>) {
            (Occur::Must, Box::new(ConstScoreQuery::new(q, 0.0)))
        };
        let term =
            |t: Term| -> Box<dyn Query> { Box::new(TermQuery::new(t, IndexRecordOption::Basic)) };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = tags
            .iter()
            .map(|h| required(term(Term::from_field_u64(f.tag, *h))))
            .collect();
        if !dominant {
            let name = |ns: &&str| term(Term::from_field_text(f.ns, ns));
            clauses.push(required(match namespaces {
                [one] => name(one),
                many => Box::new(BooleanQuery::new(
                    many.iter().map(|ns| (Occur::Should, name(ns))).collect(),
                )),
            }));
        }
        if clauses.is_empty() {
            words
        } else {
            clauses.push((Occur::Must, words));
            Box::new(BooleanQuery::new(clauses))
        }
    }

    /// BM25 top-`k` rows of `namespace` for `query` among the documents `accept(rid, version)`
    /// keeps (it must check the namespace); best first, ties by row id. [`Self::search_many`]
    /// of one namespace.
    pub fn search(
        &self,
        namespace: &str,
        query: &str,
        k: usize,
        dominant: bool,
        tags: &[u64],
        accept: &dyn Fn(u64, u64) -> bool,
    ) -> Result<Vec<(u64, f64)>> {
        let group = |rid: u64, ver: u64| accept(rid, ver).then_some(0);
        Ok(self
            .search_many(&[namespace], query, k, dominant, tags, &group, false)?
            .remove(0))
    }

    /// BM25 top-`k` rows of each of `namespaces` for `query`, in one pass over the postings:
    /// `accept(rid, version)` names the namespace (its index in `namespaces`) whose results a
    /// document may join, or None to drop it (it must check the namespace). Per namespace, best
    /// first, ties by row id: exactly what one search per namespace with the same `dominant`
    /// returns (scores are corpus-wide, so they do not depend on the namespaces searched
    /// together), for the query analysis, the weights and the posting walk paid once. (With
    /// and without the namespace terms, tantivy sums a document's term scores in a different
    /// order: its f32 score may differ in the last bit.)
    ///
    /// `dominant`: the namespaces hold most of the index. Then the required namespace terms
    /// are left out: they would disable tantivy's block-max WAND pruning for the whole query,
    /// while the few other tenants' documents they keep out are dropped by `accept` anyway.
    /// `tags`: tag hashes every hit must carry, given when they pass few rows (the
    /// intersection is then cheaper than scoring every matching document); `accept` still
    /// applies the whole filter. Required terms score 0, so scores never depend on them.
    /// `optimistic` (one namespace only): `accept` keeps almost every document (the filter
    /// passes every row, and a document the index still holds for a row deleted or changed
    /// since its last commit is rare). It is then asked only of the final hits, not of each
    /// document entering the heap (a row lookup each, ~40 a query); when one of them fails,
    /// the walk runs again asking it of every document. The hits are the same either way: the
    /// best `k` of all documents, when `accept` keeps them all, are the best `k` it keeps.
    #[allow(
        clippy::too_many_arguments,
        reason = "the query and how its documents are kept, each its own argument"
    )]
    pub fn search_many(
        &self,
        namespaces: &[&str],
        query: &str,
        k: usize,
        dominant: bool,
        tags: &[u64],
        accept: &dyn Fn(u64, u64) -> Option<usize>,
        optimistic: bool,
    ) -> Result<Vec<Vec<(u64, f64)>>> {
        let terms = self.terms(query);
        if terms.is_empty() || k == 0 || namespaces.is_empty() {
            return Ok(vec![Vec::new(); namespaces.len()]);
        }
        let f = self.shared.fields;
        let query = self.query(&terms, namespaces, dominant, tags);
        let delta = self.shared.delta.read();
        let searcher = delta.searcher.clone();
        let stats = Combined {
            searcher: &searcher,
            delta: &delta,
            text: f.text,
        };
        let mut heaps = Heaps::new(namespaces.len(), k);

        // the delta: scored here with tantivy's BM25 weights over the combined statistics
        let mut delta_scores: HashMap<u64, f32> = HashMap::new();
        for (text, term) in &terms {
            let Some(posting) = delta.postings.get(text) else {
                continue;
            };
            let weight = Bm25Weight::for_terms(&stats, std::slice::from_ref(term))
                .map_err(|e| kw_err("bm25", e))?;
            for (rid, tf) in posting {
                let d = &delta.docs[rid];
                if namespaces.contains(&d.ns.as_str()) {
                    *delta_scores.entry(*rid).or_default() +=
                        weight.score(FieldNormReader::fieldnorm_to_id(d.tokens), *tf);
                }
            }
        }
        for (rid, score) in delta_scores {
            let version = delta.docs[&rid].version;
            if let Some(g) = accept(rid, version) {
                heaps.push(g, Hit(score, rid, version));
            }
        }

        // committed segments: documents of rows in the delta are superseded by it
        let weight = query
            .weight(EnableScoring::enabled_from_statistics_provider(
                &stats, &searcher,
            ))
            .map_err(|e| kw_err("query", e))?;
        // `check`: ask `accept` of each document entering a heap (else put it in the first)
        let walk = |mut heaps: Heaps, check: bool| -> Result<Heaps> {
            for seg in searcher.segment_readers() {
                let (rids, vers) = self.shared.columns(seg)?;
                let alive = seg.alive_bitset();
                let start = heaps.threshold();
                let mut cb = |doc: u32, score: f32| -> f32 {
                    if alive.is_some_and(|a| !a.is_alive(doc)) {
                        return heaps.threshold();
                    }
                    let Some(rid) = rids.first(doc) else {
                        return heaps.threshold();
                    };
                    if !heaps.admits(score, rid) || delta.docs.contains_key(&rid) {
                        return heaps.threshold();
                    }
                    let Some(ver) = vers.first(doc) else {
                        return heaps.threshold();
                    };
                    let group = if check { accept(rid, ver) } else { Some(0) };
                    if let Some(g) = group {
                        heaps.push(g, Hit(score, rid, ver));
                    }
                    heaps.threshold()
                };
                weight
                    .for_each_pruning(start, seg, &mut cb)
                    .map_err(|e| kw_err("search", e))?;
            }
            Ok(heaps)
        };
        if optimistic && namespaces.len() == 1 {
            let found = walk(heaps.clone(), false)?;
            if found
                .each
                .iter()
                .flatten()
                .all(|h| accept(h.1, h.2).is_some())
            {
                return Ok(found.into_hits());
            }
        }
        Ok(walk(heaps, true)?.into_hits())
    }

    /// Number of documents (committed, alive) plus uncommitted ones in the delta.
    #[must_use]
    pub fn num_docs(&self) -> u64 {
        let delta = self.shared.delta.read();
        delta.searcher.num_docs() + delta.docs.len() as u64
    }

    /// Number of committed segments a search visits (merges bring it down when writes pause).
    #[must_use]
    pub fn num_segments(&self) -> usize {
        self.shared.delta.read().searcher.segment_readers().len()
    }

    /// Background folds that failed since the index was opened, and the last one's error.
    #[must_use]
    pub fn failures(&self) -> (u64, Option<String>) {
        self.shared.failures.get()
    }

    /// Whether the merge that follows writes (see [`IDLE_MERGE_AFTER`]) is still to come, runs
    /// or has segments searches do not see yet: searches are at their fastest once it is false.
    #[must_use]
    pub fn merging(&self) -> bool {
        self.shared.idle_merging()
    }

    /// Merges segments and purges deleted documents.
    pub fn compact(&self) -> Result<()> {
        self.commit()?;
        // a background merge may take some of the segments first: then merge what is left
        for attempt in 1.. {
            let ids = self
                .index
                .searchable_segment_ids()
                .map_err(|e| kw_err("segments", e))?;
            if ids.len() <= 1 {
                break;
            }
            let fut = self.shared.writer.lock().tantivy()?.merge(&ids);
            match fut.wait() {
                Ok(_) => break,
                Err(e) if attempt >= 10 => return Err(kw_err("merge", e)),
                Err(_) => {}
            }
        }
        self.shared.reload(None)
    }
}

/// Commits the index from a thread that does not hold it (the checkpointer).
pub struct Committer(Arc<Shared>);

impl Committer {
    /// Commits buffered and queued changes (if any) and reloads the reader.
    pub fn commit(&self) -> Result<()> {
        self.0.fold()
    }

    /// The changelog sequence the committed index reflects.
    #[must_use]
    pub fn committed_seq(&self) -> u64 {
        self.0.writer.lock().committed
    }
}

impl Drop for KeywordIndex {
    /// Stops the fold thread and waits for tantivy's merges: nothing touches the index
    /// directory after the index is dropped (the store's close returns only then).
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.folder.take() {
            if t.join().is_err() {
                log::error!("keyword index: the fold thread panicked");
            }
        }
        if let Some(w) = self.shared.writer.lock().inner.take() {
            if let Err(e) = w.wait_merging_threads() {
                log::error!("keyword index: waiting for merges: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::cast_possible_truncation,
        clippy::float_cmp,
        reason = "tests: unwraps, small row ids used as indexes, exact score comparisons"
    )]

    use tantivy::indexer::NoMergePolicy;

    use super::*;
    use crate::columns::tag_hash;

    /// An in-memory index whose fold thread is stopped and whose writer never merges: only
    /// `commit` folds the delta, and no merge purges deleted documents from the statistics
    /// behind a test's back.
    fn quiet() -> KeywordIndex {
        let (mut kw, fresh) = KeywordIndex::open(None).unwrap();
        assert!(fresh);
        let w = kw.shared.writer.lock();
        w.inner
            .as_ref()
            .unwrap()
            .set_merge_policy(Box::new(NoMergePolicy));
        drop(w);
        *kw.shared.stop.lock() = true;
        kw.shared.wake.notify_all();
        kw.folder.take().unwrap().join().unwrap();
        kw
    }

    fn doc(ns: &str, text: &str, version: u64) -> Doc {
        Doc {
            namespace: ns.to_owned(),
            text: text.to_owned(),
            tags: Vec::new(),
            version,
        }
    }

    fn all(_: u64, _: u64) -> bool {
        true
    }

    fn search(kw: &KeywordIndex, ns: &str, q: &str, k: usize) -> Vec<(u64, f64)> {
        kw.search(ns, q, k, false, &[], &all).unwrap()
    }

    fn delta_len(kw: &KeywordIndex) -> usize {
        kw.shared.delta.read().docs.len()
    }

    /// Deterministic texts of 3 to 14 words over a small vocabulary (varied lengths and term
    /// frequencies, so scores differ).
    fn texts(n: usize) -> Vec<String> {
        const WORDS: [&str; 16] = [
            "apple", "river", "stone", "cloud", "agent", "memory", "search", "garden", "window",
            "forest", "planet", "signal", "copper", "violin", "harbor", "lantern",
        ];
        let mut s: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(s >> 33).unwrap()
        };
        (0..n)
            .map(|_| {
                let len = 3 + next() % 12;
                (0..len)
                    .map(|_| WORDS[next() % WORDS.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    const QUERIES: [&str; 5] = [
        "apple",
        "river stone",
        "memory agent search",
        "lantern violin copper harbor",
        "garden window forest planet signal cloud",
    ];

    /// Every query's full ranking in namespace `ns`.
    fn rankings(kw: &KeywordIndex, ns: &str) -> Vec<Vec<(u64, f64)>> {
        QUERIES.iter().map(|q| search(kw, ns, q, 1000)).collect()
    }

    /// The same rows in the same order with the same scores (relative 1e-6: f32 sums of the
    /// same terms in another order).
    fn assert_same(before: &[Vec<(u64, f64)>], after: &[Vec<(u64, f64)>]) {
        for (q, (b, a)) in QUERIES.iter().zip(before.iter().zip(after)) {
            assert!(!b.is_empty(), "{q:?} matched nothing");
            assert_close(b, a, &format!("{q:?}: delta vs folded"));
        }
    }

    /// The same rows in the same order, with scores equal up to f32 rounding: tantivy sums a
    /// document's term scores in f32, in an order that follows its pruning state (which
    /// another search of the same documents need not share).
    fn assert_close(want: &[(u64, f64)], got: &[(u64, f64)], what: &str) {
        let rids = |r: &[(u64, f64)]| r.iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(rids(want), rids(got), "{what}: ranking");
        for ((rid, w), (_, g)) in want.iter().zip(got) {
            assert!(
                (w - g).abs() <= 1e-6 * w.abs(),
                "{what}: row {rid} scored {w}, then {g}"
            );
        }
    }

    /// A committed corpus of rows 1..=40 in namespace "a" and 41..=50 in "b".
    fn corpus() -> (KeywordIndex, Vec<String>) {
        let kw = quiet();
        let t = texts(200);
        for rid in 1..=50u64 {
            let ns = if rid <= 40 { "a" } else { "b" };
            kw.put(rid, Some(doc(ns, &t[rid as usize], 1)), rid, true)
                .unwrap();
        }
        kw.commit().unwrap();
        assert_eq!(delta_len(&kw), 0);
        (kw, t)
    }

    #[test]
    fn a_new_row_scores_the_same_in_the_delta_and_folded() {
        let kw = quiet();
        let t = texts(30);
        for rid in 0..30u64 {
            kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 1, true)
                .unwrap();
        }
        assert_eq!(delta_len(&kw), 30);
        assert_eq!(kw.num_segments(), 0);
        let before = rankings(&kw, "a");
        kw.commit().unwrap();
        assert_eq!(delta_len(&kw), 0);
        assert_eq!(kw.num_docs(), 30);
        assert_same(&before, &rankings(&kw, "a"));
    }

    /// A background fold that fails is counted with its error (not only logged); the row stays
    /// searchable from the delta and the next tick folds it.
    #[test]
    fn a_failed_background_fold_is_counted_and_retried() {
        let (kw, _) = KeywordIndex::open(None).unwrap();
        kw.shared
            .fail_ticks
            .store(2, std::sync::atomic::Ordering::SeqCst);
        kw.put(1, Some(doc("a", "copper lantern", 1)), 1, true)
            .unwrap();
        let waited = Instant::now();
        // the fold commits, then drops the folded documents from the delta
        while kw.committed_seq() < 1 || delta_len(&kw) > 0 {
            assert!(waited.elapsed() < Duration::from_secs(30), "never folded");
            assert_eq!(search(&kw, "a", "lantern", 10).len(), 1);
            std::thread::sleep(Duration::from_millis(20));
        }
        let (n, last) = kw.failures();
        assert_eq!(n, 2);
        assert!(last.unwrap().contains("injected fault"));
        assert_eq!(delta_len(&kw), 0);
        assert_eq!(search(&kw, "a", "lantern", 10).len(), 1);
    }

    #[test]
    fn scores_are_the_same_before_and_after_a_fold_of_adds_updates_and_deletes() {
        let (kw, t) = corpus();
        let committed = rankings(&kw, "a");
        // new rows, an update of a committed row, a delete of one, in both namespaces
        let mut seq = 100;
        let mut step = |rid: u64, d: Option<Doc>| {
            seq += 1;
            kw.put(rid, d, seq, true).unwrap();
        };
        for rid in 60..70u64 {
            step(rid, Some(doc("a", &t[rid as usize], 1)));
        }
        step(45, Some(doc("b", &t[150], 2)));
        step(3, Some(doc("a", &t[151], 2)));
        step(9, Some(doc("a", &t[152], 2)));
        step(12, None);
        step(44, None);
        assert_eq!(delta_len(&kw), 13);
        // the store no longer has row 12: the engine's accept drops it until the fold
        let live = |rid: u64, _: u64| rid != 12 && rid != 44;
        let ranked = |kw: &KeywordIndex| -> Vec<Vec<(u64, f64)>> {
            QUERIES
                .iter()
                .map(|q| kw.search("a", q, 1000, false, &[], &live).unwrap())
                .collect()
        };
        let before = ranked(&kw);
        assert_ne!(before, committed, "the delta changed nothing");
        assert!(before.iter().flatten().any(|h| (60..70).contains(&h.0)));
        kw.commit().unwrap();
        assert_eq!(delta_len(&kw), 0);
        assert_same(&before, &ranked(&kw));
        // once committed, the deleted rows are gone even for an accept-everything search
        assert_same(&before, &rankings(&kw, "a"));
    }

    #[test]
    fn a_row_replaced_twice_before_the_fold_keeps_its_score() {
        let (kw, t) = corpus();
        kw.put(7, Some(doc("a", &t[160], 2)), 101, true).unwrap();
        kw.put(7, Some(doc("a", &t[161], 3)), 102, true).unwrap();
        kw.put(60, Some(doc("a", &t[162], 1)), 103, true).unwrap();
        let before = rankings(&kw, "a");
        kw.commit().unwrap();
        assert_same(&before, &rankings(&kw, "a"));
    }

    #[test]
    fn a_row_added_and_deleted_before_the_fold_changes_no_score() {
        let (kw, t) = corpus();
        kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
        kw.put(60, None, 102, true).unwrap();
        kw.put(61, Some(doc("a", &t[161], 1)), 103, true).unwrap();
        let before = rankings(&kw, "a");
        kw.commit().unwrap();
        assert_same(&before, &rankings(&kw, "a"));
    }

    #[test]
    fn a_fold_that_empties_a_segment_keeps_scores() {
        let (kw, t) = corpus();
        // a segment of its own for row 60, then row 60 rewritten in the delta
        kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
        kw.commit().unwrap();
        let segments = kw.num_segments();
        kw.put(60, Some(doc("a", &t[161], 2)), 102, true).unwrap();
        let before = rankings(&kw, "a");
        kw.commit().unwrap();
        // tantivy dropped the emptied segment; the fold's new one took its place
        assert_eq!(kw.num_segments(), segments);
        assert_eq!(kw.shared.delta.read().dropped.docs, 1);
        assert_same(&before, &rankings(&kw, "a"));
    }

    #[test]
    fn after_compaction_scores_are_those_of_the_live_rows_alone() {
        let (kw, t) = corpus();
        kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
        kw.commit().unwrap();
        kw.put(60, Some(doc("a", &t[161], 2)), 102, true).unwrap();
        kw.put(3, Some(doc("a", &t[162], 2)), 103, true).unwrap();
        kw.put(12, None, 104, true).unwrap();
        kw.commit().unwrap();
        assert!(kw.shared.delta.read().dropped.docs > 0);
        kw.compact().unwrap();
        assert_eq!(kw.shared.delta.read().dropped.docs, 0);
        assert_eq!(kw.num_segments(), 1);
        let fresh = quiet();
        for rid in (1..=50u64).filter(|r| *r != 12 && *r != 3) {
            let ns = if rid <= 40 { "a" } else { "b" };
            fresh
                .put(rid, Some(doc(ns, &t[rid as usize], 1)), rid, true)
                .unwrap();
        }
        fresh.put(3, Some(doc("a", &t[162], 2)), 103, true).unwrap();
        fresh
            .put(60, Some(doc("a", &t[161], 2)), 102, true)
            .unwrap();
        fresh.commit().unwrap();
        assert_same(&rankings(&fresh, "a"), &rankings(&kw, "a"));
    }

    #[test]
    fn the_top_k_is_the_head_of_the_full_ranking_across_delta_and_segments() {
        let (kw, t) = corpus();
        // a second segment, then a delta on top
        for rid in 60..80u64 {
            kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 100, true)
                .unwrap();
        }
        kw.commit().unwrap();
        for rid in 80..100u64 {
            kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 100, true)
                .unwrap();
        }
        // (two indexing threads: a commit may write two segments)
        assert!(kw.num_segments() >= 2);
        for q in QUERIES {
            let full = search(&kw, "a", q, 1000);
            assert!(full.len() > 10, "{q:?}");
            assert!(full.windows(2).all(|w| w[0].1 >= w[1].1), "{q:?}");
            for k in [1, 3, 10] {
                assert_eq!(search(&kw, "a", q, k), full[..k], "{q:?} k={k}");
            }
        }
        assert!(search(&kw, "a", "apple", 0).is_empty());
    }

    #[test]
    fn equal_scores_rank_by_row_id_wherever_the_documents_are() {
        let kw = quiet();
        for rid in [5u64, 9] {
            kw.put(rid, Some(doc("a", "same words here", 1)), rid, true)
                .unwrap();
        }
        kw.commit().unwrap();
        for rid in [7u64, 3] {
            kw.put(rid, Some(doc("a", "same words here", 1)), 10 + rid, true)
                .unwrap();
        }
        let ids = |k| {
            search(&kw, "a", "same words", k)
                .iter()
                .map(|h| h.0)
                .collect::<Vec<_>>()
        };
        let full = search(&kw, "a", "same words", 10);
        assert!(full.iter().all(|h| h.1 == full[0].1), "{full:?}");
        assert_eq!(ids(10), [3, 5, 7, 9]);
        for k in 1..4 {
            assert_eq!(ids(k), [3, 5, 7, 9][..k], "k={k} (delta)");
        }
        kw.commit().unwrap();
        for k in 1..=4 {
            assert_eq!(ids(k), [3, 5, 7, 9][..k], "k={k} (committed)");
        }
    }

    #[test]
    fn rejected_documents_never_take_a_result_slot() {
        let kw = quiet();
        // "apple" once in texts of growing length: row 1 scores best, row 10 worst
        for rid in 1..=10u64 {
            let text = format!("apple{}", " filler".repeat(rid as usize));
            kw.put(rid, Some(doc("a", &text, 1)), rid, true).unwrap();
        }
        kw.commit().unwrap();
        // rows 1-3 are deleted in the store, rows 4-5 rewritten by a bulk load (version 2,
        // not yet searchable): their committed documents are stale
        for rid in 4..=5u64 {
            kw.put(rid, Some(doc("a", "pear", 2)), 20 + rid, false)
                .unwrap();
        }
        let accept = |rid: u64, ver: u64| rid > 5 || (rid > 3 && ver == 2);
        let hits = kw.search("a", "apple", 3, false, &[], &accept).unwrap();
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
        // the same with the best rows in the delta
        for rid in 1..=3u64 {
            let text = format!("apple{}", " filler".repeat(rid as usize));
            kw.put(rid, Some(doc("a", &text, 2)), 30 + rid, true)
                .unwrap();
        }
        let accept = |rid: u64, ver: u64| rid > 5 || (rid > 3 && ver == 2);
        let hits = kw.search("a", "apple", 3, false, &[], &accept).unwrap();
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
        // committed deletes are dropped by tantivy itself
        for rid in 1..=3u64 {
            kw.put(rid, None, 40 + rid, true).unwrap();
        }
        kw.commit().unwrap();
        let hits = search(&kw, "a", "apple", 3);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
        assert_eq!(search(&kw, "a", "pear", 10).len(), 2);
    }

    #[test]
    fn the_analyzer_stems_and_folds_case_and_accents() {
        let kw = quiet();
        kw.put(1, Some(doc("a", "The cats were running", 1)), 1, true)
            .unwrap();
        kw.put(
            2,
            Some(doc("a", "Un café crème, s'il vous plaît", 1)),
            2,
            true,
        )
        .unwrap();
        kw.put(3, Some(doc("a", "LOUD SHOUTING", 1)), 3, true)
            .unwrap();
        let first = |kw: &KeywordIndex, q: &str| search(kw, "a", q, 10).first().map(|h| h.0);
        let check = |kw: &KeywordIndex| {
            for (q, rid) in [
                ("cat", 1),
                ("CATS", 1),
                ("run", 1),
                ("runs", 1),
                ("cafe", 2),
                ("CAFÉ", 2),
                ("creme", 2),
                ("loud", 3),
                ("Shouting", 3),
            ] {
                assert_eq!(first(kw, q), Some(rid), "{q:?}");
            }
            assert_eq!(first(kw, "dog"), None);
        };
        check(&kw);
        kw.commit().unwrap();
        check(&kw);
    }

    #[test]
    fn a_query_of_one_letter_words_or_punctuation_matches_nothing() {
        let kw = quiet();
        kw.put(1, Some(doc("a", "a b c I x y z cat", 1)), 1, true)
            .unwrap();
        kw.put(2, Some(doc("a", "a b c", 1)), 2, true).unwrap();
        kw.commit().unwrap();
        kw.put(3, Some(doc("a", "x y z", 1)), 3, true).unwrap();
        for q in [
            "",
            " ",
            "a",
            "a b c",
            "I",
            "x y z",
            "!!!",
            "?! ... -- ()",
            "\"AND\" (",
            "é",
        ] {
            assert_eq!(search(&kw, "a", q, 10), [], "{q:?}");
        }
        // one-letter words next to a real one are ignored, query syntax is plain text
        let ids = |q: &str| {
            search(&kw, "a", q, 10)
                .iter()
                .map(|h| h.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("a cat"), [1]);
        assert_eq!(ids("cat AND NOT (x) OR *"), [1]);
        assert_eq!(ids("title:cat"), [1]);
    }

    #[test]
    fn namespaces_never_see_each_others_rows() {
        let kw = quiet();
        for rid in 1..=4u64 {
            kw.put(
                rid,
                Some(doc(["a", "b"][rid as usize % 2], "shared words", 1)),
                rid,
                true,
            )
            .unwrap();
        }
        kw.commit().unwrap();
        for rid in 5..=8u64 {
            kw.put(
                rid,
                Some(doc(["a", "b"][rid as usize % 2], "shared words", 1)),
                rid,
                true,
            )
            .unwrap();
        }
        let ids = |ns: &str, dominant: bool, accept: &dyn Fn(u64, u64) -> bool| {
            let mut r: Vec<u64> = kw
                .search(ns, "shared", 100, dominant, &[], accept)
                .unwrap()
                .iter()
                .map(|h| h.0)
                .collect();
            r.sort_unstable();
            r
        };
        assert_eq!(ids("a", false, &all), [2, 4, 6, 8]);
        assert_eq!(ids("b", false, &all), [1, 3, 5, 7]);
        assert_eq!(ids("c", false, &all), Vec::<u64>::new());
        // dominant: the namespace term is left out and accept checks the namespace
        assert_eq!(ids("a", true, &|rid, _| rid % 2 == 0), [2, 4, 6, 8]);
    }

    #[test]
    fn a_search_of_several_namespaces_equals_one_search_of_each() {
        let kw = quiet();
        let t = texts(300);
        let ns_of = |rid: u64| ["a", "b", "c"][usize::try_from(rid % 3).unwrap()];
        for rid in 1..=240u64 {
            let text = &t[usize::try_from(rid).unwrap()];
            kw.put(rid, Some(doc(ns_of(rid), text, 1)), rid, true)
                .unwrap();
            if rid == 180 {
                kw.commit().unwrap(); // the last 60 rows stay in the delta
            }
        }
        let names = ["c", "a"];
        // b's rows are never offered to a group; a's odd rows are filtered out
        let keep = |rid: u64| ns_of(rid) != "a" || rid.is_multiple_of(2);
        let group = |rid: u64, _: u64| {
            let g = names.iter().position(|n| *n == ns_of(rid))?;
            keep(rid).then_some(g)
        };
        for q in QUERIES {
            for k in [1, 3, 10, 1000] {
                for dominant in [false, true] {
                    let many = kw
                        .search_many(&names, q, k, dominant, &[], &group, false)
                        .unwrap();
                    for (ns, got) in names.iter().zip(&many) {
                        let alone = kw
                            .search(ns, q, k, dominant, &[], &|rid, _| {
                                ns_of(rid) == *ns && keep(rid)
                            })
                            .unwrap();
                        assert_close(&alone, got, &format!("{ns} {q:?} k={k} {dominant}"));
                    }
                }
            }
        }
    }

    #[test]
    fn an_optimistic_search_returns_what_checking_every_document_returns() {
        let kw = quiet();
        let t = texts(300);
        for rid in 1..=240u64 {
            let text = &t[usize::try_from(rid).unwrap()];
            kw.put(rid, Some(doc("a", text, 1)), rid, true).unwrap();
            if rid == 180 {
                kw.commit().unwrap(); // the last 60 rows stay in the delta
            }
        }
        // keeping every row, all but a few (rows deleted since the commit), half of them
        let keeps: [&dyn Fn(u64) -> bool; 3] = [&|_| true, &|rid| rid % 17 != 0, &|rid| {
            rid.is_multiple_of(2)
        }];
        for keep in keeps {
            let accept = |rid: u64, _: u64| keep(rid).then_some(0);
            for q in QUERIES {
                for k in [1, 3, 10, 1000] {
                    for dominant in [false, true] {
                        let search = |optimistic| {
                            kw.search_many(&["a"], q, k, dominant, &[], &accept, optimistic)
                                .unwrap()
                                .remove(0)
                        };
                        let (fast, checked) = (search(true), search(false));
                        // equal scores, but for the last bit: tantivy sums a document's term
                        // scores in an order that depends on the pruning threshold's path
                        let scores = |h: &[(u64, f64)]| h.iter().map(|x| x.1).collect::<Vec<_>>();
                        assert_eq!(fast.len(), checked.len(), "{q:?} k={k}");
                        for (a, b) in scores(&fast).iter().zip(scores(&checked)) {
                            assert!((a - b).abs() <= 1e-6 * b.abs(), "{q:?} k={k}: {a} {b}");
                        }
                        assert!(fast.iter().all(|h| keep(h.0)), "{q:?} k={k}");
                        if k == 1000 {
                            let ids = |h: &[(u64, f64)]| {
                                h.iter()
                                    .map(|x| x.0)
                                    .collect::<std::collections::BTreeSet<_>>()
                            };
                            assert_eq!(ids(&fast), ids(&checked), "{q:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn required_tags_keep_only_tagged_rows_and_add_nothing_to_scores() {
        let kw = quiet();
        let (red, blue) = (tag_hash("red"), tag_hash("blue"));
        let tagged = [
            (1u64, vec![red]),
            (2, vec![red, blue]),
            (3, vec![blue]),
            (4, vec![]),
        ];
        for (rid, tags) in &tagged {
            let d = Doc {
                tags: tags.clone(),
                ..doc(
                    "a",
                    &format!("tagged row {}", "x ".repeat(*rid as usize)),
                    1,
                )
            };
            kw.put(*rid, Some(d), *rid, true).unwrap();
        }
        kw.commit().unwrap();
        let plain = search(&kw, "a", "tagged", 10);
        assert_eq!(plain.len(), 4);
        let with = |tags: &[u64], dominant: bool| {
            kw.search("a", "tagged", 10, dominant, tags, &all).unwrap()
        };
        let only = |rids: &[u64]| -> Vec<(u64, f64)> {
            plain
                .iter()
                .filter(|h| rids.contains(&h.0))
                .copied()
                .collect()
        };
        for dominant in [false, true] {
            assert_eq!(with(&[red], dominant), only(&[1, 2]));
            assert_eq!(with(&[blue], dominant), only(&[2, 3]));
            assert_eq!(with(&[red, blue], dominant), only(&[2]));
            assert_eq!(with(&[tag_hash("green")], dominant), []);
        }
    }

    #[test]
    fn commits_record_the_sequence_and_num_docs_counts_the_delta() {
        let kw = quiet();
        assert_eq!(kw.committed_seq(), 0);
        kw.put(1, Some(doc("a", "one", 1)), 5, true).unwrap();
        kw.put(2, Some(doc("a", "two", 1)), 6, true).unwrap();
        assert_eq!(kw.num_docs(), 2);
        assert_eq!(kw.committed_seq(), 0);
        kw.commit().unwrap();
        assert_eq!(kw.committed_seq(), 6);
        assert_eq!(kw.num_docs(), 2);
        // a sequence that touched no text still moves the commit forward
        kw.advance(9);
        kw.committer().commit().unwrap();
        assert_eq!(kw.committer().committed_seq(), 9);
        kw.put(1, None, 10, true).unwrap();
        assert_eq!(kw.num_docs(), 2, "a delete is counted once committed");
        kw.commit().unwrap();
        assert_eq!(kw.num_docs(), 1);
        kw.compact().unwrap();
        assert!(kw.num_segments() <= 1);
        assert_eq!(search(&kw, "a", "two", 10).len(), 1);
    }

    #[test]
    fn an_index_on_disk_reopens_committed_and_rebuilds_when_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kw");
        {
            let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
            assert!(fresh);
            kw.put(1, Some(doc("a", "durable words", 1)), 7, true)
                .unwrap();
            kw.commit().unwrap();
        }
        {
            let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
            assert!(!fresh);
            assert_eq!(kw.committed_seq(), 7);
            assert_eq!(search(&kw, "a", "durable", 10).len(), 1);
        }
        // a segment file goes missing: the index is rebuilt empty and says so
        let victim = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .unwrap();
        std::fs::remove_file(victim).unwrap();
        let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
        assert!(fresh);
        assert_eq!(kw.num_docs(), 0);
    }

    /// Commits rows `from..from + n` (bulk puts, one commit: new segments).
    fn segment(kw: &KeywordIndex, from: u64, n: u64) {
        for (rid, text) in (from..from + n).zip(texts(usize::try_from(n).unwrap())) {
            kw.put(rid, Some(doc("main", &text, 1)), rid, false)
                .unwrap();
        }
        kw.commit().unwrap();
    }

    /// Whether the idle merge would take the largest segment (None: nothing to merge).
    fn takes_bulk(kw: &KeywordIndex) -> Option<bool> {
        let metas = kw.index.searchable_segment_metas().unwrap();
        let largest = metas.iter().max_by_key(|m| m.num_docs()).unwrap().id();
        let ids = kw.shared.idle_merge_ids().unwrap()?;
        Some(ids.contains(&largest))
    }

    /// The idle merge leaves the largest segment alone while the others hold under a quarter
    /// of its documents (merging those into one), and takes it too once they hold more;
    /// `merging` says so until searches see the merged segment, rankings unchanged.
    #[test]
    fn idle_merge_takes_the_bulk_once_the_rest_is_a_quarter_of_it() {
        let kw = quiet();
        segment(&kw, 0, 400);
        kw.compact().unwrap();
        assert_eq!(kw.num_segments(), 1);
        segment(&kw, 400, 40);
        segment(&kw, 440, 50); // 90 of 400
        assert_eq!(takes_bulk(&kw), Some(false));
        segment(&kw, 490, 10); // 100 of 400: a quarter
        assert_eq!(takes_bulk(&kw), Some(true));

        let before = rankings(&kw, "main");
        assert!(kw.merging(), "due once writes pause");
        kw.shared.writer.lock().committed_at -= IDLE_MERGE_AFTER;
        kw.shared.merge_if_idle().unwrap();
        let t0 = Instant::now();
        while kw.shared.writer.lock().idle_merge.is_some() && kw.merging() && !kw.shared.merged() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the merge never ended"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(kw.merging(), "merged, not yet searched");
        kw.shared.reload(None).unwrap();
        assert!(!kw.merging());
        assert_eq!(kw.num_segments(), 1);
        assert_eq!(takes_bulk(&kw), None);
        assert_same(&before, &rankings(&kw, "main"));
    }

    /// A second segment under a quarter of the first: nothing to merge, and `merging` is
    /// false as soon as the index is clean.
    #[test]
    fn idle_merge_leaves_a_small_second_segment() {
        let kw = quiet();
        segment(&kw, 0, 400);
        kw.compact().unwrap();
        segment(&kw, 400, 1);
        assert_eq!(kw.num_segments(), 2);
        assert_eq!(takes_bulk(&kw), None);
        assert!(!kw.merging());
    }
}
