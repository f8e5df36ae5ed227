//! The vector index on disk: one file per graph partition (usearch's graph without the
//! vectors the rows hold, see `layout`), written in synced steps to a temp file, checksummed
//! and renamed, and a manifest naming the changelog sequence they reflect. Flat partitions are
//! not written: they reload from the rows.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::graph::{Graph, Permit, Slots};
use super::layout;
use super::part::{GraphPart, Loading, Partition};
use super::{RowVectors, VectorIndex, GRAVE};
use crate::error::{Error, Result};

/// The checkpoint format written: 2, graphs without their live vectors (`.graph` files, see
/// `layout`). Format 1 (a manifest without `format`) holds usearch's own files (`.usearch`,
/// vectors included); it is still read.
const FORMAT: u32 = 2;

/// What a checkpoint wrote, beside the graph files.
#[derive(Serialize, Deserialize)]
struct Manifest {
    #[serde(default = "format_1")]
    format: u32,
    seq: u64,
    dims: usize,
    graphs: Vec<GraphFile>,
}

fn format_1() -> u32 {
    1
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

/// Endings of the files a checkpoint writes (and of format 1's), temp files included.
const GRAPH_FILES: [&str; 6] = [
    ".graph",
    ".graph.saved",
    ".graph.tmp",
    ".usearch",
    ".usearch.saved",
    ".usearch.tmp",
];

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

/// A new file written in [`SYNC_STEP`] steps, each synced before the next, with the CRC-32 of
/// its bytes.
///
/// One fsync of a whole graph file keeps the disk busy long enough that a writer's commit
/// fsync waits behind it (measured: the worst write across a checkpoint was 170x the median
/// with ~150 MB graph files). Written this way, at most one step is ever in flight.
struct Synced {
    file: fs::File,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
}

impl Synced {
    fn create(path: &Path) -> io::Result<Self> {
        Ok(Self {
            file: fs::File::create(path)?,
            buf: Vec::with_capacity(SYNC_STEP),
            crc: crc32fast::Hasher::new(),
        })
    }

    fn step(&mut self) -> io::Result<()> {
        self.crc.update(&self.buf);
        self.file.write_all(&self.buf)?;
        self.file.sync_data()?;
        self.buf.clear();
        Ok(())
    }

    /// Writes and syncs the rest; returns the CRC-32 of the file.
    fn finish(mut self) -> io::Result<u32> {
        self.step()?;
        self.file.sync_all()?;
        Ok(self.crc.finalize())
    }
}

impl Write for Synced {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(SYNC_STEP - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == SYNC_STEP {
            self.step()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `g` into the new file `file` in `dir`; returns its CRC-32.
///
/// usearch saves the whole index (vectors included) with one stream of buffered writes, into
/// a file that is removed as soon as its graph is copied out, before the kernel writes it back
/// (its dirty pages are dropped with it), so the disk sees only the stripped graph.
fn write_graph(g: &Graph, slots: &Slots, dir: &Path, file: &str) -> Result<u32> {
    let saved = dir.join(format!("{file}.saved"));
    let tmp = dir.join(format!("{file}.tmp"));
    let written = (|| -> Result<u32> {
        let saved_str = saved
            .to_str()
            .ok_or_else(|| Error::invalid("store path is not UTF-8"))?;
        g.save(saved_str, &slots.acquire())?;
        let mut out = Synced::create(&tmp)?;
        layout::strip(&saved, &mut out)?;
        let crc32 = out.finish()?;
        fs::remove_file(&saved)?;
        fs::rename(&tmp, dir.join(file))?;
        Ok(crc32)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&saved);
        let _ = fs::remove_file(&tmp);
    }
    written
}

impl Snapshot {
    /// Writes the graphs into `dir` with a manifest naming `seq`. Needs no lock of the index:
    /// the graphs are frozen (or the index is not changing) while this runs.
    pub fn write(&self, dir: &Path, seq: u64) -> Result<()> {
        fs::create_dir_all(dir)?;
        let mut graphs = Vec::new();
        for (i, (ns, g)) in self.graphs.iter().enumerate() {
            let file = format!("g{seq}-{i}.graph");
            let crc32 = write_graph(g, &self.slots, dir, &file)?;
            graphs.push(GraphFile {
                namespace: ns.clone(),
                file,
                crc32,
                removed: g.removed(),
            });
        }
        let manifest = Manifest {
            format: FORMAT,
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
            let graph_file = GRAPH_FILES.iter().any(|end| name.ends_with(end));
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

    /// Loads the graphs of the last checkpoint in `dir`, with their vectors from `rows`;
    /// returns the sequence they reflect, or None when there is no usable checkpoint (missing,
    /// other dims, an unknown format, or a corrupt file).
    pub fn load(&mut self, dir: &Path, rows: RowVectors<'_>) -> Option<u64> {
        let bytes = fs::read(dir.join("manifest.json")).ok()?;
        let manifest: Manifest = match serde_json::from_slice(&bytes) {
            Ok(m) => m,
            Err(e) => {
                log::warn!("vector index manifest is damaged ({e}); rebuilding from rows");
                return None;
            }
        };
        if manifest.format > FORMAT {
            log::warn!(
                "vector index checkpoint has format {} (a newer memini's); rebuilding from rows",
                manifest.format
            );
            return None;
        }
        if manifest.dims != self.dims {
            return None;
        }
        for gf in &manifest.graphs {
            match self.load_graph(&dir.join(&gf.file), gf, manifest.format, rows) {
                Ok(part) => self
                    .parts
                    .insert(gf.namespace.clone(), Partition::Graph(part)),
                Err(e) => {
                    log::warn!("vector graph {}: {e}; rebuilding from rows", gf.file);
                    self.parts.clear();
                    return None;
                }
            };
        }
        Some(manifest.seq)
    }

    /// Loads a graph file and indexes its live vectors as it goes (exact matches, compact
    /// copy: see `part::Loading`), which a checkpoint does not hold.
    fn load_graph(
        &self,
        path: &Path,
        gf: &GraphFile,
        format: u32,
        rows: RowVectors<'_>,
    ) -> Result<GraphPart> {
        let corrupt = || Error::Corruption("the file is missing or corrupt".into());
        let mut g = self.new_graph(0)?;
        let permit = self.slots.acquire();
        let loading = if format == 1 {
            if !file_crc32(path).is_ok_and(|crc| crc == gf.crc32) {
                return Err(corrupt());
            }
            let keys = layout::saved_keys(path).map_err(|_| corrupt())?;
            let path_str = path
                .to_str()
                .ok_or_else(|| Error::invalid("path is not UTF-8"))?;
            g.load(path_str, gf.removed, &permit)?;
            // usearch's own file: the vectors come back from the loaded graph
            let mut loading = Loading::new(self.dims, g.metric, &keys);
            let mut v = vec![0f32; self.dims];
            for (slot, key) in keys.iter().enumerate() {
                if *key < GRAVE && g.get(*key, &mut v, &permit) {
                    loading.add(slot, *key, &v);
                }
            }
            loading
        } else {
            let stripped = fs::read(path).map_err(|_| corrupt())?;
            if crc32fast::hash(&stripped) != gf.crc32 {
                return Err(corrupt());
            }
            let stripped = layout::Stripped::parse(&stripped, self.dims)?;
            let mut loading = Loading::new(self.dims, g.metric, stripped.keys());
            let mut found = |slot, key, v: &[u8]| loading.add_stored(slot, key, v);
            load_stripped(&mut g, &stripped, gf.removed, rows, &mut found, &permit)?;
            loading
        };
        drop(permit);
        Ok(loading.finish(g))
    }
}

/// Bytes a stripped graph's stream is written in, and the size asked of its pipe (Linux
/// lets any process have pipes of 1 MB).
#[cfg(unix)]
const PIPE_BYTES: usize = 1 << 20;

/// Loads a stripped graph into `g`, with its vectors from `rows`, each handed to `found` too
/// (see `layout::Stripped::splice`).
///
/// The index is streamed to usearch's file loader through a pipe, on another thread: never
/// whole in memory beside the loaded copy (a buffer would double the memory an open peaks at:
/// +1.5 GB at 1M 384-d rows), and the rows are read while usearch parses.
#[cfg(unix)]
fn load_stripped(
    g: &mut Graph,
    stripped: &layout::Stripped<'_>,
    removed: usize,
    rows: RowVectors<'_>,
    found: &mut (dyn FnMut(usize, u64, &[u8]) + Send),
    permit: &Permit<'_>,
) -> Result<()> {
    use std::os::fd::AsRawFd;

    let (reader, writer) = io::pipe()?;
    // room for a whole buffered write (the default 64 KB has the two threads take turns
    // sixteen times a megabyte); best effort, the pipe works at any size
    #[cfg(target_os = "linux")]
    let _ = rustix::pipe::fcntl_setpipe_size(&writer, PIPE_BYTES);
    let path = format!("/dev/fd/{}", reader.as_raw_fd());
    std::thread::scope(|s| {
        let reading = s.spawn(move || {
            let loaded = g.load(&path, removed, permit);
            // the last read end: a splice still writing fails rather than waits
            drop(reader);
            loaded
        });
        let mut out = io::BufWriter::with_capacity(PIPE_BYTES, writer);
        let spliced = stripped
            .splice(rows, &mut out, found)
            .and_then(|()| out.flush().map_err(Error::from));
        // the write end closed: usearch reads to the end, or fails on a short stream
        drop(out);
        let loaded = reading
            .join()
            .map_err(|_| Error::storage("vector graph", "the loading thread panicked"))?;
        // a failed splice explains a failed load (a short stream), not the reverse
        spliced.and(loaded)
    })
}

/// Loads a stripped graph into `g` through a buffer (where a pipe has no path to open).
#[cfg(not(unix))]
fn load_stripped(
    g: &mut Graph,
    stripped: &layout::Stripped<'_>,
    removed: usize,
    rows: RowVectors<'_>,
    found: &mut (dyn FnMut(usize, u64, &[u8]) + Send),
    permit: &Permit<'_>,
) -> Result<()> {
    let mut full = Vec::new();
    stripped.splice(rows, &mut full, found)?;
    g.load_buffer(&full, removed, permit)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::unwrap_used,
        reason = "tests: small integers made into floats"
    )]

    use super::*;
    use crate::types::Metric;
    use crate::vector::graph::Graph;
    use crate::vector::{Plan, Tuning, GRAVE};
    use std::sync::Arc;
    use usearch::ScalarKind;

    const DIMS: usize = 6;

    fn v(i: u64) -> Vec<f32> {
        (0..DIMS)
            .map(|d| ((i * 5 + d as u64) as f32 * 0.29).cos())
            .collect()
    }

    #[allow(clippy::unnecessary_wraps, reason = "the shape of `RowVectors`")]
    fn rows(keys: &[u64], out: &mut Vec<u8>) -> Result<Vec<Option<usize>>> {
        for k in keys {
            out.extend(v(*k).iter().flat_map(|x| x.to_le_bytes()));
        }
        Ok(vec![Some(4 * DIMS); keys.len()])
    }

    fn empty() -> VectorIndex {
        let tuning = Tuning {
            graph_min: 64,
            ..Tuning::default()
        };
        VectorIndex::new(DIMS, Metric::Cos, tuning)
    }

    /// 400 vectors in namespace "n", every 9th removed (graves).
    fn index() -> VectorIndex {
        let mut vi = empty();
        vi.add("n", (0..400).map(|i| (i, v(i))).collect()).unwrap();
        for i in (0..400).step_by(9) {
            vi.remove("n", i).unwrap();
        }
        vi
    }

    fn keys(vi: &VectorIndex) -> Vec<u64> {
        (0..400).filter(|k| vi.contains("n", *k)).collect()
    }

    fn hits(vi: &VectorIndex, q: u64) -> Vec<(u64, f64)> {
        let keys = keys(vi);
        let all_keys = move || keys.clone();
        let plan = Plan::All {
            all_keys: &all_keys,
        };
        vi.search("n", &v(q), 10, &plan).unwrap()
    }

    /// Loads the checkpoint in `dir` as an open does.
    fn load(dir: &Path, rows: RowVectors<'_>) -> (VectorIndex, Option<u64>) {
        let mut vi = empty();
        let seq = vi.load(dir, rows);
        (vi, seq)
    }

    fn same_graph(want: &VectorIndex, got: &VectorIndex) {
        assert_eq!(want.len("n"), got.len("n"));
        let permit = got.slots.acquire();
        match (want.parts.get("n"), got.parts.get("n")) {
            (Some(Partition::Graph(wp)), Some(Partition::Graph(gp))) => {
                // the derived parts too, built as the vectors streamed in
                assert!(wp.exact.same_as(&gp.exact));
                assert_eq!(wp.compact.rows(), gp.compact.rows());
                assert_eq!(wp.compact.rows().len(), wp.live());
                assert_eq!(wp.graph.size(), gp.graph.size());
                assert_eq!(wp.graph.removed(), gp.graph.removed());
                for k in 0..400 {
                    for key in [k, GRAVE | k] {
                        let (mut wv, mut gv) = (vec![0f32; DIMS], vec![0f32; DIMS]);
                        let found = wp.graph.get(key, &mut wv, &permit);
                        assert_eq!(found, gp.graph.get(key, &mut gv, &permit));
                        assert_eq!(wv, gv);
                    }
                }
            }
            _ => panic!("not graphs"),
        }
        drop(permit);
        for q in [3, 50, 399] {
            assert_eq!(hits(want, q), hits(got, q));
        }
    }

    #[test]
    fn a_checkpoint_holds_the_graph_without_the_rows_vectors_and_loads_with_them() {
        let vi = index();
        let dir = tempfile::tempdir().unwrap();
        vi.checkpoint(dir.path(), 7).unwrap();
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let graph = dir.path().join("g7-0.graph");
        assert!(fs::read(&graph).unwrap().starts_with(b"memgrph2"));
        let (loaded, seq) = load(dir.path(), &rows);
        assert_eq!(seq, Some(7));
        same_graph(&vi, &loaded);
        // a second checkpoint replaces the first one's files
        loaded.checkpoint(dir.path(), 9).unwrap();
        assert!(!graph.exists() && dir.path().join("g9-0.graph").exists());
    }

    #[test]
    fn a_damaged_or_unknown_checkpoint_is_not_loaded() {
        let vi = index();
        let dir = tempfile::tempdir().unwrap();
        vi.checkpoint(dir.path(), 7).unwrap();
        let graph = dir.path().join("g7-0.graph");
        let bytes = fs::read(&graph).unwrap();
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        fs::write(&graph, &flipped).unwrap();
        assert_eq!(empty().load(dir.path(), &rows), None);
        fs::write(&graph, &bytes).unwrap();
        assert_eq!(empty().load(dir.path(), &rows), Some(7));
        let manifest = dir.path().join("manifest.json");
        let text = fs::read_to_string(&manifest).unwrap();
        fs::write(&manifest, text.replace("\"format\":2", "\"format\":3")).unwrap();
        assert_eq!(empty().load(dir.path(), &rows), None);
    }

    #[test]
    fn a_format_1_checkpoint_usearchs_own_files_is_still_read() {
        // format 1 was written by versions whose graphs held f32 vectors
        let mut vi = index();
        let f32_graph = Graph::create(DIMS, Metric::Cos, ScalarKind::F32, 400, &vi.slots.acquire());
        let f32_graph = f32_graph.unwrap();
        let items: Vec<(u64, Vec<f32>)> = (0..400).map(|i| (i, v(i))).collect();
        f32_graph.add_all(&items, &vi.slots).unwrap();
        for i in (0..400).step_by(9) {
            f32_graph.bury(i, &vi.slots.acquire()).unwrap();
        }
        let Some(Partition::Graph(g)) = vi.parts.get_mut("n") else {
            panic!("not a graph")
        };
        g.graph = Arc::new(f32_graph);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g5-0.usearch");
        g.graph
            .save(path.to_str().unwrap(), &vi.slots.acquire())
            .unwrap();
        let manifest = serde_json::json!({
            "seq": 5,
            "dims": DIMS,
            "graphs": [{
                "namespace": "n",
                "file": "g5-0.usearch",
                "crc32": file_crc32(&path).unwrap(),
                "removed": g.graph.removed(),
            }],
        });
        fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
        let no_rows = |_: &[u64], _: &mut Vec<u8>| -> Result<Vec<Option<usize>>> {
            panic!("format 1 asks no rows")
        };
        let (loaded, seq) = load(dir.path(), &no_rows);
        assert_eq!(seq, Some(5));
        same_graph(&vi, &loaded);
        // the next checkpoint writes format 2 (with the graph's f32 vectors) and removes the
        // format-1 file
        loaded.checkpoint(dir.path(), 6).unwrap();
        assert!(!path.exists());
        let (again, seq) = load(dir.path(), &rows);
        assert_eq!(seq, Some(6));
        same_graph(&vi, &again);
    }
}
