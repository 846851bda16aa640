//! A version 2 file (this library's schema until version 3 dropped two
//! indexes) is migrated in place: pools, leases with their labels and keys,
//! queued heads and the token counter survive, and the indexes are gone.

use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::rusqlite::Connection;
use semaphore_sqlite::{BorrowOptions, LeaseId, Pool, PoolId, SqliteStore};

/// The tables as version 2 of this library wrote them, frozen here so that
/// the migration is tested against the real thing.
const VERSION_2: &str = "
CREATE TABLE semaphore_store (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    last_token INTEGER NOT NULL
);
CREATE TABLE semaphore_pools (
    pool BLOB PRIMARY KEY,
    count INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE semaphore_leases (
    pool BLOB NOT NULL,
    position INTEGER NOT NULL,
    lease BLOB NOT NULL UNIQUE,
    token INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    owner TEXT,
    borrow_key TEXT,
    PRIMARY KEY (pool, position)
) WITHOUT ROWID;
CREATE INDEX semaphore_leases_expiry ON semaphore_leases (pool, expires_at);
CREATE UNIQUE INDEX semaphore_leases_key ON semaphore_leases (pool, borrow_key)
    WHERE borrow_key IS NOT NULL;
CREATE TABLE semaphore_waiters (
    pool BLOB NOT NULL,
    waiter BLOB NOT NULL,
    ticket INTEGER NOT NULL,
    alive_until INTEGER NOT NULL,
    pid INTEGER,
    pid_ns TEXT,
    PRIMARY KEY (pool, waiter)
) WITHOUT ROWID;
INSERT INTO semaphore_store VALUES (1, 2, 77);
";

/// Far in the future (year 9999), in unix ms: the old leases stay active.
const FAR: i64 = 253_402_300_799_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_file_is_migrated_keeping_leases_keys_heads_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let id = PoolId::from_name("v2");
    let (plain, keyed) = (LeaseId::new(), LeaseId::new());
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(VERSION_2).unwrap();
        let pool = id.as_uuid().as_bytes();
        conn.execute("INSERT INTO semaphore_pools VALUES (?1, 3)", [pool])
            .unwrap();
        conn.execute(
            "INSERT INTO semaphore_leases VALUES (?1, 0, ?2, 75, ?3, 'old-owner', NULL)",
            (pool, plain.as_uuid().as_bytes(), FAR),
        )
        .unwrap();
        conn.execute(
            "INSERT INTO semaphore_leases VALUES (?1, 1, ?2, 77, ?3, NULL, 'job-9')",
            (pool, keyed.as_uuid().as_bytes(), FAR),
        )
        .unwrap();
        conn.execute(
            "INSERT INTO semaphore_waiters VALUES (?1, ?2, 1, ?3, NULL, NULL)",
            (pool, LeaseId::new().as_uuid().as_bytes(), FAR),
        )
        .unwrap();
    }

    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store.clone(), id);
    let holders = pool.holders().await.unwrap();
    let kept: Vec<_> = holders
        .iter()
        .map(|h| {
            (
                h.lease.position,
                h.lease.token,
                h.owner.as_deref(),
                h.key.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            (0, 75, Some("old-owner"), None),
            (1, 77, None, Some("job-9"))
        ]
    );
    assert_eq!(
        store.queue_heads(id).await.unwrap(),
        1,
        "the queued head kept"
    );

    // The key index came through the rebuild: a retry gets the same lease.
    let ttl = Duration::from_secs(60);
    let retry = pool
        .borrow_with(ttl, Duration::ZERO, BorrowOptions::new().key("job-9"))
        .await
        .unwrap()
        .forget();
    assert_eq!((retry.id, retry.token), (keyed, 77));
    // Returns find their rows without the lease id index.
    assert!(pool.return_lease(plain).await.unwrap());
    assert!(!pool.return_lease(plain).await.unwrap());

    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT schema_version FROM semaphore_store", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, 5);
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'semaphore_leases'",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes, ["semaphore_leases_key"]);
    drop(conn);

    // Tokens go on above the migrated counter.
    let next = pool.borrow(ttl, Duration::ZERO).await.unwrap();
    assert!(
        next.token > 77,
        "token {} not above the counter",
        next.token
    );
}
