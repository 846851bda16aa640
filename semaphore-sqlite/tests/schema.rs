//! Opening files the store cannot use, and storage faults: each gives the
//! documented error and leaves the file as it was (rule "Stores").

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::rusqlite::Connection;
use semaphore_sqlite::{Error, Pool, PoolId, SqliteOptions, SqliteStore};

fn file_with(dir: &Path, sql: &str) -> std::path::PathBuf {
    let path = dir.join("app.db");
    Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    path
}

fn assert_refused_unchanged(path: &Path, expect: impl Fn(&Error) -> bool) {
    let before = std::fs::read(path).unwrap();
    let err = SqliteStore::open(path).unwrap_err();
    assert!(expect(&err), "unexpected error: {err:?}");
    assert_eq!(std::fs::read(path).unwrap(), before, "the file changed");
    assert!(!path.with_extension("db-wal").exists(), "a WAL was created");
}

#[test]
fn drifted_table_shape_is_refused_and_file_is_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    drop(SqliteStore::open(&path).unwrap());
    // Back to a rollback journal so that only the store could write the file,
    // then drift one column.
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    conn.execute_batch("ALTER TABLE semaphore_pools RENAME COLUMN count TO size")
        .unwrap();
    drop(conn);
    assert_refused_unchanged(
        &path,
        |e| matches!(e, Error::SchemaMismatch { found, .. } if found.contains("size")),
    );
}

#[test]
fn newer_schema_version_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    conn.execute("UPDATE semaphore_store SET schema_version = 6", [])
        .unwrap();
    drop(conn);
    assert_refused_unchanged(
        &path,
        |e| matches!(e, Error::SchemaMismatch { found, .. } if found.contains("newer")),
    );
}

#[test]
fn prefixed_tables_without_a_version_are_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(
        dir.path(),
        "CREATE TABLE semaphore_pools (pool BLOB, count INTEGER);",
    );
    assert_refused_unchanged(&path, |e| matches!(e, Error::SchemaMismatch { .. }));
}

#[test]
fn garbage_file_is_a_storage_error_not_retryable_and_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    assert_refused_unchanged(&path, |e| {
        matches!(
            e,
            Error::Storage {
                retryable: false,
                ..
            }
        )
    });
}

#[test]
fn application_tables_and_user_version_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(
        dir.path(),
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO jobs (name) VALUES ('export');
         PRAGMA user_version = 42;",
    );
    drop(SqliteStore::open(&path).unwrap());
    drop(SqliteStore::open(&path).unwrap()); // and again, on the existing tables
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let name: String = conn
        .query_row("SELECT name FROM jobs", [], |r| r.get(0))
        .unwrap();
    assert_eq!((version, name.as_str()), (42, "export"));
    let stored: i64 = conn
        .query_row("SELECT schema_version FROM semaphore_store", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, 5);
}

/// The tables as version 1 of this library wrote them, frozen here so that
/// the migration is tested against the real thing.
const VERSION_1: &str = "
CREATE TABLE semaphore_store (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    last_token INTEGER NOT NULL
);
CREATE TABLE semaphore_pools (pool BLOB PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE semaphore_leases (
    pool BLOB NOT NULL,
    position INTEGER NOT NULL,
    lease BLOB NOT NULL UNIQUE,
    token INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (pool, position)
) WITHOUT ROWID;
CREATE INDEX semaphore_leases_expiry ON semaphore_leases (pool, expires_at);
CREATE TABLE semaphore_waiters (
    pool BLOB NOT NULL,
    waiter BLOB NOT NULL,
    ticket INTEGER NOT NULL,
    alive_until INTEGER NOT NULL,
    PRIMARY KEY (pool, waiter)
) WITHOUT ROWID;
INSERT INTO semaphore_store VALUES (1, 1, 41);
";

/// A version 1 file is migrated in place: its pools, leases and token
/// counter survive, and the new columns work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_file_is_migrated_keeping_pools_leases_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with(dir.path(), VERSION_1);
    let pool_id = PoolId::from_name("old");
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO semaphore_pools VALUES (?1, 2)",
        [pool_id.as_uuid().as_bytes()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO semaphore_leases VALUES (?1, 0, ?2, 41, 253402300799000)",
        [pool_id.as_uuid().as_bytes(), &uuid_bytes()],
    )
    .unwrap();
    drop(conn);

    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store, pool_id);
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        1,
        "the old lease kept"
    );
    let options = semaphore_sqlite::BorrowOptions::new().owner("new").key("k");
    let lease = pool
        .borrow_with(Duration::from_secs(60), Duration::ZERO, options)
        .await
        .unwrap();
    assert_eq!((lease.position, lease.token), (1, 42));
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders[0].owner, None);
    assert_eq!(holders[1].owner.as_deref(), Some("new"));
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT schema_version FROM semaphore_store", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, 5);
}

fn uuid_bytes() -> [u8; 16] {
    *semaphore_sqlite::LeaseId::new().as_uuid().as_bytes()
}

/// A file that says version 1 but whose tables drifted is refused by the
/// migration's final shape check, and left byte-for-byte unchanged.
#[test]
fn drifted_version_1_file_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let drifted = VERSION_1.replace("count INTEGER NOT NULL", "size INTEGER NOT NULL");
    let path = file_with(dir.path(), &drifted);
    assert_refused_unchanged(
        &path,
        |e| matches!(e, Error::SchemaMismatch { found, .. } if found.contains("size")),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_held_past_busy_timeout_is_retryable_storage_not_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(50));
    let store = Arc::new(SqliteStore::open_with(&path, options).unwrap());
    let pool = Pool::new(store, PoolId::from_name("busy"));
    pool.register(1).await.unwrap();

    let blocker = Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = pool.try_borrow(Duration::from_secs(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage {
                retryable: true,
                ..
            }
        ),
        "expected a retryable storage error, got {err:?}"
    );
    assert!(err.is_retryable());
    let code = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<semaphore_sqlite::rusqlite::Error>())
        .and_then(|e| e.sqlite_error_code());
    assert_eq!(
        code,
        Some(semaphore_sqlite::rusqlite::ErrorCode::DatabaseBusy)
    );
    blocker.execute_batch("ROLLBACK").unwrap();

    // Nothing was half done: the slot is free and the next borrow gets it.
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    assert_eq!(
        pool.try_borrow(Duration::from_secs(1))
            .await
            .unwrap()
            .position,
        0
    );
}

/// A path that names no shared file (empty, or SQLite's `:memory:`) is
/// refused, naming `path`: SQLite would open a private database there
/// that no other process sees (Python's `SqliteStore("")` said something
/// garbled about a missing `-wal` file).
#[test]
fn a_path_that_names_no_file_is_refused_naming_it() {
    for path in ["", ":memory:"] {
        match SqliteStore::open(path) {
            Err(Error::InvalidArgument { field, got, .. }) => {
                assert_eq!(field, "path");
                assert_eq!(got, format!("{path:?}"));
            }
            other => panic!("{path:?}: {other:?}"),
        }
    }
}
