//! A handed slot is held on arrival (rule "A handed slot is held on
//! arrival"): the return that hands a slot to the head of another process
//! sends the lease in the message that wakes it, and the head holds it
//! before any call of its own reaches the server: the head's process
//! connects as a user whose right to call functions is taken away once it
//! is queued, so that no look or confirmation of its can land. Until its
//! confirmation lands, the holder's local deadline is the lease's liveness
//! bound.

use std::sync::Arc;
use std::time::Duration;

use semaphore_redis::redis;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{ManualClock, Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(30);

async fn store(url: &str, prefix: &str, clock: &Arc<ManualClock>) -> Arc<RedisStore> {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::ZERO)
        .manual_clock(clock.clone());
    let store = RedisStore::connect_with(url, options)
        .await
        .expect("a Redis store on the test server");
    Arc::new(store)
}

async fn raw(store: &RedisStore, args: &[&str]) -> redis::Value {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query_async(&mut store.connection().clone())
        .await
        .unwrap()
}

/// The stored record of lease `id` of `pool`: its JSON.
async fn record(store: &RedisStore, pool: PoolId, id: &str) -> String {
    let key = format!("{}:{{{}}}:leases", store.prefix(), pool.as_uuid());
    match raw(store, &["HGET", &key, id]).await {
        redis::Value::BulkString(json) => String::from_utf8(json).unwrap(),
        other => panic!("lease {id} has no record: {other:?}"),
    }
}

#[tokio::test]
async fn a_handed_slot_is_held_on_arrival_and_bounded_until_confirmed() {
    let clock = Arc::new(ManualClock::new());
    let prefix = TestServer::fresh_prefix();
    let url = TestServer::shared().url();
    let a = store(url, &prefix, &clock).await;
    // The head's process, as a user of its own.
    let user = format!("head-{}", PoolId::random().as_uuid().simple());
    raw(
        &a,
        &["ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all"],
    )
    .await;
    let as_user = if url.starts_with("redis+unix:") {
        format!("{url}?user={user}&pass=pw")
    } else {
        url.replacen("redis://", &format!("redis://{user}:pw@"), 1)
    };
    let b = store(&as_user, &prefix, &clock).await;
    let id = PoolId::random();
    let (here, there) = (Pool::new(a.clone(), id), Pool::new(b.clone(), id));
    here.register(1).await.unwrap();
    assert_eq!(
        here.limits().handed_bound,
        Some(Duration::from_millis(200)),
        "the bound the holder's deadline is, stated"
    );
    let held = here.borrow(TTL, Duration::ZERO).await.unwrap();
    let waiting =
        tokio::spawn(async move { there.borrow_owned(TTL, Duration::from_secs(600)).await });
    while a.queue_heads(id).await.unwrap() == 0 {
        tokio::task::yield_now().await;
    }

    // From here no call of the head's can change the server.
    raw(&a, &["ACL", "SETUSER", &user, "-fcall"]).await;
    assert!(held.release().await.unwrap());
    let guard = waiting.await.unwrap().expect("handed the slot");
    let stored = record(&a, id, &guard.id.to_string()).await;
    let taken = stored.contains("\"tk\"");
    let held_now = guard.is_held();
    // What a holder reads until the confirmation lands: the session
    // vouches no longer than the bound (200 ms after the hand-off).
    clock.advance(Duration::from_millis(250));
    let held_past_bound = guard.is_held();
    raw(&a, &["ACL", "SETUSER", &user, "+fcall"]).await;
    assert!(
        !taken,
        "the server recorded a take before the head held: {stored}"
    );
    assert!(held_now, "the head holds from the message's arrival");
    assert!(
        !held_past_bound,
        "an unconfirmed handed lease is held past its liveness bound"
    );

    // The confirmation lands once writes resume: the lease is taken.
    loop {
        if record(&a, id, &guard.id.to_string())
            .await
            .contains("\"tk\"")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        guard.release().await.unwrap(),
        "the handed lease was active"
    );
    raw(&a, &["ACL", "DELUSER", &user]).await;
}
