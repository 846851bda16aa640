//! The fault suite can fail: with a bug planted in the library (feature
//! `mutants`, see `semaphore_core`'s `fault-mutants`), a run must report
//! violations. Each bug breaks one thing R17 rests on, on each networked
//! store: the local deadline of `is_held()`, the heartbeat (it fails
//! silently), and the store's session check (a session judged ended 1 s
//! early); and, on PostgreSQL, the lost signal (3 s late: the signal is
//! the core's, the same on every store). A planted bug the checker does not see is a failing test.
//!
//! Each run is `SEMAPHORE_FAULTS_MUTANT_SECONDS` (20 by default) of the
//! network faults that cut a holder off (blips, partitions, cuts), aimed
//! at holders in long holds while others wait.

use std::time::Duration;

use semaphore_faults::event::FaultKind;
use semaphore_faults::{Config, StoreKind, run};

fn assert_caught(store: StoreKind, mutant: &str) {
    let mut config = Config::from_env(
        store,
        env!("CARGO_BIN_EXE_faults-holder"),
        env!("CARGO_TARGET_TMPDIR"),
    );
    config.mutant = Some(mutant.into());
    config.min_takeovers = 0;
    config.duration = Duration::from_secs(
        std::env::var("SEMAPHORE_FAULTS_MUTANT_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    config.faults = Some(vec![FaultKind::Blip, FaultKind::Partition, FaultKind::Cut]);
    let outcome = run(config);
    assert!(
        !outcome.report.violations.is_empty(),
        "the checker saw no violation with the planted bug {mutant} on {}: \
         the fault suite cannot see it\n{}",
        store.name(),
        outcome.summary
    );
    println!("{mutant} on {}: caught\n{}", store.name(), outcome.summary);
}

macro_rules! mutant_tests {
    ($($name:ident: $store:ident, $mutant:literal;)*) => {$(
        #[test]
        fn $name() {
            assert_caught(StoreKind::$store, $mutant);
        }
    )*};
}

mutant_tests! {
    postgres_is_held_deadline: Postgres, "is_held_deadline";
    postgres_heartbeat_silent: Postgres, "heartbeat_silent";
    postgres_session_early: Postgres, "session_early";
    redis_is_held_deadline: Redis, "is_held_deadline";
    redis_heartbeat_silent: Redis, "heartbeat_silent";
    redis_session_early: Redis, "session_early";
    mysql_is_held_deadline: Mysql, "is_held_deadline";
    mysql_heartbeat_silent: Mysql, "heartbeat_silent";
    mysql_session_early: Mysql, "session_early";
    postgres_lost_late: Postgres, "lost_late";
}
