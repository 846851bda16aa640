//! The etcd store's own edges, each found by a hostile reading of its
//! first version: a retry whose lease is no longer active, a keyed answer
//! across machines whose clocks disagree, etcd's limit of 128 operations
//! a transaction, a slot freed between the look that refused a borrow and
//! the write that queues it.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::conformance::OffsetClock;
use semaphore_etcd::store::{BorrowRequest, Store, TryBorrow, stored_key};
use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{Clock, EtcdOptions, EtcdStore, LeaseId, ManualClock, PoolId};

async fn connect(options: EtcdOptions) -> EtcdStore {
    EtcdStore::connect_with(TestCluster::shared().endpoints(), options)
        .await
        .expect("an etcd store on the test cluster")
}

/// A retry under the same lease id after that lease
/// expired (not yet swept) puts and deletes the same key in one txn; etcd
/// would refuse it ("duplicate key given in txn request"): the old key goes
/// first, and the retry is granted anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_of_an_expired_lease_id_is_granted_not_refused_by_etcd() {
    let clock = Arc::new(ManualClock::new());
    let store = connect(
        EtcdOptions::default()
            .prefix(TestCluster::fresh_prefix())
            .manual_clock(clock.clone()),
    )
    .await;
    let pool = PoolId::from_name("dup");
    store.register(pool, 1).await.unwrap();
    let mut request = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(1));
    request.bound = false;
    assert!(matches!(
        store.try_borrow(&request).await.unwrap(),
        TryBorrow::Granted { .. }
    ));
    // Its answer was "lost"; by the retry the lease has expired.
    clock.advance(Duration::from_secs(2));
    request.retried = true;
    let again = store.try_borrow(&request).await;
    assert!(
        matches!(again, Ok(TryBorrow::Granted { .. })),
        "retry under the same lease id: {again:?}"
    );
}

/// A bound lease whose session an operator ended; the
/// retry of its borrow under the same lease id, on the new session, hits
/// the same put+delete conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_the_session_ended_is_granted_not_refused_by_etcd() {
    let prefix = TestCluster::fresh_prefix();
    let store = connect(
        EtcdOptions::default()
            .prefix(prefix.clone())
            .session_timeout(Duration::from_secs(30)),
    )
    .await;
    let pool = PoolId::from_name("dup-bound");
    store.register(pool, 1).await.unwrap();
    let first = store.session().unwrap().current().expect("an open session");
    let mut request = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
    request.session = Some(first);
    assert!(matches!(
        store.try_borrow(&request).await.unwrap(),
        TryBorrow::Granted { .. }
    ));
    // An operator revokes the session's etcd lease.
    let mut client = etcd_client::Client::connect(TestCluster::shared().endpoints(), None)
        .await
        .unwrap();
    let key = format!("{prefix}/s/{}", first.as_uuid().simple());
    let found = client.get(key, None).await.unwrap();
    let lease = found.kvs().first().expect("the session's key").lease();
    client.lease_revoke(lease).await.unwrap();
    // The store opens another session.
    let second = loop {
        match store.session().unwrap().current() {
            Some(id) if id != first => break id,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    request.session = Some(second);
    request.retried = true;
    let again = store.try_borrow(&request).await;
    assert!(
        matches!(again, Ok(TryBorrow::Granted { .. })),
        "retry under the same lease id on the new session: {again:?}"
    );
}

/// R17: a keyed borrow answered with a lease another machine
/// granted carries that machine's local-clock expiry. A holder whose clock
/// is 60 s behind believes it holds for a minute after etcd deleted the
/// key and another borrower was granted the slot, unless the answer's
/// expiry is counted from etcd's own lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_answer_from_a_skewed_machine_is_not_held_past_etcds_expiry() {
    const OFF: Duration = Duration::from_secs(30);
    let prefix = TestCluster::fresh_prefix();
    let ahead: Arc<dyn Clock> = Arc::new(OffsetClock::ahead(OFF));
    let behind: Arc<dyn Clock> = Arc::new(OffsetClock::behind(OFF));
    let fast = connect(EtcdOptions::default().prefix(prefix.clone()).clock(ahead)).await;
    let slow = connect(EtcdOptions::default().prefix(prefix.clone()).clock(behind)).await;
    let third = connect(EtcdOptions::default().prefix(prefix)).await;
    let pool = PoolId::from_name("keyed");
    fast.register(pool, 1).await.unwrap();
    let keyed = |lease: LeaseId| {
        let mut r = BorrowRequest::new(pool, lease, Duration::from_secs(2));
        r.bound = false;
        r.key = Some(stored_key("job-42", None));
        r
    };
    let TryBorrow::Granted { lease: on_fast } =
        fast.try_borrow(&keyed(LeaseId::new())).await.unwrap()
    else {
        panic!("fast was refused")
    };
    // The same request retried through another machine (an HTTP retry
    // that a load balancer sent elsewhere): the keyed lease is answered.
    let TryBorrow::Granted { lease: on_slow } =
        slow.try_borrow(&keyed(LeaseId::new())).await.unwrap()
    else {
        panic!("slow was refused")
    };
    assert_eq!(on_slow.id, on_fast.id);
    // etcd ends the lease (2 s, its minimum TTL): a third machine gets the slot.
    let taken = loop {
        let mut r = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
        r.bound = false;
        if let TryBorrow::Granted { lease } = third.try_borrow(&r).await.unwrap() {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(taken.position, on_slow.position);
    // What `LeaseGuard::is_held` on the slow machine compares.
    let left = on_slow
        .expires_at
        .duration_since(slow.clock().now())
        .unwrap_or_default();
    assert!(
        left.is_zero(),
        "the slow machine still believes it holds position {} for {left:?} while \
         another holds it",
        on_slow.position
    );
}

/// etcd refuses a transaction of more than 128 operations (its
/// default `--max-txn-ops`). A look reads 3 ranges per pool, so a page of
/// `pools` over more than 42 pools would fail (MAX_PAGE is 1000): a page
/// reads ranges instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_fifty_pools_is_listed() {
    let store = connect(EtcdOptions::default().prefix(TestCluster::fresh_prefix())).await;
    for i in 0..50 {
        store
            .register(PoolId::from_name(&format!("p{i}")), 1)
            .await
            .unwrap();
    }
    let page = store.pools(None, 50).await;
    assert!(
        matches!(&page, Ok(states) if states.len() == 50),
        "a page of 50 pools: {page:?}"
    );
}

/// A grant's transaction also deletes every lease the look found
/// inactive. After a process holding 130 bound leases of a pool dies (here:
/// its session's etcd lease is revoked), every grant on that pool carries
/// 130+ deletes, which etcd would refuse until those leases' own etcd
/// leases lapse (their ttl, up to a day): the sweep takes some at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_stays_usable_after_a_holder_of_many_bound_leases_dies() {
    let prefix = TestCluster::fresh_prefix();
    let dying = connect(
        EtcdOptions::default()
            .prefix(prefix.clone())
            .session_timeout(Duration::from_secs(30)),
    )
    .await;
    let other = connect(EtcdOptions::default().prefix(prefix.clone())).await;
    let pool = PoolId::from_name("big");
    dying.register(pool, 200).await.unwrap();
    let session = dying.session().unwrap().current().expect("an open session");
    for _ in 0..130 {
        let mut r = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(3600));
        r.session = Some(session);
        assert!(matches!(
            dying.try_borrow(&r).await.unwrap(),
            TryBorrow::Granted { .. }
        ));
    }
    let mut client = etcd_client::Client::connect(TestCluster::shared().endpoints(), None)
        .await
        .unwrap();
    let key = format!("{prefix}/s/{}", session.as_uuid().simple());
    let found = client.get(key, None).await.unwrap();
    let lease = found.kvs().first().expect("the session's key").lease();
    client.lease_revoke(lease).await.unwrap();
    drop(dying);
    let mut r = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
    r.bound = false;
    let got = other.try_borrow(&r).await;
    assert!(
        matches!(got, Ok(TryBorrow::Granted { .. })),
        "a borrow of a pool whose dead holder left 130 leases: {got:?}"
    );
}

/// A borrow's first attempt is refused; a slot frees; the attempt that
/// queues it writes its place on the refusing look (no look of its own),
/// and the pools it reads back with that write show the slot free: it is
/// granted then, not left queued for a wake that came before it queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_freed_before_a_borrow_queues_is_granted_to_it() {
    let prefix = TestCluster::fresh_prefix();
    let (store, other) = (
        connect(EtcdOptions::default().prefix(&prefix)).await,
        connect(EtcdOptions::default().prefix(&prefix)).await,
    );
    let pool = PoolId::from_name("freed before queueing");
    store.register(pool, 1).await.unwrap();
    let held = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
    let Ok(TryBorrow::Granted { lease }) = other.try_borrow(&held).await else {
        panic!("the pool is free");
    };
    let mut request = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
    assert!(matches!(
        store.try_borrow(&request).await.unwrap(),
        TryBorrow::Exhausted { .. }
    ));
    assert!(other.return_held(lease).await.unwrap());
    request.waiter = Some(semaphore_etcd::WaiterId::new());
    let queued = store.try_borrow(&request).await.unwrap();
    assert!(matches!(queued, TryBorrow::Granted { .. }), "{queued:?}");
    assert!(store.queue(pool).await.unwrap().is_empty(), "no place left");
}
