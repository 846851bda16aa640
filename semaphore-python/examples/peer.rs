//! A Rust process beside the Python ones, for the Python module's tests
//! and benchmarks.
//!
//! ```text
//! peer cycles <file> <pool> <n> <log>   n borrow/return cycles on a SQLite file, each hold logged
//! peer pairs <store> <seconds>          borrow+return pairs per second, uncontended, on one pool
//! ```
//!
//! `cycles` logs one line per hold, `position token start_us end_us`
//! (unix microseconds just after the grant and just before the return),
//! as the Python workers of `tests/test_processes.py` do. `pairs` runs on
//! `memory` or a SQLite file path and prints two figures, pairs per second
//! through the blocking API (`blocking().borrow`, then `blocking_release`:
//! what a Python `with pool.borrow(...)` block does) and through the async
//! API on a multi-thread runtime, as `blocking=<n> async=<n>`.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use semaphore_sqlite::store::Store;
use semaphore_sqlite::{Error, Pool, PoolId, SqliteStore};

const TTL: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(60);

fn usage() -> ! {
    eprintln!("usage: peer cycles <file> <pool> <n> <log>");
    eprintln!("       peer pairs <memory|file> <seconds>");
    std::process::exit(2)
}

fn unix_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["cycles", file, pool, n, log] => {
            cycles(file, pool, n.parse().unwrap_or_else(|_| usage()), log)
        }
        ["pairs", store, seconds] => pairs(store, seconds.parse().unwrap_or_else(|_| usage())),
        _ => usage(),
    }
}

/// `n` borrow/return cycles, each hold logged to `log`.
fn cycles(file: &str, name: &str, n: u64, log: &str) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let pool = Pool::new(Arc::new(SqliteStore::open(file)?), PoolId::from_name(name));
    let mut lines = String::new();
    runtime.block_on(async {
        for _ in 0..n {
            let lease = pool.borrow(TTL, WAIT).await?;
            let start = unix_us();
            std::thread::sleep(Duration::from_micros(200));
            let end = unix_us();
            lines.push_str(&format!(
                "{} {} {start} {end}\n",
                lease.position, lease.token
            ));
            lease.release().await?;
        }
        Ok::<_, Error>(())
    })?;
    std::fs::File::create(log)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .expect("writing the hold log");
    Ok(())
}

/// Uncontended borrow+return pairs per second on one pool of `store`
/// (`memory` or a SQLite file), through the blocking API and the async one.
fn pairs(store: &str, seconds: f64) -> Result<(), Error> {
    let store: Arc<dyn Store> = match store {
        "memory" => Arc::new(semaphore_memory::MemoryStore::new()),
        file => Arc::new(SqliteStore::open(file)?),
    };
    let pool = Pool::new(store, PoolId::from_name("bench-pairs"));
    pool.blocking().register(1)?;
    let budget = Duration::from_secs_f64(seconds);
    let (start, mut done) = (Instant::now(), 0u64);
    while start.elapsed() < budget {
        for _ in 0..100 {
            pool.blocking()
                .borrow(TTL, Duration::ZERO)?
                .blocking_release()?;
        }
        done += 100;
    }
    let blocking = done as f64 / start.elapsed().as_secs_f64();
    // Multi-thread, as the Python module's own runtime: the store's
    // background work (a return's wake-up ring) runs beside the loop.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let in_async = runtime.block_on(async {
        let (start, mut done) = (Instant::now(), 0u64);
        while start.elapsed() < budget {
            for _ in 0..100 {
                pool.borrow(TTL, Duration::ZERO).await?.release().await?;
            }
            done += 100;
        }
        Ok::<_, Error>(done as f64 / start.elapsed().as_secs_f64())
    })?;
    println!("blocking={blocking:.0} async={in_async:.0}");
    Ok(())
}
