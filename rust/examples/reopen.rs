//! Time a store's reopen: `Engine::open` and one unfiltered vector search in this (fresh)
//! process, with its peak resident memory; then 2,000 more searches (pseudo-random unit
//! queries, one thread), then close.
//!
//! `cargo run --release --example reopen -- STORE [NAMESPACE]` (default namespace `main`).
//! Run it on a copy of a closed store, several times in fresh processes: nothing changes the
//! store, so each run opens the same files. Prints one JSON line: seconds for open, open +
//! first search and close, the CPU seconds of the open (user, system), the peak RSS
//! (`VmHWM`), the vector index's memory in MB and the microseconds a search took after.
//!
//! `... --example reopen -- --build STORE ROWS [DIMS]` first writes a store to reopen:
//! ROWS rows in namespace `main` (default 384 dims, cos), each with a short text, a tag
//! (`t0`..`t9`) and a pseudo-random unit vector, 10,000 rows a batch, then closes it.

#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measurement script: fixed inputs, counts as floats"
)]

use std::path::Path;
use std::time::Instant;

use memini::types::Unstamped;
use memini::{Engine, FilterSpec, Memory, Metric, NewMemory, Options};

/// Searches timed after the open.
const SEARCHES: u64 = 2000;

/// splitmix64: the pseudo-random stream of the built rows.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A pseudo-random unit vector, the `i`-th of the built rows.
fn unit(i: u64, dims: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dims as u64)
        .map(|d| (mix(i << 16 | d) >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    for x in &mut v {
        *x /= norm;
    }
    v
}

/// Writes ROWS rows into a new store at `dir` (see the module docs).
fn build(dir: &Path, rows: usize, dims: usize) {
    let options = Options {
        dims: Some(dims),
        metric: Some(Metric::Cos),
        ..Options::default()
    };
    let t = Instant::now();
    let e = Engine::open(Some(dir), &options).expect("create the store");
    for start in (0..rows).step_by(10_000) {
        let batch = (start..(start + 10_000).min(rows))
            .map(|i| NewMemory {
                memory: Memory {
                    id: format!("r{i}"),
                    namespace: "main".into(),
                    content: format!("row {i} of the reopen store, word{}", i % 5000),
                    metadata: "{}".into(),
                    tags: vec![format!("t{}", i % 10)],
                    ..Memory::default()
                },
                unstamped: Unstamped {
                    created_at: true,
                    updated_at: true,
                    last_accessed_at: true,
                },
                embedding: Some(unit(i as u64, dims)),
            })
            .collect();
        e.upsert_many(batch).expect("write a batch");
        eprintln!(
            "{} rows, {:.0} s",
            start + 10_000,
            t.elapsed().as_secs_f64()
        );
    }
    e.close().expect("close");
    eprintln!("built {rows} rows in {:.0} s", t.elapsed().as_secs_f64());
}

/// A kernel figure of this process from `/proc/self/status`, in MB (0 where there is none).
fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// This process's CPU seconds so far, (user, system), from `/proc/self/stat` (zeros where
/// there is none). The kernel counts in ticks of 1/100 s on the platforms this runs on.
fn cpu_s() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command name, which is in parentheses and may hold spaces
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |i: usize| {
        rest.split_whitespace()
            .nth(i)
            .and_then(|x| x.parse::<f64>().ok())
            .map_or(0.0, |t| t / 100.0)
    };
    // utime and stime are the 14th and 15th fields, the 12th and 13th after the name
    (field(11), field(12))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: reopen STORE [NAMESPACE] | reopen --build STORE ROWS [DIMS]";
    if args.get(1).is_some_and(|a| a == "--build") {
        let dir = args.get(2).expect(usage);
        let rows = args.get(3).expect(usage).parse().expect(usage);
        let dims = args.get(4).map_or(384, |d| d.parse().expect(usage));
        return build(Path::new(dir), rows, dims);
    }
    let dir = args.get(1).expect(usage);
    let ns = args.get(2).map_or("main", String::as_str);
    let t0 = Instant::now();
    let e = Engine::open(Some(Path::new(dir)), &Options::default()).expect("open the store");
    let open = t0.elapsed().as_secs_f64();
    let (user, system) = cpu_s();
    let stats = e.stats().expect("stats");
    let dims = stats.dims;
    let query: Vec<f32> = (0..dims)
        .map(|i| ((i * 7 + 3) as f32 * 0.37).sin())
        .collect();
    let hits = e
        .vector_search(ns, &query, &FilterSpec::default(), 10)
        .expect("search");
    let open_search = t0.elapsed().as_secs_f64();
    let peak = status_mb("VmHWM:");
    let t1 = Instant::now();
    for i in 0..SEARCHES {
        let q = unit(u64::MAX - i, dims);
        e.vector_search(ns, &q, &FilterSpec::default(), 10)
            .expect("search");
    }
    let search_us = t1.elapsed().as_secs_f64() * 1e6 / SEARCHES as f64;
    let t1 = Instant::now();
    e.close().expect("close");
    let close = t1.elapsed().as_secs_f64();
    println!(
        "{{\"open\": {open:.3}, \"open_search\": {open_search:.3}, \"close\": {close:.3}, \
         \"open_cpu_user\": {user:.2}, \"open_cpu_system\": {system:.2}, \"hits\": {}, \
         \"peak_rss_mb\": {peak:.0}, \"vector_memory_mb\": {:.0}, \"search_us\": {search_us:.0}}}",
        hits.len(),
        stats.vector_memory_bytes as f64 / f64::from(1 << 20),
    );
}
