//! How often a borrow allocates, counted by `stats_alloc`'s counting
//! global allocator: none for an uncontended pair (the common path answers
//! in place, with no boxed future), as tokio's `Semaphore` makes none; and
//! for a borrow that waits, counted beside tokio's semaphore doing the same
//! work (the tasks' own allocations cancel out): at most three more.
//!
//! One test in this binary, on a current-thread runtime: the allocator
//! counts every thread's allocations, and nothing else runs meanwhile.

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use semaphore_memory::{MemoryStore, Pool, PoolId};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const ROUNDS: usize = 1_000;

#[test]
fn borrows_allocate_as_little_as_tokio_s() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = Pool::new(
            Arc::new(MemoryStore::new()),
            PoolId::from_name("allocations"),
        );
        pool.register(1).await.unwrap();
        let ttl = Duration::from_secs(30);
        // Warm: the pool's first borrow makes its table.
        pool.borrow(ttl, Duration::ZERO)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();

        let region = Region::new(GLOBAL);
        for _ in 0..ROUNDS {
            let guard = pool.borrow(ttl, Duration::from_secs(1)).await.unwrap();
            guard.release().await.unwrap();
        }
        let pair = region.change().allocations as f64 / ROUNDS as f64;
        println!("uncontended pair: {pair} allocations");
        assert_eq!(
            pair, 0.0,
            "an uncontended borrow and return allocate nothing"
        );

        let ours = waiting(|| {
            let pool = pool.clone();
            async move {
                let held = pool.borrow_owned(ttl, Duration::ZERO).await.unwrap();
                let waiters = spawn_waiters(|| {
                    let pool = pool.clone();
                    async move { drop(pool.borrow(ttl, Duration::from_secs(3600)).await.unwrap()) }
                });
                while pool.waiting().count < WAITERS {
                    tokio::task::yield_now().await;
                }
                drop(held);
                for waiter in waiters {
                    waiter.await.unwrap();
                }
            }
        })
        .await;
        let theirs = waiting(|| async {
            let semaphore = Arc::new(tokio::sync::Semaphore::new(1));
            let held = semaphore.clone().acquire_owned().await.unwrap();
            let waiters = spawn_waiters(|| {
                let semaphore = semaphore.clone();
                async move { drop(semaphore.acquire().await.unwrap()) }
            });
            // Each waiter queues in its first poll.
            for _ in 0..WAITERS {
                tokio::task::yield_now().await;
            }
            drop(held);
            for waiter in waiters {
                waiter.await.unwrap();
            }
        })
        .await;
        let extra = ours - theirs;
        println!("a waiting borrow: {ours} allocations, tokio's {theirs}: {extra} more");
        // Three: the full path's boxed future, its waiter (shared with the
        // pool's queue), its deadline's boxed sleep (`Clock::sleep_until`).
        assert!(
            extra <= 3.05,
            "a waiting borrow allocates at most 3 times more than tokio's ({extra})"
        );
    });
}

const WAITERS: usize = 100;

fn spawn_waiters<F: Future<Output = ()> + Send + 'static>(
    mut waiter: impl FnMut() -> F,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WAITERS).map(|_| tokio::spawn(waiter())).collect()
}

/// Allocations per waiter of `run`, which serves `WAITERS` waiters; the
/// first run warms (a queue's first use grows it).
async fn waiting<F: Future<Output = ()>>(mut run: impl FnMut() -> F) -> f64 {
    run().await;
    let region = Region::new(GLOBAL);
    for _ in 0..10 {
        run().await;
    }
    region.change().allocations as f64 / (10 * WAITERS) as f64
}
