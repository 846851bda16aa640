//! Line 35 of BENCHMARKS.md (issue 70): a crowd at a small pool. Count 5;
//! 1,000 waiters in 4 processes (250 tasks each) loop: borrow (ttl 30 s,
//! wait 60 s), hold 0-2 ms (spread evenly by task and turn), return, no
//! think; for 5 s from a common start. What counts is whether all 5 slots
//! are ever held at once, and how many are held on average:
//!
//! - held at once, most: the most holds that overlap, by the holders' own
//!   stamps (the machine's clock, µs), within the window (from 1 s after
//!   the start, when every waiter has queued);
//! - held on average: the slot-time between grants and returns within the
//!   window over the window;
//! - in use by the store, most: the most `in_use` of the pool's state,
//!   read every 5 ms by the bench itself during the window (a slot handed
//!   to a head is in use before its holder knows it);
//! - pairs/s within the window.
//!
//! Each store on a throwaway server of its own (SQLite: a file), 5 runs,
//! medians (the most: the highest of the runs is not taken, the median
//! is).
//!
//! ```sh
//! cargo bench -p semaphore-benches --bench crowd
//! SEMAPHORE_BENCH_STORES=MySQL cargo bench -p semaphore-benches --bench crowd
//! ```

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use semaphore_benches::{ROLE, median, role_or_bench, unix_us};
use semaphore_memory::store::Store;
use semaphore_memory::{Pool, PoolId};

const COUNT: u32 = 5;
const PROCESSES: usize = 4;
const TASKS: usize = 250;
const SECONDS: u64 = 5;
const WARM_US: u64 = 1_000_000;
const ROUNDS: usize = 5;
const POOL: &str = "line35";
const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(60);

/// The store a worker's `url` names: `sqlite:<path>` or a server's URL,
/// with `prefix` as its table prefix or schema.
async fn store(url: &str, prefix: &str) -> Arc<dyn Store> {
    if let Some(path) = url.strip_prefix("sqlite:") {
        return Arc::new(semaphore_sqlite::SqliteStore::open(path).expect("opening SQLite"));
    }
    if url.starts_with("redis") {
        let options = semaphore_redis::RedisOptions::default().prefix(prefix);
        let store = semaphore_redis::RedisStore::connect_with(url, options).await;
        return Arc::new(store.expect("connecting to Redis"));
    }
    if url.starts_with("mysql") {
        let options = semaphore_mysql::MysqlOptions::default().table_prefix(prefix);
        let store = semaphore_mysql::MysqlStore::connect_with(url, options).await;
        return Arc::new(store.expect("connecting to MariaDB"));
    }
    let options = semaphore_postgres::PostgresOptions::default().schema(prefix);
    let store = semaphore_postgres::PostgresStore::connect_with(url, options).await;
    Arc::new(store.expect("connecting to PostgreSQL"))
}

/// A worker process: [`TASKS`] tasks loop borrow, hold, return on `pool`
/// from `start_us` for [`SECONDS`]; prints each hold's grant and return
/// (unix µs).
async fn work(pool: Pool, process: u64, start_us: u64) {
    let end_us = start_us + SECONDS * 1_000_000;
    tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(unix_us()))).await;
    let tasks: Vec<_> = (0..TASKS as u64)
        .map(|task| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut holds = Vec::new();
                let mut turn = 0u64;
                while unix_us() < end_us {
                    let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
                    let granted = unix_us();
                    let hold_us = (process * 7_919 + task * 104_729 + turn * 1_299_709) % 2_001;
                    tokio::time::sleep(Duration::from_micros(hold_us)).await;
                    let returned = unix_us();
                    lease.release().await.expect("return");
                    holds.push((granted, returned));
                    turn += 1;
                }
                holds
            })
        })
        .collect();
    let mut out = String::new();
    for task in tasks {
        for (granted, returned) in task.await.expect("a task") {
            out.push_str(&format!("{granted} {returned}\n"));
        }
    }
    print!("{out}");
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    most_held: f64,
    mean_held: f64,
    most_in_use: f64,
    pairs_per_s: f64,
}

fn figures(holds: &[(u64, u64)], start_us: u64, most_in_use: u32) -> Figures {
    let (from, to) = (start_us + WARM_US, start_us + SECONDS * 1_000_000);
    let window = (to - from) as f64;
    let busy: u64 = holds
        .iter()
        .map(|&(g, r)| r.min(to).saturating_sub(g.max(from)))
        .sum();
    // A sweep over grants (+1) and returns (-1) in the window; a return
    // before a grant at the same µs.
    let mut edges: Vec<(u64, i32)> = holds
        .iter()
        .filter(|&&(g, r)| r > from && g < to)
        .flat_map(|&(g, r)| [(g.max(from), 1), (r.min(to), -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    let pairs = holds
        .iter()
        .filter(|&&(_, r)| (from..to).contains(&r))
        .count();
    Figures {
        most_held: f64::from(most),
        mean_held: busy as f64 / window,
        most_in_use: f64::from(most_in_use),
        pairs_per_s: pairs as f64 / (window / 1e6),
    }
}

/// One run on the store at `url`: the workers, and the bench reading the
/// pool's state meanwhile.
async fn run(url: &str, prefix: &str) -> Figures {
    let watcher = Pool::new(store(url, prefix).await, PoolId::from_name(POOL));
    let (url2, prefix2) = (url.to_string(), prefix.to_string());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let workers = tokio::task::spawn_blocking(move || {
        semaphore_benches::run_workers(PROCESSES, |start_us| {
            let _ = tx.send(start_us);
            let mut command = Command::new(std::env::current_exe().expect("this bench's path"));
            command
                .env(ROLE, "work")
                .args([&url2, &prefix2, &start_us.to_string()]);
            command
        })
    });
    let start_us = rx.recv().await.expect("the start");
    let (from, to) = (start_us + WARM_US, start_us + SECONDS * 1_000_000);
    tokio::time::sleep(Duration::from_micros(from.saturating_sub(unix_us()))).await;
    let mut most_in_use = 0;
    while unix_us() < to {
        let state = watcher.inspect().await.expect("the pool's state");
        most_in_use = most_in_use.max(state.in_use);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (outputs, start) = workers.await.expect("the workers");
    let holds: Vec<(u64, u64)> = outputs
        .iter()
        .flat_map(|out| out.lines())
        .filter_map(|line| {
            let (g, r) = line.split_once(' ')?;
            Some((g.parse().ok()?, r.parse().ok()?))
        })
        .collect();
    figures(&holds, start, most_in_use)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let play = async |_: &str, store: Arc<dyn Store>, args: &[String]| {
        let start_us = args[3].parse().expect("the start");
        let process = u64::from(std::process::id());
        work(Pool::new(store, PoolId::from_name(POOL)), process, start_us).await;
    };
    if !role_or_bench("crowd", &["work"], store, play).await {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let redis = semaphore_redis::testing::TestServer::start().expect("a Redis server");
    let postgres = semaphore_postgres::testing::TestServer::start().expect("PostgreSQL");
    let mysql = semaphore_mysql::testing::TestServer::start().expect("a MariaDB server");
    let sqlite = format!("sqlite:{}", files.path().join("line35.db").display());
    let mut stores: Vec<(&str, String, String)> = vec![
        (
            "MySQL",
            mysql.url().into(),
            semaphore_mysql::testing::TestServer::fresh_prefix(),
        ),
        (
            "PostgreSQL",
            postgres.url().into(),
            semaphore_postgres::testing::TestServer::fresh_schema(),
        ),
        (
            "Redis",
            redis.url().into(),
            semaphore_redis::testing::TestServer::fresh_prefix(),
        ),
        ("SQLite", sqlite, String::new()),
    ];
    let named = std::env::var("SEMAPHORE_BENCH_STORES").unwrap_or_default();
    stores.retain(|(name, _, _)| named.is_empty() || named.split(',').any(|n| *name == n));
    for (_, url, prefix) in &stores {
        let pool = Pool::new(store(url, prefix).await, PoolId::from_name(POOL));
        pool.register(COUNT).await.expect("register");
    }
    println!(
        "| line | held at once, most | held on average | in use by the store, most | pairs/s |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let mut runs = vec![Vec::new(); stores.len()];
    for _ in 0..ROUNDS {
        for (i, (_, url, prefix)) in stores.iter().enumerate() {
            runs[i].push(run(url, prefix).await);
        }
    }
    for ((name, _, _), runs) in stores.iter().zip(&runs) {
        let of = |f: fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        println!(
            "| 35. {name}: 1,000 waiters, count {COUNT}, holds 0-2 ms | {:.0} | {:.2} | {:.0} | {:.0} |",
            of(|f| f.most_held),
            of(|f| f.mean_held),
            of(|f| f.most_in_use),
            of(|f| f.pairs_per_s),
        );
    }
}
