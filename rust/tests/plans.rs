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

/// The thresholds of these tests: every plan within reach of 4,000 rows.
const TUNING: Tuning = Tuning {
    graph_min: 256,
    exact_max: 32,
    compact_scan_max: 100,
    rare_scan_max: 100,
    overfetch_max: 512,
};

fn engine() -> Engine {
    engine_with(TUNING)
}

fn engine_with(tuning: Tuning) -> Engine {
    let e = Engine::open(
        None,
        &Options {
            dims: Some(DIMS),
            metric: Some(Metric::L2),
            tuning,
            ..Options::default()
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

    // 40 rows pass, above exact_max (32): rare, passing <= compact_scan_max -> compact scan
    let (recall, r) = run(&e, &tagged("p1"), every(100), 10);
    assert_eq!((recall, r), (1.0, vec![Route::CompactScan]));

    // two tags: the bound is the smaller posting list (p1, 40 rows), still above exact_max
    let both = FilterSpec {
        tags: vec!["p1".into(), "p50".into()],
        ..tagged("p1")
    };
    let (recall, r) = run(&e, &both, every(100), 10);
    assert_eq!(recall, 1.0);
    assert_eq!(r, [Route::CompactScan]);

    // 122 rows pass (3%): too rare to over-fetch, more than rare_scan_max -> traversal
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
fn a_filter_too_rare_to_overfetch_is_a_compact_scan_up_to_rare_scan_max() {
    let e = engine_with(Tuning {
        compact_scan_max: 0,
        rare_scan_max: 1000,
        ..TUNING
    });
    // 3%: over-fetching would take 583 candidates (> 512); 122 rows <= rare_scan_max
    let (recall, r) = run(&e, &tagged("p3"), every(33), 10);
    assert_eq!((recall, r), (1.0, vec![Route::CompactScan]));
    // 20%: over-fetch, even though 800 rows <= rare_scan_max
    let (recall, r) = run(&e, &tagged("p20"), every(5), 10);
    assert!(recall >= 0.95, "20% recall {recall}");
    assert!(r.contains(&Route::Overfetch), "{r:?}");
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
        // batches of the most queries one call takes
        let batch = usize::try_from(memini::limits::MAX_QUERIES).unwrap();
        let hits: Vec<_> = refs
            .chunks(batch)
            .flat_map(|batch| e.vector_search_many("n", batch, &live, 1).unwrap())
            .collect();
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

/// The compact copy stays in step with the rows: with every filtered search forced through
/// it, each live tagged row is found first by its own vector and the results match brute
/// force, through upserts, vector updates, replacements, deletes, a reassign, a reopen from the
/// checkpoint and compaction.
#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, step by step")]
fn the_compact_copy_follows_every_change() {
    use memini::MemoryPatch;
    use std::collections::BTreeMap;
    const N: u64 = 3000;
    const D: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        dims: Some(D),
        metric: Some(Metric::L2),
        tuning: Tuning {
            graph_min: 256,
            exact_max: 32,
            compact_scan_max: usize::MAX,
            ..TUNING
        },
        ..Options::default()
    };
    // the model: id -> (vector, namespace); rows with i % 4 == 0 carry tag "a"
    let mut model: BTreeMap<u64, (Vec<f32>, &str)> = BTreeMap::new();
    let row = |i: u64, v: &[f32]| {
        let mut m = mem(&format!("r{i:05}"), "n", "row", Some(v.to_vec()));
        m.memory.tags = if i.is_multiple_of(4) {
            vec!["a".into()]
        } else {
            vec![]
        };
        m
    };
    let check = |e: &Engine, model: &BTreeMap<u64, (Vec<f32>, &str)>, step: &str| {
        let passing: Vec<(&u64, &Vec<f32>)> = model
            .iter()
            .filter(|(i, (_, ns))| *i % 4 == 0 && *ns == "n")
            .map(|(i, (v, _))| (i, v))
            .collect();
        let before = routes(e);
        let (mut found, mut wanted) = (0usize, 0usize);
        for (i, v) in passing.iter().step_by(7) {
            let hits = e.vector_search("n", v, &tagged("a"), 10).unwrap();
            assert_eq!(hits.len(), 10.min(passing.len()), "{step}");
            assert_eq!(hits[0].memory.id, format!("r{i:05}"), "{step}: row {i}");
            assert_eq!(hits[0].score, 1.0, "{step}: row {i}");
            let mut truth: Vec<(f32, String)> = passing
                .iter()
                .map(|(j, w)| {
                    let d: f32 = v.iter().zip(*w).map(|(a, b)| (a - b) * (a - b)).sum();
                    (d, format!("r{j:05}"))
                })
                .collect();
            truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            wanted += 10;
            found += truth[..10]
                .iter()
                .filter(|t| hits.iter().any(|h| h.memory.id == t.1))
                .count();
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.99, "{step}: recall {recall}");
        assert_eq!(taken(&before, &routes(e)), [Route::CompactScan], "{step}");
    };
    {
        let e = Engine::open(Some(dir.path()), &options).unwrap();
        let rows = (0..N)
            .map(|i| {
                model.insert(i, (vector(i, D), "n"));
                row(i, &vector(i, D))
            })
            .collect();
        e.upsert_many(rows).unwrap();
        check(&e, &model, "upsert");
        for i in (0..N).step_by(29) {
            let v = vector(10_000 + i, D);
            let patch = MemoryPatch {
                embedding: Some(Some(v.clone())),
                ..MemoryPatch::default()
            };
            e.update("n", &format!("r{i:05}"), patch).unwrap();
            model.insert(i, (v, "n"));
        }
        check(&e, &model, "update");
        let rows = (0..N)
            .step_by(31)
            .map(|i| {
                let v = vector(20_000 + i, D);
                model.insert(i, (v.clone(), "n"));
                row(i, &v)
            })
            .collect();
        e.upsert_many(rows).unwrap();
        check(&e, &model, "replace");
        for i in (0..N).step_by(11) {
            e.delete("n", &format!("r{i:05}")).unwrap();
            model.remove(&i);
        }
        check(&e, &model, "delete");
        let moved: Vec<u64> = model.keys().copied().step_by(13).collect();
        let ids = moved.iter().map(|i| format!("r{i:05}")).collect();
        e.reassign("n", ids, "m").unwrap();
        for i in moved {
            model.get_mut(&i).unwrap().1 = "m";
        }
        check(&e, &model, "reassign");
        e.close().unwrap();
    }
    let e = Engine::open(Some(dir.path()), &options).unwrap();
    check(&e, &model, "reopen");
    for i in (1..N).step_by(3) {
        if model.get(&i).is_some_and(|(_, ns)| *ns == "n") {
            e.delete("n", &format!("r{i:05}")).unwrap();
            model.remove(&i);
        }
    }
    e.compact().unwrap();
    check(&e, &model, "compact");
}
