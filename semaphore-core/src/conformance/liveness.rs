//! Owner liveness (R16), for stores shared by processes: a case that needs
//! two handles on one backend, so not in
//! [`store_conformance!`](crate::store_conformance); each such store runs it
//! with its own way to open a handle.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::store::Store;
use crate::{BorrowOptions, Error, Pool, PoolId};

const TTL: Duration = Duration::from_secs(3600);

/// R16: a bound lease (the default) frees as soon as its holder, a store
/// handle, is gone, long before its ttl, and the slot goes to the next
/// borrower; an unbound lease of the same holder stays until its ttl; and
/// while the holder lives, nobody takes its leases. `open` opens a new
/// handle on the backend under test (all on one store: one file, one
/// database schema, one key prefix); dropping the first handle must end
/// its holder (close its lock file, its session, its connection). A store
/// that learns of the holder's end only by a poll is waited for, bounded
/// by `patience`: a hang is a failure, not a timing claim.
pub async fn r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay<F, Fut>(
    open: F,
    patience: Duration,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let id = PoolId::from_name("liveness");
    let (first, second) = (open().await, open().await);
    let holder = Pool::new(first, id);
    let other = Pool::new(second, id);
    holder.register(3).await.unwrap();
    let bound = holder.try_borrow(TTL).await.unwrap().forget();
    let unbound = holder
        .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().bound(false))
        .await
        .unwrap()
        .forget();
    assert_eq!((bound.position, unbound.position), (0, 1));

    // A live holder keeps its leases, however often others look.
    let third = other.try_borrow(TTL).await.unwrap().forget();
    for _ in 0..3 {
        assert!(matches!(
            other.try_borrow(TTL).await,
            Err(Error::Exhausted { .. })
        ));
    }
    assert_eq!(other.inspect().await.unwrap().in_use, 3);
    assert!(other.return_lease(third.id).await.unwrap());

    drop(holder);
    let freed = tokio::time::timeout(patience, async {
        loop {
            match other.borrow_n(2, TTL, Duration::ZERO).await {
                Ok(lease) => return lease.forget(),
                Err(Error::Exhausted { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the gone holder's bound lease never freed");
    assert_eq!(
        &freed.positions[..],
        &[0, 2],
        "the bound lease's slot came back"
    );
    let state = other.inspect().await.unwrap();
    assert_eq!(state.in_use, 3, "the unbound lease stays until its ttl");
    let listed = other.holders().await.unwrap();
    assert!(listed.iter().any(|h| h.lease.id == unbound.id));
    assert!(listed.iter().all(|h| h.lease.id != bound.id));
}
