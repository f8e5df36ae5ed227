#![allow(clippy::unwrap_used, reason = "tests")]

//! The engine on a many-core machine, simulated with a 64-thread worker pool (more threads
//! than usearch has slots): bulk loads, rebuilds, reopens and 48 threads mixing writes and
//! searches. Its own test binary, so the pool size is set before anything builds the pool.

mod common;

use common::{live, mem, opts, vector};
use memini::{Engine, Options};

const DIMS: usize = 16;

fn assert_searchable(e: &Engine, rows: u64) {
    assert_eq!(
        e.count("n", &live()).unwrap(),
        usize::try_from(rows).unwrap()
    );
    for i in (0..rows).step_by(37) {
        let hits = e.vector_search("n", &vector(i, DIMS), &live(), 10).unwrap();
        assert_eq!(hits.len(), 10);
        assert_eq!(hits[0].memory.id, format!("r{i}"));
    }
}

#[test]
fn sixty_four_workers_and_forty_eight_threads() {
    std::env::set_var("RAYON_NUM_THREADS", "64");
    assert_eq!(memini::pool::pool().unwrap().current_num_threads(), 64);
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(Some(dir.path()), &opts(DIMS)).unwrap();
    let rows = (0..6000)
        .map(|i| mem(&format!("r{i}"), "n", "row", Some(vector(i, DIMS))))
        .collect();
    e.upsert_many(rows).unwrap();
    assert_searchable(&e, 6000);

    std::thread::scope(|s| {
        for t in 0..48u64 {
            let e = &e;
            s.spawn(move || {
                for j in 0..40u64 {
                    if t % 2 == 0 {
                        let i = 6000 + t / 2 * 40 + j;
                        let m = mem(&format!("r{i}"), "n", "row", Some(vector(i, DIMS)));
                        e.upsert_many(vec![m]).unwrap();
                    } else {
                        let q = vector(t * 1000 + j, DIMS);
                        assert_eq!(e.vector_search("n", &q, &live(), 10).unwrap().len(), 10);
                        let qs: Vec<Vec<f32>> = (0..8).map(|x| vector(x + j, DIMS)).collect();
                        let refs: Vec<&[f32]> = qs.iter().map(Vec::as_slice).collect();
                        e.vector_search_many("n", &refs, &live(), 5).unwrap();
                    }
                }
            });
        }
    });
    let total = 6000 + 24 * 40;
    assert_searchable(&e, total);
    e.close().unwrap();

    // reopen: the checkpointed graph loads; then without it: rebuilt from rows on the pool
    let e = Engine::open(Some(dir.path()), &Options::default()).unwrap();
    assert_searchable(&e, total);
    e.close().unwrap();
    std::fs::remove_file(dir.path().join("vectors/manifest.json")).unwrap();
    let e = Engine::open(Some(dir.path()), &Options::default()).unwrap();
    assert_searchable(&e, total);
}
