//! A return hands its slot to the first head of the pool's shared queue in
//! its own script, and a head that does not take it lets it go.
//! Two store handles on one prefix play two processes; the
//! calls are the store's own, so that nothing but the return can grant.

mod common;

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::store::{BorrowRequest, Store, TryBorrow, WaiterId};
use semaphore_redis::testing::TestServer;
use semaphore_redis::{LeaseId, ManualClock, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(30);

async fn store(prefix: &str, clock: &Arc<ManualClock>) -> RedisStore {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::ZERO)
        .manual_clock(clock.clone());
    RedisStore::connect_with(TestServer::shared().url(), options)
        .await
        .expect("a Redis store on the test server")
}

/// Two handles on one fresh prefix and clock, and a registered pool of 1
/// whose slot the first holds: the lease.
async fn held_pool() -> (RedisStore, RedisStore, PoolId, LeaseId, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let prefix = TestServer::fresh_prefix();
    let (a, b) = (store(&prefix, &clock).await, store(&prefix, &clock).await);
    let pool = PoolId::random();
    a.register(pool, 1).await.unwrap();
    let lease = LeaseId::new();
    let granted = a.try_borrow(&BorrowRequest::new(pool, lease, TTL)).await;
    assert!(
        matches!(granted, Ok(TryBorrow::Granted { .. })),
        "{granted:?}"
    );
    (a, b, pool, lease, clock)
}

/// A refused attempt of head `waiter` on `store`, which queues it.
async fn queue(store: &RedisStore, pool: PoolId, waiter: WaiterId) -> LeaseId {
    let lease = LeaseId::new();
    let mut request = BorrowRequest::new(pool, lease, TTL);
    request.waiter = Some(waiter);
    let answer = store.try_borrow(&request).await;
    assert!(
        matches!(answer, Ok(TryBorrow::Exhausted { .. })),
        "{answer:?}"
    );
    lease
}

/// The head's next look, under a lease id of its own.
async fn look(store: &RedisStore, pool: PoolId, waiter: WaiterId) -> TryBorrow {
    let mut request = BorrowRequest::new(pool, LeaseId::new(), TTL);
    request.waiter = Some(waiter);
    store.try_borrow(&request).await.unwrap()
}

#[tokio::test]
async fn a_return_grants_the_first_head_the_lease_it_queued_for() {
    let (a, b, pool, lease, _clock) = held_pool().await;
    let (first, second) = (WaiterId::new(), WaiterId::new());
    let queued_with = queue(&b, pool, first).await;
    queue(&a, pool, second).await;

    assert!(a.return_lease(pool, lease).await.unwrap());
    // Granted by the return itself, before the head looks.
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 1);
    let TryBorrow::Granted { lease: handed } = look(&b, pool, first).await else {
        panic!("the first head was not handed the slot");
    };
    assert_eq!(handed.id, queued_with);
    assert_eq!(handed.position, 0);
    // A look again (its answer lost) finds the same lease; the second head
    // is still queued, and refused.
    let TryBorrow::Granted { lease: again } = look(&b, pool, first).await else {
        panic!("a second look lost the handed lease");
    };
    assert_eq!(again.id, queued_with);
    assert!(matches!(
        look(&a, pool, second).await,
        TryBorrow::Exhausted { .. }
    ));
    // Its return hands the slot on to the second head.
    assert!(b.return_lease(pool, queued_with).await.unwrap());
    assert!(matches!(
        look(&a, pool, second).await,
        TryBorrow::Granted { .. }
    ));
}

#[tokio::test]
async fn a_head_that_leaves_frees_the_slot_handed_to_it() {
    let (a, b, pool, lease, _clock) = held_pool().await;
    let head = WaiterId::new();
    queue(&b, pool, head).await;
    assert!(a.return_lease(pool, lease).await.unwrap());
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 1);

    b.leave_queue(pool, head).await.unwrap();
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 0);
    let granted = a
        .try_borrow(&BorrowRequest::new(pool, LeaseId::new(), TTL))
        .await;
    assert!(
        matches!(granted, Ok(TryBorrow::Granted { .. })),
        "{granted:?}"
    );
}

/// The core leaves the queue only for a borrow that was not granted: one
/// dropped while the look that took its slot was answering.
#[tokio::test]
async fn a_head_dropped_as_it_took_its_slot_frees_it() {
    let (a, b, pool, lease, _clock) = held_pool().await;
    let head = WaiterId::new();
    queue(&b, pool, head).await;
    assert!(a.return_lease(pool, lease).await.unwrap());
    assert!(matches!(
        look(&b, pool, head).await,
        TryBorrow::Granted { .. }
    ));

    b.leave_queue(pool, head).await.unwrap();
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 0);
}

#[tokio::test]
async fn a_slot_handed_to_a_gone_head_is_freed_by_the_next_refused_borrow() {
    let (a, b, pool, lease, clock) = held_pool().await;
    let head = WaiterId::new();
    queue(&b, pool, head).await;
    assert!(a.return_lease(pool, lease).await.unwrap());
    // The head's process is gone: its link closed (as the kernel closes a
    // killed process's sockets).
    let key = format!("{}:{{{}}}:pool", b.prefix(), pool.as_uuid());
    let mut raw = a.connection().clone();
    let link: i64 = semaphore_redis::redis::cmd("HGET")
        .arg(&key)
        .arg(format!("c:{}", head.as_uuid()))
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = semaphore_redis::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(link)
        .query_async(&mut raw)
        .await
        .unwrap();

    // Soon after the hand-off, the slot is the head's.
    let borrow = BorrowRequest::new(pool, LeaseId::new(), TTL);
    let early = a.try_borrow(&borrow).await.unwrap();
    assert!(matches!(early, TryBorrow::Exhausted { .. }), "{early:?}");
    // Untaken for longer, the head is asked after, found gone, and its slot
    // freed for the borrow.
    clock.advance(Duration::from_millis(250));
    let late = a
        .try_borrow(&BorrowRequest::new(pool, LeaseId::new(), TTL))
        .await;
    assert!(matches!(late, Ok(TryBorrow::Granted { .. })), "{late:?}");
}

#[tokio::test]
async fn a_head_for_several_slots_is_woken_not_handed() {
    let (a, b, pool, lease, _clock) = held_pool().await;
    a.register(pool, 2).await.unwrap();
    let other = LeaseId::new();
    let granted = a.try_borrow(&BorrowRequest::new(pool, other, TTL)).await;
    assert!(
        matches!(granted, Ok(TryBorrow::Granted { .. })),
        "{granted:?}"
    );
    let head = WaiterId::new();
    let mut request = BorrowRequest::new(pool, LeaseId::new(), TTL);
    request.waiter = Some(head);
    request.slots = 2;
    let answer = b.try_borrow(&request).await;
    assert!(
        matches!(answer, Ok(TryBorrow::Exhausted { .. })),
        "{answer:?}"
    );

    assert!(a.return_lease(pool, lease).await.unwrap());
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 1);
}

/// A head that looks after its handed lease's ttl has run (its notice
/// lost: the fallback poll looks later) keeps its place ahead of those
/// queued after it: the untaken lease's end queues it again at its
/// old ticket, and the next return hands it the slot. A lease it takes has
/// its ttl from the look that took it.
#[tokio::test]
async fn a_head_that_looks_late_keeps_its_place() {
    let (a, b, pool, lease, clock) = held_pool().await;
    let (first, second) = (WaiterId::new(), WaiterId::new());
    let short = Duration::from_millis(500);
    let mut request = BorrowRequest::new(pool, LeaseId::new(), short);
    request.waiter = Some(first);
    assert!(matches!(
        b.try_borrow(&request).await,
        Ok(TryBorrow::Exhausted { .. })
    ));
    queue(&a, pool, second).await;
    assert!(a.return_lease(pool, lease).await.unwrap());

    clock.advance(Duration::from_millis(600));
    // The second head looks first: the first is still ahead of it.
    assert!(matches!(
        look(&a, pool, second).await,
        TryBorrow::Exhausted { .. }
    ));
    let mut late = BorrowRequest::new(pool, LeaseId::new(), short);
    late.waiter = Some(first);
    let TryBorrow::Granted { lease: taken } = b.try_borrow(&late).await.unwrap() else {
        panic!("the first head lost its turn");
    };
    // Its ttl runs from the look that took it.
    let now = semaphore_redis::Clock::now(&*clock);
    let least = now + short - Duration::from_millis(1);
    assert!(
        taken.expires_at >= least,
        "{:?} < {least:?}",
        taken.expires_at
    );
}

/// The head is told on its own store's channel, not on the one every
/// store listens to: a hand-off wakes one process, not all of them.
#[tokio::test]
async fn a_hand_off_is_told_on_the_head_s_own_channel_alone() {
    use futures_util::StreamExt;
    use semaphore_redis::redis;

    let (a, b, pool, lease, _clock) = held_pool().await;
    let shared = format!("{}:wake", a.prefix());
    let client = redis::Client::open(TestServer::shared().url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe(format!("{shared}*")).await.unwrap();
    let head = WaiterId::new();
    queue(&b, pool, head).await;
    assert!(a.return_lease(pool, lease).await.unwrap());
    // A marker published after the return: every message of the return is
    // in before it.
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&shared)
        .arg("end")
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut told = Vec::new();
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let payload: String = message.get_payload().unwrap();
        if payload == "end" {
            break;
        }
        told.push((message.get_channel_name().to_string(), payload));
    }
    drop(messages);
    let handed: Vec<_> = told.iter().filter(|(_, p)| p.starts_with("g:")).collect();
    assert_eq!(handed.len(), 1, "{told:?}");
    let (channel, payload) = handed[0];
    assert!(
        payload.starts_with(&format!("g:{}:", head.as_uuid())),
        "{told:?}"
    );
    assert!(channel.starts_with(&format!("{shared}:")), "{told:?}");
    // A store listens there (the head's).
    let (_, listening): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(listening, 1);
    assert!(matches!(
        look(&b, pool, head).await,
        TryBorrow::Granted { .. }
    ));
}
