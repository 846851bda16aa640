//! Line 20 of BENCHMARKS.md, with the hot-pool harness of lines 13, 15
//! and 18 (real processes, one store handle each, on one file): a hot pool
//! (count 8) looping borrow + return for 3 s, by 1 task in 1 process (the
//! anchor, in the same run), by 16 and 64 tasks in 4 processes, and by 16
//! tasks in 1 process. Group
//! commit (rule "Group commit") is what lets the many tasks of a process
//! share one write transaction. Writes `target/semaphore-bench/line20.json`
//! for `report`.

mod hot;
#[allow(dead_code)] // only its ROLE, which `hot` reads
mod wake;

use std::sync::Arc;

use hot::{borrow_and_return, rate, rate_of};
use semaphore_benches::out_dir;
use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore, Synchronous};

/// The bench's pool on `db`, whose commits `fsync` if `mode` is "full".
fn pool(db: &str, mode: &str) -> Pool {
    let synchronous = match mode {
        "full" => Synchronous::Full,
        _ => Synchronous::Normal,
    };
    let options = SqliteOptions::default().synchronous(synchronous);
    let store = SqliteStore::open_with(db, options).expect("opening the bench database");
    Pool::new(Arc::new(store), PoolId::from_name("line20"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Ok("ours") = std::env::var(wake::ROLE).as_deref() {
        let start_us = args[3].parse().expect("a start time");
        return borrow_and_return(start_us, pool(&args[1], &args[2])).await;
    }
    if !semaphore_benches::selected("sqlite_processes", &args) {
        return;
    }
    let dir = tempfile::tempdir().expect("a scratch folder");
    let mut twenty = serde_json::Map::new();
    for mode in ["normal", "full"] {
        let db = dir.path().join(format!("{mode}.db")).display().to_string();
        pool(&db, mode).register(8).await.expect("register");
        let args = [db.as_str(), mode];
        let figures = serde_json::json!({
            "pairs_per_s_1_task": rate_of("ours", &args, 1, 1),
            "pairs_per_s": rate("ours", &args),
            "pairs_per_s_64_tasks": rate_of("ours", &args, 4, 16),
            "pairs_per_s_16_tasks_1_process": rate_of("ours", &args, 1, 16),
        });
        println!("line 20 ({mode}): {figures}");
        twenty.insert(mode.into(), figures);
    }
    let twenty = serde_json::Value::Object(twenty);
    let out = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("line20.json"), twenty.to_string()).expect("writing line 20");
}
