//! Checkpoints (both derived indexes written with the changelog sequence they reflect, and
//! the changelog they cover dropped), backups and compaction.

use std::fs;
use std::path::Path;

use super::{Engine, Inner};
use crate::error::{Error, Result};
use crate::rows::RowStore;

impl Engine {
    /// Writes a consistent copy of the store into the new directory `dest`.
    pub fn backup(&self, dest: &Path) -> Result<()> {
        let inner = self.inner()?;
        if dest.exists() {
            return Err(Error::invalid(format!(
                "backup target {} already exists (choose a new directory)",
                dest.display()
            )));
        }
        fs::create_dir_all(dest)?;
        let rows = inner.rows.read();
        let seq = inner.counters.lock().seq;
        let st = inner.state.read();
        rows.backup_to(&dest.join("rows.redb"))?;
        st.vectors.checkpoint(&dest.join("vectors"), seq)?;
        Ok(())
    }

    /// Rebuilds worn vector graphs, merges keyword segments and reclaims row-store pages.
    pub fn compact(&self) -> Result<()> {
        let inner = self.inner()?;
        {
            let _rows = inner.rows.read();
            let mut st = inner.state.write();
            for ns in st.vectors.worn_graphs() {
                log::info!("compacting vector graph of namespace {ns:?}");
                let keys: Vec<u64> = st
                    .cols
                    .namespaces
                    .get(&ns)
                    .map(|n| {
                        n.ids
                            .values()
                            .filter_map(|r| st.cols.rows.get(r).and_then(|c| c.vkey))
                            .collect()
                    })
                    .unwrap_or_default();
                st.vectors.rebuild(&ns, &keys)?;
            }
            st.keyword.compact()?;
        }
        inner.checkpoint_now(true)?;
        let mut rows = inner.rows.write();
        log::info!("compacting row store");
        rows.compact()
    }
}

impl Inner {
    /// Writes both derived indexes' checkpoints and drops changelog entries they cover.
    /// Unless `force`, does nothing when both indexes already reflect every change (a
    /// read-only session closes without rewriting the graph files).
    pub(super) fn checkpoint_locked(&self, rows: &RowStore, force: bool) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        // counters before state: the commit leader takes them in that order
        let seq = self.counters.lock().seq;
        let st = self.state.read();
        if !force && st.vector_seq == seq && st.keyword.committed_seq() == seq {
            return Ok(());
        }
        if st.vector_damage.is_some() || st.keyword_damage.is_some() {
            // the rows and the changelog stay the truth: the next open replays or rebuilds
            log::warn!("an index is out of step with the rows; skipping its checkpoint");
            return Ok(());
        }
        st.keyword.commit()?;
        st.vectors.checkpoint(&dir.join("vectors"), seq)?;
        drop(st);
        self.state.write().vector_seq = seq;
        let b = rows.begin()?;
        b.truncate_log(seq)?;
        b.commit()
    }

    pub(super) fn checkpoint_now(&self, force: bool) -> Result<()> {
        let rows = self.rows.read();
        self.checkpoint_locked(&rows, force)
    }

    pub(super) fn checkpoint(self) -> Result<()> {
        let r = self.checkpoint_now(false);
        drop(self);
        r
    }
}
