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

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
