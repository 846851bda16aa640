//! Owner liveness, for stores shared by processes: a case that needs
//! two handles on one backend, so not in
//! [`store_conformance!`](crate::store_conformance); each such store runs it
//! with its own way to open a handle.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;
use crate::{error::Error, guard::LeaseGuard, id::PoolId, options::BorrowOptions, pool::Pool};

const TTL: Duration = Duration::from_secs(3600);

/// R16: a bound lease (the default) frees
/// once its holder ends, long before its ttl, and the slot goes to the next
/// borrower; an unbound lease and a forgotten one of the same holder stay
/// until their ttl; while the holder lives, nobody takes its leases; and a
/// holder whose store has sessions is told before anyone else is granted
/// its slot.
///
/// `open` opens a new handle on the backend under test (all on one store:
/// one file, one database schema, one key prefix). `crash` ends a handle's
/// holder as a process killed outright would, without dropping anything:
/// for SQLite it releases the handle's kernel lock; for a store with
/// sessions it stops the heartbeat ([`Session::abandon`](crate::Session::abandon)),
/// and the session ends at its timeout (give `open` a short one). A store
/// that learns of the end only by a poll is waited for, bounded by
/// `patience`: a hang is a failure, not a timing claim.
pub async fn r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay<F, Fut>(
    open: F,
    crash: impl FnOnce(&Arc<dyn Store>),
    patience: Duration,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let id = PoolId::from_name("liveness");
    let (first, second) = (open().await, open().await);
    let holder = Pool::new(first.clone(), id);
    let other = Pool::new(second, id);
    holder.register(4).await.unwrap();
    let bound = holder.try_borrow(TTL).await.unwrap();
    let unbound = holder
        .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().bound(false))
        .await
        .unwrap()
        .forget();
    let forgotten = holder.try_borrow(TTL).await.unwrap().forget();
    let unbind = holder.store().unbind(holder.id(), forgotten.id);
    assert!(unbind.await.unwrap(), "unbound twice");
    assert_eq!(
        (bound.position, unbound.position, forgotten.position),
        (0, 1, 2)
    );

    // A live holder keeps its leases, however often others look.
    let third = other.try_borrow(TTL).await.unwrap().forget();
    for _ in 0..3 {
        assert!(matches!(
            other.try_borrow(TTL).await,
            Err(Error::Exhausted { .. })
        ));
    }
    assert_eq!(other.inspect().await.unwrap().in_use, 4);
    assert!(other.return_lease(third.id).await.unwrap());
    assert!(bound.is_held());

    crash(&first);
    let freed = tokio::time::timeout(patience, async {
        loop {
            match other
                .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(2))
                .await
            {
                Ok(lease) => {
                    // Told before anyone else could take its slot.
                    let told = !bound.is_held() || first.session().is_none();
                    return (lease.forget(), told);
                }
                Err(Error::Exhausted { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the gone holder's bound lease never freed");
    assert!(freed.1, "the holder still believed it held its lease");
    assert_eq!(
        &freed.0.positions[..],
        &[0, 3],
        "the bound lease's slot came back"
    );
    let state = other.inspect().await.unwrap();
    assert_eq!(state.in_use, 4, "the unbound and forgotten leases stay");
    let listed = other.holders().await.unwrap();
    assert!(listed.iter().any(|h| h.lease.id == unbound.id));
    assert!(listed.iter().any(|h| h.lease.id == forgotten.id));
    assert!(listed.iter().all(|h| h.lease.id != bound.id));
    // The crashed holder's guard holds nothing; dropping it is harmless.
    drop(bound);
}

/// R17 and rule "A session ended by another": an operator (or a cleaning
/// job) deletes a live holder's session record, `end` doing it as such a
/// person would, on the store itself. The holder, which keeps its lease
/// alive, is told with [`Error::SessionEnded`] (not "could not be
/// reached"), `is_held()` turns `false`, and another borrower, waiting
/// meanwhile, is granted the slot. The sessions' timeout is 30 s, so a
/// heartbeat comes only every 10 s: a store that `pushes` ends through its
/// wake-up channel (PostgreSQL `NOTIFY`, Redis pub/sub) must tell the
/// holder within `5 s`, which a heartbeat could not; one that does not (MySQL)
/// is waited for its next heartbeat, 15 s at most. A hang is a failure,
/// not a timing claim.
pub async fn r17_a_session_ended_by_another_tells_its_holder_why<F, Fut, E, EFut>(
    open: F,
    end: E,
    pushes: bool,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
    E: FnOnce(crate::id::SessionId) -> EFut,
    EFut: Future<Output = ()>,
{
    let id = PoolId::from_name("ended-by-another");
    let (first, second) = (open().await, open().await);
    let holder = Pool::new(first.clone(), id);
    let other = Pool::new(second, id);
    holder.register(1).await.unwrap();
    let mut lease = holder.try_borrow(TTL).await.unwrap();
    lease.keep_alive();
    let session = lease.session.expect("a bound lease names its session");
    let waiter = tokio::spawn(async move {
        let lease = other.borrow(TTL, Duration::from_secs(60)).await;
        lease.map(LeaseGuard::forget)
    });
    end(session).await;
    let patience = Duration::from_secs(if pushes { 5 } else { 15 });
    let reason = tokio::time::timeout(patience, lease.lost())
        .await
        .expect("the holder was not told that the store ended its session");
    assert!(
        matches!(*reason, Error::SessionEnded { .. }),
        "the holder was told another reason: {reason}"
    );
    assert!(!lease.is_held());
    let granted = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter was never granted the ended session's slot")
        .unwrap()
        .unwrap();
    assert_eq!(granted.position, 0);
    assert!(first.session().unwrap().current() != Some(session));
}
