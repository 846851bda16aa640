//! Line 26 of BENCHMARKS.md (issue 70): a working pool. A semaphore keeps
//! a few expensive things busy, so what counts is how much of each slot's
//! time a holder has it, not how fast an empty loop turns.
//!
//! Count 8; 16 tasks in 4 processes (the memory store: 16 tasks in one,
//! the ceiling); each task loops: borrow (ttl 30 s, wait 10 s), hold `H`
//! ms, return, think `T` ms; for 3 s from a common start, cases H/T =
//! 2/0, 2/2 and 5/5. Each holder stamps, on the machine's clock (µs),
//! when it asked, when it was granted and when it began to return, so the
//! figures do not depend on how long a timer's 2 ms really lasts:
//!
//! - utilization: the slot-time between grants and returns within the
//!   window (from 0.3 s after the start), over `count` times the window;
//! - pairs/s within the window;
//! - return to grant, p50 / p99: for each return while a borrower waited
//!   (asked before it, granted after it), the time to the first grant of
//!   such a borrower (µs).
//!
//! Every store runs on a throwaway server of its own (SQLite: a file),
//! beside the peer on Redis, npm's `redis-semaphore` (its default 10 ms
//! retry), in one sitting: each case runs each side in turn, 5 rounds, and
//! the figures are the medians. It prints line 26's rows.
//!
//! Line 27: the networked stores behind the fault suite's proxy, which
//! holds every chunk 0.25 ms each way (plus up to 0.05 ms of jitter):
//! the 2/2 case as above (Redis beside the peer, through the same proxy),
//! then 1 task's zero-hold pairs (borrow, return at once) and the round
//! trips each took, as the proxy counts them; on PostgreSQL and MySQL
//! beside two one-row `UPDATE`s through the same proxy (`commits`).
//!
//! ```sh
//! cargo bench -p semaphore-benches --bench working                              # 26 and 27
//! SEMAPHORE_BENCH_LINE=27 cargo bench -p semaphore-benches --bench working      # one of them
//! SEMAPHORE_BENCH_LINE=26 SEMAPHORE_BENCH_STORES=SQLite,memory cargo bench ...  # some rows
//! ```

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use semaphore_benches::{ROLE, median, out_dir, percentile, role_or_bench, unix_us};
use semaphore_memory::store::Store;
use semaphore_memory::{Pool, PoolId};

#[path = "working/proxied.rs"]
mod proxied;

const COUNT: u32 = 8;
const PROCESSES: usize = 4;
const TASKS: usize = 4;
const SECONDS: u64 = 3;
/// The start of the window figures count in, after the common start.
const WARM_US: u64 = 300_000;
const ROUNDS: usize = 5;
/// Hold and think, ms.
const CASES: [(u64, u64); 3] = [(2, 0), (2, 2), (5, 5)];
const POOL: &str = "line26";
const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

/// The store a worker's `url` names: `memory`, `sqlite:<path>`, or a
/// server's URL, with `prefix` as its table prefix or schema.
async fn store(url: &str, prefix: &str) -> Arc<dyn Store> {
    if url == "memory" {
        return Arc::new(semaphore_memory::MemoryStore::new());
    }
    if let Some(path) = url.strip_prefix("sqlite:") {
        return Arc::new(semaphore_sqlite::SqliteStore::open(path).expect("opening SQLite"));
    }
    if url.starts_with("redis") {
        let options = semaphore_redis::RedisOptions::default()
            .prefix(prefix)
            .restart_grace(Duration::ZERO);
        let store = semaphore_redis::RedisStore::connect_with(url, options).await;
        return Arc::new(store.expect("connecting to Redis"));
    }
    if url.starts_with("mysql") {
        let options = semaphore_mysql::MysqlOptions::default()
            .table_prefix(prefix)
            .pool_size(TASKS);
        let store = semaphore_mysql::MysqlStore::connect_with(url, options).await;
        return Arc::new(store.expect("connecting to MariaDB"));
    }
    let options = semaphore_postgres::PostgresOptions::default()
        .schema(prefix)
        .pool_size(TASKS);
    let store = semaphore_postgres::PostgresStore::connect_with(url, options).await;
    Arc::new(store.expect("connecting to PostgreSQL"))
}

/// One hold, by a holder's stamps (unix µs).
#[derive(Debug, Clone, Copy)]
struct Hold {
    asked: u64,
    granted: u64,
    returned: u64,
}

/// A worker process: `tasks` tasks loop borrow, hold, return, think on
/// `pool` from `start_us` for [`SECONDS`]; prints each hold's stamps.
async fn work(pool: Pool, tasks: usize, hold: u64, think: u64, start_us: u64) {
    let end_us = start_us + SECONDS * 1_000_000;
    tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(unix_us()))).await;
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut holds = Vec::new();
                while unix_us() < end_us {
                    let asked = unix_us();
                    let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
                    let granted = unix_us();
                    // Not even a zero sleep: tokio's lasts until its next
                    // millisecond tick, which a zero hold would pay a pair.
                    if hold > 0 {
                        tokio::time::sleep(Duration::from_millis(hold)).await;
                    }
                    let returned = unix_us();
                    lease.release().await.expect("return");
                    holds.push(Hold {
                        asked,
                        granted,
                        returned,
                    });
                    if think > 0 {
                        tokio::time::sleep(Duration::from_millis(think)).await;
                    }
                }
                holds
            })
        })
        .collect();
    let mut out = String::new();
    for task in tasks {
        for h in task.await.expect("a task") {
            out.push_str(&format!("{} {} {}\n", h.asked, h.granted, h.returned));
        }
    }
    print!("{out}");
}

/// The figures of one run: utilization, pairs/s, return to grant p50 and
/// p99 (µs; 0 if no return found a borrower waiting).
#[derive(Debug, Clone, Copy)]
struct Figures {
    utilization: f64,
    pairs_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    /// Every hold of the run, in the window or not.
    holds: usize,
}

fn figures(mut holds: Vec<Hold>, start_us: u64) -> Figures {
    let (from, to) = (start_us + WARM_US, start_us + SECONDS * 1_000_000);
    let window = (to - from) as f64;
    let busy: u64 = holds
        .iter()
        .map(|h| h.returned.min(to).saturating_sub(h.granted.max(from)))
        .sum();
    let pairs = holds
        .iter()
        .filter(|h| h.returned >= from && h.returned < to)
        .count();
    holds.sort_unstable_by_key(|h| h.granted);
    let mut gaps = Vec::new();
    for r in holds
        .iter()
        .map(|h| h.returned)
        .filter(|r| (from..to).contains(r))
    {
        let next = holds.partition_point(|h| h.granted < r);
        if let Some(h) = holds[next..].iter().find(|h| h.asked < r) {
            gaps.push(h.granted - r);
        }
    }
    gaps.sort_unstable();
    let quantile = |q| {
        if gaps.is_empty() {
            0
        } else {
            percentile(&gaps, q)
        }
    };
    Figures {
        utilization: busy as f64 / (f64::from(COUNT) * window),
        pairs_per_s: pairs as f64 / (window / 1e6),
        p50_us: quantile(0.5),
        p99_us: quantile(0.99),
        holds: holds.len(),
    }
}

/// Runs `processes` worker commands, each made by `worker(start_us)`;
/// every hold they printed.
fn run(processes: usize, worker: impl Fn(u64) -> Command) -> (Vec<Hold>, u64) {
    let (outputs, start_us) = semaphore_benches::run_workers(processes, worker);
    let mut holds = Vec::new();
    for line in outputs.iter().flat_map(|out| out.lines()) {
        let n: Vec<u64> = line.split(' ').filter_map(|n| n.parse().ok()).collect();
        if let [asked, granted, returned] = n[..] {
            holds.push(Hold {
                asked,
                granted,
                returned,
            });
        }
    }
    (holds, start_us)
}

/// Our workers on the store at `url` (prefix `prefix`).
fn ours(url: &str, prefix: &str, case: (u64, u64)) -> Figures {
    if url == "memory" {
        ours_with(url, prefix, case, (1, PROCESSES * TASKS))
    } else {
        ours_with(url, prefix, case, (PROCESSES, TASKS))
    }
}

/// [`ours`], in `processes` processes of `tasks` tasks each.
fn ours_with(
    url: &str,
    prefix: &str,
    (hold, think): (u64, u64),
    (processes, tasks): (usize, usize),
) -> Figures {
    let (holds, start) = run(processes, |start_us| {
        let mut command = Command::new(std::env::current_exe().expect("this bench's path"));
        command.env(ROLE, "work").args([
            url,
            prefix,
            &tasks.to_string(),
            &hold.to_string(),
            &think.to_string(),
            &start_us.to_string(),
        ]);
        command
    });
    figures(holds, start)
}

/// A row of line 26: the medians of `runs`.
fn row(name: &str, (hold, think): (u64, u64), runs: &[Figures]) -> String {
    let of = |f: fn(&Figures) -> f64| median(runs.iter().map(f).collect());
    format!(
        "| {name}, hold {hold} / think {think} ms | {:.2} | {:.0} | {:.0} / {:.0} µs |",
        of(|f| f.utilization),
        of(|f| f.pairs_per_s),
        of(|f| f.p50_us as f64),
        of(|f| f.p99_us as f64),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let play = async |_: &str, store: Arc<dyn Store>, args: &[String]| {
        let n = |i: usize| args[i].parse::<u64>().expect("a number");
        let pool = Pool::new(store, PoolId::from_name(POOL));
        if args[1] == "memory" {
            pool.register(COUNT).await.expect("register");
        }
        work(pool, n(3) as usize, n(4), n(5), n(6)).await;
    };
    if !role_or_bench("working", &["work"], store, play).await {
        return;
    }
    let dir = out_dir(env!("CARGO_TARGET_TMPDIR"));
    let npm = semaphore_benches::npm_folder(
        &dir,
        "npm-redis-semaphore",
        PEER_PACKAGE,
        &[("working.js", PEER_WORKER)],
    );
    let only = std::env::var("SEMAPHORE_BENCH_LINE").ok();
    println!("| line | utilization | pairs/s | return to grant p50 / p99 |");
    println!("| --- | --- | --- | --- |");
    if only.as_deref() != Some("27") {
        working(&npm).await;
    }
    if only.as_deref() != Some("26") {
        for row in proxied::behind_the_proxy(&npm).await {
            println!("{row}");
        }
    }
}

/// Line 26: each store, and the peer, at each case; prints the rows.
async fn working(npm: &Path) {
    let files = tempfile::tempdir().expect("a temporary directory");
    let redis = semaphore_redis::testing::TestServer::start().expect("a Redis server");
    let postgres = semaphore_postgres::testing::TestServer::start_durable().expect("PostgreSQL");
    let mysql = semaphore_mysql::testing::TestServer::start().expect("a MariaDB server");
    let sqlite = format!("sqlite:{}", files.path().join("line26.db").display());
    let mut stores: Vec<(&str, String, String)> = vec![
        ("memory (1 process)", "memory".into(), String::new()),
        ("SQLite", sqlite, String::new()),
        (
            "Redis",
            redis.url().into(),
            semaphore_redis::testing::TestServer::fresh_prefix(),
        ),
        (
            "PostgreSQL",
            postgres.url().into(),
            semaphore_postgres::testing::TestServer::fresh_schema(),
        ),
        (
            "MySQL",
            mysql.url().into(),
            semaphore_mysql::testing::TestServer::fresh_prefix(),
        ),
    ];
    // `SEMAPHORE_BENCH_STORES=SQLite,Redis`: those rows alone (the peer's with Redis's).
    let named = std::env::var("SEMAPHORE_BENCH_STORES").unwrap_or_default();
    let chosen = |name: &str| named.is_empty() || named.split(',').any(|n| name.starts_with(n));
    stores.retain(|(name, _, _)| chosen(name));
    let with_peer = chosen("Redis");
    for (_, url, prefix) in stores.iter().filter(|(_, url, _)| url != "memory") {
        let pool = Pool::new(store(url, prefix).await, PoolId::from_name(POOL));
        pool.register(COUNT).await.expect("register");
    }
    let socket = redis
        .url()
        .strip_prefix("redis+unix://")
        .expect("the throwaway server's unix socket");
    for case in CASES {
        let mut runs = vec![Vec::new(); stores.len() + 1];
        for _ in 0..ROUNDS {
            for (i, (_, url, prefix)) in stores.iter().enumerate() {
                runs[i].push(ours(url, prefix, case));
            }
            if with_peer {
                runs[stores.len()].push(peer(npm, socket, case));
            }
        }
        for (i, (name, _, _)) in stores.iter().enumerate() {
            println!("{}", row(&format!("26. {name}"), case, &runs[i]));
        }
        let peer_name = "26. redis-semaphore (peer, Redis)";
        if with_peer {
            println!("{}", row(peer_name, case, &runs[stores.len()]));
        }
    }
    // The commits the PostgreSQL and MySQL rows are set against, same sitting.
    let ceilings = semaphore_benches::commits::ceiling_rows(postgres.url(), mysql.url(), ROUNDS);
    ceilings.iter().for_each(|row| println!("{row}"));
}

const PEER_PACKAGE: &str =
    r#"{ "private": true, "dependencies": { "redis-semaphore": "^5.6.0", "ioredis": "^5.4.0" } }"#;

/// The peer's worker: argv the server's unix socket (or `host:port`), the pool's key, its
/// count, tasks, hold and think (ms), start (unix µs), seconds. Prints
/// each hold's stamps (unix µs, from node's high-resolution clock).
const PEER_WORKER: &str = r#"
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');
const [at, key, count, tasks, hold, think, startUs, seconds] = process.argv.slice(2).map(
    (a, i) => (i < 2 ? a : Number(a)));
const [host, port] = at.split(':');
const client = new Redis(port ? { host, port: Number(port) } : { path: at });
const us = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const end = startUs + seconds * 1e6;
const options = { lockTimeout: 30000, refreshInterval: 0, acquireTimeout: 10000 };
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const out = [];
async function task() {
    while (us() < end) {
        const asked = us();
        const semaphore = new Semaphore(client, key, count, options);
        await semaphore.acquire();
        const granted = us();
        await sleep(hold);
        const returned = us();
        await semaphore.release();
        out.push(`${asked} ${granted} ${returned}`);
        if (think > 0) await sleep(think);
    }
}
setTimeout(async () => {
    await Promise.all(Array.from({ length: tasks }, task));
    process.stdout.write(out.join('\n') + '\n');
    client.disconnect();
}, Math.max(0, startUs / 1000 - Date.now()));
"#;

/// The peer's workers in `npm` on the Redis server at unix socket
/// `socket` (or `host:port`), as ours: [`PROCESSES`] node processes of [`TASKS`] tasks.
fn peer(npm: &Path, socket: &str, (hold, think): (u64, u64)) -> Figures {
    let (holds, start) = run(PROCESSES, |start_us| {
        let mut command = Command::new("node");
        command.arg(npm.join("working.js")).args([
            socket,
            "line26-peer",
            &COUNT.to_string(),
            &TASKS.to_string(),
            &hold.to_string(),
            &think.to_string(),
            &start_us.to_string(),
            &SECONDS.to_string(),
        ]);
        command
    });
    figures(holds, start)
}
