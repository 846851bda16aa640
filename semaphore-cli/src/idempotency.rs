//! `Idempotency-Key` on `POST /l/{id}/borrow` (issue 21, item 9), after
//! the IETF idempotency-key draft and Stripe: a retry with the same key and
//! the same body gets the same lease; the same key with a different body
//! is refused with 422, since it cannot be a retry.
//!
//! The key the store keeps with the lease is `K#B`: `K` names the client's
//! key and `B` the request body, each as the 32 hex digits of a UUID v5
//! (SHA-1 under this module's namespace), so that every server of a shared
//! store derives the same key, and the kept key has a fixed length whatever
//! the client sent. A borrow with a key first looks for a lease kept under
//! `K#` with another `B`.

use semaphore_core::Holder;
use uuid::Uuid;

use crate::wire;

/// The namespace of the derived keys.
const NAMESPACE: Uuid = Uuid::from_u128(0x6d2f_0b7e_4c1a_4f55_9a3e_5b1c_8e27_d304);

/// The key to keep for client key `key` and request `body`.
pub(crate) fn stored(key: &str, body: &wire::Borrow) -> String {
    let mut canonical = format!(
        "ttl={};wait={};owner={:?}",
        body.ttl,
        body.wait
            .as_ref()
            .map_or_else(|| "0".to_string(), ToString::to_string),
        body.owner
    );
    // Only when given, so that a body without it keeps the key it had
    // before weighted borrows.
    if let Some(slots) = &body.slots {
        canonical.push_str(&format!(";slots={slots}"));
    }
    format!(
        "{}#{}",
        prefix(key),
        Uuid::new_v5(&NAMESPACE, canonical.as_bytes()).simple()
    )
}

/// Whether `holders` has a lease for client key `key` kept under another
/// body than `stored`.
pub(crate) fn conflicts(holders: &[Holder], key: &str, stored: &str) -> bool {
    let prefix = format!("{}#", prefix(key));
    holders.iter().any(|h| {
        h.key
            .as_deref()
            .is_some_and(|k| k.starts_with(&prefix) && k != stored)
    })
}

fn prefix(key: &str) -> String {
    Uuid::new_v5(&NAMESPACE, key.as_bytes())
        .simple()
        .to_string()
}
