//! Line 21 of BENCHMARKS.md: a borrow and return through the loadable
//! extension (`semaphore-sqlite-ext`) from Python's `sqlite3`, against the
//! same pair from Rust (`SqliteStore`) on the same file, and against two
//! one-row `UPDATE`s from Python on its connection (the floor for any lease
//! kept in SQL), all with `synchronous = NORMAL` in WAL mode, the store's
//! default. Three rounds alternate the three; pairs/s, medians. Needs
//! Debian's `python3` (its `sqlite3` loads extensions). Writes
//! `target/semaphore-bench/line21.json` for `report`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_benches::{median, out_dir};
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const PAIRS: usize = 4000;
const ROUNDS: usize = 3;

/// Python's side: `ours` pairs through the extension, or the floor's two
/// `UPDATE`s, `PAIRS` times on one connection; prints pairs/s.
const PYTHON: &str = r#"
import json, sqlite3, sys, time
db, ext, what, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = sqlite3.connect(db, timeout=30, isolation_level=None)
c.execute("PRAGMA synchronous = NORMAL")
c.enable_load_extension(True)
c.load_extension(ext)
q = lambda sql, *a: c.execute(sql, a).fetchone()
c.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, v INTEGER)")
c.execute("INSERT OR IGNORE INTO floor VALUES (1, 0)")
start = time.perf_counter()
if what == "ours":
    for _ in range(n):
        lease = json.loads(q("SELECT semaphore_borrow('line21', 30000)")[0])
        q("SELECT semaphore_return('line21', ?)", lease["lease"])
else:
    for _ in range(n):
        c.execute("UPDATE floor SET v = v + 1 WHERE id = 1")
        c.execute("UPDATE floor SET v = v - 1 WHERE id = 1")
print(n / (time.perf_counter() - start))
"#;

fn python(db: &Path, ext: &Path, what: &str) -> f64 {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", PYTHON])
        .arg(db)
        .arg(ext)
        .arg(what)
        .arg(PAIRS.to_string())
        .output()
        .expect("Debian's python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a rate")
}

async fn rust(pool: &Pool) -> f64 {
    let start = Instant::now();
    for _ in 0..PAIRS {
        let lease = pool
            .borrow(Duration::from_secs(30), Duration::ZERO)
            .await
            .expect("a free slot");
        lease.release().await.expect("returned");
    }
    PAIRS as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !semaphore_benches::selected("sqlite_extension", &args) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = root.join("target").join("ext");
    let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(root.join("semaphore-sqlite-ext").join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo");
    assert!(built.success(), "building the extension");
    let ext = target.join("release").join("libsemaphore_sqlite_ext");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("line21.db");
    let store = Arc::new(SqliteStore::open(&db).expect("the file"));
    let pool = Pool::new(store, PoolId::from_name("line21"));
    pool.register(8).await.expect("register");
    let (mut ours, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        ours.push(python(&db, &ext, "ours"));
        theirs.push(rust(&pool).await);
        floor.push(python(&db, &ext, "floor"));
    }
    let line = serde_json::json!({
        "python_pairs_per_s": median(ours),
        "rust_pairs_per_s": median(theirs),
        "python_floor_pairs_per_s": median(floor),
    });
    println!("line 21: {line}");
    let out = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("line21.json"), line.to_string()).expect("writing line 21");
}
