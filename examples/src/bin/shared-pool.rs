//! The flagship: 8 OS processes share 3 slots through one SQLite file, or
//! through one PostgreSQL database with `--postgres URL`, one Redis
//! server with `--redis URL`, or one MySQL database with `--mysql URL`.
//!
//! The parent creates a database file (or uses the database), registers a
//! pool of 3 slots and starts 8 worker processes of this same program. Each worker borrows a
//! slot (waiting for one), hashes a chunk of a real file (this program's own
//! binary) while it holds the slot, prints what it held, and returns it.
//! The parent prints a per-slot timeline and checks, from the workers'
//! reports, that no more than 3 held a slot at once and that every lease
//! came back.
//!
//! Run: `cargo run --release -p semaphore-examples --bin shared-pool`
//! (add `-- --postgres postgresql://user@host/db` for PostgreSQL, the
//! schema `SEMAPHORE_PG_SCHEMA`, default `public`; or `-- --redis
//! redis://host:6379/`, the key prefix `SEMAPHORE_REDIS_PREFIX`, default
//! `semaphore`; or `-- --mysql mysql://user@host/db`, the table prefix
//! `SEMAPHORE_MYSQL_PREFIX`, default `semaphore`).

use std::hash::{DefaultHasher, Hasher};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use semaphore_examples::holds::{Hold, max_concurrency, shared_positions, unix_us};
use semaphore_examples::store;
use semaphore_sqlite::{Error, Pool, PoolId};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

const SLOTS: u32 = 3;
const WORKERS: usize = 8;
const JOBS: usize = 4;
const CHUNK: usize = 1 << 20;
const ROUNDS: usize = 12;
const POOL: &str = "hashers";
const WIDTH: u64 = 64;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            let db = args.get(2).ok_or("worker needs <db> <index>")?;
            let index: usize = args.get(3).ok_or("worker needs <index>")?.parse()?;
            Ok(worker(db, index).await?)
        }
        Some(flag @ ("--postgres" | "--redis" | "--mysql")) => {
            let url = args.get(2).ok_or(format!("{flag} needs a URL"))?;
            parent(Some(url)).await
        }
        None => parent(None).await,
        Some(other) => Err(format!(
            "unknown argument {other:?}; run without arguments, or with --postgres URL, --redis URL or --mysql URL"
        )
        .into()),
    }
}

async fn pool(db: &str) -> Result<Pool, Error> {
    Ok(Pool::new(store::open(db).await?, PoolId::from_name(POOL)))
}

/// One worker process: `JOBS` times, borrow a slot, hash a chunk, return.
async fn worker(db: &str, index: usize) -> Result<(), Error> {
    let pool = pool(db).await?;
    let file = std::env::current_exe().expect("this program's path");
    for job in 0..JOBS {
        // Hold for at most 30 s (a crashed worker frees its slot by then);
        // wait up to 60 s for a slot.
        let lease = pool
            .borrow(Duration::from_secs(30), Duration::from_secs(60))
            .await?;
        let start_us = unix_us();
        let digest = hash_chunk(&file, index * JOBS + job);
        let end_us = unix_us();
        let hold = Hold {
            position: lease.position,
            token: lease.token,
            start_us,
            end_us,
        };
        lease.release().await?;
        println!("HOLD {index} {job} {hold} {digest:016x}");
    }
    Ok(())
}

/// Hashes chunk `n` of `file` (wrapping around), `ROUNDS` times over.
fn hash_chunk(file: &Path, n: usize) -> u64 {
    let mut bytes = vec![0; CHUNK];
    let mut f = std::fs::File::open(file).expect("opening the file to hash");
    let len = f.metadata().map(|m| m.len()).unwrap_or(0).max(1);
    let offset = (n * CHUNK) as u64 % len;
    f.seek(SeekFrom::Start(offset)).expect("seeking");
    let read = f.read(&mut bytes).expect("reading");
    let mut hasher = DefaultHasher::new();
    for _ in 0..ROUNDS {
        hasher.write(&bytes[..read]);
    }
    hasher.finish()
}

struct Report {
    worker: usize,
    job: usize,
    hold: Hold,
    digest: String,
}

fn parse(line: &str) -> Option<Report> {
    let rest = line.strip_prefix("HOLD ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let [worker, job, position, token, start, end, digest] = fields[..] else {
        return None;
    };
    Some(Report {
        worker: worker.parse().ok()?,
        job: job.parse().ok()?,
        hold: format!("{position} {token} {start} {end}").parse().ok()?,
        digest: digest.to_string(),
    })
}

async fn parent(server: Option<&String>) -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("semaphore-shared-pool-{}", std::process::id()));
    let db = match server {
        Some(url) => url.clone(),
        None => {
            std::fs::create_dir_all(&dir)?;
            dir.join("shared.db").display().to_string()
        }
    };
    let pool = pool(&db).await?;
    pool.register(SLOTS).await?;
    let place = match server {
        Some(url) if store::is_redis(url) => "one Redis server".to_string(),
        Some(url) if store::is_mysql(url) => "one MySQL database".to_string(),
        Some(_) => "one PostgreSQL database".to_string(),
        None => db.clone(),
    };
    println!("{WORKERS} worker processes, {JOBS} jobs each, share {SLOTS} slots in {place}");

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut children = Vec::new();
    for index in 0..WORKERS {
        let mut child = Command::new(&exe)
            .arg("worker")
            .arg(&db)
            .arg(index.to_string())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
        children.push(child);
    }
    drop(tx);

    let mut reports = Vec::new();
    while let Some(line) = rx.recv().await {
        match parse(&line) {
            Some(r) => {
                println!(
                    "worker {} job {}: slot {} (token {:3}) held {:5.1} ms, hash {}",
                    r.worker,
                    r.job,
                    r.hold.position,
                    r.hold.token,
                    (r.hold.end_us - r.hold.start_us) as f64 / 1000.0,
                    r.digest
                );
                reports.push(r);
            }
            None => println!("{line}"),
        }
    }
    for mut child in children {
        let status = child.wait().await?;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }

    let holds: Vec<Hold> = reports.iter().map(|r| r.hold).collect();
    print_timeline(&reports);
    let state = pool.inspect().await?;
    let most = max_concurrency(&holds);
    let shared = shared_positions(&holds).len();
    if server.is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
    if holds.len() != WORKERS * JOBS || most > SLOTS as usize || shared > 0 || state.in_use != 0 {
        return Err(format!(
            "check failed: {} holds, highest concurrency {most}, {shared} shared slots, {} still in use",
            holds.len(),
            state.in_use
        )
        .into());
    }
    println!(
        "done in {:.2} s: {} holds by {WORKERS} processes; highest concurrency seen {most} (limit {SLOTS}); no slot held twice at once; every lease returned (in_use {} of {SLOTS})",
        started.elapsed().as_secs_f64(),
        holds.len(),
        state.in_use
    );
    Ok(())
}

/// One row per slot; each hold is drawn with its worker's number.
fn print_timeline(reports: &[Report]) {
    let (Some(t0), Some(t1)) = (
        reports.iter().map(|r| r.hold.start_us).min(),
        reports.iter().map(|r| r.hold.end_us).max(),
    ) else {
        return;
    };
    let span = (t1 - t0).max(1);
    println!(
        "\ntimeline, {:.1} ms across (digits are worker numbers):",
        span as f64 / 1000.0
    );
    for slot in 0..SLOTS {
        let mut row = vec!['.'; WIDTH as usize];
        for r in reports.iter().filter(|r| r.hold.position == slot) {
            let from = (r.hold.start_us - t0) * (WIDTH - 1) / span;
            let to = (r.hold.end_us - t0) * (WIDTH - 1) / span;
            for cell in &mut row[from as usize..=to as usize] {
                *cell = char::from_digit(r.worker as u32 % 10, 10).unwrap_or('#');
            }
        }
        println!("slot {slot} |{}|", row.into_iter().collect::<String>());
    }
    println!();
}
