//! A two-phase borrow's ticket: the place is kept in the store
//! ([`HeldPlace::wait`](semaphore_core::HeldPlace::wait)), and the ticket
//! describes the borrow itself, so that any server sharing the store can
//! poll it: one taken on server A can be waited on server B, and no
//! server keeps anything between polls (on the memory store, only the
//! server that made it shares its store).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use semaphore_core::{BorrowOptions, PoolId, WaiterId};
use serde::{Deserialize, Serialize};

use crate::idempotency::Keyed;

/// What tells a held ticket from a server-kept one (a bare UUID), with
/// the format's version.
const PREFIX: &str = "h1.";

/// The longest ticket text decoded: the fields with a 64-byte owner fit
/// well under it.
const MAX_LEN: usize = 512;

/// A two-phase borrow whose place a shared store keeps: the waiter id of
/// its place, and what to borrow when its turn comes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ticket {
    /// The place's waiter id in the store's queue.
    #[serde(rename = "w")]
    pub(crate) waiter: uuid::Uuid,
    /// The lease's ttl, in ms, as clamped at enqueue.
    #[serde(rename = "t")]
    pub(crate) ttl_ms: u64,
    /// Slots in the lease.
    #[serde(rename = "s")]
    pub(crate) slots: u32,
    /// The owner label.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    /// Keep the place while the pool drains.
    #[serde(rename = "d", default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) wait_while_draining: bool,
    /// The `Idempotency-Key`'s name, as kept with the lease (32 hex digits).
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    /// The request digest kept with the key.
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub(crate) digest: Option<uuid::Uuid>,
}

/// The namespace of the waiter ids of keyed tickets.
const KEYED_WAITERS: uuid::Uuid = uuid::Uuid::from_u128(0x2b7e_91c4_0d3a_4e6f_8a15_c9d2_7f40_b613);

impl Ticket {
    /// The ticket of an enqueue on `pool` for `ttl` with `options`. With
    /// an `Idempotency-Key` (`keyed`), the place's waiter id comes from the
    /// pool, the key and the request digest, so that a retried enqueue
    /// takes the same place (the same ticket), and its lease is kept with
    /// the key; without one it is random.
    pub(crate) fn new(
        pool: PoolId,
        ttl: Duration,
        options: &BorrowOptions,
        keyed: Option<&Keyed>,
    ) -> Self {
        let waiter = match keyed {
            Some(k) => uuid::Uuid::new_v5(
                &KEYED_WAITERS,
                format!("{}:{}:{:032x}", pool.as_uuid(), k.name, k.digest).as_bytes(),
            ),
            None => *WaiterId::new().as_uuid(),
        };
        Self {
            waiter,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            slots: options.slots,
            owner: options.owner.clone(),
            wait_while_draining: options.wait_while_draining,
            key: keyed.map(|k| k.name.clone()),
            digest: keyed.map(|k| uuid::Uuid::from_u128(k.digest)),
        }
    }

    /// The ticket's text: [`PREFIX`], then its fields as JSON in URL-safe
    /// base64 (no padding), so that it needs no escaping anywhere.
    pub(crate) fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    /// The ticket `text` describes, or `None` if it is not a held ticket
    /// (a server-kept ticket's UUID, or anything else).
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let body = text
            .strip_prefix(PREFIX)
            .filter(|_| text.len() <= MAX_LEN)?;
        let json = URL_SAFE_NO_PAD.decode(body).ok()?;
        serde_json::from_slice(&json).ok()
    }

    /// Whether `text` is in the held tickets' format, valid or not.
    pub(crate) fn looks_held(text: &str) -> bool {
        text.starts_with(PREFIX)
    }

    pub(crate) fn waiter(&self) -> WaiterId {
        WaiterId::from_uuid(self.waiter)
    }

    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// The borrow's options: unbound (the lease is the client's).
    pub(crate) fn options(&self) -> BorrowOptions {
        let mut options = BorrowOptions::new()
            .bound(false)
            .wait_while_draining(self.wait_while_draining)
            .slots(self.slots);
        if let Some(owner) = &self.owner {
            options = options.owner(owner.clone());
        }
        if let Some(key) = &self.key {
            options = options.key(key.clone());
        }
        if let Some(digest) = self.digest {
            options = options.request_digest(digest.as_u128());
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_as_written() {
        let ticket = Ticket {
            waiter: uuid::Uuid::new_v4(),
            ttl_ms: 90_000,
            slots: 2,
            owner: Some("job 7/a".into()),
            wait_while_draining: true,
            key: Some("0f".repeat(16)),
            digest: Some(uuid::Uuid::new_v4()),
        };
        let text = ticket.encode();
        assert!(Ticket::looks_held(&text));
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        );
        assert_eq!(Ticket::decode(&text), Some(ticket));
    }

    #[test]
    fn junk_is_no_ticket() {
        for text in [
            "",
            "h1.",
            "h1.!!!",
            "h1.e30",
            "6f1c0b1e-8f0e-4c4e-9a55-1f0d2a7f3b11",
            &format!("h1.{}", "A".repeat(600)),
        ] {
            assert_eq!(Ticket::decode(text), None, "{text:?}");
        }
    }
}
