//! Planted bugs for the fault suite (feature `fault-mutants`): a test
//! suite is judged by the bugs it catches (cargo-mutants' rule), so the
//! fault suite runs builds that break, one at a time, what "the holder knows first" rests on,
//! and fails unless its checker reports violations.
//!
//! The feature compiles the switch in; the environment variable
//! `SEMAPHORE_MUTANT`, read once per process, picks the bug:
//!
//! | value | the bug |
//! | --- | --- |
//! | `is_held_deadline` | [`LeaseGuard::is_held`](crate::LeaseGuard::is_held) ignores the lease's expiry and its session: it says `!is_lost()` |
//! | `heartbeat_silent` | a session's heartbeat opens the session and then sends nothing, while it tells the holder each beat landed |
//! | `session_early` | the store judges a session ended 1 s before its holder does (every beat asks the store for a timeout 1 s shorter than the holder counts) |
//! | `lost_late` | [`LeaseGuard::lost`](crate::LeaseGuard::lost) resolves 3 s late (with keep-alive and without) |
//! | `handed_unconfirmed` | a head holds a lease handed to it on arrival ([`Handed::hold`](crate::store::Handed::hold)) with its session unbounded, and never confirms it to the store |
//!
//! Unset, or any other value, plants nothing. The feature refuses to
//! build without debug assertions, so no release build carries it.

#[cfg(not(debug_assertions))]
compile_error!(
    "the `fault-mutants` feature plants bugs for the fault suite's tests; \
     it is never built without debug assertions (a release build)"
);

use std::sync::OnceLock;

/// One planted bug (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutant {
    IsHeldDeadline,
    HeartbeatSilent,
    SessionEarly,
    LostLate,
    HandedUnconfirmed,
}

/// Whether `mutant` is the one this process runs with.
pub(crate) fn planted(mutant: Mutant) -> bool {
    static CHOSEN: OnceLock<Option<Mutant>> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var("SEMAPHORE_MUTANT").as_deref() {
        Ok("is_held_deadline") => Some(Mutant::IsHeldDeadline),
        Ok("heartbeat_silent") => Some(Mutant::HeartbeatSilent),
        Ok("session_early") => Some(Mutant::SessionEarly),
        Ok("lost_late") => Some(Mutant::LostLate),
        Ok("handed_unconfirmed") => Some(Mutant::HandedUnconfirmed),
        _ => None,
    }) == Some(mutant)
}
