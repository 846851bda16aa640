//! The etcd store's lines of BENCHMARKS.md (E1-E4), on throwaway etcd
//! clusters of one member and of three, with a harness of its own (real
//! processes; rates and percentiles): it re-invokes itself as the worker
//! processes, and writes its figures to `target/semaphore-bench/etcd.json`.
//!
//! - E1: a borrow + return pair, one task, against two one-key
//!   transactions from the same client (an `etcdctl txn`-shaped
//!   `If mod(key) = r Then put`), the least two conditioned writes cost;
//!   medians of 200.
//! - E2: a hot pool (count 8), 1, 16 and 64 tasks (in 4 processes from
//!   16) looping borrow + return for 3 s, on one member and on three;
//!   pairs/s, against 16 tasks running the anchor's pairs; each run on a
//!   history compacted just before it (see [`compact`]).
//! - E3: cross-process wake: process A returns, this process's waiting
//!   borrow is granted; p50 and p99 from A's return to the grant, and the
//!   CPU an idle waiter burns over 2 s (see `wake/mod.rs`), and past its
//!   join, per second of waiting ([`idle_line`]).

mod hot;
mod wake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use hot::{borrow_and_return, rate_of, worker};
use semaphore_benches::{cpu_ns, out_dir, role_or_bench};
use semaphore_etcd::store::Store;
use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{EtcdOptions, EtcdStore, Pool, PoolId};

async fn store(endpoints: &str, prefix: &str) -> Arc<EtcdStore> {
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    Arc::new(
        EtcdStore::connect_with(&endpoints, EtcdOptions::default().prefix(prefix))
            .await
            .expect("connecting"),
    )
}

/// The anchor's pair: two transactions, each a put conditioned on the
/// key's revision as last seen (what a primitive's write is, without its
/// look).
async fn anchor_pair(client: &mut Client, key: &str, seen: &mut i64) {
    for _ in 0..2 {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, *seen)])
            .and_then([TxnOp::put(key, "x", None)])
            .or_else([TxnOp::get(key, None)]);
        let answer = client.txn(txn).await.expect("the anchor's txn");
        *seen = answer.header().expect("a header").revision();
        if !answer.succeeded() {
            // Another task wrote it: its revision is read back.
            if let Some(etcd_client::TxnOpResponse::Get(get)) =
                answer.op_responses().into_iter().next()
            {
                *seen = get.kvs().first().map_or(0, |kv| kv.mod_revision());
            }
        }
    }
}

/// Median of `n` timed runs of `step`, in µs.
async fn median_us<F: AsyncFnMut()>(n: usize, mut step: F) -> f64 {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let at = Instant::now();
        step().await;
        times.push(at.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

async fn pair_line(endpoints: &str) -> serde_json::Value {
    let prefix = TestCluster::fresh_prefix();
    let pool = Pool::new(store(endpoints, &prefix).await, PoolId::from_name("e1"));
    pool.register(4).await.expect("register");
    let mut client = Client::connect(endpoints.split(',').collect::<Vec<_>>(), None)
        .await
        .expect("a client");
    let key = format!("{prefix}/anchor");
    let mut seen = 0;
    let (mut ours, mut anchor) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        ours.push(
            median_us(40, async || {
                let lease = pool
                    .try_borrow(Duration::from_secs(30))
                    .await
                    .expect("borrow");
                lease.release().await.expect("return");
            })
            .await,
        );
        anchor.push(median_us(40, async || anchor_pair(&mut client, &key, &mut seen).await).await);
    }
    ours.sort_by(f64::total_cmp);
    anchor.sort_by(f64::total_cmp);
    serde_json::json!({ "ours_us": ours[2], "anchor_us": anchor[2] })
}

/// Compacts the cluster's history up to now, as a cluster under
/// auto-compaction would have: until then etcd's index keeps every key
/// the runs before deleted, and each look of a pool walks its pool's.
async fn compact(client: &mut Client) {
    let now = client.get("-", None).await.expect("a get");
    let revision = now.header().expect("a header").revision();
    let options = etcd_client::CompactionOptions::new().with_physical();
    client
        .compact(revision, Some(options))
        .await
        .expect("compacting");
}

async fn hot_line(endpoints: &str, prefix: &str) -> serde_json::Value {
    let args = [endpoints, prefix];
    let mut client = Client::connect(endpoints.split(',').collect::<Vec<_>>(), None)
        .await
        .expect("a client");
    let mut rate = async |role: &str, processes: usize, tasks: usize| {
        compact(&mut client).await;
        rate_of(role, &args, processes, tasks)
    };
    let anchor = rate("anchor", 4, 4).await;
    let one = rate("ours", 1, 1).await;
    let sixteen = rate("ours", 4, 4).await;
    let sixty_four = rate("ours", 4, 16).await;
    serde_json::json!({
        "anchor_16": anchor,
        "ours_1": one,
        "ours_16": sixteen,
        "ours_64": sixty_four,
    })
}

/// This process's CPU over a wait of `seconds` on `pool` (held by
/// another process), in ns.
async fn cpu_of_wait(pool: &Pool, seconds: u64) -> u64 {
    let cpu = cpu_ns();
    let waited = pool
        .borrow(Duration::from_secs(60), Duration::from_secs(seconds))
        .await;
    assert!(waited.is_err(), "the pool was held all along");
    cpu_ns() - cpu
}

/// E3's idle waiter past its join: with the count-1 pool `id` held by
/// process A, this process's CPU per second of waiting, from waits of
/// 2 s and 12 s (medians of 3 each; their difference over 10 s: what a
/// waiter costs once queued, without its join's calls and its leave's),
/// beside the CPU one plain etcd read costs this process after 100 ms
/// idle (median of 20): the price of each call a wait makes.
async fn idle_line(
    endpoints: &str,
    prefix: &str,
    waiter: Arc<EtcdStore>,
    id: PoolId,
) -> serde_json::Value {
    let mut a = wake::spawn_holder(&[endpoints, prefix]);
    let mut held = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(a.stdout.as_mut().expect("A's stdout")),
        &mut held,
    )
    .expect("A's line");
    assert_eq!(held.trim(), "HELD");
    let pool = Pool::new(waiter.clone(), id);
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (mut short, mut long) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        short.push(cpu_of_wait(&pool, 2).await);
        long.push(cpu_of_wait(&pool, 12).await);
    }
    let mut client = waiter.client().clone();
    let mut calls = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cpu = cpu_ns();
        client.get("-", None).await.expect("a get");
        calls.push(cpu_ns() - cpu);
    }
    a.kill().ok();
    a.wait().ok();
    let (short, long) = (median(short), median(long));
    serde_json::json!({
        "wait_2s_cpu_us": short / 1000,
        "wait_12s_cpu_us": long / 1000,
        "per_second_share": long.saturating_sub(short) as f64 / 10e9,
        "call_cpu_us": median(calls) as f64 / 1000.0,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let roles = ["hold", "ours", "anchor"];
    let play = async |role: &str, store: Arc<EtcdStore>, args: &[String]| match role {
        "hold" => wake::hold(store, "e3").await,
        "ours" => {
            let pool = Pool::new(store, PoolId::from_name("e2"));
            let start_us = args[3].parse().expect("a start time");
            borrow_and_return(start_us, pool).await
        }
        _ => {
            let start_us = args[3].parse().expect("a start time");
            let client = store.client().clone();
            let key = format!("{}/anchor-{}", args[2], std::process::id());
            worker(start_us, move || {
                let (mut client, key) = (client.clone(), key.clone());
                async move {
                    let mut seen = client
                        .get(key.clone(), None)
                        .await
                        .expect("a get")
                        .kvs()
                        .first()
                        .map_or(0, |kv| kv.mod_revision());
                    anchor_pair(&mut client, &key, &mut seen).await;
                }
            })
            .await
        }
    };
    if !role_or_bench("etcd_processes", &roles, store, play).await {
        return;
    }
    let mut figures = serde_json::Map::new();
    for (name, cluster) in [
        ("one", TestCluster::start()),
        ("three", TestCluster::start_three()),
    ] {
        let cluster = cluster.expect("an etcd cluster for the bench");
        let endpoints = cluster.endpoints().join(",");
        let prefix = TestCluster::fresh_prefix();
        Pool::new(store(&endpoints, &prefix).await, PoolId::from_name("e2"))
            .register(8)
            .await
            .expect("register");
        let mut line = serde_json::Map::new();
        line.insert("pair".into(), pair_line(&endpoints).await);
        line.insert("hot".into(), hot_line(&endpoints, &prefix).await);
        let wake_prefix = TestCluster::fresh_prefix();
        let waker = store(&endpoints, &wake_prefix).await;
        let id = PoolId::from_name("e3");
        let queued = waker.clone();
        let places = async || queued.queue(id).await.expect("the queue").len() as u32;
        line.insert(
            "wake".into(),
            wake::line(&endpoints, &wake_prefix, waker.clone(), id, places).await,
        );
        line.insert(
            "idle".into(),
            idle_line(&endpoints, &wake_prefix, waker, id).await,
        );
        println!(
            "etcd, {name} member(s): {}",
            serde_json::Value::Object(line.clone())
        );
        figures.insert(name.into(), serde_json::Value::Object(line));
    }
    let dir = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        dir.join("etcd.json"),
        serde_json::Value::Object(figures).to_string(),
    )
    .expect("writing the figures");
}
