//! One holder process of the fault suite: borrows slots of one pool over
//! and over, acts on them only while `is_held()` says so, and logs every
//! step (see `semaphore_faults::event`). The orchestrator starts several,
//! each through its own proxy, and faults them.
//!
//! ```text
//! faults-holder --store postgres|redis|redis-cluster|mysql|etcd|etcd-cluster|sqlite --url URL
//!     [--listen-url URL] [--node-map HOST:PORT=HOST:PORT,...]
//!     --namespace NAME --pool NAME --count N --ttl-ms N --session-ms N
//!     (--until-ns T | --run-ms N) --seed N --log PATH [--slot N] [--two-slot-percent P]
//!     [--watch is-held|lost]
//! ```
//!
//! `--url` is a connection string, the database file for SQLite, or a
//! cluster's node URLs separated by commas; `--node-map` says where to
//! dial each node of a cluster (as it announces itself: through a proxy);
//! `--namespace` the PostgreSQL schema, the Redis key prefix or the MySQL
//! table prefix (ignored for SQLite); `--until-ns` the end of the run on
//! `CLOCK_MONOTONIC`; `--watch` how the holder learns that a lease is
//! lost: `is-held` checks `is_held()` before each act and nothing else,
//! `lost` (the default) also races `lost()`. With `FAULTS_PARENT_PID` set, the process dies with
//! its parent (`PR_SET_PDEATHSIG`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use semaphore_faults::clock::now_ns;
use semaphore_faults::event::{Clocks, Event, Log, Via, Watch};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::store::Store;
use semaphore_sqlite::{
    BorrowOptions, Error, LeaseGuard, Pool, PoolId, SqliteOptions, SqliteStore, Synchronous,
};
use tokio::time::timeout;

/// How long a borrow waits for a slot.
const WAIT: Duration = Duration::from_secs(2);
/// Bounds on every store call, beyond its own wait.
const CALL_BOUND: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Args {
    store: String,
    url: String,
    listen_url: Option<String>,
    node_map: Vec<(String, String)>,
    namespace: String,
    pool: String,
    count: u32,
    ttl: Duration,
    session: Duration,
    until: u64,
    seed: u64,
    log: PathBuf,
    slot: u32,
    two_slot_percent: u32,
    watch: Watch,
}

fn usage(why: &str) -> ! {
    eprintln!("faults-holder: {why}");
    eprintln!(
        "usage: faults-holder --store postgres|redis|redis-cluster|mysql|etcd|etcd-cluster|sqlite --url URL \
         [--listen-url URL] [--node-map HOST:PORT=HOST:PORT,...] \
         --namespace NAME --pool NAME --count N --ttl-ms N --session-ms N \
         (--until-ns T | --run-ms N) --seed N --log PATH [--slot N] [--two-slot-percent P] \
         [--watch is-held|lost]"
    );
    std::process::exit(64)
}

impl Args {
    fn parse() -> Self {
        let mut map = HashMap::new();
        let mut it = std::env::args().skip(1);
        while let Some(key) = it.next() {
            let Some(name) = key.strip_prefix("--") else {
                usage(&format!("unexpected argument {key:?}"))
            };
            let value = it
                .next()
                .unwrap_or_else(|| usage(&format!("{key} needs a value")));
            map.insert(name.to_string(), value);
        }
        let text = |k: &str| {
            map.get(k)
                .cloned()
                .unwrap_or_else(|| usage(&format!("--{k} is missing")))
        };
        let num = |k: &str| -> u64 {
            text(k)
                .parse()
                .unwrap_or_else(|_| usage(&format!("--{k} takes a number")))
        };
        let opt_num = |k: &str, default: u64| map.get(k).map_or(default, |_| num(k));
        let until = match (map.contains_key("until-ns"), map.contains_key("run-ms")) {
            (true, _) => num("until-ns"),
            (false, true) => now_ns() + num("run-ms") * 1_000_000,
            (false, false) => usage("--until-ns or --run-ms is needed"),
        };
        let store = text("store");
        if ![
            "postgres",
            "redis",
            "redis-cluster",
            "mysql",
            "etcd",
            "etcd-cluster",
            "sqlite",
        ]
        .contains(&store.as_str())
        {
            usage(&format!("unknown store {store:?}"));
        }
        Args {
            store,
            url: text("url"),
            listen_url: map.get("listen-url").cloned(),
            node_map: map
                .get("node-map")
                .map(|list| {
                    list.split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| match pair.split_once('=') {
                            Some((from, to)) => (from.to_string(), to.to_string()),
                            None => usage(&format!("--node-map: {pair:?} is not FROM=TO")),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            namespace: map
                .get("namespace")
                .cloned()
                .unwrap_or_else(|| "faults".into()),
            pool: text("pool"),
            count: u32::try_from(num("count")).unwrap_or_else(|_| usage("--count is too large")),
            ttl: Duration::from_millis(num("ttl-ms")),
            session: Duration::from_millis(opt_num("session-ms", 10_000)),
            until,
            seed: num("seed"),
            log: PathBuf::from(text("log")),
            slot: u32::try_from(opt_num("slot", 0)).unwrap_or(0),
            two_slot_percent: u32::try_from(opt_num("two-slot-percent", 0)).unwrap_or(0),
            watch: match map.get("watch").map(String::as_str) {
                None | Some("lost") => Watch::Lost,
                Some("is-held") => Watch::IsHeld,
                Some(other) => usage(&format!("--watch {other:?}: is-held or lost")),
            },
        }
    }
}

/// Dies with the orchestrator: a `SIGKILL` when the thread that started
/// this process ends, and an exit now if it already has.
fn die_with_parent() {
    let Some(parent) = std::env::var("FAULTS_PARENT_PID")
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if nix::unistd::getppid().as_raw() != parent {
        std::process::exit(0);
    }
}

struct Holder {
    args: Args,
    log: Log,
    pid: u32,
    rng: fastrand::Rng,
}

impl Holder {
    fn failed(&self, op: &str, error: impl ToString) {
        self.log.write(&Event::Failed {
            t: now_ns(),
            pid: self.pid,
            op: op.into(),
            error: error.to_string(),
        });
    }

    fn over(&self) -> bool {
        now_ns() >= self.args.until
    }

    async fn open(&self) -> Result<Arc<dyn Store>, Error> {
        let a = &self.args;
        Ok(match a.store.as_str() {
            "postgres" => {
                let mut options = PostgresOptions::default()
                    .schema(&a.namespace)
                    .session_timeout(a.session);
                if let Some(listen) = &a.listen_url {
                    options = options.listen_url(listen);
                }
                Arc::new(PostgresStore::connect_with(&a.url, options).await?)
            }
            "redis" => Arc::new(
                RedisStore::connect_with(
                    &a.url,
                    RedisOptions::default()
                        .prefix(&a.namespace)
                        .session_timeout(a.session)
                        // The longest ttl that may be live when the server
                        // loses its state: ours.
                        .restart_grace(a.ttl),
                )
                .await?,
            ),
            "redis-cluster" => {
                let urls: Vec<&str> = a.url.split(',').collect();
                let mut options = RedisOptions::default()
                    .prefix(&a.namespace)
                    .session_timeout(a.session)
                    .restart_grace(a.ttl);
                for (announced, dial) in &a.node_map {
                    options = options.node_address(announced, dial);
                }
                Arc::new(RedisStore::connect_cluster_with(&urls, options).await?)
            }
            "mysql" => Arc::new(
                semaphore_mysql::MysqlStore::connect_with(
                    &a.url,
                    semaphore_mysql::MysqlOptions::default()
                        .table_prefix(&a.namespace)
                        .session_timeout(a.session),
                )
                .await?,
            ),
            "etcd" | "etcd-cluster" => {
                let endpoints: Vec<&str> = a.url.split(',').collect();
                Arc::new(
                    semaphore_etcd::EtcdStore::connect_with(
                        &endpoints,
                        semaphore_etcd::EtcdOptions::default()
                            .prefix(&a.namespace)
                            .session_timeout(a.session),
                    )
                    .await?,
                )
            }
            _ => {
                // FULL: writes that wait for a turn go in batches (group
                // commit), which NORMAL, the default, does not batch.
                let full = std::env::var("SEMAPHORE_FAULTS_SQLITE_SYNCHRONOUS")
                    .is_ok_and(|v| v.eq_ignore_ascii_case("full"));
                let options = SqliteOptions::default().synchronous(if full {
                    Synchronous::Full
                } else {
                    Synchronous::Normal
                });
                Arc::new(SqliteStore::open_with(&a.url, options)?)
            }
        })
    }

    /// Connects, retrying until it works or the run is over.
    async fn connect(&self) -> Option<Arc<dyn Store>> {
        while !self.over() {
            match timeout(CALL_BOUND, self.open()).await {
                Ok(Ok(store)) => return Some(store),
                Ok(Err(e)) => self.failed("connect", e),
                Err(_) => self.failed("connect", "timeout"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Registers the pool (idempotent), retrying until it works or the run
    /// is over.
    async fn register(&self, pool: &Pool) -> bool {
        while !self.over() {
            match timeout(CALL_BOUND, pool.register(self.args.count)).await {
                Ok(Ok(_)) => return true,
                Ok(Err(e)) => self.failed("register", e),
                Err(_) => self.failed("register", "timeout"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    async fn run(&mut self) {
        let Some(store) = self.connect().await else {
            return;
        };
        let pool = Pool::new(store, PoolId::from_name(&self.args.pool));
        if !self.register(&pool).await {
            return;
        }
        while !self.over() {
            let slots = if self.rng.u32(0..100) < self.args.two_slot_percent {
                2
            } else {
                1
            };
            let asked = now_ns();
            let borrowed = timeout(
                WAIT + CALL_BOUND,
                pool.borrow_with(self.args.ttl, WAIT, BorrowOptions::new().slots(slots)),
            )
            .await;
            let guard = match borrowed {
                Ok(Ok(guard)) => guard,
                Ok(Err(e)) => {
                    self.failed("borrow", &e);
                    match e {
                        Error::Exhausted { .. } => {}
                        Error::PoolNotFound { .. } => {
                            // A Redis server that restarted lost the pool.
                            self.register(&pool).await;
                        }
                        _ => {
                            let pause = self.rng.u64(20..=200);
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                        }
                    }
                    continue;
                }
                Err(_) => {
                    self.failed("borrow", "timeout");
                    continue;
                }
            };
            let granted = now_ns();
            self.log.write(&Event::Grant {
                t: granted,
                pid: self.pid,
                asked,
                token: guard.token,
                positions: guard.positions.to_vec(),
                lease: guard.id.to_string(),
            });
            self.hold(guard, granted).await;
        }
        // A clean end: the store closes its session as it is dropped.
        drop(pool);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// Holds a lease for 10-800 ms (half of the time for 3-8 s, longer
    /// than the session timeout, so that faults find holders holding with
    /// others waiting), acting every 2-5 ms while `is_held()` says so,
    /// then releases it. A `lost` holder keeps the lease alive and also
    /// stops acting when `lost()` resolves; an `is-held` holder does not
    /// keep it alive (the ttl outlasts its holds, but on SQLite), so that
    /// nothing but `is_held()`'s own check of the lease's expiry and its
    /// session's end stands between it and the next holder.
    async fn hold(&mut self, mut guard: LeaseGuard<&Pool>, granted: u64) {
        if self.args.watch == Watch::Lost {
            guard.keep_alive();
        }
        let token = guard.token;
        let positions = guard.positions.to_vec();
        let hold_ms = if self.rng.bool() {
            self.rng.u64(3_000..=8_000)
        } else {
            self.rng.u64(10..=800)
        };
        // Where a session guards the lease, no hold outlasts four fifths of
        // its ttl: a lease taken over from a running holder is then taken
        // through its session's end (what the faults aim at), not counted
        // for an expiry that needed no fault. On SQLite the session is the
        // process, and expiry is the only way a running holder loses.
        let hold_ms = match self.args.store.as_str() {
            "sqlite" => hold_ms,
            _ => hold_ms.min(self.args.ttl.as_millis() as u64 * 4 / 5),
        };
        let end = granted + hold_ms * 1_000_000;
        self.log.write(&Event::Hold {
            t: now_ns(),
            pid: self.pid,
            token,
            until: end,
        });
        let lost = guard.lost();
        tokio::pin!(lost);
        // An `is-held` holder never awaits `lost()`.
        let (mut told, mut lost_seen) = (false, self.args.watch == Watch::IsHeld);
        loop {
            let pause = Duration::from_micros(self.rng.u64(2_000..=5_000));
            tokio::select! {
                biased;
                reason = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    told = true;
                    self.log.write(&Event::Told {
                        t: now_ns(),
                        pid: self.pid,
                        token,
                        via: Via::Lost,
                        reason: Some(reason.to_string()),
                        clocks: Some(clocks(&guard)),
                    });
                }
                () = tokio::time::sleep(pause) => {}
            }
            // The time first, then the check: an act at `t` means the
            // lease was certainly held at some moment after `t`.
            let t = now_ns();
            if !told {
                if guard.is_held() {
                    self.log.write(&Event::Act {
                        t,
                        pid: self.pid,
                        token,
                        positions: positions.clone(),
                    });
                } else {
                    told = true;
                    self.log.write(&Event::Told {
                        t,
                        pid: self.pid,
                        token,
                        via: Via::IsHeld,
                        reason: None,
                        clocks: Some(clocks(&guard)),
                    });
                }
            }
            if t >= end {
                break;
            }
        }
        self.log.write(&Event::Release {
            t: now_ns(),
            pid: self.pid,
            token,
        });
        let outcome = match timeout(CALL_BOUND, guard.release()).await {
            Ok(Ok(active)) => active.to_string(),
            Ok(Err(e)) => format!("error: {e}"),
            Err(_) => "timeout".into(),
        };
        self.log.write(&Event::Released {
            t: now_ns(),
            pid: self.pid,
            token,
            outcome,
        });
    }
}

fn main() {
    let args = Args::parse();
    die_with_parent();
    let log = Log::open(&args.log).unwrap_or_else(|e| {
        eprintln!("faults-holder: {}: {e}", args.log.display());
        std::process::exit(73)
    });
    let pid = std::process::id();
    log.write(&Event::Start {
        t: now_ns(),
        pid,
        slot: args.slot,
        watch: args.watch,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let rng = fastrand::Rng::with_seed(args.seed);
    let mut holder = Holder {
        args,
        log,
        pid,
        rng,
    };
    runtime.block_on(holder.run());
    holder.log.write(&Event::Exit { t: now_ns(), pid });
    // The store's background tasks may be mid-call on a faulted
    // connection: exit without waiting for them.
    std::process::exit(0);
}

/// The clocks as `guard`'s holder reads them now ([`Clocks`]).
fn clocks(guard: &LeaseGuard<&Pool>) -> Clocks {
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    let store = guard.pool().store();
    let session_end = guard
        .session
        .zip(store.session())
        .and_then(|(id, session)| session.end_of(id));
    Clocks {
        deciding_ms: ms(store.clock().now()),
        wall_ms: ms(std::time::SystemTime::now()),
        session_end_ms: session_end.map(ms),
    }
}
