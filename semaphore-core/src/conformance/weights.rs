//! Cases for weighted borrows: several slots in one lease, with the
//! rules for positions, returns, order and cancellation as they read for
//! weights.

use std::sync::Arc;
use std::time::Duration;

use super::gate::{GatedStore, Stop};
use super::{Fixture, SEC, until_in_use, until_waiting};
use crate::{
    error::Error, error::Result, id::PoolId, lease::Lease, limits::Limits, options::BorrowOptions,
    pool::Pool, set::PoolSet,
};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

/// Spawns a borrower of `n` slots that waits up to `LONG` and keeps what
/// it gets.
fn spawn_borrow_n(pool: &Pool, n: u32) -> tokio::task::JoinHandle<Result<Lease>> {
    let pool = pool.clone();
    tokio::spawn(async move {
        pool.borrow_with(TTL, LONG, BorrowOptions::new().slots(n))
            .await
            .map(|g| g.forget())
    })
}

async fn take(pool: &Pool, n: u32) -> Lease {
    pool.borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(n))
        .await
        .unwrap_or_else(|e| panic!("borrow of {n}: {e}"))
        .forget()
}

/// R15: a borrow of `n` takes the `n` lowest free positions, gaps
/// first, as one lease with one id, token and expiry, and counts `n` in
/// `in_use`; a plain borrow after it takes the next lowest.
pub async fn r15_weighted_borrow_takes_the_n_lowest_free_as_one_lease(f: Fixture) {
    let pool = f.pool("p");
    pool.register(6).await.unwrap();
    let a = take(&pool, 1).await;
    let b = take(&pool, 1).await;
    assert_eq!((a.position, b.position), (0, 1));
    assert!(pool.return_lease(a.id).await.unwrap());
    let three = take(&pool, 3).await;
    assert_eq!(&three.positions[..], &[0, 2, 3], "the gap first, then up");
    assert_eq!(three.position, 0, "position is the lowest");
    assert_eq!(three.slots(), 3);
    assert!(three.token > b.token, "one token, above every earlier one");
    let state = pool.inspect().await.unwrap();
    assert_eq!(
        (state.in_use, state.available),
        (4, 2),
        "a lease of 3 counts 3"
    );
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders.len(), 2, "one holder per lease");
    assert_eq!(holders[0].lease, three);
    let single = take(&pool, 1).await;
    assert_eq!(single.position, 4);
    assert!(
        matches!(
            pool.borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(2))
                .await,
            Err(Error::Exhausted { .. })
        ),
        "1 free slot is not 2"
    );
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        5,
        "a refusal takes nothing"
    );
}

/// R15: returning, renewing, forcing or expiring a lease of `n`
/// acts on all `n` slots; forcing works from any of its positions.
pub async fn r15_weighted_lease_is_returned_renewed_forced_and_expired_whole(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let two = take(&pool, 2).await;
    assert!(pool.return_lease(two.id).await.unwrap());
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "returned whole");
    assert!(!pool.return_lease(two.id).await.unwrap());

    let two = take(&pool, 2).await;
    let renewed = pool.renew(&two, TTL * 2).await.unwrap();
    assert_eq!(
        (&renewed.positions, renewed.token),
        (&two.positions, two.token),
        "renew keeps positions and token"
    );
    assert_eq!(renewed.expires_at, two.expires_at + TTL);
    let forced = pool
        .force_return(1)
        .await
        .unwrap()
        .expect("position 1 is held");
    assert_eq!(forced.lease.id, two.id, "forced from its upper position");
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "forced whole");

    let three = pool
        .borrow_with(
            Duration::from_secs(5),
            Duration::ZERO,
            BorrowOptions::new().slots(3),
        )
        .await
        .unwrap()
        .forget();
    assert_eq!(&three.positions[..], &[0, 1, 2]);
    f.clock.advance(Duration::from_secs(5));
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "expired whole");
    assert_eq!(&take(&pool, 4).await.positions[..], &[0, 1, 2, 3]);
}

/// R15: 0 slots, or more than the largest allowed count, is an
/// invalid argument naming `slots`; nothing changes.
pub async fn r15_slots_zero_or_above_max_count_are_refused_and_nothing_changes(f: Fixture) {
    let pool = f.pool("p").with_limits(Limits::default().with_max_count(8));
    pool.register(8).await.unwrap();
    for n in [0, 9, u32::MAX] {
        match pool
            .borrow_with(TTL, LONG, BorrowOptions::new().slots(n))
            .await
        {
            Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "slots"),
            other => panic!("{n} slots: {other:?}"),
        }
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    assert_eq!(
        take(&pool, 8).await.slots(),
        8,
        "max_count itself is allowed"
    );
}

/// R15: a borrower of more slots than the count keeps its place
/// but holds back no one while the count is below its weight: later
/// borrowers of one are granted, the second even with no wait. Once the
/// count is raised to its weight it is served before later borrowers: a
/// slot that comes free is not given to the one queued after it.
pub async fn r15_more_slots_than_the_count_hold_back_no_one_until_a_raise(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let big = spawn_borrow_n(&pool, 3);
    until_waiting(&pool, 1).await;
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    // Granted within the wait: at once, or as soon as the weight-3 head
    // learns the count and steps aside.
    let first = pool.borrow(TTL, LONG).await.unwrap().forget();
    let second = take(&pool, 1).await;
    assert_eq!((first.position, second.position), (0, 1));
    let later = spawn_borrow_n(&pool, 1);
    until_waiting(&pool, 2).await;
    // Raised to its weight: it is owed the slots now, ahead of `later`.
    pool.register(3).await.unwrap();
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    assert!(pool.return_lease(first.id).await.unwrap());
    assert_eq!(
        pool.waiting().count,
        2,
        "the freed slot waits for the weight-3 borrower"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    assert!(pool.return_lease(second.id).await.unwrap());
    let big = big.await.unwrap().unwrap();
    assert_eq!(&big.positions[..], &[0, 1, 2]);
    assert!(pool.return_lease(big.id).await.unwrap());
    assert_eq!(later.await.unwrap().unwrap().position, 0);
}

/// R15: a count read that a raise overtakes does not set aside
/// again the waiter the raise let back. A borrower of 3 on a pool of 2
/// reads the count (2) after its refusal; the count is raised to 3 before
/// that read reaches it. Weighing with the stale 2 would set it aside, so
/// that it asks for nothing until the next change and those queued after it
/// overtake it; it must instead be served. A memory-store CI run caught the
/// overtaking this case forces.
pub async fn r15_a_count_read_before_a_raise_does_not_set_aside_again(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(2).await.unwrap();
    gated.arm(Stop::AfterInspect);
    let mut big = spawn_borrow_n(&pool, 3);
    // Refused, it reads the count: 2, held before it is weighed with.
    gated.caught().await;
    pool.register(3).await.unwrap();
    // A borrower set aside reads the count again on its next wake-up:
    // catching that read means the stale 2 set it aside.
    gated.arm(Stop::AfterInspect);
    gated.release();
    tokio::select! {
        biased;
        big = &mut big => {
            assert_eq!(&big.unwrap().unwrap().positions[..], &[0, 1, 2]);
        }
        () = gated.caught() => panic!("the stale count set the borrower of 3 aside again"),
    }
}

/// R15: a borrower of 2 at the head of the queue is not overtaken by
/// a later borrower of 1 when one slot frees up, nor by a later borrower of
/// 3; each is served in arrival order as its slots come free.
pub async fn r15_weighted_head_is_not_overtaken_by_smaller_or_larger_borrowers(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    let held: Vec<Lease> = vec![
        take(&pool, 1).await,
        take(&pool, 1).await,
        take(&pool, 1).await,
    ];
    let two = spawn_borrow_n(&pool, 2);
    until_waiting(&pool, 1).await;
    let one = spawn_borrow_n(&pool, 1);
    until_waiting(&pool, 2).await;
    let three = spawn_borrow_n(&pool, 3);
    until_waiting(&pool, 3).await;
    assert!(pool.return_lease(held[1].id).await.unwrap());
    // One slot is free: the head wants 2, so nobody may take it.
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    assert_eq!(pool.waiting().count, 3, "the borrower of 1 did not barge");
    assert_eq!(pool.inspect().await.unwrap().in_use, 2);
    assert!(pool.return_lease(held[0].id).await.unwrap());
    let two = two.await.unwrap().unwrap();
    assert_eq!(&two.positions[..], &[0, 1]);
    assert!(pool.return_lease(held[2].id).await.unwrap());
    let one = one.await.unwrap().unwrap();
    assert_eq!(one.position, 2);
    assert_eq!(pool.waiting().count, 1, "the borrower of 3 waits for all 3");
    assert!(pool.return_lease(two.id).await.unwrap());
    assert!(pool.return_lease(one.id).await.unwrap());
    assert_eq!(&three.await.unwrap().unwrap().positions[..], &[0, 1, 2]);
}

/// R15: a borrower of 2 dropped while it heads the queue takes
/// nothing, and the borrower of 1 it held back is served at once; one
/// dropped after the store granted its 2 slots returns both, and the
/// borrower behind it gets them.
pub async fn r15_dropped_weighted_waiter_lets_smaller_ones_behind_it_move_up(f: Fixture) {
    let pool = f.pool("queued");
    pool.register(2).await.unwrap();
    let held = take(&pool, 1).await;
    let head = spawn_borrow_n(&pool, 2);
    until_waiting(&pool, 1).await;
    let behind = spawn_borrow_n(&pool, 1);
    until_waiting(&pool, 2).await;
    head.abort();
    let lease = tokio::time::timeout(10 * SEC, behind)
        .await
        .expect("the borrower of 1 was left behind a dropped borrower of 2")
        .unwrap()
        .unwrap();
    assert_eq!(lease.position, 1);
    assert_eq!(pool.inspect().await.unwrap().in_use, 2);
    assert_eq!(pool.waiting().count, 0);
    assert!(pool.return_lease(held.id).await.unwrap());

    // Dropped in its store call, after the store granted both slots.
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("granted"));
    pool.register(2).await.unwrap();
    gated.arm(Stop::AfterGrant);
    let borrow = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(2))
                .await
                .map(drop)
        })
    };
    gated.caught().await;
    borrow.abort();
    assert!(borrow.await.unwrap_err().is_cancelled());
    gated.release();
    gated.until_quiet().await;
    until_in_use(&pool, 0).await;
    assert_eq!(&take(&pool, 2).await.positions[..], &[0, 1]);
}

/// R15 with keys: a retry of a weighted borrow with the same key gets the
/// same lease, all its positions, and takes nothing more.
pub async fn r15_weighted_key_retry_returns_the_same_lease(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let options = BorrowOptions::new().slots(2).key("job-1");
    let first = pool
        .borrow_with(TTL, Duration::ZERO, options.clone())
        .await
        .unwrap()
        .forget();
    let retry = pool
        .borrow_with(TTL, Duration::ZERO, options)
        .await
        .unwrap()
        .forget();
    assert_eq!(retry, first);
    assert_eq!(pool.inspect().await.unwrap().in_use, 2);
}

/// R15 across pools: a weighted set takes each pool's weight, all or
/// nothing; a refusal takes nothing anywhere.
pub async fn r15_borrow_all_takes_each_pools_weight(f: Fixture) {
    let gpus = f.pool("gpus");
    let disk = f.pool("disk");
    gpus.register(4).await.unwrap();
    disk.register(1).await.unwrap();
    let job = PoolSet::weighted([(gpus.clone(), 3), (disk.clone(), 1)]).unwrap();
    let leases = job.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(&leases[0].positions[..], &[0, 1, 2]);
    assert_eq!(leases[1].position, 0);
    assert_eq!(gpus.inspect().await.unwrap().in_use, 3);
    assert!(matches!(
        job.borrow(TTL, Duration::ZERO).await,
        Err(Error::Exhausted { .. })
    ));
    assert_eq!(gpus.inspect().await.unwrap().in_use, 3, "nothing taken");
    drop(leases);
    until_in_use(&gpus, 0).await;
    match PoolSet::weighted([(gpus, 0), (disk, 1)]) {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "slots"),
        other => panic!("{other:?}"),
    }
}

/// R15: after the count is lowered, a weighted grant needs
/// `in_use + n <= count`, counting the leases left above the new count.
pub async fn r15_lowered_count_counts_every_slot_held(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let low = take(&pool, 2).await;
    let high = take(&pool, 2).await;
    assert_eq!(&high.positions[..], &[2, 3]);
    pool.register(3).await.unwrap();
    assert!(pool.return_lease(low.id).await.unwrap());
    // in_use 2 (positions 2, 3) of count 3: one more fits, two do not.
    assert!(matches!(
        pool.borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(2))
            .await,
        Err(Error::Exhausted { .. })
    ));
    assert_eq!(take(&pool, 1).await.position, 0);
}

/// R15: first come, first served with weights across processes, for a store that keeps a
/// queue of heads shared by processes (SQLite, PostgreSQL, Redis; not in
/// the macro, since an in-process store keeps none): a queued head of 3 is
/// owed 3 slots, not one, so a later borrower of 1 is refused while only 2
/// are free, and the head gets all 3 once they are. Driven through
/// [`Store`](crate::store::Store) with two waiter ids, as two processes'
/// heads would ask.
pub async fn r15_a_store_queue_owes_each_head_its_weight(f: Fixture) {
    use crate::id::LeaseId;
    use crate::store::{BorrowRequest, TryBorrow, WaiterId};
    let id = PoolId::from_name("owed");
    let pool = Pool::new(f.store.clone(), id);
    pool.register(3).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(take(&pool, 1).await);
    }
    let ask = |waiter: WaiterId, slots: u32| {
        let store = f.store.clone();
        async move {
            let mut request = BorrowRequest::new(id, LeaseId::new(), TTL);
            request.waiter = Some(waiter);
            request.slots = slots;
            store.try_borrow(&request).await.unwrap()
        }
    };
    let (big, small) = (WaiterId::new(), WaiterId::new());
    assert!(matches!(ask(big, 3).await, TryBorrow::Exhausted { .. }));
    assert!(pool.return_lease(held[0].id).await.unwrap());
    assert!(pool.return_lease(held[1].id).await.unwrap());
    assert!(
        matches!(ask(small, 1).await, TryBorrow::Exhausted { .. }),
        "a borrower of 1 took a slot owed to the queued head of 3"
    );
    assert!(pool.return_lease(held[2].id).await.unwrap());
    match ask(big, 3).await {
        TryBorrow::Granted { lease } => assert_eq!(&lease.positions[..], &[0, 1, 2]),
        other => panic!("the head of 3 was refused: {other:?}"),
    }
    f.store.leave_queue(id, small).await.unwrap();
}
