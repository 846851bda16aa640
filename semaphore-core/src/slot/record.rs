//! What a [`SlotTable`](super::SlotTable) records at a held position:
//! the lease ([`Held`]) at its lowest position, and at its other positions
//! where that lowest one is ([`Slot`]).

use std::sync::Arc;

use crate::clock::UnixMs;
use crate::{id::LeaseId, id::PoolId, lease::Holder, lease::Lease, lease::Positions};

/// An active lease, as the table keeps it at its lowest position.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) id: LeaseId,
    pub(super) positions: Positions,
    pub(super) token: u64,
    pub(super) expires_at: UnixMs,
    pub(super) key: Option<Arc<str>>,
    pub(super) owner: Option<Arc<str>>,
}

impl Held {
    #[inline]
    pub(super) fn lease(&self, pool: PoolId) -> Lease {
        Lease::holding(
            self.id,
            pool,
            self.positions.clone(),
            self.token,
            self.expires_at.to_system_time(),
        )
    }

    pub(super) fn holder(&self, pool: PoolId) -> Holder {
        let label = |l: &Option<Arc<str>>| l.as_deref().map(str::to_owned);
        Holder::new(self.lease(pool), label(&self.owner), label(&self.key))
    }
}

/// What a held position records: the lease, at its lowest position; at
/// its other positions, where that lowest one is.
#[derive(Debug, Clone)]
pub(super) enum Slot {
    Lease(Held),
    Part(u32),
}
