//! No herd across processes: a change wakes a queued head in another
//! process only when it can let that head in (see the store's
//! `standing`), and every change that can still does. Each handle is a
//! process here: its own client, session, watch and queue.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{BorrowOptions, EtcdOptions, EtcdStore, OwnedLeaseGuard, Pool, PoolId};
use tokio::task::JoinHandle;

async fn connect(endpoints: &[String], prefix: &str) -> Arc<EtcdStore> {
    let options = EtcdOptions::default().prefix(prefix);
    Arc::new(
        EtcdStore::connect_with(endpoints, options)
            .await
            .expect("an etcd store on the test cluster"),
    )
}

/// A borrow of `slots` from `store`, waiting up to a minute, on a task of
/// its own.
fn wait_on(
    store: Arc<EtcdStore>,
    id: PoolId,
    slots: u32,
) -> JoinHandle<semaphore_etcd::Result<OwnedLeaseGuard>> {
    let pool = Pool::new(store, id);
    tokio::spawn(async move {
        let options = BorrowOptions::default().slots(slots);
        pool.borrow_owned_with(Duration::from_secs(60), Duration::from_secs(60), options)
            .await
    })
}

/// A pool of `count` slots named `name`, registered through a handle of
/// its own, and one of its slots held through it: the handle, the pool
/// and the held slot.
async fn held_pool(
    endpoints: &[String],
    prefix: &str,
    name: &str,
    count: u32,
) -> (Arc<EtcdStore>, Pool, OwnedLeaseGuard) {
    let holder = connect(endpoints, prefix).await;
    let pool = Pool::new(holder.clone(), PoolId::from_name(name));
    pool.register(count).await.unwrap();
    let held = pool
        .borrow_owned(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    (holder, pool, held)
}

/// Waits until `id`'s line holds `n` places.
async fn until_queued(store: &EtcdStore, id: PoolId, n: usize) {
    use semaphore_etcd::store::Store;
    while store.queue(id).await.unwrap().len() != n {
        tokio::task::yield_now().await;
    }
}

/// The transactions etcd member `endpoint` has served, from its metrics.
fn txns_served(endpoint: &str) -> u64 {
    let address = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("the member's client port");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body.lines()
        .filter(|line| {
            line.starts_with("grpc_server_handled_total{") && line.contains("grpc_method=\"Txn\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Six heads in six processes wait on a pool of one slot; each return
/// lets the next in, in turn. A return wakes the one head it lets in, and
/// a grant wakes no one, so the whole line is served in a few
/// transactions per head; a herd (every head looking at every change)
/// would cost about as many as heads wait behind, each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_wakes_only_the_head_it_lets_in() {
    // A cluster of its own: its metrics count this test's work only.
    let cluster = TestCluster::start().expect("a throwaway etcd");
    let endpoints = cluster.endpoints();
    let prefix = TestCluster::fresh_prefix();
    let (holder, _pool, held) = held_pool(endpoints, &prefix, "herd", 1).await;
    let id = PoolId::from_name("herd");
    const HEADS: usize = 6;
    let mut line = Vec::new();
    for n in 1..=HEADS {
        line.push(wait_on(connect(endpoints, &prefix).await, id, 1));
        until_queued(&holder, id, n).await;
    }
    let before = txns_served(&endpoints[0]);
    assert!(held.release().await.unwrap());
    for waiting in line {
        let granted = waiting.await.unwrap().expect("each head is served");
        assert!(granted.release().await.unwrap());
    }
    let spent = txns_served(&endpoints[0]) - before;
    // Per head: the return that lets it in, its look, its grant, and its
    // leaving the line; a herd adds a look for each head still waiting,
    // at each return and at each grant (69 here before the standings,
    // 26 with them).
    assert!(
        spent <= 5 * HEADS as u64,
        "{spent} transactions served {HEADS} heads"
    );
}

/// A place ahead that needs more slots than are free holds the head
/// behind it back; when it leaves, the head behind is let in at once
/// (while the holder still holds), with no return to wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_ahead_that_leaves_lets_the_next_head_in() {
    let endpoints = TestCluster::shared().endpoints();
    let prefix = TestCluster::fresh_prefix();
    let (holder, _pool, held) = held_pool(endpoints, &prefix, "ahead leaves", 2).await;
    let id = PoolId::from_name("ahead leaves");
    let wide = wait_on(connect(endpoints, &prefix).await, id, 2);
    until_queued(&holder, id, 1).await;
    let narrow = wait_on(connect(endpoints, &prefix).await, id, 1);
    until_queued(&holder, id, 2).await;
    wide.abort();
    let granted = narrow
        .await
        .unwrap()
        .expect("let in once the place ahead left");
    assert!(granted.release().await.unwrap());
    assert!(held.release().await.unwrap());
}

/// A head that waits behind a full pool is let in when the count is
/// raised, by another process, with no return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_count_lets_the_head_in() {
    let endpoints = TestCluster::shared().endpoints();
    let prefix = TestCluster::fresh_prefix();
    let (holder, pool, held) = held_pool(endpoints, &prefix, "raised", 1).await;
    let id = PoolId::from_name("raised");
    let waiting = wait_on(connect(endpoints, &prefix).await, id, 1);
    until_queued(&holder, id, 1).await;
    pool.register(2).await.unwrap();
    let granted = waiting.await.unwrap().expect("let in by the raised count");
    assert!(granted.release().await.unwrap());
    assert!(held.release().await.unwrap());
}

/// Many heads in many processes, of weights 1 and 2, on a pool of three
/// slots, some giving up their wait part-way: every borrow that waits to
/// the end is served (no head is left asleep with room for it), and the
/// slots held at once never pass the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_head_of_many_processes_is_served_in_turn() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let endpoints = TestCluster::shared().endpoints();
    let prefix = TestCluster::fresh_prefix();
    let id = PoolId::from_name("many heads");
    let first = connect(endpoints, &prefix).await;
    Pool::new(first.clone(), id).register(3).await.unwrap();
    let held = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for process in 0..8u32 {
        let store = if process == 0 {
            first.clone()
        } else {
            connect(endpoints, &prefix).await
        };
        for task in 0..4u32 {
            let (pool, held) = (Pool::new(store.clone(), id), held.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..5u32 {
                    let slots = 1 + (process + task + round) % 2;
                    let options = BorrowOptions::default().slots(slots);
                    let ttl = Duration::from_secs(60);
                    let borrow = pool.borrow_with(ttl, Duration::from_secs(60), options);
                    // One borrow in seven gives up its wait after 2 ms.
                    let guard = if (process * 4 + task + round) % 7 == 0 {
                        match tokio::time::timeout(Duration::from_millis(2), borrow).await {
                            Ok(guard) => guard.expect("served"),
                            Err(_) => continue,
                        }
                    } else {
                        borrow.await.expect("every borrow that waits is served")
                    };
                    let now = held.fetch_add(slots, Ordering::SeqCst) + slots;
                    assert!(now <= 3, "{now} slots held at once");
                    tokio::time::sleep(Duration::from_millis(u64::from(round % 3))).await;
                    held.fetch_sub(slots, Ordering::SeqCst);
                    assert!(guard.release().await.unwrap());
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("each task's borrows end");
    }
}
