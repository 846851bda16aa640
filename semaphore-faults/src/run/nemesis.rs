//! The nemesis: one random fault that fits the store every 0.3-1.5 s (on
//! SQLite every 1-4 s), each logged in `faults.jsonl` and healed after its
//! time (or at the end of the run). Its choices follow the run's seed.
//! Partitions and cuts, and three blips in four (and stops, but on
//! SQLite), are aimed at a holder in a long hold (one that means to hold
//! its lease 2.8 s more at least, while others wait for the pool's
//! slots): the event that matters is a running holder cut off while
//! another waits.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::holders::Holders;
use super::{Config, ns, secs};
use crate::clock::now_ns;
use crate::event::{FaultKind, FaultRecord, Log, Phase};
use crate::proxy::{Proxies, Upstream};
use crate::server::{Server, StoreKind};

mod server;

/// A fault in progress that heals (or ends) later.
#[derive(Debug, Clone)]
enum Heal {
    /// A proxy fault: heal the slot's proxy.
    Proxy(usize),
    /// A stopped holder: `SIGCONT` it.
    Stop(u32),
    /// The server's idle-session timeout: reset it.
    IdleTimeout,
    /// A stopped cluster node: `SIGCONT` it.
    NodeStop(u16),
    /// A node cut off from its peers: let its bytes flow again.
    NodePartition(u16),
}

/// A fault in progress: what it is, whom it hit, how it heals.
#[derive(Debug)]
struct Active {
    kind: FaultKind,
    slot: Option<u32>,
    pid: Option<u32>,
    heal: Heal,
}

/// The nemesis's shared state: its faults log and the faults in progress.
pub(super) struct Nemesis {
    log: Log,
    active: Mutex<HashMap<u64, Active>>,
    next_id: Mutex<u64>,
    proxies: Vec<Option<Proxies>>,
    server: Arc<Server>,
    problems: Mutex<Vec<String>>,
}

impl Nemesis {
    /// The nemesis of a run, its faults log in `dir`, no fault in
    /// progress.
    ///
    /// # Panics
    /// If the faults log cannot be made.
    pub(super) fn new(dir: &Path, proxies: Vec<Option<Proxies>>, server: Arc<Server>) -> Arc<Self> {
        Arc::new(Nemesis {
            log: Log::open(&dir.join("faults.jsonl")).expect("the faults log"),
            active: Mutex::new(HashMap::new()),
            next_id: Mutex::new(0),
            proxies,
            server,
            problems: Mutex::new(Vec::new()),
        })
    }

    /// The problems met injecting or healing faults so far, taken.
    pub(super) fn take_problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Injects faults until `end` (ns): one every 0.3-1.5 s, on a free holder
    /// or on the server, if it fits, is among the configured ones, and
    /// would not outlast the nemesis. Between faults, replaces the holders
    /// that exited early.
    pub(super) async fn unleash(
        self: &Arc<Self>,
        holders: &mut Holders<'_>,
        problems: &mut Vec<String>,
        end: u64,
    ) {
        let config = holders.config;
        let mut rng = fastrand::Rng::with_seed(config.seed);
        let mut server_busy_until = 0u64;
        let kinds = kinds(config);
        loop {
            // SQLite's faults all stop, kill or unsettle holders: fewer of
            // them leave holders running into their leases' ends.
            let pause = match config.store {
                StoreKind::Sqlite => rand_duration(&mut rng, 1000, 4000),
                _ => rand_duration(&mut rng, 300, 1500),
            };
            let now = now_ns();
            if now + ns(pause) >= end {
                tokio::time::sleep(Duration::from_nanos(end.saturating_sub(now))).await;
                break;
            }
            tokio::time::sleep(pause).await;
            holders.reap_early_exits(problems);
            if kinds.is_empty() {
                continue;
            }
            let fault = kinds[rng.usize(..kinds.len())];
            let on_holder = on_holder(fault);
            let aimed = match fault {
                FaultKind::Partition | FaultKind::Cut => true,
                FaultKind::Blip => rng.u32(..4) != 0,
                // On SQLite a long hold ends at its ttl while its holder
                // runs (the session is the process): the takeover a stop
                // would turn into a stopped holder's.
                FaultKind::Stop => config.store.networked() && rng.u32(..4) != 0,
                _ => false,
            };
            let aimed_at = if aimed {
                long_hold(holders, end).await
            } else {
                None
            };
            let now = now_ns();
            let free = holders.free(now);
            if on_holder && free.is_empty() || !on_holder && server_busy_until > now {
                continue;
            }
            if now + ns(longest(fault, config)) >= end {
                continue;
            }
            let i = match aimed_at {
                Some(i) => i,
                None if on_holder => free[rng.usize(..free.len())],
                None => 0,
            };
            match fault {
                FaultKind::Blip | FaultKind::Partition | FaultKind::Cut => {
                    self.proxy_fault(fault, holders, i, &mut rng, now);
                }
                FaultKind::Stop => self.stop(holders, i, &mut rng, now),
                FaultKind::Kill => self.kill(holders, i, problems, now),
                FaultKind::Restart => server_busy_until = self.restart(&mut rng, problems).await,
                FaultKind::IdleTimeout => {
                    server_busy_until = self.idle_timeout(&mut rng, problems, now).await;
                }
                FaultKind::ServerKill => {
                    server_busy_until = self.server_kill(holders, &mut rng, problems).await;
                }
                FaultKind::DeleteSidecars => server_busy_until = self.delete_sidecars(),
                FaultKind::NodeStop | FaultKind::NodePartition => {
                    server_busy_until = self.node_fault(fault, &mut rng, problems, now);
                }
            }
        }
    }

    /// `blip`, `partition` or `cut` of slot `i`'s proxy.
    fn proxy_fault(
        self: &Arc<Self>,
        fault: FaultKind,
        holders: &mut Holders<'_>,
        i: usize,
        rng: &mut fastrand::Rng,
        now: u64,
    ) {
        let slot = &holders.slots[i];
        let (target, target_pid) = (Some(slot.index), Some(slot.pid));
        let Some(mut proxy) = slot.proxy.clone() else {
            return;
        };
        let d = match fault {
            FaultKind::Blip => rand_duration(rng, 100, 3000),
            FaultKind::Partition => rand_duration(rng, 3000, 5000),
            _ => rand_duration(rng, 2500, 6000),
        };
        let mut detail = secs(d);
        // A cluster: one time in four, the holder loses one node only (a
        // master or a replica), and reaches the others; that node is of
        // the pool's shard two times in three.
        if proxy.len() > 1 && rng.u32(..4) == 0 {
            let shard = self.server.pool_shard().unwrap_or_default();
            let of_shard: Vec<usize> = proxy
                .each()
                .enumerate()
                .filter(|(_, (upstream, _))| {
                    matches!(upstream, Upstream::Tcp(a) if shard.contains(&a.port()))
                })
                .map(|(i, _)| i)
                .collect();
            let node = if !of_shard.is_empty() && rng.u32(..3) != 0 {
                of_shard[rng.usize(..of_shard.len())]
            } else {
                rng.usize(..proxy.len())
            };
            proxy = proxy.only(node);
            if let Some((upstream, _)) = proxy.each().next() {
                detail = format!("{detail}, node {upstream:?} only");
            }
        }
        self.record(now_ns(), fault, Phase::Start, target, target_pid, detail);
        match fault {
            FaultKind::Blip => proxy.blip(d),
            FaultKind::Partition => proxy.partition(d),
            _ => proxy.cut(),
        }
        self.heal_later(
            Active {
                kind: fault,
                slot: target,
                pid: target_pid,
                heal: Heal::Proxy(i),
            },
            d,
        );
        holders.slots[i].busy_until = now + ns(d) + ns(Duration::from_secs(1));
    }

    /// `stop`: `SIGSTOP` of slot `i`'s holder for 0.3-2 s past the
    /// shorter of its lease's ttl and its session timeout: long enough for
    /// its leases to end while it cannot look.
    fn stop(
        self: &Arc<Self>,
        holders: &mut Holders<'_>,
        i: usize,
        rng: &mut fastrand::Rng,
        now: u64,
    ) {
        let fault = FaultKind::Stop;
        let slot = &holders.slots[i];
        let (target, pid) = (Some(slot.index), slot.pid);
        let target_pid = Some(pid);
        let d = stop_base(holders.config) + rand_duration(rng, 300, 2000);
        self.record(now_ns(), fault, Phase::Start, target, target_pid, secs(d));
        if let Err(e) = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP) {
            self.problem(format!("SIGSTOP of {pid}: {e}"));
        }
        self.heal_later(
            Active {
                kind: fault,
                slot: target,
                pid: target_pid,
                heal: Heal::Stop(pid),
            },
            d,
        );
        holders.slots[i].busy_until = now + ns(d) + ns(Duration::from_secs(1));
    }

    /// `kill`: `SIGKILL` of slot `i`'s holder; a new one takes its place.
    fn kill(&self, holders: &mut Holders<'_>, i: usize, problems: &mut Vec<String>, now: u64) {
        let slot = &holders.slots[i];
        self.record(
            now_ns(),
            FaultKind::Kill,
            Phase::Start,
            Some(slot.index),
            Some(slot.pid),
            "SIGKILL".into(),
        );
        if let Err(e) = holders.kill_and_replace(i) {
            problems.push(e);
        }
        holders.slots[i].busy_until = now + ns(Duration::from_secs(1));
    }

    fn record(
        &self,
        t: u64,
        kind: FaultKind,
        phase: Phase,
        slot: Option<u32>,
        pid: Option<u32>,
        detail: String,
    ) {
        self.log.write(&FaultRecord {
            t,
            kind,
            phase,
            slot,
            pid,
            detail,
        });
    }

    fn problem(&self, p: String) {
        self.problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p);
    }

    /// Registers a fault to heal, and heals it after `after` unless the
    /// end of the run healed it first.
    fn heal_later(self: &Arc<Self>, active: Active, after: Duration) {
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, active);
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            me.heal(id).await;
        });
    }

    async fn heal(&self, id: u64) {
        let Some(a) = self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
        else {
            return;
        };
        let detail = match &a.heal {
            Heal::Proxy(i) => {
                if let Some(p) = &self.proxies[*i] {
                    p.heal();
                }
                String::new()
            }
            Heal::Stop(pid) => match kill(Pid::from_raw(*pid as i32), Signal::SIGCONT) {
                Ok(()) => "SIGCONT".into(),
                Err(e) => format!("SIGCONT: {e}"),
            },
            Heal::NodeStop(port) => match self.server.signal_node(*port, "CONT") {
                Ok(d) => d,
                Err(e) => {
                    self.problem(format!("continuing node {port}: {e}"));
                    e
                }
            },
            Heal::NodePartition(port) => match self.server.partition_node(*port, false) {
                Ok(d) => d,
                Err(e) => {
                    self.problem(format!("healing node {port}'s partition: {e}"));
                    e
                }
            },
            Heal::IdleTimeout => match self.server.idle_timeout(false).await {
                Ok(d) => d,
                Err(e) => {
                    self.problem(format!("resetting the idle-session timeout: {e}"));
                    e
                }
            },
        };
        self.record(now_ns(), a.kind, Phase::End, a.slot, a.pid, detail);
    }

    /// Heals every fault still in progress.
    pub(super) async fn heal_all(&self) {
        let ids: Vec<u64> = self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        for id in ids {
            self.heal(id).await;
        }
        for p in self.proxies.iter().flatten() {
            p.heal();
        }
    }
}

/// The faults the nemesis picks from, each as many times as its weight:
/// those that fit the store, and are among the configured ones if any are.
fn kinds(config: &Config) -> Vec<FaultKind> {
    FaultKind::ALL
        .into_iter()
        .filter(|k| fits(*k, config.store))
        .filter(|k| config.faults.as_ref().is_none_or(|only| only.contains(k)))
        .flat_map(|k| std::iter::repeat_n(k, weight(k, config.store)))
        .collect()
}

/// How often a fault is picked, relative to the others: the faults that cut
/// a running holder off past its session timeout (partitions and cuts,
/// then blips) are what the suite is about, so they come most often.
fn weight(fault: FaultKind, store: StoreKind) -> usize {
    match fault {
        FaultKind::Partition | FaultKind::Cut => 4,
        FaultKind::Blip => 2,
        FaultKind::Stop if store.networked() => 2,
        _ => 1,
    }
}

/// Whether `fault` fits `store`: the holders' faults every store, the
/// network's and the server's a networked one, a node's a cluster, side
/// files SQLite.
fn fits(fault: FaultKind, store: StoreKind) -> bool {
    match fault {
        FaultKind::Stop | FaultKind::Kill => true,
        FaultKind::NodeStop => {
            matches!(store, StoreKind::RedisCluster | StoreKind::EtcdCluster)
        }
        FaultKind::DeleteSidecars => store == StoreKind::Sqlite,
        FaultKind::NodePartition => store == StoreKind::EtcdCluster,
        // etcd has neither an idle-session timeout nor a way to drop its
        // clients; the proxies' cuts drop them.
        FaultKind::IdleTimeout | FaultKind::ServerKill if store.etcd() => false,
        _ => store.networked(),
    }
}

/// Whether `fault` hits one holder (else the server).
fn on_holder(fault: FaultKind) -> bool {
    matches!(
        fault,
        FaultKind::Blip | FaultKind::Partition | FaultKind::Cut | FaultKind::Stop | FaultKind::Kill
    )
}

/// The longest `fault` lasts: one that would outlast the nemesis is not
/// started.
fn longest(fault: FaultKind, config: &Config) -> Duration {
    match fault {
        FaultKind::Blip => Duration::from_secs(3),
        FaultKind::Partition => Duration::from_secs(5),
        FaultKind::Cut => Duration::from_secs(6),
        FaultKind::Stop => stop_base(config) + Duration::from_secs(2),
        FaultKind::IdleTimeout => Duration::from_secs(6),
        FaultKind::NodeStop | FaultKind::NodePartition => Duration::from_secs(5),
        _ => Duration::ZERO,
    }
}

/// How long a stopped holder's leases live at most: the shorter of the
/// ttl and the session timeout (on SQLite the session is the process,
/// which a stop does not end: the ttl).
fn stop_base(config: &Config) -> Duration {
    match config.store {
        StoreKind::Sqlite => config.ttl,
        _ => config.ttl.min(config.session_timeout),
    }
}

/// A slot open to a fault whose holder means to hold its lease
/// [`LONG_HOLD`] more at least, waited for 3 s at most (and not past
/// `end`): a fault that cuts it off then finds others waiting for its
/// slots.
async fn long_hold(holders: &Holders<'_>, end: u64) -> Option<usize> {
    let give_up = (now_ns() + 3_000_000_000).min(end);
    loop {
        let now = now_ns();
        let long = holders.free(now).into_iter().find(|&i| {
            holders
                .holding_until(i)
                .is_some_and(|until| until >= now + ns(LONG_HOLD))
        });
        if long.is_some() || now >= give_up {
            return long;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a holder must mean to hold its lease still for a fault to be
/// aimed at it: past the session timeout (2 s) and a heartbeat's period.
const LONG_HOLD: Duration = Duration::from_millis(2_800);

fn rand_duration(rng: &mut fastrand::Rng, from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(rng.u64(from_ms..=to_ms))
}
