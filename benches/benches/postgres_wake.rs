//! Line 10 of BENCHMARKS.md: cross-process wake-up through PostgreSQL's
//! `LISTEN`/`NOTIFY`. Process A returns, process B's waiting borrow
//! completes: the latency from A's return having committed to B's grant,
//! over 300 hand-offs; and the CPU an idle waiter burns per second of
//! waiting. Percentiles are not what criterion measures, so this bench has
//! its own harness: it re-invokes itself as process A, and writes its
//! figures to `target/semaphore-bench/line10.json` for the `report` binary.

use semaphore_benches::{cpu_ns, out_dir, unix_us};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

const ROLE: &str = "SEMAPHORE_BENCH_ROLE";
const HAND_OFFS: usize = 300;
const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(60);

async fn store(url: &str, schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions::default().schema(schema);
    Arc::new(
        PostgresStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

/// Process A: holds the slot, and on each line from stdin returns it and
/// prints the time its return committed, then borrows it again.
async fn holder(url: &str, schema: &str) {
    let pool = Pool::new(store(url, schema).await, PoolId::from_name("line10"));
    loop {
        let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
        println!("HELD");
        std::io::stdout().flush().ok();
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        lease.release().await.expect("return");
        println!("{}", unix_us());
        std::io::stdout().flush().ok();
    }
}

async fn line10(url: &str) -> serde_json::Value {
    let schema = TestServer::fresh_schema();
    let store = store(url, &schema).await;
    let id = PoolId::from_name("line10");
    let pool = Pool::new(store.clone(), id);
    pool.register(1).await.expect("register");
    let mut a = Command::new(std::env::current_exe().expect("this bench's path"))
        .env(ROLE, "hold")
        .args([url, &schema])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting process A");
    let mut to_a = a.stdin.take().expect("stdin");
    let mut from_a = BufReader::new(a.stdout.take().expect("stdout")).lines();
    let mut next = move || from_a.next().expect("a line from A").expect("reading A");

    assert_eq!(next(), "HELD");
    let cpu0 = cpu_ns();
    let idle = Instant::now();
    let waited = pool.borrow(TTL, Duration::from_secs(2)).await;
    assert!(waited.is_err(), "the pool was held all along");
    let idle_share = (cpu_ns() - cpu0) as f64 / idle.elapsed().as_nanos() as f64;

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
        // A's return must find B queued in the table, so that it notifies.
        while store.queue_heads(id).await.expect("queue heads") != 1 {
            tokio::task::yield_now().await;
        }
        writeln!(to_a).expect("telling A");
        let returned: u64 = next().parse().expect("A's return time");
        let granted = waiter.await.expect("the waiter");
        latencies.push(granted.saturating_sub(returned));
        assert_eq!(next(), "HELD");
    }
    drop(to_a);
    a.wait().expect("A's exit");
    semaphore_benches::hand_off_figures(latencies, HAND_OFFS, idle_share)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if std::env::var(ROLE).as_deref() == Ok("hold") {
        return holder(&args[1], &args[2]).await;
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
