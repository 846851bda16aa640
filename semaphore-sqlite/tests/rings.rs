//! The wake-up that follows the commit: a process that returns a
//! lease rings the processes whose heads wait on the pool, so that they
//! need neither the file watch nor the poll. The waiting process here runs
//! in test mode with both turned off: if the ring did not come, its borrow
//! would time out.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::{Error, Pool, PoolId, SqliteOptions, SqliteStore};

const CHILD_DB: &str = "SEMAPHORE_RINGS_TEST_DB";
const TTL: Duration = Duration::from_secs(60);

/// The other process: holds the pool's one slot, says `HELD`, returns it
/// on a line from stdin, says `RETURNED`.
async fn holder(db: &str) {
    let store = Arc::new(SqliteStore::open(db).unwrap());
    let pool = Pool::new(store, PoolId::from_name("rings"));
    let lease = pool.try_borrow(TTL).await.unwrap();
    println!("HELD");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    lease.release().await.unwrap();
    println!("RETURNED");
    std::io::stdout().flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_in_another_process_rings_the_waiting_head() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        return holder(&db).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rings.db");
    // A store opened and dropped first: its socket's name must be free
    // again for the next one.
    drop(SqliteStore::open(&db).unwrap());
    let store =
        Arc::new(SqliteStore::open_with(&db, SqliteOptions::default().rings_only()).unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name("rings"));
    pool.register(1).await.unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_return_in_another_process_rings_the_waiting_head",
            "--nocapture",
        ])
        .env(CHILD_DB, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = move |word: &str| {
        // The test harness prints its own lines around the test's.
        from_child
            .by_ref()
            .map(Result::unwrap)
            .any(|line| line == word)
    };
    assert!(said("HELD"), "the holder did not borrow");

    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move {
            let lease = pool.borrow(TTL, Duration::from_secs(30)).await?;
            Ok::<_, Error>(lease.position)
        }
    });
    // Return only once the waiter's head is queued in the file.
    while store.queue_heads(pool.id()).await.unwrap() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Anyone on the machine may send to the socket: junk of every size,
    // the empty datagram first, must leave the listener running.
    junk_to_own_socket();
    writeln!(to_child, "return").unwrap();
    assert!(said("RETURNED"), "the holder did not return");

    match waiter.await.unwrap() {
        Ok(position) => assert_eq!(position, 0),
        Err(Error::Exhausted { .. }) => panic!("the return's ring never woke the waiting head"),
        Err(e) => panic!("borrow failed: {e}"),
    }
    assert!(child.wait().unwrap().success());
}

/// Sends datagrams of every size from 0 to 100 bytes (none a ring) to this
/// process's wake-up socket, and waits until the listener has read them:
/// the socket queues at most `net.unix.max_dgram_qlen` datagrams (10 by
/// default), and a ring sent while junk fills it is dropped (rings never
/// block), which would fail this test for the junk's sake, not the ring's.
fn junk_to_own_socket() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let namespace = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let name = format!(
        "semaphore-sqlite/1/{}/{}",
        namespace.display(),
        std::process::id()
    );
    let to = SocketAddr::from_abstract_name(name).unwrap();
    let socket = UnixDatagram::unbound().unwrap();
    for size in 0..=100 {
        let junk = vec![0xA5u8; size];
        socket.send_to_addr(&junk, &to).unwrap();
    }
    wait_until_the_listener_sleeps();
}

/// Waits until this process's wake-up thread sleeps. It sleeps only in its
/// receive, and only when the socket's queue is empty; each send above
/// woke it before returning, so once it sleeps, it has read them all.
fn wait_until_the_listener_sleeps() {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if name.trim_end() != "sqlite-doorbell" {
                continue;
            }
            let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state == Some('S') {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the wake-up thread did not go back to its receive after the junk"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
