//! Many real OS processes on one SQLite file (the SQLite store's
//! cross-process wake-up). The processes are the `holder` example.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use semaphore_examples::holds::{
    Hold, duplicate_tokens, max_concurrency, shared_positions, unix_us,
};
use semaphore_examples::store;
use semaphore_mysql::testing::TestServer as MysqlServer;
use semaphore_mysql::{MysqlOptions, MysqlStore};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::testing::TestServer as RedisServer;
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore};

const HOLDER: &str = env!("CARGO_BIN_EXE_holder");

fn holder(args: &[&str]) -> Child {
    holder_in(args, None)
}

/// A holder process; `schema` is the PostgreSQL schema or the Redis key
/// prefix, if any.
fn holder_in(args: &[&str], schema: Option<&str>) -> Child {
    let mut command = Command::new(HOLDER);
    // The killed holder's session, and its bound lease, lapse within 1 s,
    // long before the workers stop.
    command.env(store::SESSION_VAR, "1000");
    // The test's Redis server is fresh: no restart to wait out.
    command.env(store::GRACE_VAR, "0");
    if let Some(schema) = schema {
        command.env(store::SCHEMA_VAR, schema);
        command.env(store::PREFIX_VAR, schema);
        command.env(store::TABLES_VAR, schema);
    }
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting a holder process")
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("reading a holder's output");
    line
}

fn read_log(path: &Path) -> Vec<Hold> {
    std::fs::read_to_string(path)
        .expect("a holder's log")
        .lines()
        .map(|l| l.parse().expect("a log line"))
        .collect()
}

async fn register(db: &Path, name: &str, count: u32, options: SqliteOptions) -> Pool {
    let store = Arc::new(SqliteStore::open_with(db, options).unwrap());
    let pool = Pool::new(store, PoolId::from_name(name));
    pool.register(count).await.unwrap();
    pool
}

/// 8 processes looping borrow / work / return for 4 s on 3 slots of one
/// SQLite file, started just after a ninth process was killed with SIGKILL
/// while it held a slot for 30 s: the slot comes back long before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_never_over_issue_and_a_killed_holders_slot_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let pool = register(&db, "three", 3, SqliteOptions::default()).await;
    eight_processes(dir.path(), db.to_str().unwrap(), None, &pool).await;
}

/// The same on one PostgreSQL database, each process with a store (and a
/// listener) of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_on_postgres_never_over_issue_and_a_killed_holders_slot_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (url, schema) = (TestServer::shared().url(), TestServer::fresh_schema());
    let options = PostgresOptions::default().schema(&schema);
    let store = Arc::new(PostgresStore::connect_with(url, options).await.unwrap());
    let pool = Pool::new(store, PoolId::from_name("three"));
    pool.register(3).await.unwrap();
    eight_processes(dir.path(), url, Some(&schema), &pool).await;
}

/// The same on one Redis server, each process with a store (and a
/// subscriber) of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_on_redis_never_over_issue_and_a_killed_holders_slot_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (url, prefix) = (RedisServer::shared().url(), RedisServer::fresh_prefix());
    let options = RedisOptions::default()
        .prefix(&prefix)
        .restart_grace(Duration::ZERO);
    let store = Arc::new(RedisStore::connect_with(url, options).await.unwrap());
    let pool = Pool::new(store, PoolId::from_name("three"));
    pool.register(3).await.unwrap();
    eight_processes(dir.path(), url, Some(&prefix), &pool).await;
}

/// The same on one MySQL database: each process learns of the others'
/// returns by its store's poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_on_mysql_never_over_issue_and_a_killed_holders_slot_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (url, prefix) = (MysqlServer::shared().url(), MysqlServer::fresh_prefix());
    let options = MysqlOptions::default().table_prefix(&prefix);
    let store = Arc::new(MysqlStore::connect_with(url, options).await.unwrap());
    let pool = Pool::new(store, PoolId::from_name("three"));
    pool.register(3).await.unwrap();
    eight_processes(dir.path(), url, Some(&prefix), &pool).await;
}

/// The 8-process run on the store `db` names (a path or a PostgreSQL
/// connection string in `schema`), logs in `dir`.
async fn eight_processes(dir: &Path, db_arg: &str, schema: Option<&str>, pool: &Pool) {
    let holder = |args: &[&str]| holder_in(args, schema);
    // The victim holds a slot for 30 s (the CLI's default ttl) and is
    // killed while holding it. Its lease is bound to its session:
    // the slot comes back once the session's 1 s lapses, long
    // before the ttl; the workers loop for 4 s.
    let mut victim = holder(&["hold", db_arg, "three", "30000"]);
    let mut out = BufReader::new(victim.stdout.take().unwrap());
    let line = read_line(&mut out);
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap())
        .collect();
    let (victim_position, victim_token, victim_expiry_us) =
        (fields[0] as u32, fields[1], fields[2]);
    // The victim held its slot at least until now: no one may have it yet.
    let killed_us = unix_us();
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    let killed_hold = Hold {
        position: victim_position,
        token: victim_token,
        start_us: killed_us,
        end_us: killed_us,
    };

    let workers: Vec<_> = (0..8)
        .map(|i| {
            let log = dir.join(format!("worker-{i}.log"));
            let args = [
                "loop",
                db_arg,
                "three",
                "4000",
                "1000",
                log.to_str().unwrap(),
            ];
            (holder(&args), log)
        })
        .collect();
    let mut holds = vec![killed_hold];
    for (mut child, log) in workers {
        assert!(child.wait().unwrap().success(), "a worker failed");
        let worker_holds = read_log(&log);
        assert!(!worker_holds.is_empty(), "a worker never held a slot");
        holds.extend(worker_holds);
    }

    assert_eq!(
        shared_positions(&holds),
        vec![],
        "two leases held one slot at once"
    );
    let most = max_concurrency(&holds);
    assert!(most <= 3, "concurrency reached {most} on 3 slots");
    assert_eq!(
        duplicate_tokens(&holds),
        Vec::<u64>::new(),
        "a fencing token was granted twice"
    );

    // The killed holder's slot came back and was used again after its
    // death and long before its ttl: the workers had all finished
    // by then.
    let reused: Vec<_> = holds
        .iter()
        .filter(|h| h.position == victim_position && h.token > victim_token)
        .collect();
    assert!(
        !reused.is_empty(),
        "the killed holder's slot never came back"
    );
    assert!(reused.iter().all(|h| h.start_us >= killed_us));
    assert!(
        reused.iter().all(|h| h.end_us < victim_expiry_us),
        "the killed holder's slot came back only after its ttl"
    );
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "every lease was returned"
    );
}

/// A return in one process wakes a waiter in another through the file
/// notification: the waiter's fallback poll is set to 1.5 s (the longest
/// allowed) and the bound is 1 s, so only the notification can wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_in_one_process_wakes_a_waiter_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wake.db");
    let options = SqliteOptions::default().poll_interval(Duration::from_millis(1500));
    let pool = register(&db, "one", 1, options).await;

    let mut latencies = Vec::new();
    for _ in 0..5 {
        let mut other = holder(&["hold", db.to_str().unwrap(), "one", "60000"]);
        let mut out = BufReader::new(other.stdout.take().unwrap());
        assert!(read_line(&mut out).starts_with("HOLDING 0"));

        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move {
                let lease = pool
                    .borrow(Duration::from_secs(5), Duration::from_secs(60))
                    .await;
                (unix_us(), lease.map(|l| l.forget()))
            })
        };
        while pool.waiting().count != 1 {
            tokio::task::yield_now().await;
        }
        writeln!(other.stdin.as_mut().unwrap()).unwrap();
        let returned_at: u64 = read_line(&mut out)
            .strip_prefix("RETURNED ")
            .and_then(|t| t.trim().parse().ok())
            .expect("the holder's RETURNED line");
        let (granted_at, lease) = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("the waiter was not woken within 1 s (its fallback poll is 1.5 s)")
            .unwrap();
        let lease = lease.unwrap();
        latencies.push(granted_at.saturating_sub(returned_at));
        other.wait().unwrap();
        pool.return_lease(lease.id).await.unwrap();
    }
    latencies.sort_unstable();
    println!("cross-process wake latency (us), 5 hand-offs: {latencies:?}");
}

/// First come, first served across processes: process A loops borrow / work / return on a
/// 1-slot pool back to back; once a waiter of this process is queued in the
/// file, A takes the slot at most once more (the grant it may be committing)
/// before the waiter gets it, five times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_process_does_not_starve_a_waiter_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fair.db");
    let pool = register(&db, "one", 1, SqliteOptions::default()).await;
    let log = dir.path().join("looper.log");
    // A holds the slot for 2 ms of work each time and borrows again at once.
    let args = [
        "loop",
        db.to_str().unwrap(),
        "one",
        "3000",
        "2000",
        log.to_str().unwrap(),
    ];
    let mut looper = holder(&args);

    // Start asking once A has held the slot at least once.
    let started = std::time::Instant::now();
    while pool.inspect().await.unwrap().in_use == 0 {
        if let Some(status) = looper.try_wait().unwrap() {
            panic!("the looping process ended before it held the slot: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "A never held the slot"
        );
        tokio::task::yield_now().await;
    }
    let mine = pool.clone();
    let file = semaphore_sqlite::rusqlite::Connection::open(&db).unwrap();
    let my_head_in_file = || -> bool {
        file.query_row(
            "SELECT COUNT(*) FROM semaphore_waiters WHERE pid = ?1",
            [std::process::id()],
            |r| r.get::<_, i64>(0),
        )
        .is_ok_and(|n| n > 0)
    };
    let mut got = Vec::new();
    for _ in 0..5 {
        let borrow = {
            let mine = mine.clone();
            tokio::spawn(async move {
                mine.borrow(Duration::from_secs(5), Duration::from_secs(10))
                    .await
                    .map(|g| g.forget())
            })
        };
        // From the instant this process's head is queued in the file, A may
        // finish the grant it is committing, but never take the slot again
        // before this process. (Before that instant A may legitimately loop
        // on: that window is timing, not fairness.)
        let started = std::time::Instant::now();
        let queued_at = loop {
            if borrow.is_finished() || my_head_in_file() {
                break unix_us();
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never queued");
            tokio::task::yield_now().await;
        };
        let lease = borrow.await.unwrap().expect("starved: no slot within 10 s");
        got.push((queued_at, lease.token));
        assert!(mine.return_lease(lease.id).await.unwrap());
    }
    assert!(looper.wait().unwrap().success());
    let a_holds = read_log(&log);
    assert!(a_holds.len() > 50, "A looped only {} times", a_holds.len());
    for (queued_at, token) in got {
        let overtaken = a_holds
            .iter()
            .filter(|h| h.start_us > queued_at && h.token < token)
            .count();
        assert!(
            overtaken <= 1,
            "A took the slot {overtaken} times while this process waited"
        );
    }
}
