//! The ring that follows a return's commit: a return rings, through their
//! stores' links, the heads of other stores its freed slots are owed to.
//! The waiting stores here run in test mode with the poll turned off
//! (`rings_only`): if the ring did not come, their borrows would time out.
//! Each store has its link, its connections and its session of its own,
//! as a process of its own would.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{Error, MysqlOptions, MysqlStore, Pool, PoolId};

const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(20);
/// Longer than [`WAIT`] by far: a waiting head, told when the held leases'
/// sessions would end, would look again then, ring or no ring.
const SESSION: Duration = Duration::from_secs(90);

async fn store(prefix: &str, rings_only: bool) -> Arc<MysqlStore> {
    let mut options = MysqlOptions::default()
        .table_prefix(prefix)
        .session_timeout(SESSION);
    if rings_only {
        options = options.rings_only();
    }
    let store = MysqlStore::connect_with(TestServer::shared().url(), options).await;
    Arc::new(store.expect("a MySQL store on the test server"))
}

/// Waits until `pool` has `n` heads in the store's queue.
async fn queued(pool: &Pool, n: usize) {
    while pool.queue().await.expect("the queue").len() < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A pool of one slot that `returner` holds, and `waiting`'s borrow of it
/// queued as the head: the lease held, and the borrow's task (its
/// position once granted).
async fn one_slot_with_a_head<'a>(
    returner: &'a Pool,
    waiting: &Pool,
) -> (
    semaphore_mysql::LeaseGuard<&'a Pool>,
    tokio::task::JoinHandle<Result<u32, Error>>,
) {
    returner.register(1).await.unwrap();
    let held = returner.try_borrow(TTL).await.unwrap();
    let head = tokio::spawn({
        let waiting = waiting.clone();
        async move { waiting.borrow(TTL, WAIT).await.map(|lease| lease.position) }
    });
    queued(returner, 1).await;
    (held, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_rings_the_head_of_another_store() {
    let prefix = TestServer::fresh_prefix();
    let returner = Pool::new(store(&prefix, false).await, PoolId::from_name("rings"));
    let waiting = Pool::new(store(&prefix, true).await, PoolId::from_name("rings"));
    let (held, head) = one_slot_with_a_head(&returner, &waiting).await;
    held.release().await.unwrap();
    match head.await.unwrap() {
        Ok(position) => assert_eq!(position, 0),
        Err(Error::Exhausted { .. }) => panic!("the return's ring never woke the waiting head"),
        Err(e) => panic!("borrow failed: {e}"),
    }
}

/// Three stores' heads wait on a pool of 3 held by a fourth; one return at
/// a time frees one slot, owed to the first head in line: each return's
/// ring must reach that head's store, whichever it is, and no head waits
/// for the poll (there is none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_return_rings_the_head_its_slot_is_owed_to() {
    let prefix = TestServer::fresh_prefix();
    let returner = Pool::new(store(&prefix, false).await, PoolId::from_name("line"));
    returner.register(3).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(returner.try_borrow(TTL).await.unwrap());
    }
    let mut heads = Vec::new();
    for n in 1..=3 {
        let waiting = Pool::new(store(&prefix, true).await, PoolId::from_name("line"));
        // Each head keeps what it is granted: only the test's returns free
        // slots.
        heads.push(tokio::spawn(async move {
            waiting.borrow_owned(TTL, WAIT).await
        }));
        queued(&returner, n).await;
    }
    let mut granted = Vec::new();
    for (lease, head) in held.into_iter().zip(heads) {
        lease.release().await.unwrap();
        match head.await.unwrap() {
            Ok(lease) => granted.push(lease),
            Err(Error::Exhausted { .. }) => panic!("a return's ring never woke the head in line"),
            Err(e) => panic!("borrow failed: {e}"),
        }
    }
    for lease in granted {
        lease.release().await.unwrap();
    }
}

/// A return by another MySQL user, who may not `KILL QUERY` the waiting
/// store's link: the server refuses the ring (1095), and the return is
/// still a return (`true`, its slot free); the head, which keeps its
/// poll, is granted at its next look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_the_server_refuses_fails_no_return() {
    use semaphore_mysql::mysql_async::prelude::Queryable;
    let prefix = TestServer::fresh_prefix();
    let url = TestServer::shared().url();
    let user = format!("{prefix}_other");
    let admin = semaphore_mysql::mysql_async::Pool::new(url);
    let mut conn = admin.get_conn().await.unwrap();
    let database: Option<String> = conn.query_first("SELECT DATABASE()").await.unwrap();
    for host in ["localhost", "%"] {
        let made = conn
            .query_drop(format!(
                "CREATE USER '{user}'@'{host}' IDENTIFIED BY 'ring'; \
                 GRANT ALL ON `{}`.* TO '{user}'@'{host}'",
                database.clone().unwrap_or_default()
            ))
            .await;
        if let Err(e) = made {
            eprintln!("skipped: this server refuses to make a second user ({e})");
            return;
        }
    }
    drop(conn);
    // The same URL as the other user.
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, at) = rest.split_once('@').unwrap();
    let other_url = format!("{scheme}://{user}:ring@{at}");
    let options = MysqlOptions::default()
        .table_prefix(&prefix)
        .session_timeout(SESSION);
    let other = MysqlStore::connect_with(&other_url, options).await.unwrap();
    let returner = Pool::new(Arc::new(other), PoolId::from_name("refused"));
    let waiting = Pool::new(store(&prefix, false).await, PoolId::from_name("refused"));
    let (held, head) = one_slot_with_a_head(&returner, &waiting).await;
    assert!(
        returner.return_lease(held.lease().id).await.unwrap(),
        "the return was not a return"
    );
    drop(held);
    assert_eq!(head.await.unwrap().unwrap(), 0);
    let mut conn = admin.get_conn().await.unwrap();
    for host in ["localhost", "%"] {
        conn.query_drop(format!("DROP USER '{user}'@'{host}'"))
            .await
            .unwrap();
    }
}
