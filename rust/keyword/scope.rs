//! BM25 statistics over the namespaces a search covers: their document count, their average
//! document length and each query word's document frequency among their documents. A word in
//! nearly every row of the namespaces searched (a user's name in their own facts) then weighs
//! nearly nothing there, however rare it is in the rest of the index; and no tenant's rows
//! (their words or their lengths) move another tenant's scores. A namespace's summed length
//! in the committed segments is walked once per namespace and segment set (cached in the
//! delta until a fold or merge), the delta's and the shadowed documents' on each search.
//!
//! Length normalisation is scaled down: tantivy's BM25 (k1 = 1.2, b = 0.75) reads a row's
//! length only against the average length, which these statistics put at [`LENGTH_SCALE`]
//! times the real one. In effect BM25 with k1 = 0.39 and b = 0.23: a word found `tf` times in
//! a row of `len` tokens scores `idf * 2.2 tf / (tf + 0.3 + 0.09 len / avg)`. A longer row that
//! matches loses little to a shorter one, which still ranks first among equal matches. On
//! LoCoMo's dev split (`benches/bench_recall.py`) tantivy's full length normalisation cost the
//! keyword leg 2 points of MRR on dialogue turns, and recall's defaults 2 on turns and 0.5 on
//! facts: agent memories are short, and a longer row that matches is hardly a worse match.
//! (The namespaces' own average length, rather than the index's, measured the same there.)
//! None at all (b = 0) measured the same on LoCoMo but leaves every row matching the same
//! words once tied (the oldest first): on the pypi bench rows its top 10 shared 0.48 of
//! tantivy-py's, against 0.80 here.
//!
//! Counted as the corpus-wide statistics are (`stats`), over the live documents only: the
//! namespaces' committed documents alive and not shadowed by a newer change in the delta,
//! plus the delta's documents of those namespaces. So a score still depends on the live rows
//! alone, not on folds, merges or reopens. When the namespaces hold every document the
//! corpus-wide statistics are used as they are.

use std::collections::HashMap;

use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocSet, Term, TERMINATED};

use super::kw_err;
use super::stats::{norm, Combined};
use crate::error::Result;

/// The average length BM25 is told, as a multiple of the real one (see the module docs).
const LENGTH_SCALE: u64 = 10;

/// The statistics of a search over some namespaces.
pub(super) struct Scoped<'a> {
    all: Combined<'a>,
    /// None: the namespaces hold every document (the corpus-wide statistics apply).
    scope: Option<Scope>,
}

struct Scope {
    docs: u64,
    tokens: u64,
    /// The query's text terms -> documents of the namespaces holding them.
    doc_freqs: HashMap<Term, u64>,
}

impl<'a> Scoped<'a> {
    /// The statistics of `namespaces` (their names in field `ns`) for the text terms `terms`.
    pub(super) fn new(
        all: Combined<'a>,
        ns: Field,
        namespaces: &[&str],
        terms: &[(String, Term)],
    ) -> Result<Self> {
        let names: Vec<Term> = namespaces
            .iter()
            .map(|n| Term::from_field_text(ns, n))
            .collect();
        let in_scope = |d: &str| namespaces.contains(&d);
        let mut docs = all.delta.docs.values().filter(|d| in_scope(&d.ns)).count() as u64;
        for name in &names {
            docs += all.live_committed(name).map_err(|e| kw_err("stats", e))?;
        }
        let total = Bm25StatisticsProvider::total_num_docs(&all).map_err(|e| kw_err("stats", e))?;
        if docs == 0 || docs >= total {
            return Ok(Self { all, scope: None });
        }
        let tokens = all.scope_tokens(namespaces, &names)?;
        let mut doc_freqs = HashMap::with_capacity(terms.len());
        for (text, term) in terms {
            let delta = all.delta.postings.get(text).map_or(0, |p| {
                p.keys()
                    .filter(|rid| all.delta.docs.get(rid).is_some_and(|d| in_scope(&d.ns)))
                    .count() as u64
            });
            doc_freqs.insert(term.clone(), delta + all.joint_docs(term, &names)?);
        }
        Ok(Self {
            all,
            scope: Some(Scope {
                docs,
                tokens,
                doc_freqs,
            }),
        })
    }
}

impl Combined<'_> {
    /// Summed field norms of the live documents of `namespaces` (`names`: their terms): their
    /// committed documents alive (cached per namespace until the segments change), less the
    /// shadowed ones, plus the delta's.
    fn scope_tokens(&self, namespaces: &[&str], names: &[Term]) -> Result<u64> {
        let delta = self.delta;
        let mut tokens: u64 = delta
            .docs
            .values()
            .filter(|d| namespaces.contains(&d.ns.as_str()))
            .map(|d| norm(d.tokens))
            .sum();
        for (key, name) in namespaces.iter().zip(names) {
            // walked with the cache unlocked: searches of other namespaces need not wait
            let cached = delta.namespace_tokens.lock().get(*key).copied();
            tokens += match cached {
                Some(t) => t,
                None => {
                    let t = self.alive_tokens_of(name)?;
                    delta.namespace_tokens.lock().insert((*key).to_owned(), t);
                    t
                }
            };
        }
        // the shadowed documents of these namespaces are no longer live
        for (seg, shadowed) in &delta.shadowed_docs {
            let seg = self.searcher.segment_reader(*seg);
            let index = seg
                .inverted_index(names[0].field())
                .map_err(|e| kw_err("stats", e))?;
            let norms = seg
                .get_fieldnorms_reader(self.text)
                .map_err(|e| kw_err("field norms", e))?;
            for name in names {
                let Some(mut docs) = index
                    .read_postings(name, IndexRecordOption::Basic)
                    .map_err(|e| kw_err("stats", e))?
                else {
                    continue;
                };
                for &doc in shadowed {
                    if docs.doc() <= doc && docs.seek(doc) == doc {
                        tokens = tokens.saturating_sub(u64::from(norms.fieldnorm(doc)));
                    }
                    if docs.doc() == TERMINATED {
                        break;
                    }
                }
            }
        }
        Ok(tokens)
    }

    /// Summed field norms of the alive committed documents of namespace term `name`
    /// (shadowed ones included).
    fn alive_tokens_of(&self, name: &Term) -> Result<u64> {
        let mut t = 0;
        for seg in self.searcher.segment_readers() {
            let index = seg
                .inverted_index(name.field())
                .map_err(|e| kw_err("stats", e))?;
            let Some(mut docs) = index
                .read_postings(name, IndexRecordOption::Basic)
                .map_err(|e| kw_err("stats", e))?
            else {
                continue;
            };
            let norms = seg
                .get_fieldnorms_reader(self.text)
                .map_err(|e| kw_err("field norms", e))?;
            let alive = seg.alive_bitset();
            while docs.doc() != TERMINATED {
                let doc = docs.doc();
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    t += u64::from(norms.fieldnorm(doc));
                }
                docs.advance();
            }
        }
        Ok(t)
    }

    /// Live committed documents (alive, not shadowed) holding `term` and one of `names`.
    fn joint_docs(&self, term: &Term, names: &[Term]) -> Result<u64> {
        let mut n = 0u64;
        for (i, seg) in (0u32..).zip(self.searcher.segment_readers()) {
            let alive = seg.alive_bitset();
            let shadowed = self.delta.shadowed_docs.get(&i);
            let live = |doc| {
                alive.is_none_or(|a| a.is_alive(doc)) && shadowed.is_none_or(|s| !s.contains(&doc))
            };
            let words = seg
                .inverted_index(self.text)
                .map_err(|e| kw_err("stats", e))?;
            let spaces = seg
                .inverted_index(names[0].field())
                .map_err(|e| kw_err("stats", e))?;
            for name in names {
                let postings = |index: &tantivy::InvertedIndexReader, t: &Term| {
                    index
                        .read_postings(t, IndexRecordOption::Basic)
                        .map_err(|e| kw_err("stats", e))
                };
                let (Some(mut a), Some(mut b)) =
                    (postings(&words, term)?, postings(&spaces, name)?)
                else {
                    continue;
                };
                if b.doc_freq() < a.doc_freq() {
                    std::mem::swap(&mut a, &mut b);
                }
                // walk the shorter list, seeking each of its documents in the longer
                let mut doc = a.doc();
                while doc != TERMINATED {
                    let other = b.seek(doc);
                    if other == TERMINATED {
                        break;
                    }
                    if other == doc {
                        n += u64::from(live(doc));
                        doc = a.advance();
                    } else {
                        doc = a.seek(other);
                    }
                }
            }
        }
        Ok(n)
    }
}

impl Bm25StatisticsProvider for Scoped<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if field != self.all.text {
            return Bm25StatisticsProvider::total_num_tokens(&self.all, field);
        }
        let tokens = match &self.scope {
            Some(s) => s.tokens,
            None => Bm25StatisticsProvider::total_num_tokens(&self.all, field)?,
        };
        Ok(tokens.saturating_mul(LENGTH_SCALE))
    }
    fn total_num_docs(&self) -> tantivy::Result<u64> {
        match &self.scope {
            Some(s) => Ok(s.docs),
            None => Bm25StatisticsProvider::total_num_docs(&self.all),
        }
    }
    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        match &self.scope {
            None => self.all.doc_freq(term),
            Some(s) => match s.doc_freqs.get(term) {
                Some(n) => Ok(*n),
                // namespace and tag terms score 0: counted over the index, kept within the
                // namespaces' document count as BM25 requires
                None => Ok(self.all.doc_freq(term)?.min(s.docs)),
            },
        }
    }
}
