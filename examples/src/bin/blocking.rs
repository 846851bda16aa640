//! The flagship's job with the blocking API: plain threads, no async
//! runtime of ours, share 3 slots of one SQLite file.
//!
//! 8 threads each borrow a slot 4 times (waiting for one), hash the first
//! megabyte of this program's binary while they hold it, and drop the guard, which
//! returns the slot from that plain thread. The main thread checks, from
//! the threads' reports, that no more than 3 held a slot at once.
//!
//! Run: `cargo run --release -p semaphore-examples --bin blocking`

use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_examples::holds::{Hold, max_concurrency, shared_positions, unix_us};
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const SLOTS: u32 = 3;
const THREADS: usize = 8;
const JOBS: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("semaphore-blocking-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = Arc::new(SqliteStore::open(dir.join("shared.db"))?);
    let pool = Pool::new(store, PoolId::from_name("hashers"));
    pool.blocking().register(SLOTS)?;
    let mut bytes = std::fs::read(std::env::current_exe()?)?;
    bytes.truncate(1 << 20);
    let started = Instant::now();

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, bytes) = (pool.clone(), bytes.clone());
            std::thread::spawn(move || -> Result<Vec<Hold>, semaphore_sqlite::Error> {
                let mut holds = Vec::new();
                for job in 0..JOBS {
                    let lease = pool
                        .blocking()
                        .borrow(Duration::from_secs(30), Duration::from_secs(60))?;
                    let start_us = unix_us();
                    let mut hasher = DefaultHasher::new();
                    for _ in 0..8 {
                        hasher.write(&bytes);
                    }
                    let hold = Hold {
                        position: lease.position,
                        token: lease.token,
                        start_us,
                        end_us: unix_us(),
                    };
                    println!(
                        "thread {t} job {job}: slot {} (token {:3}), hash {:016x}",
                        hold.position,
                        hold.token,
                        hasher.finish()
                    );
                    holds.push(hold);
                    drop(lease); // returned at once, from this plain thread
                }
                Ok(holds)
            })
        })
        .collect();
    let mut holds = Vec::new();
    for worker in workers {
        holds.extend(worker.join().map_err(|_| "a worker thread panicked")??);
    }
    let most = max_concurrency(&holds);
    let shared = shared_positions(&holds).len();
    let in_use = pool.blocking().inspect()?.in_use;
    std::fs::remove_dir_all(&dir).ok();
    if holds.len() != THREADS * JOBS || most > SLOTS as usize || shared > 0 || in_use != 0 {
        return Err(format!(
            "check failed: {} holds, concurrency {most}, {shared} shared, {in_use} in use",
            holds.len()
        )
        .into());
    }
    println!(
        "done in {:.2} s: {} holds by {THREADS} plain threads; highest concurrency {most} (limit {SLOTS}); every lease returned",
        started.elapsed().as_secs_f64(),
        holds.len()
    );
    Ok(())
}
