//! Time a store's reopen: `Engine::open`, then one unfiltered vector search, then close, in
//! this (fresh) process, with its peak resident memory.
//!
//! `cargo run --release --example reopen -- STORE [NAMESPACE]` (default namespace `main`).
//! Run it on a copy of a closed store, several times in fresh processes: nothing changes the
//! store, so each run opens the same files. Prints one JSON line: seconds for open, open +
//! first search and close, the peak RSS (`VmHWM`) and the vector index's memory in MB.

#![allow(
    clippy::cast_precision_loss,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measurement script: fixed inputs, counts as floats"
)]

use std::path::Path;
use std::time::Instant;

use memini::{Engine, FilterSpec, Options};

/// A kernel figure of this process from `/proc/self/status`, in MB (0 where there is none).
fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).expect("usage: reopen STORE [NAMESPACE]");
    let ns = args.get(2).map_or("main", String::as_str);
    let t0 = Instant::now();
    let e = Engine::open(Some(Path::new(dir)), &Options::default()).expect("open the store");
    let open = t0.elapsed().as_secs_f64();
    let stats = e.stats().expect("stats");
    let dims = stats.dims;
    let query: Vec<f32> = (0..dims).map(|i| ((i * 7 + 3) as f32 * 0.37).sin()).collect();
    let hits = e
        .vector_search(ns, &query, &FilterSpec::default(), 10)
        .expect("search");
    let open_search = t0.elapsed().as_secs_f64();
    let peak = status_mb("VmHWM:");
    let t1 = Instant::now();
    e.close().expect("close");
    let close = t1.elapsed().as_secs_f64();
    println!(
        "{{\"open\": {open:.3}, \"open_search\": {open_search:.3}, \"close\": {close:.3}, \
         \"hits\": {}, \"peak_rss_mb\": {peak:.0}, \"vector_memory_mb\": {:.0}}}",
        hits.len(),
        stats.vector_memory_bytes as f64 / (1 << 20) as f64,
    );
}
