//! Opening and closing a store: the directory and its lock, the stored settings, loading
//! the columns and bringing both derived indexes up to the rows.

use std::fs::{self, File};
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use super::checkpoint::{Checkpointer, Reason};
use super::commit::Queue;
use super::recovery::{open_keyword, open_vectors};
use super::{Counters, Engine, Faults, Inner, Options, State};
use crate::columns::Columns;
use crate::error::{Error, Failures, Result};
use crate::rows::RowStore;
use crate::types::Metric;

/// Checks the store directory before anything is written: it must be a directory (created
/// when missing), and a new store needs `dims`. Returns whether the directory was created.
fn prepare_dir(d: &Path, options: &Options) -> Result<bool> {
    if d.as_os_str().is_empty() {
        return Err(Error::invalid(
            "store path is empty (give a directory, or None for an in-memory store)",
        ));
    }
    if d.exists() && !d.is_dir() {
        return Err(Error::invalid(format!(
            "store path {} exists and is not a directory (a store is a directory; choose another path)",
            d.display()
        )));
    }
    if options.dims.is_none() && !d.join("rows.redb").exists() {
        return Err(Error::invalid(
            "dims is required to create a new store (e.g. Store.open(path, dims=384))",
        ));
    }
    let created = !d.exists();
    fs::create_dir_all(d)?;
    Ok(created)
}

/// Locks the store directory through its `LOCK` file. The file locked must still be the one
/// at the path: a process whose new store failed removes the directory (while it holds the
/// lock, see [`Engine::open`]), and a lock taken meanwhile on the removed file guards nothing.
fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    // flock (not fcntl): a second open in the same process conflicts too; dies with the process.
    let locked = file.try_lock().is_ok() && same_file(&file, &path);
    if !locked {
        return Err(Error::Locked(format!(
            "store directory {} is in use by another open Store (this process or another); \
             close that Store first, or route work through the process that owns it",
            dir.display()
        )));
    }
    Ok(file)
}

/// Whether `file` is the file at `path` now (not one removed or replaced since it was opened).
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// The derived indexes' directories, removed by [`Options::rebuild_indexes`].
const INDEX_DIRS: [&str; 2] = ["vectors", "keyword"];

impl Engine {
    /// Opens (or creates) a store. `dir = None` is an in-memory store.
    ///
    /// A new store that fails to come into being leaves nothing behind, and only what this
    /// call created is removed, only while it holds the lock: a process that loses the race to
    /// create a store (another holds the lock) removes nothing, so the winner keeps its files.
    pub fn open(dir: Option<&Path>, options: &Options) -> Result<Self> {
        if options.dims == Some(0) {
            return Err(Error::invalid("dims must be >= 1"));
        }
        let Some(d) = dir else {
            return Self::open_in(None, &mut None, options);
        };
        let created = prepare_dir(d, options)?;
        let lock = match take_lock(d) {
            Ok(lock) => lock,
            Err(e) => {
                if created && !matches!(e, Error::Locked(_)) {
                    // nothing else is in it (the LOCK file could not be made), and an
                    // empty directory is all a remove_dir removes
                    let _ = fs::remove_dir(d);
                }
                return Err(e);
            }
        };
        if options.rebuild_indexes {
            for name in INDEX_DIRS {
                let index = d.join(name);
                if index.is_dir() {
                    fs::remove_dir_all(&index)?;
                }
            }
        }
        let mut lock = Some(lock);
        let opened = Self::open_in(Some(d), &mut lock, options);
        if opened.is_err() && created {
            // the lock is still held: no other process uses what is removed
            let _ = fs::remove_dir_all(d);
        }
        drop(lock);
        opened
    }

    /// Opens the store in `dir`, locked by `lock` (taken into the store once it is open).
    fn open_in(dir: Option<&Path>, lock: &mut Option<File>, options: &Options) -> Result<Self> {
        let rows = RowStore::open(dir.map(|d| d.join("rows.redb")).as_deref())?;
        let snap = rows.snapshot()?;
        let stored_dims: Option<u64> = snap.meta("dims")?;
        let stored_metric: Option<String> = snap.meta("metric")?;
        let (dims, metric) = match (stored_dims, stored_metric) {
            (Some(d), Some(m)) => {
                let d = usize::try_from(d)
                    .map_err(|_| Error::Corruption("stored dims out of range".into()))?;
                let m = Metric::parse(&m)?;
                if options.dims.is_some_and(|x| x != d) || options.metric.is_some_and(|x| x != m) {
                    return Err(Error::DimensionMismatch(format!(
                        "store was created with dims={d}, metric={}; opened with dims={}, metric={} \
                         (pass dims=None and metric=None to use the stored values, or use a new directory)",
                        m.as_str(),
                        options.dims.map_or("None".into(), |x| x.to_string()),
                        options.metric.map_or("None", Metric::as_str),
                    )));
                }
                (d, m)
            }
            _ => {
                let d = options.dims.ok_or_else(|| {
                    Error::invalid(
                        "dims is required to create a new store (e.g. Store.open(path, dims=384))",
                    )
                })?;
                let m = options.metric.unwrap_or(Metric::L2);
                let b = rows.begin()?;
                b.set_meta("dims", &(d as u64))?;
                b.set_meta("metric", &m.as_str().to_owned())?;
                b.commit()?;
                (d, m)
            }
        };
        let snap = rows.snapshot()?;
        let mut counters: Counters = snap.meta("counters")?.unwrap_or_default();
        counters.log_gen = snap.log_gens()?.last().copied().unwrap_or(0);
        let cols = Columns::load(snap.cols()?);
        log::info!(
            "loaded {} rows in {} namespaces",
            cols.rows.len(),
            cols.namespaces.len()
        );
        let vectors = open_vectors(
            dir,
            (dims, metric, options.tuning),
            &snap,
            &cols,
            counters.seq,
        )?;
        let keyword = open_keyword(dir, &snap, &cols, counters.seq)?;
        drop(snap);
        let state = State {
            cols,
            vectors: vectors.0,
            keyword,
            vector_seq: vectors.1,
            vector_damage: None,
            keyword_damage: None,
        };
        let inner = Arc::new(Inner {
            dir: dir.map(Path::to_path_buf),
            _lock: lock.take(),
            dims,
            metric,
            rows: RwLock::new(rows),
            state: RwLock::new(state),
            queue: Mutex::new(Queue::default()),
            queued: Condvar::new(),
            counters: Mutex::new(counters),
            faults: Faults::default(),
            broken: Mutex::new(None),
            checkpointer: Checkpointer::default(),
            checkpoints: std::sync::atomic::AtomicU64::new(0),
            checkpoint_failures: Failures::default(),
            checkpointing: Mutex::new(()),
            thawed: Condvar::new(),
            overlay_wait: Mutex::new(()),
        });
        Checkpointer::start(&inner)?;
        Ok(Self {
            gate: RwLock::new(Some(inner)),
            pid: std::process::id(),
        })
    }

    /// Checkpoints the indexes and closes; waits for in-flight calls. Idempotent. In a forked
    /// child it does nothing (the parent owns the store and its lock).
    pub fn close(&self) -> Result<()> {
        if std::process::id() != self.pid {
            return Ok(());
        }
        let Some(inner) = self.gate.write().take() else {
            return Ok(());
        };
        inner.checkpointer.stop();
        let checkpointed = inner
            .checkpoint(Reason::Close)
            .and_then(|()| inner.drop_covered_logs());
        if let Err(e) = inner.rows.write().trim() {
            // the file is intact, only larger than it needs to be
            log::warn!("row store: giving back unused space at close failed: {e}");
        }
        // the checkpoint thread held the only other reference and has ended: the files, the
        // lock and the keyword index's threads are released here, before close returns
        drop(inner);
        checkpointed
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // a forked child must not touch the parent's files or lock
            if let Some(inner) = self.gate.get_mut().take() {
                std::mem::forget(inner);
            }
            return;
        }
        if let Err(e) = self.close() {
            log::error!("closing the store: {e}");
        }
    }
}
