//! Line 20 of BENCHMARKS.md, with the hot-pool harness of lines 13, 15
//! and 18 (real processes, one store handle each, on one file): a hot pool
//! (count 8) looping borrow + return for 3 s, by 1 task in 1 process (the
//! anchor, in the same run), by 16 and 64 tasks in 4 processes, and by 16
//! tasks in 1 process. Group
//! commit (rule "Group commit") is what lets the many tasks of a process
//! share one write transaction; each run also counts the batches its
//! worker processes sent (the core's `semaphore_store_batch_size`
//! histogram) and the writes they carried. Writes
//! `target/semaphore-bench/line20.json` for `report`.

// The hot-pool harness of lines 13, 15 and 18, shared with the benches
// package.
#[path = "../../benches/hot/mod.rs"]
mod hot;
/// What `hot` reads of the wake-up harness: the role variable.
mod wake {
    pub(crate) use semaphore_benches::ROLE;
}

use std::sync::Arc;

use hot::{borrow_and_return, rate_of};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
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
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the batch sizes' recorder");
        let start_us = args[3].parse().expect("a start time");
        borrow_and_return(start_us, pool(&args[1], &args[2])).await;
        let sizes: Vec<f64> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, .., value)| match value {
                DebugValue::Histogram(sizes) if key.key().name() == BATCH_SIZE => Some(sizes),
                _ => None,
            })
            .flatten()
            .map(|size| size.into_inner())
            .collect();
        let counted = format!("{} {}", sizes.len(), sizes.iter().sum::<f64>());
        let file = std::path::Path::new(&args[1]).with_extension(std::process::id().to_string());
        std::fs::write(file, counted).expect("writing the batches counted");
        return;
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
        let mut figures = serde_json::Map::new();
        for (name, processes, tasks) in [
            ("1_task", 1, 1),
            ("16_tasks", 4, 4),
            ("64_tasks", 4, 16),
            ("16_tasks_1_process", 1, 16),
        ] {
            let rate = rate_of("ours", &args, processes, tasks);
            let (batches, writes) = batches_counted(dir.path());
            let suffix = if name == "16_tasks" {
                String::new()
            } else {
                format!("_{name}")
            };
            figures.insert(format!("pairs_per_s{suffix}"), rate.into());
            figures.insert(format!("batches_{name}"), batches.into());
            figures.insert(
                format!("writes_per_batch_{name}"),
                (writes / batches.max(1.0)).into(),
            );
        }
        let figures = serde_json::Value::Object(figures);
        println!("line 20 ({mode}): {figures}");
        twenty.insert(mode.into(), figures);
    }
    let twenty = serde_json::Value::Object(twenty);
    let out = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("line20.json"), twenty.to_string()).expect("writing line 20");
}

/// The histogram the core records each batch's size in.
const BATCH_SIZE: &str = "semaphore_store_batch_size";

/// The batches the last run's workers counted, and the writes they
/// carried, from the files they left in `dir` (taken away).
fn batches_counted(dir: &std::path::Path) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for entry in std::fs::read_dir(dir)
        .expect("the scratch folder")
        .flatten()
    {
        let path = entry.path();
        if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.parse::<u32>().is_ok())
        {
            let counted = std::fs::read_to_string(&path).expect("a worker's batches");
            let mut fields = counted
                .split(' ')
                .map(|f| f.parse::<f64>().expect("a count"));
            total.0 += fields.next().expect("batches");
            total.1 += fields.next().expect("writes");
            std::fs::remove_file(path).expect("taking the batches counted away");
        }
    }
    total
}
