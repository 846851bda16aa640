//! The cases a networked store (PostgreSQL, Redis, MySQL) runs on a real
//! server beside the suite, expanded by [`networked_store_conformance!`]:
//! machines whose clocks disagree (rule "Time"), and a crashed
//! store's session.

/// Expands the networked stores' cases on a real server into
/// `#[tokio::test]` functions; place it at the top level of an integration
/// test file.
///
/// - `fresh`: a closure making a fresh place name (a schema or a prefix)
///   that the stores of one case share.
/// - `connect`: an async closure from that name, an
///   `Option<Arc<dyn Clock>>` (this process's clock, else the default) and
///   an `Option<Duration>` (the session timeout, else the default) to the
///   store, which has a `server_clock()` method like the stores of this
///   workspace.
/// - `server_now`: an async closure reading the server's clock through a
///   `&` store.
/// - `end_session`: an async closure from the place name and a
///   [`SessionId`](crate::SessionId) that deletes that session's record
///   as an operator would (its own connection, plain SQL or commands).
/// - `pushes`: whether the store tells a holder of a session ended by
///   another through its wake-up channel (else at its next heartbeat).
///
/// The clocks case connects two stores whose process clocks are 30 s ahead
/// and 30 s behind, checks that each measured its offset to within 1 s,
/// and runs
/// [`clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease`](crate::conformance::clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease);
/// the session case runs
/// [`r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay`](crate::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay)
/// with a session timeout of 1 s; the ended session's case runs
/// [`r17_a_session_ended_by_another_tells_its_holder_why`](crate::conformance::r17_a_session_ended_by_another_tells_its_holder_why).
#[macro_export]
macro_rules! networked_store_conformance {
    (
        fresh: $fresh:expr,
        connect: $connect:expr,
        server_now: $now:expr,
        end_session: $end:expr,
        pushes: $pushes:expr $(,)?
    ) => {
        /// A session an operator deleted: its holder is told why, through
        /// the wake-up channel where the store has one.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_session_ended_by_another_tells_its_holder_why() {
            let place: String = ($fresh)();
            let thirty = ::std::time::Duration::from_secs(30);
            let ended = place.clone();
            $crate::conformance::r17_a_session_ended_by_another_tells_its_holder_why(
                || {
                    let place = place.clone();
                    async move {
                        let store = ($connect)(place, None, Some(thirty)).await;
                        ::std::sync::Arc::new(store) as ::std::sync::Arc<dyn $crate::store::Store>
                    }
                },
                move |id: $crate::SessionId| ($end)(ended, id),
                $pushes,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease() {
            const OFF: ::std::time::Duration = ::std::time::Duration::from_secs(30);
            let within = ::std::time::Duration::from_secs(1);
            let place: String = ($fresh)();
            let ahead: ::std::sync::Arc<dyn $crate::Clock> =
                ::std::sync::Arc::new($crate::conformance::OffsetClock::ahead(OFF));
            let behind: ::std::sync::Arc<dyn $crate::Clock> =
                ::std::sync::Arc::new($crate::conformance::OffsetClock::behind(OFF));
            let fast = ($connect)(place.clone(), Some(ahead), None).await;
            let slow = ($connect)(place, Some(behind), None).await;
            // Each view corrects its machine's error: the server is 30 s
            // behind the fast machine and 30 s ahead of the slow one (to
            // within a round trip).
            let (off, ahead) = fast.server_clock().unwrap().offset();
            assert!(!ahead && off.abs_diff(OFF) < within, "{off:?}");
            let (off, ahead) = slow.server_clock().unwrap().offset();
            assert!(ahead && off.abs_diff(OFF) < within, "{off:?}");
            let (fast, slow) = (::std::sync::Arc::new(fast), ::std::sync::Arc::new(slow));
            let id = $crate::PoolId::from_name("one");
            let on_fast = $crate::Pool::new(fast, id);
            let on_slow = $crate::Pool::new(slow.clone(), id);
            $crate::conformance::clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease(
                &on_fast,
                &on_slow,
                async || ($now)(&*slow).await,
            )
            .await;
        }

        /// A crashed store's session ends at its timeout; its bound lease
        /// frees, its holder is told first, its unbound and forgotten
        /// leases stay, and no one takes a live session's leases.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_crashed_stores_bound_lease_frees_and_its_unbound_one_stays() {
            let place: String = ($fresh)();
            let second = ::std::time::Duration::from_secs(1);
            $crate::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
                || {
                    let place = place.clone();
                    async move {
                        let store = ($connect)(place, None, Some(second)).await;
                        ::std::sync::Arc::new(store) as ::std::sync::Arc<dyn $crate::store::Store>
                    }
                },
                |store| store.session().unwrap().abandon(),
                ::std::time::Duration::from_secs(20),
            )
            .await;
        }
    };
}
