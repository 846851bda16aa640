//! Dropping a store gives back everything it took: its
//! threads, its file descriptors and its inotify instance. Alone in its
//! test binary, so that no other test's threads are counted.

use std::time::Duration;

use semaphore_sqlite::{SqliteStore, WakeUp};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn three_hundred_stores_opened_and_dropped_leave_no_thread_or_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    // The first open creates the file; count from there.
    drop(SqliteStore::open(&path).unwrap());
    let (threads_before, fds_before) = (threads(), fds());
    for _ in 0..300 {
        let store = SqliteStore::open(&path).unwrap();
        // Past 128 leaked stores the user's inotify instances run out and
        // the watch fails: every store must still watch the file.
        assert!(
            matches!(store.wake_up(), WakeUp::FileWatch { .. }),
            "{:?}",
            store.wake_up()
        );
        drop(store);
    }
    // The notifier's own thread ends a moment after its watcher is
    // dropped; wait for the counts to come back, up to a guard.
    let guard = std::time::Instant::now() + Duration::from_secs(10);
    while (threads(), fds()) > (threads_before, fds_before) && std::time::Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(10));
    }
    // At most as many as before: the first store's notifier may still
    // have been ending when the first count was taken.
    let (threads_after, fds_after) = (threads(), fds());
    assert!(
        threads_after <= threads_before,
        "threads leaked: {threads_before} -> {threads_after}"
    );
    assert!(
        fds_after <= fds_before,
        "file descriptors leaked: {fds_before} -> {fds_after}"
    );
}
