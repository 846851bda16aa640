//! The etcd leases a store handle attaches its keys to, shared: a key
//! whose life must end within a span takes an etcd lease this handle
//! granted before if that lease lapses within the span, and a grant is
//! made only when none does. A hot pool's borrows then cost a look and a
//! write, not a grant besides (one grant a second at most per ttl, rather
//! than one a borrow).
//!
//! A key must vanish no sooner than [`MARGIN_MS`] after what its record
//! counts, and no later than [`KEY_SLACK_MS`] after that (the granularity
//! [`Limits::expiry_granularity`](semaphore_core::Limits::expiry_granularity)
//! states): in production a key lives exactly as long as what it
//! records (a lease, a place), since no machine's clock judges.
//!
//! No shared etcd lease is ever revoked (other keys may be attached to
//! it): one a key left lapses by itself.

use semaphore_core::Result;
use semaphore_core::store::bounded;

use crate::EtcdStore;
use crate::decide::{MARGIN_MS, ttl_seconds};
use crate::error::storage;

/// How much later than [`MARGIN_MS`] after what its record counts a key
/// may vanish: etcd's granularity.
pub(crate) const KEY_SLACK_MS: u64 = 1_000;

/// The etcd leases this handle granted and may share, each with when it
/// lapses on this process's clock: no sooner than `earliest` (its TTL
/// from before the grant was sent), no later than `latest` (from after
/// its answer came).
#[derive(Debug, Default)]
pub(crate) struct Grants(parking_lot::Mutex<Vec<Granted>>);

#[derive(Debug, Clone, Copy)]
struct Granted {
    id: i64,
    earliest: u64,
    latest: u64,
}

impl Grants {
    /// A granted etcd lease that lapses within `from..=to` (unix ms), if
    /// one does; drops those that may have lapsed by `now`.
    fn find(&self, now: u64, from: u64, to: u64) -> Option<i64> {
        let mut granted = self.0.lock();
        granted.retain(|g| g.earliest > now);
        granted
            .iter()
            .find(|g| g.earliest >= from && g.latest <= to)
            .map(|g| g.id)
    }
}

impl EtcdStore {
    /// An etcd lease that outlives `until` (unix ms, counted from `now`,
    /// the look's instant) by [`MARGIN_MS`] at least and by
    /// [`KEY_SLACK_MS`] more at most: one this handle granted before if one
    /// fits, else a new one; 0 (no lease) in test mode.
    pub(crate) async fn etcd_lease(
        &self,
        operation: &'static str,
        now: u64,
        until: u64,
    ) -> Result<i64> {
        if self.time.now_param().is_some() {
            return Ok(0);
        }
        let from = until.saturating_add(MARGIN_MS);
        let to = from.saturating_add(KEY_SLACK_MS);
        if let Some(id) = self.grants.find(self.stamp(), from, to) {
            return Ok(id);
        }
        let seconds = ttl_seconds(now, until);
        let sent = self.stamp();
        let mut client = self.client.lease_client();
        let granted = bounded(operation, async {
            client
                .grant(seconds, None)
                .await
                .map_err(storage(operation))
        })
        .await?;
        let ttl_ms = u64::try_from(granted.ttl())
            .unwrap_or(0)
            .saturating_mul(1000);
        let entry = Granted {
            id: granted.id(),
            earliest: sent.saturating_add(ttl_ms),
            latest: self.stamp().saturating_add(ttl_ms),
        };
        self.grants.0.lock().push(entry);
        Ok(entry.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_shared_only_within_its_span_and_until_it_may_lapse() {
        let grants = Grants::default();
        grants.0.lock().push(Granted {
            id: 7,
            earliest: 10_500,
            latest: 10_520,
        });
        // A key that must outlive 10_000 + 500, by 1 s more at most.
        assert_eq!(grants.find(9_000, 10_500, 11_500), Some(7));
        // It would lapse too soon for a later end, too late for an earlier.
        assert_eq!(grants.find(9_000, 10_501, 11_501), None);
        assert_eq!(grants.find(9_000, 9_000, 10_000), None);
        // Past its earliest lapse it is dropped, whatever is asked.
        assert_eq!(grants.find(10_500, 0, u64::MAX), None);
        assert!(grants.0.lock().is_empty());
    }
}
