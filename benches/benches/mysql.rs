//! MySQL store against its anchor on the same throwaway MariaDB server,
//! over the same connection pool, in the same run (BENCHMARKS.md line 17):
//! a borrow + return pair against two one-row `UPDATE`s in autocommit, two
//! commits, the least two writing primitives can cost.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{MysqlOptions, MysqlStore, Pool, PoolId};
use tokio::runtime::Builder;

const TTL: Duration = Duration::from_secs(600);

fn mysql_pairs(c: &mut Criterion) {
    let server = TestServer::start().expect("a MariaDB server for the benches");
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(MysqlStore::connect_with(
            server.url(),
            MysqlOptions::default().table_prefix("bench"),
        ))
        .unwrap();
    let connections = store.connection_pool().clone();
    rt.block_on(async {
        let mut conn = connections.get_conn().await.unwrap();
        conn.query_drop(
            "CREATE TABLE anchor (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE = InnoDB",
        )
        .await
        .unwrap();
        conn.query_drop("INSERT INTO anchor VALUES (1, 0)")
            .await
            .unwrap();
    });
    let pool = Pool::new(Arc::new(store), PoolId::from_name("bench"));
    rt.block_on(pool.register(4)).unwrap();

    let mut group = c.benchmark_group("mysql_pairs");
    group.bench_function("anchor_two_updates", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = connections.get_conn().await.unwrap();
            for _ in 0..2 {
                conn.exec_drop("UPDATE anchor SET n = n + 1 WHERE id = ?", (1,))
                    .await
                    .unwrap();
            }
        })
    });
    group.bench_function("mysql_pool_pair", |b| {
        b.to_async(&rt).iter(|| async {
            pool.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, mysql_pairs);
criterion_main!(benches);
