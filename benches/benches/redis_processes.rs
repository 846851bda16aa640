//! Lines 15 and 16 of BENCHMARKS.md, on a throwaway Redis server, with a
//! harness of their own (real processes; rates and percentiles): it
//! re-invokes itself as the worker processes, and writes its figures to
//! `target/semaphore-bench/line15.json` and `line16.json` for `report`.
//!
//! - Line 15: a hot pool (count 8), tasks looping borrow + return for 3 s
//!   (1 task; 16 and 64 in 4 processes): pairs/s against the same tasks
//!   calling a do-nothing script (one `INCR`) twice per loop, each process
//!   on one connection as the store's are, and against the peer, npm's
//!   `redis-semaphore`, at each point (see `peer/mod.rs`).
//! - Line 16: cross-process wake through pub/sub (see `wake/mod.rs`).

#[allow(dead_code)] // `rate`, for the lines of one point
mod hot;
mod peer;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use hot::{borrow_and_return, rate_of, worker};
use semaphore_benches::out_dir;
use semaphore_redis::redis::Script;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};

async fn store(url: &str, prefix: &str) -> Arc<RedisStore> {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::ZERO);
    Arc::new(
        RedisStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

async fn line16(url: &str) -> serde_json::Value {
    let prefix = TestServer::fresh_prefix();
    let store = store(url, &prefix).await;
    let id = PoolId::from_name("line16");
    let pool = Pool::new(store.clone(), id);
    pool.register(1).await.expect("register");
    let a = wake::spawn_holder(&[url, &prefix]);
    wake::hand_offs(&pool, a, async || {
        store.queue_heads(id).await.expect("queue heads")
    })
    .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match std::env::var(wake::ROLE).as_deref() {
        Ok("hold") => {
            let pool = Pool::new(store(&args[1], &args[2]).await, PoolId::from_name("line16"));
            return wake::holder(pool).await;
        }
        Ok("ours") => {
            let pool = Pool::new(store(&args[1], &args[2]).await, PoolId::from_name("line15"));
            let start_us = args[3].parse().expect("a start time");
            return borrow_and_return(start_us, pool).await;
        }
        Ok("anchor") => {
            let store = store(&args[1], &args[2]).await;
            let start_us = args[3].parse().expect("a start time");
            let script = Arc::new(Script::new("return redis.call('INCR', KEYS[1])"));
            return worker(start_us, move || {
                let (mut connection, script) = (store.connection().clone(), script.clone());
                async move {
                    for _ in 0..2 {
                        let _: i64 = script
                            .key("line15:n")
                            .invoke_async(&mut connection)
                            .await
                            .expect("the script");
                    }
                }
            })
            .await;
        }
        _ => {}
    }
    if !semaphore_benches::selected("redis_processes", &args) {
        return;
    }
    let server = TestServer::start().expect("a Redis server for the bench");
    let prefix = TestServer::fresh_prefix();
    let pool = Pool::new(
        store(server.url(), &prefix).await,
        PoolId::from_name("line15"),
    );
    pool.register(8).await.expect("register");
    let args = [server.url(), &prefix];
    let socket = server
        .url()
        .strip_prefix("redis+unix://")
        .expect("the throwaway server's unix socket");
    let dir = out_dir(env!("CARGO_TARGET_TMPDIR"));
    let npm = peer::install(&dir);
    // (processes, tasks each): 1 task, 16 and 64 in 4 processes; ours and
    // the peer alternate.
    let mut ours = Vec::new();
    let mut peer = Vec::new();
    for (processes, tasks) in [(1, 1), (4, 4), (4, 16)] {
        ours.push(rate_of("ours", &args, processes, tasks));
        peer.push(peer::rate(&npm, socket, "line15-peer", processes, tasks));
    }
    let anchor = rate_of("anchor", &args, 4, 4);
    let anchor_64 = rate_of("anchor", &args, 4, 16);
    let fifteen = serde_json::json!({
        "pairs_per_s": ours[1],
        "anchor_pairs_per_s": anchor,
        "pairs_per_s_1_task": ours[0],
        "pairs_per_s_64_tasks": ours[2],
        "anchor_pairs_per_s_64_tasks": anchor_64,
        "peer_pairs_per_s_1_task": peer[0],
        "peer_pairs_per_s": peer[1],
        "peer_pairs_per_s_64_tasks": peer[2],
    });
    println!("line 15: {fifteen}");
    let sixteen = line16(server.url()).await;
    println!("line 16: {sixteen}");
    std::fs::write(dir.join("line15.json"), fifteen.to_string()).expect("writing line 15");
    std::fs::write(dir.join("line16.json"), sixteen.to_string()).expect("writing line 16");
}
