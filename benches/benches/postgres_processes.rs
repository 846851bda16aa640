//! Line 13 of BENCHMARKS.md, on a throwaway PostgreSQL server with the
//! default durability (`fsync`, `synchronous_commit` on), with a harness of
//! its own (real processes, rates): it re-invokes itself as the worker
//! processes, and writes its figures to `target/semaphore-bench/line13.json`
//! for `report`.
//!
//! A hot pool (count 8): tasks loop borrow(30 s, wait 10 s) + return for
//! 3 s, at 1 task, 16 tasks in 4 processes and 64 tasks in 4 processes;
//! pairs/s against 16 tasks in 4 processes, each with a connection of its
//! own, running one-row `UPDATE`s of rows spread over 1,000 (autocommit):
//! commits per second, as pgbench's random-row `UPDATE` counts them. A pair
//! is two commits, so 0.5x is the physical bound.

// Shared with the benches that use all of them; this one needs the hot
// loop and the role variable only.
#[allow(dead_code)]
mod hot;
#[allow(dead_code)]
mod wake;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hot::{borrow_and_return, rate_of, tasks, worker};
use semaphore_benches::{out_dir, unix_us};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::types::Type;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

const POOL: &str = "line13";

async fn store(url: &str, schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions::default().schema(schema).pool_size(tasks());
    Arc::new(
        PostgresStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match std::env::var(wake::ROLE).as_deref() {
        Ok("ours") => {
            let pool = Pool::new(store(&args[1], &args[2]).await, PoolId::from_name(POOL));
            let start_us = args[3].parse().expect("a start time");
            return borrow_and_return(start_us, pool).await;
        }
        Ok("anchor") => {
            let store = store(&args[1], &args[2]).await;
            let start_us = args[3].parse().expect("a start time");
            let next = Arc::new(AtomicU64::new(unix_us()));
            return worker(start_us, move || {
                let (connections, next) = (store.connection_pool().clone(), next.clone());
                async move {
                    let client = connections.get().await.expect("a connection");
                    // A cheap spread over the 1,000 rows.
                    let row = i32::try_from(next.fetch_add(7919, Ordering::Relaxed) % 1000)
                        .expect("a row id");
                    client
                        .query_typed(
                            "UPDATE anchor SET n = n + 1 WHERE id = $1",
                            &[(&row, Type::INT4)],
                        )
                        .await
                        .expect("the update");
                }
            })
            .await;
        }
        _ => {}
    }
    if !semaphore_benches::selected("postgres_processes", &args) {
        return;
    }
    let server = TestServer::start_durable().expect("a PostgreSQL server for the bench");
    let schema = TestServer::fresh_schema();
    let setup = store(server.url(), &schema).await;
    Pool::new(setup.clone(), PoolId::from_name(POOL))
        .register(8)
        .await
        .expect("register");
    setup
        .connection_pool()
        .get()
        .await
        .expect("a connection")
        .batch_execute(
            "CREATE TABLE anchor (id int PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO anchor SELECT g, 0 FROM generate_series(0, 999) g;",
        )
        .await
        .expect("the anchor's table");
    drop(setup);
    let url = server.url();
    let anchor = rate_of("anchor", &[url, &schema], 4, 4);
    let one = rate_of("ours", &[url, &schema], 1, 1);
    let sixteen = rate_of("ours", &[url, &schema], 4, 4);
    let sixty_four = rate_of("ours", &[url, &schema], 4, 16);
    let thirteen = serde_json::json!({
        "pairs_per_s": sixteen,
        "pairs_per_s_1_task": one,
        "pairs_per_s_64_tasks": sixty_four,
        "anchor_commits_per_s": anchor,
    });
    println!("line 13: {thirteen}");
    std::fs::write(
        out_dir(env!("CARGO_TARGET_TMPDIR")).join("line13.json"),
        thirteen.to_string(),
    )
    .expect("writing line 13");
}
