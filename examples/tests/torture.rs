//! Process torture on one SQLite file: 8 processes loop
//! borrow / work / return with random ttls and waits, while this test kills
//! a random one with SIGKILL every 150-450 ms and starts a replacement.
//! From the processes' logs: no over-issue, no position held twice at once,
//! no token granted twice, every killed holder's slot back in use soon after
//! its death (its leases are bound to the process) or its expiry,
//! whichever comes first, and a sound file. `SEMAPHORE_TORTURE_MS` lengthens the run
//! (default 6,000 ms).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_examples::holds::{
    Hold, duplicate_tokens, max_concurrency, shared_positions, unix_us,
};
use semaphore_sqlite::rusqlite::Connection;
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const HOLDER: &str = env!("CARGO_BIN_EXE_holder");
const PROCESSES: usize = 8;
const SLOTS: u32 = 3;
/// How soon after a killed holder's death (or its lease's expiry, if that
/// came first) its position must be held again: the fallback poll (1 s) a
/// waiter may need to look, and a second of margin on a loaded machine.
const MARGIN_US: u64 = 2_000_000;

fn start(db: &Path, run: Duration, log: &Path) -> Child {
    let ms = run.as_millis().to_string();
    Command::new(HOLDER)
        .args(["torture", db.to_str().unwrap(), "tortured", &ms])
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting a torture process")
}

/// The holds in a log; a grant with no return (its process was killed at
/// `killed_us`) lasts until the kill or its expiry, whichever came first
/// (the lease is bound to the process), and is also listed in `open`.
fn read(log: &Path, killed_us: Option<u64>, holds: &mut Vec<Hold>, open: &mut Vec<Hold>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ends: HashMap<u64, u64> = HashMap::new();
    let mut grants = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> u64 { f[i].parse().expect("a number in the log") };
        match f.first() {
            Some(&"G") if f.len() == 5 => grants.push((num(1) as u32, num(2), num(3), num(4))),
            Some(&"E") if f.len() == 3 => {
                ends.insert(num(1), num(2));
            }
            // A line cut by SIGKILL mid-write.
            _ => {}
        }
    }
    for (position, token, start_us, expires_us) in grants {
        let hold = Hold {
            position,
            token,
            start_us,
            end_us: ends
                .get(&token)
                .copied()
                .unwrap_or(expires_us.min(killed_us.unwrap_or(u64::MAX))),
        };
        if !ends.contains_key(&token) {
            open.push(hold);
        }
        holds.push(hold);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_holders_never_cause_over_issue_and_their_slots_come_back() {
    let run = Duration::from_millis(
        std::env::var("SEMAPHORE_TORTURE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(6_000),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("torture.db");
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let pool = Pool::new(store, PoolId::from_name("tortured"));
    pool.register(SLOTS).await.unwrap();

    let began = Instant::now();
    let log = |n: usize| -> PathBuf { dir.path().join(format!("holder-{n}.log")) };
    let mut started = 0;
    let mut running: Vec<(Child, PathBuf)> = (0..PROCESSES)
        .map(|_| {
            started += 1;
            (start(&db, run, &log(started)), log(started))
        })
        .collect();
    let mut logs = Vec::new();
    let mut kills = 0;
    while began.elapsed() + Duration::from_millis(600) < run {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(150..450))).await;
        let (mut victim, victim_log) = running.swap_remove(fastrand::usize(..running.len()));
        // Before the kill: no other process can be granted its slots
        // earlier than this, so a hold that overlaps is a real one.
        let killed_us = unix_us();
        victim.kill().expect("SIGKILL");
        victim.wait().unwrap();
        kills += 1;
        logs.push((victim_log, Some(killed_us)));
        started += 1;
        let left = run.saturating_sub(began.elapsed());
        running.push((start(&db, left, &log(started)), log(started)));
    }
    for (mut child, child_log) in running {
        assert!(child.wait().unwrap().success(), "a torture process failed");
        logs.push((child_log, None));
    }
    let ended_us = unix_us();

    let (mut holds, mut open) = (Vec::new(), Vec::new());
    for (l, killed_us) in &logs {
        read(l, *killed_us, &mut holds, &mut open);
    }
    println!(
        "torture: {started} processes, {kills} killed with SIGKILL, {} holds, {} left open by a kill",
        holds.len(),
        open.len()
    );
    assert!(
        kills >= 5 && holds.len() > 50,
        "too little happened to prove anything"
    );
    assert_eq!(
        shared_positions(&holds),
        vec![],
        "a position was held twice at once"
    );
    let most = max_concurrency(&holds);
    assert!(
        most <= SLOTS as usize,
        "concurrency reached {most} on {SLOTS} slots"
    );
    assert_eq!(
        duplicate_tokens(&holds),
        Vec::<u64>::new(),
        "a fencing token was granted twice"
    );

    for killed in &open {
        if killed.end_us + MARGIN_US > ended_us {
            continue; // the run ended before the slot had to be back
        }
        let next = holds
            .iter()
            .filter(|h| h.position == killed.position && h.token > killed.token)
            .map(|h| h.start_us)
            .min();
        assert!(
            next.is_some_and(|at| at <= killed.end_us + MARGIN_US),
            "slot {} of a killed holder (dead or expired at {} us) was not held again within {} ms: next at {next:?}",
            killed.position,
            killed.end_us,
            MARGIN_US / 1000
        );
    }

    // Once every lease has expired, nothing is held: no slot is stranded.
    let last_expiry = open.iter().map(|h| h.end_us).max().unwrap_or(0);
    while unix_us() <= last_expiry {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    let check: String = Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}
