//! The cross-process wake-up measurement that lines 10 and 16 share: a
//! process A holds a count-1 pool's slot and returns it on each line from
//! its stdin; this process's waiting borrow completes; the latency is from
//! A's return having finished to B's grant, over [`HAND_OFFS`] hand-offs,
//! with the CPU an idle waiter burns per second of waiting.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use semaphore_benches::{cpu_ns, unix_us};
use semaphore_postgres::store::Store;
use semaphore_postgres::{Pool, PoolId};

/// The variable that makes the bench's own binary process A.
pub(crate) use semaphore_benches::ROLE;
pub(crate) const HAND_OFFS: usize = 300;
const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(60);

/// Process A: holds the slot, and on each line from stdin returns it and
/// prints the time its return finished, then borrows it again.
pub(crate) async fn holder(pool: Pool) {
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

/// Process A's role: [`holder`] of the pool named `line` on `store`.
pub(crate) async fn hold(store: std::sync::Arc<dyn Store>, line: &str) {
    holder(Pool::new(store, PoolId::from_name(line))).await
}

/// A wake line's figures: registers the count-1 pool `id` on `store`,
/// starts process A on the same store (`url`, and `scope` its prefix or
/// schema) and measures the [`hand_offs`], with `queue_heads` as there.
pub(crate) async fn line(
    url: &str,
    scope: &str,
    store: std::sync::Arc<dyn Store>,
    id: PoolId,
    queue_heads: impl AsyncFn() -> u32,
) -> serde_json::Value {
    let pool = Pool::new(store, id);
    pool.register(1).await.expect("register");
    let a = spawn_holder(&[url, scope]);
    hand_offs(&pool, a, queue_heads).await
}

/// Process A: this bench's binary with `args`, as the holder.
pub(crate) fn spawn_holder(args: &[&str]) -> Child {
    Command::new(std::env::current_exe().expect("this bench's path"))
        .env(ROLE, "hold")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting process A")
}

/// The hand-offs from `a` to borrowers of `pool`; `queue_heads` tells
/// whether this process's borrower is queued where A's return sees it.
pub(crate) async fn hand_offs(
    pool: &Pool,
    mut a: Child,
    queue_heads: impl AsyncFn() -> u32,
) -> serde_json::Value {
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
        // A's return must find B queued, so that it wakes B's process.
        while queue_heads().await != 1 {
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
