//! The loadable extension refusing what would go wrong: a file of another
//! shape, a file replaced under a connection, shadowing temporary tables,
//! calls inside a writing statement, a key reused for another request,
//! SQLite's BUSY (an error, never a NULL "no slot"), and interrupts that
//! would leave a call's own transaction open.

use extension_support::{POOL, Talking, python_on, rust_store, said};

mod extension_support;

#[test]
fn a_file_of_another_shape_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    let conn = semaphore_sqlite::rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE semaphore_pools (name TEXT)")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&db).unwrap();
    let out = python_on(&db, "print('loaded')\n").output().unwrap();
    assert!(!out.status.success(), "loaded into a file of another shape");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("semaphore_pools"),
        "says what it found: {stderr}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before, "nothing written");
}

#[test]
fn a_program_loads_it_on_many_connections_and_hostile_uses_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("many.db");
    let other = dir.path().join("other.db");
    let out = python_on(
        &db,
        "def loaded(path):\n\
         \x20   d = sqlite3.connect(path, timeout=30, isolation_level=None)\n\
         \x20   d.enable_load_extension(True)\n\
         \x20   d.load_extension(sys.argv[2])\n\
         \x20   return d\n\
         def fails(conn, sql, *args):\n\
         \x20   try:\n\
         \x20       conn.execute(sql, args).fetchall()\n\
         \x20   except sqlite3.Error as e:\n\
         \x20       return str(e)\n\
         \x20   raise SystemExit('not refused: ' + sql)\n\
         q(\"SELECT semaphore_register('p', 2)\")\n\
         d, e = loaded(sys.argv[1]), loaded(sys.argv[3])\n\
         print(json.loads(d.execute(\"SELECT semaphore_inspect('p')\").fetchone()[0])['count'])\n\
         e.execute(\"SELECT semaphore_register('p', 1)\")\n\
         d.close()\n\
         d = loaded(sys.argv[1])\n\
         print(d.execute(\"SELECT json_extract(semaphore_borrow('p', 60000), '$.position')\").fetchone()[0])\n\
         c.execute('CREATE TABLE log (lease TEXT)')\n\
         print(fails(c, \"INSERT INTO log SELECT semaphore_borrow('p', 60000)\"))\n\
         q(\"SELECT semaphore_borrow('p', 60000, 1, NULL, 'job-1')\")\n\
         print(fails(c, \"SELECT semaphore_borrow('p', 60000, 1, NULL, 'job-1', 0)\"))\n\
         c.execute('CREATE TEMP TABLE semaphore_leases (x)')\n\
         print(fails(c, \"SELECT semaphore_borrow('p', 60000)\"))\n\
         c.execute('DROP TABLE temp.semaphore_leases')\n\
         print(json.loads(q(\"SELECT semaphore_inspect('p')\"))['in_use'])\n\
         q(\"SELECT semaphore_register('p', 3)\")\n\
         c.execute('BEGIN IMMEDIATE')\n\
         rolled = json.loads(q(\"SELECT semaphore_borrow('p', 60000)\"))['token']\n\
         c.execute('ROLLBACK')\n\
         then = json.loads(d.execute(\"SELECT semaphore_borrow('p', 60000)\").fetchone()[0])['token']\n\
         print('above' if then > rolled else f'token {rolled} granted again')\n",
    )
    .arg(&other)
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines[..2], ["2", "0"], "{said}");
    assert!(
        lines[2].contains("cannot run inside a statement that writes"),
        "{said}"
    );
    assert!(
        lines[3].contains("key"),
        "a key reused for another request: {said}"
    );
    assert!(
        lines[4].contains("temporary table semaphore_leases"),
        "{said}"
    );
    assert_eq!(lines[5], "2", "{said}");
    assert_eq!(
        lines[6], "above",
        "a token rolled back on one connection, granted through another"
    );
}

#[test]
fn an_interrupted_call_leaves_no_transaction_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("interrupt.db");
    // A progress handler that interrupts after n steps, for every n up to
    // the length of a borrow: wherever the interrupt lands, the next call
    // finds the connection out of any transaction (or the error said to
    // roll back, where it came before the call marked its transaction),
    // and a borrow whose answer the interrupt lost is found again by its
    // key: one lease, never two.
    let out = python_on(
        &db,
        "q(\"SELECT semaphore_register('p', 100)\")\n\
         borrow = \"SELECT semaphore_borrow('p', 60000, NULL, NULL, ?)\"\n\
         for n in range(1, 400):\n\
         \x20   steps, limit = [0], [n]\n\
         \x20   def handler():\n\
         \x20       steps[0] += 1\n\
         \x20       return 1 if steps[0] >= limit[0] else 0\n\
         \x20   c.set_progress_handler(handler, 1)\n\
         \x20   try:\n\
         \x20       got = q(borrow, f'k{n}')\n\
         \x20   except sqlite3.Error as e:\n\
         \x20       got = None\n\
         \x20       if 'run ROLLBACK' in str(e):\n\
         \x20           c.set_progress_handler(None, 1)\n\
         \x20           c.execute('ROLLBACK')\n\
         \x20   # The next call interrupted too, early: its rollback of what the\n\
         \x20   # first left open may fail, and must then be tried again.\n\
         \x20   steps[0], limit[0] = 0, n % 7 + 1\n\
         \x20   c.set_progress_handler(handler, 1)\n\
         \x20   try:\n\
         \x20       q(\"SELECT semaphore_inspect('p')\")\n\
         \x20   except sqlite3.Error:\n\
         \x20       pass\n\
         \x20   c.set_progress_handler(None, 1)\n\
         \x20   # An answer lost to the interrupt: the key gets the lease again.\n\
         \x20   lease = json.loads(got or q(borrow, f'k{n}'))['lease']\n\
         \x20   assert not c.in_transaction, f'left in a transaction after {n} steps'\n\
         \x20   assert json.loads(q(\"SELECT semaphore_inspect('p')\"))['in_use'] == 1, n\n\
         \x20   assert q(\"SELECT semaphore_return('p', ?)\", lease) == 1\n\
         print('ok')\n",
    )
    .output()
    .unwrap();
    assert_eq!(said(&out), "ok\n");
}

#[test]
fn sqlites_busy_is_an_error_and_never_a_null() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("busy.db");
    // One Python process holds the write lock; another borrows with a
    // busy timeout of 50 ms: it must fail with SQLITE_BUSY, not answer
    // NULL ("no slot free") while slots are free.
    let mut locker = Talking::start(
        &db,
        "q('SELECT semaphore_register(?, 2)', sys.argv[3])\n\
         c.execute('BEGIN IMMEDIATE')\n\
         print('locked', flush=True)\n\
         sys.stdin.readline()\n\
         c.execute('ROLLBACK')\n",
    );
    assert_eq!(locker.line(), "locked");
    let out = python_on(
        &db,
        "c.execute('PRAGMA busy_timeout = 50')\n\
         try:\n\
         \x20   print('answered', q('SELECT semaphore_borrow(?, 60000)', sys.argv[3]))\n\
         except sqlite3.OperationalError as e:\n\
         \x20   print('error', e, e.sqlite_errorcode)\n",
    )
    .arg(POOL)
    .output()
    .unwrap();
    assert!(locker.end());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("error") && said.contains("locked"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_wal_was_deleted_under_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wal.db");
    {
        // Closed before the files go: connections of one process share
        // them (SQLite's unix VFS), so a later one would find them gone too.
        let (_store, pool) = rust_store(&db).await;
        pool.register(1).await.unwrap();
    }
    // The -wal and -shm files deleted under an open connection: SQLite
    // goes on writing to the unlinked files, where no other process
    // looks, so a grant there could hand the slot out twice.
    let out = python_on(
        &db,
        "q(\"SELECT semaphore_inspect('shared-gpus')\")\n\
         c.execute('PRAGMA wal_checkpoint(TRUNCATE)')\n\
         os.remove(sys.argv[1] + '-wal')\n\
         os.remove(sys.argv[1] + '-shm')\n\
         try:\n\
         \x20   print('granted', q(\"SELECT semaphore_borrow('shared-gpus', 60000)\"))\n\
         except sqlite3.Error as e:\n\
         \x20   print('refused', e)\n",
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("refused") && said.contains("-wal"),
        "{said}"
    );
    let (_store, again) = rust_store(&db).await;
    assert_eq!(again.inspect().await.unwrap().in_use, 0, "nothing granted");
}
