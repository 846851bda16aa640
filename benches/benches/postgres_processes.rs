//! Line 13 of BENCHMARKS.md, on a throwaway PostgreSQL server with the
//! default durability (`fsync`, `synchronous_commit` on), with a harness of
//! its own (real processes, rates): it re-invokes itself as the worker
//! processes, and writes its figures to `target/semaphore-bench/line13.json`
//! for `report`.
//!
//! A hot pool (count 8): tasks loop borrow(30 s, wait 10 s) + return for
//! 3 s, at 1 task, 16 tasks in 4 processes and 64 tasks in 4 processes;
//! pairs/s against 1 task, and 16 tasks in 4 processes, each with a
//! connection of its own, running one-row `UPDATE`s of rows spread over
//! 1,000 (autocommit): commits per second, as pgbench's random-row `UPDATE`
//! counts them. A pair is two commits, so 0.5x is the physical bound.
//!
//! Group commit's profile: for every run, what the server did
//! per pair or per commit: transactions, calls of the store's functions
//! (`track_functions`), their time, and the server's CPU (the postmaster's
//! process tree). The anchor runs twice, one row per transaction and eight
//! rows per transaction in one set-based `UPDATE`: the difference is what a
//! transaction costs the server apart from its rows, the most that merging
//! transactions can save.

mod hot;
#[allow(dead_code)] // only its ROLE, which `hot` reads
mod wake;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hot::{SECONDS, borrow_and_return, rate_of, tasks, worker};
use semaphore_benches::{out_dir, per_unit, role_or_bench, tree_cpu_ns, unix_us};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::Client;
use semaphore_postgres::tokio_postgres::types::Type;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

const POOL: &str = "line13";

async fn store(url: &str, schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions::default().schema(schema).pool_size(tasks());
    Arc::new(
        PostgresStore::connect_with(url, options)
            .await
            .expect("connecting"),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let roles = ["ours", "anchor", "anchor8"];
    let play = async |role: &str, store: Arc<PostgresStore>, args: &[String]| {
        if role == "ours" {
            let pool = Pool::new(store, PoolId::from_name(POOL));
            let start_us = args[3].parse().expect("a start time");
            borrow_and_return(start_us, pool).await
        } else {
            let start_us = args[3].parse().expect("a start time");
            let next = Arc::new(AtomicU64::new(unix_us()));
            let rows_per_commit = if role == "anchor8" { 8 } else { 1 };
            worker(start_us, move || {
                let (connections, next) = (store.connection_pool().clone(), next.clone());
                async move {
                    let client = connections.get().await.expect("a connection");
                    // A cheap spread over the 1,000 rows; a commit's rows
                    // 125 apart, in order (no deadlock between commits).
                    let first = next.fetch_add(7919, Ordering::Relaxed) % 125;
                    let rows: Vec<i32> = (0..rows_per_commit)
                        .map(|k| i32::try_from(first + 125 * k).expect("a row id"))
                        .collect();
                    client
                        .query_typed(
                            "UPDATE anchor SET n = n + 1 WHERE id = ANY($1)",
                            &[(&rows, Type::INT4_ARRAY)],
                        )
                        .await
                        .expect("the update");
                }
            })
            .await
        }
    };
    if !role_or_bench("postgres_processes", &roles, store, play).await {
        return;
    }
    let server = TestServer::start_durable().expect("a PostgreSQL server for the bench");
    let schema = TestServer::fresh_schema();
    let setup = store(server.url(), &schema).await;
    Pool::new(setup.clone(), PoolId::from_name(POOL))
        .register(8)
        .await
        .expect("register");
    setup
        .connection_pool()
        .get()
        .await
        .expect("a connection")
        .batch_execute(
            "CREATE TABLE anchor (id int PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO anchor SELECT g, 0 FROM generate_series(0, 999) g;",
        )
        .await
        .expect("the anchor's table");
    // Counted for the profile: the store's plpgsql functions, and every
    // statement, top-level or run inside a function (a few per cent of the
    // server's time, for the anchor as for ours).
    let client = setup.connection_pool().get().await.expect("a connection");
    for setting in [
        "ALTER SYSTEM SET track_functions = 'pl'",
        "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'",
    ] {
        client
            .batch_execute(setting)
            .await
            .expect("the profile's settings");
    }
    drop(client);
    drop(setup);
    server.restart();
    let setup = store(server.url(), &schema).await;
    let client = setup.connection_pool().get().await.expect("a connection");
    for setting in [
        "CREATE EXTENSION pg_stat_statements",
        "ALTER SYSTEM SET pg_stat_statements.track = 'all'",
        "SELECT pg_reload_conf()",
    ] {
        client
            .batch_execute(setting)
            .await
            .expect("pg_stat_statements");
    }
    let server_pid = postmaster(&client).await;
    let url = server.url();
    let mut profile = serde_json::Map::new();
    let mut run = async |name: &str, role: &str, processes: usize, tasks: usize| {
        let before = Counters::read(&client, server_pid).await;
        let rate = rate_of(role, &[url, &schema], processes, tasks);
        // The workers' connections end as they exit; their statistics are
        // flushed as each ends.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let after = Counters::read(&client, server_pid).await;
        profile.insert(name.into(), after.per(&before, rate * SECONDS as f64));
        rate
    };
    let anchor_1 = run("anchor_1", "anchor", 1, 1).await;
    let anchor = run("anchor", "anchor", 4, 4).await;
    let anchor8 = run("anchor8", "anchor8", 4, 4).await;
    let one = run("ours_1", "ours", 1, 1).await;
    let sixteen = run("ours_16", "ours", 4, 4).await;
    let sixty_four = run("ours_64", "ours", 4, 16).await;
    drop(client);
    drop(setup);
    let thirteen = serde_json::json!({
        "pairs_per_s": sixteen,
        "pairs_per_s_1_task": one,
        "pairs_per_s_64_tasks": sixty_four,
        "anchor_commits_per_s": anchor,
        "anchor_commits_per_s_1_client": anchor_1,
        "anchor8_commits_per_s": anchor8,
        "profile": profile,
    });
    println!("line 13: {thirteen}");
    std::fs::write(
        out_dir(env!("CARGO_TARGET_TMPDIR")).join("line13.json"),
        thirteen.to_string(),
    )
    .expect("writing line 13");
}

/// The server's main process, the parent of this connection's backend.
async fn postmaster(client: &Client) -> u32 {
    let row = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("the backend's pid");
    let backend: i32 = row.get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).expect("its stat");
    stat[stat.rfind(')').expect("a stat line") + 2..]
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("its parent")
}

/// The server's running totals: transactions ended (and of them rolled
/// back), statements run (top-level, and inside functions), calls of each
/// of the
/// store's functions and their time, and the server's CPU.
struct Counters {
    xacts: f64,
    rollbacks: f64,
    statements: f64,
    nested: f64,
    function_ms: f64,
    calls: std::collections::BTreeMap<String, f64>,
    /// Calls of each top-level statement, by its first 60 characters.
    top: std::collections::BTreeMap<String, f64>,
    cpu_us: f64,
}

impl Counters {
    async fn read(client: &Client, postmaster: u32) -> Counters {
        let xacts = client
            .query_one(
                "SELECT (xact_commit + xact_rollback)::float8, xact_rollback::float8
                 FROM pg_stat_database
                 WHERE datname = current_database()",
                &[],
            )
            .await
            .expect("pg_stat_database");
        let statements = client
            .query_one(
                "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0)::float8,
                        coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0)::float8
                 FROM pg_stat_statements",
                &[],
            )
            .await
            .expect("pg_stat_statements");
        let top = client
            .query(
                "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 60), sum(calls)::float8
                 FROM pg_stat_statements WHERE toplevel GROUP BY 1",
                &[],
            )
            .await
            .expect("pg_stat_statements' statements");
        let functions = client
            .query(
                "SELECT funcname::text, calls::float8, self_time FROM pg_stat_user_functions",
                &[],
            )
            .await
            .expect("pg_stat_user_functions");
        Counters {
            xacts: xacts.get(0),
            rollbacks: xacts.get(1),
            statements: statements.get(0),
            nested: statements.get(1),
            function_ms: functions.iter().map(|r| r.get::<_, f64>(2)).sum(),
            calls: functions.iter().map(|r| (r.get(0), r.get(1))).collect(),
            top: top.iter().map(|r| (r.get(0), r.get(1))).collect(),
            cpu_us: tree_cpu_ns(postmaster) as f64 / 1e3,
        }
    }

    /// What happened since `before`, per unit of work (`units` of them).
    fn per(&self, before: &Counters, units: f64) -> serde_json::Value {
        let calls = per_unit(&self.calls, &before.calls, units, f64::MIN_POSITIVE);
        let top = per_unit(&self.top, &before.top, units, 0.01);
        serde_json::json!({
            "top_level": top,
            "transactions": (self.xacts - before.xacts) / units,
            "rolled_back": (self.rollbacks - before.rollbacks) / units,
            "statements": (self.statements - before.statements) / units,
            "statements_in_functions": (self.nested - before.nested) / units,
            "function_self_us": (self.function_ms - before.function_ms) * 1e3 / units,
            "server_cpu_us": (self.cpu_us - before.cpu_us) / units,
            "calls": calls,
        })
    }
}
