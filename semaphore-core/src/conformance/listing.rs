//! Cases for listing a store's pools a page at a time (rule "Listing
//! pools"; [`Store::pools`](crate::store::Store::pools), [`Pool::list`]).

use std::time::Duration;

use super::{Fixture, SEC};
use crate::{
    error::Error, id::PoolId, id::WaiterId, lease::PoolState, options::BorrowOptions, pool::Pool,
};

const TTL: Duration = Duration::from_secs(60);

/// Every pool of the store, read a page of `limit` at a time; each page's
/// length with it.
async fn every_page(f: &Fixture, limit: u32) -> (Vec<PoolState>, Vec<usize>) {
    let (mut all, mut pages, mut after) = (Vec::new(), Vec::new(), None);
    loop {
        let page = Pool::list(&f.store, after, limit).await.unwrap();
        pages.push(page.len());
        after = page.last().map(|s| s.id);
        let last = page.len() < limit as usize;
        all.extend(page);
        if last {
            return (all, pages);
        }
    }
}

/// Listing: a store without pools lists none, from the start or after any
/// id; a limit of 0 or above 1000 is refused, naming `limit`.
pub async fn listing_an_empty_store_lists_nothing_and_refuses_bad_limits(f: Fixture) {
    assert_eq!(Pool::list(&f.store, None, 100).await.unwrap(), vec![]);
    let some = PoolId::from_name("never-registered");
    assert_eq!(Pool::list(&f.store, Some(some), 1).await.unwrap(), vec![]);
    for limit in [0, 1001] {
        match Pool::list(&f.store, None, limit).await {
            Err(Error::InvalidArgument { field, allowed, .. }) => {
                assert_eq!((field, allowed.as_str()), ("limit", "1..=1000"));
            }
            other => panic!("limit {limit}: expected InvalidArgument, got {other:?}"),
        }
    }
}

/// Listing: pages of 3 read 7 pools in id order, each once, each as
/// `inspect` states it (count, in use with expiry judged, draining,
/// queued); a page shorter than the limit is the last, and a page after
/// the last pool, or after the greatest id, is empty.
pub async fn listing_pages_through_every_pool_in_id_order(f: Fixture) {
    let pools: Vec<Pool> = (0..7).map(|i| f.pool(&format!("listed-{i}"))).collect();
    for (i, pool) in pools.iter().enumerate() {
        pool.register(u32::try_from(i).unwrap() + 1).await.unwrap();
    }
    // One pool with a lease held, one with a lease that expires, one
    // draining, one with a held place.
    let _held = pools[2].borrow(TTL, Duration::ZERO).await.unwrap();
    pools[3].borrow(SEC, Duration::ZERO).await.unwrap().forget();
    pools[4].set_draining(true).await.unwrap();
    let _full = pools[0].borrow(TTL, Duration::ZERO).await.unwrap();
    let place = pools[0]
        .held(WaiterId::new())
        .wait(TTL, TTL, Duration::ZERO, BorrowOptions::new())
        .await
        .unwrap();
    assert!(place.is_none(), "the pool of one slot is full");
    f.clock.advance(2 * SEC);

    let (listed, pages) = every_page(&f, 3).await;
    assert_eq!(pages, vec![3, 3, 1], "pages of 3, the last shorter");
    let mut expected = Vec::new();
    for pool in &pools {
        expected.push(pool.inspect().await.unwrap());
    }
    expected.sort_by_key(|s| s.id);
    assert_eq!(
        listed, expected,
        "every pool once, in id order, as inspected"
    );
    let by_id = |pool: &Pool| listed.iter().find(|s| s.id == pool.id()).unwrap();
    assert_eq!(by_id(&pools[2]).in_use, 1, "a held lease counts");
    assert_eq!(by_id(&pools[3]).in_use, 0, "an expired lease does not");
    assert!(by_id(&pools[4]).draining, "draining is shown");
    assert_eq!(by_id(&pools[0]).queued, 1, "a held place is queued");

    let last = listed.last().unwrap().id;
    assert_eq!(Pool::list(&f.store, Some(last), 3).await.unwrap(), vec![]);
    let greatest = PoolId::from_uuid(uuid::Uuid::max());
    assert_eq!(
        Pool::list(&f.store, Some(greatest), 3).await.unwrap(),
        vec![]
    );
    let (exact, pages) = every_page(&f, 7).await;
    assert_eq!(
        (exact.len(), pages),
        (7, vec![7, 0]),
        "a full last page, then an empty one"
    );
}

/// Listing: a page may follow a pool deleted since the page before it (its
/// id still orders the rest), and lists neither it nor another pool
/// deleted meanwhile; a pool registered meanwhile after the last id read
/// is listed.
pub async fn listing_goes_on_past_a_pool_deleted_between_pages(f: Fixture) {
    let mut pools: Vec<Pool> = (0..6).map(|i| f.pool(&format!("paged-{i}"))).collect();
    pools.sort_by_key(Pool::id);
    for pool in &pools {
        pool.register(1).await.unwrap();
    }
    let first = Pool::list(&f.store, None, 2).await.unwrap();
    let ids = |states: &[PoolState]| states.iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(&first), vec![pools[0].id(), pools[1].id()]);
    // The page's last pool and one of the next page go.
    assert!(pools[1].delete().await.unwrap());
    assert!(pools[3].delete().await.unwrap());
    let rest = Pool::list(&f.store, Some(pools[1].id()), 10).await.unwrap();
    assert_eq!(
        ids(&rest),
        vec![pools[2].id(), pools[4].id(), pools[5].id()],
        "the deleted are skipped, the rest follow in order"
    );
    // Registered again after the last read: listed by the next page.
    pools[3].register(2).await.unwrap();
    let again = Pool::list(&f.store, Some(pools[2].id()), 10).await.unwrap();
    assert_eq!(
        ids(&again),
        vec![pools[3].id(), pools[4].id(), pools[5].id()]
    );
    assert_eq!(again[0].count, 2);
}
