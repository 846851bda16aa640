//! The conformance suite every store must pass (feature `conformance`).
//!
//! A store is done when it passes this suite, not when it compiles (the
//! object_store model). The cases are plain async functions named after the
//! rule they check; [`store_conformance!`](crate::store_conformance)
//! expands every one of them into a `#[test]` for a store, so no store can
//! skip a case and the suite is never copied.
//!
//! ```ignore
//! // tests/conformance.rs of a store crate
//! async fn make(clock: Arc<ManualClock>) -> Fixture {
//!     Fixture::new(Arc::new(MyStore::with_clock(clock.clone())), clock)
//! }
//! semaphore_core::store_conformance!(make);
//! ```
//!
//! Every case runs on a two-worker tokio runtime with a [`ManualClock`], so
//! expiries and wait deadlines pass only when the case advances the clock:
//! no case sleeps.

mod basics;
mod blocking;
mod cancellation;
mod concurrency;
mod contended;
mod drain;
mod edges;
mod gate;
mod held;
mod in_flight;
mod keepalive;
mod keys;
mod listing;
mod liveness;
mod lost;
pub mod model;
mod multi;
mod networked;
mod offset;
mod renew;
mod waiting;
mod weights;

pub use basics::*;
pub use blocking::*;
pub use cancellation::*;
pub use concurrency::*;
pub use contended::*;
pub use drain::*;
pub use edges::*;
pub use gate::{GatedStore, Stop};
pub use held::*;
pub use in_flight::*;
pub use keepalive::*;
pub use keys::*;
pub use listing::*;
pub use liveness::*;
pub use lost::*;
pub use multi::*;
pub use offset::{OffsetClock, clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease};
pub use renew::*;
pub use waiting::*;
pub use weights::*;

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::{clock::ManualClock, id::PoolId, pool::Pool, store::Store};

/// A store under test, on the manual clock it was made with.
pub struct Fixture {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// The clock the store was given.
    pub clock: Arc<ManualClock>,
    /// Whether the store grants a free slot to a call made outside any
    /// tokio runtime (one that needs no I/O driver for it), rather than
    /// failing with [`Error::NoRuntime`](crate::Error::NoRuntime).
    pub grants_outside_a_runtime: bool,
    keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl Fixture {
    /// A fixture for `store`, which must have been made with `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        Self {
            store,
            clock,
            grants_outside_a_runtime: false,
            keep: Vec::new(),
        }
    }

    /// Declares that the store grants a free slot outside any runtime (the
    /// memory and SQLite stores do); without it, the suite expects
    /// [`Error::NoRuntime`](crate::Error::NoRuntime) there.
    pub fn grants_outside_a_runtime(mut self) -> Self {
        self.grants_outside_a_runtime = true;
        self
    }

    /// Keeps `value` (a temporary directory, say) alive as long as the
    /// fixture.
    pub fn keep_alive(mut self, value: impl Any + Send + Sync) -> Self {
        self.keep.push(Box::new(value));
        self
    }

    /// A handle on a fresh pool of this store, named `name`.
    pub fn pool(&self, name: &str) -> Pool {
        Pool::new(self.store.clone(), PoolId::from_name(name))
    }
}

/// Runs one case: a two-worker runtime, a fresh [`ManualClock`], the store
/// from `make`, and a 60 s guard against a hang (a hang is a failure, not a
/// timing claim).
pub fn run<M, MF, C, CF>(make: M, case: C)
where
    M: FnOnce(Arc<ManualClock>) -> MF,
    MF: Future<Output = Fixture>,
    C: FnOnce(Fixture) -> CF,
    CF: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case");
    runtime.block_on(async move {
        let fixture = make(Arc::new(ManualClock::new())).await;
        tokio::time::timeout(Duration::from_secs(60), case(fixture))
            .await
            .expect("the case hung for 60 s");
    });
}

/// Expands the whole conformance suite into `#[test]` functions for a store.
///
/// `$make` is an async function (or closure returning a future) from
/// `Arc<ManualClock>` to [`Fixture`](crate::conformance::Fixture). Place the
/// macro at the top level of an integration test file.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make;
            r1_pool_id_from_name_names_one_pool_for_every_handle,
            r2_register_creates_then_sets_count,
            r2_count_above_max_is_rejected_and_nothing_changes,
            r2_count_zero_grants_nothing,
            r2_lowering_count_revokes_nothing_and_raising_it_back_grants,
            r2_raising_count_wakes_waiters_at_once,
            r3_inspect_reports_one_instant_and_unknown_is_not_found,
            r4_delete_is_idempotent_and_invalidates_leases,
            r4_delete_fails_waiters_at_once,
            r5_ttl_zero_is_invalid_and_nothing_changes,
            r5_unknown_pool_fails_at_once_whatever_the_wait,
            r5_wait_zero_on_exhausted_pool_fails_at_once,
            r5_waiter_fails_exhausted_when_wait_runs_out,
            r5_ttl_and_wait_are_clamped,
            r5_waiter_is_woken_by_expiry,
            r5_new_head_is_woken_by_expiry_of_the_slot_just_granted,
            r6_grants_lowest_free_and_reuses_freed_slot_next,
            r6_positions_at_or_above_lowered_count_are_not_handed_out,
            r6_an_expired_slot_goes_before_a_higher_free_one,
            r7_expired_lease_does_not_count,
            r8_return_reports_only_active_leases,
            r8_return_wakes_a_waiter,
            r9_tokens_grow_across_delete_and_register_again,
            r10_64_tasks_on_4_slots_never_over_issue,
            r11_ten_waiters_are_served_in_arrival_order,
            r11_newcomer_does_not_jump_the_queue,
            r11_a_first_ask_in_flight_is_not_overtaken,
            r12_dropped_waiter_leaves_queue_and_next_is_served,
            r12_borrow_dropped_after_first_poll_holds_nothing,
            r12_grant_landing_after_the_drop_is_returned_at_once,
            r11_returns_meet_the_heads_own_call_in_flight,
            r15_a_count_read_on_a_removed_queue_does_not_weigh_the_next,
            keyed_hand_off_to_a_dropped_borrower_keeps_the_other_borrowers_lease,
            r15_a_raise_holds_back_a_multi_pool_call_in_flight,
            r12_matrix_borrow_dropped_while_queued,
            r12_matrix_borrow_dropped_before_the_store_acts,
            r12_matrix_borrow_dropped_after_the_store_granted,
            r12_matrix_guard_dropped_just_after_the_grant,
            r13_guard_returns_on_drop_and_forget_keeps_until_ttl,
            r13_owned_guard_works_in_spawned_task,
            r14_bad_input_names_field_and_range,
            renew_extends_a_live_lease_keeping_position_and_token,
            renew_of_an_expired_lease_is_lease_expired,
            renew_of_a_returned_unknown_or_deleted_lease_fails,
            renew_shortening_a_lease_wakes_a_waiter_at_the_new_expiry,
            renew_through_a_guard_updates_the_guard,
            renew_by_id_needs_only_the_lease_id,
            key_retry_after_a_lost_reply_returns_the_same_lease,
            key_borrows_anew_after_return_or_expiry_and_is_per_pool,
            key_retry_does_not_wait_behind_queued_borrowers,
            key_is_kept_with_its_request_digest_atomically,
            key_retry_dropped_in_its_store_call_keeps_the_lease,
            holders_lists_active_leases_with_owner_labels,
            labels_out_of_range_are_refused_and_nothing_changes,
            force_return_frees_a_position_and_wakes_a_waiter,
            waiting_counts_queued_borrowers,
            borrow_all_grants_one_slot_of_each_in_order,
            borrow_all_takes_nothing_unless_it_takes_all,
            borrow_all_waits_for_the_last_pool_under_one_deadline,
            borrow_all_dropped_leaves_every_queue,
            pool_set_refuses_no_pools_and_duplicates,
            borrow_all_in_opposite_orders_never_deadlocks_or_over_issues,
            limits_raised_to_the_maximum_saturate_and_never_wrap,
            r2_the_largest_count_costs_its_leases_not_its_slots,
            calls_outside_a_runtime_fail_clearly_or_work,
            r12_grant_in_flight_when_its_runtime_is_dropped_is_returned,
            r12_head_dropped_while_refused_in_the_store_holds_no_one_back,
            r12_head_dropped_after_a_return_served_it_passes_the_slot_on,
            blocking_api_serves_plain_threads_and_refuses_inside_a_runtime,
            keep_alive_holds_a_one_second_lease_through_ten_seconds_of_work,
            keep_alive_signals_each_way_of_losing_the_lease,
            r15_weighted_borrow_takes_the_n_lowest_free_as_one_lease,
            r15_weighted_lease_is_returned_renewed_forced_and_expired_whole,
            r15_slots_zero_or_above_max_count_are_refused_and_nothing_changes,
            r15_more_slots_than_the_count_hold_back_no_one_until_a_raise,
            r15_a_count_read_before_a_raise_does_not_set_aside_again,
            r15_weighted_head_is_not_overtaken_by_smaller_or_larger_borrowers,
            r15_dropped_weighted_waiter_lets_smaller_ones_behind_it_move_up,
            r15_weighted_key_retry_returns_the_same_lease,
            r15_borrow_all_takes_each_pools_weight,
            r15_lowered_count_counts_every_slot_held,
            drain_stops_new_grants_and_lets_holders_return_and_renew,
            drain_fails_waiters_at_once_unless_they_wait_while_draining,
            drain_fails_borrowers_behind_a_head_that_waits_it_out,
            drain_fails_a_borrow_without_a_wait_behind_a_head_that_waits_it_out,
            borrow_all_fails_whole_on_a_draining_pool,
            r11_a_held_place_outlives_its_asker_within_its_hold,
            r12_a_held_place_not_polled_within_its_hold_is_dropped,
            r11_held_places_know_their_place_and_are_woken_by_a_return,
            r11_a_held_place_waits_behind_borrowers_queued_before_it,
            r11_a_held_place_keeps_its_turn_through_a_drain,
            held_places_are_counted_and_listed_with_their_wait,
            r15_a_held_place_for_more_slots_than_the_count_holds_back_no_one,
            a_dropped_guards_failed_return_is_tried_again,
            listing_an_empty_store_lists_nothing_and_refuses_bad_limits,
            listing_pages_through_every_pool_in_id_order,
            listing_goes_on_past_a_pool_deleted_between_pages,
        );
    };
}

/// Expands the cases for a store that keeps a queue of heads shared by
/// processes (the *Queued heads* part of
/// [`Store`](crate::store::Store)'s contract) and answers a retried
/// attempt with the grant it made ([`BorrowRequest::retried`](crate::store::BorrowRequest::retried)),
/// into `#[test]` functions.
/// A store shared by processes runs them beside
/// [`store_conformance!`](crate::store_conformance); an in-process store,
/// which keeps no queue of its own, does not.
#[macro_export]
macro_rules! store_queue_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make;
            r15_a_store_queue_owes_each_head_its_weight,
            lost_reply_of_a_queued_borrow_is_answered_with_the_grant,
            lost_reply_of_a_first_attempt_is_returned,
            lost_reply_of_a_waiting_borrows_first_attempt_is_retried,
            a_contended_pool_is_asked_with_a_place_from_the_start,
        );
    };
}

/// Expands the model-based property test
/// ([`conformance::model`](crate::conformance::model)) into one `#[test]`
/// for a store: `PROPTEST_CASES` random sequences (default 10,000, or the
/// count given as a second argument, for a store whose round trips make
/// 10,000 too slow for every run), each compared step by step with the
/// rules' model. Failing sequences are saved in the calling crate's
/// `proptest-regressions/model.txt`; commit them.
#[macro_export]
macro_rules! store_model {
    ($make:expr) => {
        $crate::store_model!($make, $crate::conformance::model::DEFAULT_CASES);
    };
    ($make:expr, $cases:expr) => {
        #[test]
        fn model_based_sequences_match_the_spec_model() {
            $crate::conformance::model::run_model_cases(
                $make,
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/proptest-regressions/model.txt"
                ),
                $cases,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run($make, $crate::conformance::$case);
            }
        )*
    };
}

/// Spawns a borrower of `pool` for `ttl` that waits up to `wait` and keeps
/// what it gets (the lease is not returned when the task ends).
pub(crate) fn spawn_borrow(
    pool: &Pool,
    ttl: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<crate::error::Result<crate::lease::Lease>> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.borrow(ttl, wait).await.map(|g| g.forget()) })
}

/// Yields until `pool` has `n` waiters in this process. Cases use it to know
/// a spawned borrower has queued before they act; it never sleeps.
pub async fn until_waiting(pool: &Pool, n: usize) {
    while pool.waiting().count != n {
        tokio::task::yield_now().await;
    }
}

/// Yields until `pool`'s `in_use` is `n`, for effects that run on a spawned
/// task (a guard's return by a store that does I/O).
pub async fn until_in_use(pool: &Pool, n: u32) {
    while pool.inspect().await.expect("inspect").in_use != n {
        tokio::task::yield_now().await;
    }
}

/// One second.
pub const SEC: Duration = Duration::from_secs(1);
