//! What `RedisStore::connect` refuses, on real servers of its own.

use semaphore_redis::testing::TestServer;
use semaphore_redis::{Error, RedisStore};

/// A Redis Cluster node is refused at connect, with the reason, rather
/// than failing at the first borrow with `MOVED` or a refusal of keys of
/// another slot (issue 42: the store has no cluster client yet). Even a
/// node that serves every slot is refused: a multi-pool borrow names the
/// keys of several slots, which a cluster refuses (`CROSSSLOT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_refused_at_connect() {
    let node = TestServer::start_with(&["--cluster-enabled", "yes"]).unwrap();
    node.command("CLUSTER ADDSLOTSRANGE 0 16383");
    match RedisStore::connect(node.url()).await {
        Err(Error::InvalidArgument {
            field: "url",
            allowed,
            got,
        }) => {
            assert!(got.contains("Redis Cluster node"), "{got}");
            assert!(allowed.contains("standalone Redis server"), "{allowed}");
        }
        Err(other) => panic!("refused, but not as a cluster node: {other:?}"),
        Ok(_) => panic!("a Redis Cluster node was taken as a standalone server"),
    }
    // The same server without cluster mode is taken.
    let standalone = TestServer::start().unwrap();
    RedisStore::connect(standalone.url())
        .await
        .expect("a standalone server");
}
