//! BENCHMARKS.md's instruction lines: lines 1, 2 and 2c counted
//! by `valgrind --tool=callgrind`, ours and tokio's semaphore (the anchor)
//! on the same binary, input and machine. Instruction counts repeat from
//! run to run whatever else the machine does, unlike wall time.
//!
//! Each figure is `(I(2n) - I(n)) / n`: the instructions of `n` more pairs
//! of the `pairs` binary, set-up and tear-down cancelled out. Lines 1p and
//! 2p are floors, not stores: what lines 1 and 2 would count if the pool
//! added nothing to the memory store's own step; 1r is what any pair
//! needs by the rules alone.
//!
//! ```sh
//! cargo build --release -p semaphore-benches --bins && target/release/instructions
//! ```

use std::path::Path;
use std::process::Command;

/// Pairs per run: the difference is taken between `N` and `2 * N`.
const N: u64 = 10_000;

struct Line {
    name: &'static str,
    line: &'static str,
    goal: f64,
}

const LINES: &[Line] = &[
    Line {
        name: "1. memory, uncontended borrow+return vs tokio Semaphore",
        line: "1",
        goal: 3.0,
    },
    Line {
        name: "2. memory, 64 tasks on 4 slots vs tokio",
        line: "2",
        goal: 2.5,
    },
    Line {
        name: "2c. memory, waiters served by returns, per hand-off",
        line: "2c",
        goal: 2.5,
    },
];

fn main() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("valgrind is not installed: no instruction lines (apt-get install valgrind)");
        return;
    }
    let pairs = std::env::current_exe()
        .expect("this program's path")
        .with_file_name("pairs");
    assert!(
        pairs.exists(),
        "{} is missing: cargo build --release -p semaphore-benches --bins",
        pairs.display()
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path();
    println!("| line | ours (instructions per pair) | anchor | ratio | goal | met |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for line in LINES {
        let ours = per_pair(&pairs, dir, "memory", line.line);
        let anchor = per_pair(&pairs, dir, "tokio", line.line);
        let ratio = ours / anchor;
        println!(
            "| {} | {ours:.0} | {anchor:.0} | {ratio:.2}x | <= {}x instructions | {} |",
            line.name,
            line.goal,
            if ratio <= line.goal { "met" } else { "not met" }
        );
    }
    // The floors of lines 1 and 2: the memory store's step alone, with
    // no pool layered on it (`pairs step`).
    for (side, line, name) in [
        (
            "step",
            "1",
            "1p. line 1's floor: the memory store's step alone, through the pool's one-pool table (lease id, clock, grant and return under its lock; no pool handle, guard or future)",
        ),
        (
            "rules",
            "1",
            "1r. what any pair needs by the rules: a v4 lease id, two clock readings, a lock taken twice",
        ),
        (
            "step",
            "2",
            "2p. line 2's floor: that step inside tokio's semaphore, each acquire under a deadline (`tokio::time::timeout`)",
        ),
    ] {
        let floor = per_pair(&pairs, dir, side, line);
        let anchor = per_pair(&pairs, dir, "tokio", line);
        println!(
            "| {name} | {floor:.0} | {anchor:.0} | {:.2}x | none | - |",
            floor / anchor
        );
    }
    let (ours, anchor) = future_sizes();
    println!(
        "| 1. the borrow's future (bytes), vs tokio's `acquire` | {ours} | {anchor} | {:.2}x | <= 264 bytes | {} |",
        ours as f64 / anchor as f64,
        if ours <= 264 { "met" } else { "not met" }
    );
}

/// The size of line 1's borrow future (`Pool::borrow`) and of tokio's
/// `Semaphore::acquire` future: what a task keeps, and moves, while it
/// borrows.
fn future_sizes() -> (usize, usize) {
    use std::sync::Arc;
    use std::time::Duration;

    use semaphore_memory::{MemoryStore, Pool, PoolId};

    let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("size"));
    let ours = size_of_val(&pool.borrow(Duration::from_secs(30), Duration::from_secs(1)));
    let semaphore = tokio::sync::Semaphore::new(1);
    let anchor = size_of_val(&semaphore.acquire());
    (ours, anchor)
}

/// Instructions per pair of `side` on `line`.
fn per_pair(pairs: &Path, dir: &Path, side: &str, line: &str) -> f64 {
    let once = total(pairs, dir, side, line, N);
    let twice = total(pairs, dir, side, line, 2 * N);
    twice.saturating_sub(once) as f64 / N as f64
}

/// The instructions callgrind counted for one run.
fn total(pairs: &Path, dir: &Path, side: &str, line: &str, n: u64) -> u64 {
    let out = dir.join(format!("callgrind.{side}.{line}.{n}"));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(pairs)
        .args([side, line, &n.to_string()])
        .output()
        .expect("running valgrind");
    assert!(status.status.success(), "{status:?}");
    let text = std::fs::read_to_string(&out).expect("callgrind's output");
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .expect("a total in callgrind's output")
}
