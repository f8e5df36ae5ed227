//! The vector index on disk: one usearch file per graph partition, written to a temp file,
//! checksummed, fsync'd and renamed, and a manifest naming the changelog sequence they
//! reflect. Flat partitions are not written: they reload from the rows.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::graph::{Graph, Slots};
use super::part::{GraphPart, Partition};
use super::VectorIndex;
use crate::error::{Error, Result};

/// What a checkpoint wrote, beside the graph files.
#[derive(Serialize, Deserialize)]
struct Manifest {
    seq: u64,
    dims: usize,
    graphs: Vec<GraphFile>,
}

#[derive(Serialize, Deserialize)]
struct GraphFile {
    namespace: String,
    file: String,
    crc32: u32,
    /// Graves in the graph. Required: a checkpoint from before graves existed may hold
    /// unreachable nodes, so it is rebuilt rather than loaded.
    removed: usize,
}

/// Graphs to write: each namespace's graph, as of the sequence the checkpoint records, with
/// the index's thread slots (it is written outside the index's lock).
pub struct Snapshot {
    dims: usize,
    graphs: Vec<(String, Arc<Graph>)>,
    slots: Arc<Slots>,
}

/// CRC-32 of a file, read in 1 MiB chunks (a graph file can be gigabytes).
fn file_crc32(path: &Path) -> std::io::Result<u32> {
    let mut f = fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf)? {
            0 => return Ok(hasher.finalize()),
            n => hasher.update(&buf[..n]),
        }
    }
}

/// Bytes a checkpoint writes to disk between two syncs of a graph file. A small 4 KiB
/// write + fdatasync beside a 150 MB file written in steps (three interleaved runs on this
/// machine's shared disk): p99 16-58 ms with 4 MiB steps, 12-22 ms with 1 MiB, 8-14 ms with
/// 256 KiB, 4-8 ms with nothing else writing; the big file took 0.8-2.2 s either way.
const SYNC_STEP: usize = 256 << 10;

/// Copies `src` into a new file `dst`, syncing every [`SYNC_STEP`] bytes, then removes `src`;
/// returns the CRC-32 of the bytes written.
///
/// usearch saves a graph with one stream of buffered writes, so a saved file is all dirty
/// pages at once, and one fsync of it (~150 MB at 100k 384-d rows) keeps the disk busy long
/// enough that a writer's commit fsync waits behind it (measured: the worst write across a
/// checkpoint was 170x the median). Written this way, at most one step of the file is ever
/// in flight. The unsynced source is removed before the kernel writes it back (its dirty
/// pages are dropped with it), so the disk sees the graph once.
fn copy_synced(src: &Path, dst: &Path) -> std::io::Result<u32> {
    let mut from = fs::File::open(src)?;
    let mut to = fs::File::create(dst)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; SYNC_STEP];
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            match from.read(&mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        if filled == 0 {
            break;
        }
        hasher.update(&buf[..filled]);
        to.write_all(&buf[..filled])?;
        to.sync_data()?;
    }
    to.sync_all()?;
    drop(from);
    fs::remove_file(src)?;
    Ok(hasher.finalize())
}

impl Snapshot {
    /// Writes the graphs into `dir` with a manifest naming `seq`. Needs no lock of the index:
    /// the graphs are frozen (or the index is not changing) while this runs.
    pub fn write(&self, dir: &Path, seq: u64) -> Result<()> {
        fs::create_dir_all(dir)?;
        let mut graphs = Vec::new();
        for (i, (ns, g)) in self.graphs.iter().enumerate() {
            let file = format!("g{seq}-{i}.usearch");
            let saved = dir.join(format!("{file}.saved"));
            let saved_str = saved
                .to_str()
                .ok_or_else(|| Error::invalid("store path is not UTF-8"))?;
            g.save(saved_str, &self.slots.acquire())?;
            let tmp = dir.join(format!("{file}.tmp"));
            let crc32 = copy_synced(&saved, &tmp)?;
            fs::rename(&tmp, dir.join(&file))?;
            graphs.push(GraphFile {
                namespace: ns.clone(),
                file,
                crc32,
                removed: g.removed(),
            });
        }
        let manifest = Manifest {
            seq,
            dims: self.dims,
            graphs,
        };
        let tmp = dir.join("manifest.json.tmp");
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(&manifest).map_err(|e| Error::storage("manifest", e))?)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join("manifest.json"))?;
        // remove graph files no longer named by the manifest, and what an interrupted
        // checkpoint left (`.saved`, `.tmp`)
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let graph_file = [".usearch", ".usearch.saved", ".usearch.tmp"]
                .iter()
                .any(|end| name.ends_with(end));
            if graph_file && !manifest.graphs.iter().any(|g| g.file == name) {
                let _ = fs::remove_file(dir.join(name));
            }
        }
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl VectorIndex {
    /// The graphs as they are now, to write with [`Snapshot::write`]. Their overlays must be
    /// empty (a freeze, or nothing changing), or the files would miss those changes.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut graphs = Vec::new();
        for (ns, p) in &self.parts {
            if let Partition::Graph(g) = p {
                if !g.overlay.graves.is_empty() || !g.overlay.adds.is_empty() {
                    return Err(Error::storage(
                        "vector checkpoint",
                        "a graph still has changes to take in",
                    ));
                }
                graphs.push((ns.clone(), Arc::clone(&g.graph)));
            }
        }
        Ok(Snapshot {
            dims: self.dims,
            graphs,
            slots: Arc::clone(&self.slots),
        })
    }

    /// Writes every graph now (nothing may change the index meanwhile).
    pub fn checkpoint(&self, dir: &Path, seq: u64) -> Result<()> {
        self.snapshot()?.write(dir, seq)
    }

    /// Loads the graphs of the last checkpoint in `dir`; returns the sequence they reflect, or
    /// None when there is no usable checkpoint (missing, other dims, or a corrupt file).
    pub fn load(&mut self, dir: &Path) -> Option<u64> {
        let bytes = fs::read(dir.join("manifest.json")).ok()?;
        let manifest: Manifest = match serde_json::from_slice(&bytes) {
            Ok(m) => m,
            Err(e) => {
                log::warn!("vector index manifest is damaged ({e}); rebuilding from rows");
                return None;
            }
        };
        if manifest.dims != self.dims {
            return None;
        }
        for gf in &manifest.graphs {
            let path = dir.join(&gf.file);
            let ok = file_crc32(&path).is_ok_and(|crc| crc == gf.crc32);
            if !ok {
                log::warn!(
                    "vector graph {} is missing or corrupt; rebuilding from rows",
                    gf.file
                );
                self.parts.clear();
                return None;
            }
            let loaded = self.new_graph(0).and_then(|mut g| {
                let path = path
                    .to_str()
                    .ok_or_else(|| Error::invalid("path is not UTF-8"))?;
                g.load(path, gf.removed, &self.slots.acquire())?;
                Ok(g)
            });
            match loaded {
                Ok(g) => self.parts.insert(
                    gf.namespace.clone(),
                    Partition::Graph(GraphPart::new(g, self.dims)),
                ),
                Err(e) => {
                    log::warn!("vector graph {}: {e}; rebuilding from rows", gf.file);
                    self.parts.clear();
                    return None;
                }
            };
        }
        Some(manifest.seq)
    }
}
