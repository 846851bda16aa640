//! SQLite store against the raw SQLite write-transaction rate on the same
//! disk with the same settings, in the same run (BENCHMARKS.md lines 3, 6
//! and 7).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rusqlite::Connection;
use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore, Synchronous};
use tokio::runtime::{Builder, Runtime};

const TTL: Duration = Duration::from_secs(600);

/// The anchor: `BEGIN IMMEDIATE; UPDATE one row; COMMIT`, WAL, the given
/// `synchronous`. A borrow + return is two such transactions, so the time
/// of one pair at the ceiling is twice this.
fn raw_txn(dir: &Path, synchronous: &str) -> Connection {
    let conn = Connection::open(dir.join(format!("raw-{synchronous}.db"))).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", synchronous)
        .unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v INTEGER);
         INSERT OR IGNORE INTO t VALUES (1, 0);",
    )
    .unwrap();
    conn
}

/// The files a raw transaction of line 3's prototype stats and locks as
/// the store does: its database's three files, the writers' lock and
/// turnstile, a holder file.
struct Guarded {
    files: [std::path::PathBuf; 3],
    writer: std::fs::File,
    turnstile: std::fs::File,
    holder: std::path::PathBuf,
}

impl Guarded {
    fn new(dir: &Path) -> Self {
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.join(name))
                .unwrap()
        };
        drop(open("raw-holder"));
        Self {
            files: ["raw-NORMAL.db", "raw-NORMAL.db-wal", "raw-NORMAL.db-shm"]
                .map(|name| dir.join(name)),
            writer: open("raw-writer"),
            turnstile: open("raw-turnstile"),
            holder: dir.join("raw-holder"),
        }
    }

    /// A borrow's look at its holder file.
    fn holder(&self) {
        std::fs::metadata(&self.holder).unwrap();
    }

    /// The anchor's transaction, after the files check and through the
    /// writers' turnstile and lock.
    fn transaction(&self, raw: &Connection) {
        for file in &self.files {
            std::fs::metadata(file).unwrap();
        }
        self.turnstile.lock().unwrap();
        self.writer.lock().unwrap();
        self.turnstile.unlock().unwrap();
        raw.execute_batch("BEGIN IMMEDIATE; UPDATE t SET v = v + 1 WHERE id = 1; COMMIT;")
            .unwrap();
        self.writer.unlock().unwrap();
    }
}

fn store_pool(dir: &Path, name: &str, sync: Synchronous, count: u32, rt: &Runtime) -> Pool {
    let options = SqliteOptions::default().synchronous(sync);
    let store = SqliteStore::open_with(dir.join(format!("{name}.db")), options).unwrap();
    let pool = Pool::new(Arc::new(store), PoolId::from_name(name));
    rt.block_on(pool.register(count)).unwrap();
    pool
}

fn pair_rate(c: &mut Criterion, group_name: &str, sync: Synchronous, pragma: &str) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group(group_name);
    let raw = raw_txn(dir.path(), pragma);
    group.bench_function("anchor_raw_pair", |b| {
        b.iter(|| {
            for _ in 0..2 {
                raw.execute_batch("BEGIN IMMEDIATE; UPDATE t SET v = v + 1 WHERE id = 1; COMMIT;")
                    .unwrap();
            }
        })
    });
    if pragma == "NORMAL" {
        // Line 3's prototype: the anchor with the system calls the store's
        // guarantees make around each transaction (the files check, the
        // writers' queue) and each borrow (its holder file), no semaphore.
        let guarded = Guarded::new(dir.path());
        group.bench_function("prototype_raw_pair_with_checks", |b| {
            b.iter(|| {
                guarded.holder();
                for _ in 0..2 {
                    guarded.transaction(&raw);
                }
            })
        });
    }
    let pool = store_pool(dir.path(), "pairs", sync, 4, &rt);
    group.bench_function("sqlite_pool_pair", |b| {
        b.to_async(&rt).iter(|| async {
            pool.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    let current = Builder::new_current_thread().enable_all().build().unwrap();
    group.bench_function("sqlite_pool_pair_current_thread", |b| {
        b.to_async(&current).iter(|| async {
            pool.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    group.finish();
}

/// Line 3: borrow + return pairs in one process, synchronous=NORMAL.
fn pairs_normal(c: &mut Criterion) {
    pair_rate(c, "3_sqlite_pair_normal", Synchronous::Normal, "NORMAL");
}

/// Line 7: the same with synchronous=FULL.
fn pairs_full(c: &mut Criterion) {
    pair_rate(c, "7_sqlite_pair_full", Synchronous::Full, "FULL");
}

/// Line 6a: a borrow at count 1000 with 999 held, against count 4 with none.
fn scaling_count(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("6a_sqlite_count_1000_999_held");
    let small = store_pool(dir.path(), "small", Synchronous::Normal, 4, &rt);
    group.bench_function("anchor_count_4", |b| {
        b.to_async(&rt).iter(|| async {
            small
                .try_borrow(TTL)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        })
    });
    let big = store_pool(dir.path(), "big", Synchronous::Normal, 1000, &rt);
    let held: Vec<_> = rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..999 {
            held.push(big.try_borrow(TTL).await.unwrap().forget());
        }
        held
    });
    group.bench_function("count_1000_999_held", |b| {
        b.to_async(&rt).iter(|| async {
            big.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    group.finish();
    drop(held);
}

/// Line 6b: a borrow in a file with 100,000 pools, against a file with one.
fn scaling_pools(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("6b_sqlite_100k_pools");
    let one = store_pool(dir.path(), "one", Synchronous::Normal, 4, &rt);
    group.bench_function("anchor_1_pool", |b| {
        b.to_async(&rt).iter(|| async {
            one.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    let many = store_pool(dir.path(), "many", Synchronous::Normal, 4, &rt);
    {
        let conn = Connection::open(dir.path().join("many.db")).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        let mut insert = conn
            .prepare("INSERT INTO semaphore_pools (pool, count) VALUES (?1, 4)")
            .unwrap();
        for i in 0..100_000u32 {
            insert
                .execute([PoolId::from_name(&format!("p{i}")).as_uuid().as_bytes()])
                .unwrap();
        }
        drop(insert);
        conn.execute_batch("COMMIT").unwrap();
    }
    group.bench_function("100k_pools", |b| {
        b.to_async(&rt).iter(|| async {
            many.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    pairs_normal,
    pairs_full,
    scaling_count,
    scaling_pools
);
criterion_main!(benches);
