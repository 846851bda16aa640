//! [`Limits`]: the ranges that arguments are checked and clamped against
//! (rule "Limits").

use std::time::Duration;

use crate::{error::Error, error::Result};

/// Bounds on arguments, set per [`Pool`](crate::Pool) handle with
/// [`Pool::with_limits`](crate::Pool::with_limits).
///
/// `count` above `max_count` is rejected; `ttl` and `wait` above their
/// maximum are clamped, as the HTTP semaphore service clamps. The
/// defaults suit a library embedded in a service:
///
/// | field | default | why |
/// | --- | --- | --- |
/// | `max_count` | 1000 | the rules' default |
/// | `max_ttl` | 24 hours | long batch jobs fit; a crashed holder's slot still comes back within a day |
/// | `max_wait` | 1 hour | longer waits are better served by retrying |
/// | `max_owner_len` | 64 bytes | a host name and a process id fit; a listing stays readable |
/// | `max_key_len` | 255 bytes | as common idempotency-key schemes allow (Stripe's, for one) |
///
/// ```
/// use std::time::Duration;
/// use semaphore_core::Limits;
///
/// let limits = Limits::default().with_max_ttl(Duration::from_secs(60));
/// assert_eq!(limits.max_count, 1000);
/// assert_eq!(limits.max_ttl, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Limits {
    /// The largest `count` a pool may be registered with. Default 1000.
    pub max_count: u32,
    /// The longest lease; a longer `ttl` is clamped to it. Default 24 h.
    pub max_ttl: Duration,
    /// The longest a borrow waits; a longer `wait` is clamped to it.
    /// Default 1 h.
    pub max_wait: Duration,
    /// The longest owner label, in bytes of UTF-8 (see
    /// [`BorrowOptions::owner`](crate::BorrowOptions::owner)). Default 64.
    pub max_owner_len: usize,
    /// The longest idempotency key, in bytes of UTF-8 (see
    /// [`BorrowOptions::key`](crate::BorrowOptions::key)). Default 255.
    pub max_key_len: usize,
    /// The store's liveness bound for a handed lease held on arrival
    /// before its process confirms it (rule "A handed slot is held on
    /// arrival", at most 1 s): a holder's local deadline until then, and
    /// the longest a dead head keeps a slot handed to it. `None` on a store
    /// that does not hand leases on arrival. Set from the store
    /// ([`Store::handed_bound`](crate::store::Store::handed_bound)), not by
    /// the user.
    pub handed_bound: Option<Duration>,
    /// The granularity the store's deciding clock ends leases in, when it
    /// is coarser than a millisecond: a lease may outlive its ttl by up to
    /// this much in the store (never by less than 0), and its slot frees
    /// then. The etcd store's is 1 s, the unit etcd grants leases in
    /// (rule "etcd"). `None` on a store that ends leases to the
    /// millisecond. Set from the store
    /// ([`Store::expiry_granularity`](crate::store::Store::expiry_granularity)),
    /// not by the user.
    pub expiry_granularity: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_count: 1000,
            max_ttl: Duration::from_secs(24 * 60 * 60),
            max_wait: Duration::from_secs(60 * 60),
            max_owner_len: 64,
            max_key_len: 255,
            handed_bound: None,
            expiry_granularity: None,
        }
    }
}

impl Limits {
    /// These limits with `max_count` set.
    pub fn with_max_count(mut self, max_count: u32) -> Self {
        self.max_count = max_count;
        self
    }

    /// These limits with `max_ttl` lowered to what `store` can honour
    /// ([`Store::max_ttl`](crate::store::Store::max_ttl)).
    pub(crate) fn within(mut self, store: &dyn crate::primitives::Store) -> Self {
        self.max_ttl = self.max_ttl.min(store.max_ttl());
        self.handed_bound = store.handed_bound();
        self.expiry_granularity = store.expiry_granularity();
        self
    }

    /// These limits with `max_ttl` set.
    pub fn with_max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = max_ttl;
        self
    }

    /// These limits with `max_wait` set.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// These limits with `max_owner_len` set, in bytes.
    pub fn with_max_owner_len(mut self, max_owner_len: usize) -> Self {
        self.max_owner_len = max_owner_len;
        self
    }

    /// These limits with `max_key_len` set, in bytes.
    pub fn with_max_key_len(mut self, max_key_len: usize) -> Self {
        self.max_key_len = max_key_len;
        self
    }

    /// Checks a label (an owner label or an idempotency key): 1 to
    /// `max_len` bytes of UTF-8 that print as they read, on one line of a
    /// log or an admin listing: no character of the Unicode categories
    /// control (Cc), format (Cf: U+200B zero width space, U+202E
    /// right-to-left override, U+FEFF byte order mark, ...), line separator
    /// (Zl) or paragraph separator (Zp). Spaces (Zs) are allowed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `field` when `label` is empty, too
    /// long, or holds such a character.
    pub(crate) fn check_label(field: &'static str, label: &str, max_len: usize) -> Result<()> {
        if label.is_empty() || label.len() > max_len || label.chars().any(is_unprintable) {
            let shown: String = label.chars().take(80).collect();
            return Err(Error::invalid(
                field,
                format!("1..={max_len} bytes of UTF-8 {PRINTABLE}"),
                format!("{:?} ({} bytes)", shown, label.len()),
            ));
        }
        Ok(())
    }

    /// Checks `count` against `0..=max_count`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `count` when it is above `max_count`.
    pub fn check_count(&self, count: u32) -> Result<u32> {
        if count > self.max_count {
            return Err(Error::invalid(
                "count",
                format!("0..={}", self.max_count),
                count,
            ));
        }
        Ok(count)
    }

    /// Checks the number of slots `slots` one borrow asks for:
    /// `1..=max_count`. A weight above the pool's current count (but within
    /// `max_count`) is valid: it waits for the count to be raised, as a
    /// borrow on a pool of count 0 does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `slots` when it is 0 or above
    /// `max_count`.
    pub fn check_slots(&self, slots: u32) -> Result<u32> {
        if slots == 0 || slots > self.max_count {
            return Err(Error::invalid(
                "slots",
                format!("1..={}", self.max_count.max(1)),
                slots,
            ));
        }
        Ok(slots)
    }

    /// Checks and clamps a lease `ttl`: one under a millisecond, the
    /// resolution at which expiries are stored, is rejected (it would round
    /// to 0 ms, a lease expired at its grant: R5, "the smallest ttl");
    /// anything above `max_ttl` becomes `max_ttl`, and the result is
    /// rounded up to whole milliseconds.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `ttl` when it is under 1 ms (zero
    /// included).
    #[inline]
    pub fn clamp_ttl(&self, ttl: Duration) -> Result<Duration> {
        if ttl < Duration::from_millis(1) {
            return Err(self.zero_ttl(ttl));
        }
        let ttl = ttl.min(self.max_ttl);
        let ttl = match ttl.subsec_nanos() % 1_000_000 {
            // Whole milliseconds already, as most ttls are: no rounding.
            0 => ttl,
            _ => ceil_ms(ttl),
        };
        Ok(ttl.max(Duration::from_millis(1)))
    }

    /// The error of a `ttl` under 1 ms: out of the way of every borrow.
    #[cold]
    #[inline(never)]
    fn zero_ttl(&self, ttl: Duration) -> Error {
        Error::invalid(
            "ttl",
            format!(
                "at least 1ms (at most {:?}; longer is clamped)",
                self.max_ttl
            ),
            format!("{ttl:?}"),
        )
    }

    /// Clamps a borrow's `wait` to `max_wait`. Zero means "do not wait".
    #[inline]
    pub fn clamp_wait(&self, wait: Duration) -> Duration {
        wait.min(self.max_wait)
    }
}

/// What a label may not hold, in the words of the error.
const PRINTABLE: &str = "without control, format, line or paragraph separator characters";

/// Whether `c` would not print as it reads on one line: a control, format,
/// line separator or paragraph separator character.
fn is_unprintable(c: char) -> bool {
    use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
    matches!(
        c.general_category(),
        G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
    )
}

fn ceil_ms(d: Duration) -> Duration {
    // In whole seconds and milliseconds, with no u128 division: a
    // sub-millisecond rest rounds up within the second (1,000 ms carry
    // into it), saturating at `Duration::MAX`.
    let ms = d.subsec_nanos().div_ceil(1_000_000);
    Duration::from_secs(d.as_secs())
        .checked_add(Duration::from_millis(u64::from(ms)))
        .unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_milliseconds_and_saturate() {
        let cases = [
            (Duration::from_nanos(1), Duration::from_millis(1)),
            (Duration::from_micros(1_500), Duration::from_millis(2)),
            (Duration::from_millis(7), Duration::from_millis(7)),
            (Duration::new(3, 999_000_001), Duration::from_secs(4)),
            (Duration::MAX, Duration::MAX),
        ];
        for (ttl, rounded) in cases {
            assert_eq!(ceil_ms(ttl), rounded, "{ttl:?}");
        }
    }

    #[test]
    fn count_above_max_is_rejected_naming_range() {
        let l = Limits::default();
        assert_eq!(l.check_count(0).unwrap(), 0);
        assert_eq!(l.check_count(1000).unwrap(), 1000);
        let err = l.check_count(1001).unwrap_err();
        assert_eq!(err.to_string(), "invalid count: got 1001, allowed 0..=1000");
    }

    #[test]
    fn ttl_under_a_millisecond_rejected_and_long_ttl_clamped_and_rounded_up() {
        let l = Limits::default();
        for short in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_micros(999),
        ] {
            assert!(
                matches!(
                    l.clamp_ttl(short),
                    Err(Error::InvalidArgument { field: "ttl", .. })
                ),
                "{short:?}"
            );
        }
        assert_eq!(
            l.clamp_ttl(Duration::from_millis(1)).unwrap(),
            Duration::from_millis(1)
        );
        assert_eq!(
            l.clamp_ttl(Duration::from_micros(1500)).unwrap(),
            Duration::from_millis(2)
        );
        assert_eq!(l.clamp_ttl(Duration::MAX).unwrap(), l.max_ttl);
        assert_eq!(
            l.clamp_ttl(Duration::from_secs(30)).unwrap(),
            Duration::from_secs(30),
            "whole milliseconds stay as they are"
        );
    }

    #[test]
    fn labels_are_bounded_and_printable() {
        assert!(Limits::check_label("owner", "host-1/4242", 64).is_ok());
        assert!(Limits::check_label("owner", &"x".repeat(64), 64).is_ok());
        assert!(Limits::check_label("owner", "host a / 4242 \u{e9}", 64).is_ok());
        // labels that do not print as they read, on one
        // line, are refused too.
        for bad in [
            "",
            "a\nb",
            "tab\there",
            &"x".repeat(65),
            "evil\u{202e}gnp.exe",
            "two\u{2028}lines",
            "para\u{2029}graph",
            "zero\u{200b}width",
            "\u{feff}bom",
        ] {
            let err = Limits::check_label("owner", bad, 64).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid owner: got ")
                    && err.to_string().contains("allowed 1..=64 bytes")
                    && err.to_string().contains("format"),
                "{err}"
            );
        }
    }

    #[test]
    fn wait_is_clamped() {
        let l = Limits::default();
        assert_eq!(l.clamp_wait(Duration::MAX), l.max_wait);
        assert_eq!(l.clamp_wait(Duration::ZERO), Duration::ZERO);
    }
}
