//! The loadable extension: how long a lease taken from Python lives.
//! Bound leases are the process's: they outlive the connection that
//! took them and end the moment the process does, however it ends (a
//! SIGKILL included), a forked child's with the child.

use std::time::Duration;

use extension_support::{Talking, file_with_pool};

mod extension_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_python_holders_slot_is_free_at_once() {
    let (_dir, db, pool) = file_with_pool("kill.db", 1).await;
    let mut python = Talking::start(
        &db,
        "print(q('SELECT semaphore_borrow(?, 600000)', sys.argv[3]), flush=True)\n\
         time.sleep(600)\n",
    );
    let line = python.line();
    assert!(
        line.contains("\"position\":0"),
        "the holder's lease: {line}"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    python.child.kill().unwrap();
    python.child.wait().unwrap();
    // Its ttl has ten minutes to run: only its process's end frees it.
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the killed holder's slot, at once");
    assert_eq!(lease.lease().position, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connections_lease_lives_as_long_as_its_process() {
    let (_dir, db, pool) = file_with_pool("close.db", 1).await;
    // The extension keeps its statements prepared between calls: the
    // close must still close the files (not leave the connection open).
    // The lease is the process's: it outlives the connection, and
    // ends with the process.
    let mut python = Talking::start(
        &db,
        "got = q('SELECT semaphore_borrow(?, 600000)', sys.argv[3])\n\
         q('SELECT semaphore_holders(?)', sys.argv[3])\n\
         c.close()\n\
         def opened():\n\
         \x20   for fd in os.listdir('/proc/self/fd'):\n\
         \x20       try: yield os.readlink('/proc/self/fd/' + fd)\n\
         \x20       except OSError: pass\n\
         files = {sys.argv[1] + end for end in ('', '-wal', '-shm')}\n\
         print('open' if files & set(opened()) else 'closed', flush=True)\n\
         sys.stdin.readline()\n",
    );
    let line = python.line();
    assert_eq!(
        line, "closed",
        "the connection's files stay open after close"
    );
    assert!(
        pool.borrow(Duration::from_secs(30), Duration::ZERO)
            .await
            .is_err(),
        "the lease ended with its connection, while its process lives"
    );
    assert!(python.end());
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the slot, once the process is gone");
    assert_eq!(lease.lease().position, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_childs_lease_ends_with_the_child() {
    let (_dir, db, pool) = file_with_pool("fork.db", 1).await;
    // The parent's holder is made before the fork (a borrow and a return),
    // as in a program that forks its workers (multiprocessing's `fork`):
    // the child's lease must be the child's, not the parent's, and end
    // when the child is killed while the parent lives.
    let mut parent = Talking::start(
        &db,
        "pool = sys.argv[3]\n\
         lease = json.loads(q('SELECT semaphore_borrow(?, 600000)', pool))\n\
         q('SELECT semaphore_return(?, ?)', pool, lease['lease'])\n\
         child = os.fork()\n\
         if child == 0:\n\
         \x20   d = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
         \x20   d.enable_load_extension(True)\n\
         \x20   d.load_extension(sys.argv[2])\n\
         \x20   d.execute('SELECT semaphore_borrow(?, 600000)', (pool,)).fetchone()\n\
         \x20   print('child holds', flush=True)\n\
         \x20   time.sleep(600)\n\
         \x20   os._exit(0)\n\
         sys.stdin.readline()\n\
         os.kill(child, 9)\n\
         os.waitpid(child, 0)\n\
         print('child killed', flush=True)\n\
         sys.stdin.readline()\n",
    );
    assert_eq!(parent.line(), "child holds");
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    parent.tell();
    assert_eq!(parent.line(), "child killed");
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the killed child's slot, while its parent lives");
    assert_eq!(lease.lease().position, 0);
    assert!(parent.end());
}
