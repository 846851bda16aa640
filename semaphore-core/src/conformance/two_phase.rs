//! Cases for two-phase borrows ([`Pool::enqueue`](crate::Pool::enqueue)):
//! a queued borrow keeps its place between polls, first come first served
//! with plain borrowers (R11), and leaves nothing behind when dropped (R12).

use std::time::Duration;

use super::{Fixture, until_in_use, until_waiting};
use crate::{BorrowOptions, Enqueued, Error, QueuedBorrow};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

fn queued(answer: Enqueued) -> QueuedBorrow {
    match answer {
        Enqueued::Queued(queued) => queued,
        Enqueued::Granted(lease) => panic!("granted at once: {lease:?}"),
    }
}

/// A free slot is granted at once; on a full pool each enqueue gets the
/// next place, polls that time out (the clock moves past them) keep it,
/// and a plain borrower who came later is served after both.
pub async fn two_phase_borrowers_keep_their_places_between_polls(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let Enqueued::Granted(held) = pool.enqueue(TTL, BorrowOptions::new()).await.unwrap() else {
        panic!("a free slot is granted at once");
    };
    let mut first = queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    let mut second = queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    assert_eq!((first.place(), second.place()), (Some(1), Some(2)));
    // A poll that times out keeps the place.
    let poll = second.wait(Duration::from_secs(2));
    let (polled, ()) = tokio::join!(poll, async {
        tokio::task::yield_now().await;
        f.clock.advance(Duration::from_secs(3));
    });
    assert!(polled.unwrap().is_none(), "nothing was free");
    let later = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, LONG).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 3).await;
    assert_eq!((first.place(), second.place()), (Some(1), Some(2)));

    held.release().await.unwrap();
    let one = first.wait(LONG).await.unwrap().expect("the first place");
    assert_eq!(one.position, 0);
    assert_eq!(second.place(), Some(1), "moved up");
    one.release().await.unwrap();
    let two = second.wait(LONG).await.unwrap().expect("the second place");
    assert!(!later.is_finished(), "the later borrower waits behind both");
    two.release().await.unwrap();
    assert_eq!(later.await.unwrap().unwrap().position, 0);
    assert!(matches!(
        first.wait(LONG).await,
        Err(Error::InvalidArgument { field: "self", .. })
    ));
}

/// A queued borrow dropped while waiting lets the next move up; one
/// dropped after it was granted, with nobody collecting the lease, returns
/// the slot: nothing stays granted to nobody (R12).
pub async fn two_phase_borrow_dropped_queued_or_granted_holds_nothing(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let gone = queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    let next = queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    gone.cancel().await.unwrap();
    assert_eq!(pool.waiting(), 1, "a cancel has left when it returns");
    assert_eq!(next.place(), Some(1));
    assert!(pool.return_lease(held.id).await.unwrap());
    // Granted to `next`'s task; dropped uncollected.
    while next.place().is_some() {
        tokio::task::yield_now().await;
    }
    drop(next);
    until_in_use(&pool, 0).await;
    // A store that keeps places forgets the dropped borrow's place on a
    // task of its own (its attempt may still have been in flight): a
    // borrow that waits is served once it has, and never if the slot
    // stayed granted to nobody.
    let _free = pool.borrow(TTL, LONG).await.expect("the slot came back");
}

/// A poll dropped midway keeps the place (the wait is cancel safe), and a
/// deleted pool ends a queued borrow with `PoolNotFound`.
pub async fn two_phase_wait_is_cancel_safe_and_reports_a_deleted_pool(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let mut queued = queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    {
        let poll = queued.wait(LONG);
        tokio::pin!(poll);
        assert!(futures_poll_once(poll.as_mut()).await.is_none());
    }
    assert_eq!(queued.place(), Some(1), "a dropped poll keeps the place");
    assert!(pool.return_lease(held.id).await.unwrap());
    let lease = queued.wait(LONG).await.unwrap().expect("granted");
    lease.release().await.unwrap();

    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let mut doomed = self::queued(pool.enqueue(TTL, BorrowOptions::new()).await.unwrap());
    assert!(pool.delete().await.unwrap());
    match doomed.wait(LONG).await {
        Err(Error::PoolNotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
    let _ = held;
}

/// Polls `future` once: its output if it was ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
        std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}
