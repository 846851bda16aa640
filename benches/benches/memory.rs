//! Memory store against tokio's semaphore, in the same run
//! (BENCHMARKS.md lines 1 and 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use semaphore_memory::{MemoryStore, Pool, PoolId};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Semaphore;

const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(60);

fn pool(count: u32, rt: &Runtime) -> Pool {
    let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("bench"));
    rt.block_on(pool.register(count)).unwrap();
    pool
}

/// Line 1: one borrow + return on an idle pool, current-thread runtime.
fn uncontended(c: &mut Criterion) {
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("1_uncontended_pair");
    let tokio_sem = Semaphore::new(4);
    group.bench_function("anchor_tokio", |b| {
        b.to_async(&rt)
            .iter(|| async { drop(tokio_sem.acquire().await.unwrap()) })
    });
    let pool = pool(4, &rt);
    group.bench_function("memory_pool", |b| {
        b.to_async(&rt)
            .iter(|| async { drop(pool.borrow(TTL, WAIT).await.unwrap()) })
    });
    group.finish();
}

/// Line 2: 64 tasks loop borrow / hold across a yield / return on 4 slots,
/// on a 2-worker runtime. Time per completed pair (lower is more throughput).
fn contended(c: &mut Criterion) {
    const TASKS: u64 = 64;
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("2_contended_64_tasks_4_slots");
    group.measurement_time(Duration::from_secs(8));
    let tokio_sem = Arc::new(Semaphore::new(4));
    group.bench_function("anchor_tokio", |b| {
        b.iter_custom(|iters| {
            let per_task = iters.div_ceil(TASKS);
            let sem = tokio_sem.clone();
            rt.block_on(async move {
                let start = Instant::now();
                let tasks: Vec<_> = (0..TASKS)
                    .map(|_| {
                        let sem = sem.clone();
                        tokio::spawn(async move {
                            for _ in 0..per_task {
                                let permit = sem.acquire().await.unwrap();
                                tokio::task::yield_now().await;
                                drop(permit);
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per_task * TASKS) as f64)
            })
        })
    });
    let pool = pool(4, &rt);
    group.bench_function("memory_pool", |b| {
        b.iter_custom(|iters| {
            let per_task = iters.div_ceil(TASKS);
            let pool = pool.clone();
            rt.block_on(async move {
                let start = Instant::now();
                let tasks: Vec<_> = (0..TASKS)
                    .map(|_| {
                        let pool = pool.clone();
                        tokio::spawn(async move {
                            for _ in 0..per_task {
                                let lease = pool.borrow(TTL, WAIT).await.unwrap();
                                tokio::task::yield_now().await;
                                drop(lease);
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start
                    .elapsed()
                    .mul_f64(iters as f64 / (per_task * TASKS) as f64)
            })
        })
    });
    group.finish();
}

/// Line 2b: two threads, each with its own current-thread runtime, each
/// looping borrow + return on a pool of its own in one shared store,
/// against two threads on two tokio semaphores. Time per pair per thread.
fn two_pools(c: &mut Criterion) {
    let mut group = c.benchmark_group("2b_two_pools_two_threads");
    let on_two_threads = |iters: u64, job: &(dyn Fn(u64, usize) + Sync)| {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for thread in 0..2 {
                scope.spawn(move || job(iters, thread));
            }
        });
        start.elapsed()
    };
    let sems = [Semaphore::new(4), Semaphore::new(4)];
    group.bench_function("anchor_tokio", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|iters, thread| {
                let rt = Builder::new_current_thread().build().unwrap();
                rt.block_on(async {
                    for _ in 0..iters {
                        drop(sems[thread].acquire().await.unwrap());
                    }
                })
            })
        })
    });
    let store = Arc::new(MemoryStore::new());
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let pools = ["bench-a", "bench-b"].map(|name| {
        let pool = Pool::new(store.clone(), PoolId::from_name(name));
        rt.block_on(pool.register(4)).unwrap();
        pool
    });
    group.bench_function("memory_store", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|iters, thread| {
                let rt = Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    for _ in 0..iters {
                        drop(pools[thread].borrow(TTL, WAIT).await.unwrap());
                    }
                })
            })
        })
    });
    group.finish();
}

/// Line 2c: 10,000 tasks queue on a one-slot pool held by the bench; then
/// it lets go, and each task, once granted, returns at once, handing the
/// slot to the next: 10,000 hand-offs, timed from the first return to the
/// last grant (the queueing is not timed). Time per hand-off.
fn handoffs(c: &mut Criterion) {
    const WAITERS: u64 = 10_000;
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("2c_10000_waiters");
    group.sample_size(10);
    /// Spawns the waiters with `waiter`, lets them all queue (`queued`
    /// counts them), runs `let_go`, and times until every waiter is done.
    async fn round<F: std::future::Future<Output = ()> + 'static>(
        waiter: impl Fn() -> F,
        queued: impl Fn() -> bool,
        let_go: impl FnOnce(),
    ) -> Duration {
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| tokio::task::spawn_local(waiter()))
            .collect();
        while !queued() {
            tokio::task::yield_now().await;
        }
        let start = Instant::now();
        let_go();
        for task in tasks {
            task.await.unwrap();
        }
        start.elapsed()
    }
    let rounds = |iters: u64| iters.div_ceil(WAITERS);
    group.bench_function("anchor_tokio", |b| {
        b.iter_custom(|iters| {
            let local = tokio::task::LocalSet::new();
            let mut total = Duration::ZERO;
            for _ in 0..rounds(iters) {
                let sem = Arc::new(Semaphore::new(1));
                let queued = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let held = sem.clone().try_acquire_owned().unwrap();
                total += local.block_on(
                    &rt,
                    round(
                        || {
                            let (sem, queued) = (sem.clone(), queued.clone());
                            async move {
                                queued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                drop(sem.acquire().await.unwrap());
                            }
                        },
                        || queued.load(std::sync::atomic::Ordering::Relaxed) == WAITERS,
                        || drop(held),
                    ),
                );
            }
            total.mul_f64(iters as f64 / (rounds(iters) * WAITERS) as f64)
        })
    });
    let pool = pool(1, &rt);
    group.bench_function("memory_pool", |b| {
        b.iter_custom(|iters| {
            let local = tokio::task::LocalSet::new();
            let mut total = Duration::ZERO;
            for _ in 0..rounds(iters) {
                let held = rt.block_on(pool.borrow_owned(TTL, WAIT)).unwrap();
                total += local.block_on(
                    &rt,
                    round(
                        || {
                            let pool = pool.clone();
                            async move { drop(pool.borrow(TTL, WAIT).await.unwrap()) }
                        },
                        || pool.waiting().count == WAITERS as usize,
                        || drop(held),
                    ),
                );
            }
            total.mul_f64(iters as f64 / (rounds(iters) * WAITERS) as f64)
        })
    });
    group.finish();
}

criterion_group!(benches, uncontended, contended, two_pools, handoffs);
criterion_main!(benches);
