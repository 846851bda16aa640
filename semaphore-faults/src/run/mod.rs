//! The orchestrator: a throwaway server, holder processes (each through a
//! proxy of its own, except on SQLite), a nemesis that faults them, and
//! the checker over their logs.
//!
//! Every wait is bounded: the holders end their run by themselves at a
//! deadline on the shared clock, are killed if they outlive it by much,
//! and are killed when the orchestrator is dropped or its thread dies
//! (`PR_SET_PDEATHSIG`, set by each holder for the thread that started
//! it, which is always the orchestrator's own).
//!
//! - `holders`: starting, replacing and reaping the holder processes.
//! - `nemesis`: the fault injector.
//! - `summary`: reading a run's logs back, and the summary's text.

mod holders;
mod nemesis;
mod summary;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::check::{self, History, Report};
use crate::clock::now_ns;
use crate::event::{Event, FaultKind};
use crate::proxy::Proxies;
use crate::server::{Server, StoreKind};
use holders::Holders;
use nemesis::Nemesis;
pub use summary::read_history;
use summary::summary;

/// The pool every holder borrows from.
const POOL: &str = "faults";

/// A run's settings. [`Config::from_env`] gives the CI defaults, changed
/// by `SEMAPHORE_FAULTS_*` variables.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store.
    pub store: StoreKind,
    /// How many holder processes run at once.
    pub holders: usize,
    /// The pool's count.
    pub count: u32,
    /// The leases' ttl (kept alive by the holders): far above the session
    /// timeout, so that a holder cut off is protected by its session alone.
    pub ttl: Duration,
    /// The stores' session timeout.
    pub session_timeout: Duration,
    /// How long the nemesis injects faults.
    pub duration: Duration,
    /// How long the holders go on after the nemesis stops, every fault
    /// healed.
    pub settle: Duration,
    /// The seed of the nemesis and of the holders.
    pub seed: u64,
    /// How often (percent) a holder borrows two slots rather than one.
    pub two_slot_percent: u32,
    /// The checker's slack for a holder's `told` (see
    /// [`check::Options`]).
    pub told_slack: Duration,
    /// The `faults-holder` binary.
    pub holder_bin: PathBuf,
    /// Where the run's directory of logs is made.
    pub out_base: PathBuf,
    /// Whether to keep the logs of a run that passed.
    pub keep_logs: bool,
    /// The fewest takeovers of running holders (the event that matters: a
    /// lease granted to another while its holder runs and has not released
    /// it) a run must see to be judged; a run with fewer fails as too weak.
    pub min_takeovers: usize,
    /// The planted bug the holders run with (`SEMAPHORE_MUTANT`, feature
    /// `mutants`), if any: see the README.
    pub mutant: Option<String>,
    /// The faults the nemesis picks from, if not all that fit the store.
    pub faults: Option<Vec<FaultKind>>,
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
    )
}

impl Config {
    /// The defaults for `store` (8 holders, count 4, session timeout 2 s,
    /// ttl 30 s, but 5 s on Redis, whose restart grace is the longest ttl
    /// and would idle the pool for 30 s after each restart, and 3 s on
    /// SQLite, where the session is the process; 45 s of faults, 60 s on
    /// a Redis Cluster; at least 10 takeovers of running holders; a random
    /// seed), changed
    /// by: `SEMAPHORE_FAULTS_SECONDS` (the nemesis's duration),
    /// `SEMAPHORE_FAULTS_TTL_MS`, `SEMAPHORE_FAULTS_MIN_TAKEOVERS`,
    /// `SEMAPHORE_FAULTS_SEED`, `SEMAPHORE_FAULTS_HOLDERS`,
    /// `SEMAPHORE_FAULTS_KINDS` (a comma-separated list of the faults to
    /// pick from, by their names in the logs; `none` for none),
    /// `SEMAPHORE_FAULTS_TOLD_SLACK_MS` (100) and `SEMAPHORE_FAULTS_KEEP=1`
    /// (keep the logs of a run that passed).
    pub fn from_env(
        store: StoreKind,
        holder_bin: impl Into<PathBuf>,
        out_base: impl AsRef<Path>,
    ) -> Self {
        let seed = env_u64("SEMAPHORE_FAULTS_SEED").unwrap_or_else(|| fastrand::u64(..));
        Self {
            store,
            holders: env_u64("SEMAPHORE_FAULTS_HOLDERS").map_or(8, |n| n.clamp(2, 64) as usize),
            count: 4,
            ttl: Duration::from_millis(env_u64("SEMAPHORE_FAULTS_TTL_MS").unwrap_or(match store {
                StoreKind::Redis | StoreKind::RedisCluster => 5_000,
                // The session is the process: only expiry takes a
                // lease from a running holder.
                StoreKind::Sqlite => 3_000,
                _ => 30_000,
            })),
            session_timeout: Duration::from_secs(2),
            // A cluster's faults miss the pool's shard at times: longer,
            // for as many takeovers to judge as one server's.
            duration: Duration::from_secs(env_u64("SEMAPHORE_FAULTS_SECONDS").unwrap_or(
                match store {
                    StoreKind::RedisCluster | StoreKind::EtcdCluster => 60,
                    _ => 45,
                },
            )),
            settle: Duration::from_secs(4),
            seed,
            two_slot_percent: 15,
            told_slack: Duration::from_millis(
                env_u64("SEMAPHORE_FAULTS_TOLD_SLACK_MS").unwrap_or(100),
            ),
            holder_bin: holder_bin.into(),
            out_base: out_base.as_ref().join("semaphore-faults"),
            keep_logs: std::env::var("SEMAPHORE_FAULTS_KEEP")
                .is_ok_and(|v| !v.is_empty() && v != "0"),
            min_takeovers: env_u64("SEMAPHORE_FAULTS_MIN_TAKEOVERS").map_or(10, |n| n as usize),
            mutant: None,
            faults: std::env::var("SEMAPHORE_FAULTS_KINDS").ok().map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty() && *n != "none")
                    .map(|n| {
                        FaultKind::from_name(n).unwrap_or_else(|| {
                            panic!(
                                "SEMAPHORE_FAULTS_KINDS: unknown fault {n:?}; the faults are {}",
                                FaultKind::ALL.map(FaultKind::name).join(", ")
                            )
                        })
                    })
                    .collect()
            }),
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// Failures of the harness or of the holders that are not the
    /// checker's: a holder that crashed or would not exit, a proxy no
    /// holder went through, a fault that could not be injected or healed.
    pub problems: Vec<String>,
    /// The run's directory of logs (removed if it passed and the logs are
    /// not kept).
    pub dir: PathBuf,
    /// The summary: settings, the report, the problems.
    pub summary: String,
}

impl Outcome {
    /// Whether the run found nothing wrong.
    pub fn passed(&self) -> bool {
        self.report.violations.is_empty() && self.problems.is_empty()
    }
}

/// Runs the suite with `config`, prints the summary, and panics with it
/// if the checker found violations or the run had problems. A run whose
/// only problem is that it was too weak to judge (too few takeovers of
/// running holders: the faults happened to miss the holders, a loaded
/// machine ran fewer grants, or a cluster's node faults kept everyone off
/// the pool) is not judged either way: the next seed runs, up to three
/// runs in all. Runs without a violation are judged together once their
/// takeovers of running holders add up to the fewest one run needs (each
/// takeover is checked on its own, whichever run it came from); otherwise
/// the last run must pass.
pub fn run_and_assert(config: Config) {
    let mut config = config;
    let mut takeovers = 0;
    for runs in 1..=3 {
        let outcome = run(config.clone());
        if outcome.passed() {
            println!("{}", outcome.summary);
            return;
        }
        let too_weak = outcome.report.violations.is_empty()
            && !outcome.problems.is_empty()
            && outcome.problems.iter().all(|p| p.starts_with(TOO_WEAK));
        let short_of_takeovers_only = too_weak
            && outcome.problems.len() == 1
            && outcome.report.running_takeovers < config.min_takeovers;
        if short_of_takeovers_only {
            takeovers += outcome.report.running_takeovers;
        }
        if short_of_takeovers_only && runs > 1 && takeovers >= config.min_takeovers {
            println!(
                "{}\njudged with the runs before it: {takeovers} takeovers of running holders \
                 in {runs} runs, none with a violation\n",
                outcome.summary
            );
            return;
        }
        assert!(too_weak && runs < 3, "\n{}", outcome.summary);
        println!("{}\ntoo weak to judge: one more run\n", outcome.summary);
        config.seed = config.seed.wrapping_add(1);
    }
}

/// How the problem of a run too weak to judge begins.
const TOO_WEAK: &str = "too weak to judge: ";

/// Runs the suite with `config` on a runtime of its own, on this thread.
///
/// # Panics
/// If the server cannot be started or the run's directory made.
pub fn run(config: Config) -> Outcome {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(orchestrate(&config));
    runtime.shutdown_timeout(Duration::from_secs(2));
    outcome
}

/// One run, start to end: the server, the proxies and the holders, the
/// nemesis until its time is up, the holders' end, and the checker.
async fn orchestrate(config: &Config) -> Outcome {
    let dir = make_dir(config);
    let server = start_server(config.store).await;
    let namespace = server.fresh_namespace();
    prepare(config, &server, &namespace).await;
    let proxies = start_proxies(&server, config.holders).await;
    let start = now_ns();
    let nemesis_end = start + ns(config.duration);
    let until = nemesis_end + ns(config.settle);
    let mut holders = Holders::new(config, &server, dir.clone(), namespace, until, &proxies);
    let mut problems = Vec::new();
    holders.spawn_all();
    let nemesis = Nemesis::new(&dir, proxies.clone(), server.clone());
    nemesis
        .unleash(&mut holders, &mut problems, nemesis_end)
        .await;

    // The nemesis stops: heal everything, let the holders run to their end.
    nemesis.heal_all().await;
    holders.reap_early_exits(&mut problems);
    holders
        .wait_for_end(until + ns(Duration::from_secs(25)), &mut problems)
        .await;
    let history = read_history(&dir);
    let report = check::check(
        &history,
        &check::Options {
            told_slack_ns: ns(config.told_slack),
        },
    );
    run_problems(config, &history, &report, &proxies, &mut problems);
    problems.extend(nemesis.take_problems());
    drop(holders);
    drop(proxies);

    let outcome = conclude(config, report, problems, dir);
    drop(nemesis);
    drop(server);
    outcome
}

/// Makes the run's directory of logs, and says where it is.
fn make_dir(config: &Config) -> PathBuf {
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dir = config.out_base.join(format!(
        "{}-{}-{started_unix}",
        config.store.name(),
        config.seed
    ));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    println!(
        "semaphore-faults: {} with seed {} (SEMAPHORE_FAULTS_SEED={} replays the nemesis's choices); logs in {}",
        config.store.name(),
        config.seed,
        config.seed,
        dir.display()
    );
    dir
}

/// Starts the throwaway server of `kind`.
async fn start_server(kind: StoreKind) -> Arc<Server> {
    let server = tokio::task::spawn_blocking(move || Server::start(kind))
        .await
        .expect("starting the server")
        .unwrap_or_else(|e| panic!("the {} server did not start: {e}", kind.name()));
    Arc::new(server)
}

/// Creates the store's tables in `namespace` and registers the pool.
async fn prepare(config: &Config, server: &Server, namespace: &str) {
    let kind = config.store;
    if let Err(e) = tokio::time::timeout(
        Duration::from_secs(60),
        server.prepare(namespace, POOL, config.count, config.ttl),
    )
    .await
    .unwrap_or_else(|_| Err("timed out".into()))
    {
        panic!("preparing the {} store: {e}", kind.name());
    }
}

/// Proxies of each holder to the server (one per node of a cluster), if it
/// is networked.
async fn start_proxies(server: &Server, holders: usize) -> Vec<Option<Proxies>> {
    let upstreams = server.upstreams();
    let mut proxies = Vec::new();
    for _ in 0..holders {
        proxies.push(match upstreams.is_empty() {
            false => Some(
                Proxies::start(&upstreams)
                    .await
                    .expect("a proxy's listener"),
            ),
            true => None,
        });
    }
    proxies
}

/// The problems of the run itself that the logs and the proxies show: too
/// few grants to check anything, too few takeovers of running holders to
/// judge whether holders know first, a proxy no holder went through.
fn run_problems(
    config: &Config,
    history: &History,
    report: &Report,
    proxies: &[Option<Proxies>],
    problems: &mut Vec<String>,
) {
    let grants = history
        .events
        .iter()
        .filter(|e| matches!(e, Event::Grant { .. }))
        .count();
    if grants < config.holders {
        problems.push(format!(
            "{TOO_WEAK}only {grants} grants in the whole run: the holders could not borrow, so \
             nothing was checked"
        ));
    }
    if report.running_takeovers < config.min_takeovers {
        problems.push(format!(
            "{TOO_WEAK}only {} takeovers of running holders (at least {} are needed) to judge \
             whether holders know first",
            report.running_takeovers, config.min_takeovers
        ));
    }
    for (i, p) in proxies.iter().enumerate() {
        if let Some(p) = p
            && p.accepted() == 0
        {
            problems.push(format!("no holder of slot {i} connected through its proxy"));
        }
    }
}

/// Writes the summary; removes the logs of a run that passed unless they
/// are kept.
fn conclude(config: &Config, report: Report, problems: Vec<String>, dir: PathBuf) -> Outcome {
    let summary = summary(config, &report, &problems, &dir);
    let passed = report.violations.is_empty() && problems.is_empty();
    if passed && !config.keep_logs {
        let _ = fs::remove_dir_all(&dir);
    }
    Outcome {
        report,
        problems,
        dir,
        summary,
    }
}

/// A duration in seconds, as the logs and the summary write it.
fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// A duration in nanoseconds, as the shared clock counts.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
