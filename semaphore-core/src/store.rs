//! For store authors: the [`Store`] trait, the atomic primitives a storage
//! backend provides (rule "Stores"), and the kit to write one with:
//! slot allocation ([`lowest_free`], [`SlotTable`]), the wait engine's
//! change notification ([`Changes`]), waiter ids, and the time helpers every
//! store needs to keep times as unix milliseconds ([`unix_ms`],
//! [`from_unix_ms`], [`MAX_UNIX_MS`], [`max_time`], [`saturating_add`],
//! [`UnixMs`]),
//! group commit's queue ([`Batches`]), and a listing's page bounds
//! ([`MAX_PAGE`], [`page_start`]).
//! Users of a store need none of it: they call [`Pool`](crate::Pool).

pub use crate::clock::{
    MAX_UNIX_MS, UnixMs, from_unix_ms, max_time, saturating_add, truncate_ms, unix_ms,
};
pub use crate::follow::follow;
pub use crate::id::WaiterId;
pub use crate::server_clock::{DecidingClock, RATE_MARGIN_PPM, ServerClock};
pub use crate::session::{Heartbeat, SessionEnds, Unconfirmed};
pub use crate::slot::{SlotTable, lowest_free, lowest_free_n};
pub use crate::telemetry::busy_retried;
pub use crate::wait::{Changes, Claim};
/// Re-exported so that stores name the same `async_trait` as the trait.
pub use ::async_trait::async_trait;

mod arrival;
mod batch;
mod fork;
mod shared;
#[cfg(feature = "test-util")]
pub mod testing;
mod timeouts;
pub use crate::keys::{KEY_DIGEST_SEPARATOR, key_name, stored_key};
pub use crate::pool::{MAX_PAGE, page_start};
pub use crate::primitives::{InPlace, Parts, Store};
pub use crate::request::{BorrowRequest, TryBorrow, TryBorrowAll};
pub use arrival::Handed;
pub use batch::Batches;
pub use fork::ForkCheck;
pub use shared::{
    LeaseRow, MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, PlaceStep, WAITER_TTL, WAITER_TTL_MS,
    check_poll_interval, check_pool_size, check_prefix, holders_from_rows, millis, place_step,
};
pub use timeouts::{
    CALL_TIMEOUT, DEFAULT_SESSION_TIMEOUT, MIN_SESSION_TIMEOUT, bounded, check_session_timeout,
    session_timeout,
};

/// Tables and their columns as one line, `t(a uuid, b bigint); u(c text)`:
/// what a persistent store's [`Error::SchemaMismatch`](crate::Error::SchemaMismatch)
/// says it expected and found.
pub fn describe_tables<'a, C>(tables: impl IntoIterator<Item = (&'a str, C)>) -> String
where
    C: IntoIterator<Item = (&'a str, &'a str)>,
{
    tables
        .into_iter()
        .map(|(table, columns)| {
            let columns: Vec<String> = columns
                .into_iter()
                .map(|(name, kind)| format!("{name} {kind}"))
                .collect();
            format!("{table}({})", columns.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::from_unix_ms;

    #[test]
    fn a_refusal_waits_for_the_latest_of_the_earliest_expiries() {
        let at = |ms| Some(from_unix_ms(ms));
        assert_eq!(
            TryBorrowAll::refused([at(5), at(9), at(7)]),
            TryBorrowAll::Exhausted { next_expiry: at(9) }
        );
        assert_eq!(
            TryBorrowAll::refused([at(5), None, at(7)]),
            TryBorrowAll::Exhausted { next_expiry: None }
        );
        assert_eq!(
            TryBorrowAll::refused([]),
            TryBorrowAll::Exhausted { next_expiry: None }
        );
    }

    #[test]
    fn tables_are_described_on_one_line() {
        let tables = [
            ("t", vec![("a", "uuid"), ("b", "bigint")]),
            ("u", vec![("c", "text")]),
        ];
        assert_eq!(
            describe_tables(tables.iter().map(|(t, c)| (*t, c.iter().copied()))),
            "t(a uuid, b bigint); u(c text)"
        );
    }
}
