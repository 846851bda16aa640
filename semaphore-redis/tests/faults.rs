//! Faults on a real server, each on a throwaway server of its own each
//! all or nothing): the subscriber's connection killed, a stalled server, a restart
//! that lost everything, and the server out of memory.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use semaphore_redis::testing::TestServer;
use semaphore_redis::{Error, Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(30);

async fn store(server: &TestServer, options: RedisOptions) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect_with(server.url(), options)
            .await
            .expect("a store on the throwaway server"),
    )
}

fn no_grace() -> RedisOptions {
    RedisOptions::default().restart_grace(Duration::ZERO)
}

fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Storage {
            retryable: true,
            ..
        }
    )
}

/// Retries `call` while it fails retryably (the server is coming back).
async fn retry<T, F: std::future::Future<Output = Result<T, Error>>>(
    mut call: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) if retryable(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// The subscriber's connection killed (`CLIENT KILL TYPE pubsub`): it
/// reconnects, and a waiter in one process is still served when another
/// process returns the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscriber_reconnects_and_waiters_are_still_woken() {
    let server = TestServer::start().unwrap();
    let (a, b) = (
        store(&server, no_grace()).await,
        store(&server, no_grace()).await,
    );
    let id = PoolId::from_name("one");
    let (on_a, on_b) = (Pool::new(a, id), Pool::new(b, id));
    on_a.register(1).await.unwrap();
    let held = on_b.try_borrow(TTL).await.unwrap();
    let waiter = tokio::spawn(async move {
        on_a.borrow(TTL, Duration::from_secs(20))
            .await
            .map(|g| g.forget())
    });
    let killed = server.command("CLIENT KILL TYPE pubsub");
    assert!(killed.starts_with(':'), "{killed}");
    assert!(held.release().await.unwrap());
    let lease = waiter.await.unwrap().expect("the waiter is served");
    assert_eq!(lease.position, 0);
}

/// Every connection of the store killed (`CLIENT KILL TYPE normal`) while
/// it holds a lease: its next call (the release) reconnects and is made
/// again instead of failing with a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_killed_connection_is_made_again_on_a_new_one() {
    let server = TestServer::start().unwrap();
    let pool = Pool::new(store(&server, no_grace()).await, PoolId::from_name("k"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    let killed = server.command("CLIENT KILL TYPE normal");
    assert!(killed.starts_with(':'), "{killed}");
    assert!(held.release().await.unwrap());
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
}

/// A stalled server (`CLIENT PAUSE`): calls fail with a retryable error
/// after the response timeout, never a hang and never `Exhausted`; a
/// borrow that timed out but ran once the pause ended holds nothing; then
/// the store works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_is_a_retryable_error_and_a_late_grant_is_returned() {
    let server = TestServer::start().unwrap();
    let options = no_grace().response_timeout(Duration::from_millis(300));
    let pool = Pool::new(store(&server, options).await, PoolId::from_name("one"));
    pool.register(1).await.unwrap();
    let paused = server.command("CLIENT PAUSE 1500 ALL");
    assert!(paused.starts_with("+OK"), "{paused}");
    match pool.borrow(TTL, Duration::ZERO).await {
        Err(e) if retryable(&e) => {}
        other => panic!("a stalled server gave {other:?}"),
    }
    // Once the server answers, the late grant has been given back.
    let lease = retry(|| pool.try_borrow(TTL)).await;
    assert_eq!(lease.position, 0);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
}

/// A restart that lost everything (the server keeps nothing on disk),
/// with leases held: the pool, registered again, grants nothing while
/// those leases may still be live (the restart grace), and every later
/// token is larger than every token before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_lost_everything_neither_over_issues_nor_moves_tokens_back() {
    let server = TestServer::start().unwrap();
    let grace = Duration::from_secs(2);
    // The grace is at least the session timeout: a short one; the leases'
    // ttl is the grace (no longer is granted).
    let options = RedisOptions::default()
        .restart_grace(grace)
        .session_timeout(Duration::from_secs(1));
    let store = store(&server, options).await;
    let pool = Pool::new(store, PoolId::from_name("two"));
    // The server is younger than the grace: wait it out once, to hold leases.
    let held: Vec<_> = {
        pool.register(2).await.unwrap();
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(
                pool.borrow(grace, Duration::from_secs(10))
                    .await
                    .unwrap()
                    .forget(),
            );
        }
        held
    };
    server.restart();
    let restarted = SystemTime::now();
    // The keys are gone: the pool must be registered again...
    retry(|| async {
        match pool.inspect().await {
            Err(Error::PoolNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(state) => panic!("the restarted server kept {state:?}"),
        }
    })
    .await;
    retry(|| pool.register(2)).await;
    // ...and grants nothing while the leases held before may be live.
    match pool.try_borrow(grace).await {
        Err(Error::Exhausted { .. }) => {}
        other => panic!("granted during the restart grace: {other:?}"),
    }
    let lease = pool.borrow(grace, Duration::from_secs(10)).await.unwrap();
    let granted_at = lease.expires_at - grace;
    assert!(
        granted_at >= restarted + grace - Duration::from_secs(1),
        "granted {:?} after the restart, within the grace",
        granted_at.duration_since(restarted)
    );
    assert!(
        held.iter().all(|h| lease.token > h.token),
        "a token moved back"
    );
}

/// The server out of memory (`maxmemory` reached): a borrow fails with a
/// non-retryable error that says so and writes nothing; a return still
/// works, and borrows work again once memory is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxmemory_reached_is_a_clear_error_and_nothing_is_half_written() {
    let server = TestServer::start().unwrap();
    let pool = Pool::new(store(&server, no_grace()).await, PoolId::from_name("three"));
    pool.register(3).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    assert!(server.command("CONFIG SET maxmemory 1").starts_with("+OK"));
    match pool.try_borrow(TTL).await {
        Err(
            e @ Error::Storage {
                retryable: false, ..
            },
        ) => {
            assert!(
                e.to_string().contains("maxmemory") || format!("{e:?}").contains("maxmemory"),
                "{e:?}"
            );
        }
        other => panic!("out of memory gave {other:?}"),
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 1, "half written");
    assert!(
        held.release().await.unwrap(),
        "a return must work out of memory"
    );
    assert!(server.command("CONFIG SET maxmemory 0").starts_with("+OK"));
    assert_eq!(pool.try_borrow(TTL).await.unwrap().position, 0);
}

/// Labels the scripts must carry as they are: quotes, separators, the
/// label encoding's own marks, and text beyond ASCII; and a grace as long
/// as a `Duration` can be, which must not overflow the server's arithmetic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_labels_and_an_endless_grace_are_carried_exactly() {
    let server = TestServer::start().unwrap();
    let pool = Pool::new(
        store(&server, no_grace()).await,
        PoolId::from_name("labels"),
    );
    pool.register(4).await.unwrap();
    let labels = ["-", "+", "\"quoted\" | {json}", "ünïcode ✓"];
    for label in labels {
        let options = semaphore_redis::BorrowOptions::new()
            .owner(label)
            .key(label);
        pool.borrow_with(TTL, Duration::ZERO, options)
            .await
            .unwrap()
            .forget();
    }
    let holders = pool.holders().await.unwrap();
    let owners: Vec<_> = holders
        .iter()
        .map(|h| h.owner.as_deref().unwrap())
        .collect();
    let keys: Vec<_> = holders.iter().map(|h| h.key.as_deref().unwrap()).collect();
    assert_eq!(owners, labels);
    assert_eq!(keys, labels);

    let endless = store(
        &server,
        RedisOptions::default().restart_grace(Duration::MAX),
    )
    .await;
    let young = Pool::new(endless, PoolId::from_name("young"));
    young.register(1).await.unwrap();
    match young.try_borrow(TTL).await {
        Err(Error::Exhausted { .. }) => {}
        other => panic!("a young server granted within its grace: {other:?}"),
    }
}

/// A ttl longer than the restart grace is clamped to it, as any
/// ttl above `max_ttl` is (a store's own limits are limits): such a lease
/// could outlive a restart's grace and its slot go to a second holder
/// (rule "Restart grace"). The pool reports the grace as its `max_ttl`, and
/// the lease's expiry says what was granted; renewals likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_longer_than_the_restart_grace_is_clamped_to_it() {
    let server = TestServer::start().unwrap();
    let grace = Duration::from_secs(1);
    let options = RedisOptions::default()
        .restart_grace(grace)
        .session_timeout(grace);
    let pool = Pool::new(store(&server, options).await, PoolId::from_name("grace"));
    assert_eq!(pool.limits().max_ttl, grace);
    pool.register(1).await.unwrap();
    // The young server's own grace passes first (at most 1 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lease = loop {
        match pool.try_borrow(Duration::from_secs(300)).await {
            Ok(lease) => break lease,
            Err(Error::Exhausted { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("a ttl over the grace was not granted: {other:?}"),
        }
    };
    let within = |expires_at: SystemTime| {
        expires_at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
            <= grace + Duration::from_millis(500)
    };
    assert!(within(lease.expires_at), "granted {:?}", lease.expires_at);
    lease.renew(Duration::from_secs(300)).await.unwrap();
    assert!(within(lease.expires_at), "renewed {:?}", lease.expires_at);
}

/// A server that may evict the store's keys (a memory limit and any policy
/// but `noeviction`) is refused at connect, naming `url`, unless the caller
/// opts in: any `maxmemory-policy` but
/// `noeviction` may free a live lease's slot, and the `volatile-*` ones
/// evict exactly the session keys, the only keys with a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_the_keys_is_refused_unless_allowed() {
    let server = TestServer::start().unwrap();
    // Without a memory limit nothing is evicted, whatever the policy.
    assert!(
        server
            .command("CONFIG SET maxmemory-policy volatile-lru")
            .starts_with("+OK")
    );
    store(&server, no_grace()).await;
    assert!(
        server
            .command("CONFIG SET maxmemory 1gb")
            .starts_with("+OK")
    );
    for policy in ["volatile-lru", "allkeys-lru", "volatile-ttl"] {
        let set = format!("CONFIG SET maxmemory-policy {policy}");
        assert!(server.command(&set).starts_with("+OK"));
        match RedisStore::connect_with(server.url(), no_grace()).await {
            Err(Error::InvalidArgument {
                field: "url", got, ..
            }) => assert!(got.contains(policy), "{got}"),
            other => panic!("{policy} was not refused: {other:?}"),
        }
        let allowed = store(&server, no_grace().allow_eviction(true)).await;
        let pool = Pool::new(allowed, PoolId::from_name("evictable"));
        pool.register(1).await.unwrap();
    }
    assert!(
        server
            .command("CONFIG SET maxmemory-policy noeviction")
            .starts_with("+OK")
    );
    store(&server, no_grace()).await;
}
