//! Idempotency keys as a store keeps them: the caller's key and its
//! request digest (rule "Idempotency keys are atomic").

use std::sync::Arc;

/// What separates a key's name from its request digest in the key a
/// store keeps ([`BorrowRequest::key`](crate::store::BorrowRequest::key)): a control character, which no
/// checked key contains.
pub const KEY_DIGEST_SEPARATOR: char = '\u{1f}';

/// The key a store keeps for key `key` and request digest `digest`:
/// `key`, then [`KEY_DIGEST_SEPARATOR`] and the digest as 32 lowercase hex
/// digits if there is one.
pub fn stored_key(key: &str, digest: Option<u128>) -> Arc<str> {
    match digest {
        Some(digest) => Arc::from(format!("{key}{KEY_DIGEST_SEPARATOR}{digest:032x}")),
        None => Arc::from(key),
    }
}

/// The name of stored key `stored`: the caller's key, without its request
/// digest. Stores match keys by it.
pub fn key_name(stored: &str) -> &str {
    stored
        .split_once(KEY_DIGEST_SEPARATOR)
        .map_or(stored, |(name, _)| name)
}
