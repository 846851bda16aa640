//! The store's keys and the records under them, one etcd key each:
//!
//! | key | record | lives until (production) |
//! | --- | --- | --- |
//! | `{prefix}/p/{pool}` | [`PoolRec`]: count, drain flag | its delete |
//! | `{prefix}/l/{pool}/{lease}` | [`LeaseRec`]: positions, expiry, session, labels | its etcd lease (the ttl) |
//! | `{prefix}/q/{pool}/{waiter}` | [`PlaceRec`]: weight, hold, since | a queued head's: its handle's places lease (4 s, kept alive while it waits); a held place's: one of its hold, renewed by each look |
//! | `{prefix}/s/{session}` | [`SessionRec`]: end | the session's etcd lease |
//!
//! Ids are their UUID's 32 lowercase hex digits, so that keys sort as ids
//! do (a listing's order). A lease's token is its key's `create_revision`,
//! and a place's turn its key's: both only grow, cluster-wide. Records are
//! JSON (serde_json), a few dozen bytes each.

use semaphore_core::{LeaseId, PoolId, SessionId, WaiterId};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The keys of one store, under its prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// An id as it appears in a key.
pub(crate) fn hex(id: &Uuid) -> String {
    id.simple().to_string()
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// Everything the store keeps: what its watch follows.
    pub(crate) fn all(&self) -> String {
        format!("{}/", self.prefix)
    }

    pub(crate) fn pools(&self) -> String {
        format!("{}/p/", self.prefix)
    }

    pub(crate) fn pool(&self, pool: PoolId) -> String {
        format!("{}/p/{}", self.prefix, hex(pool.as_uuid()))
    }

    pub(crate) fn leases(&self, pool: PoolId) -> String {
        format!("{}/l/{}/", self.prefix, hex(pool.as_uuid()))
    }

    pub(crate) fn lease(&self, pool: PoolId, lease: LeaseId) -> String {
        format!("{}{}", self.leases(pool), hex(lease.as_uuid()))
    }

    pub(crate) fn places(&self, pool: PoolId) -> String {
        format!("{}/q/{}/", self.prefix, hex(pool.as_uuid()))
    }

    pub(crate) fn place(&self, pool: PoolId, waiter: WaiterId) -> String {
        format!("{}{}", self.places(pool), hex(waiter.as_uuid()))
    }

    pub(crate) fn sessions(&self) -> String {
        format!("{}/s/", self.prefix)
    }

    pub(crate) fn session(&self, session: SessionId) -> String {
        format!("{}{}", self.sessions(), hex(session.as_uuid()))
    }

    /// A pool's key's kind (`b'p'`, `b'l'` or `b'q'`) and its pool.
    pub(crate) fn kind_of(&self, key: &[u8]) -> Option<(u8, PoolId)> {
        let rest = key
            .strip_prefix(self.prefix.as_bytes())?
            .strip_prefix(b"/")?;
        let (&kind, rest) = rest.split_first()?;
        if !matches!(kind, b'p' | b'l' | b'q') {
            return None;
        }
        let rest = rest.strip_prefix(b"/")?;
        let id = std::str::from_utf8(rest.get(..32)?).ok()?;
        Uuid::try_parse(id)
            .ok()
            .map(|id| (kind, PoolId::from_uuid(id)))
    }
}

/// The id at the end of `key` (after its last `/`).
pub(crate) fn id_of(key: &[u8]) -> Option<Uuid> {
    let last = key.rsplit(|b| *b == b'/').next()?;
    Uuid::try_parse(std::str::from_utf8(last).ok()?).ok()
}

/// A pool: its count and whether it drains.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct PoolRec {
    #[serde(rename = "c")]
    pub(crate) count: u32,
    #[serde(rename = "d", default)]
    pub(crate) draining: bool,
}

/// A lease: its positions (R15), its expiry (unix ms: the test's clock, or
/// this process's estimate of the etcd lease's, which decides), its
/// session (R16), its labels, and the etcd lease its key is attached to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LeaseRec {
    #[serde(rename = "p")]
    pub(crate) positions: Vec<u32>,
    #[serde(rename = "e")]
    pub(crate) expires: u64,
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<Uuid>,
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    #[serde(rename = "l", default)]
    pub(crate) etcd_lease: i64,
    /// The lease's place among the leases of its multi-pool borrow, which
    /// share one revision: see [`token`].
    #[serde(rename = "i", default, skip_serializing_if = "is_zero")]
    pub(crate) index: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How many leases one transaction's revision has tokens for.
pub(crate) const TOKENS_PER_REVISION: u64 = 1024;

/// The fencing token of the lease created at `revision`, `index`th of its
/// borrow: `revision × 1024 + index`. Revisions only grow, cluster-wide,
/// so tokens do (R9), and the leases of one multi-pool borrow, which one
/// transaction writes at one revision, rise in the set's order.
pub(crate) fn token(revision: i64, index: u32) -> u64 {
    revision
        .unsigned_abs()
        .saturating_mul(TOKENS_PER_REVISION)
        .saturating_add(u64::from(index).min(TOKENS_PER_REVISION - 1))
}

/// A place in the pool's queue: the borrower's weight, until when it
/// lives (unix ms, as for [`LeaseRec::expires`]), whether it is a held
/// place, since when it waits, and its etcd lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PlaceRec {
    #[serde(rename = "n")]
    pub(crate) slots: u32,
    #[serde(rename = "a")]
    pub(crate) alive_until: u64,
    #[serde(rename = "h", default)]
    pub(crate) held: bool,
    #[serde(rename = "t")]
    pub(crate) since: u64,
    #[serde(rename = "l", default)]
    pub(crate) etcd_lease: i64,
}

/// A session: its end (unix ms; judged only in test mode: in production
/// the key lives exactly as long as the session's etcd lease).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct SessionRec {
    #[serde(rename = "e")]
    pub(crate) end: u64,
    #[serde(rename = "l", default)]
    pub(crate) etcd_lease: i64,
}

/// `value` as JSON bytes.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("a record serializes")
}

/// The record in `bytes`; `None` for a value the store did not write.
pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_pool_and_ids_sort_as_their_bytes() {
        let keys = Keys::new("semaphore");
        let pool = PoolId::from_name("a");
        let lease = LeaseId::new();
        assert_eq!(
            keys.kind_of(keys.lease(pool, lease).as_bytes()),
            Some((b'l', pool))
        );
        assert_eq!(keys.kind_of(keys.pool(pool).as_bytes()), Some((b'p', pool)));
        assert_eq!(keys.kind_of(b"semaphore/s/00"), None);
        assert_eq!(
            id_of(keys.lease(pool, lease).as_bytes()),
            Some(*lease.as_uuid())
        );
        let (low, high) = (Uuid::from_u128(1), Uuid::from_u128(u128::MAX));
        assert!(hex(&low) < hex(&high));
    }

    #[test]
    fn records_round_trip_and_junk_is_none() {
        let rec = LeaseRec {
            positions: vec![0, 2],
            expires: 9,
            session: None,
            owner: Some("a\"b".into()),
            key: None,
            etcd_lease: 0,
            index: 0,
        };
        let back: LeaseRec = decode(&encode(&rec)).unwrap();
        assert_eq!(back.positions, vec![0, 2]);
        assert_eq!(back.owner.as_deref(), Some("a\"b"));
        assert!(decode::<LeaseRec>(b"junk").is_none());
    }
}
