#![allow(
    clippy::cast_precision_loss,
    clippy::float_cmp,
    clippy::unwrap_used,
    reason = "tests: small counts made into floats"
)]

//! Every vector search plan, reached at a few thousand rows by lowering the thresholds, and
//! compared against a brute-force scan of the same rows.

mod common;

use common::{mem, now, vector};
use memini::{Engine, FilterSpec, Metric, Options, Route, Tuning};

const DIMS: usize = 8;
const ROWS: u64 = 4000;

/// Tags passing about this share of rows: every 100th row, every 33rd, ...
const SHARES: [(&str, u64); 5] = [("p1", 100), ("p3", 33), ("p5", 20), ("p20", 5), ("p50", 2)];

fn engine() -> Engine {
    let e = Engine::open(
        None,
        &Options {
            dims: Some(DIMS),
            metric: Some(Metric::L2),
            tuning: Tuning {
                graph_min: 256,
                exact_max: 32,
                exact_scan_max: 100,
            },
        },
    )
    .unwrap();
    let rows = (0..ROWS)
        .map(|i| {
            let mut m = mem(&format!("r{i:05}"), "n", "row", Some(vector(i, DIMS)));
            m.memory.tags = SHARES
                .iter()
                .filter(|(_, every)| i % every == 0)
                .map(|(t, _)| (*t).to_owned())
                .collect();
            m
        })
        .collect();
    e.upsert_many(rows).unwrap();
    e
}

fn brute_force(q: &[f32], pass: impl Fn(u64) -> bool, k: usize) -> Vec<String> {
    let mut all: Vec<(f32, String)> = (0..ROWS)
        .filter(|i| pass(*i))
        .map(|i| {
            let d = vector(i, DIMS)
                .iter()
                .zip(q)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>();
            (d, format!("r{i:05}"))
        })
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(k).map(|x| x.1).collect()
}

fn routes(e: &Engine) -> Vec<(Route, u64)> {
    e.stats().unwrap().vector_routes
}

fn taken(before: &[(Route, u64)], after: &[(Route, u64)]) -> Vec<Route> {
    before
        .iter()
        .zip(after)
        .filter(|(b, a)| a.1 > b.1)
        .map(|(b, _)| b.0)
        .collect()
}

/// Runs 50 queries with `spec`; returns recall@k against brute force, the routes taken, and
/// checks every result list has exactly min(k, passing) rows.
fn run(
    e: &Engine,
    spec: &FilterSpec,
    pass: impl Fn(u64) -> bool + Copy,
    k: usize,
) -> (f64, Vec<Route>) {
    let before = routes(e);
    let passing = (0..ROWS).filter(|i| pass(*i)).count();
    let (mut found, mut wanted) = (0usize, 0usize);
    for qi in 0..50u64 {
        let q = vector(1_000_000 + qi, DIMS);
        let hits = e.vector_search("n", &q, spec, k).unwrap();
        assert_eq!(hits.len(), k.min(passing));
        let truth = brute_force(&q, pass, k);
        wanted += truth.len();
        found += hits.iter().filter(|h| truth.contains(&h.memory.id)).count();
    }
    (found as f64 / wanted as f64, taken(&before, &routes(e)))
}

fn tagged(tag: &str) -> FilterSpec {
    FilterSpec {
        now: now(),
        tags: vec![tag.to_owned()],
        ..FilterSpec::default()
    }
}

fn every(n: u64) -> impl Fn(u64) -> bool + Copy {
    move |i| i % n == 0
}

#[test]
fn each_plan_is_taken_and_agrees_with_brute_force() {
    let e = engine();
    let unfiltered = FilterSpec {
        now: now(),
        ..FilterSpec::default()
    };
    let (recall, r) = run(&e, &unfiltered, |_| true, 10);
    assert_eq!(r, [Route::Graph]);
    assert!(recall >= 0.95, "unfiltered recall {recall}");

    // 40 rows pass, above exact_max (32): rare, passing <= exact_scan_max -> exact scan
    let (recall, r) = run(&e, &tagged("p1"), every(100), 10);
    assert_eq!((recall, r), (1.0, vec![Route::RareScan]));

    // two tags: the bound is the smaller posting list (p1, 40 rows), still above exact_max
    let both = FilterSpec {
        tags: vec!["p1".into(), "p50".into()],
        ..tagged("p1")
    };
    let (recall, r) = run(&e, &both, every(100), 10);
    assert_eq!(recall, 1.0);
    assert_eq!(r, [Route::RareScan]);

    // 122 rows pass (3%): too rare to over-fetch, more than exact_scan_max -> traversal
    let (recall, r) = run(&e, &tagged("p3"), every(33), 10);
    assert!(recall >= 0.95, "3% recall {recall}");
    assert!(r.contains(&Route::Traversal), "{r:?}");

    // 20% and 50%: over-fetch
    for (tag, n) in [("p20", 5), ("p50", 2)] {
        let (recall, r) = run(&e, &tagged(tag), every(n), 10);
        assert!(recall >= 0.95, "{tag} recall {recall}");
        assert!(r.contains(&Route::Overfetch), "{tag}: {r:?}");
    }
}

#[test]
fn a_posting_list_within_exact_max_is_scanned_exactly() {
    let e = engine();
    // ids r00000..r00031 carry a tag of their own
    let rows = (0..32u64)
        .map(|i| {
            let mut m = mem(&format!("r{i:05}"), "n", "row", Some(vector(i, DIMS)));
            m.memory.tags = vec!["few".into()];
            m
        })
        .collect();
    e.upsert_many(rows).unwrap();
    let (recall, r) = run(&e, &tagged("few"), |i| i < 32, 10);
    assert_eq!((recall, r), (1.0, vec![Route::Keys]));
}

#[test]
fn a_traversal_that_comes_up_short_falls_back_to_an_exact_scan() {
    let e = engine();
    // 300 copies of one vector: HNSW links few of them, so a traversal asked for all of them
    // comes up short and the exact scan takes over
    let rows = (0..300u64)
        .map(|i| {
            let mut m = mem(&format!("d{i:03}"), "n", "dup", Some(vector(7, DIMS)));
            m.memory.tags = vec!["dup".into()];
            m
        })
        .collect();
    e.upsert_many(rows).unwrap();
    e.set_search_breadth(1).unwrap();
    let before = routes(&e);
    let hits = e
        .vector_search("n", &vector(99, DIMS), &tagged("dup"), 300)
        .unwrap();
    assert_eq!(hits.len(), 300);
    assert!(hits.iter().all(|h| h.memory.id.starts_with('d')));
    let r = taken(&before, &routes(&e));
    assert_eq!(r, [Route::Traversal, Route::Fallback]);
}

#[test]
fn small_namespaces_are_flat_and_exact() {
    let e = engine();
    let rows = (0..100u64)
        .map(|i| mem(&format!("s{i}"), "small", "row", Some(vector(i, DIMS))))
        .collect();
    e.upsert_many(rows).unwrap();
    let before = routes(&e);
    let q = vector(7, DIMS);
    let hits = e
        .vector_search(
            "small",
            &q,
            &FilterSpec {
                now: now(),
                ..FilterSpec::default()
            },
            5,
        )
        .unwrap();
    assert_eq!(hits[0].memory.id, "s7");
    assert_eq!(taken(&before, &routes(&e)), [Route::Flat]);
}

/// Every row's own vector finds it first (HNSW alone leaves some unreachable: see
/// `vector::part`), through inserts, deletes, a reopen from the checkpoint and compaction.
#[test]
fn every_stored_vector_is_found_first_by_itself() {
    const N: u64 = 20_000;
    const D: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let check = |e: &Engine, alive: &dyn Fn(u64) -> bool| {
        let live = FilterSpec {
            now: now(),
            ..FilterSpec::default()
        };
        let ids: Vec<u64> = (0..N).filter(|i| alive(*i)).collect();
        let qs: Vec<Vec<f32>> = ids.iter().map(|i| vector(*i, D)).collect();
        let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
        let hits = e.vector_search_many("n", &refs, &live, 1).unwrap();
        let lost: Vec<u64> = ids
            .iter()
            .zip(&hits)
            .filter(|(i, h)| h[0].memory.id != format!("r{i}"))
            .map(|(i, _)| *i)
            .collect();
        assert!(
            lost.is_empty(),
            "{} rows not first for their own vector",
            lost.len()
        );
    };
    {
        let e = Engine::open(Some(dir.path()), &common::opts(D)).unwrap();
        for chunk in (0..N).collect::<Vec<_>>().chunks(5000) {
            let rows = chunk
                .iter()
                .map(|i| mem(&format!("r{i}"), "n", "row", Some(vector(*i, D))))
                .collect();
            e.upsert_many(rows).unwrap();
        }
        check(&e, &|_| true);
        for i in (0..N).step_by(3) {
            e.delete("n", &format!("r{i}")).unwrap();
        }
        check(&e, &|i| i % 3 != 0);
        e.close().unwrap();
    }
    let e = Engine::open(Some(dir.path()), &Options::default()).unwrap();
    check(&e, &|i| i % 3 != 0);
    e.compact().unwrap();
    check(&e, &|i| i % 3 != 0);
}
