//! Storage faults: each gives a documented, non-panicking error, and a file
//! the store could not use is left as it was.
//!
//! Read-only cases use `chattr +i` (immutable), which binds even root;
//! where the file system does not support it the case says so and fails.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::{Error, Pool, PoolId, SqliteOptions, SqliteStore};

/// Sets or clears the immutable attribute; removed again on drop.
struct Immutable<'a>(&'a Path);

impl<'a> Immutable<'a> {
    fn set(path: &'a Path) -> Self {
        let status = Command::new("chattr").arg("+i").arg(path).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "chattr +i {path:?} failed: this test needs a file system with immutable files"
        );
        Immutable(path)
    }
}

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

fn not_retryable_storage(err: &Error) -> bool {
    matches!(
        err,
        Error::Storage {
            retryable: false,
            ..
        }
    ) && !err.is_retryable()
}

/// A file with one pool of 2 slots, one of them held for an hour; the
/// store that made it, for a test that keeps it open.
async fn ready_file(path: &Path) -> Arc<SqliteStore> {
    let store = Arc::new(SqliteStore::open(path).unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(2).await.unwrap();
    let _kept = pool
        .try_borrow(Duration::from_secs(3600))
        .await
        .unwrap()
        .forget();
    store
}

/// Every file under `dir` (the holders' directory too) with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for path in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        if path.is_dir() {
            files.extend(snapshot(&path));
        } else {
            files.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_file_is_a_storage_error_and_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    ready_file(&path).await;
    let before = snapshot(dir.path());
    let _ro = Immutable::set(&path);
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(not_retryable_storage(&err), "{err:?}");
    assert_eq!(snapshot(dir.path()), before, "the files changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_directory_is_a_storage_error_and_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    ready_file(&path).await;
    let before = snapshot(dir.path());
    let _ro = Immutable::set(dir.path());
    match SqliteStore::open(&path) {
        Err(err) => assert!(not_retryable_storage(&err), "{err:?}"),
        Ok(store) => {
            let pool = Pool::new(Arc::new(store), PoolId::from_name("p"));
            let err = pool.try_borrow(Duration::from_secs(1)).await.unwrap_err();
            assert!(not_retryable_storage(&err), "{err:?}");
        }
    }
    assert_eq!(snapshot(dir.path()), before, "the files changed");

    let fresh = dir.path().join("new.db");
    let err = SqliteStore::open(&fresh).unwrap_err();
    assert!(not_retryable_storage(&err), "{err:?}");
    assert!(!fresh.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_file_is_refused_and_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    ready_file(&path).await;
    // Fold the WAL in, then cut the file in the middle of its pages.
    {
        let conn = semaphore_sqlite::rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let before = snapshot(dir.path());
    let result = SqliteStore::open(&path);
    match result {
        Err(err) => assert!(
            not_retryable_storage(&err) || matches!(err, Error::SchemaMismatch { .. }),
            "{err:?}"
        ),
        Ok(store) => {
            // SQLite reads pages lazily: the damage shows at first use.
            let pool = Pool::new(Arc::new(store), PoolId::from_name("p"));
            let err = pool.try_borrow(Duration::from_secs(1)).await.unwrap_err();
            assert!(not_retryable_storage(&err), "{err:?}");
        }
    }
    assert_eq!(snapshot(dir.path()), before, "the files changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_deleted_under_a_running_store_fails_instead_of_writing_to_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store, PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = pool.try_borrow(Duration::from_secs(1)).await.unwrap_err();
    assert!(not_retryable_storage(&err), "{err:?}");
    assert!(err.to_string().contains("borrow"), "{err}");
}

/// with its `-wal` and `-shm` files deleted, a store
/// would write to unlinked files that no other process sees, and report
/// success. It fails instead, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_deleted_under_a_running_store_fails_instead_of_writing_to_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store, PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let mut lease = pool.try_borrow(Duration::from_secs(30)).await.unwrap();
    assert_eq!((lease.position, lease.token), (0, 1));
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(dir.path().join(format!("s.db{suffix}"))).unwrap();
    }
    let err = lease.renew(Duration::from_secs(30)).await.unwrap_err();
    assert!(not_retryable_storage(&err), "{err:?}");
    assert!(
        err.chain().to_string().contains("s.db-wal"),
        "{}",
        err.chain()
    );
    let err = lease.release().await.unwrap_err();
    assert!(not_retryable_storage(&err), "{err:?}");
}

/// a poll interval that would spin a core (zero) or
/// outlive the queue heartbeat is refused, naming the field.
#[test]
fn poll_interval_out_of_range_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    for interval in [
        Duration::ZERO,
        Duration::from_millis(9),
        Duration::from_secs(2),
    ] {
        let options = SqliteOptions::default().poll_interval(interval);
        match SqliteStore::open_with(&path, options) {
            Err(Error::InvalidArgument { field, allowed, .. }) => {
                assert_eq!(field, "poll_interval");
                assert_eq!(allowed, "10ms..=1.5s");
            }
            other => panic!("{interval:?} was not refused: {other:?}"),
        }
    }
    assert!(!path.exists(), "a refused open created the file");
    let options = SqliteOptions::default().poll_interval(Duration::from_millis(10));
    SqliteStore::open_with(&path, options).unwrap();
}

/// The writers' queue lives in two side files (the lock and its
/// turnstile), made at open; with the queue off there are none, and both
/// kinds of handle share the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writers_queue_side_file_is_made_only_when_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let side = dir.path().join("q.db-semaphore-writer");
    let turnstile = dir.path().join("q.db-semaphore-turnstile");
    let plain = Arc::new(
        SqliteStore::open_with(&path, SqliteOptions::default().queue_writers(false)).unwrap(),
    );
    assert!(!side.exists() && !turnstile.exists());
    let queued = Arc::new(SqliteStore::open(&path).unwrap());
    assert!(side.exists() && turnstile.exists());

    let id = PoolId::from_name("q");
    let (on_plain, on_queued) = (Pool::new(plain, id), Pool::new(queued, id));
    on_plain.register(2).await.unwrap();
    let ttl = Duration::from_secs(60);
    let a = on_plain.borrow(ttl, Duration::ZERO).await.unwrap();
    let b = on_queued.borrow(ttl, Duration::ZERO).await.unwrap();
    assert_eq!((a.position, b.position), (0, 1));
    assert_eq!(on_queued.inspect().await.unwrap().in_use, 2);
}

/// The `-wal` file deleted while another handle holds the database open
/// (an operator "cleaning up", a backup restored over it): opening the file
/// again is a storage error that says the file was replaced or lost
/// (not retryable), never a schema mismatch.
#[tokio::test]
async fn a_wal_deleted_under_a_holder_is_a_storage_error_not_a_schema_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.db");
    let _holder = ready_file(&path).await;
    let wal = dir.path().join("held.db-wal");
    assert!(wal.exists(), "the holder's WAL file");
    std::fs::remove_file(&wal).unwrap();
    match SqliteStore::open(&path) {
        Err(e @ Error::Storage { .. }) => {
            assert!(not_retryable_storage(&e), "{e}");
            let shown = e.chain().to_string();
            assert!(shown.contains("-wal"), "{shown}");
        }
        other => panic!("{other:?}"),
    }
}
