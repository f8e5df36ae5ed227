//! A graph checkpointed without its vectors: the rows already hold every live vector, so a
//! checkpoint keeps usearch's graph and only the vectors of graves ([`strip`]), and a load
//! puts the rows' vectors back where usearch expects them ([`splice`]). This saves ~90% of
//! the graph file (4 x dims bytes a vector against ~150 bytes of links at M = 16).
//!
//! usearch (2.x, `index_dense_gt::save_to_stream` with its default settings) saves an index as
//! - `u32` slots, `u32` bytes per vector, then every slot's vector, in slot order;
//! - a 64-byte head: `usearch`, the version (3 x `u16`), the metric, scalar, key and slot
//!   kinds (`u8` each), then counts and dimensions;
//! - the graph: `u64` size, connectivity, base connectivity, max level and entry slot; each
//!   node's `i16` level; then each node: `u64` key, `i16` level, and for level 0 a `u32`
//!   neighbour count and base-connectivity `u32` slots, for each level above a count and
//!   connectivity slots.
//!
//! A stripped graph is [`MAGIC`], `u64` slots, `u64` bytes per vector, `u64` length of the
//! head and graph, the head and graph as usearch wrote them, then for each grave (ascending
//! slot) its `u64` slot and its vector. All integers little-endian, as usearch writes them on
//! the platforms it supports.
//!
//! A graph's vectors are bfloat16 (see `graph::SCALAR`), or f32 in a checkpoint written
//! before it; the rows hold f32, which a load rounds to the graph's scalar as it splices them.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use rayon::prelude::*;

use super::GRAVE;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"memgrph2";
/// Bytes before the head in a stripped graph.
const PREFIX: usize = MAGIC.len() + 3 * 8;
const HEAD: usize = 64;
/// The graph's own header: five `u64`.
const GRAPH_HEADER: usize = 40;
/// usearch's scalar kinds this layout reads: bf16 or f32 vectors, u64 keys, u32 slots.
const KIND_BF16: u8 = 4;
const KIND_F32: u8 = 11;
const KIND_U64: u8 = 14;
const KIND_U32: u8 = 15;
/// Slots whose vectors one task of the worker pool fetches from the rows.
const CHUNK: usize = 1024;
/// Tasks fetched at once, at most (the vectors of two waves are in memory at a time).
const WAVE: usize = 8;

fn invalid(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected usearch graph layout: {why}"),
    )
}

fn corrupt(why: impl std::fmt::Display) -> Error {
    Error::Corruption(format!("stripped vector graph: {why}"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn usize_of(x: u64) -> io::Result<usize> {
    usize::try_from(x).map_err(|_| invalid("a size out of range"))
}

/// The nodes of a graph section: each slot's key, and where its level-0 neighbours start.
struct Nodes {
    /// Neighbour slots a node has room for at level 0.
    conn_base: usize,
    keys: Vec<u64>,
    /// Offset in the graph section of each node's level-0 neighbour count.
    base: Vec<usize>,
}

/// Reads `n` bytes of `from` into `buf`, copying them to `to`.
fn pass(from: &mut impl Read, to: &mut impl Write, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    buf.resize(n, 0);
    from.read_exact(buf)?;
    to.write_all(buf)
}

/// Walks a head and graph section from `from` (copying it to `to`), checking that usearch
/// wrote it in the layout this module knows.
fn walk(from: &mut impl Read, to: &mut impl Write) -> io::Result<Nodes> {
    let mut buf = Vec::new();
    pass(from, to, &mut buf, HEAD)?;
    if &buf[..7] != b"usearch" || u16::from_le_bytes([buf[7], buf[8]]) != 2 {
        return Err(invalid("not a usearch 2 index"));
    }
    if !matches!(buf[14], KIND_BF16 | KIND_F32) || (buf[15], buf[16]) != (KIND_U64, KIND_U32) {
        return Err(invalid("not bf16 or f32 vectors, u64 keys and u32 slots"));
    }
    pass(from, to, &mut buf, GRAPH_HEADER)?;
    let size = usize_of(u64_at(&buf, 0))?;
    let conn = usize_of(u64_at(&buf, 8))?;
    let conn_base = usize_of(u64_at(&buf, 16))?;
    if conn > 1 << 16 || conn_base > 1 << 16 || size > u32::MAX as usize {
        return Err(invalid("connectivity or size out of range"));
    }
    let neighbours = |c: usize| 4 + 4 * c;
    pass(from, to, &mut buf, 2 * size)?;
    let levels: Vec<usize> = buf
        .chunks_exact(2)
        .map(|l| usize::try_from(i16::from_le_bytes([l[0], l[1]])))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| invalid("a negative level"))?;
    if levels.iter().any(|l| *l > 64) {
        return Err(invalid("a level out of range"));
    }
    let mut nodes = Nodes {
        conn_base,
        keys: Vec::with_capacity(size),
        base: Vec::with_capacity(size),
    };
    let mut at = HEAD + GRAPH_HEADER + 2 * size;
    for level in levels {
        let len = 10 + neighbours(conn_base) + level * neighbours(conn);
        pass(from, to, &mut buf, len)?;
        nodes.keys.push(u64_at(&buf, 0));
        nodes.base.push(at + 10);
        at += len;
    }
    Ok(nodes)
}

/// Walks the graph of the index usearch saved at `saved`, copying the head and graph to `to`
/// after what `prefix` writes given (slots, bytes per vector, length of head and graph);
/// returns the file, the bytes per vector and the nodes.
fn saved_graph(
    saved: &Path,
    prefix: impl FnOnce(&mut dyn Write, [u64; 3]) -> io::Result<()>,
    mut to: &mut dyn Write,
) -> io::Result<(File, u64, Nodes)> {
    let len = std::fs::metadata(saved)?.len();
    let mut from = BufReader::with_capacity(1 << 20, File::open(saved)?);
    let mut dims = [0u8; 8];
    from.read_exact(&mut dims)?;
    let (slots, bytes) = (u64::from(u32_at(&dims, 0)), u64::from(u32_at(&dims, 4)));
    let vectors_end = 8 + slots * bytes;
    let graph_len = len
        .checked_sub(vectors_end)
        .ok_or_else(|| invalid("shorter than its vectors"))?;
    prefix(to, [slots, bytes, graph_len])?;
    from.seek(SeekFrom::Start(vectors_end))?;
    let nodes = walk(&mut (&mut from).take(graph_len), &mut to)?;
    if nodes.keys.len() as u64 != slots || from.stream_position()? != len {
        return Err(invalid("the graph does not match its vectors"));
    }
    Ok((from.into_inner(), bytes, nodes))
}

/// The key of each slot of the index usearch saved at `saved` (a format-1 checkpoint).
pub(super) fn saved_keys(saved: &Path) -> io::Result<Vec<u64>> {
    let (_, _, nodes) = saved_graph(saved, |_, _| Ok(()), &mut io::sink())?;
    Ok(nodes.keys)
}

/// Writes the index usearch saved at `saved` to `to` without the vectors of its live nodes
/// (see the module docs).
pub(super) fn strip(saved: &Path, to: &mut impl Write) -> io::Result<()> {
    let prefix = |to: &mut dyn Write, sizes: [u64; 3]| {
        to.write_all(MAGIC)?;
        sizes
            .iter()
            .try_for_each(|x| to.write_all(&x.to_le_bytes()))
    };
    let (from, bytes, nodes) = saved_graph(saved, prefix, to)?;
    // the graves' vectors, read forward through a small buffer (a seek would drop it)
    let mut from = BufReader::with_capacity(1 << 16, from);
    from.seek(SeekFrom::Start(8))?;
    let (mut at, mut vector) = (8u64, vec![0u8; usize_of(bytes)?]);
    for (slot, key) in nodes.keys.iter().enumerate() {
        if *key >= GRAVE {
            let slot = slot as u64;
            let start = 8 + slot * bytes;
            from.seek_relative(i64::try_from(start - at).map_err(|_| invalid("size"))?)?;
            from.read_exact(&mut vector)?;
            at = start + bytes;
            to.write_all(&slot.to_le_bytes())?;
            to.write_all(&vector)?;
        }
    }
    Ok(())
}

/// A stripped graph's parts.
pub(super) struct Stripped<'a> {
    /// Bytes of a vector in the graph: 2 x dims (bf16) or 4 x dims (f32).
    bytes: usize,
    /// Bytes of a vector in the rows (f32).
    row_bytes: usize,
    graph: &'a [u8],
    /// Per grave, ascending slot: `u64` slot, vector.
    graves: &'a [u8],
    nodes: Nodes,
}

impl<'a> Stripped<'a> {
    pub(super) fn parse(stripped: &'a [u8], dims: usize) -> Result<Self> {
        if stripped.len() < PREFIX || &stripped[..8] != MAGIC {
            return Err(corrupt("not a stripped graph"));
        }
        let size = |at| usize_of(u64_at(stripped, at)).map_err(corrupt);
        let (slots, bytes, graph_len) = (size(8)?, size(16)?, size(24)?);
        let graph = stripped
            .get(PREFIX..PREFIX.saturating_add(graph_len))
            .ok_or_else(|| corrupt("truncated"))?;
        let scalar_bytes = match graph.get(14) {
            Some(&KIND_BF16) => 2,
            _ => 4,
        };
        if bytes != scalar_bytes * dims || u32::try_from(slots).is_err() {
            return Err(corrupt("vectors of other dimensions"));
        }
        let graves = &stripped[PREFIX + graph_len..];
        if !graves.len().is_multiple_of(8 + bytes) {
            return Err(corrupt("a truncated grave"));
        }
        let nodes = walk(&mut &graph[..], &mut io::sink()).map_err(corrupt)?;
        if nodes.keys.len() != slots {
            return Err(corrupt("the graph does not match its slot count"));
        }
        Ok(Self {
            bytes,
            row_bytes: 4 * dims,
            graph,
            graves,
            nodes,
        })
    }

    /// The key of each slot (graves included).
    pub(super) fn keys(&self) -> &[u64] {
        &self.nodes.keys
    }

    /// The saved vector of the grave in `slot`.
    fn grave(&self, slot: usize) -> Option<&'a [u8]> {
        let n = self.graves.len() / (8 + self.bytes);
        let at = |i: usize| &self.graves[i * (8 + self.bytes)..(i + 1) * (8 + self.bytes)];
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = usize::midpoint(lo, hi);
            match u64_at(at(mid), 0).cmp(&(slot as u64)) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(&at(mid)[8..]),
            }
        }
        None
    }

    /// A stand-in for the vector of `slot`, which the rows lack: that of a level-0 neighbour
    /// they (or the graves) hold.
    fn stand_in(&self, slot: usize, rows: super::RowVectors<'_>) -> Result<Option<Vec<u8>>> {
        let at = self.nodes.base[slot];
        let count = u32_at(self.graph, at) as usize;
        for j in 0..count.min(self.nodes.conn_base) {
            let n = u32_at(self.graph, at + 4 + 4 * j) as usize;
            let Some(key) = self.nodes.keys.get(n) else {
                continue;
            };
            if *key >= GRAVE {
                if let Some(v) = self.grave(n) {
                    return Ok(Some(v.to_vec()));
                }
            } else {
                let mut v = Vec::with_capacity(self.row_bytes);
                if rows(&[*key], &mut v)? == [Some(self.row_bytes)] {
                    let mut out = Vec::with_capacity(self.bytes);
                    self.put(&v, &mut out);
                    return Ok(Some(out));
                }
            }
        }
        Ok(None)
    }

    /// Appends a row's vector (f32) to `out` as the graph stores it.
    fn put(&self, row: &[u8], out: &mut Vec<u8>) {
        if self.bytes == self.row_bytes {
            out.extend_from_slice(row);
        } else {
            let v = row
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            super::graph::graph_bytes(v, out);
        }
    }

    /// Writes to `out` the index usearch saved, rebuilt from this stripped graph and `rows`
    /// (the rows' vectors of the keys asked, None for a key no row holds any more); hands
    /// each vector the rows held to `found_here` (slot, key, vector) as it goes.
    ///
    /// The rows are read on the worker pool, a wave of chunks of slots at a time, the next
    /// wave while this thread writes the last one (reading a vector back from the rows costs
    /// a few microseconds, most of it redb's page reads, which run in parallel).
    ///
    /// A key the rows lack belongs to a row deleted or re-embedded after the checkpoint (a
    /// crash came before the next one), which the replay of the changelog buries next: until
    /// then its node routes searches with the vector of a level-0 neighbour (zeros if none
    /// has one).
    pub(super) fn splice(
        &self,
        rows: super::RowVectors<'_>,
        out: &mut (impl Write + Send),
        found_here: &mut (dyn FnMut(usize, u64, &[u8]) + Send),
    ) -> Result<()> {
        for x in [self.nodes.keys.len(), self.bytes] {
            let x = u32::try_from(x).map_err(|_| corrupt("a size out of range"))?;
            out.write_all(&x.to_le_bytes())?;
        }
        let fetch = |chunk: &[u64]| -> Result<Fetched> {
            let live: Vec<u64> = chunk.iter().copied().filter(|k| *k < GRAVE).collect();
            let mut bytes = Vec::with_capacity(live.len() * self.row_bytes);
            let lens = rows(&live, &mut bytes)?;
            if lens.len() != live.len() || lens.iter().flatten().sum::<usize>() != bytes.len() {
                return Err(Error::storage(
                    "vector checkpoint",
                    "the rows answered short",
                ));
            }
            Ok(Fetched { bytes, lens })
        };
        let pool = crate::pool::pool()?;
        let chunks: Vec<&[u64]> = self.nodes.keys.chunks(CHUNK).collect();
        let mut waves = chunks.chunks(pool.current_num_threads().clamp(1, WAVE));
        let fetch_wave = |wave: &[&[u64]]| -> Vec<Result<Fetched>> {
            wave.par_iter().map(|chunk| fetch(chunk)).collect()
        };
        let mut writing = Writing {
            stripped: self,
            rows,
            out,
            found_here,
            graves: self.graves.chunks_exact(8 + self.bytes),
            slot: 0,
            missing: 0,
            buf: Vec::with_capacity(self.bytes),
        };
        let mut fetched = pool.install(|| waves.next().map(fetch_wave).unwrap_or_default());
        loop {
            let next = waves.next();
            let (written, next) = pool.install(|| {
                rayon::join(
                    || fetched.into_iter().try_for_each(|f| writing.chunk(f?)),
                    || next.map(fetch_wave),
                )
            });
            written?;
            match next {
                Some(next) => fetched = next,
                None => break,
            }
        }
        if writing.graves.next().is_some() {
            return Err(corrupt("a grave the graph lacks"));
        }
        if writing.missing > 0 {
            log::info!(
                "vector graph: {} vectors changed since the checkpoint route by a \
                 neighbour's until they are removed",
                writing.missing
            );
        }
        writing.out.write_all(self.graph)?;
        Ok(())
    }
}

/// The rows' vectors of a chunk's live keys (see [`super::RowVectors`]).
struct Fetched {
    bytes: Vec<u8>,
    lens: Vec<Option<usize>>,
}

/// The writing side of [`Stripped::splice`]: the vectors of the slots in order.
struct Writing<'a, 's, W> {
    stripped: &'a Stripped<'s>,
    rows: super::RowVectors<'a>,
    out: &'a mut W,
    found_here: &'a mut (dyn FnMut(usize, u64, &[u8]) + Send),
    /// The graves' saved vectors still to write.
    graves: std::slice::ChunksExact<'s, u8>,
    /// The next slot.
    slot: usize,
    /// Vectors the rows lacked so far.
    missing: usize,
    /// A vector as the graph stores it.
    buf: Vec<u8>,
}

impl<W: Write> Writing<'_, '_, W> {
    /// Writes the vectors of the next chunk of slots, given the rows' vectors of its live keys.
    fn chunk(&mut self, found: Fetched) -> Result<()> {
        let s = self.stripped;
        let (mut lens, mut at) = (found.lens.into_iter(), 0);
        let end = (self.slot + CHUNK).min(s.nodes.keys.len());
        for slot in self.slot..end {
            let key = s.nodes.keys[slot];
            if key >= GRAVE {
                match self.graves.next() {
                    Some(g) if u64_at(g, 0) == slot as u64 => self.out.write_all(&g[8..])?,
                    _ => return Err(corrupt("a grave's vector is missing")),
                }
                continue;
            }
            let len = lens.next().flatten();
            let v = len.map(|len| &found.bytes[at..at + len]);
            at += len.unwrap_or(0);
            match v {
                Some(v) if v.len() == s.row_bytes => {
                    (self.found_here)(slot, key, v);
                    self.buf.clear();
                    s.put(v, &mut self.buf);
                    self.out.write_all(&self.buf)?;
                }
                _ => {
                    self.missing += 1;
                    let v = s.stand_in(slot, self.rows)?;
                    self.out.write_all(&v.unwrap_or_else(|| vec![0; s.bytes]))?;
                }
            }
        }
        self.slot = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::unwrap_used,
        reason = "tests: small integers made into floats"
    )]

    use std::collections::HashSet;

    use usearch::ScalarKind;

    use super::super::graph::{graph_bytes, Graph, Slots, SCALAR};
    use super::*;
    use crate::types::Metric;

    const DIMS: usize = 8;

    fn v(i: u64) -> Vec<f32> {
        (0..DIMS)
            .map(|d| ((i * 7 + d as u64) as f32 * 0.37).sin())
            .collect()
    }

    /// Vectors in the test graph: several chunks of slots, so several waves of reads.
    const N: usize = 3 * CHUNK + 100;
    /// Its graves: every 13th vector.
    const GRAVES: usize = N.div_ceil(13);

    /// `v` as a graph of [`SCALAR`] holds it.
    fn rounded(v: &[f32]) -> Vec<f32> {
        let mut b = Vec::new();
        graph_bytes(v.iter().copied(), &mut b);
        b.chunks_exact(2)
            .map(|x| half::bf16::from_bits(u16::from_le_bytes([x[0], x[1]])).to_f32())
            .collect()
    }

    /// A graph of `N` vectors of `scalar`, `GRAVES` of them graves; its saved file and its
    /// stripped form.
    fn saved(scalar: ScalarKind) -> (tempfile::TempDir, Graph, Vec<u8>, Vec<u8>) {
        let slots = Slots::new(4);
        let g = Graph::create(DIMS, Metric::Cos, scalar, N, &slots.acquire()).unwrap();
        let items: Vec<(u64, Vec<f32>)> = (0..N as u64).map(|i| (i, v(i))).collect();
        g.add_all(&items, &slots).unwrap();
        for i in (0..N as u64).step_by(13) {
            g.bury(i, &slots.acquire()).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.usearch");
        g.save(path.to_str().unwrap(), &slots.acquire()).unwrap();
        let full = std::fs::read(&path).unwrap();
        let mut stripped = Vec::new();
        strip(&path, &mut stripped).unwrap();
        (dir, g, full, stripped)
    }

    /// The spliced file, and the keys handed on as found (with their vectors checked).
    fn spliced(
        stripped: &[u8],
        dims: usize,
        rows: super::super::RowVectors<'_>,
    ) -> Result<(Vec<u8>, HashSet<u64>)> {
        let (mut out, mut found) = (Vec::new(), HashSet::new());
        let s = Stripped::parse(stripped, dims)?;
        s.splice(rows, &mut out, &mut |slot, key, vector| {
            assert_eq!(s.keys()[slot], key);
            assert_eq!(vector, bytes(&v(key)));
            assert!(found.insert(key));
        })?;
        Ok((out, found))
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The rows' vectors as [`super::super::RowVectors`] answers, those of `gone` missing.
    fn rows_but(gone: &HashSet<u64>, keys: &[u64], out: &mut Vec<u8>) -> Vec<Option<usize>> {
        keys.iter()
            .map(|k| {
                (!gone.contains(k)).then(|| {
                    out.extend(bytes(&v(*k)));
                    4 * DIMS
                })
            })
            .collect()
    }

    #[allow(clippy::unnecessary_wraps, reason = "the shape of `RowVectors`")]
    fn rows(keys: &[u64], out: &mut Vec<u8>) -> Result<Vec<Option<usize>>> {
        Ok(rows_but(&HashSet::new(), keys, out))
    }

    #[test]
    fn a_stripped_graph_spliced_with_the_rows_vectors_is_the_file_usearch_saved() {
        // bf16 graphs, and the f32 ones of checkpoints written before them
        for (scalar, bytes) in [(SCALAR, 2 * DIMS), (ScalarKind::F32, 4 * DIMS)] {
            let (_dir, _g, full, stripped) = saved(scalar);
            // the graves keep their vectors; the live ones do not
            let links = full.len() - 8 - N * bytes;
            assert_eq!(stripped.len(), PREFIX + links + GRAVES * (8 + bytes));
            // the rows' f32 vectors rounded as usearch rounds them, byte for byte
            let (out, found) = spliced(&stripped, DIMS, &rows).unwrap();
            assert_eq!(out, full);
            assert_eq!(found, (0..N as u64).filter(|k| k % 13 != 0).collect());
        }
    }

    #[test]
    fn the_keys_of_a_saved_index_are_read_in_slot_order() {
        let (dir, _g, _full, stripped) = saved(SCALAR);
        let keys = saved_keys(&dir.path().join("g.usearch")).unwrap();
        assert_eq!(keys, Stripped::parse(&stripped, DIMS).unwrap().keys());
        let live: HashSet<u64> = keys.iter().copied().filter(|k| *k < GRAVE).collect();
        assert_eq!(live, (0..N as u64).filter(|k| k % 13 != 0).collect());
    }

    #[test]
    fn damage_to_a_stripped_graph_is_an_error() {
        let (_dir, _g, _full, stripped) = saved(SCALAR);
        assert!(spliced(&stripped[..stripped.len() - 1], DIMS, &rows).is_err());
        assert!(spliced(&stripped[..stripped.len() / 2], DIMS, &rows).is_err());
        assert!(spliced(&stripped, DIMS + 1, &rows).is_err());
        let mut other = stripped.clone();
        other[PREFIX] = b'x';
        assert!(spliced(&other, DIMS, &rows).is_err());
    }

    #[test]
    fn a_vector_the_rows_lack_routes_by_a_neighbours_until_it_is_buried() {
        let (_dir, g, _full, stripped) = saved(SCALAR);
        let gone: HashSet<u64> = [5, 6, 7, 100, 499, 2500].into();
        let rows = |keys: &[u64], out: &mut Vec<u8>| Ok(rows_but(&gone, keys, out));
        let (full, found) = spliced(&stripped, DIMS, &rows).unwrap();
        // the vectors the rows lack are not handed on (their stand-ins are no one's)
        assert!(found.len() == N - GRAVES - gone.len() && found.is_disjoint(&gone));
        let slots = Slots::new(4);
        let mut loaded = Graph::create(DIMS, Metric::Cos, SCALAR, 0, &slots.acquire()).unwrap();
        loaded.load_buffer(&full, GRAVES, &slots.acquire()).unwrap();
        let p = slots.acquire();
        let mut buf = vec![0f32; DIMS];
        for k in &gone {
            assert!(loaded.get(*k, &mut buf, &p));
            assert_ne!(buf, rounded(&v(*k)));
            let known = (0..N as u64).filter(|i| !gone.contains(i));
            assert!(
                known.map(|i| rounded(&v(i))).any(|s| s == buf),
                "not a neighbour's vector"
            );
        }
        for k in (0..N as u64).filter(|k| k % 13 != 0 && !gone.contains(k)) {
            assert!(loaded.get(k, &mut buf, &p));
            assert_eq!(buf, rounded(&v(k)));
            let mut orig = vec![0f32; DIMS];
            assert!(g.get(k, &mut orig, &p));
            assert_eq!(buf, orig);
        }
    }
}
