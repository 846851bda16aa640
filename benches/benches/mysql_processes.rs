//! Lines 18 and 19 of BENCHMARKS.md, on a throwaway MariaDB server (default
//! durability: `innodb_flush_log_at_trx_commit = 1`), with a harness of
//! their own (real processes; rates and percentiles): it re-invokes itself
//! as the worker processes, and writes its figures to
//! `target/semaphore-bench/line18.json` and `line19.json` for `report`.
//!
//! - Line 18: a hot pool (count 8), 16 tasks in 4 processes looping
//!   borrow + return for 3 s: pairs/s against the same 16 tasks in 4
//!   processes each running one-row `UPDATE`s of random rows among 1,000
//!   (autocommit), counted in pairs of two.
//! - Line 19: cross-process wake: the return rings the head's process
//!   (MySQL has no notifications; the store interrupts the wait of the
//!   head's link), the 100 ms poll behind it; see `wake/mod.rs`.
//!
//! Group commit's profile: for every line-18 run, the server's
//! CPU and its statement counters (`SHOW GLOBAL STATUS`), per pair (or
//! per pair of the anchor's `UPDATE`s).

mod hot;
mod wake;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hot::{borrow_and_return, rate_of, tasks, worker};
use semaphore_benches::{out_dir, per_unit, role_or_bench, tree_cpu_ns, unix_us};
use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{MysqlOptions, MysqlStore, Pool, PoolId};

async fn store(url: &str, prefix: &str) -> Arc<MysqlStore> {
    let options = MysqlOptions::default()
        .table_prefix(prefix)
        .pool_size(tasks());
    Arc::new(
        MysqlStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

async fn line19(url: &str) -> serde_json::Value {
    let prefix = TestServer::fresh_prefix();
    let store = store(url, &prefix).await;
    let id = PoolId::from_name("line19");
    let queue_heads = async || store.queue_heads(id).await.expect("queue heads");
    wake::line(url, &prefix, store.clone(), id, queue_heads).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let roles = ["hold", "ours", "anchor"];
    let play = async |role: &str, store: Arc<MysqlStore>, args: &[String]| match role {
        "hold" => wake::hold(store, "line19").await,
        "ours" => {
            let pool = Pool::new(store, PoolId::from_name("line18"));
            let start_us = args[3].parse().expect("a start time");
            borrow_and_return(start_us, pool).await
        }
        _ => {
            let start_us = args[3].parse().expect("a start time");
            let next = Arc::new(AtomicU64::new(unix_us()));
            worker(start_us, move || {
                let (connections, next) = (store.connection_pool().clone(), next.clone());
                async move {
                    let mut conn = connections.get_conn().await.expect("a connection");
                    for _ in 0..2 {
                        // A cheap spread over the 1,000 rows.
                        let row = next.fetch_add(7919, Ordering::Relaxed) % 1000;
                        conn.exec_drop("UPDATE anchor SET n = n + 1 WHERE id = ?", (row,))
                            .await
                            .expect("the update");
                    }
                }
            })
            .await
        }
    };
    if !role_or_bench("mysql_processes", &roles, store, play).await {
        return;
    }
    let server = TestServer::start().expect("a MariaDB server for the bench");
    let prefix = TestServer::fresh_prefix();
    let pool = Pool::new(
        store(server.url(), &prefix).await,
        PoolId::from_name("line18"),
    );
    pool.register(8).await.expect("register");
    let mut conn =
        MysqlStore::connect_with(server.url(), MysqlOptions::default().table_prefix(&prefix))
            .await
            .expect("connecting")
            .connection_pool()
            .get_conn()
            .await
            .expect("a connection");
    conn.query_drop("CREATE TABLE anchor (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE = InnoDB")
        .await
        .expect("the anchor's table");
    conn.query_drop("INSERT INTO anchor SELECT seq, 0 FROM seq_0_to_999")
        .await
        .expect("the anchor's rows");
    let pid_file: String = conn
        .query_first("SELECT @@pid_file")
        .await
        .expect("the server's pid file")
        .expect("a pid file");
    let server_pid: u32 = std::fs::read_to_string(pid_file)
        .expect("the server's pid")
        .trim()
        .parse()
        .expect("a pid");
    let args = [server.url(), prefix.as_str()];
    let mut profile = serde_json::Map::new();
    let mut profiled = async |name: &str, processes: usize, tasks: usize, role: &str| {
        let before = Counters::read(&mut conn, server_pid).await;
        let rate = rate_of(role, &args, processes, tasks);
        let after = Counters::read(&mut conn, server_pid).await;
        profile.insert(name.into(), after.per(&before, rate * hot::SECONDS as f64));
        rate
    };
    let anchor = profiled("anchor_16", 4, 4, "anchor").await;
    let anchor_64 = profiled("anchor_64", 4, 16, "anchor").await;
    let one = profiled("ours_1", 1, 1, "ours").await;
    let ours = profiled("ours_16", 4, 4, "ours").await;
    let sixty_four = profiled("ours_64", 4, 16, "ours").await;
    drop(conn);
    let fifteen = serde_json::json!({
        "pairs_per_s": ours,
        "anchor_pairs_per_s": anchor,
        "pairs_per_s_1_task": one,
        "pairs_per_s_64_tasks": sixty_four,
        "anchor_pairs_per_s_64_tasks": anchor_64,
        "profile": profile,
    });
    println!("line 18: {fifteen}");
    let sixteen = line19(server.url()).await;
    println!("line 19: {sixteen}");
    let dir = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("line18.json"), fifteen.to_string()).expect("writing line 18");
    std::fs::write(dir.join("line19.json"), sixteen.to_string()).expect("writing line 19");
}

/// The server's running totals: its CPU, and statement counters.
struct Counters {
    cpu_us: f64,
    status: std::collections::BTreeMap<String, f64>,
}

/// The counters kept: statements from clients, every statement (those run
/// inside procedures too), procedure calls, and explicit commits.
const STATUS: &[&str] = &["Questions", "Queries", "Com_call_procedure", "Com_commit"];

impl Counters {
    async fn read(conn: &mut semaphore_mysql::mysql_async::Conn, server: u32) -> Counters {
        let rows: Vec<(String, String)> = conn
            .query("SHOW GLOBAL STATUS")
            .await
            .expect("the server's status");
        Counters {
            cpu_us: tree_cpu_ns(server) as f64 / 1e3,
            status: rows
                .into_iter()
                .filter(|(name, _)| STATUS.contains(&name.as_str()))
                .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
                .collect(),
        }
    }

    /// What happened since `before`, per unit of work (`units` of them).
    fn per(&self, before: &Counters, units: f64) -> serde_json::Value {
        let mut per = per_unit(&self.status, &before.status, units, f64::MIN);
        per.insert(
            "server_cpu_us".into(),
            serde_json::json!((self.cpu_us - before.cpu_us) / units),
        );
        serde_json::Value::Object(per)
    }
}
