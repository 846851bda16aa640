//! An in-process concurrency limiter: 24 tokio tasks call a slow "upstream"
//! through a pool of 4 slots. Each call prints the slot it held; the end
//! prints the highest concurrency the upstream saw.
//!
//! Run: `cargo run --release -p semaphore-examples --bin limiter`

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use semaphore_memory::{Error, MemoryStore, Pool, PoolId};

const SLOTS: u32 = 4;
const CALLS: u32 = 24;

/// The fragile upstream: counts how many callers are inside at once.
struct Upstream {
    inside: AtomicU32,
    highest: AtomicU32,
}

impl Upstream {
    async fn call(&self, request: u32) -> u64 {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.highest.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20 + u64::from(request % 5) * 10)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        u64::from(request) * 2
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("upstream"));
    pool.register(SLOTS).await?;
    let upstream = Arc::new(Upstream {
        inside: AtomicU32::new(0),
        highest: AtomicU32::new(0),
    });

    let started = Instant::now();
    let mut calls = Vec::new();
    for request in 0..CALLS {
        let (pool, upstream) = (pool.clone(), upstream.clone());
        calls.push(tokio::spawn(async move {
            // Hold a slot for at most 10 s; wait up to 30 s for one.
            let lease = pool
                .borrow(Duration::from_secs(10), Duration::from_secs(30))
                .await?;
            let answer = upstream.call(request).await;
            println!(
                "request {request:2} held slot {} (token {:2}) -> {answer}",
                lease.position, lease.token
            );
            Ok::<_, Error>(())
        }));
    }
    for call in calls {
        call.await.expect("a call task panicked")?;
    }
    let state = pool.inspect().await?;
    println!(
        "{CALLS} calls through {SLOTS} slots in {:?}; highest concurrency seen: {} (limit {SLOTS}); slots in use now: {}",
        started.elapsed(),
        upstream.highest.load(Ordering::SeqCst),
        state.in_use
    );
    Ok(())
}
