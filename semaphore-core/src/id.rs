//! Identifiers: [`PoolId`] and [`LeaseId`].

use std::fmt;

use uuid::Uuid;

/// The namespace in which [`PoolId::from_name`] derives its v5 UUIDs.
///
/// Fixed forever: changing it would make processes of different versions
/// disagree on which pool a name means.
pub const POOL_NAMESPACE: Uuid = Uuid::from_u128(0x6f1d3c2a_8b4e_4d7a_9c51_2e8f0a7b3d64);

/// The identity of a pool: a UUID.
///
/// Two forms:
/// - [`PoolId::from_name`] derives a stable v5 UUID from a name, so that every
///   process sharing a store agrees on the pool `"gpus"` means.
/// - [`PoolId::random`] makes a random v4 UUID (122 bits of entropy), for
///   callers that treat the id as a secret credential, as the HTTP semaphore
///   service this library is modelled on does.
///
/// It parses from and prints as the hyphenated UUID form, and serializes the
/// same way.
///
/// ```
/// use semaphore_core::PoolId;
///
/// let a = PoolId::from_name("gpus");
/// assert_eq!(a, PoolId::from_name("gpus"));
/// let parsed: PoolId = a.to_string().parse()?;
/// assert_eq!(parsed, a);
/// assert!("not-a-uuid".parse::<PoolId>().is_err());
/// # Ok::<(), semaphore_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct PoolId(Uuid);

impl PoolId {
    /// The pool id for `name`: a v5 UUID in [`POOL_NAMESPACE`], identical in
    /// every process and every version of this library.
    pub fn from_name(name: &str) -> Self {
        Self(Uuid::new_v5(&POOL_NAMESPACE, name.as_bytes()))
    }

    /// A fresh random (v4) pool id, unguessable: 122 random bits.
    pub fn random() -> Self {
        Self(Uuid::new_v4())
    }

    /// Wraps an existing UUID.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The UUID inside.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

/// The identity of one lease: a random v4 UUID made by the library, never by
/// the caller (rule "Words").
///
/// It is the credential that returns the lease early
/// ([`Pool::return_lease`](crate::Pool::return_lease)), so treat it as a
/// secret; [`PoolState`](crate::PoolState) never shows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct LeaseId(Uuid);

impl LeaseId {
    /// A fresh random (v4) lease id. Only the core calls this, before it asks
    /// a store to grant, so that a borrow cancelled during the store call can
    /// still return its lease.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// Wraps an existing UUID; for stores that read ids back from storage.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The UUID inside.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

/// The identity of a place in a pool's queue: a queued head of
/// this process, or a held place that any process sharing the store may
/// poll ([`HeldPlace::wait`](crate::HeldPlace::wait): make one with
/// [`WaiterId::new`] and keep it, an HTTP ticket's id for instance).
///
/// The core passes it in [`BorrowRequest::waiter`](crate::store::BorrowRequest::waiter) on
/// every attempt made from the queue, so that a store shared by several
/// processes can keep one queue of their heads and serve them first come,
/// first served. Random (v4), so ids from different processes never clash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct WaiterId(Uuid);

impl WaiterId {
    /// A fresh random waiter id.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The UUID inside.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }

    /// The waiter id with this UUID: a held place's id read back from
    /// where its poller keeps it ([`HeldPlace::wait`](crate::HeldPlace::wait)).
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

/// The id of a store handle's session: a record in a
/// networked store, with an expiry on the server's clock, that bound
/// leases belong to ([`Session`](crate::Session)). Random (UUID v4), made
/// by the handle; never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct SessionId(Uuid);

impl SessionId {
    /// A fresh random session id.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The UUID inside.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }

    /// The session id with this UUID, as a store reads it back.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

impl Default for SessionId {
    /// Same as [`SessionId::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Default for WaiterId {
    /// Same as [`WaiterId::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Default for LeaseId {
    /// Same as [`LeaseId::new`]: a fresh random id.
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! uuid_fmt {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($t), self.0)
            }
        }
        impl From<Uuid> for $t {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }
        impl From<$t> for Uuid {
            fn from(id: $t) -> Uuid {
                id.0
            }
        }
    };
}
uuid_fmt!(PoolId);
uuid_fmt!(LeaseId);
uuid_fmt!(WaiterId);
uuid_fmt!(SessionId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_name_is_v5_and_distinct_per_name() {
        let a = PoolId::from_name("gpus");
        assert_eq!(a.as_uuid().get_version_num(), 5);
        assert_ne!(a, PoolId::from_name("cpus"));
    }

    #[test]
    fn from_name_is_pinned() {
        // Pinned so that a change of namespace cannot slip in: processes of
        // different versions must agree on a name's pool.
        assert_eq!(
            PoolId::from_name("gpus").to_string(),
            Uuid::new_v5(&POOL_NAMESPACE, b"gpus").to_string()
        );
        assert_eq!(
            POOL_NAMESPACE.to_string(),
            "6f1d3c2a-8b4e-4d7a-9c51-2e8f0a7b3d64"
        );
    }

    #[test]
    fn random_ids_are_v4() {
        assert_eq!(PoolId::random().as_uuid().get_version_num(), 4);
        assert_eq!(LeaseId::new().as_uuid().get_version_num(), 4);
        assert_ne!(LeaseId::new(), LeaseId::new());
    }

    #[test]
    fn uuid_conversions_round_trip() {
        let id = PoolId::from_name("x");
        let uuid: Uuid = id.into();
        assert_eq!(PoolId::from(uuid), id);
        assert_eq!(format!("{id:?}"), format!("PoolId({uuid})"));
    }
}
