#![allow(clippy::unwrap_used, reason = "tests")]

//! Failures after the commit: an index that fails to take a committed group is repaired from
//! the rows before anyone is acknowledged, or the writers are told and searches of it fail
//! until a repair. Failures inside a group give each writer its own outcome.

mod common;

use std::sync::Arc;

use common::{live, mem, opts, vector};
use memini::{Engine, Error, FaultPoint};

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(Some(dir), &opts(8)).unwrap()
}

fn vector_ids(e: &Engine, q: &[f32], k: usize) -> Vec<String> {
    e.vector_search("n", q, &live(), k)
        .unwrap()
        .into_iter()
        .map(|s| s.memory.id)
        .collect()
}

fn keyword_ids(e: &Engine, q: &str) -> Vec<String> {
    e.keyword_search("n", q, &live(), 50)
        .unwrap()
        .into_iter()
        .map(|s| s.memory.id)
        .collect()
}

#[test]
fn a_failed_index_update_is_repaired_before_the_write_returns() {
    for point in [FaultPoint::VectorApply, FaultPoint::KeywordApply] {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        e.upsert_many(vec![mem("a", "n", "apple pie", Some(vector(1, 8)))])
            .unwrap();
        e.inject_fault(point, 1).unwrap();
        e.upsert_many(vec![mem("b", "n", "banana bread", Some(vector(2, 8)))])
            .unwrap();
        assert_eq!(vector_ids(&e, &vector(2, 8), 1), ["b"], "{point:?}");
        assert_eq!(keyword_ids(&e, "banana"), ["b"], "{point:?}");
        assert_eq!(keyword_ids(&e, "apple"), ["a"], "{point:?}");
    }
}

#[test]
fn an_unrepaired_index_refuses_searches_until_the_next_write_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    e.upsert_many(vec![mem("a", "n", "apple pie", Some(vector(1, 8)))])
        .unwrap();
    e.inject_fault(FaultPoint::VectorApply, 1).unwrap();
    e.inject_fault(FaultPoint::Repair, 1).unwrap();
    let err = e
        .upsert_many(vec![mem("b", "n", "banana bread", Some(vector(2, 8)))])
        .unwrap_err();
    assert!(
        matches!(&err, Error::Storage(m) if m.contains("write is stored")),
        "{err}"
    );
    // the row is stored; the keyword index is in step; the vector index says it is not
    assert_eq!(e.get("n", "b").unwrap().content, "banana bread");
    assert_eq!(keyword_ids(&e, "banana"), ["b"]);
    let err = e.vector_search("n", &vector(2, 8), &live(), 1).unwrap_err();
    assert!(
        matches!(&err, Error::Storage(m) if m.contains("out of step")),
        "{err}"
    );
    // the next write repairs it
    e.upsert_many(vec![mem("c", "n", "cherry", Some(vector(3, 8)))])
        .unwrap();
    assert_eq!(vector_ids(&e, &vector(2, 8), 1), ["b"]);
    assert_eq!(vector_ids(&e, &vector(3, 8), 1), ["c"]);
}

#[test]
fn a_store_closed_while_damaged_reopens_in_step() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = open(dir.path());
        let rows = (0..300)
            .map(|i| mem(&format!("r{i}"), "n", "row", Some(vector(i, 8))))
            .collect();
        e.upsert_many(rows).unwrap();
        e.close().unwrap();
    }
    {
        let e = Engine::open(Some(dir.path()), &memini::Options::default()).unwrap();
        e.inject_fault(FaultPoint::VectorApply, 1).unwrap();
        e.inject_fault(FaultPoint::KeywordApply, 1).unwrap();
        e.inject_fault(FaultPoint::Repair, 1).unwrap();
        assert!(e.delete("n", "r7").is_err());
        e.close().unwrap();
    }
    let e = Engine::open(Some(dir.path()), &memini::Options::default()).unwrap();
    assert!(e.get("n", "r7").is_err());
    assert!(!vector_ids(&e, &vector(7, 8), 300).contains(&"r7".to_owned()));
    assert_eq!(vector_ids(&e, &vector(8, 8), 1), ["r8"]);
    assert_eq!(keyword_ids(&e, "row").len(), 50);
}

#[test]
fn writers_queued_behind_a_failed_write_get_their_own_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let e = Arc::new(open(dir.path()));
    e.inject_fault(FaultPoint::Write, 3).unwrap();
    let outcomes: Vec<(String, Result<Vec<bool>, Error>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let e = Arc::clone(&e);
                s.spawn(move || {
                    let id = format!("w{i}");
                    let r = e.upsert_many(vec![mem(&id, "n", "written", Some(vector(i, 8)))]);
                    (id, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failed = outcomes.iter().filter(|(_, r)| r.is_err()).count();
    assert!((1..16).contains(&failed), "{failed} of 16 failed");
    for (id, r) in outcomes {
        match r {
            Ok(_) => assert_eq!(e.get("n", &id).unwrap().content, "written"),
            Err(err) => {
                assert!(!err.to_string().is_empty());
                assert!(e.get("n", &id).is_err(), "{id} failed but was stored");
            }
        }
    }
}

#[test]
fn a_failed_background_checkpoint_shows_in_stats_and_the_next_one_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(2)).unwrap();
    e.inject_fault(FaultPoint::Checkpoint, 1).unwrap();
    // 50,000 changes make a periodic checkpoint due (nobody awaits it)
    let rows = |from: u32| {
        (from..from + 50_000)
            .map(|i| mem(&format!("m{i}"), "n", "x", Some(vector(u64::from(i), 2))))
            .collect()
    };
    e.upsert_many(rows(0)).unwrap();
    let t0 = std::time::Instant::now();
    while e.stats().unwrap().checkpoint_failures.0 == 0 {
        assert!(
            t0.elapsed().as_secs() < 120,
            "the checkpoint neither ran nor failed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stats = e.stats().unwrap();
    assert_eq!(stats.checkpoints, 0);
    let why = stats.checkpoint_failures.1.unwrap();
    assert!(why.contains("injected fault at Checkpoint"), "{why}");
    // the writes are all there, and the next due checkpoint succeeds
    assert_eq!(e.get("n", "m49999").unwrap().content, "x");
    e.upsert_many(rows(50_000)).unwrap();
    while e.stats().unwrap().checkpoints == 0 {
        assert!(
            t0.elapsed().as_secs() < 240,
            "no checkpoint after the failed one"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(e.stats().unwrap().checkpoint_failures.0, 1);
    e.close().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(2)).unwrap();
    assert_eq!(e.count("n", &live()).unwrap(), 100_000);
}

/// The error of a store that cannot be created in `dir`, and the kind of the operating
/// system's error beneath it, read through `source()` alone.
fn open_error_kind(dir: &std::path::Path) -> (Error, Option<std::io::ErrorKind>) {
    let Err(err) = Engine::open(Some(dir), &opts(8)) else {
        panic!("a store was created in {}", dir.display());
    };
    let kind = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    (err, kind)
}

/// A store in a read-only directory fails with the I/O error kept as its cause: a caller tells
/// a refused permission from a full disk by its kind, not by the message.
#[test]
fn an_unwritable_directory_keeps_the_io_error_as_the_cause() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("read-only");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // root ignores permission bits: then a directory of sysfs, which refuses everyone
    let store = if std::fs::write(ro.join("probe"), b"").is_ok() {
        std::path::PathBuf::from("/sys/memini-test-store")
    } else {
        ro.join("store")
    };
    let (err, kind) = open_error_kind(&store);
    assert_eq!(kind, Some(std::io::ErrorKind::PermissionDenied), "{err}");
    assert_eq!(err.io_kind(), kind);
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Another I/O failure, another kind: a store path below a regular file.
#[test]
fn a_store_below_a_file_reports_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let (err, kind) = open_error_kind(&file.join("store"));
    assert_eq!(kind, Some(std::io::ErrorKind::NotADirectory), "{err}");
}

/// Runs `f` on its own thread; None when it has not returned within 30 s (a hung write).
fn within_30s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(30)).ok()
}

#[test]
fn a_panic_while_leading_a_group_fails_only_that_group_and_later_writes_are_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let e = Arc::new(open(dir.path()));
    e.upsert_many(vec![mem("a", "n", "apple pie", Some(vector(1, 8)))])
        .unwrap();
    // a write that panics inside its group: the group fails, nothing of it is stored
    e.inject_fault(FaultPoint::WritePanic, 1).unwrap();
    let e2 = Arc::clone(&e);
    let write = move || e2.upsert_many(vec![mem("b", "n", "banana bread", Some(vector(2, 8)))]);
    let err = within_30s(write).expect("the write hung").unwrap_err();
    assert!(
        matches!(&err, Error::Storage(m) if m.contains("panicked") && m.contains("nothing")),
        "{err}"
    );
    assert!(matches!(e.get("n", "b"), Err(Error::NotFound(_))));
    // the leader panics applying a committed group: the index is rebuilt from the rows, and
    // the write, stored, is acknowledged and searchable
    e.inject_fault(FaultPoint::ApplyPanic, 1).unwrap();
    let e2 = Arc::clone(&e);
    let write = move || e2.upsert_many(vec![mem("c", "n", "cherry cake", Some(vector(3, 8)))]);
    within_30s(write).expect("the write hung").unwrap();
    // later writes neither hang nor fail
    let e2 = Arc::clone(&e);
    let write = move || e2.upsert_many(vec![mem("d", "n", "date loaf", Some(vector(4, 8)))]);
    within_30s(write)
        .expect("a write after the panics hung")
        .unwrap();
    for (id, seed, word) in [("a", 1, "apple"), ("c", 3, "cherry"), ("d", 4, "date")] {
        assert_eq!(vector_ids(&e, &vector(seed, 8), 1), [id]);
        assert_eq!(keyword_ids(&e, word), [id]);
    }
    assert!(keyword_ids(&e, "banana").is_empty());
}
