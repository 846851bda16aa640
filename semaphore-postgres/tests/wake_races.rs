//! Wake-ups that race a borrower taking its place in the shared queue.
//!
//! A borrower refused a slot takes a place in the queue, and from then on
//! looks again only when told (a notification on the store's channel) or at
//! its fallback poll. Whatever frees a slot must therefore either be seen
//! by that borrower's count (it then takes the slot instead of a place), or
//! see its place, or see it holding the pool's gate, and notify. The
//! borrower here is driven by hand, in a transaction of its own that stays
//! open after its function has decided, which is where a real borrower is
//! when its backend is descheduled between its last statement and its
//! commit; the notifications are read on a `LISTEN` connection of the test,
//! as another process's listener reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{BorrowOptions, Pool, PoolId, PostgresOptions, PostgresStore};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

/// How long a notification may take to come: generous, it only runs out
/// when none was sent.
const TOLD: Duration = Duration::from_secs(5);

struct Fixture {
    schema: String,
    pool: Pool,
}

async fn fixture(count: u32) -> Fixture {
    let schema = TestServer::fresh_schema();
    let options = PostgresOptions::default().schema(schema.clone());
    let store = PostgresStore::connect_with(TestServer::shared().url(), options)
        .await
        .unwrap();
    let pool = Pool::new(Arc::new(store), PoolId::from_name("raced"));
    pool.register(count).await.unwrap();
    Fixture { schema, pool }
}

impl Fixture {
    /// `text` with `{s}` naming the store's schema.
    fn sql(&self, text: &str) -> String {
        text.replace("{s}", &format!("\"{}\"", self.schema))
    }

    fn id(&self) -> Uuid {
        *self.pool.id().as_uuid()
    }

    /// A connection of the test's own.
    async fn connection(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    /// The payloads of the store's channel, as another process's listener
    /// receives them.
    async fn listen(&self) -> (Client, mpsc::UnboundedReceiver<String>) {
        let (client, mut connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        let _ = tx.send(n.payload().to_string());
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN semaphore_{}", self.schema))
            .await
            .unwrap();
        (client, rx)
    }

    /// Whether the pool's waiters were told to look (the pool's id, or
    /// every pool's `*`) before [`TOLD`] ran out.
    async fn told(&self, notices: &mut mpsc::UnboundedReceiver<String>) -> bool {
        let pool = self.id().to_string();
        let wait = async {
            while let Some(payload) = notices.recv().await {
                if payload == pool || payload == "*" {
                    return true;
                }
            }
            false
        };
        tokio::time::timeout(TOLD, wait).await.unwrap_or(false)
    }

    /// One attempt of a one-slot borrower that queues as waiter `waiter`,
    /// exactly as the store sends it: its status (0 granted, 1 refused).
    async fn attempt(&self, client: &tokio_postgres::Transaction<'_>, waiter: Uuid) -> i16 {
        let statement = self.sql(
            "SELECT o_status FROM {s}.semaphore_try_borrow($1, $2, 60000::bigint, $3,
                 NULL::text, NULL::text, NULL::bigint, NULL::integer, true, 1::bigint,
                 NULL::uuid, NULL::bigint, false)",
        );
        client
            .query_one(&statement, &[&self.id(), &Uuid::new_v4(), &waiter])
            .await
            .unwrap()
            .get(0)
    }

    /// Whether `waiter` has a place in the queue.
    async fn queued(&self, client: &Client, waiter: Uuid) -> bool {
        let statement = self.sql(
            "SELECT EXISTS (SELECT 1 FROM {s}.semaphore_waiters WHERE pool = $1 AND waiter = $2)",
        );
        client
            .query_one(&statement, &[&self.id(), &waiter])
            .await
            .unwrap()
            .get(0)
    }
}

/// A forced return frees a slot outside the gate: a borrower that counted
/// the slot held, and commits its place after the forced return has
/// looked for places to wake, is never told.
///
/// The interleaving, on a pool of one slot held at position 0:
/// 1. borrower B: refused, takes the gate and writes its place, not yet
///    committed;
/// 2. the forced return frees position 0, finds no place committed, sends
///    nothing and commits (it neither waits for the gate nor tries it);
/// 3. B commits: queued behind a free slot, and nobody tells it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_return_racing_a_new_place_tells_it() {
    let f = fixture(1).await;
    let _held = f.pool.try_borrow(TTL).await.unwrap().forget();
    let (_listening, mut notices) = f.listen().await;
    let watcher = f.connection().await;

    let mut borrower = f.connection().await;
    let b = borrower.transaction().await.unwrap();
    let waiter = Uuid::new_v4();
    assert_eq!(
        f.attempt(&b, waiter).await,
        1,
        "B is refused: the slot is held"
    );

    assert!(f.pool.force_return(0).await.unwrap().is_some());
    b.commit().await.unwrap();
    assert!(f.queued(&watcher, waiter).await);
    assert_eq!(f.pool.inspect().await.unwrap().in_use, 0);

    assert!(
        f.told(&mut notices).await,
        "a forced return freed the slot while B took its place, and nobody told B"
    );
}

/// A head that leaves the queue frees the slot a return had handed it:
/// like a forced return, outside the gate. A borrower that counted the
/// handed slot held, and commits its place after the leaving head looked
/// for places to wake, is never told.
///
/// The interleaving, on a pool of one slot:
/// 1. a return hands the slot to head H of another process (H's place
///    goes with it);
/// 2. borrower B: refused (H's slot is held), takes the gate and writes
///    its place, not yet committed;
/// 3. H's borrow is dropped: it leaves the queue, freeing its handed
///    slot, finds no place committed, sends nothing and commits;
/// 4. B commits: queued behind a free slot, and nobody tells it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_leaving_with_a_handed_slot_tells_a_new_place() {
    let f = fixture(1).await;
    let held = f.pool.try_borrow(TTL).await.unwrap().forget();
    let watcher = f.connection().await;

    // 1. H, queued as another process's one-slot borrower is, is handed
    // the slot by the return.
    let head = Uuid::new_v4();
    watcher
        .execute(
            &f.sql(
                "INSERT INTO {s}.semaphore_waiters
                     (pool, waiter, ticket, alive_until, backend, slots, ttl)
                 VALUES ($1, $2, nextval('{s}.semaphore_tickets'),
                     floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 600000,
                     NULL, 1, 60000)",
            ),
            &[&f.id(), &head],
        )
        .await
        .unwrap();
    assert!(f.pool.return_lease(held.id).await.unwrap());
    let handed: i64 = watcher
        .query_one(
            &f.sql("SELECT count(*) FROM {s}.semaphore_slots WHERE pool = $1 AND granted_to = $2"),
            &[&f.id(), &head],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(handed, 1, "the return handed the slot to H");
    let (_listening, mut notices) = f.listen().await;

    // 2. B is refused and writes its place.
    let mut borrower = f.connection().await;
    let b = borrower.transaction().await.unwrap();
    let waiter = Uuid::new_v4();
    assert_eq!(
        f.attempt(&b, waiter).await,
        1,
        "B is refused: H holds the slot"
    );

    // 3. H leaves, freeing the slot.
    let left: bool = watcher
        .query_one(
            &f.sql("SELECT {s}.semaphore_leave_queue($1, $2)"),
            &[&f.id(), &head],
        )
        .await
        .unwrap()
        .get(0);
    assert!(left);

    // 4. B commits.
    b.commit().await.unwrap();
    assert!(f.queued(&watcher, waiter).await);
    assert_eq!(f.pool.inspect().await.unwrap().in_use, 0);

    assert!(
        f.told(&mut notices).await,
        "H's handed slot was freed while B took its place, and nobody told B"
    );
}

/// Several stores (as several processes), each with one-slot and two-slot
/// borrowers looping borrow and return on a pool of two slots with waits:
/// every borrow is granted within its wait (a lost wake-up would leave a
/// waiter behind a free slot until its fallback poll, never past it), no
/// position is held twice at once, and each position's tokens grow in the
/// order its holders got it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_and_single_borrowers_of_several_stores_never_over_issue() {
    const STORES: usize = 3;
    const ROUNDS: usize = 15;
    let schema = TestServer::fresh_schema();
    let id = PoolId::from_name("mixed");
    let holders: Arc<[AtomicU32; 2]> = Arc::new(Default::default());
    let last_token: Arc<[std::sync::Mutex<u64>; 2]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for _ in 0..STORES {
        let options = PostgresOptions::default().schema(&schema).pool_size(6);
        let store = PostgresStore::connect_with(TestServer::shared().url(), options)
            .await
            .unwrap();
        let pool = Pool::new(Arc::new(store), id);
        pool.register(2).await.unwrap();
        for slots in [1, 1, 1, 2] {
            let (pool, holders, last_token) = (pool.clone(), holders.clone(), last_token.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let options = BorrowOptions::new().slots(slots);
                    let lease = pool
                        .borrow_with(TTL, Duration::from_secs(20), options)
                        .await
                        .expect("a borrow granted within its wait");
                    assert_eq!(lease.positions.len(), slots as usize);
                    for &position in lease.positions.iter() {
                        let before = holders[position as usize].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "position {position} held twice");
                        let mut last = last_token[position as usize].lock().unwrap();
                        assert!(
                            lease.token > *last,
                            "position {position}: token {} after {}",
                            lease.token,
                            *last
                        );
                        *last = lease.token;
                    }
                    tokio::task::yield_now().await;
                    for &position in lease.positions.iter() {
                        holders[position as usize].fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(lease.release().await.expect("a return"));
                }
                pool
            }));
        }
    }
    let mut pool = None;
    for task in tasks {
        pool = Some(task.await.unwrap());
    }
    let pool = pool.unwrap();
    let all_back = async {
        while pool.inspect().await.unwrap().in_use != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), all_back)
        .await
        .expect("a slot was never given back");
}
