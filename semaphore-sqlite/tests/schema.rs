//! Opening files the store cannot use, and storage faults: each gives the
//! documented error and leaves the file as it was (SPEC "SQLite store", R14).

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
    conn.execute("UPDATE semaphore_store SET schema_version = 2", [])
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
    assert_eq!(stored, 1);
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
