//! The fault suite on the etcd store, three members: see the crate's
//! README. Its length is `SEMAPHORE_FAULTS_SECONDS` (60 by default); a
//! failing run prints its seed and keeps its logs.

use semaphore_faults::{Config, StoreKind, run_and_assert};

#[test]
fn etcd_cluster_holders_know_first_under_faults() {
    run_and_assert(Config::from_env(
        StoreKind::EtcdCluster,
        env!("CARGO_BIN_EXE_faults-holder"),
        env!("CARGO_TARGET_TMPDIR"),
    ));
}
