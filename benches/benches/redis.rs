//! Redis store against its anchor on the same throwaway server, over the
//! same kind of connection, in the same run (BENCHMARKS.md line 14): a
//! borrow + return pair against two calls of a do-nothing script (one
//! `INCR`, by `EVALSHA`), the least a primitive that is one script call
//! can cost.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use semaphore_redis::redis::Script;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};
use tokio::runtime::{Builder, Runtime};

const TTL: Duration = Duration::from_secs(600);

/// The anchor's script: one `INCR`, nothing else.
const INCR: &str = "return redis.call('INCR', KEYS[1])";

fn redis_pairs(c: &mut Criterion) {
    let server = TestServer::start().expect("a Redis server for the benches");
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(RedisStore::connect_with(
            server.url(),
            RedisOptions::default().restart_grace(Duration::ZERO),
        ))
        .unwrap();
    let raw = store.connection().clone();
    let pool = Pool::new(Arc::new(store), PoolId::from_name("bench"));
    rt.block_on(pool.register(4)).unwrap();
    let incr = Script::new(INCR);

    let mut group = c.benchmark_group("redis_pairs");
    group.bench_function("anchor_incr_script_pair", |b| {
        let rt: &Runtime = &rt;
        b.to_async(rt).iter(|| {
            let (mut raw, incr) = (raw.clone(), &incr);
            async move {
                for _ in 0..2 {
                    let _: i64 = incr.key("bench:n").invoke_async(&mut raw).await.unwrap();
                }
            }
        })
    });
    group.bench_function("redis_pool_pair", |b| {
        b.to_async(&rt).iter(|| async {
            pool.try_borrow(TTL).await.unwrap().release().await.unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, redis_pairs);
criterion_main!(benches);
