//! What `RedisStore::connect` refuses, on real servers of its own.

use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{Error, RedisOptions, RedisStore};

/// A Redis Cluster node is refused by `connect` (one server), with what to
/// use instead (`connect_cluster`), rather than failing at the first
/// borrow with `MOVED` or a refusal of keys of another slot: every node of
/// a real cluster (three masters, a replica each), and a lone node that
/// serves every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_refused_at_connect() {
    let cluster = TestCluster::start().unwrap();
    for url in cluster.urls() {
        refused_as_cluster(&url).await;
    }
    let node = TestServer::start_with(&["--cluster-enabled", "yes"]).unwrap();
    node.command("CLUSTER ADDSLOTSRANGE 0 16383");
    refused_as_cluster(node.url()).await;
    // A server without cluster mode is taken.
    let standalone = TestServer::start().unwrap();
    RedisStore::connect(standalone.url())
        .await
        .expect("a standalone server");
}

async fn refused_as_cluster(url: &str) {
    match RedisStore::connect(url).await {
        Err(Error::InvalidArgument {
            field: "url",
            allowed,
            got,
        }) => {
            assert!(got.contains("Redis Cluster node"), "{url}: {got}");
            assert!(allowed.contains("standalone Redis server"), "{allowed}");
            assert!(allowed.contains("connect_cluster"), "{allowed}");
        }
        Err(other) => panic!("{url} refused, but not as a cluster node: {other:?}"),
        Ok(_) => panic!("the Redis Cluster node {url} was taken as a standalone server"),
    }
}

/// `RedisOptions::node_address` takes `host:port`s: anything else is
/// refused at `connect_cluster` naming `node_address`, before any node is
/// dialled (the URL here names no server).
#[tokio::test]
async fn a_node_address_that_does_not_parse_is_refused() {
    for (announced, dial) in [
        ("127.0.0.1", "127.0.0.1:7000"),
        ("127.0.0.1:7000", "nowhere"),
    ] {
        let options = RedisOptions::default().node_address(announced, dial);
        match RedisStore::connect_cluster_with(&["redis://127.0.0.1:1"], options).await {
            Err(Error::InvalidArgument { field, got, .. }) => {
                assert_eq!(field, "node_address");
                assert!(
                    got.contains(if dial == "nowhere" { dial } else { announced }),
                    "{got}"
                );
            }
            other => panic!("{announced} -> {dial}: {other:?}"),
        }
    }
}

/// The store's function library is loaded at connect; a server that lost
/// it since (a restart without persistence, a `FUNCTION FLUSH`) is given
/// it again by the next call, which then does what it was asked.
#[tokio::test]
async fn a_server_that_lost_the_library_is_given_it_again() {
    let server = TestServer::start().unwrap();
    let store = RedisStore::connect_with(
        server.url(),
        RedisOptions::default().restart_grace(std::time::Duration::ZERO),
    )
    .await
    .unwrap();
    let pool = semaphore_redis::Pool::new(
        std::sync::Arc::new(store),
        semaphore_redis::PoolId::from_name("lost-library"),
    );
    pool.register(1).await.unwrap();
    server.command("FUNCTION FLUSH");
    let lease = pool
        .try_borrow(std::time::Duration::from_secs(30))
        .await
        .expect("a borrow after the library was flushed");
    assert_eq!(lease.position, 0);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
}
