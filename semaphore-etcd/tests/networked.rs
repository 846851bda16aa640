//! The networked stores' cases on a real etcd, on its own clock (rule
//! "etcd"): a crashed store's session, a session an operator ended,
//! machines whose clocks disagree by a minute, a dead head's place, and a
//! live head's place kept with no look.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::conformance::{
    OffsetClock, r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay,
    r17_a_session_ended_by_another_tells_its_holder_why,
};
use semaphore_etcd::store::Store;
use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{Clock, Error, EtcdOptions, EtcdStore, Pool, PoolId, SessionId};

async fn connect(
    prefix: &str,
    clock: Option<Arc<dyn Clock>>,
    timeout: Option<Duration>,
) -> EtcdStore {
    let mut options = EtcdOptions::default().prefix(prefix);
    if let Some(clock) = clock {
        options = options.clock(clock);
    }
    if let Some(timeout) = timeout {
        options = options.session_timeout(timeout);
    }
    EtcdStore::connect_with(TestCluster::shared().endpoints(), options)
        .await
        .expect("an etcd store on the test cluster")
}

/// A crashed store's session ends when its etcd lease lapses; its bound
/// lease frees, its holder is told first, its unbound and forgotten
/// leases stay, and no one takes a live session's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let prefix = TestCluster::fresh_prefix();
    r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let prefix = prefix.clone();
            async move {
                Arc::new(connect(&prefix, None, Some(Duration::from_secs(1))).await)
                    as Arc<dyn Store>
            }
        },
        |store| store.session().unwrap().abandon(),
        Duration::from_secs(20),
    )
    .await;
}

/// An operator revokes a session's etcd lease: its holder is told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_by_another_tells_its_holder_why() {
    let prefix = TestCluster::fresh_prefix();
    let ended = prefix.clone();
    r17_a_session_ended_by_another_tells_its_holder_why(
        || {
            let prefix = prefix.clone();
            async move {
                Arc::new(connect(&prefix, None, Some(Duration::from_secs(30))).await)
                    as Arc<dyn Store>
            }
        },
        move |id: SessionId| async move {
            let mut client = etcd_client::Client::connect(TestCluster::shared().endpoints(), None)
                .await
                .unwrap();
            let key = format!("{ended}/s/{}", id.as_uuid().simple());
            let found = client.get(key, None).await.unwrap();
            let lease = found.kvs().first().expect("the session's key").lease();
            client.lease_revoke(lease).await.unwrap();
        },
        true,
    )
    .await;
}

/// Machines whose clocks are 30 s ahead and 30 s behind: etcd's leases
/// decide, so neither takes the other's live lease, and a short lease is
/// freed by etcd (within its granularity) and then served to the other's
/// waiter, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_a_minute_apart_never_over_issue_or_take_a_live_lease() {
    const OFF: Duration = Duration::from_secs(30);
    let prefix = TestCluster::fresh_prefix();
    let ahead: Arc<dyn Clock> = Arc::new(OffsetClock::ahead(OFF));
    let behind: Arc<dyn Clock> = Arc::new(OffsetClock::behind(OFF));
    let fast = Arc::new(connect(&prefix, Some(ahead), None).await);
    let slow = Arc::new(connect(&prefix, Some(behind), None).await);
    let id = PoolId::from_name("one");
    let (on_fast, on_slow) = (Pool::new(fast, id), Pool::new(slow, id));
    on_fast.register(1).await.unwrap();
    let held = on_slow.try_borrow(Duration::from_secs(20)).await.unwrap();
    // For the fast machine that lease "expired" 40 s ago: it is live all
    // the same.
    assert!(matches!(
        on_fast.try_borrow(Duration::from_secs(20)).await,
        Err(Error::Exhausted { .. })
    ));
    drop(held);
    while on_fast.inspect().await.unwrap().in_use != 0 {
        tokio::task::yield_now().await;
    }
    let short = on_fast
        .try_borrow(Duration::from_millis(300))
        .await
        .unwrap()
        .forget();
    let next = on_slow
        .borrow(Duration::from_secs(20), Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(next.position, 0);
    assert!(next.token > short.token);
}

/// Limits name the etcd lease's granularity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_report_the_expiry_granularity() {
    let store = Arc::new(connect(&TestCluster::fresh_prefix(), None, None).await);
    let pool = Pool::new(store, PoolId::from_name("g"));
    assert_eq!(
        pool.limits().expiry_granularity,
        Some(Duration::from_secs(1))
    );
}

/// A queued head whose process died (it joined the queue and never
/// looked again) holds back no one past its place's life: its handle's
/// places lease is no longer kept and lapses within its 4 s TTL, and the
/// borrower behind it is served within a wait of 9 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_heads_place_lapses_with_its_life() {
    use semaphore_etcd::store::{BorrowRequest, TryBorrow};
    use semaphore_etcd::{LeaseId, WaiterId};
    let prefix = TestCluster::fresh_prefix();
    let (holder, dead, next) = (
        connect(&prefix, None, None).await,
        connect(&prefix, None, None).await,
        Arc::new(connect(&prefix, None, None).await),
    );
    let id = PoolId::from_name("dead head");
    let pool = Pool::new(Arc::new(holder), id);
    pool.register(1).await.unwrap();
    let held = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let mut request = BorrowRequest::new(id, LeaseId::new(), Duration::from_secs(60));
    request.waiter = Some(WaiterId::new());
    let refused = dead.try_borrow(&request).await.unwrap();
    assert!(
        matches!(refused, TryBorrow::Exhausted { .. }),
        "{refused:?}"
    );
    assert_eq!(
        next.inspect(id).await.unwrap().queued,
        1,
        "the head's place"
    );
    drop(dead);
    assert!(held.release().await.unwrap());
    let behind = Pool::new(next, id);
    let _served = behind
        .borrow(Duration::from_secs(60), Duration::from_secs(9))
        .await
        .expect("served once the dead head's place lapsed");
}

/// A live queued head keeps its place, and its turn, while nothing changes
/// for longer than its places lease's TTL (4 s) and a place's life after a
/// look (4.5 s): the handle keeps the lease alive; no look is needed. The
/// borrower who came after it, in another process, is not served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_heads_place_is_kept_without_a_look() {
    let prefix = TestCluster::fresh_prefix();
    let (holder, first, second) = (
        Arc::new(connect(&prefix, None, None).await),
        Arc::new(connect(&prefix, None, None).await),
        Arc::new(connect(&prefix, None, None).await),
    );
    let id = PoolId::from_name("kept place");
    let pool = Pool::new(holder.clone(), id);
    pool.register(1).await.unwrap();
    let held = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    // A borrow from `store`, waiting up to 30 s, on a task of its own.
    let wait_on = |store: Arc<EtcdStore>| {
        let pool = Pool::new(store, id);
        tokio::spawn(async move {
            pool.borrow_owned(Duration::from_secs(60), Duration::from_secs(30))
                .await
        })
    };
    let waiting = wait_on(first);
    let queued = async || holder.queue(id).await.unwrap();
    while queued().await.is_empty() {
        tokio::task::yield_now().await;
    }
    let place = queued().await[0];
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        queued().await,
        vec![place],
        "the head's place, as it joined"
    );
    let behind = wait_on(second);
    while queued().await.len() < 2 {
        tokio::task::yield_now().await;
    }
    assert!(held.release().await.unwrap());
    let granted = waiting
        .await
        .unwrap()
        .expect("the first head is served first");
    assert_eq!(queued().await.len(), 1, "the second still waits");
    assert!(granted.release().await.unwrap());
    let second = behind.await.unwrap().expect("then the second");
    assert!(second.release().await.unwrap());
}
