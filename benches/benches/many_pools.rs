//! Line 22 of BENCHMARKS.md ("a million pools"): on PostgreSQL,
//! Redis and MySQL (MariaDB), a borrow + return pair on one pool among 1,000,000 registered
//! pools, each holding one lease, against the same pair on one pool alone
//! (the same server, before the others exist); with the time the pools
//! took to set up, what each costs the server (disk, or memory), and a
//! register, an inspect and a page of 100 pools listed (`Pool::list`)
//! before and after, which must not grow with the number of pools. Writes `target/semaphore-bench/line22.json` for
//! `report`.
//!
//! The pools are made by the stores' own code: on PostgreSQL, the store's
//! functions called on the server, a thousand pools a statement; on Redis
//! and MySQL, the store's `register` and `try_borrow`, many in flight.
//! Each pool has count 2 and one unbound lease of
//! an hour, so that the measured pool, one of them, is shaped as the
//! others: one slot held, one free. `SEMAPHORE_BENCH_POOLS` sets another
//! number of pools; `SEMAPHORE_BENCH_STORES` (`postgres,redis,mysql`) fewer
//! stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use semaphore_benches::{median, out_dir};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::store::{BorrowRequest, Store, TryBorrow};
use semaphore_redis::{LeaseId, Pool, PoolId, RedisOptions, RedisStore};

/// The held lease's ttl: it outlives the run.
const HELD: Duration = Duration::from_secs(3600);
/// The measured pairs' ttl.
const TTL: Duration = Duration::from_secs(30);
/// Pairs a round, and rounds; the median round counts.
const PAIRS: u32 = 500;
const ROUNDS: usize = 5;
/// Pages of pools listed a round ([`Pool::list`]), and their length.
const PAGES: u32 = 20;
const PAGE: u32 = 100;

fn pools() -> u64 {
    std::env::var("SEMAPHORE_BENCH_POOLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}

/// The `i`th pool of the many.
fn nth(i: u64) -> PoolId {
    PoolId::from_name(&format!("many-{i}"))
}

/// What one pool costs, in µs, medians of [`ROUNDS`] rounds: a borrow +
/// return pair, a register of a new pool, an inspect.
async fn costs(pool: &Pool, fresh: &mut impl FnMut() -> Pool) -> serde_json::Value {
    let (mut pairs, mut registers, mut inspects) = (Vec::new(), Vec::new(), Vec::new());
    let mut pages = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..PAIRS {
            let lease = match pool.borrow(TTL, Duration::ZERO).await {
                Ok(lease) => lease,
                Err(e) => panic!("borrow {:?}: {e:?}; {:?}", pool.id(), pool.inspect().await),
            };
            lease.release().await.expect("return");
        }
        pairs.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(PAIRS));
        let started = Instant::now();
        for _ in 0..PAIRS {
            fresh().register(2).await.expect("register");
        }
        registers.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(PAIRS));
        let started = Instant::now();
        for _ in 0..PAIRS {
            pool.inspect().await.expect("inspect");
        }
        inspects.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(PAIRS));
        let started = Instant::now();
        for _ in 0..PAGES {
            let page = Pool::list(pool.store(), Some(pool.id()), PAGE).await;
            assert!(!page.expect("a page").is_empty(), "the fresh pools follow");
        }
        pages.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(PAGES));
    }
    serde_json::json!({
        "pair_us": median(pairs),
        "register_us": median(registers),
        "inspect_us": median(inspects),
        "page_us": median(pages),
    })
}

/// Pool `id` on `store`, registered with count 2 and one lease held.
async fn shaped(store: Arc<dyn Store>, id: PoolId) -> Pool {
    let pool = Pool::new(store, id);
    pool.register(2).await.expect("register");
    pool.borrow(HELD, Duration::ZERO)
        .await
        .expect("the held lease")
        .forget();
    pool
}

/// Line 22 on `store`: the pool alone, then `make` (the other pools, each
/// shaped as [`shaped`]'s, its argument their number) and a pool among
/// them; `size` reads what the store takes, in bytes.
async fn measure(
    store: Arc<dyn Store>,
    make: impl AsyncFnOnce(u64),
    mut size: impl AsyncFnMut() -> f64,
) -> serde_json::Value {
    let registered = AtomicU64::new(0);
    let mut fresh = || {
        let n = registered.fetch_add(1, Ordering::Relaxed);
        Pool::new(store.clone(), PoolId::from_name(&format!("fresh-{n}")))
    };
    let alone = shaped(store.clone(), nth(0)).await;
    let before = costs(&alone, &mut fresh).await;
    let empty = size().await;
    let n = pools();
    let started = Instant::now();
    make(n).await;
    let set_up_s = started.elapsed().as_secs_f64();
    let full = size().await;
    let among = Pool::new(store.clone(), nth(n / 2));
    let after = costs(&among, &mut fresh).await;
    serde_json::json!({
        "pools": n,
        "alone": before,
        "among": after,
        "set_up_s": set_up_s,
        "bytes_per_pool": (full - empty) / (n - 1) as f64,
        "bytes": full,
    })
}

/// Pools `1..n` on `store` by its own primitives, `tasks` at a time.
async fn make_by_store(store: Arc<dyn Store>, n: u64, tasks: usize) {
    let next = Arc::new(AtomicU64::new(1));
    let makers: Vec<_> = (0..tasks)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    store.register(nth(i), 2).await.expect("register");
                    let mut request = BorrowRequest::new(nth(i), LeaseId::new(), HELD);
                    request.bound = false;
                    let held = store.try_borrow(&request).await.expect("the held lease");
                    assert!(matches!(held, TryBorrow::Granted { .. }), "{i}: {held:?}");
                }
            })
        })
        .collect();
    for maker in makers {
        maker.await.expect("a maker");
    }
}

async fn postgres() -> serde_json::Value {
    use semaphore_postgres::testing::TestServer;
    let server = TestServer::start_durable().expect("a PostgreSQL server for the bench");
    let schema = TestServer::fresh_schema();
    let options = PostgresOptions::default().schema(&schema);
    let store = Arc::new(
        PostgresStore::connect_with(server.url(), options)
            .await
            .expect("connecting"),
    );
    let client = store.connection_pool().get().await.expect("a connection");
    let size = async || -> f64 {
        let row = client
            .query_one(
                "SELECT sum(pg_total_relation_size(c.oid))::float8 FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relkind = 'r'",
                &[&schema],
            )
            .await
            .expect("the tables' size");
        row.get(0)
    };
    // The store's own functions, on the server: register, then a grant of
    // one slot for an hour, unbound; a thousand pools a statement, on two
    // connections.
    let make = async |n: u64| {
        let next = Arc::new(AtomicU64::new(1));
        let makers: Vec<_> = (0..2)
            .map(|_| {
                let (store, next, schema) = (store.clone(), next.clone(), schema.clone());
                tokio::spawn(async move {
                    let client = store.connection_pool().get().await.expect("a connection");
                    loop {
                        let from = next.fetch_add(1000, Ordering::Relaxed);
                        if from >= n {
                            return;
                        }
                        let to = (from + 999).min(n - 1);
                        let ids: Vec<uuid::Uuid> = (from..=to).map(|i| *nth(i).as_uuid()).collect();
                        // A function in FROM runs once per row (in the
                        // select list, a set-returning one made the next
                        // column run twice).
                        for call in [
                            "semaphore_register(p, 2, NULL)".to_string(),
                            format!(
                                "semaphore_try_borrow(p, gen_random_uuid(), {}, NULL, NULL,
                                    NULL, NULL, NULL, false, 1, NULL, NULL, false)",
                                HELD.as_millis()
                            ),
                        ] {
                            let statement = format!(
                                "SELECT count(*) FROM unnest($1::uuid[]) p, \"{schema}\".{call}"
                            );
                            client
                                .execute(&statement, &[&ids])
                                .await
                                .expect("making pools");
                        }
                    }
                })
            })
            .collect();
        for maker in makers {
            maker.await.expect("a maker");
        }
        let held: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{schema}\".semaphore_slots WHERE lease IS NOT NULL"
                ),
                &[],
            )
            .await
            .expect("counting leases")
            .get(0);
        assert_eq!(held as u64, n, "one lease held in each pool");
        // What autovacuum would have done by then: the planner's
        // statistics for a million rows. (Before the pools are made, an
        // ANALYZE of the nearly empty tables makes the plans of the
        // functions' statements scan whole tables while they grow: 46 s
        // instead of 2 s for 20,000 pools.)
        client
            .batch_execute("VACUUM ANALYZE")
            .await
            .expect("vacuum");
    };
    measure(store.clone(), make, size).await
}

async fn redis() -> serde_json::Value {
    use semaphore_redis::testing::TestServer;
    let server = TestServer::start().expect("a Redis server for the bench");
    let options = RedisOptions::default()
        .prefix(TestServer::fresh_prefix())
        .restart_grace(Duration::ZERO);
    let store = Arc::new(
        RedisStore::connect_with(server.url(), options)
            .await
            .expect("connecting"),
    );
    let mut info = store.connection().clone();
    let memory = async || -> f64 {
        let text: String = semaphore_redis::redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut info)
            .await
            .expect("INFO memory");
        text.lines()
            .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
            .expect("used_memory")
    };
    let make = async |n| make_by_store(store.clone(), n, 64).await;
    measure(store.clone(), make, memory).await
}

async fn mysql() -> serde_json::Value {
    use semaphore_mysql::mysql_async::prelude::Queryable;
    use semaphore_mysql::testing::TestServer;
    use semaphore_mysql::{MysqlOptions, MysqlStore};
    let server = TestServer::start().expect("a MariaDB server for the bench");
    let prefix = TestServer::fresh_prefix();
    let options = MysqlOptions::default().table_prefix(&prefix).pool_size(32);
    let store = Arc::new(
        MysqlStore::connect_with(server.url(), options)
            .await
            .expect("connecting"),
    );
    let mut conn = store
        .connection_pool()
        .get_conn()
        .await
        .expect("a connection");
    let size = async || -> f64 {
        let tables: Vec<String> = conn
            .exec(
                "SELECT table_name FROM information_schema.tables
                 WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '%')",
                (&prefix,),
            )
            .await
            .expect("the store's tables");
        for table in &tables {
            conn.query_drop(format!("ANALYZE TABLE `{table}`"))
                .await
                .expect("fresh statistics");
        }
        let bytes: Option<f64> = conn
            .exec_first(
                "SELECT CAST(SUM(data_length + index_length) AS DOUBLE)
                 FROM information_schema.tables
                 WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '%')",
                (&prefix,),
            )
            .await
            .expect("the tables' size");
        bytes.expect("a size")
    };
    let make = async |n| make_by_store(store.clone(), n, 64).await;
    measure(store.clone(), make, size).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !semaphore_benches::selected("many_pools", &args) {
        return;
    }
    let mut line = serde_json::Map::new();
    for store in ["postgres", "redis", "mysql"] {
        if std::env::var("SEMAPHORE_BENCH_STORES").is_ok_and(|only| !only.contains(store)) {
            continue;
        }
        let figures = match store {
            "postgres" => postgres().await,
            "redis" => redis().await,
            _ => mysql().await,
        };
        println!("line 22 ({store}): {figures}");
        line.insert(store.into(), figures);
    }
    std::fs::write(
        out_dir(env!("CARGO_TARGET_TMPDIR")).join("line22.json"),
        serde_json::Value::Object(line).to_string(),
    )
    .expect("writing line 22");
}
