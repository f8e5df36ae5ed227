//! The one error type of the core. Every failure — bad input, missing rows, storage faults,
//! errors from redb, usearch or tantivy — becomes one of these variants; the Python binding
//! translates each variant to one class of the `memini.errors` tree in one place.

use thiserror::Error;

/// Result alias used across the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error the core reports.
#[derive(Debug, Error)]
pub enum Error {
    /// The memory does not exist (in the namespace asked for).
    #[error("{0}")]
    NotFound(String),
    /// The write collides with existing state (an id living in another namespace).
    #[error("{0}")]
    Conflict(String),
    /// Malformed or out-of-range input; the message names the fix.
    #[error("{0}")]
    InvalidArgument(String),
    /// A vector length, or the dims/metric of a reopen, differs from the store's.
    #[error("{0}")]
    DimensionMismatch(String),
    /// The store is closed (or was opened before a fork, in this child).
    #[error("store is closed")]
    Closed,
    /// Another live store holds the directory.
    #[error("{0}")]
    Locked(String),
    /// The row store is damaged.
    #[error("{0}")]
    Corruption(String),
    /// Any other storage or index failure (I/O, full disk, read-only directory, ...).
    #[error("{0}")]
    Storage(String),
}

impl Error {
    /// Shorthand for `Error::InvalidArgument`.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidArgument(msg.into())
    }

    /// The standard "memory not found" error.
    #[must_use]
    pub fn not_found(namespace: &str, id: &str) -> Self {
        Self::NotFound(format!(
            "memory not found: id {id:?} in namespace {namespace:?}"
        ))
    }

    /// Wraps a storage-layer failure with what was being done.
    pub fn storage(context: &str, err: impl std::fmt::Display) -> Self {
        Self::Storage(format!("{context}: {err}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Storage(format!("I/O error: {e}"))
    }
}

/// Maps redb's many error types: corruption is reported as such, everything else as storage.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                let e: redb::Error = e.into();
                match e {
                    redb::Error::Corrupted(msg) => Self::Corruption(format!("row store is corrupted: {msg}")),
                    other => Self::Storage(format!("row store: {other}")),
                }
            }
        }
    )*};
}
from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::CompactionError,
    redb::SetDurabilityError
);

impl From<bincode::Error> for Error {
    fn from(e: bincode::Error) -> Self {
        Self::Corruption(format!("row store record cannot be decoded: {e}"))
    }
}

/// Failures of background work nobody awaits (checkpoints, keyword folds): how many since the
/// store was opened and the last one's error. Each is logged too; `stats` is where they show.
#[derive(Default)]
pub struct Failures(parking_lot::Mutex<(u64, Option<String>)>);

impl Failures {
    /// Logs `e` (with what failed) and counts it.
    pub fn record(&self, what: &str, e: &Error) {
        log::error!("{what}: {e}");
        let mut f = self.0.lock();
        f.0 += 1;
        f.1 = Some(e.to_string());
    }

    /// How many failed, and the last one's error.
    #[must_use]
    pub fn get(&self) -> (u64, Option<String>) {
        self.0.lock().clone()
    }
}
