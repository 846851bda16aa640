//! The workloads of BENCHMARKS.md lines 1, 2 and 2c, once each, for
//! counting instructions under callgrind (`instructions` runs it; issue
//! 27). Each runs `n` pairs on a current-thread runtime, ours or tokio's
//! semaphore (the anchor), so that the difference between two `n` is the
//! cost of `n` pairs, set-up and tear-down cancelled out.
//!
//! ```text
//! pairs <memory|tokio> <1|2|2c> <n>
//! pairs step <1|2> <n>
//! pairs rules 1 <n>
//! ```
//! - `1`: one borrow (30 s, wait 1 s) and return at a time, count 4.
//! - `2`: 64 tasks on 4 slots, each holding across a yield, `n` pairs in all.
//! - `2c`: `n` waiters queued on one slot, served by `n` returns.
//! - `step 1`, `step 2`: the floors of lines 1 and 2: the memory store's
//!   own step alone through a pool's in-place answers (a lease id, the
//!   clock read, the one-pool slot
//!   table's grant and return under a lock), with no pool, guard or
//!   future; on line 2, inside a permit of tokio's semaphore acquired
//!   under a deadline.
//! - `rules 1`: what any pair needs by the rules, whatever its store: a
//!   v4 lease id, two readings of the clock, a lock taken twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use semaphore_memory::{MemoryStore, Pool, PoolId};
use tokio::sync::Semaphore;

const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(3600);

fn usage() -> ! {
    eprintln!(
        "usage: pairs <memory|tokio> <1|2|2c> <n> | pairs step <1|2> <n> | pairs rules 1 <n>"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(side), Some(line), Some(n)) = (args.get(1), args.get(2), args.get(3)) else {
        usage()
    };
    let n: u64 = n.parse().unwrap_or_else(|_| usage());
    match (side.as_str(), line.as_str()) {
        ("step", "1") => return step_uncontended(n),
        ("rules", "1") => return rules_only(n),
        _ => {}
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        match (side.as_str(), line.as_str()) {
            ("memory", "1") => memory_uncontended(n).await,
            ("tokio", "1") => tokio_uncontended(n).await,
            ("memory", "2") => memory_contended(n).await,
            ("tokio", "2") => tokio_contended(n).await,
            ("memory", "2c") => memory_hand_offs(n).await,
            ("tokio", "2c") => tokio_hand_offs(n).await,
            ("step", "2") => step_contended(n).await,
            _ => usage(),
        }
    });
}

async fn pool(count: u32) -> Pool {
    let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("bench"));
    pool.register(count).await.expect("register");
    pool
}

async fn memory_uncontended(n: u64) {
    let pool = pool(4).await;
    for _ in 0..n {
        let lease = pool.borrow(TTL, WAIT).await.expect("a slot");
        lease.release().await.expect("returned");
    }
}

/// What a pair cannot do without, the floor of lines 1 and 2: a lease
/// id and the memory store's own step through the pool's in-place
/// answers ([`InPlace`](semaphore_memory::store::InPlace), the one-pool
/// table a `Pool` handle binds: the clock read, the grant or return
/// under the pool's lock), with no pool handle, guard or future.
struct Step {
    _store: Arc<MemoryStore>,
    bound: Arc<dyn semaphore_memory::store::InPlace>,
    pool: PoolId,
}

impl Step {
    async fn new() -> Self {
        use semaphore_memory::store::Store;

        let store = Arc::new(MemoryStore::new());
        let pool = PoolId::from_name("bench");
        Pool::new(store.clone(), pool)
            .register(4)
            .await
            .expect("register");
        let bound = store
            .in_place()
            .and_then(|answers| answers.bind(pool))
            .expect("the memory store binds a pool's answers");
        Self {
            _store: store,
            bound,
            pool,
        }
    }

    fn grant(&self) -> semaphore_memory::Lease {
        use semaphore_memory::store::{BorrowRequest, TryBorrow};

        let request = BorrowRequest::new(self.pool, semaphore_memory::LeaseId::new(), TTL);
        let granted = self.bound.try_borrow(&request).expect("a step");
        let TryBorrow::Granted { lease } = std::hint::black_box(granted) else {
            panic!("a slot")
        };
        lease
    }

    fn give_back(&self, lease: &semaphore_memory::Lease) {
        assert!(self.bound.return_held(lease).expect("a step"), "returned");
    }
}

/// What any pair needs by the rules, whatever its store: an unguessable
/// (v4) lease id, the clock read at the grant and at the return (rule
/// "Time": expiries in wall-clock milliseconds), and a lock taken at each.
fn rules_only(n: u64) {
    use semaphore_memory::Clock;

    let clock = semaphore_memory::SystemClock;
    let lock = std::sync::Mutex::new(0u64);
    for _ in 0..n {
        let id = std::hint::black_box(semaphore_memory::LeaseId::new());
        let granted = clock.now_ms();
        *lock.lock().expect("the lock") = granted.get();
        let returned = clock.now_ms();
        *lock.lock().expect("the lock") = returned.get();
        std::hint::black_box((id, granted, returned));
    }
}

/// Line 1's floor: the step alone, no pool, guard or future.
fn step_uncontended(n: u64) {
    let step = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(Step::new());
    for _ in 0..n {
        let lease = step.grant();
        step.give_back(&lease);
    }
}

/// Line 2's floor: tokio's semaphore, each acquire under a deadline (a
/// borrow's wait), with the step inside each permit.
async fn step_contended(n: u64) {
    let sem = Arc::new(Semaphore::new(4));
    let step = Arc::new(Step::new().await);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (sem, step) = (sem.clone(), step.clone());
            tokio::spawn(async move {
                for _ in 0..n / TASKS {
                    let permit = tokio::time::timeout(LONG, sem.acquire())
                        .await
                        .expect("in time")
                        .expect("a permit");
                    let lease = step.grant();
                    tokio::task::yield_now().await;
                    step.give_back(&lease);
                    drop(permit);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
}

async fn tokio_uncontended(n: u64) {
    let sem = Semaphore::new(4);
    for _ in 0..n {
        drop(sem.acquire().await.expect("a permit"));
    }
}

const TASKS: u64 = 64;

async fn memory_contended(n: u64) {
    let pool = pool(4).await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for _ in 0..n / TASKS {
                    let lease = pool.borrow(TTL, LONG).await.expect("a slot");
                    tokio::task::yield_now().await;
                    drop(lease);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
}

async fn tokio_contended(n: u64) {
    let sem = Arc::new(Semaphore::new(4));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                for _ in 0..n / TASKS {
                    let permit = sem.acquire().await.expect("a permit");
                    tokio::task::yield_now().await;
                    drop(permit);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
}

async fn memory_hand_offs(n: u64) {
    let pool = pool(1).await;
    let held = pool.borrow_owned(TTL, WAIT).await.expect("a slot");
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { drop(pool.borrow(TTL, LONG).await.expect("a slot")) })
        })
        .collect();
    while pool.waiting().count < n as usize {
        tokio::task::yield_now().await;
    }
    drop(held);
    for waiter in waiters {
        waiter.await.expect("a waiter");
    }
}

async fn tokio_hand_offs(n: u64) {
    let sem = Arc::new(Semaphore::new(1));
    let held = sem.clone().acquire_owned().await.expect("a permit");
    // A task counts itself just before its acquire, which queues it in the
    // same poll: once all have counted, all are queued.
    let queued = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let (sem, queued) = (sem.clone(), queued.clone());
            tokio::spawn(async move {
                queued.fetch_add(1, Ordering::Relaxed);
                drop(sem.acquire().await.expect("a permit"))
            })
        })
        .collect();
    while queued.load(Ordering::Relaxed) < n {
        tokio::task::yield_now().await;
    }
    drop(held);
    for waiter in waiters {
        waiter.await.expect("a waiter");
    }
}
