//! PostgreSQL store against its anchors on the same throwaway server (the
//! default durability: `fsync` and `synchronous_commit` on), over
//! the same kind of connection, in the same run (BENCHMARKS.md lines 8, 9).
//!
//! - Line 8: a borrow + return pair against the raw ceiling, two single-row
//!   `UPDATE`s in autocommit, each one round trip (`query_typed`), as ours
//!   are.
//! - Line 9: a critical section guarded by a count-1 pool (borrow, one
//!   `UPDATE`, return) against the peer a PostgreSQL user has today: the
//!   same `UPDATE` inside a transaction that takes `pg_advisory_xact_lock`
//!   (`BEGIN`, lock, `UPDATE`, `COMMIT`), which gives no ttl, no fencing
//!   token and no FIFO.
//! - Line 9b: the same section with the borrow and the return inside the
//!   caller's own transaction (`PostgresStore::borrow_in`, `return_in`):
//!   one commit, as the anchor's.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, Client, NoTls};
use semaphore_postgres::{BorrowOptions, Pool, PoolId, PostgresOptions, PostgresStore};
use tokio::runtime::{Builder, Runtime};

const TTL: Duration = Duration::from_secs(600);
const UPDATE: &str = "UPDATE bench_rows SET v = v + 1 WHERE id = 1";

fn runtime() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A plain client of the server, its connection driven on `rt`, with the
/// anchors' one-row table.
fn client(rt: &Runtime, url: &str) -> Client {
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS bench_rows (id int PRIMARY KEY, v bigint);
                 INSERT INTO bench_rows VALUES (1, 0) ON CONFLICT DO NOTHING;",
            )
            .await
            .unwrap();
        client
    })
}

fn pool(rt: &Runtime, url: &str, count: u32) -> Pool {
    pool_and_store(rt, url, count).0
}

fn pool_and_store(rt: &Runtime, url: &str, count: u32) -> (Pool, Arc<PostgresStore>) {
    let options = PostgresOptions::default().schema(TestServer::fresh_schema());
    let store = Arc::new(
        rt.block_on(PostgresStore::connect_with(url, options))
            .unwrap(),
    );
    let pool = Pool::new(store.clone(), PoolId::from_name("bench"));
    rt.block_on(pool.register(count)).unwrap();
    (pool, store)
}

fn postgres(c: &mut Criterion) {
    let server = TestServer::start_durable().expect("a PostgreSQL server for the benches");
    let rt = runtime();
    let raw = client(&rt, server.url());

    let mut group = c.benchmark_group("postgres_pairs");
    group.bench_function("anchor_raw_pair", |b| {
        b.to_async(&rt).iter(|| async {
            for _ in 0..2 {
                raw.query_typed(UPDATE, &[]).await.unwrap();
            }
        })
    });
    let pairs = pool(&rt, server.url(), 4);
    group.bench_function("postgres_pool_pair", |b| {
        b.to_async(&rt).iter(|| async {
            pairs
                .try_borrow(TTL)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        })
    });
    group.finish();

    let mut group = c.benchmark_group("postgres_mutex");
    let mut locker = client(&rt, server.url());
    group.bench_function("anchor_advisory_xact_lock", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tx = locker.transaction().await.unwrap();
                tx.query_typed("SELECT pg_advisory_xact_lock(42)", &[])
                    .await
                    .unwrap();
                tx.query_typed(UPDATE, &[]).await.unwrap();
                tx.commit().await.unwrap();
            })
        })
    });
    let mutex = pool(&rt, server.url(), 1);
    group.bench_function("postgres_pool_count_1", |b| {
        b.to_async(&rt).iter(|| async {
            let lease = mutex.try_borrow(TTL).await.unwrap();
            raw.query_typed(UPDATE, &[]).await.unwrap();
            lease.release().await.unwrap();
        })
    });
    let (in_tx, store) = pool_and_store(&rt, server.url(), 1);
    let mut caller = client(&rt, server.url());
    group.bench_function("postgres_pool_count_1_in_tx", |b| {
        b.iter(|| {
            rt.block_on(async {
                let tx = caller.transaction().await.unwrap();
                let lease = store
                    .borrow_in(&tx, &in_tx, TTL, BorrowOptions::new())
                    .await
                    .unwrap();
                tx.query_typed(UPDATE, &[]).await.unwrap();
                assert!(store.return_in(&tx, &in_tx, lease.id).await.unwrap());
                tx.commit().await.unwrap();
            })
        })
    });
    group.finish();
}

criterion_group!(benches, postgres);
criterion_main!(benches);
