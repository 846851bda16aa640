//! Line 10 of BENCHMARKS.md: cross-process wake-up through PostgreSQL's
//! `LISTEN`/`NOTIFY` (see `wake/mod.rs`). Percentiles are not what
//! criterion measures, so this bench has its own harness: it re-invokes
//! itself as process A, and writes its figures to
//! `target/semaphore-bench/line10.json` for the `report` binary.

mod wake;

use std::sync::Arc;

use semaphore_benches::out_dir;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

async fn store(url: &str, schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions::default().schema(schema);
    Arc::new(
        PostgresStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

async fn line10(url: &str) -> serde_json::Value {
    let schema = TestServer::fresh_schema();
    let store = store(url, &schema).await;
    let id = PoolId::from_name("line10");
    let pool = Pool::new(store.clone(), id);
    pool.register(1).await.expect("register");
    let a = wake::spawn_holder(&[url, &schema]);
    wake::hand_offs(&pool, a, async || {
        store.queue_heads(id).await.expect("queue heads")
    })
    .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if std::env::var(wake::ROLE).as_deref() == Ok("hold") {
        let pool = Pool::new(store(&args[1], &args[2]).await, PoolId::from_name("line10"));
        return wake::holder(pool).await;
    }
    if !semaphore_benches::selected("postgres_wake", &args) {
        return;
    }
    let server = TestServer::start().expect("a PostgreSQL server for the bench");
    let ten = line10(server.url()).await;
    println!("line 10: {ten}");
    std::fs::write(
        out_dir(env!("CARGO_TARGET_TMPDIR")).join("line10.json"),
        ten.to_string(),
    )
    .expect("writing line 10");
}
