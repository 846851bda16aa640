//! etcd's side of the servers: a throwaway cluster of one member or
//! three, and its optional audit (every change to its keys).

use std::sync::Arc;

use super::{Server, StoreKind};

/// A process killed when dropped (the etcd audit's `etcdctl watch`).
#[derive(Debug)]
pub struct Audit(std::process::Child);

impl Drop for Audit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A throwaway etcd cluster of `kind` (one member, or three).
pub(super) fn start(kind: StoreKind) -> Result<Server, String> {
    let cluster = if kind == StoreKind::Etcd {
        semaphore_etcd::testing::TestCluster::start()?
    } else {
        semaphore_etcd::testing::TestCluster::start_three()?
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
        _audit: audit,
    })
}
