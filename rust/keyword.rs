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
//!   every write is queued for the tantivy writer AND entered in a small in-memory delta
//!   (same analyzer). A search scores the delta's documents itself with tantivy's own
//!   `Bm25Weight` over combined statistics (committed + delta document counts, token counts
//!   and document frequencies, the same field-norm quantisation), merges them into the top-k
//!   and skips committed documents of rows that are in the delta. A background thread folds
//!   the queue and the delta into tantivy (commit + reload) on a size/time threshold, so a
//!   write never waits for a commit in progress; deleted documents stay in tantivy's
//!   statistics until a merge, exactly as the delta's additions do, so a row's score does
//!   not jump when it is folded in.
//! - Each document also carries its tags' hashes as terms. A filter whose tags pass few rows
//!   makes them required, zero-scored terms, so tantivy intersects posting lists instead of
//!   scoring every document that matches the words.
//! - The commit payload records the changelog sequence the index reflects. Segments merge in
//!   the background (a log merge policy); the reader picks merged segments up when idle.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tantivy::columnar::Column;
use tantivy::directory::MmapDirectory;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::SegmentId;
use tantivy::indexer::LogMergePolicy;
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query,
    TermQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, SimpleTokenizer, Stemmer, TextAnalyzer,
};
use tantivy::{
    Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, SegmentReader, TantivyDocument, Term,
};

use crate::error::{Error, Result};

const TOKENIZER: &str = "memini";
const WRITER_MEMORY: usize = 64 << 20;
/// Merge this many segments of one size class at a time (tantivy's default is 8): fewer
/// segments per search, for a little more merging while writing.
const MERGE_SEGMENTS: usize = 4;
/// Once no write has come for this long and at least [`IDLE_MERGE_MIN`] segments remain, the
/// small segments are merged into one (all but the largest when it holds most documents, so
/// trickling writes never rewrite the bulk of the index): every search visits each segment.
const IDLE_MERGE_AFTER: Duration = Duration::from_secs(2);
const IDLE_MERGE_MIN: usize = 3;
/// How long after a commit the reader looks for merged segments to pick up.
const MERGE_WATCH: Duration = Duration::from_secs(300);
/// Fold the delta into tantivy when it holds this many documents...
pub const FOLD_DOCS: usize = 4096;
/// ...or when its oldest change is this old.
const FOLD_AGE: Duration = Duration::from_secs(1);

fn kw_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::storage(&format!("keyword index: {context}"), e)
}

/// The analyzer shared by documents and queries.
fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
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

/// Searchable changes not yet handed to the tantivy writer. The writer is busy for the whole
/// of a commit (tens to hundreds of ms); queueing here means a write, which holds the store's
/// state lock, never waits for one (the delta already makes the change visible). The fold
/// hands the queue to the writer, in order, before it commits.
#[derive(Default)]
struct Pending {
    changes: Vec<(Change, u64)>,
    /// Newest changelog sequence reflected (changes and [`KeywordIndex::advance`]).
    seq: u64,
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
    terms: Vec<String>,
}

/// The freshest writes, searchable before tantivy commits them.
#[derive(Default)]
struct Delta {
    docs: HashMap<u64, DeltaDoc>,
    /// term -> (rid -> term frequency)
    postings: HashMap<String, HashMap<u64, u32>>,
    tokens: u64,
    oldest: Option<Instant>,
}

impl Delta {
    fn remove(&mut self, rid: u64) {
        if let Some(d) = self.docs.remove(&rid) {
            self.tokens -= u64::from(d.tokens);
            for t in d.terms {
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
        for (t, f) in &freqs {
            self.postings.entry(t.clone()).or_default().insert(rid, *f);
        }
        self.tokens += u64::from(tokens);
        self.docs.insert(
            rid,
            DeltaDoc {
                ns: doc.namespace.clone(),
                version: doc.version,
                seq,
                tokens,
                terms: freqs.into_keys().collect(),
            },
        );
        self.oldest.get_or_insert_with(Instant::now);
    }
}

/// BM25 statistics of the committed index plus the delta.
struct Combined<'a> {
    searcher: &'a Searcher,
    delta: &'a Delta,
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        Ok(Bm25StatisticsProvider::total_num_tokens(self.searcher, field)? + self.delta.tokens)
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(Bm25StatisticsProvider::total_num_docs(self.searcher)? + self.delta.docs.len() as u64)
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let extra = term
            .value()
            .as_str()
            .and_then(|t| self.delta.postings.get(t))
            .map_or(0, HashMap::len);
        Ok(self.searcher.doc_freq(term)? + extra as u64)
    }
}

/// The `rid` and `ver` fast-field columns of one segment.
type Columns = (Column<u64>, Column<u64>);

struct Shared {
    fields: Fields,
    index: Index,
    reader: IndexReader,
    /// Fast-field columns per segment, opened once rather than on every search.
    columns: Mutex<HashMap<SegmentId, Columns>>,
    writer: Mutex<Writer>,
    /// Locked after `writer` when both are held.
    pending: Mutex<Pending>,
    delta: RwLock<Delta>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The tantivy index with its writer, reader, delta and folding thread.
pub struct KeywordIndex {
    index: Index,
    shared: Arc<Shared>,
    folder: Option<JoinHandle<()>>,
}

/// A heap entry ordered so that `BinaryHeap` is a min-heap on score (ties: the larger rid is
/// evicted first). `PartialOrd` must agree with `Ord`: the heap compares with both.
#[derive(PartialEq)]
struct Hit(f32, u64);
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

fn push(heap: &mut BinaryHeap<Hit>, k: usize, score: f32, rid: u64) {
    heap.push(Hit(score, rid));
    if heap.len() > k {
        heap.pop();
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
        let seq = {
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
            seq
        };
        let mut d = self.delta.write();
        self.reload()?;
        let folded: Vec<u64> = d
            .docs
            .iter()
            .filter(|(_, doc)| doc.seq <= seq)
            .map(|(rid, _)| *rid)
            .collect();
        for rid in folded {
            d.remove(rid);
        }
        d.oldest = if d.docs.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
        Ok(())
    }

    /// The segments the reader searches.
    fn searched_segments(&self) -> HashSet<SegmentId> {
        let searcher = self.reader.searcher();
        let readers = searcher.segment_readers();
        readers.iter().map(SegmentReader::segment_id).collect()
    }

    /// Reloads the reader and forgets the columns of segments it no longer has.
    fn reload(&self) -> Result<()> {
        self.reader.reload().map_err(|e| kw_err("reload", e))?;
        let live = self.searched_segments();
        self.columns.lock().retain(|id, _| live.contains(id));
        Ok(())
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

    /// Starts the idle merge when due (see [`IDLE_MERGE_AFTER`]); it runs in the background
    /// and the reader picks its result up on a later tick.
    fn merge_if_idle(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if w.dirty
            || w.idle_merged
            || w.committed_at.elapsed() < IDLE_MERGE_AFTER
            || !self.pending.lock().changes.is_empty()
        {
            return Ok(());
        }
        w.idle_merged = true;
        let mut metas = self
            .index
            .searchable_segment_metas()
            .map_err(|e| kw_err("segments", e))?;
        if metas.len() < IDLE_MERGE_MIN {
            return Ok(());
        }
        metas.sort_by_key(|m| std::cmp::Reverse(m.num_docs()));
        let total: u64 = metas.iter().map(|m| u64::from(m.num_docs())).sum();
        let skip = usize::from(2 * u64::from(metas[0].num_docs()) > total);
        let ids: Vec<SegmentId> = metas[skip..].iter().map(tantivy::SegmentMeta::id).collect();
        // a background merge may hold some of them: then this one fails and is not retried
        // before the next commit; the merge policy merges them anyway
        drop(w.tantivy()?.merge(&ids));
        Ok(())
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
            let done = if self.fold_due() {
                self.fold()
            } else if self.merged() {
                // merged segments hold the same documents: no delta to drop
                let _d = self.delta.write();
                self.reload()
            } else {
                self.merge_if_idle()
            };
            if let Err(e) = done {
                log::error!("{e}");
            }
            stop = self.stop.lock();
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
    for path in metas.iter().flat_map(tantivy::SegmentMeta::list_files) {
        if !d.join(&path).is_file() {
            return Err(kw_err("check", format!("{} is missing", path.display())));
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
        let shared = Arc::new(Shared {
            fields,
            index: index.clone(),
            reader,
            columns: Mutex::new(HashMap::new()),
            writer: Mutex::new(Writer {
                inner: Some(writer),
                dirty: fresh,
                seq: committed,
                committed,
                committed_at: Instant::now(),
                idle_merged: false,
            }),
            pending: Mutex::new(Pending::default()),
            delta: RwLock::new(Delta::default()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
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
        if searchable {
            let mut p = self.shared.pending.lock();
            p.changes.push(((rid, td), seq));
            p.seq = p.seq.max(seq);
        } else {
            // a bulk load goes straight to the writer (after what is queued) and commits
            let mut w = self.shared.writer.lock();
            self.shared.flush_pending(&mut w)?;
            w.apply(f.rid, (rid, td), seq)?;
        }
        let mut delta = self.shared.delta.write();
        match doc {
            Some(d) if searchable => delta.insert(rid, &d, seq),
            _ => delta.remove(rid),
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

    /// The query's terms: analyzer tokens of its words of >= 2 letters/digits, deduplicated.
    fn terms(&self, query: &str) -> Vec<(String, Term)> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(query);
        let mut seen = HashSet::new();
        let mut terms = Vec::new();
        while stream.advance() {
            let t = stream.token();
            let word = query.get(t.offset_from..t.offset_to).unwrap_or("");
            if word.chars().count() >= 2 && seen.insert(t.text.clone()) {
                terms.push((
                    t.text.clone(),
                    Term::from_field_text(self.shared.fields.text, &t.text),
                ));
            }
        }
        terms
    }

    /// BM25 top-`k` rows of `namespace` for `query` among the documents `accept(rid, version)`
    /// keeps (it must check the namespace); best first, ties by row id.
    ///
    /// `dominant`: the namespace holds most of the index. Then the required namespace term is
    /// left out: it would disable tantivy's block-max WAND pruning for the whole query, while
    /// the few other tenants' documents it keeps out are dropped by `accept` anyway.
    /// `tags`: tag hashes every hit must carry, given when they pass few rows (the
    /// intersection is then cheaper than scoring every matching document); `accept` still
    /// applies the whole filter. Required terms score 0, so scores never depend on them.
    pub fn search(
        &self,
        namespace: &str,
        query: &str,
        k: usize,
        dominant: bool,
        tags: &[u64],
        accept: &dyn Fn(u64, u64) -> bool,
    ) -> Result<Vec<(u64, f64)>> {
        let terms = self.terms(query);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
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
        let required = |t: Term| -> (Occur, Box<dyn Query>) {
            let q = TermQuery::new(t, IndexRecordOption::Basic);
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(q), 0.0)),
            )
        };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = tags
            .iter()
            .map(|h| required(Term::from_field_u64(f.tag, *h)))
            .collect();
        if !dominant {
            clauses.push(required(Term::from_field_text(f.ns, namespace)));
        }
        let query: Box<dyn Query> = if clauses.is_empty() {
            words
        } else {
            clauses.push((Occur::Must, words));
            Box::new(BooleanQuery::new(clauses))
        };
        let delta = self.shared.delta.read();
        let searcher = self.shared.reader.searcher();
        let stats = Combined {
            searcher: &searcher,
            delta: &delta,
        };
        let mut heap: BinaryHeap<Hit> = BinaryHeap::with_capacity(k + 1);

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
                if d.ns == namespace {
                    *delta_scores.entry(*rid).or_default() +=
                        weight.score(FieldNormReader::fieldnorm_to_id(d.tokens), *tf);
                }
            }
        }
        for (rid, score) in delta_scores {
            if accept(rid, delta.docs[&rid].version) {
                push(&mut heap, k, score, rid);
            }
        }

        // committed segments: documents of rows in the delta are superseded by it
        let weight = query
            .weight(EnableScoring::enabled_from_statistics_provider(
                &stats, &searcher,
            ))
            .map_err(|e| kw_err("query", e))?;
        for seg in searcher.segment_readers() {
            let (rids, vers) = self.shared.columns(seg)?;
            let alive = seg.alive_bitset();
            let start = heap
                .peek()
                .filter(|_| heap.len() >= k)
                .map_or(f32::MIN, |h| h.0);
            let mut threshold = start;
            let mut cb = |doc: u32, score: f32| -> f32 {
                if alive.is_some_and(|a| !a.is_alive(doc)) {
                    return threshold;
                }
                let (Some(rid), Some(ver)) = (rids.first(doc), vers.first(doc)) else {
                    return threshold;
                };
                if delta.docs.contains_key(&rid) || !accept(rid, ver) {
                    return threshold;
                }
                push(&mut heap, k, score, rid);
                if heap.len() >= k {
                    threshold = heap.peek().map_or(f32::MIN, |h| h.0);
                }
                threshold
            };
            weight
                .for_each_pruning(start, seg, &mut cb)
                .map_err(|e| kw_err("search", e))?;
        }
        let mut hits: Vec<(u64, f64)> = heap.into_iter().map(|h| (h.1, f64::from(h.0))).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(hits)
    }

    /// Number of documents (committed, alive) plus uncommitted ones in the delta.
    #[must_use]
    pub fn num_docs(&self) -> u64 {
        self.shared.reader.searcher().num_docs() + self.shared.delta.read().docs.len() as u64
    }

    /// Number of committed segments a search visits (merges bring it down when writes pause).
    #[must_use]
    pub fn num_segments(&self) -> usize {
        self.shared.reader.searcher().segment_readers().len()
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
        let _d = self.shared.delta.write();
        self.shared.reload()
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
