//! `Idempotency-Key` on `POST /l/{id}/borrow` and `/enqueue`,
//! after the IETF idempotency-key draft and
//! Stripe: a retry with the same key and the same body gets the same
//! lease; the same key with a different body is refused with 422, since it
//! cannot be a retry.
//!
//! The store keeps, with the lease, the key's name `K` and the request's
//! digest `B`: `K` names the client's key and `B` the request body, each
//! as a UUID v5 (SHA-1 under this module's namespace), so that every
//! server of a shared store derives the same pair and the kept key has a
//! fixed length whatever the client sent. The store compares the digest in
//! the step that grants ([`BorrowOptions::request_digest`]), so that two
//! servers racing with one key and two bodies cannot both grant (rule
//! "Idempotency keys are atomic").

use semaphore_core::BorrowOptions;
use uuid::Uuid;

/// The namespace of the derived keys and digests.
const NAMESPACE: Uuid = Uuid::from_u128(0x6d2f_0b7e_4c1a_4f55_9a3e_5b1c_8e27_d304);

/// What a request with key `key` asks, for its digest: each field that
/// changes the lease, as text.
pub(crate) struct Request<'a> {
    /// The route: a borrow and an enqueue with one key are different
    /// requests.
    pub(crate) route: &'a str,
    pub(crate) ttl: String,
    pub(crate) wait: Option<String>,
    pub(crate) owner: Option<&'a str>,
    pub(crate) slots: Option<String>,
    pub(crate) wait_while_draining: Option<bool>,
}

/// A client's key as the store keeps it: the key's name (32 hex digits)
/// and the request's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keyed {
    pub(crate) name: String,
    pub(crate) digest: u128,
}

impl Keyed {
    /// `options` with this key and digest.
    pub(crate) fn options(&self, options: BorrowOptions) -> BorrowOptions {
        options.key(self.name.clone()).request_digest(self.digest)
    }
}

/// `options` keyed by client key `key` for `request`.
pub(crate) fn keyed(options: BorrowOptions, key: &str, request: &Request<'_>) -> BorrowOptions {
    derive(key, request).options(options)
}

/// The name and digest kept for client key `key` and `request`.
pub(crate) fn derive(key: &str, request: &Request<'_>) -> Keyed {
    let mut canonical = format!(
        "route={};ttl={};wait={};owner={:?}",
        request.route,
        request.ttl,
        request.wait.as_deref().unwrap_or("0"),
        request.owner
    );
    if let Some(slots) = &request.slots {
        canonical.push_str(&format!(";slots={slots}"));
    }
    if let Some(patient) = request.wait_while_draining {
        canonical.push_str(&format!(";wait_while_draining={patient}"));
    }
    Keyed {
        name: Uuid::new_v5(&NAMESPACE, key.as_bytes())
            .simple()
            .to_string(),
        digest: Uuid::new_v5(&NAMESPACE, canonical.as_bytes()).as_u128(),
    }
}

/// The client's `Idempotency-Key` header, if it sent one: 1 to 255 bytes of
/// printable text.
///
/// # Errors
/// 400 naming `Idempotency-Key` for an empty, long or unprintable key.
pub(crate) fn header(
    headers: &axum::http::HeaderMap,
) -> Result<Option<&str>, crate::error::ApiError> {
    let Some(key) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    key.to_str()
        .ok()
        .filter(|k| (1..=255).contains(&k.len()))
        .map(Some)
        .ok_or_else(|| {
            crate::error::ApiError::bad_request(
                "Idempotency-Key must be 1 to 255 bytes of printable text",
                Some("Idempotency-Key"),
            )
        })
}
