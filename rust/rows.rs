//! The durable row store: the single source of truth, on redb (ACID, fsync'd commits, one
//! writer, MVCC readers).
//!
//! Tables (all keyed by the row's internal id `rid`, assigned once at insert, never reused):
//! - `ids`: memory id -> rid (ids are unique across namespaces);
//! - `cols`: rid -> [`Col`], the small record the in-memory filter columns are built from, so
//!   loading columns on open reads no payloads;
//! - `payload`: rid -> [`Payload`] (content, summary, metadata, tags, links, fingerprint);
//! - `vectors`: rid -> little-endian f32 bytes (absent for keyword-only rows);
//! - `changelog`, `changelog.1`, `changelog.2`, ... (generations): sequence -> [`Change`],
//!   written in the same transaction as the change, so the derived indexes can replay deletes
//!   and moves after their last checkpoint. A checkpoint starts a new generation when it fixes
//!   its sequence; once both indexes hold everything before, the next write group drops the
//!   older generations whole, in its transaction (a table drop frees its pages without
//!   visiting each entry; writes made meanwhile are in the new generation);
//! - `meta`: settings (format version, dims, metric, embed model) and counters.
//!
//! Invariant: a row exists iff it has an `ids`, a `cols` and a `payload` entry; all three are
//! written and removed together in one transaction.
//!
//! File size: redb grows a full file by doubling it, and a compacted file is full. So opening
//! a complete store commits nothing, and closing gives back growth that the session's writes
//! did not use ([`RowStore::trim`]): a compacted store stays compact across close, reopen and
//! small writes.

use std::path::{Path, PathBuf};

use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, TableHandle,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::{Level, Memory, Micros, Tier};

const IDS: TableDefinition<&str, u64> = TableDefinition::new("ids");
const COLS: TableDefinition<u64, &[u8]> = TableDefinition::new("cols");
const PAYLOAD: TableDefinition<u64, &[u8]> = TableDefinition::new("payload");
const VECTORS: TableDefinition<u64, &[u8]> = TableDefinition::new("vectors");
const CHANGELOG: TableDefinition<u64, &[u8]> = TableDefinition::new("changelog");

/// The changelog table of generation `gen` (0 is the table stores before generations had).
fn log_table(gen: u64) -> String {
    if gen == 0 {
        "changelog".to_owned()
    } else {
        format!("changelog.{gen}")
    }
}

/// The generations of the changelog tables among `names`, ascending.
fn log_gens(names: impl Iterator<Item = String>) -> Vec<u64> {
    let mut gens: Vec<u64> = names
        .filter_map(|n| match n.as_str() {
            "changelog" => Some(0),
            n => n.strip_prefix("changelog.")?.parse().ok(),
        })
        .collect();
    gens.sort_unstable();
    gens
}
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// On-disk format written by this build; a store with a newer one is refused.
pub const FORMAT_VERSION: u64 = 1;

/// Page cache of the row store, bytes. Payloads are read on demand through it, and an open
/// reads every vector through it to load the graphs (see `vector::layout`): what it keeps stays
/// resident. At 256 MB a 99k-row store (384-d) kept ~200 MB of vector pages after an open
/// (RSS 584 MB against 375 MB); at 64 MB the same open after the graphs went bf16 (with exact
/// f32 vectors in memory, see `vector::part`) was 521 MB, at 32 MB 475 MB with the same
/// search speed. A search reads only payload pages (~90 B a row; the filter columns are in
/// memory): 32 MB holds them up to ~300k rows, and the OS page cache serves the rest.
const CACHE_BYTES: usize = 32 << 20;

/// The per-row record the filter columns are built from (no payload). Its layout is the
/// stored format (bincode, field order matters): the memory's `col` fields (see
/// `types::for_memory_fields`) and the ones derived from them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Col {
    /// Memory id.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// Tier.
    pub tier: Tier,
    /// Level.
    pub level: Option<Level>,
    /// Hashes of the tags (see [`crate::columns::tag_hash`]).
    pub tag_hashes: Vec<u64>,
    /// Hashes of the top-level string metadata pairs (see [`crate::columns::pair_hash`]).
    pub meta_hashes: Vec<u64>,
    /// Creation instant.
    pub created_at: Micros,
    /// Update instant.
    pub updated_at: Micros,
    /// Last access instant.
    pub last_accessed_at: Micros,
    /// Access counter.
    pub access_count: i64,
    /// Importance.
    pub importance: f64,
    /// Expiry.
    pub expires_at: Option<Micros>,
    /// Tombstone target.
    pub superseded_by: Option<String>,
    /// Validity start.
    pub valid_from: Option<Micros>,
    /// Validity end.
    pub valid_to: Option<Micros>,
    /// Confidence.
    pub confidence: Option<f64>,
    /// Hash of the content fingerprint.
    pub fingerprint_hash: u64,
    /// Key of the row's current vector in the vector index; never reused.
    pub vkey: Option<u64>,
    /// Changelog sequence of the row's last write (its version).
    pub version: u64,
}

/// The row's payload: everything no filter looks at (the memory's `payload` fields; the
/// stored format).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// Content.
    pub content: String,
    /// Summary.
    pub summary: String,
    /// Metadata JSON text.
    pub metadata: String,
    /// Tags, in order.
    pub tags: Vec<String>,
    /// Linked ids.
    pub linked_memory_ids: Vec<String>,
    /// Content fingerprint (hex).
    pub fingerprint: String,
}

/// One changelog entry: the row `rid` changed (or vanished); `removed_vkey` is the vector key
/// that the change took out of the vector index, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Row touched.
    pub rid: u64,
    /// Vector key removed by this change.
    pub removed_vkey: Option<u64>,
}

macro_rules! row_halves {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty, $rec:ident, $py:ident, $upd:ident; )*) => {
        /// Joins the two halves of a row into the API's `Memory`.
        #[must_use]
        pub fn to_memory(col: &Col, p: Payload) -> Memory {
            Memory { $( $name: row_halves!(@get $rec, col, p, $name), )* }
        }

        /// Splits a memory into its two stored halves. The column fields derived from others
        /// (hashes, vector key, version) are left for the caller to fill.
        #[must_use]
        pub fn split(m: Memory) -> (Col, Payload) {
            let (mut col, mut payload) = (Col::default(), Payload::default());
            $( row_halves!(@put $rec, col, payload, m, $name); )*
            (col, payload)
        }
    };
    (@get col, $c:ident, $p:ident, $name:ident) => { $c.$name.clone() };
    (@get payload, $c:ident, $p:ident, $name:ident) => { $p.$name };
    (@put col, $c:ident, $p:ident, $m:ident, $name:ident) => { $c.$name = $m.$name };
    (@put payload, $c:ident, $p:ident, $m:ident, $name:ident) => { $p.$name = $m.$name };
}

crate::for_memory_fields!(row_halves);

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    bincode::serialize(v).map_err(|e| Error::storage("encoding a record", e))
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T> {
    Ok(bincode::deserialize(bytes)?)
}

/// f32 slice <-> little-endian bytes (bit-exact).
fn vector_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Growth of the file since open or the last compaction below which [`RowStore::trim`] does
/// nothing.
const TRIM_MIN_GROWTH: u64 = 1 << 20;

/// The redb database with this crate's tables.
pub struct RowStore {
    db: Database,
    /// The file of an on-disk store, and its size at open or after the last compaction.
    file: Option<(PathBuf, FileSize)>,
}

/// A file's length and the bytes the filesystem holds for it (less than the length while
/// redb's growth is still a hole: it grows the file with `set_len`).
#[derive(Clone, Copy, Debug)]
struct FileSize {
    len: u64,
    allocated: u64,
}

impl FileSize {
    fn of(path: &Path) -> Result<Self> {
        let m = std::fs::metadata(path)?;
        #[cfg(unix)]
        let allocated = std::os::unix::fs::MetadataExt::blocks(&m).saturating_mul(512);
        #[cfg(not(unix))]
        let allocated = m.len();
        Ok(Self {
            len: m.len(),
            allocated,
        })
    }
}

/// A read snapshot.
pub struct Snapshot {
    txn: ReadTransaction,
}

impl RowStore {
    /// Opens (or creates) the row store at `path` (`None` = in memory) and checks its format.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        let mut builder = Database::builder();
        builder.set_cache_size(CACHE_BYTES);
        let db = match path {
            Some(p) => builder.create(p)?,
            None => builder.create_with_backend(redb::backends::InMemoryBackend::new())?,
        };
        // measured before the first commit, which may already grow a compacted file
        let file = path.map(|p| Ok::<_, Error>((p.to_path_buf(), FileSize::of(p)?)));
        let store = Self {
            db,
            file: file.transpose()?,
        };
        if store.ready()? {
            return Ok(store);
        }
        let mut txn = store.db.begin_write()?;
        {
            for t in [COLS, PAYLOAD, VECTORS, CHANGELOG] {
                txn.open_table(t)?;
            }
            txn.open_table(IDS)?;
            let mut meta = txn.open_table(META)?;
            let stored = meta
                .get("format")?
                .map(|v| decode::<u64>(v.value()))
                .transpose()?;
            let format = match stored {
                Some(f) => f,
                None => {
                    meta.insert("format", encode(&FORMAT_VERSION)?.as_slice())?;
                    FORMAT_VERSION
                }
            };
            if format > FORMAT_VERSION {
                return Err(newer_format(format));
            }
        }
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        Ok(store)
    }

    /// Whether the store has every table and a format this build reads: then opening writes
    /// nothing (a commit at open would double a compacted file, see [`RowStore::trim`]).
    fn ready(&self) -> Result<bool> {
        let txn = self.db.begin_read()?;
        let names: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
        let tables = [
            IDS.name(),
            COLS.name(),
            PAYLOAD.name(),
            VECTORS.name(),
            META.name(),
        ];
        if !tables.iter().all(|t| names.iter().any(|n| n == t)) {
            return Ok(false);
        }
        let format: Option<u64> = txn
            .open_table(META)?
            .get("format")?
            .map(|v| decode(v.value()))
            .transpose()?;
        match format {
            Some(f) if f > FORMAT_VERSION => Err(newer_format(f)),
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    /// A consistent read snapshot.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot {
            txn: self.db.begin_read()?,
        })
    }

    /// Starts the (single) write transaction; it becomes durable on [`Batch::commit`].
    pub fn begin(&self) -> Result<Batch> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        Ok(Batch { txn })
    }

    /// Reclaims free pages. Needs `&mut`: no transaction may be open.
    pub fn compact(&mut self) -> Result<()> {
        self.db.compact()?;
        if let Some((path, size)) = &mut self.file {
            *size = FileSize::of(path)?;
        }
        Ok(())
    }

    /// Gives back the space the file grew by without using it; returns whether it compacted.
    /// redb grows a full file by doubling it (up to a 4 GiB region), and a compacted file is
    /// full: the first commit after a compaction doubles the file, and its pages land at the
    /// end of the new space, so no later commit can shrink it back. When the file grew since
    /// open or the last compaction (by a quarter and [`TRIM_MIN_GROWTH`] at least) while the
    /// filesystem's bytes for it grew by less than an eighth of that, compacting moves those few
    /// pages down and truncates (the work is about the pages written since, so it is cheap).
    /// Where files have no holes the allocated bytes grow with the length and this never fires.
    /// Needs `&mut`, as [`RowStore::compact`].
    pub fn trim(&mut self) -> Result<bool> {
        let Some((path, then)) = &self.file else {
            return Ok(false);
        };
        let now = FileSize::of(path)?;
        let grown = now.len.saturating_sub(then.len);
        let used = now.allocated.saturating_sub(then.allocated);
        if grown < TRIM_MIN_GROWTH.max(then.len / 4) || used.saturating_mul(8) > grown {
            return Ok(false);
        }
        log::info!(
            "row store: giving back {} MiB of unused file growth",
            grown >> 20
        );
        self.compact()?;
        Ok(true)
    }

    /// Copies every table, as of one snapshot, into a new row store at `dest`.
    pub fn backup_to(&self, dest: &Path) -> Result<()> {
        let snap = self.snapshot()?;
        let out = Database::create(dest)?;
        let mut txn = out.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        copy_table(&snap.txn, &txn, IDS)?;
        copy_table(&snap.txn, &txn, META)?;
        for t in [COLS, PAYLOAD, VECTORS] {
            copy_table(&snap.txn, &txn, t)?;
        }
        for gen in snap.log_gens()? {
            let name = log_table(gen);
            copy_table(&snap.txn, &txn, TableDefinition::<u64, &[u8]>::new(&name))?;
        }
        txn.commit()?;
        Ok(())
    }
}

fn newer_format(format: u64) -> Error {
    Error::Corruption(format!(
        "store format {format} is newer than this memini understands ({FORMAT_VERSION}): upgrade memini"
    ))
}

fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    src: &ReadTransaction,
    dst: &redb::WriteTransaction,
    def: TableDefinition<K, V>,
) -> Result<()> {
    let from = src.open_table(def)?;
    let mut to = dst.open_table(def)?;
    for entry in from.iter()? {
        let (k, v) = entry?;
        to.insert(k.value(), v.value())?;
    }
    Ok(())
}

impl Snapshot {
    /// A meta value.
    pub fn meta<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Result<Option<T>> {
        let t = self.txn.open_table(META)?;
        t.get(key)?.map(|v| decode(v.value())).transpose()
    }

    /// Every row's column record, in rid order.
    pub fn cols(&self) -> Result<Vec<(u64, Col)>> {
        let t = self.txn.open_table(COLS)?;
        let mut out = Vec::with_capacity(usize::try_from(t.len()?).unwrap_or(0));
        for entry in t.iter()? {
            let (k, v) = entry?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    /// The rid of a memory id.
    pub fn rid(&self, id: &str) -> Result<Option<u64>> {
        Ok(self.txn.open_table(IDS)?.get(id)?.map(|v| v.value()))
    }

    /// The column record of a row.
    pub fn col(&self, rid: u64) -> Result<Option<Col>> {
        let t = self.txn.open_table(COLS)?;
        t.get(rid)?.map(|v| decode(v.value())).transpose()
    }

    /// Payloads of rows, in the order asked; a missing row is a corruption.
    pub fn payloads(&self, rids: &[u64]) -> Result<Vec<Payload>> {
        let t = self.txn.open_table(PAYLOAD)?;
        rids.iter()
            .map(|rid| match t.get(*rid)? {
                Some(v) => decode(v.value()),
                None => Err(Error::Corruption(format!("row {rid} has no payload"))),
            })
            .collect()
    }

    /// The stored vector of a row.
    pub fn vector(&self, rid: u64) -> Result<Option<Vec<f32>>> {
        let t = self.txn.open_table(VECTORS)?;
        Ok(t.get(rid)?.map(|v| bytes_vector(v.value())))
    }

    /// The stored vectors of several rows (one table lookup each), in the order asked.
    pub fn vectors(&self, rids: &[u64]) -> Result<Vec<Option<Vec<f32>>>> {
        let t = self.txn.open_table(VECTORS)?;
        rids.iter()
            .map(|rid| Ok(t.get(*rid)?.map(|v| bytes_vector(v.value()))))
            .collect()
    }

    /// The stored vectors of several rows as stored (little-endian f32), appended to `out`
    /// one after another in the order asked; returns the length of each (None where absent).
    pub fn vector_bytes(&self, rids: &[u64], out: &mut Vec<u8>) -> Result<Vec<Option<usize>>> {
        let t = self.txn.open_table(VECTORS)?;
        rids.iter()
            .map(|rid| {
                Ok(t.get(*rid)?.map(|v| {
                    out.extend_from_slice(v.value());
                    v.value().len()
                }))
            })
            .collect()
    }

    /// Changelog entries with sequence > `after`, in order.
    pub fn changes_after(&self, after: u64) -> Result<Vec<(u64, Change)>> {
        let mut out = Vec::new();
        for gen in self.log_gens()? {
            let name = log_table(gen);
            let t = self
                .txn
                .open_table(TableDefinition::<u64, &[u8]>::new(&name))?;
            for entry in t.range(after.saturating_add(1)..)? {
                let (k, v) = entry?;
                out.push((k.value(), decode(v.value())?));
            }
        }
        Ok(out)
    }

    /// The changelog generations present, ascending.
    pub fn log_gens(&self) -> Result<Vec<u64>> {
        Ok(log_gens(
            self.txn.list_tables()?.map(|t| t.name().to_owned()),
        ))
    }
}

/// The open write transaction of one commit group.
pub struct Batch {
    txn: redb::WriteTransaction,
}

impl Batch {
    /// Sets a meta value.
    pub fn set_meta<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.txn
            .open_table(META)?
            .insert(key, encode(value)?.as_slice())?;
        Ok(())
    }

    /// The rid of a memory id, pending writes included.
    pub fn rid(&self, id: &str) -> Result<Option<u64>> {
        Ok(self.txn.open_table(IDS)?.get(id)?.map(|v| v.value()))
    }

    /// The column record of a row, pending writes included.
    pub fn col(&self, rid: u64) -> Result<Option<Col>> {
        let t = self.txn.open_table(COLS)?;
        let v = t.get(rid)?.map(|v| decode(v.value())).transpose();
        v
    }

    /// The payload of a row, pending writes included.
    pub fn payload(&self, rid: u64) -> Result<Payload> {
        let t = self.txn.open_table(PAYLOAD)?;
        let v = match t.get(rid)? {
            Some(v) => decode(v.value()),
            None => Err(Error::Corruption(format!("row {rid} has no payload"))),
        };
        v
    }

    /// The vector of a row, pending writes included.
    pub fn vector(&self, rid: u64) -> Result<Option<Vec<f32>>> {
        let t = self.txn.open_table(VECTORS)?;
        let v = t.get(rid)?.map(|v| bytes_vector(v.value()));
        Ok(v)
    }

    /// Writes a row's column record (and, when given, its payload).
    pub fn put(&self, rid: u64, col: &Col, payload: Option<&Payload>) -> Result<()> {
        self.txn.open_table(IDS)?.insert(col.id.as_str(), rid)?;
        self.txn
            .open_table(COLS)?
            .insert(rid, encode(col)?.as_slice())?;
        if let Some(p) = payload {
            self.txn
                .open_table(PAYLOAD)?
                .insert(rid, encode(p)?.as_slice())?;
        }
        Ok(())
    }

    /// Replaces (Some) or removes (None) a row's vector.
    pub fn put_vector(&self, rid: u64, v: Option<&[f32]>) -> Result<()> {
        let mut t = self.txn.open_table(VECTORS)?;
        match v {
            Some(v) => {
                t.insert(rid, vector_bytes(v).as_slice())?;
            }
            None => {
                t.remove(rid)?;
            }
        }
        Ok(())
    }

    /// Removes a row entirely.
    pub fn remove(&self, rid: u64, id: &str) -> Result<()> {
        self.txn.open_table(IDS)?.remove(id)?;
        self.txn.open_table(COLS)?.remove(rid)?;
        self.txn.open_table(PAYLOAD)?.remove(rid)?;
        self.txn.open_table(VECTORS)?.remove(rid)?;
        Ok(())
    }

    /// Appends a changelog entry.
    pub fn log(&self, gen: u64, seq: u64, change: Change) -> Result<()> {
        let name = log_table(gen);
        self.txn
            .open_table(TableDefinition::<u64, &[u8]>::new(&name))?
            .insert(seq, encode(&change)?.as_slice())?;
        Ok(())
    }

    /// Drops the changelog generations older than `gen` (every derived index has them).
    pub fn drop_logs_before(&self, gen: u64) -> Result<()> {
        let gens = log_gens(self.txn.list_tables()?.map(|t| t.name().to_owned()));
        for old in gens.into_iter().filter(|g| *g < gen) {
            let name = log_table(old);
            self.txn
                .delete_table(TableDefinition::<u64, &[u8]>::new(&name))?;
        }
        Ok(())
    }

    /// Makes the transaction durable (fsync) or fails as a whole.
    pub fn commit(self) -> Result<()> {
        self.txn.commit()?;
        Ok(())
    }
}
