//! The fault suite on the redis store over a Redis Cluster: three masters
//! with one replica each, every holder reaching every node through proxies
//! of its own (see the crate's README; a `restart` is a master's failover
//! to its replica). Its length is `SEMAPHORE_FAULTS_SECONDS` (45 by
//! default); a failing run prints its seed and keeps its logs.

use semaphore_faults::{Config, StoreKind, run_and_assert};

#[test]
fn redis_cluster_holders_know_first_under_faults() {
    run_and_assert(Config::from_env(
        StoreKind::RedisCluster,
        env!("CARGO_BIN_EXE_faults-holder"),
        env!("CARGO_TARGET_TMPDIR"),
    ));
}
