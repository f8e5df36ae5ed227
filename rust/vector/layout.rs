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

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::GRAVE;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"memgrph2";
/// Bytes before the head in a stripped graph.
const PREFIX: usize = MAGIC.len() + 3 * 8;
const HEAD: usize = 64;
/// The graph's own header: five `u64`.
const GRAPH_HEADER: usize = 40;
/// usearch's scalar kinds this layout reads: f32 vectors, u64 keys, u32 slots.
const KIND_F32: u8 = 11;
const KIND_U64: u8 = 14;
const KIND_U32: u8 = 15;
/// Vectors fetched from the rows per call of the lookup.
const CHUNK: usize = 4096;

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
    if (buf[14], buf[15], buf[16]) != (KIND_F32, KIND_U64, KIND_U32) {
        return Err(invalid("not f32 vectors, u64 keys and u32 slots"));
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

/// Writes the index usearch saved at `saved` to `to` without the vectors of its live nodes
/// (see the module docs).
pub(super) fn strip(saved: &Path, to: &mut impl Write) -> io::Result<()> {
    let len = std::fs::metadata(saved)?.len();
    let mut from = BufReader::with_capacity(1 << 20, File::open(saved)?);
    let mut dims = [0u8; 8];
    from.read_exact(&mut dims)?;
    let (slots, bytes) = (u64::from(u32_at(&dims, 0)), u64::from(u32_at(&dims, 4)));
    let vectors_end = 8 + slots * bytes;
    let graph_len = len
        .checked_sub(vectors_end)
        .ok_or_else(|| invalid("shorter than its vectors"))?;
    to.write_all(MAGIC)?;
    for x in [slots, bytes, graph_len] {
        to.write_all(&x.to_le_bytes())?;
    }
    from.seek(SeekFrom::Start(vectors_end))?;
    let nodes = walk(&mut (&mut from).take(graph_len), to)?;
    if nodes.keys.len() as u64 != slots || from.stream_position()? != len {
        return Err(invalid("the graph does not match its vectors"));
    }
    // the graves' vectors, read forward through a small buffer (a seek would drop it)
    let mut from = BufReader::with_capacity(1 << 16, from.into_inner());
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
struct Stripped<'a> {
    bytes: usize,
    graph: &'a [u8],
    /// Per grave, ascending slot: `u64` slot, vector.
    graves: &'a [u8],
    nodes: Nodes,
}

impl<'a> Stripped<'a> {
    fn parse(stripped: &'a [u8], dims: usize) -> Result<Self> {
        if stripped.len() < PREFIX || &stripped[..8] != MAGIC {
            return Err(corrupt("not a stripped graph"));
        }
        let size = |at| usize_of(u64_at(stripped, at)).map_err(corrupt);
        let (slots, bytes, graph_len) = (size(8)?, size(16)?, size(24)?);
        if bytes != 4 * dims || u32::try_from(slots).is_err() {
            return Err(corrupt("vectors of other dimensions"));
        }
        let graph = stripped
            .get(PREFIX..PREFIX.saturating_add(graph_len))
            .ok_or_else(|| corrupt("truncated"))?;
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
            graph,
            graves,
            nodes,
        })
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
            } else if let Some(Some(v)) = rows(&[*key])?.pop() {
                if v.len() == self.bytes {
                    return Ok(Some(v));
                }
            }
        }
        Ok(None)
    }
}

/// Writes to `out` the index usearch saved, rebuilt from a stripped graph and `rows` (the
/// rows' vectors of the keys asked, None for a key no row holds any more).
///
/// A key the rows lack belongs to a row deleted or re-embedded after the checkpoint (a crash
/// came before the next one), which the replay of the changelog buries next: until then its
/// node routes searches with the vector of a level-0 neighbour (zeros if none has one).
pub(super) fn splice(
    stripped: &[u8],
    dims: usize,
    rows: super::RowVectors<'_>,
    out: &mut impl Write,
) -> Result<()> {
    let s = Stripped::parse(stripped, dims)?;
    for x in [s.nodes.keys.len(), s.bytes] {
        let x = u32::try_from(x).map_err(|_| corrupt("a size out of range"))?;
        out.write_all(&x.to_le_bytes())?;
    }
    let mut graves = s.graves.chunks_exact(8 + s.bytes);
    let mut missing = 0;
    for (c, chunk) in s.nodes.keys.chunks(CHUNK).enumerate() {
        let live: Vec<u64> = chunk.iter().copied().filter(|k| *k < GRAVE).collect();
        let found = rows(&live)?;
        if found.len() != live.len() {
            return Err(Error::storage(
                "vector checkpoint",
                "the rows answered short",
            ));
        }
        let mut found = found.into_iter();
        for (i, key) in chunk.iter().enumerate() {
            let slot = c * CHUNK + i;
            if *key >= GRAVE {
                match graves.next() {
                    Some(g) if u64_at(g, 0) == slot as u64 => out.write_all(&g[8..])?,
                    _ => return Err(corrupt("a grave's vector is missing")),
                }
                continue;
            }
            match found.next().flatten() {
                Some(v) if v.len() == s.bytes => out.write_all(&v)?,
                _ => {
                    missing += 1;
                    let v = s.stand_in(slot, rows)?;
                    out.write_all(&v.unwrap_or_else(|| vec![0; s.bytes]))?;
                }
            }
        }
    }
    if graves.next().is_some() {
        return Err(corrupt("a grave the graph lacks"));
    }
    if missing > 0 {
        log::info!(
            "vector graph: {missing} vectors changed since the checkpoint route by a \
             neighbour's until they are removed"
        );
    }
    out.write_all(s.graph)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::cast_precision_loss,
        clippy::unwrap_used,
        reason = "tests: small integers made into floats"
    )]

    use std::collections::HashSet;

    use super::super::graph::{Graph, Slots};
    use super::*;
    use crate::types::Metric;

    const DIMS: usize = 8;

    fn v(i: u64) -> Vec<f32> {
        (0..DIMS)
            .map(|d| ((i * 7 + d as u64) as f32 * 0.37).sin())
            .collect()
    }

    /// A graph of 500 vectors, 39 of them graves; its saved file and its stripped form.
    fn saved() -> (tempfile::TempDir, Graph, Vec<u8>, Vec<u8>) {
        let slots = Slots::new(4);
        let g = Graph::create(DIMS, Metric::Cos, 500, &slots.acquire()).unwrap();
        let items: Vec<(u64, Vec<f32>)> = (0..500).map(|i| (i, v(i))).collect();
        g.add_all(&items, &slots).unwrap();
        for i in (0..500).step_by(13) {
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

    fn spliced(
        stripped: &[u8],
        dims: usize,
        rows: super::super::RowVectors<'_>,
    ) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        splice(stripped, dims, rows, &mut out)?;
        Ok(out)
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[allow(clippy::unnecessary_wraps, reason = "the shape of `RowVectors`")]
    fn rows(keys: &[u64]) -> Result<Vec<Option<Vec<u8>>>> {
        Ok(keys.iter().map(|k| Some(bytes(&v(*k)))).collect())
    }

    #[test]
    fn a_stripped_graph_spliced_with_the_rows_vectors_is_the_file_usearch_saved() {
        let (_dir, _g, full, stripped) = saved();
        // 39 graves keep their vectors; the 460 live ones do not
        let links = full.len() - 8 - 500 * 4 * DIMS;
        assert_eq!(stripped.len(), PREFIX + links + 39 * (8 + 4 * DIMS));
        assert_eq!(spliced(&stripped, DIMS, &rows).unwrap(), full);
    }

    #[test]
    fn damage_to_a_stripped_graph_is_an_error() {
        let (_dir, _g, _full, stripped) = saved();
        assert!(spliced(&stripped[..stripped.len() - 1], DIMS, &rows).is_err());
        assert!(spliced(&stripped[..stripped.len() / 2], DIMS, &rows).is_err());
        assert!(spliced(&stripped, DIMS + 1, &rows).is_err());
        let mut other = stripped.clone();
        other[PREFIX] = b'x';
        assert!(spliced(&other, DIMS, &rows).is_err());
    }

    #[test]
    fn a_vector_the_rows_lack_routes_by_a_neighbours_until_it_is_buried() {
        let (_dir, g, _full, stripped) = saved();
        let gone: HashSet<u64> = [5, 6, 7, 100, 499].into();
        let rows = |keys: &[u64]| -> Result<Vec<Option<Vec<u8>>>> {
            Ok(keys
                .iter()
                .map(|k| (!gone.contains(k)).then(|| bytes(&v(*k))))
                .collect())
        };
        let full = spliced(&stripped, DIMS, &rows).unwrap();
        let slots = Slots::new(4);
        let mut loaded = Graph::create(DIMS, Metric::Cos, 0, &slots.acquire()).unwrap();
        loaded.load_buffer(&full, 39, &slots.acquire()).unwrap();
        let p = slots.acquire();
        let mut buf = vec![0f32; DIMS];
        for k in &gone {
            assert!(loaded.get(*k, &mut buf, &p));
            assert_ne!(buf, v(*k));
            let known = (0..500).filter(|i| !gone.contains(i));
            assert!(known.map(v).any(|s| s == buf), "not a neighbour's vector");
        }
        for k in (0..500).filter(|k| k % 13 != 0 && !gone.contains(k)) {
            assert!(loaded.get(k, &mut buf, &p));
            assert_eq!(buf, v(k));
            let mut orig = vec![0f32; DIMS];
            assert!(g.get(k, &mut orig, &p));
            assert_eq!(buf, orig);
        }
    }
}
