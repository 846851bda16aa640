//! Processes whose clocks disagree, on one SQLite file (rule "Time"). The
//! machine's clock decides for every process:
//! a process given a clock that is off by more than `MAX_CLOCK_SKEW` is
//! refused, and can never take a live lease's slot or write a lease that
//! is already expired. The processes are the `holder` example.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const HOLDER: &str = env!("CARGO_BIN_EXE_holder");

/// Runs `holder skewed` with a clock `offset_ms` off, and returns what it
/// printed.
fn skewed(db: &std::path::Path, offset_ms: i64) -> String {
    let out = Command::new(HOLDER)
        .args([
            "skewed",
            db.to_str().unwrap(),
            "one",
            &offset_ms.to_string(),
        ])
        .output()
        .expect("running the holder");
    assert!(out.status.success(), "the holder failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_clock_is_off_is_refused_and_never_takes_a_live_slot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let pool = Pool::new(
        Arc::new(SqliteStore::open(&db).unwrap()),
        PoolId::from_name("one"),
    );
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(Duration::from_secs(7)).await.unwrap();

    // 10 s fast: it would judge the 7 s lease expired and take its slot.
    let fast = skewed(&db, 10_000);
    assert!(
        fast.starts_with("REFUSED clock skew") && fast.contains("ahead of"),
        "{fast}"
    );
    // 10 s slow: it would write a lease that is already expired.
    let slow = skewed(&db, -10_000);
    assert!(
        slow.starts_with("REFUSED clock skew") && slow.contains("behind"),
        "{slow}"
    );
    let state = pool.inspect().await.unwrap();
    assert_eq!(
        (state.in_use, held.position),
        (1, 0),
        "the live lease was taken"
    );

    // A clock within the tolerance is served, by the machine's clock.
    assert_eq!(skewed(&db, 20), "EXHAUSTED");
    drop(held);
    let within = skewed(&db, -20);
    assert!(within.starts_with("GRANTED 0 "), "{within}");
    // It forgot its lease, detaching it from its guard and its session:
    // the lease outlives the process, to its ttl.
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
}
