//! A process that holds slots of a pool in a shared SQLite file,
//! PostgreSQL database or Redis server, for the multi-process tests (and to
//! try by hand). `<db>` is a file path, a PostgreSQL connection string
//! (schema from `SEMAPHORE_PG_SCHEMA`) or a Redis URL (key prefix from
//! `SEMAPHORE_REDIS_PREFIX`).
//!
//! ```text
//! holder cycles <db> <pool> <n> <work_us> <log>   borrow / work / return n times, logging each hold
//! holder loop   <db> <pool> <ms> <work_us> <log>  borrow / work / return back to back for <ms>
//! holder hold   <db> <pool> <ttl_ms>              borrow once, print HOLDING, return on a stdin line
//! holder torture <db> <pool> <ms> <log>           random ttls, waits and work for <ms>, logging as it goes
//! holder skewed <db> <pool> <offset_ms>           one try_borrow on a clock <offset_ms> off (may be negative)
//! ```
//!
//! The pool must already be registered. Holds are logged as
//! `position token start_us end_us` (see `semaphore_examples::holds`).

use std::hash::{DefaultHasher, Hasher};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_examples::holds::{Hold, unix_us};
use semaphore_examples::store;
use semaphore_sqlite::{
    Clock, Error, Pool, PoolId, Sleep, SqliteOptions, SqliteStore, SystemClock,
};

const TTL: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(60);

fn usage() -> ! {
    eprintln!("usage: holder cycles <db> <pool> <n> <work_us> <log>");
    eprintln!("       holder loop <db> <pool> <ms> <work_us> <log>");
    eprintln!("       holder hold <db> <pool> <ttl_ms>");
    eprintln!("       holder torture <db> <pool> <ms> <log>");
    eprintln!("       holder skewed <db> <pool> <offset_ms>");
    std::process::exit(2)
}

fn number(arg: Option<&String>) -> u64 {
    arg.and_then(|a| a.parse().ok()).unwrap_or_else(|| usage())
}

/// Busy work for `us` microseconds: hashing, so the CPU is really used.
fn work(us: u64) -> u64 {
    let until = Instant::now() + Duration::from_micros(us);
    let mut hasher = DefaultHasher::new();
    while Instant::now() < until {
        hasher.write_u64(hasher.finish());
    }
    hasher.finish()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(db), Some(name)) = (args.get(1), args.get(2), args.get(3)) else {
        usage()
    };
    if mode == "skewed" {
        let offset: i64 = args
            .get(4)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| usage());
        skewed(db, name, offset).await;
        return Ok(());
    }
    let pool = Pool::new(store::open(db).await?, PoolId::from_name(name));
    match mode.as_str() {
        "cycles" => {
            let (n, work_us) = (number(args.get(4)), number(args.get(5)));
            let log = cycles(&pool, work_us, |done, _| done < n).await?;
            write_log(args.get(6), &log);
        }
        "loop" => {
            let until = Instant::now() + Duration::from_millis(number(args.get(4)));
            let log = cycles(&pool, number(args.get(5)), |_, now| now < until).await?;
            write_log(args.get(6), &log);
        }
        "hold" => {
            let ttl = Duration::from_millis(number(args.get(4)));
            let lease = pool.borrow(ttl, WAIT).await?;
            let expires_us = lease
                .expires_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            println!("HOLDING {} {} {expires_us}", lease.position, lease.token);
            std::io::stdout().flush().ok();
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
                lease.forget();
                return Ok(());
            }
            let at = unix_us();
            lease.release().await?;
            println!("RETURNED {at}");
        }
        "torture" => {
            let until = Instant::now() + Duration::from_millis(number(args.get(4)));
            torture(&pool, until, args.get(5).unwrap_or_else(|| usage())).await?;
        }
        _ => usage(),
    }
    Ok(())
}

/// The system clock, `offset_ms` off: a process whose clock disagrees with
/// the machine's.
#[derive(Debug)]
struct Offset(i64);

impl Offset {
    fn shift(&self, t: std::time::SystemTime, sign: i64) -> std::time::SystemTime {
        let by = Duration::from_millis(self.0.unsigned_abs());
        if self.0 * sign >= 0 { t + by } else { t - by }
    }
}

impl Clock for Offset {
    fn now(&self) -> std::time::SystemTime {
        self.shift(std::time::SystemTime::now(), 1)
    }

    fn sleep_until(&self, deadline: std::time::SystemTime) -> Sleep {
        SystemClock.sleep_until(self.shift(deadline, -1))
    }
}

/// One try_borrow of 10 s through a store whose clock is `offset_ms` off;
/// prints `GRANTED position token`, `EXHAUSTED` or `REFUSED error`.
async fn skewed(db: &str, name: &str, offset_ms: i64) {
    let options = SqliteOptions::default().clock(Arc::new(Offset(offset_ms)));
    let outcome = match SqliteStore::open_with(db, options) {
        Ok(store) => {
            let pool = Pool::new(Arc::new(store), PoolId::from_name(name));
            match pool.try_borrow(Duration::from_secs(10)).await {
                Ok(lease) => {
                    let lease = lease.forget();
                    format!("GRANTED {} {}", lease.position, lease.token)
                }
                Err(Error::Exhausted { .. }) => "EXHAUSTED".to_string(),
                Err(e) => format!("REFUSED {e}"),
            }
        }
        Err(e) => format!("REFUSED {e}"),
    };
    println!("{outcome}");
}

/// Borrow with a random ttl (100-600 ms) and wait (0-200 ms), hold for a
/// random part of the ttl, return; until `until`. Each grant is appended to
/// `log` the moment it lands, as `G position token start_us expires_us`,
/// and each return as `E token end_us`, unbuffered, so that a process
/// killed with SIGKILL leaves its open hold on record.
async fn torture(pool: &Pool, until: Instant, log: &str) -> Result<(), Error> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("opening the torture log");
    let micros = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    while Instant::now() < until {
        let ttl = Duration::from_millis(fastrand::u64(100..=600));
        let wait = Duration::from_millis(fastrand::u64(0..=200));
        let lease = match pool.borrow(ttl, wait).await {
            Ok(lease) => lease,
            Err(Error::Exhausted { .. }) => continue,
            Err(e) => return Err(e),
        };
        let line = format!(
            "G {} {} {} {}\n",
            lease.position,
            lease.token,
            unix_us(),
            micros(lease.expires_at)
        );
        log.write_all(line.as_bytes())
            .expect("writing the torture log");
        tokio::time::sleep(ttl.mul_f64(fastrand::f64() * 0.8)).await;
        let line = format!("E {} {}\n", lease.token, unix_us());
        log.write_all(line.as_bytes())
            .expect("writing the torture log");
        lease.release().await?;
    }
    Ok(())
}

/// Borrow / work / return while `go(cycles done, now)` says so.
async fn cycles(
    pool: &Pool,
    work_us: u64,
    go: impl Fn(u64, Instant) -> bool,
) -> Result<Vec<Hold>, Error> {
    let mut log = Vec::new();
    while go(log.len() as u64, Instant::now()) {
        let lease = pool.borrow(TTL, WAIT).await?;
        let start_us = unix_us();
        work(work_us);
        log.push(Hold {
            position: lease.position,
            token: lease.token,
            start_us,
            end_us: unix_us(),
        });
        lease.release().await?;
    }
    Ok(log)
}

fn write_log(path: Option<&String>, holds: &[Hold]) {
    let path = path.unwrap_or_else(|| usage());
    let text: String = holds.iter().map(|h| format!("{h}\n")).collect();
    std::fs::write(path, text).expect("writing the hold log");
}
