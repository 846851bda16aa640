//! Lines 4 and 5 of BENCHMARKS.md: real processes on one SQLite file.
//! Percentiles are not what criterion measures, so this bench has its own
//! harness: it re-invokes itself as the other process, and writes its
//! figures to `target/semaphore-bench/*.json` for the `report` binary.
//!
//! - Line 4: two processes looping borrow / return on one pool (8 slots, so
//!   only SQLite's write lock is contended) for 3 s, against one process
//!   alone for 3 s: total pairs per second, and borrow latency p50 / p99 /
//!   p99.9 / max over both processes.
//! - Line 5: process A returns, process B's waiting borrow completes: the
//!   latency from A's return having committed to B's grant, over 300
//!   hand-offs (A borrows again only after B's grant); and the CPU an idle
//!   waiter burns per second of waiting.

use semaphore_benches::{cpu_ns, out_dir, percentile, unix_us};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const ROLE: &str = "SEMAPHORE_BENCH_ROLE";
const LOOP_FOR: Duration = Duration::from_secs(3);
const HAND_OFFS: usize = 300;
const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(60);

fn pool(db: &Path, name: &str) -> Pool {
    Pool::new(
        Arc::new(SqliteStore::open(db).expect("opening the bench database")),
        PoolId::from_name(name),
    )
}

/// Loops borrow / return for `LOOP_FOR`; prints the pair count and every
/// borrow's latency in µs.
async fn looper(db: &Path) {
    let pool = pool(db, "line4");
    let mut latencies = Vec::new();
    let start = Instant::now();
    while start.elapsed() < LOOP_FOR {
        let t = Instant::now();
        let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
        latencies.push(t.elapsed().as_micros() as u64);
        lease.release().await.expect("return");
    }
    let line: Vec<String> = latencies.iter().map(u64::to_string).collect();
    println!("{}", line.join(" "));
}

fn spawn_self(role: &str, db: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("this bench's path"))
        .env(ROLE, role)
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the other process")
}

fn collect(child: std::process::Child) -> Vec<u64> {
    let out = child.wait_with_output().expect("the looper's output");
    assert!(out.status.success(), "a looper failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().expect("a latency"))
        .collect()
}

fn line4(db: &Path) -> serde_json::Value {
    let one = collect(spawn_self("loop", db)).len();
    let (a, b) = (spawn_self("loop", db), spawn_self("loop", db));
    let mut both = collect(a);
    both.extend(collect(b));
    both.sort_unstable();
    let secs = LOOP_FOR.as_secs_f64();
    serde_json::json!({
        "one_process_pairs_per_s": one as f64 / secs,
        "two_processes_pairs_per_s": both.len() as f64 / secs,
        "p50_us": percentile(&both, 0.5),
        "p99_us": percentile(&both, 0.99),
        "p999_us": percentile(&both, 0.999),
        "max_us": both[both.len() - 1],
    })
}

/// Whether a line came on stdin (`false` at its end).
fn read_line() -> bool {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap_or(0) > 0
}

/// Process A: holds the slot, and on a line from stdin returns it and
/// prints the time its return committed; on the next line, borrows it
/// again.
async fn holder(db: &Path) {
    let pool = pool(db, "line5");
    loop {
        let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
        println!("HELD");
        std::io::stdout().flush().ok();
        if !read_line() {
            return;
        }
        lease.release().await.expect("return");
        println!("{}", unix_us());
        std::io::stdout().flush().ok();
        // Borrow again only once B is granted: borrowing at once would
        // race B's grant with this process's own queued borrow (two write
        // transactions) on a 2-core machine, and time that race.
        if !read_line() {
            return;
        }
    }
}

async fn line5(db: &Path) -> serde_json::Value {
    let pool = pool(db, "line5");
    pool.register(1).await.expect("register");
    let mut a = spawn_self("hold", db);
    let mut to_a = a.stdin.take().expect("stdin");
    // A's lines come through a thread of their own: a blocking read on a
    // worker would hold up the waiter this measures.
    let a_out = BufReader::new(a.stdout.take().expect("stdout"));
    let (lines, mut from_a) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in a_out.lines() {
            if lines.send(line.expect("reading A")).is_err() {
                return;
            }
        }
    });

    // Idle: wait on the held pool for 2 s and count this process's CPU.
    assert_eq!(from_a.recv().await.expect("a line from A"), "HELD");
    let cpu0 = cpu_ns();
    let idle = Instant::now();
    let waited = pool.borrow(TTL, Duration::from_secs(2)).await;
    assert!(waited.is_err(), "the pool was held all along");
    let idle_share = (cpu_ns() - cpu0) as f64 / idle.elapsed().as_nanos() as f64;

    // A looks at the file, not at this process: B's waiter counts as
    // queued once its place is in `semaphore_waiters`.
    let file = rusqlite::Connection::open(db).expect("a second connection");
    let queued_in_file = move || -> i64 {
        file.query_row("SELECT COUNT(*) FROM semaphore_waiters", [], |r| r.get(0))
            .expect("counting queued heads")
    };
    let mut latencies = Vec::with_capacity(HAND_OFFS);
    for _ in 0..HAND_OFFS {
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
                let at = unix_us();
                lease.release().await.expect("return");
                at
            })
        };
        while queued_in_file() != 1 {
            tokio::task::yield_now().await;
        }
        writeln!(to_a).expect("telling A to return");
        let returned: u64 = (from_a.recv().await.expect("a line from A"))
            .parse()
            .expect("A's return time");
        let granted = waiter.await.expect("the waiter");
        writeln!(to_a).expect("telling A to borrow again");
        latencies.push(granted.saturating_sub(returned));
        assert_eq!(from_a.recv().await.expect("a line from A"), "HELD");
    }
    drop(to_a);
    a.wait().expect("A's exit");
    semaphore_benches::hand_off_figures(latencies, HAND_OFFS, idle_share)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match std::env::var(ROLE).as_deref() {
        Ok("loop") => return looper(Path::new(&args[1])).await,
        Ok("hold") => return holder(Path::new(&args[1])).await,
        _ => {}
    }
    if !semaphore_benches::selected("processes", &args) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary directory");
    let db4 = dir.path().join("line4.db");
    pool(&db4, "line4").register(8).await.expect("register");
    let four = line4(&db4);
    let five = line5(&dir.path().join("line5.db")).await;
    println!("line 4: {four}");
    println!("line 5: {five}");
    let out = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("line4.json"), four.to_string()).expect("writing line 4");
    std::fs::write(out.join("line5.json"), five.to_string()).expect("writing line 5");
}
