//! Where a store's `rows.redb` bytes go: per table, the pages it holds, the bytes stored in
//! them and the unused bytes inside those pages (fragmentation), then the whole file's
//! allocated pages against its size (the rest is free space redb keeps after copy-on-write).
//!
//! `cargo run --release --example diskstats -- STORE/rows.redb ROWS` (ROWS divides every
//! figure: bytes per row). The store must be closed.

#![allow(
    clippy::cast_precision_loss,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measurement script: byte counts as floats, fixed inputs"
)]

use redb::{ReadableDatabase, ReadableTableMetadata, TableHandle};

const PAGE: f64 = 4096.0;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: diskstats STORE/rows.redb ROWS";
    let path = args.get(1).expect(usage);
    let rows: f64 = args.get(2).expect(usage).parse().expect(usage);
    let db = redb::Database::open(path).expect("open the closed store's rows.redb");
    let read = db.begin_read().unwrap();
    println!("| table | entries | pages, B/row | stored, B/row | unused in its pages, B/row |");
    println!("|---|---|---|---|---|");
    for handle in read.list_tables().unwrap() {
        let name = handle.name().to_owned();
        let table = read.open_untyped_table(handle).unwrap();
        let s = table.stats().unwrap();
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} |",
            table.len().unwrap(),
            (s.leaf_pages() + s.branch_pages()) as f64 * PAGE / rows,
            s.stored_bytes() as f64 / rows,
            s.fragmented_bytes() as f64 / rows,
        );
    }
    drop(read);
    let write = db.begin_write().unwrap();
    let s = write.stats().unwrap();
    let file = std::fs::metadata(path).unwrap().len() as f64;
    println!(
        "\nfile {:.0} B/row: pages in use {:.0} B/row (stored {:.0}, unused in them {:.0}), \
         free pages {:.0} B/row",
        file / rows,
        s.allocated_pages() as f64 * PAGE / rows,
        s.stored_bytes() as f64 / rows,
        s.fragmented_bytes() as f64 / rows,
        (file - s.allocated_pages() as f64 * PAGE) / rows,
    );
    write.abort().unwrap();
}
