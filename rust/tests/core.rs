#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::unwrap_used,
    reason = "test data: small integers made into floats and indexes"
)]

//! Core tests: the engine without Python.

mod common;

use common::{live, mem, now, opts};
use memini::{Engine, FilterSpec, MemoryPatch, Options, Tier};

#[test]
fn upsert_get_update_delete() {
    let e = Engine::open(None, &opts(2)).unwrap();
    assert_eq!(
        e.upsert_many(vec![mem("a", "n", "hello cats", Some(vec![1.0, 0.0]))])
            .unwrap(),
        vec![true]
    );
    assert_eq!(
        e.upsert_many(vec![mem("a", "n", "hello dogs", Some(vec![0.0, 1.0]))])
            .unwrap(),
        vec![false]
    );
    let got = e.get("n", "a").unwrap();
    assert_eq!(got.content, "hello dogs");
    assert!(e.get("other", "a").is_err());
    let patch = MemoryPatch {
        summary: Some("s".into()),
        ..MemoryPatch::default()
    };
    assert_eq!(e.update("n", "a", patch).unwrap().summary, "s");
    assert_eq!(e.get_embedding("n", "a").unwrap(), Some(vec![0.0, 1.0]));
    e.delete("n", "a").unwrap();
    assert!(e.get("n", "a").is_err());
}

#[test]
fn conflict_across_namespaces_writes_nothing() {
    let e = Engine::open(None, &opts(2)).unwrap();
    e.upsert_many(vec![mem("a", "n1", "x", None)]).unwrap();
    let err = e
        .upsert_many(vec![mem("b", "n2", "y", None), mem("a", "n2", "z", None)])
        .unwrap_err();
    assert!(matches!(err, memini::Error::Conflict(_)));
    assert!(e.get("n2", "b").is_err(), "batch is all or nothing");
}

#[test]
fn filters_and_searches_agree_with_a_scan() {
    let e = Engine::open(None, &opts(4)).unwrap();
    let mut batch = Vec::new();
    for i in 0..5000u32 {
        let v: Vec<f32> = (0..4)
            .map(|j| ((i * 7 + j * 13) % 101) as f32 / 101.0)
            .collect();
        let mut m = mem(
            &format!("m{i:05}"),
            "ns",
            &format!("word{} common", i % 50),
            Some(v),
        );
        if i % 100 == 0 {
            m.memory.tags.push("rare".into());
        }
        batch.push(m);
    }
    e.upsert_many(batch).unwrap();
    let spec = FilterSpec {
        tags: vec!["rare".into()],
        ..live()
    };
    assert_eq!(e.count("ns", &spec).unwrap(), 50);
    let hits = e
        .vector_search("ns", &[0.5, 0.5, 0.5, 0.5], &spec, 10)
        .unwrap();
    assert_eq!(hits.len(), 10);
    assert!(hits
        .iter()
        .all(|h| h.memory.tags.contains(&"rare".to_string())));
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    let unfiltered = e
        .vector_search("ns", &[0.5, 0.5, 0.5, 0.5], &live(), 10)
        .unwrap();
    assert_eq!(unfiltered.len(), 10);
    let kw = e.keyword_search("ns", "word7", &live(), 1000).unwrap();
    assert_eq!(kw.len(), 100);
    let kw_rare = e.keyword_search("ns", "common", &spec, 1000).unwrap();
    assert_eq!(kw_rare.len(), 50);
}

#[test]
fn reopen_keeps_rows_and_indexes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(Some(dir.path()), &opts(3)).unwrap();
        let batch = (0..3000)
            .map(|i| {
                mem(
                    &format!("id{i}"),
                    "ns",
                    &format!("text {i} apple"),
                    Some(vec![i as f32, 1.0, 2.0]),
                )
            })
            .collect();
        e.upsert_many(batch).unwrap();
        e.delete("ns", "id5").unwrap();
        e.close().unwrap();
    }
    let e = Engine::open(Some(dir.path()), &Options::default()).unwrap();
    assert_eq!(e.dims().unwrap(), 3);
    assert_eq!(e.count("ns", &live()).unwrap(), 2999);
    let hits = e.vector_search("ns", &[5.0, 1.0, 2.0], &live(), 3).unwrap();
    assert_eq!(hits.len(), 3);
    assert_ne!(hits[0].memory.id, "id5");
    assert_eq!(
        e.keyword_search("ns", "apple", &live(), 5000)
            .unwrap()
            .len(),
        2999
    );
}

#[test]
fn queued_keyword_changes_reach_tantivy_before_a_bulk_load() {
    // a small write queues its change for the fold thread; a bulk load starting with the same
    // row goes straight into tantivy and must land on top of it, not under it
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(Some(dir.path()), &opts(2)).unwrap();
        e.upsert_many(vec![mem("x", "ns", "alpha", None)]).unwrap();
        let bulk = std::iter::once(mem("x", "ns", "beta", None))
            .chain(
                (0..memini::keyword::FOLD_DOCS)
                    .map(|i| mem(&format!("b{i}"), "ns", "filler", None)),
            )
            .collect();
        e.upsert_many(bulk).unwrap();
        let ids = |e: &Engine, q: &str| -> Vec<String> {
            let hits = e.keyword_search("ns", q, &live(), 5).unwrap();
            hits.into_iter().map(|h| h.memory.id).collect()
        };
        assert_eq!(ids(&e, "beta"), ["x"]);
        assert!(ids(&e, "alpha").is_empty());
        e.close().unwrap();
    }
    let e = Engine::open(Some(dir.path()), &Options::default()).unwrap();
    let hits = e.keyword_search("ns", "beta", &live(), 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert!(e
        .keyword_search("ns", "alpha", &live(), 5)
        .unwrap()
        .is_empty());
}

#[test]
fn second_open_is_locked_and_dims_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(3)).unwrap();
    assert!(matches!(
        Engine::open(Some(dir.path()), &opts(3)),
        Err(memini::Error::Locked(_))
    ));
    e.close().unwrap();
    assert!(matches!(
        Engine::open(Some(dir.path()), &opts(4)),
        Err(memini::Error::DimensionMismatch(_))
    ));
    assert!(matches!(
        Engine::open(None, &Options::default()),
        Err(memini::Error::InvalidArgument(_))
    ));
}

#[test]
fn expiry_supersession_and_as_of() {
    let e = Engine::open(None, &opts(2)).unwrap();
    let t = now();
    let mut old = mem("old", "n", "x", None);
    old.memory.expires_at = Some(t - 1);
    e.upsert_many(vec![old, mem("keep", "n", "y", None)])
        .unwrap();
    assert_eq!(e.count("n", &live()).unwrap(), 1);
    e.set_superseded("n", "keep", "other", t).unwrap();
    assert_eq!(e.count("n", &live()).unwrap(), 0);
    let past = FilterSpec {
        as_of: Some(t - 10),
        ..live()
    };
    // as of before valid_to and expiry: both rows were live then
    assert_eq!(e.count("n", &past).unwrap(), 2);
    assert_eq!(e.sweep_expired(t, 0).unwrap(), vec![Tier::Semantic]);
    assert_eq!(e.list_namespaces().unwrap(), vec!["n".to_string()]);
}

/// usearch has known bugs around remove/re-add: 10k churn cycles on a graph partition
/// (delete + re-add + update), then every search must still find each row's own vector.
#[test]
fn churn_keeps_the_graph_exact_enough() {
    let e = Engine::open(None, &opts(8)).unwrap();
    // distinct pseudo-random vectors per (row, generation)
    let vec_of = |i: u64, gen: u64| -> Vec<f32> {
        (0..8u64)
            .map(|j| {
                let mut z = (i << 40) ^ (gen << 8) ^ j;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    };
    let n = 3000u64;
    let batch = (0..n)
        .map(|i| mem(&format!("r{i}"), "ns", "x", Some(vec_of(i, 0))))
        .collect();
    e.upsert_many(batch).unwrap();
    let mut gen = vec![0u64; n as usize];
    for c in 0..10_000u64 {
        let i = (c * 7919) % n;
        let id = format!("r{i}");
        match c % 3 {
            0 => {
                e.delete("ns", &id).unwrap();
                e.upsert_many(vec![mem(&id, "ns", "x", Some(vec_of(i, c)))])
                    .unwrap();
            }
            1 => {
                let patch = MemoryPatch {
                    embedding: Some(Some(vec_of(i, c))),
                    ..MemoryPatch::default()
                };
                e.update("ns", &id, patch).unwrap();
            }
            _ => {
                e.upsert_many(vec![mem(&id, "ns", "x", Some(vec_of(i, c)))])
                    .unwrap();
            }
        }
        gen[i as usize] = c;
    }
    e.compact().unwrap();
    let mut found = 0;
    for i in (0..n).step_by(10) {
        let hits = e
            .vector_search("ns", &vec_of(i, gen[i as usize]), &live(), 1)
            .unwrap();
        assert_eq!(hits.len(), 1);
        found += usize::from(hits[0].memory.id == format!("r{i}"));
    }
    assert!(
        found >= 285,
        "only {found}/300 rows found their own vector after churn"
    );
    assert_eq!(e.count("ns", &live()).unwrap(), n as usize);
}

#[test]
fn concurrent_writers_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(4)).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let e = &e;
            s.spawn(move || {
                for j in 0..25 {
                    let v = vec![1.0, 0.0, j as f32, t as f32];
                    let m = mem(&format!("w{t}-{j}"), "n", "row", Some(v));
                    e.upsert_many(vec![m]).unwrap();
                }
            });
        }
    });
    assert_eq!(e.count("n", &live()).unwrap(), 200);
    let groups = e.write_groups().unwrap();
    assert!(groups < 200, "200 concurrent writes took {groups} commits");
    e.close().unwrap();
}

/// The changelog generations a checkpoint covered, as a backup taken now holds them.
fn log_gens_of(e: &Engine, dir: &std::path::Path) -> Vec<u64> {
    let dest = dir.join(format!("backup-{}", now()));
    e.backup(&dest).unwrap();
    let rows = memini::rows::RowStore::open(Some(&dest.join("rows.redb"))).unwrap();
    rows.snapshot().unwrap().log_gens().unwrap()
}

#[test]
fn the_changelog_a_checkpoint_covered_is_dropped_by_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(Some(&dir.path().join("s")), &opts(2)).unwrap();
    // 50,000 changes make a periodic checkpoint due (commit::CHECKPOINT_EVERY)
    let batch = (0..50_000u32)
        .map(|i| {
            mem(
                &format!("m{i}"),
                "n",
                "x",
                Some(common::vector(u64::from(i), 2)),
            )
        })
        .collect();
    e.upsert_many(batch).unwrap();
    let t0 = std::time::Instant::now();
    while e.stats().unwrap().checkpoints == 0 {
        assert!(t0.elapsed().as_secs() < 120, "no checkpoint came");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // the checkpoint left generation 0 to the next write group, which logs into generation 1
    assert_eq!(log_gens_of(&e, dir.path()), vec![0]);
    e.upsert_many(vec![mem("last", "n", "y", None)]).unwrap();
    assert_eq!(log_gens_of(&e, dir.path()), vec![1]);
    assert_eq!(e.get("n", "m49999").unwrap().content, "x");
    e.close().unwrap();
}

/// Keyword scores of every row for `q`, by id.
fn keyword_scores(e: &Engine, q: &str) -> Vec<(String, f64)> {
    let mut s: Vec<(String, f64)> = e
        .keyword_search("alice", q, &live(), 100)
        .unwrap()
        .into_iter()
        .map(|h| (h.memory.id, h.score))
        .collect();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

#[test]
fn keyword_scores_survive_rewrites_folds_merges_and_reopens() {
    // issue 33 item 18: the README quick start run twice scored its row 0.2877, then 0.1823
    // (the replaced document still counted), and stats said 4 keyword docs for 2 rows
    let dir = tempfile::tempdir().unwrap();
    let rows = || {
        vec![
            mem("m1", "alice", "Alice prefers green tea", None),
            mem("m2", "alice", "Bob drinks black coffee and tea", None),
            mem("m3", "alice", "Carol likes cake", None),
        ]
    };
    let e = Engine::open(Some(dir.path()), &opts(4)).unwrap();
    e.upsert_many(rows()).unwrap();
    let first = keyword_scores(&e, "tea preferences");
    assert_eq!(first.len(), 2);
    let same = |e: &Engine, when: &str| {
        assert_eq!(keyword_scores(e, "tea preferences"), first, "{when}");
        assert_eq!(e.stats().unwrap().keyword_docs, 3, "{when}");
    };
    e.upsert_many(rows()).unwrap();
    same(&e, "rewritten in the delta");
    e.close().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(4)).unwrap();
    same(&e, "reopened");
    e.upsert_many(rows()).unwrap();
    same(&e, "rewritten after the reopen");
    let patch = MemoryPatch {
        content: Some("Carol likes cake".into()),
        ..MemoryPatch::default()
    };
    e.update("alice", "m3", patch).unwrap();
    same(&e, "updated");
    // the keyword index folds its delta within a second or so of the last write
    let fold = || std::thread::sleep(std::time::Duration::from_millis(1500));
    fold();
    same(&e, "folded");
    e.upsert_many(rows()).unwrap();
    fold();
    same(&e, "rewritten and folded");
    e.close().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(4)).unwrap();
    same(&e, "reopened after the folds");
    e.compact().unwrap();
    same(&e, "compacted");
    // a deleted row leaves the statistics at once, as if it had never been
    e.delete("alice", "m3").unwrap();
    assert_eq!(e.stats().unwrap().keyword_docs, 2);
    let after_delete = keyword_scores(&e, "tea preferences");
    e.close().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(4)).unwrap();
    assert_eq!(keyword_scores(&e, "tea preferences"), after_delete);
    let fresh = Engine::open(None, &opts(4)).unwrap();
    fresh.upsert_many(rows()).unwrap();
    fresh.delete("alice", "m3").unwrap();
    assert_eq!(keyword_scores(&fresh, "tea preferences"), after_delete);
}

/// The message of an `InvalidArgument` refusal (anything else fails the test).
fn invalid<T>(r: memini::Result<T>) -> String {
    match r {
        Err(err @ memini::Error::InvalidArgument(_)) => err.to_string(),
        Err(err) => panic!("not an invalid argument: {err}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn sizes_and_names_beyond_the_limits_are_refused_before_any_work() {
    use memini::limits::{MAX_K, MAX_POOL, MAX_QUERIES};
    use memini::{Fusion, RecallQuery, Source};
    let e = Engine::open(None, &opts(2)).unwrap();
    e.upsert_many(vec![mem("a", "n", "hello", Some(vec![1.0, 0.0]))])
        .unwrap();
    let sources = [Source {
        namespace: "n".into(),
        tiers: None,
    }];
    let spec = live();
    let recall = |k: usize, pool: usize, text: &str| {
        e.recall(&RecallQuery {
            sources: &sources,
            text,
            vector: Some(&[1.0, 0.0]),
            spec: &spec,
            k,
            pool,
            fusion: Fusion::Convex { alpha: 0.5 },
            context: 0.0,
            keyword_half: 0.0,
            quality: false,
            dedup: true,
        })
    };
    // k = 2**45 once aborted the process allocating the fusion's result
    let huge = 1usize << 45;
    assert!(invalid(recall(huge, huge, "hello")).contains("k must be at most 10000"));
    let max_k = usize::try_from(MAX_K).unwrap();
    let max_pool = usize::try_from(MAX_POOL).unwrap();
    assert_eq!(recall(max_k, max_pool, "hello").unwrap().len(), 1);
    assert!(invalid(recall(10, max_pool + 1, "hello")).contains("pool must be at most"));
    assert!(invalid(recall(10, 50, &"x".repeat(4_097))).contains("4096 characters"));
    let q: &[f32] = &[1.0, 0.0];
    assert!(invalid(e.vector_search("n", q, &spec, huge)).contains("k must be at most"));
    assert!(invalid(e.keyword_search("n", "hello", &spec, huge)).contains("k must be at most"));
    let many = vec![q; usize::try_from(MAX_QUERIES).unwrap() + 1];
    assert!(invalid(e.vector_search_many("n", &many, &spec, 1)).contains("at most 1024"));
    assert!(invalid(e.list("n", &spec, i64::MAX, 0)).contains("limit must be at most"));
    assert!(invalid(e.list("n", &spec, 0, i64::MAX)).contains("offset must be at most"));
    // a namespace name: written only in the allowed form
    for bad in ["", "a\0b", "a\u{202E}b", "  ", &"x".repeat(257)] {
        invalid(e.upsert_many(vec![mem("b", bad, "x", None)]));
        invalid(e.reassign("n", vec!["a".into()], bad));
    }
    assert_eq!(e.list_namespaces().unwrap(), vec!["n".to_string()]);
}
