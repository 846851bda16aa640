//! etcd's side of the servers: a throwaway cluster of one member or
//! three, and its optional audit (every change to its keys).

use std::sync::Arc;

use super::{Server, StoreKind};
use crate::proxy::{Proxy, Upstream};

/// A process killed when dropped (the etcd audit's `etcdctl watch`).
#[derive(Debug)]
pub struct Audit(std::process::Child);

impl Drop for Audit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A throwaway etcd cluster of `kind` (one member, or three whose peers
/// reach each other through proxies, one a member: `node_partition`
/// stalls one). Runs on a thread that may block, in a tokio runtime (the
/// proxies run on it).
pub(super) fn start(kind: StoreKind) -> Result<Server, String> {
    let mut peers = Vec::new();
    let cluster = if kind == StoreKind::Etcd {
        semaphore_etcd::testing::TestCluster::start()?
    } else {
        let runtime = tokio::runtime::Handle::current();
        semaphore_etcd::testing::TestCluster::start_three_routed(|port| {
            let upstream = Upstream::Tcp(([127, 0, 0, 1], port).into());
            let proxy = runtime
                .block_on(Proxy::start(upstream))
                .map_err(|e| format!("a proxy to peer port {port}: {e}"))?;
            let advertised = proxy.port();
            peers.push(proxy);
            Ok(advertised)
        })?
    };
    let ports = cluster.ports();
    let mut audit = None;
    // `SEMAPHORE_FAULTS_ETCD_AUDIT=FILE`: every change to the
    // cluster's keys, with the value it replaced, as
    // `etcdctl watch` prints it (JSON lines), for a post-mortem
    // of a violation (needs `etcdctl`, Debian's etcd-client).
    if let Ok(path) = std::env::var("SEMAPHORE_FAULTS_ETCD_AUDIT") {
        let file =
            std::fs::File::create(&path).map_err(|e| format!("the audit file {path}: {e}"))?;
        audit = std::process::Command::new("etcdctl")
            .arg(format!("--endpoints={}", cluster.endpoints().join(",")))
            .args(["watch", "--prefix", "", "-w", "json", "--prev-kv"])
            .stdout(file)
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()
            .map(Audit);
    }
    Ok(Server::Etcd {
        cluster: Arc::new(cluster),
        ports,
        peers,
        _audit: audit,
    })
}
