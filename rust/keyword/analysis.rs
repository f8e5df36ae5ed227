//! The one analyzer of documents and queries, and the terms of a query.
//!
//! - Documents and queries go through the same analyzer: Unicode word tokenizer, lowercase,
//!   ASCII folding, English stemming (the delta analyses its documents with it too, so they
//!   hold the terms tantivy would index).
//! - A query is built from analyzer tokens (words of >= 2 characters), never parsed as query
//!   syntax, so any string is a valid query; English stopwords are left out when the query
//!   has other words.

use std::collections::HashSet;

use tantivy::schema::Field;
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    TextAnalyzer,
};
use tantivy::Term;

/// The name the analyzer is registered under, and the text field's tokenizer.
pub(super) const TOKENIZER: &str = "memini";

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

/// The analyzer shared by documents and queries.
pub(super) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        // a "word" of 255+ bytes (a hash, a blob) is never a search term; tantivy would drop
        // one past its own limit anyway, with a warning on stderr
        .filter(RemoveLongFilter::limit(255))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The query's terms in field `text`: analyzer tokens of its words of >= 2 letters/digits,
/// deduplicated, without English stopwords (see [`STOPWORDS`]) unless the query has nothing
/// else.
pub(super) fn terms(text: Field, query: &str) -> Vec<(String, Term)> {
    let mut analyzer = analyzer();
    let mut stream = analyzer.token_stream(query);
    let mut seen = HashSet::new();
    let mut terms = Vec::new();
    let mut stop = Vec::new();
    while stream.advance() {
        let t = stream.token();
        let word = query.get(t.offset_from..t.offset_to).unwrap_or("");
        if word.chars().count() >= 2 && seen.insert(t.text.clone()) {
            let term = (t.text.clone(), Term::from_field_text(text, &t.text));
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
