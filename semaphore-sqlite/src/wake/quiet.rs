//! Whether the database changed, without a file watch: a connection of
//! the watch thread's own reads SQLite's `PRAGMA data_version`, which
//! moves with every commit of any other connection, this process's
//! included, and never misses one (a file's size and mtime can: an
//! overwritten WAL keeps its size, and mtimes are coarse).
//!
//! The watch thread rests the file watch during a burst of commits and
//! looks here once a `SETTLE` instead ([`watch`](super::watch)).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

/// A read-only connection to the database, for its data version.
pub(crate) struct DataVersion(Connection);

impl DataVersion {
    /// Opens `db` read-only; `None` if it cannot be (the watch then
    /// never rests).
    pub(crate) fn open(db: &Path) -> Option<Self> {
        Connection::open_with_flags(
            db,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()
        .map(Self)
    }

    /// The database's data version now; `None` if it cannot be read.
    pub(crate) fn read(&self) -> Option<i64> {
        self.0
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version moves with a commit of another connection, and only
    /// then.
    #[test]
    fn the_version_moves_with_another_connection_s_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("v.db");
        let writer = Connection::open(&db).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER);")
            .unwrap();
        let version = DataVersion::open(&db).expect("a read-only connection");
        let before = version.read().expect("a version");
        assert_eq!(version.read(), Some(before), "no commit, no move");
        writer.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let after = version.read().expect("a version");
        assert_ne!(after, before, "a commit moves it");
        assert_eq!(version.read(), Some(after));
    }
}
