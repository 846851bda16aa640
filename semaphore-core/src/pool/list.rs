//! [`Pool::list`]: the pools a store holds, a page at a time (rule
//! "Listing pools"), and what stores share to answer it.

use std::sync::Arc;

use crate::primitives::Store;
use crate::{error::Error, error::Result, id::PoolId, lease::PoolState, pool::Pool};

/// The most pools one page lists ([`Pool::list`], [`Store::pools`]).
pub const MAX_PAGE: u32 = 1000;

/// The least pool id a page that follows `after` may list, inclusive:
/// the id after `after` (by [`PoolId`]'s order), the least of all ids
/// for `None`, and `None` when `after` is the greatest id, after which
/// there is nothing. For stores, whose index is then read with one
/// comparison, `>=` this id.
pub fn page_start(after: Option<PoolId>) -> Option<PoolId> {
    let Some(after) = after else {
        return Some(PoolId::from_uuid(uuid::Uuid::nil()));
    };
    let next = after.as_uuid().as_u128().checked_add(1)?;
    Some(PoolId::from_uuid(uuid::Uuid::from_u128(next)))
}

impl Pool {
    /// A page of the pools `store` holds, in id order: at most `limit`, the
    /// first the least id greater than `after` (`None`: from the first).
    /// To read them all, pass the last id of each page as the next page's
    /// `after` until a page comes back shorter than `limit`. Each pool's
    /// [`PoolState`] is as [`inspect`](Pool::inspect) gives it; its
    /// [`queued`](PoolState::queued) counts the places the store keeps
    /// (see [`Pool::queue`] for everyone known to wait). A page costs time
    /// in proportion to `limit`, whatever the number of pools (rule
    /// "Listing pools"). What `semaphore pools`, `GET /l` and the
    /// service's page show.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `limit` if it is 0 or above
    ///   [`MAX_PAGE`](crate::store::MAX_PAGE) (1000).
    /// - [`Error::Storage`] if the store failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let store: Arc<dyn semaphore_memory::store::Store> = Arc::new(MemoryStore::new());
    /// for name in ["a", "b", "c"] {
    ///     Pool::new(store.clone(), PoolId::from_name(name)).register(2).await?;
    /// }
    /// let first = Pool::list(&store, None, 2).await?;
    /// assert_eq!(first.len(), 2);
    /// let rest = Pool::list(&store, Some(first[1].id), 2).await?;
    /// assert_eq!(rest.len(), 1); // shorter than the limit: the last page
    /// assert!(first[0].id < first[1].id && first[1].id < rest[0].id);
    /// # Ok(()) }
    /// ```
    pub async fn list(
        store: &Arc<dyn Store>,
        after: Option<PoolId>,
        limit: u32,
    ) -> Result<Vec<PoolState>> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::invalid("limit", format!("1..={MAX_PAGE}"), limit));
        }
        store.pools(after, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_starts_just_after_its_predecessor() {
        let id = |n: u128| PoolId::from_uuid(uuid::Uuid::from_u128(n));
        assert_eq!(page_start(None), Some(id(0)));
        assert_eq!(page_start(Some(id(0))), Some(id(1)));
        assert_eq!(page_start(Some(id(0xff))), Some(id(0x100)));
        assert_eq!(page_start(Some(id(u128::MAX))), None);
    }
}
