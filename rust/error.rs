//! The one error type of the core. Every failure — bad input, missing rows, storage faults,
//! errors from redb, usearch or tantivy — becomes one of these variants; the Python binding
//! translates each variant to one class of the `memini.errors` tree in one place.
//!
//! - A failure reported by a library keeps that library's error as its [`source`]: an
//!   [`io::Error`] for file-system calls, redb's, tantivy's or usearch's error for theirs, so a
//!   caller tells a full disk from a refused permission by [`Error::io_kind`] (or by walking
//!   `source()`), never by matching messages.
//! - Errors are `Clone` (the typed causes are shared): one failed commit group hands the same
//!   error, cause included, to every writer in it.
//! - The enum is `#[non_exhaustive]`: match the kinds you handle and keep a catch-all arm.
//!
//! [`source`]: std::error::Error::source

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::Arc;

/// Result alias used across the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Asked between chunks of a long call (every [`INTERRUPT_EVERY`] rows or texts) whether to
/// go on: an error (e.g. [`Error::Interrupted`] on Ctrl-C) stops the call.
pub type Interrupt = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// Rows (or texts) between two [`Interrupt`] checks.
pub const INTERRUPT_EVERY: usize = 1024;

/// An [`Interrupt`] that never stops a call.
#[must_use]
pub fn uninterrupted() -> Interrupt {
    Arc::new(|| Ok(()))
}

/// Asks `interrupt` every [`INTERRUPT_EVERY`] items (at item `i`).
///
/// # Errors
/// The interrupt's.
pub fn check_every(interrupt: &Interrupt, i: usize) -> Result<()> {
    if i.is_multiple_of(INTERRUPT_EVERY) {
        interrupt()
    } else {
        Ok(())
    }
}

/// Every error the core reports.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The memory does not exist (in the namespace asked for).
    NotFound(String),
    /// The write collides with existing state (an id living in another namespace).
    Conflict(String),
    /// Malformed or out-of-range input; the message names the fix.
    InvalidArgument(String),
    /// A vector length, or the dims/metric of a reopen, differs from the store's.
    DimensionMismatch(String),
    /// The store is closed (or was opened before a fork, in this child).
    Closed,
    /// Another live store holds the directory.
    Locked(String),
    /// The row store is damaged.
    Corruption(String),
    /// A file-system call failed: `source`'s kind tells a full disk (`StorageFull`) from a
    /// refused permission (`PermissionDenied`), a read-only file system, ...
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        source: Arc<io::Error>,
    },
    /// The row store (redb) failed; damage it reports is [`Error::Corruption`] instead.
    RowStore {
        /// What was being done.
        context: String,
        /// redb's error (an I/O failure is its `source`).
        source: Arc<redb::Error>,
    },
    /// The keyword index (tantivy) failed.
    KeywordIndex {
        /// What was being done.
        context: String,
        /// tantivy's error.
        source: tantivy::TantivyError,
    },
    /// The vector index (usearch) failed.
    VectorIndex {
        /// What was being done.
        context: String,
        /// usearch's error (a `cxx::Exception`).
        source: Arc<dyn StdError + Send + Sync>,
    },
    /// Any other storage or index failure, with no library error beneath it (an index out of
    /// step with the rows, a lost worker thread, a record that cannot be encoded, ...).
    Storage(String),
    /// The caller asked a long call to stop (Ctrl-C): nothing of the call's write is stored.
    Interrupted,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound(m)
            | Self::Conflict(m)
            | Self::InvalidArgument(m)
            | Self::DimensionMismatch(m)
            | Self::Locked(m)
            | Self::Corruption(m)
            | Self::Storage(m) => f.write_str(m),
            Self::Closed => f.write_str("store is closed"),
            Self::Interrupted => f.write_str("interrupted"),
            Self::Io { context, source } => write!(f, "{context}: {source}"),
            Self::RowStore { context, source } => write!(f, "{context}: {source}"),
            Self::KeywordIndex { context, source } => write!(f, "{context}: {source}"),
            Self::VectorIndex { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl StdError for Error {
    /// The library error beneath a storage failure (the `io::Error` itself for [`Error::Io`]).
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Io { source, .. } => Some(&**source),
            Self::RowStore { source, .. } => Some(&**source),
            Self::KeywordIndex { source, .. } => Some(source),
            Self::VectorIndex { source, .. } => Some(&**source),
            _ => None,
        }
    }
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

    /// A storage failure with no library error beneath it, with what was being done.
    pub fn storage(context: &str, err: impl fmt::Display) -> Self {
        Self::Storage(format!("{context}: {err}"))
    }

    /// A file-system call that failed while doing `context`.
    pub fn io(context: impl Into<String>, err: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source: Arc::new(err),
        }
    }

    /// A tantivy failure while doing `context`.
    pub fn keyword(context: impl Into<String>, err: impl Into<tantivy::TantivyError>) -> Self {
        Self::KeywordIndex {
            context: context.into(),
            source: err.into(),
        }
    }

    /// A usearch failure while doing `context`.
    pub fn vector(context: impl Into<String>, err: impl StdError + Send + Sync + 'static) -> Self {
        Self::VectorIndex {
            context: context.into(),
            source: Arc::new(err),
        }
    }

    /// The same failure, its message prefixed with `prefix` (what it made fail): the kind and
    /// the cause are kept; a kind that is not a storage failure becomes [`Error::Storage`].
    #[must_use]
    pub fn within(self, prefix: &str) -> Self {
        let wrap = |context: String| format!("{prefix}: {context}");
        match self {
            Self::Corruption(m) => Self::Corruption(wrap(m)),
            Self::Io { context, source } => Self::Io {
                context: wrap(context),
                source,
            },
            Self::RowStore { context, source } => Self::RowStore {
                context: wrap(context),
                source,
            },
            Self::KeywordIndex { context, source } => Self::KeywordIndex {
                context: wrap(context),
                source,
            },
            Self::VectorIndex { context, source } => Self::VectorIndex {
                context: wrap(context),
                source,
            },
            other => Self::Storage(wrap(other.to_string())),
        }
    }

    /// Whether this is a failure of the storage underneath (disk, row store, indexes), not
    /// of the request: a write that fails so fails its whole commit group.
    #[must_use]
    pub fn is_storage_fault(&self) -> bool {
        matches!(
            self,
            Self::Corruption(_)
                | Self::Io { .. }
                | Self::RowStore { .. }
                | Self::KeywordIndex { .. }
                | Self::VectorIndex { .. }
                | Self::Storage(_)
                // stopped after some of its rows were written: the group must not commit
                | Self::Interrupted
        )
    }

    /// The operating system's error beneath this one, wherever it is in the chain of causes
    /// (redb and tantivy keep their I/O errors out of `source()`, so they are looked for
    /// inside their errors).
    #[must_use]
    pub fn io_error(&self) -> Option<&io::Error> {
        let mut next = StdError::source(self);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return Some(io);
            }
            if let Some(io) = e.downcast_ref::<Arc<io::Error>>() {
                return Some(io);
            }
            if let Some(io) = e
                .downcast_ref::<tantivy::TantivyError>()
                .and_then(tantivy_io)
            {
                return Some(io);
            }
            if let Some(redb::Error::Io(io)) = e.downcast_ref::<redb::Error>() {
                return Some(io);
            }
            next = e.source();
        }
        None
    }

    /// The kind of the operating system's error beneath this one (e.g. `StorageFull`,
    /// `PermissionDenied`, `ReadOnlyFilesystem`), if any.
    #[must_use]
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        self.io_error().map(io::Error::kind)
    }
}

/// The I/O error a tantivy error carries, if any.
fn tantivy_io(e: &tantivy::TantivyError) -> Option<&io::Error> {
    use tantivy::directory::error::{OpenDirectoryError, OpenReadError, OpenWriteError};
    use tantivy::TantivyError as T;
    match e {
        T::IoError(io)
        | T::OpenReadError(OpenReadError::IoError { io_error: io, .. })
        | T::OpenWriteError(OpenWriteError::IoError { io_error: io, .. })
        | T::OpenDirectoryError(OpenDirectoryError::IoError { io_error: io, .. }) => Some(io),
        _ => None,
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Self::io("I/O error", e)
    }
}

/// Maps redb's many error types: corruption is reported as such, everything else as a row
/// store failure keeping redb's error.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                let e: redb::Error = e.into();
                match e {
                    redb::Error::Corrupted(msg) => Self::Corruption(format!("row store is corrupted: {msg}")),
                    other => Self::RowStore { context: "row store".into(), source: Arc::new(other) },
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn the_io_kind_is_found_beneath_each_library() {
        let full = || io::Error::from(io::ErrorKind::StorageFull);
        let cases = [
            Error::from(full()),
            Error::keyword("keyword index: commit", full()),
            Error::keyword(
                "keyword index: open",
                tantivy::TantivyError::OpenWriteError(
                    tantivy::directory::error::OpenWriteError::wrap_io_error(
                        full(),
                        "seg.idx".into(),
                    ),
                ),
            ),
            Error::from(redb::StorageError::Io(full())),
            Error::from(full()).within("write failed, nothing from it was stored"),
        ];
        for e in cases {
            assert_eq!(e.io_kind(), Some(io::ErrorKind::StorageFull), "{e}");
            assert!(e.is_storage_fault(), "{e}");
        }
        assert_eq!(Error::storage("worker pool", "gone").io_kind(), None);
        assert_eq!(Error::invalid("k must be >= 1").io_kind(), None);
    }

    #[test]
    fn a_prefixed_error_keeps_its_kind_its_cause_and_its_message() {
        let e = Error::io(
            "I/O error",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        let msg = e.to_string();
        let w = e.clone().within("write failed, nothing from it was stored");
        assert_eq!(
            w.to_string(),
            format!("write failed, nothing from it was stored: {msg}")
        );
        assert!(matches!(w, Error::Io { .. }));
        let io = w.source().unwrap().downcast_ref::<io::Error>().unwrap();
        assert_eq!(io.kind(), io::ErrorKind::PermissionDenied);
        let closed = Error::Closed.within("write failed");
        assert!(matches!(&closed, Error::Storage(m) if m == "write failed: store is closed"));
    }
}
