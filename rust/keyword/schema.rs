//! The tantivy schema and the document of a row.
//!
//! - `rid` (indexed, fast) and `ver` (fast) carry the row id and the row's `doc_version`: the
//!   search drops a document whose version is not the row's (stale) without reading it.
//! - `ns` is one untokenized term: the namespace a search requires.
//! - `text` is content + summary + tags, analysed by [`super::analysis::TOKENIZER`], with term
//!   frequencies (BM25) but no positions (no phrase queries).
//! - `tag` holds the row's tag hashes, one term each, which a filter on tags that pass few rows
//!   makes required terms.

use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STRING,
};
use tantivy::TantivyDocument;

use super::analysis::TOKENIZER;
use super::Doc;

/// The index's fields.
#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub(super) rid: Field,
    pub(super) ver: Field,
    pub(super) ns: Field,
    pub(super) text: Field,
    /// The row's tag hashes (`columns::tag_hash`), one term each.
    pub(super) tag: Field,
}

impl Fields {
    /// The schema and its fields.
    pub(super) fn schema() -> (Schema, Self) {
        let mut sb = Schema::builder();
        let text_opts = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let fields = Self {
            rid: sb.add_u64_field("rid", INDEXED | FAST),
            ver: sb.add_u64_field("ver", FAST),
            ns: sb.add_text_field("ns", STRING),
            text: sb.add_text_field("text", text_opts),
            tag: sb.add_u64_field("tag", INDEXED),
        };
        (sb.build(), fields)
    }

    /// The tantivy document of row `rid`.
    pub(super) fn document(self, rid: u64, d: &Doc) -> TantivyDocument {
        let mut td = TantivyDocument::new();
        td.add_u64(self.rid, rid);
        td.add_u64(self.ver, d.version);
        td.add_text(self.ns, &d.namespace);
        td.add_text(self.text, &d.text);
        for t in &d.tags {
            td.add_u64(self.tag, *t);
        }
        td
    }
}
