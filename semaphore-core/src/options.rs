//! [`BorrowOptions`]: what a borrow may carry besides its ttl and wait.

use std::sync::Arc;

use crate::{Limits, Result};

/// Optional parts of a borrow: an idempotency key and an owner label
/// (SPEC "Beyond the basic model"). Pass them to
/// [`Pool::borrow_with`](crate::Pool::borrow_with) or
/// [`PoolSet::borrow_with`](crate::PoolSet::borrow_with).
///
/// ```
/// use semaphore_core::BorrowOptions;
///
/// let options = BorrowOptions::new().key("invoice-7731").owner("worker-3");
/// assert_eq!(options.key.as_deref(), Some("invoice-7731"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BorrowOptions {
    /// The idempotency key. While the lease granted for a key is active, a
    /// borrow on the same pool with the same key returns that same lease
    /// (same id, position, token and expiry) and takes no second slot; once
    /// it is returned or expired, the key may be granted anew. This is how a
    /// caller retries safely after a timeout or a crash between grant and
    /// reply (as Stripe's idempotency keys make a retried charge safe).
    /// 1 to [`Limits::max_key_len`] bytes (default 255), no control, format,
    /// line or paragraph separator characters. Keys are per pool.
    pub key: Option<String>,
    /// A label saying who holds the lease (a host and process, a job id),
    /// shown by [`Pool::holders`](crate::Pool::holders). 1 to
    /// [`Limits::max_owner_len`] bytes (default 64), no control, format,
    /// line or paragraph separator characters.
    pub owner: Option<String>,
}

impl BorrowOptions {
    /// No key, no owner label: a plain borrow.
    pub fn new() -> Self {
        Self::default()
    }

    /// These options with idempotency key `key`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// These options with owner label `owner`.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Checks both labels against `limits`: each 1 to its maximum number of
    /// bytes ([`Limits::max_key_len`], [`Limits::max_owner_len`]), with no
    /// control, format, line or paragraph separator character (Unicode
    /// categories Cc, Cf, Zl, Zp), so that a label prints as it reads on
    /// one line. Borrows call it; a store borrowing by another
    /// path (a caller-owned transaction) calls it too.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `key`
    /// or `owner`, with the allowed range.
    pub fn validate(&self, limits: &Limits) -> Result<()> {
        self.check(limits).map(drop)
    }

    /// Checks both labels against `limits`.
    pub(crate) fn check(&self, limits: &Limits) -> Result<Labels> {
        if let Some(key) = &self.key {
            Limits::check_label("key", key, limits.max_key_len)?;
        }
        if let Some(owner) = &self.owner {
            Limits::check_label("owner", owner, limits.max_owner_len)?;
        }
        Ok(Labels {
            key: self.key.as_deref().map(Arc::from),
            owner: self.owner.as_deref().map(Arc::from),
        })
    }
}

/// Checked labels, cheap to copy into every attempt of a borrow.
#[derive(Debug, Clone, Default)]
pub(crate) struct Labels {
    pub(crate) key: Option<Arc<str>>,
    pub(crate) owner: Option<Arc<str>>,
}
