//! Line 20 of BENCHMARKS.md, with the hot-pool harness of lines 13, 15
//! and 18 (real processes, one store handle each, on one file): a hot pool
//! (count 8) looping borrow + return for 3 s, by 1 task in 1 process (the
//! anchor, in the same run), by 16 and 64 tasks in 4 processes, and by 16
//! tasks in 1 process. Group
//! commit (rule "Group commit") is what lets the many tasks of a process
//! share one write transaction; each run also counts the batches its
//! worker processes sent (the core's `semaphore_store_batch_size`
//! histogram), the writes they carried, and their pauses on a locked file
//! (`semaphore_store_busy_retries_total`) per pair. Writes
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
        let (mut sizes, mut retries) = (Vec::new(), 0);
        for (key, .., value) in snapshotter.snapshot().into_vec() {
            match value {
                DebugValue::Histogram(found) if key.key().name() == BATCH_SIZE => {
                    sizes.extend(found.into_iter().map(|size| size.into_inner()));
                }
                DebugValue::Counter(n) if key.key().name() == BUSY_RETRIES => retries += n,
                _ => {}
            }
        }
        let counted = format!("{} {} {retries}", sizes.len(), sizes.iter().sum::<f64>());
        let file = std::path::Path::new(&args[1]).with_extension(std::process::id().to_string());
        std::fs::write(file, counted).expect("writing the batches counted");
        return;
    }
    if let Ok(role @ ("raw" | "batched")) = std::env::var(wake::ROLE).as_deref() {
        let start_us = args[3].parse().expect("a start time");
        return raw_pairs(start_us, &args[1], &args[2], role == "batched").await;
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
            let (batches, writes, retries) = batches_counted(dir.path());
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
            let pairs = rate * hot::SECONDS as f64;
            figures.insert(
                format!("busy_retries_per_pair_{name}"),
                (retries / pairs.max(1.0)).into(),
            );
        }
        // The design's bare prototype: raw transactions, one writer at a
        // time in the kernel's queue, no semaphore.
        let raw_db = dir
            .path()
            .join(format!("raw-{mode}.db"))
            .display()
            .to_string();
        drop(raw_connection(&raw_db, mode));
        let raw_args = [raw_db.as_str(), mode];
        for (role, name, processes, tasks) in [
            ("raw", "1_task", 1, 1),
            ("raw", "16_tasks", 4, 4),
            ("batched", "16_tasks", 4, 4),
        ] {
            let rate = rate_of(role, &raw_args, processes, tasks);
            figures.insert(format!("{role}_pairs_per_s_{name}"), rate.into());
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

/// The counter of the store's pauses on a locked file (`SQLITE_BUSY`).
const BUSY_RETRIES: &str = "semaphore_store_busy_retries_total";

/// The batches the last run's workers counted, the writes they carried,
/// and the busy retries they made, from the files they left in `dir`
/// (taken away).
fn batches_counted(dir: &std::path::Path) -> (f64, f64, f64) {
    let mut total = (0.0, 0.0, 0.0);
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
            total.2 += fields.next().expect("busy retries");
            std::fs::remove_file(path).expect("taking the batches counted away");
        }
    }
    total
}

/// The raw pair's file `db` (made if new): WAL, `synchronous` as `mode`
/// says, one row to update (line 3's anchor).
fn raw_connection(db: &str, mode: &str) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("the raw file");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("a busy timeout");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    conn.pragma_update(None, "synchronous", mode)
        .expect("synchronous");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v INTEGER);
         INSERT OR IGNORE INTO t VALUES (1, 0);",
    )
    .expect("the raw table");
    conn
}

/// A worker of the design's bare prototype (roles "raw" and "batched"):
/// one connection per process, shared by its tasks as the store's is, each
/// step the raw pair (two writes of one row, each its own
/// `BEGIN IMMEDIATE; UPDATE; COMMIT`), each transaction under an exclusive
/// `flock` of a side file, as the store's writers' queue takes one: one
/// writer at a time, waiting in the kernel's queue, with no semaphore, no
/// files check and no wake-ups. `batched`: group commit, the writes its
/// tasks have pending when the connection frees go in one transaction.
async fn raw_pairs(start_us: u64, db: &str, mode: &str, batched: bool) {
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(format!("{db}-writer"))
        .expect("the writers' lock file");
    let group = Arc::new(Group {
        conn: std::sync::Mutex::new(raw_connection(db, mode)),
        lock,
        pending: std::sync::Mutex::new(Vec::new()),
    });
    hot::worker(start_us, move || {
        let group = group.clone();
        async move {
            for _ in 0..2 {
                if batched {
                    group.write().await;
                } else {
                    group.write_alone();
                }
            }
        }
    })
    .await;
}

/// One process's connection, the writers' lock and its writes pending.
struct Group {
    conn: std::sync::Mutex<rusqlite::Connection>,
    lock: std::fs::File,
    pending: std::sync::Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
}

impl Group {
    /// One transaction of `writes` updates on `conn`, this process's
    /// connection, under the writers' lock.
    fn commit(&self, conn: &rusqlite::Connection, writes: usize) {
        self.lock.lock().expect("the writers' lock");
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        for _ in 0..writes {
            conn.execute_batch("UPDATE t SET v = v + 1 WHERE id = 1")
                .expect("an update");
        }
        conn.execute_batch("COMMIT").expect("commit");
        self.lock.unlock().expect("the writers' lock let go");
    }

    /// One write in a transaction of its own.
    fn write_alone(&self) {
        self.commit(&self.conn.lock().expect("the connection"), 1);
    }

    /// One write, committed with whatever else is pending: the task that
    /// finds the connection free commits every pending write. A task that
    /// lets the connection go looks at the queue again, so that a write
    /// queued while it held the connection (its writer then found the
    /// connection taken and left it to the holder) is not left behind.
    async fn write(&self) {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.pending.lock().expect("the queue").push(done);
        loop {
            {
                let Ok(conn) = self.conn.try_lock() else {
                    break;
                };
                let batch = std::mem::take(&mut *self.pending.lock().expect("the queue"));
                if !batch.is_empty() {
                    self.commit(&conn, batch.len());
                }
                for done in batch {
                    let _ = done.send(());
                }
            }
            if self.pending.lock().expect("the queue").is_empty() {
                break;
            }
        }
        committed.await.expect("committed");
    }
}
