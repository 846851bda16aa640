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
//!
//! Group commit's profile: for every line-15 run, the server's
//! CPU (`INFO cpu`) and its commands (`INFO commandstats`): calls and the
//! server's time in each, per pair.

mod hot;
mod peer;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use hot::{borrow_and_return, rate_of, worker};
use semaphore_benches::{out_dir, per_unit, role_or_bench};
use semaphore_redis::redis::Script;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};

async fn store(url: &str, prefix: &str) -> Arc<RedisStore> {
    // The default restart grace, as users run: each borrow checks the
    // server's identity. A fresh server grants nothing in its first grace
    // (at least the session timeout): `main` waits that out.
    let options = RedisOptions::default().prefix(prefix);
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
    let queue_heads = async || store.queue_heads(id).await.expect("queue heads");
    wake::line(url, &prefix, store.clone(), id, queue_heads).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let roles = ["hold", "ours", "anchor"];
    let play = async |role: &str, store: Arc<RedisStore>, args: &[String]| match role {
        "hold" => wake::hold(store, "line16").await,
        "ours" => {
            let pool = Pool::new(store, PoolId::from_name("line15"));
            let start_us = args[3].parse().expect("a start time");
            borrow_and_return(start_us, pool).await
        }
        _ => {
            let start_us = args[3].parse().expect("a start time");
            let script = Arc::new(Script::new("return redis.call('INCR', KEYS[1])"));
            worker(start_us, move || {
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
            .await
        }
    };
    if !role_or_bench("redis_processes", &roles, store, play).await {
        return;
    }
    let server = TestServer::start().expect("a Redis server for the bench");
    let prefix = TestServer::fresh_prefix();
    let setup = store(server.url(), &prefix).await;
    let mut info = setup.connection().clone();
    let pool = Pool::new(setup, PoolId::from_name("line15"));
    pool.register(8).await.expect("register");
    // Past the fresh server's restart grace (rule "Restart grace").
    let first = pool.borrow(Duration::from_secs(30), Duration::from_secs(120));
    first
        .await
        .expect("a grant after the grace")
        .release()
        .await
        .expect("return");
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
    let mut profile = serde_json::Map::new();
    let mut profiled = async |name: String, run: &dyn Fn() -> f64| {
        let before = Counters::read(&mut info).await;
        let rate = run();
        let after = Counters::read(&mut info).await;
        profile.insert(name, after.per(&before, rate * hot::SECONDS as f64));
        rate
    };
    for (processes, tasks) in [(1, 1), (4, 4), (4, 16)] {
        let n = processes * tasks;
        let run = || rate_of("ours", &args, processes, tasks);
        ours.push(profiled(format!("ours_{n}"), &run).await);
        let run = || peer::rate(&npm, socket, "line15-peer", processes, tasks);
        peer.push(profiled(format!("peer_{n}"), &run).await);
    }
    let anchor = profiled("anchor_16".into(), &|| rate_of("anchor", &args, 4, 4)).await;
    let anchor_64 = profiled("anchor_64".into(), &|| rate_of("anchor", &args, 4, 16)).await;
    let fifteen = serde_json::json!({
        "pairs_per_s": ours[1],
        "anchor_pairs_per_s": anchor,
        "pairs_per_s_1_task": ours[0],
        "pairs_per_s_64_tasks": ours[2],
        "anchor_pairs_per_s_64_tasks": anchor_64,
        "peer_pairs_per_s_1_task": peer[0],
        "peer_pairs_per_s": peer[1],
        "peer_pairs_per_s_64_tasks": peer[2],
        "profile": profile,
    });
    println!("line 15: {fifteen}");
    let sixteen = line16(server.url()).await;
    println!("line 16: {sixteen}");
    std::fs::write(dir.join("line15.json"), fifteen.to_string()).expect("writing line 15");
    std::fs::write(dir.join("line16.json"), sixteen.to_string()).expect("writing line 16");
}

/// The server's running totals: its CPU, and the calls of each command.
struct Counters {
    cpu_us: f64,
    calls: std::collections::BTreeMap<String, f64>,
    usec: std::collections::BTreeMap<String, f64>,
}

impl Counters {
    async fn read(connection: &mut semaphore_redis::Connection) -> Counters {
        let info = |section: &'static str| {
            let mut connection = connection.clone();
            async move {
                semaphore_redis::redis::cmd("INFO")
                    .arg(section)
                    .query_async::<String>(&mut connection)
                    .await
                    .expect("INFO")
            }
        };
        let (cpu, commands) = (info("cpu").await, info("commandstats").await);
        let field = |line: &str, name: &str| -> Option<f64> {
            line.split([':', ','])
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        };
        let seconds = |name: &str| {
            cpu.lines()
                .find_map(|l| {
                    l.strip_prefix(name)?
                        .strip_prefix(':')?
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
                .unwrap_or(0.0)
        };
        let stat = |name: &str| {
            commands
                .lines()
                .filter_map(|l| {
                    let command = l.strip_prefix("cmdstat_")?.split(':').next()?;
                    Some((command.to_owned(), field(l, name)?))
                })
                .collect()
        };
        Counters {
            cpu_us: (seconds("used_cpu_user") + seconds("used_cpu_sys")) * 1e6,
            calls: stat("calls"),
            usec: stat("usec"),
        }
    }

    /// What happened since `before`, per unit of work (`units` of them):
    /// the server's CPU, the commands called at least once per 100, and
    /// the server's time in each command (µs; a function's includes the
    /// commands it calls).
    fn per(&self, before: &Counters, units: f64) -> serde_json::Value {
        let calls = per_unit(&self.calls, &before.calls, units, 0.01);
        let usec = per_unit(&self.usec, &before.usec, units, 0.05);
        serde_json::json!({
            "server_cpu_us": (self.cpu_us - before.cpu_us) / units,
            "calls": calls,
            "usec": usec,
        })
    }
}
