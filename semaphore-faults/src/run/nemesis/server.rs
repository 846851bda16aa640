//! The nemesis's faults on the server (or a cluster's node) rather than on
//! one holder: a restart or failover, an idle-session timeout, connection
//! kills, a node's stop or partition from its peers, SQLite's side
//! files.

use std::sync::Arc;
use std::time::Duration;

use super::{Active, Heal, Nemesis, rand_duration};
use crate::clock::now_ns;
use crate::event::{FaultKind, Phase};
use crate::run::holders::Holders;
use crate::run::{ns, secs};
use crate::server::StoreKind;

impl Nemesis {
    /// `restart` of the server. Returns until when the server is busy.
    pub(super) async fn restart(&self, rng: &mut fastrand::Rng, problems: &mut Vec<String>) -> u64 {
        let fault = FaultKind::Restart;
        self.record(now_ns(), fault, Phase::Start, None, None, String::new());
        let result = self.server.restart(rng.usize(..)).await;
        let detail = result.clone().unwrap_or_else(|e| e);
        if let Err(e) = result {
            problems.push(format!("restarting the server: {e}"));
        }
        self.record(now_ns(), fault, Phase::End, None, None, detail);
        now_ns() + ns(Duration::from_secs(2))
    }

    /// `idle_timeout` on the server for 3-6 s. Returns until when the
    /// server is busy.
    pub(super) async fn idle_timeout(
        self: &Arc<Self>,
        rng: &mut fastrand::Rng,
        problems: &mut Vec<String>,
        now: u64,
    ) -> u64 {
        let fault = FaultKind::IdleTimeout;
        let d = rand_duration(rng, 3000, 6000);
        self.record(now_ns(), fault, Phase::Start, None, None, secs(d));
        match self.server.idle_timeout(true).await {
            Ok(_) => self.heal_later(
                Active {
                    kind: fault,
                    slot: None,
                    pid: None,
                    heal: Heal::IdleTimeout,
                },
                d,
            ),
            Err(e) => {
                problems.push(format!("setting the idle-session timeout: {e}"));
                self.record(now_ns(), fault, Phase::End, None, None, e);
            }
        }
        now + ns(d) + ns(Duration::from_secs(1))
    }

    /// `server_kill`: the server kills its client connections. Returns
    /// until when the server is busy.
    pub(super) async fn server_kill(
        &self,
        holders: &Holders<'_>,
        rng: &mut fastrand::Rng,
        problems: &mut Vec<String>,
    ) -> u64 {
        let fault = FaultKind::ServerKill;
        // On PostgreSQL, one holder's connections half of the time; else
        // every client connection.
        let only = (holders.config.store == StoreKind::Postgres && rng.bool()).then(|| {
            let j = rng.usize(..holders.slots.len());
            (holders.slots[j].index, holders.slots[j].pid)
        });
        let t = now_ns();
        match self.server.kill_connections(only.map(|(s, _)| s)).await {
            Ok(d) => self.record(
                t,
                fault,
                Phase::Start,
                only.map(|o| o.0),
                only.map(|o| o.1),
                d,
            ),
            Err(e) => {
                self.record(t, fault, Phase::Start, None, None, format!("failed: {e}"));
                problems.push(format!("killing connections on the server: {e}"));
            }
        }
        now_ns() + ns(Duration::from_secs(1))
    }

    /// `node_stop` (a cluster: `SIGSTOP` of a node of the pool's shard) or
    /// `node_partition` (an etcd cluster of three: a member cut off from
    /// its peers), of its master (or leader) three times in four, for
    /// 1.5-5 s. Returns until when the server is busy: the fault, and 3 s
    /// for the cluster to agree again.
    pub(super) fn node_fault(
        self: &Arc<Self>,
        fault: FaultKind,
        rng: &mut fastrand::Rng,
        problems: &mut Vec<String>,
        now: u64,
    ) -> u64 {
        let Some(shard) = self.server.pool_shard() else {
            return now;
        };
        let master = self.server.master_among(&shard);
        let port = match master {
            Some(master) if rng.u32(..4) != 0 => master,
            _ => shard[rng.usize(..shard.len())],
        };
        let d = rand_duration(rng, 1500, 5000);
        let t = now_ns();
        let (done, heal, doing) = if fault == FaultKind::NodePartition {
            let done = self.server.partition_node(port, true);
            (done, Heal::NodePartition(port), "partitioning")
        } else {
            let done = self.server.signal_node(port, "STOP");
            (done, Heal::NodeStop(port), "stopping")
        };
        match done {
            Ok(detail) => {
                let role = match (master == Some(port), self.server.etcd()) {
                    (true, false) => "master",
                    (false, false) => "replica",
                    (true, true) => "leader",
                    (false, true) => "follower",
                };
                self.record(
                    t,
                    fault,
                    Phase::Start,
                    None,
                    None,
                    format!("{detail} ({role}), {}", secs(d)),
                );
                self.heal_later(
                    Active {
                        kind: fault,
                        slot: None,
                        pid: None,
                        heal,
                    },
                    d,
                );
            }
            Err(e) => {
                self.record(t, fault, Phase::Start, None, None, format!("failed: {e}"));
                problems.push(format!("{doing} node {port}: {e}"));
            }
        }
        now + ns(d) + ns(Duration::from_secs(3))
    }

    /// `delete_sidecars` (SQLite). Returns until when the server is busy.
    pub(super) fn delete_sidecars(&self) -> u64 {
        let t = now_ns();
        let detail = self.server.delete_sidecars().unwrap_or_else(|e| e);
        self.record(
            t,
            FaultKind::DeleteSidecars,
            Phase::Start,
            None,
            None,
            detail,
        );
        now_ns() + ns(Duration::from_secs(1))
    }
}
