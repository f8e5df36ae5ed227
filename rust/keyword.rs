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
//! - Writes are buffered in the tantivy writer; a search that follows a write commits first
//!   (read-your-writes). The commit payload records the changelog sequence the index reflects.

use std::collections::{BinaryHeap, HashSet};
use std::path::Path;

use parking_lot::Mutex;
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, SimpleTokenizer, Stemmer, TextAnalyzer,
};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::error::{Error, Result};

const TOKENIZER: &str = "memini";
const WRITER_MEMORY: usize = 64 << 20;

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
}

struct Writer {
    writer: IndexWriter<TantivyDocument>,
    /// Buffered changes not yet committed.
    dirty: bool,
    /// Changelog sequence of the newest buffered change.
    seq: u64,
    /// Changelog sequence the last commit reflects.
    committed: u64,
}

/// A document to index: the row's namespace, text and version.
pub struct Doc<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Content, summary and tags, joined.
    pub text: String,
    /// The row's doc version.
    pub version: u64,
}

/// The tantivy index with its writer and reader.
pub struct KeywordIndex {
    index: Index,
    fields: Fields,
    reader: IndexReader,
    writer: Mutex<Writer>,
}

#[derive(PartialEq, PartialOrd)]
struct Hit(f32, u64);
impl Eq for Hit {}
impl Ord for Hit {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // reversed: BinaryHeap becomes a min-heap on score (ties: larger rid evicted first)
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
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
        };
        let schema = sb.build();
        let (index, mut fresh) = match dir {
            None => (Index::create_in_ram(schema), true),
            Some(d) => {
                std::fs::create_dir_all(d)?;
                let opened = MmapDirectory::open(d)
                    .map_err(|e| kw_err("open", e))
                    .and_then(|md| Index::open_or_create(md, schema.clone()).map_err(|e| kw_err("open", e)));
                match opened {
                    Ok(i) => (i, false),
                    Err(e) => {
                        log::warn!("{e}; rebuilding the keyword index from rows");
                        std::fs::remove_dir_all(d)?;
                        std::fs::create_dir_all(d)?;
                        let md = MmapDirectory::open(d).map_err(|e| kw_err("open", e))?;
                        (Index::open_or_create(md, schema).map_err(|e| kw_err("create", e))?, true)
                    }
                }
            }
        };
        index.tokenizers().register(TOKENIZER, analyzer());
        let committed_seq = match index.load_metas() {
            Ok(m) => match m.payload.as_deref().map(str::parse::<u64>) {
                Some(Ok(seq)) => seq,
                _ => {
                    fresh = true;
                    0
                }
            },
            Err(_) => {
                fresh = true;
                0
            }
        };
        let writer = index
            .writer_with_num_threads(2, WRITER_MEMORY)
            .map_err(|e| kw_err("writer", e))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| kw_err("reader", e))?;
        let kw = Self {
            index,
            fields,
            reader,
            writer: Mutex::new(Writer { writer, dirty: false, seq: committed_seq, committed: committed_seq }),
        };
        if fresh {
            kw.writer.lock().writer.delete_all_documents().map_err(|e| kw_err("clear", e))?;
        }
        Ok((kw, fresh))
    }

    /// The changelog sequence the committed index reflects.
    #[must_use]
    pub fn committed_seq(&self) -> u64 {
        self.writer.lock().committed
    }

    /// Replaces (doc = Some) or deletes (None) the document of row `rid`; `seq` is the
    /// changelog sequence of the change.
    pub fn put(&self, rid: u64, doc: Option<Doc<'_>>, seq: u64) -> Result<()> {
        let mut w = self.writer.lock();
        w.writer.delete_term(Term::from_field_u64(self.fields.rid, rid));
        if let Some(d) = doc {
            let f = self.fields;
            w.writer
                .add_document(doc!(f.rid => rid, f.ver => d.version, f.ns => d.namespace, f.text => d.text))
                .map_err(|e| kw_err("add", e))?;
        }
        w.dirty = true;
        w.seq = w.seq.max(seq);
        Ok(())
    }

    /// Notes that every change up to `seq` is reflected (even when none touched text).
    pub fn advance(&self, seq: u64) {
        let mut w = self.writer.lock();
        if seq > w.seq {
            w.seq = seq;
            w.dirty = true;
        }
    }

    /// Commits buffered changes (if any) and reloads the reader.
    pub fn commit(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if !w.dirty {
            return Ok(());
        }
        let seq = w.seq;
        let mut prepared = w.writer.prepare_commit().map_err(|e| kw_err("commit", e))?;
        prepared.set_payload(&seq.to_string());
        prepared.commit().map_err(|e| kw_err("commit", e))?;
        w.dirty = false;
        w.committed = seq;
        self.reader.reload().map_err(|e| kw_err("reload", e))?;
        Ok(())
    }

    /// The query's terms: analyzer tokens of its words of >= 2 letters/digits, deduplicated.
    fn terms(&self, query: &str) -> Vec<Term> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(query);
        let mut seen = HashSet::new();
        let mut terms = Vec::new();
        while stream.advance() {
            let t = stream.token();
            let word = query.get(t.offset_from..t.offset_to).unwrap_or("");
            if word.chars().count() >= 2 && seen.insert(t.text.clone()) {
                terms.push(Term::from_field_text(self.fields.text, &t.text));
            }
        }
        terms
    }

    /// BM25 top-`k` rows of `namespace` for `query` among the documents `accept(rid, version)`
    /// keeps; best first, ties by row id.
    pub fn search(
        &self,
        namespace: &str,
        query: &str,
        k: usize,
        accept: &dyn Fn(u64, u64) -> bool,
    ) -> Result<Vec<(u64, f64)>> {
        let terms = self.terms(query);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        self.commit()?;
        let words: Vec<(Occur, Box<dyn Query>)> = terms
            .into_iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs));
                (Occur::Should, q)
            })
            .collect();
        let ns_term = Term::from_field_text(self.fields.ns, namespace);
        let ns_q: Box<dyn Query> = Box::new(ConstScoreQuery::new(
            Box::new(TermQuery::new(ns_term, IndexRecordOption::Basic)),
            0.0,
        ));
        let query = BooleanQuery::new(vec![
            (Occur::Must, ns_q),
            (Occur::Must, Box::new(BooleanQuery::new(words)) as Box<dyn Query>),
        ]);
        let searcher = self.reader.searcher();
        let weight = query
            .weight(EnableScoring::enabled_from_searcher(&searcher))
            .map_err(|e| kw_err("query", e))?;
        let mut heap: BinaryHeap<Hit> = BinaryHeap::with_capacity(k + 1);
        for seg in searcher.segment_readers() {
            let ff = seg.fast_fields();
            let rids = ff.u64("rid").map_err(|e| kw_err("fast field", e))?;
            let vers = ff.u64("ver").map_err(|e| kw_err("fast field", e))?;
            let alive = seg.alive_bitset();
            let start = heap.peek().filter(|_| heap.len() >= k).map_or(f32::MIN, |h| h.0);
            let mut threshold = start;
            let mut cb = |doc: u32, score: f32| -> f32 {
                if alive.is_some_and(|a| !a.is_alive(doc)) {
                    return threshold;
                }
                let (Some(rid), Some(ver)) = (rids.first(doc), vers.first(doc)) else { return threshold };
                if !accept(rid, ver) {
                    return threshold;
                }
                heap.push(Hit(score, rid));
                if heap.len() > k {
                    heap.pop();
                }
                if heap.len() >= k {
                    threshold = heap.peek().map_or(f32::MIN, |h| h.0);
                }
                threshold
            };
            weight.for_each_pruning(start, seg, &mut cb).map_err(|e| kw_err("search", e))?;
        }
        let mut hits: Vec<(u64, f64)> = heap.into_iter().map(|h| (h.1, f64::from(h.0))).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(hits)
    }

    /// Number of documents (committed, alive).
    #[must_use]
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Merges segments and purges deleted documents.
    pub fn compact(&self) -> Result<()> {
        self.commit()?;
        let ids = self.index.searchable_segment_ids().map_err(|e| kw_err("segments", e))?;
        if ids.len() > 1 {
            let mut w = self.writer.lock();
            let fut = w.writer.merge(&ids);
            drop(w);
            fut.wait().map_err(|e| kw_err("merge", e))?;
        }
        self.reader.reload().map_err(|e| kw_err("reload", e))?;
        Ok(())
    }
}
