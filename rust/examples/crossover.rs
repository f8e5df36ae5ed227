//! Where the vector search plans cross over: QPS and recall@10 of each plan (exact scan,
//! compact scan, over-fetch, filtered traversal) and of the default planner, per filter
//! selectivity, on real vectors. The numbers behind [`memini::Tuning`]'s defaults.
//!
//! `cargo run --release --example crossover -- VECTORS.f16.npy [ROWS] [QUERIES] [DIR]`
//! (e.g. /work/shared/datasets/pypi-100k/vectors.f16.npy). The last 1,000 vectors are the
//! queries (never stored); tag `sN` marks a pseudo-random N per mille of the rows. The store
//! is written once into DIR (a temporary folder by default) and reopened per plan, with
//! thresholds that force that plan. One thread, one query at a time, `k` = 10; recall is
//! against the exact scan.

#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::many_single_char_names,
    clippy::too_many_lines,
    reason = "a measurement script: counts as floats, fixed inputs"
)]

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use memini::types::Unstamped;
use memini::{Engine, FilterSpec, Memory, Metric, NewMemory, Options, Tuning};

/// Selectivities measured, per mille.
const PER_MILLE: [u64; 9] = [5, 10, 20, 50, 100, 150, 200, 300, 500];
const K: usize = 10;

fn f16_to_f32(h: u16) -> f32 {
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((h >> 10) & 0x1f), f32::from(h & 0x3ff));
    sign * match e {
        0 => m * (-24f32).exp2(),
        31 => f32::INFINITY,
        _ => (1.0 + m / 1024.0) * ((e - 15) as f32).exp2(),
    }
}

/// Rows of a 2-d little-endian f16 `.npy` file, as f32.
fn load(path: &str) -> (usize, Vec<Vec<f32>>) {
    let bytes = std::fs::read(path).expect("read the .npy file");
    let hlen = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    assert!(header.contains("'<f2'"), "expected f16 vectors: {header}");
    let shape = &header[header.find("'shape': (").unwrap() + 10..];
    let dims: usize = shape
        .split([',', ')'])
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let data: Vec<f32> = bytes[10 + hlen..]
        .chunks_exact(2)
        .map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
        .collect();
    (dims, data.chunks(dims).map(<[f32]>::to_vec).collect())
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn tagged(row: u64, per_mille: u64) -> bool {
    mix(row.wrapping_mul(1000).wrapping_add(per_mille)) % 1000 < per_mille
}

fn spec(tag: Option<String>) -> FilterSpec {
    FilterSpec {
        now: memini::types::now_micros(),
        tags: tag.into_iter().collect(),
        ..FilterSpec::default()
    }
}

/// Runs the queries; returns (QPS, the hits' ids per query).
fn run(e: &Engine, queries: &[Vec<f32>], spec: &FilterSpec) -> (f64, Vec<Vec<String>>) {
    let t = Instant::now();
    let hits: Vec<Vec<String>> = queries
        .iter()
        .map(|q| {
            e.vector_search("n", q, spec, K)
                .unwrap()
                .into_iter()
                .map(|h| h.memory.id)
                .collect()
        })
        .collect();
    (queries.len() as f64 / t.elapsed().as_secs_f64(), hits)
}

fn recall(hits: &[Vec<String>], truth: &[Vec<String>]) -> f64 {
    let (mut found, mut want) = (0, 0);
    for (h, t) in hits.iter().zip(truth) {
        let t: HashSet<&String> = t.iter().collect();
        want += t.len();
        found += h.iter().filter(|id| t.contains(id)).count();
    }
    found as f64 / want.max(1) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: crossover VECTORS.f16.npy [ROWS] [QUERIES] [DIR]");
    let (dims, all) = load(path);
    let rows: usize = args.get(2).map_or(99_000, |s| s.parse().unwrap());
    let nq: usize = args.get(3).map_or(300, |s| s.parse().unwrap());
    let tmp = tempfile_dir();
    let dir = args.get(4).map_or(tmp.as_path(), Path::new);
    let queries: Vec<Vec<f32>> = all[all.len() - 1000..][..nq].to_vec();
    let rows = rows.min(all.len() - 1000);
    let opts = |tuning: Tuning| Options {
        dims: Some(dims),
        metric: Some(Metric::Cos),
        tuning,
        ..Options::default()
    };
    let t = Instant::now();
    if !dir.join("rows.redb").exists() {
        let e = Engine::open(Some(dir), &opts(Tuning::default())).unwrap();
        for start in (0..rows).step_by(5000) {
            let batch = (start..(start + 5000).min(rows))
                .map(|i| NewMemory {
                    memory: Memory {
                        id: format!("r{i}"),
                        namespace: "n".into(),
                        content: String::new(),
                        metadata: "{}".into(),
                        tags: PER_MILLE
                            .iter()
                            .filter(|pm| tagged(i as u64, **pm))
                            .map(|pm| format!("s{pm}"))
                            .chain(std::iter::once("all".into()))
                            .collect(),
                        ..Memory::default()
                    },
                    unstamped: Unstamped {
                        created_at: true,
                        updated_at: true,
                        last_accessed_at: true,
                    },
                    embedding: Some(all[i].clone()),
                })
                .collect();
            e.upsert_many(batch).unwrap();
        }
        e.close().unwrap();
        println!("stored {rows} rows in {:.1} s", t.elapsed().as_secs_f64());
    }
    let base = Tuning::default();
    let plans = [
        ("default", base),
        (
            "exact",
            Tuning {
                exact_max: usize::MAX,
                ..base
            },
        ),
        (
            "compact",
            Tuning {
                compact_scan_max: usize::MAX,
                ..base
            },
        ),
        (
            "overfetch",
            Tuning {
                compact_scan_max: 0,
                overfetch_max: usize::MAX / 1024,
                ..base
            },
        ),
        (
            "traversal",
            Tuning {
                compact_scan_max: 0,
                rare_scan_max: 0,
                overfetch_max: 0,
                ..base
            },
        ),
    ];
    // the truth: every filter as an exact scan of its passing rows (kept in DIR)
    let cache = dir.join(format!("truth-{nq}.json"));
    let truth: Vec<Vec<Vec<String>>> = match std::fs::read(&cache) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
        Err(_) => {
            let e = Engine::open(Some(dir), &opts(plans[1].1)).unwrap();
            let truth = PER_MILLE
                .iter()
                .map(|pm| run(&e, &queries, &spec(Some(format!("s{pm}")))).1)
                .collect();
            e.close().unwrap();
            std::fs::write(&cache, serde_json::to_vec(&truth).unwrap()).unwrap();
            truth
        }
    };
    // PLANS=compact,default runs only those
    let only = std::env::var("PLANS").unwrap_or_default();
    for (name, tuning) in plans {
        if !only.is_empty() && !only.split(',').any(|p| p == name) {
            continue;
        }
        let t = Instant::now();
        let e = Engine::open(Some(dir), &opts(tuning)).unwrap();
        run(&e, &queries[..1], &spec(None));
        println!(
            "\nplan {name}: open + first search {:.2} s",
            t.elapsed().as_secs_f64()
        );
        println!("| selectivity | q/s | unfiltered q/s | x unfiltered | recall@10 |");
        println!("|---|---|---|---|---|");
        for (pm, truth) in PER_MILLE.iter().zip(&truth) {
            // SEL=100,200 runs only those (per mille)
            if let Ok(sel) = std::env::var("SEL") {
                if !sel.split(',').any(|s| s == pm.to_string()) {
                    continue;
                }
            }
            let s = spec(Some(format!("s{pm}")));
            // best of two passes each, the unfiltered peer measured between them
            let (a, hits) = run(&e, &queries, &s);
            let (u, _) = run(&e, &queries, &spec(None));
            let (b, _) = run(&e, &queries, &s);
            let (qps, unf) = (a.max(b), u);
            println!(
                "| {:.1}% | {qps:.0} | {unf:.0} | {:.2} | {:.3} |",
                *pm as f64 / 10.0,
                qps / unf,
                recall(&hits, truth)
            );
        }
        e.close().unwrap();
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("memini-crossover-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
