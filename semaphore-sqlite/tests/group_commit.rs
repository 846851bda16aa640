//! Group commit (`Synchronous::Full`) when one write's failure makes
//! SQLite roll back the whole transaction (a trigger's `RAISE(ROLLBACK)`
//! here; a full disk, an I/O error or no memory do the same): every write
//! of the batch is answered as the file has it. Before, the writes after
//! the failed one ran outside any transaction and committed one by one,
//! then were answered with the commit's failure: a return reported failed
//! had landed (found by a hostile test).

use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::rusqlite::Connection;
use semaphore_sqlite::{
    BorrowOptions, Error, Pool, PoolId, SqliteOptions, SqliteStore, Synchronous,
};

const TTL: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_rolls_back_the_batch_leaves_every_answer_true_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let options = SqliteOptions::default().synchronous(Synchronous::Full);
    let store = Arc::new(SqliteStore::open_with(&path, options).unwrap());
    let main = Pool::new(store.clone(), PoolId::from_name("main"));
    let other = Pool::new(store.clone(), PoolId::from_name("other"));
    main.register(8).await.unwrap();
    other.register(8).await.unwrap();
    let mut guards = Vec::new();
    for _ in 0..4 {
        guards.push(main.borrow_owned(TTL, Duration::ZERO).await.unwrap());
    }
    let outside = Connection::open(&path).unwrap();
    outside
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON semaphore_leases
             WHEN NEW.owner = 'poison' BEGIN SELECT RAISE(ROLLBACK, 'poisoned'); END;",
        )
        .unwrap();
    // The file's write lock held outside: the first write below waits for
    // it, and the next ones queue behind it for one batch.
    outside.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut guards = guards.into_iter();
    let mut releases = Vec::new();
    let first = guards.next().unwrap();
    releases.push(tokio::spawn(first.release()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = guards.next().unwrap();
    releases.push(tokio::spawn(second.release()));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let poisoned = tokio::spawn(async move {
        other
            .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().owner("poison"))
            .await
            .map(|guard| guard.forget())
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let third = guards.next().unwrap();
    releases.push(tokio::spawn(third.release()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    outside.execute_batch("COMMIT").unwrap();

    match poisoned.await.unwrap() {
        Err(e) => assert!(
            e.chain().to_string().contains("poisoned"),
            "not its own error: {}",
            e.chain()
        ),
        Ok(lease) => panic!("the poisoned borrow was granted: {lease:?}"),
    }
    let mut returned = 0;
    for release in releases {
        match release.await.unwrap() {
            Ok(true) => returned += 1,
            Err(e @ Error::Storage { .. }) if e.is_retryable() => {}
            other => panic!("a release answered {other:?}"),
        }
    }
    let fresh = Arc::new(SqliteStore::open(&path).unwrap());
    let in_use = Pool::new(fresh, PoolId::from_name("main"))
        .inspect()
        .await
        .unwrap()
        .in_use;
    assert_eq!(
        in_use,
        4 - returned,
        "{returned} of 4 leases answered returned, {in_use} held in the file"
    );
    drop(guards);
}
