//! Tests of the keyword index as a whole: delta and folded scores agree, results are the head
//! of the full ranking, namespaces stay apart, and merges keep rankings.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::float_cmp,
    reason = "tests: unwraps, small row ids used as indexes, exact score comparisons"
)]

use std::time::{Duration, Instant};

use tantivy::indexer::NoMergePolicy;

use super::merge::IDLE_MERGE_AFTER;
use super::*;
use crate::columns::tag_hash;

/// An in-memory index whose fold thread is stopped and whose writer never merges: only
/// `commit` folds the delta, and no merge purges deleted documents from the statistics
/// behind a test's back.
fn quiet() -> KeywordIndex {
    let (mut kw, fresh) = KeywordIndex::open(None).unwrap();
    assert!(fresh);
    let w = kw.shared.writer.lock();
    w.inner
        .as_ref()
        .unwrap()
        .set_merge_policy(Box::new(NoMergePolicy));
    drop(w);
    *kw.shared.stop.lock() = true;
    kw.shared.wake.notify_all();
    kw.folder.take().unwrap().join().unwrap();
    kw
}

fn doc(ns: &str, text: &str, version: u64) -> Doc {
    Doc {
        namespace: ns.to_owned(),
        text: text.to_owned(),
        tags: Vec::new(),
        version,
    }
}

fn all(_: u64, _: u64) -> bool {
    true
}

fn search(kw: &KeywordIndex, ns: &str, q: &str, k: usize) -> Vec<(u64, f64)> {
    kw.search(ns, q, k, false, &[], &all).unwrap()
}

fn delta_len(kw: &KeywordIndex) -> usize {
    kw.shared.delta.read().docs.len()
}

/// Deterministic texts of 3 to 14 words over a small vocabulary (varied lengths and term
/// frequencies, so scores differ).
fn texts(n: usize) -> Vec<String> {
    const WORDS: [&str; 16] = [
        "apple", "river", "stone", "cloud", "agent", "memory", "search", "garden", "window",
        "forest", "planet", "signal", "copper", "violin", "harbor", "lantern",
    ];
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(s >> 33).unwrap()
    };
    (0..n)
        .map(|_| {
            let len = 3 + next() % 12;
            (0..len)
                .map(|_| WORDS[next() % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

const QUERIES: [&str; 5] = [
    "apple",
    "river stone",
    "memory agent search",
    "lantern violin copper harbor",
    "garden window forest planet signal cloud",
];

/// Every query's full ranking in namespace `ns`.
fn rankings(kw: &KeywordIndex, ns: &str) -> Vec<Vec<(u64, f64)>> {
    QUERIES.iter().map(|q| search(kw, ns, q, 1000)).collect()
}

/// The same rows in the same order with the same scores (relative 1e-6: f32 sums of the
/// same terms in another order).
fn assert_same(before: &[Vec<(u64, f64)>], after: &[Vec<(u64, f64)>]) {
    for (q, (b, a)) in QUERIES.iter().zip(before.iter().zip(after)) {
        assert!(!b.is_empty(), "{q:?} matched nothing");
        assert_close(b, a, &format!("{q:?}: delta vs folded"));
    }
}

/// The same rows in the same order, with scores equal up to f32 rounding: tantivy sums a
/// document's term scores in f32, in an order that follows its pruning state (which
/// another search of the same documents need not share).
fn assert_close(want: &[(u64, f64)], got: &[(u64, f64)], what: &str) {
    let rids = |r: &[(u64, f64)]| r.iter().map(|h| h.0).collect::<Vec<_>>();
    assert_eq!(rids(want), rids(got), "{what}: ranking");
    for ((rid, w), (_, g)) in want.iter().zip(got) {
        assert!(
            (w - g).abs() <= 1e-6 * w.abs(),
            "{what}: row {rid} scored {w}, then {g}"
        );
    }
}

/// A committed corpus of rows 1..=40 in namespace "a" and 41..=50 in "b".
fn corpus() -> (KeywordIndex, Vec<String>) {
    let kw = quiet();
    let t = texts(200);
    for rid in 1..=50u64 {
        let ns = if rid <= 40 { "a" } else { "b" };
        kw.put(rid, Some(doc(ns, &t[rid as usize], 1)), rid, true)
            .unwrap();
    }
    kw.commit().unwrap();
    assert_eq!(delta_len(&kw), 0);
    (kw, t)
}

#[test]
fn a_new_row_scores_the_same_in_the_delta_and_folded() {
    let kw = quiet();
    let t = texts(30);
    for rid in 0..30u64 {
        kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 1, true)
            .unwrap();
    }
    assert_eq!(delta_len(&kw), 30);
    assert_eq!(kw.num_segments(), 0);
    let before = rankings(&kw, "a");
    kw.commit().unwrap();
    assert_eq!(delta_len(&kw), 0);
    assert_eq!(kw.num_docs(), 30);
    assert_same(&before, &rankings(&kw, "a"));
}

/// A background fold that fails is counted with its error (not only logged); the row stays
/// searchable from the delta and the next tick folds it.
#[test]
fn a_failed_background_fold_is_counted_and_retried() {
    let (kw, _) = KeywordIndex::open(None).unwrap();
    kw.shared
        .fail_ticks
        .store(2, std::sync::atomic::Ordering::SeqCst);
    kw.put(1, Some(doc("a", "copper lantern", 1)), 1, true)
        .unwrap();
    let waited = Instant::now();
    // the fold commits, then drops the folded documents from the delta
    while kw.committed_seq() < 1 || delta_len(&kw) > 0 {
        assert!(waited.elapsed() < Duration::from_secs(30), "never folded");
        assert_eq!(search(&kw, "a", "lantern", 10).len(), 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (n, last) = kw.failures();
    assert_eq!(n, 2);
    assert!(last.unwrap().contains("injected fault"));
    assert_eq!(delta_len(&kw), 0);
    assert_eq!(search(&kw, "a", "lantern", 10).len(), 1);
}

#[test]
fn scores_are_the_same_before_and_after_a_fold_of_adds_updates_and_deletes() {
    let (kw, t) = corpus();
    let committed = rankings(&kw, "a");
    // new rows, an update of a committed row, a delete of one, in both namespaces
    let mut seq = 100;
    let mut step = |rid: u64, d: Option<Doc>| {
        seq += 1;
        kw.put(rid, d, seq, true).unwrap();
    };
    for rid in 60..70u64 {
        step(rid, Some(doc("a", &t[rid as usize], 1)));
    }
    step(45, Some(doc("b", &t[150], 2)));
    step(3, Some(doc("a", &t[151], 2)));
    step(9, Some(doc("a", &t[152], 2)));
    step(12, None);
    step(44, None);
    assert_eq!(delta_len(&kw), 13);
    // the store no longer has row 12: the engine's accept drops it until the fold
    let live = |rid: u64, _: u64| rid != 12 && rid != 44;
    let ranked = |kw: &KeywordIndex| -> Vec<Vec<(u64, f64)>> {
        QUERIES
            .iter()
            .map(|q| kw.search("a", q, 1000, false, &[], &live).unwrap())
            .collect()
    };
    let before = ranked(&kw);
    assert_ne!(before, committed, "the delta changed nothing");
    assert!(before.iter().flatten().any(|h| (60..70).contains(&h.0)));
    kw.commit().unwrap();
    assert_eq!(delta_len(&kw), 0);
    assert_same(&before, &ranked(&kw));
    // once committed, the deleted rows are gone even for an accept-everything search
    assert_same(&before, &rankings(&kw, "a"));
}

#[test]
fn a_row_replaced_twice_before_the_fold_keeps_its_score() {
    let (kw, t) = corpus();
    kw.put(7, Some(doc("a", &t[160], 2)), 101, true).unwrap();
    kw.put(7, Some(doc("a", &t[161], 3)), 102, true).unwrap();
    kw.put(60, Some(doc("a", &t[162], 1)), 103, true).unwrap();
    let before = rankings(&kw, "a");
    kw.commit().unwrap();
    assert_same(&before, &rankings(&kw, "a"));
}

#[test]
fn a_row_added_and_deleted_before_the_fold_changes_no_score() {
    let (kw, t) = corpus();
    kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
    kw.put(60, None, 102, true).unwrap();
    kw.put(61, Some(doc("a", &t[161], 1)), 103, true).unwrap();
    let before = rankings(&kw, "a");
    kw.commit().unwrap();
    assert_same(&before, &rankings(&kw, "a"));
}

#[test]
fn a_fold_that_empties_a_segment_keeps_scores() {
    let (kw, t) = corpus();
    // a segment of its own for row 60, then row 60 rewritten in the delta
    kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
    kw.commit().unwrap();
    let segments = kw.num_segments();
    kw.put(60, Some(doc("a", &t[161], 2)), 102, true).unwrap();
    let before = rankings(&kw, "a");
    kw.commit().unwrap();
    // tantivy dropped the emptied segment; the fold's new one took its place
    assert_eq!(kw.num_segments(), segments);
    assert_same(&before, &rankings(&kw, "a"));
}

#[test]
fn after_compaction_scores_are_those_of_the_live_rows_alone() {
    let (kw, t) = corpus();
    kw.put(60, Some(doc("a", &t[160], 1)), 101, true).unwrap();
    kw.commit().unwrap();
    kw.put(60, Some(doc("a", &t[161], 2)), 102, true).unwrap();
    kw.put(3, Some(doc("a", &t[162], 2)), 103, true).unwrap();
    kw.put(12, None, 104, true).unwrap();
    kw.commit().unwrap();
    let before = rankings(&kw, "a");
    kw.compact().unwrap();
    assert_eq!(kw.num_segments(), 1);
    assert_same(&before, &rankings(&kw, "a"));
    let fresh = quiet();
    for rid in (1..=50u64).filter(|r| *r != 12 && *r != 3) {
        let ns = if rid <= 40 { "a" } else { "b" };
        fresh
            .put(rid, Some(doc(ns, &t[rid as usize], 1)), rid, true)
            .unwrap();
    }
    fresh.put(3, Some(doc("a", &t[162], 2)), 103, true).unwrap();
    fresh
        .put(60, Some(doc("a", &t[161], 2)), 102, true)
        .unwrap();
    fresh.commit().unwrap();
    assert_same(&rankings(&fresh, "a"), &rankings(&kw, "a"));
}

#[test]
fn the_top_k_is_the_head_of_the_full_ranking_across_delta_and_segments() {
    let (kw, t) = corpus();
    // a second segment, then a delta on top
    for rid in 60..80u64 {
        kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 100, true)
            .unwrap();
    }
    kw.commit().unwrap();
    for rid in 80..100u64 {
        kw.put(rid, Some(doc("a", &t[rid as usize], 1)), rid + 100, true)
            .unwrap();
    }
    // (two indexing threads: a commit may write two segments)
    assert!(kw.num_segments() >= 2);
    for q in QUERIES {
        let full = search(&kw, "a", q, 1000);
        assert!(full.len() > 10, "{q:?}");
        assert!(full.windows(2).all(|w| w[0].1 >= w[1].1), "{q:?}");
        for k in [1, 3, 10] {
            assert_eq!(search(&kw, "a", q, k), full[..k], "{q:?} k={k}");
        }
    }
    assert!(search(&kw, "a", "apple", 0).is_empty());
}

#[test]
fn equal_scores_rank_by_row_id_wherever_the_documents_are() {
    let kw = quiet();
    for rid in [5u64, 9] {
        kw.put(rid, Some(doc("a", "same words here", 1)), rid, true)
            .unwrap();
    }
    kw.commit().unwrap();
    for rid in [7u64, 3] {
        kw.put(rid, Some(doc("a", "same words here", 1)), 10 + rid, true)
            .unwrap();
    }
    let ids = |k| {
        search(&kw, "a", "same words", k)
            .iter()
            .map(|h| h.0)
            .collect::<Vec<_>>()
    };
    let full = search(&kw, "a", "same words", 10);
    assert!(full.iter().all(|h| h.1 == full[0].1), "{full:?}");
    assert_eq!(ids(10), [3, 5, 7, 9]);
    for k in 1..4 {
        assert_eq!(ids(k), [3, 5, 7, 9][..k], "k={k} (delta)");
    }
    kw.commit().unwrap();
    for k in 1..=4 {
        assert_eq!(ids(k), [3, 5, 7, 9][..k], "k={k} (committed)");
    }
}

#[test]
fn rejected_documents_never_take_a_result_slot() {
    let kw = quiet();
    // "apple" once in texts of growing length: row 1 scores best, row 10 worst
    for rid in 1..=10u64 {
        let text = format!("apple{}", " filler".repeat(rid as usize));
        kw.put(rid, Some(doc("a", &text, 1)), rid, true).unwrap();
    }
    kw.commit().unwrap();
    // rows 1-3 are deleted in the store, rows 4-5 rewritten by a bulk load (version 2,
    // not yet searchable): their committed documents are stale
    for rid in 4..=5u64 {
        kw.put(rid, Some(doc("a", "pear", 2)), 20 + rid, false)
            .unwrap();
    }
    let accept = |rid: u64, ver: u64| rid > 5 || (rid > 3 && ver == 2);
    let hits = kw.search("a", "apple", 3, false, &[], &accept).unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
    // the same with the best rows in the delta
    for rid in 1..=3u64 {
        let text = format!("apple{}", " filler".repeat(rid as usize));
        kw.put(rid, Some(doc("a", &text, 2)), 30 + rid, true)
            .unwrap();
    }
    let accept = |rid: u64, ver: u64| rid > 5 || (rid > 3 && ver == 2);
    let hits = kw.search("a", "apple", 3, false, &[], &accept).unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
    // committed deletes are dropped by tantivy itself
    for rid in 1..=3u64 {
        kw.put(rid, None, 40 + rid, true).unwrap();
    }
    kw.commit().unwrap();
    let hits = search(&kw, "a", "apple", 3);
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [6, 7, 8]);
    assert_eq!(search(&kw, "a", "pear", 10).len(), 2);
}

#[test]
fn the_analyzer_stems_and_folds_case_and_accents() {
    let kw = quiet();
    kw.put(1, Some(doc("a", "The cats were running", 1)), 1, true)
        .unwrap();
    kw.put(
        2,
        Some(doc("a", "Un café crème, s'il vous plaît", 1)),
        2,
        true,
    )
    .unwrap();
    kw.put(3, Some(doc("a", "LOUD SHOUTING", 1)), 3, true)
        .unwrap();
    let first = |kw: &KeywordIndex, q: &str| search(kw, "a", q, 10).first().map(|h| h.0);
    let check = |kw: &KeywordIndex| {
        for (q, rid) in [
            ("cat", 1),
            ("CATS", 1),
            ("run", 1),
            ("runs", 1),
            ("cafe", 2),
            ("CAFÉ", 2),
            ("creme", 2),
            ("loud", 3),
            ("Shouting", 3),
        ] {
            assert_eq!(first(kw, q), Some(rid), "{q:?}");
        }
        assert_eq!(first(kw, "dog"), None);
    };
    check(&kw);
    kw.commit().unwrap();
    check(&kw);
}

#[test]
fn a_query_of_one_letter_words_or_punctuation_matches_nothing() {
    let kw = quiet();
    kw.put(1, Some(doc("a", "a b c I x y z cat", 1)), 1, true)
        .unwrap();
    kw.put(2, Some(doc("a", "a b c", 1)), 2, true).unwrap();
    kw.commit().unwrap();
    kw.put(3, Some(doc("a", "x y z", 1)), 3, true).unwrap();
    for q in [
        "",
        " ",
        "a",
        "a b c",
        "I",
        "x y z",
        "!!!",
        "?! ... -- ()",
        "\"AND\" (",
        "é",
    ] {
        assert_eq!(search(&kw, "a", q, 10), [], "{q:?}");
    }
    // one-letter words next to a real one are ignored, query syntax is plain text
    let ids = |q: &str| {
        search(&kw, "a", q, 10)
            .iter()
            .map(|h| h.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("a cat"), [1]);
    assert_eq!(ids("cat AND NOT (x) OR *"), [1]);
    assert_eq!(ids("title:cat"), [1]);
}

#[test]
fn namespaces_never_see_each_others_rows() {
    let kw = quiet();
    for rid in 1..=4u64 {
        kw.put(
            rid,
            Some(doc(["a", "b"][rid as usize % 2], "shared words", 1)),
            rid,
            true,
        )
        .unwrap();
    }
    kw.commit().unwrap();
    for rid in 5..=8u64 {
        kw.put(
            rid,
            Some(doc(["a", "b"][rid as usize % 2], "shared words", 1)),
            rid,
            true,
        )
        .unwrap();
    }
    let ids = |ns: &str, dominant: bool, accept: &dyn Fn(u64, u64) -> bool| {
        let mut r: Vec<u64> = kw
            .search(ns, "shared", 100, dominant, &[], accept)
            .unwrap()
            .iter()
            .map(|h| h.0)
            .collect();
        r.sort_unstable();
        r
    };
    assert_eq!(ids("a", false, &all), [2, 4, 6, 8]);
    assert_eq!(ids("b", false, &all), [1, 3, 5, 7]);
    assert_eq!(ids("c", false, &all), Vec::<u64>::new());
    // dominant: the namespace term is left out and accept checks the namespace
    assert_eq!(ids("a", true, &|rid, _| rid % 2 == 0), [2, 4, 6, 8]);
}

#[test]
fn a_search_of_several_namespaces_equals_one_search_of_each_under_their_statistics() {
    let kw = quiet();
    let t = texts(300);
    let ns_of = |rid: u64| ["a", "b", "c"][usize::try_from(rid % 3).unwrap()];
    for rid in 1..=240u64 {
        let text = &t[usize::try_from(rid).unwrap()];
        kw.put(rid, Some(doc(ns_of(rid), text, 1)), rid, true)
            .unwrap();
        if rid == 180 {
            kw.commit().unwrap(); // the last 60 rows stay in the delta
        }
    }
    let names = ["c", "a"];
    // b's rows are never offered to a group; a's odd rows are filtered out
    let keep = |rid: u64| ns_of(rid) != "a" || rid.is_multiple_of(2);
    let group = |rid: u64, _: u64| {
        let g = names.iter().position(|n| *n == ns_of(rid))?;
        keep(rid).then_some(g)
    };
    for q in QUERIES {
        for k in [1, 3, 10, 1000] {
            for dominant in [false, true] {
                let many = kw
                    .search_many(&names, q, k, dominant, &[], &group, false)
                    .unwrap();
                for (g, (ns, got)) in names.iter().zip(&many).enumerate() {
                    // the same namespaces searched (the same statistics), one kept
                    let only = |rid: u64, _: u64| (ns_of(rid) == *ns && keep(rid)).then_some(g);
                    let alone = kw
                        .search_many(&names, q, k, dominant, &[], &only, false)
                        .unwrap()
                        .remove(g);
                    assert_close(&alone, got, &format!("{ns} {q:?} k={k} {dominant}"));
                }
            }
        }
    }
}

#[test]
fn an_optimistic_search_returns_what_checking_every_document_returns() {
    let kw = quiet();
    let t = texts(300);
    for rid in 1..=240u64 {
        let text = &t[usize::try_from(rid).unwrap()];
        kw.put(rid, Some(doc("a", text, 1)), rid, true).unwrap();
        if rid == 180 {
            kw.commit().unwrap(); // the last 60 rows stay in the delta
        }
    }
    // keeping every row, all but a few (rows deleted since the commit), half of them
    let keeps: [&dyn Fn(u64) -> bool; 3] = [&|_| true, &|rid| rid % 17 != 0, &|rid| {
        rid.is_multiple_of(2)
    }];
    for keep in keeps {
        let accept = |rid: u64, _: u64| keep(rid).then_some(0);
        for q in QUERIES {
            for k in [1, 3, 10, 1000] {
                for dominant in [false, true] {
                    let search = |optimistic| {
                        kw.search_many(&["a"], q, k, dominant, &[], &accept, optimistic)
                            .unwrap()
                            .remove(0)
                    };
                    let (fast, checked) = (search(true), search(false));
                    // equal scores, but for the last bit: tantivy sums a document's term
                    // scores in an order that depends on the pruning threshold's path
                    let scores = |h: &[(u64, f64)]| h.iter().map(|x| x.1).collect::<Vec<_>>();
                    assert_eq!(fast.len(), checked.len(), "{q:?} k={k}");
                    for (a, b) in scores(&fast).iter().zip(scores(&checked)) {
                        assert!((a - b).abs() <= 1e-6 * b.abs(), "{q:?} k={k}: {a} {b}");
                    }
                    assert!(fast.iter().all(|h| keep(h.0)), "{q:?} k={k}");
                    if k == 1000 {
                        let ids = |h: &[(u64, f64)]| {
                            h.iter()
                                .map(|x| x.0)
                                .collect::<std::collections::BTreeSet<_>>()
                        };
                        assert_eq!(ids(&fast), ids(&checked), "{q:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn required_tags_keep_only_tagged_rows_and_add_nothing_to_scores() {
    let kw = quiet();
    let (red, blue) = (tag_hash("red"), tag_hash("blue"));
    let tagged = [
        (1u64, vec![red]),
        (2, vec![red, blue]),
        (3, vec![blue]),
        (4, vec![]),
    ];
    for (rid, tags) in &tagged {
        let d = Doc {
            tags: tags.clone(),
            ..doc(
                "a",
                &format!("tagged row {}", "x ".repeat(*rid as usize)),
                1,
            )
        };
        kw.put(*rid, Some(d), *rid, true).unwrap();
    }
    kw.commit().unwrap();
    let plain = search(&kw, "a", "tagged", 10);
    assert_eq!(plain.len(), 4);
    let with =
        |tags: &[u64], dominant: bool| kw.search("a", "tagged", 10, dominant, tags, &all).unwrap();
    let only = |rids: &[u64]| -> Vec<(u64, f64)> {
        plain
            .iter()
            .filter(|h| rids.contains(&h.0))
            .copied()
            .collect()
    };
    for dominant in [false, true] {
        assert_eq!(with(&[red], dominant), only(&[1, 2]));
        assert_eq!(with(&[blue], dominant), only(&[2, 3]));
        assert_eq!(with(&[red, blue], dominant), only(&[2]));
        assert_eq!(with(&[tag_hash("green")], dominant), []);
    }
}

#[test]
fn commits_record_the_sequence_and_num_docs_counts_the_delta() {
    let kw = quiet();
    assert_eq!(kw.committed_seq(), 0);
    kw.put(1, Some(doc("a", "one", 1)), 5, true).unwrap();
    kw.put(2, Some(doc("a", "two", 1)), 6, true).unwrap();
    assert_eq!(kw.num_docs(), 2);
    assert_eq!(kw.committed_seq(), 0);
    kw.commit().unwrap();
    assert_eq!(kw.committed_seq(), 6);
    assert_eq!(kw.num_docs(), 2);
    // a sequence that touched no text still moves the commit forward
    kw.advance(9);
    kw.committer().commit().unwrap();
    assert_eq!(kw.committer().committed_seq(), 9);
    kw.put(1, None, 10, true).unwrap();
    assert_eq!(
        kw.num_docs(),
        1,
        "a delete counts at once (the live documents)"
    );
    kw.commit().unwrap();
    assert_eq!(kw.num_docs(), 1);
    kw.compact().unwrap();
    assert!(kw.num_segments() <= 1);
    assert_eq!(search(&kw, "a", "two", 10).len(), 1);
}

#[test]
fn an_index_on_disk_reopens_committed_and_rebuilds_when_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kw");
    {
        let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
        assert!(fresh);
        kw.put(1, Some(doc("a", "durable words", 1)), 7, true)
            .unwrap();
        kw.commit().unwrap();
    }
    {
        let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
        assert!(!fresh);
        assert_eq!(kw.committed_seq(), 7);
        assert_eq!(search(&kw, "a", "durable", 10).len(), 1);
    }
    // a segment file goes missing: the index is rebuilt empty and says so
    let victim = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .unwrap();
    std::fs::remove_file(victim).unwrap();
    let (kw, fresh) = KeywordIndex::open(Some(&path)).unwrap();
    assert!(fresh);
    assert_eq!(kw.num_docs(), 0);
}

/// Commits rows `from..from + n` (bulk puts, one commit: new segments).
fn segment(kw: &KeywordIndex, from: u64, n: u64) {
    for (rid, text) in (from..from + n).zip(texts(usize::try_from(n).unwrap())) {
        kw.put(rid, Some(doc("main", &text, 1)), rid, false)
            .unwrap();
    }
    kw.commit().unwrap();
}

/// Whether the idle merge would take the largest segment (None: nothing to merge).
fn takes_bulk(kw: &KeywordIndex) -> Option<bool> {
    let metas = kw.index.searchable_segment_metas().unwrap();
    let largest = metas.iter().max_by_key(|m| m.num_docs()).unwrap().id();
    let ids = kw.shared.idle_merge_ids().unwrap()?;
    Some(ids.contains(&largest))
}

/// The idle merge leaves the largest segment alone while the others hold under a quarter
/// of its documents (merging those into one), and takes it too once they hold more;
/// `merging` says so until searches see the merged segment, rankings unchanged.
#[test]
fn idle_merge_takes_the_bulk_once_the_rest_is_a_quarter_of_it() {
    let kw = quiet();
    segment(&kw, 0, 400);
    kw.compact().unwrap();
    assert_eq!(kw.num_segments(), 1);
    segment(&kw, 400, 40);
    segment(&kw, 440, 50); // 90 of 400
    assert_eq!(takes_bulk(&kw), Some(false));
    segment(&kw, 490, 10); // 100 of 400: a quarter
    assert_eq!(takes_bulk(&kw), Some(true));

    let before = rankings(&kw, "main");
    assert!(kw.merging(), "due once writes pause");
    kw.shared.writer.lock().committed_at -= IDLE_MERGE_AFTER;
    kw.shared.merge_if_idle().unwrap();
    let t0 = Instant::now();
    while kw.shared.writer.lock().idle_merge.is_some() && kw.merging() && !kw.shared.merged() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the merge never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(kw.merging(), "merged, not yet searched");
    kw.shared.reload(None).unwrap();
    assert!(!kw.merging());
    assert_eq!(kw.num_segments(), 1);
    assert_eq!(takes_bulk(&kw), None);
    assert_same(&before, &rankings(&kw, "main"));
}

/// A second segment under a quarter of the first: nothing to merge, and `merging` is
/// false as soon as the index is clean.
#[test]
fn idle_merge_leaves_a_small_second_segment() {
    let kw = quiet();
    segment(&kw, 0, 400);
    kw.compact().unwrap();
    segment(&kw, 400, 1);
    assert_eq!(kw.num_segments(), 2);
    assert_eq!(takes_bulk(&kw), None);
    assert!(!kw.merging());
}

#[test]
fn a_word_in_every_row_of_the_namespaces_searched_weighs_nearly_nothing_there() {
    let kw = quiet();
    // every row of "c" names Carol; most rows of the much larger "o" mention wrists
    let facts = [
        "Carol is vegetarian",
        "Carol broke her wrist",
        "Carol plays chess",
        "Carol bakes bread",
    ];
    for (rid, text) in (1u64..).zip(facts) {
        kw.put(rid, Some(doc("c", text, 1)), rid, true).unwrap();
    }
    for rid in 10..200u64 {
        let text = format!("row {rid}: a wrist injury");
        kw.put(rid, Some(doc("o", &text, 1)), rid, true).unwrap();
    }
    let of_c = |rid: u64, _: u64| rid < 10;
    for stage in ["delta", "committed"] {
        let name = kw.search("c", "carol", 10, false, &[], &of_c).unwrap();
        let wrist = kw.search("c", "wrist", 10, false, &[], &of_c).unwrap();
        assert_eq!((name.len(), wrist.len()), (4, 1), "{stage}");
        assert!(
            name.iter().all(|h| h.1 < 0.2 * wrist[0].1),
            "{stage}: {name:?} vs {wrist:?}"
        );
        // the other namespace's own statistics: there "wrist" is in nearly every row
        let of_o = |rid: u64, _: u64| rid >= 10;
        let there = kw.search("o", "wrist", 1, false, &[], &of_o).unwrap();
        assert!(there[0].1 < 0.2 * wrist[0].1, "{stage}");
        kw.commit().unwrap();
    }
}
