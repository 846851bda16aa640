//! a busy pool keeps every slot in use. 1,000 tasks on
//! one store borrow from a pool of count 5 with a wait, hold 0 to 2 ms and
//! return, for 3.5 s: at some instant all 5 slots are held (no slot sits
//! idle for the whole run while tasks wait, as it did when every return
//! that came while the queue's head was asking left its slot free for the
//! head to take one store call at a time), never more than 5, and no
//! lease is lost or left to nobody.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

const COUNT: u32 = 5;
const TASKS: u32 = 1_000;
const RUN: Duration = Duration::from_millis(3_500);
const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_pool_keeps_every_slot_in_use() {
    let options = PostgresOptions::default().schema(TestServer::fresh_schema());
    let store = PostgresStore::connect_with(TestServer::shared().url(), options)
        .await
        .unwrap();
    let pool = Pool::new(Arc::new(store), PoolId::from_name("busy"));
    pool.register(COUNT).await.unwrap();
    let (holding, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let end = Instant::now() + RUN;
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (pool, holding, most) = (pool.clone(), holding.clone(), most.clone());
            tokio::spawn(async move {
                let mut round = 0;
                while Instant::now() < end {
                    let lease = pool.borrow(LONG, LONG).await.unwrap();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= COUNT, "{now} holders of {COUNT} slots (R10)");
                    let hold = (u64::from(task) * 7 + round) % 3;
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    holding.fetch_sub(1, Ordering::SeqCst);
                    assert!(lease.release().await.unwrap(), "the lease was lost");
                    round += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert_eq!(
        most, COUNT,
        "at most {most} of {COUNT} slots were ever held at once"
    );
    // No slot was left granted to nobody (held to its ttl): once the
    // returns still under way end, all of them can be borrowed again.
    let mut again = Vec::new();
    for _ in 0..COUNT {
        again.push(pool.borrow(LONG, Duration::from_secs(10)).await.unwrap());
    }
}
