//! Line 10 of BENCHMARKS.md: cross-process wake-up through PostgreSQL's
//! `LISTEN`/`NOTIFY` (see `wake/mod.rs`). Percentiles are not what
//! criterion measures, so this bench has its own harness: it re-invokes
//! itself as process A, and writes its figures to
//! `target/semaphore-bench/line10.json` for the `report` binary.

mod wake;

use std::sync::Arc;

use semaphore_benches::{out_dir, role_or_bench};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{PoolId, PostgresOptions, PostgresStore};

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
    let queue_heads = async || store.queue_heads(id).await.expect("queue heads");
    wake::line(url, &schema, store.clone(), id, queue_heads).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let hold =
        async |_: &str, store: Arc<PostgresStore>, _: &[String]| wake::hold(store, "line10").await;
    if !role_or_bench("postgres_wake", &["hold"], store, hold).await {
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
