//! Opening the index: checked whole, or rebuilt.
//!
//! - An index on disk is opened only once every file of its segments is present and matches
//!   its checksum; otherwise (and when new, or its commit payload is unreadable) it is
//!   cleared and `open` says it must be rebuilt from the rows.
//! - One writer with two indexing threads and a log merge policy merging [`MERGE_SEGMENTS`]
//!   segments of a size class at a time; a reader reloaded only by hand (see `fold`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use tantivy::directory::MmapDirectory;
use tantivy::index::SegmentComponent;
use tantivy::indexer::LogMergePolicy;
use tantivy::schema::Schema;
use tantivy::{Index, IndexWriter, ReloadPolicy, TantivyDocument};

use super::analysis::{analyzer, TOKENIZER};
use super::delta::Delta;
use super::schema::Fields;
use super::stats::alive_tokens;
use super::writer::{Pending, Writer};
use super::{kw_err, kw_fail, KeywordIndex, Shared};
use crate::error::{Error, Failures, Result};

/// The writer's indexing memory budget.
const WRITER_MEMORY: usize = 64 << 20;
/// Merge this many segments of one size class at a time (tantivy's default is 8): fewer
/// segments per search, for a little more merging while writing.
const MERGE_SEGMENTS: usize = 4;

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
                return Err(kw_fail(
                    "check",
                    format!("{} is missing or cut short", path.display()),
                ));
            }
        }
    }
    let damaged = index.validate_checksum().map_err(|e| kw_err("check", e))?;
    if let Some(path) = damaged.iter().next() {
        return Err(kw_fail(
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
        let (schema, fields) = Fields::schema();
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
        let tokens = alive_tokens(&searcher, fields.text)?;
        let shared = Arc::new(Shared {
            fields,
            index: index.clone(),
            reader,
            reloading: Mutex::new(()),
            columns: Mutex::new(HashMap::new()),
            writer: Mutex::new(Writer::new(writer, committed, fresh)),
            pending: Mutex::new(Pending::default()),
            delta: RwLock::new(Delta::new(searcher, tokens, (fields.rid, fields.text))),
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
            .map_err(|e| Error::io("keyword index: fold thread", e))?;
        Ok((
            Self {
                index,
                shared,
                folder: Some(folder),
            },
            fresh,
        ))
    }
}
