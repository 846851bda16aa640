//! Criterion benchmarks live in `benches/`; `report` turns their estimates
//! into BENCHMARKS.md's table. The benches with a harness of their own
//! (percentiles, real processes) share the helpers below.

use std::path::{Path, PathBuf};

/// The `q` quantile (0.0 to 1.0) of `sorted`, which must not be empty.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// Microseconds since the Unix epoch on this machine's clock: the time
/// stamps processes of a hand-off bench exchange.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The figures of a hand-off bench: `latencies` (µs, any order) of
/// `hand_offs` hand-offs, their p50, p99 and max, and the idle waiter's
/// share of a core.
pub fn hand_off_figures(
    mut latencies: Vec<u64>,
    hand_offs: usize,
    idle_share: f64,
) -> serde_json::Value {
    latencies.sort_unstable();
    serde_json::json!({
        "hand_offs": hand_offs,
        "p50_us": percentile(&latencies, 0.5),
        "p99_us": percentile(&latencies, 0.99),
        "max_us": latencies.last().copied().unwrap_or(0),
        "idle_cpu_share": idle_share,
    })
}

/// CPU time of this whole process (every thread), from the kernel's
/// scheduler statistics, in nanoseconds; 0 where `/proc` cannot tell.
pub fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Where the own-harness benches write their figures for `report`:
/// `target/semaphore-bench`, created if need be. `tmpdir` is the bench's
/// `CARGO_TARGET_TMPDIR`.
pub fn out_dir(tmpdir: &str) -> PathBuf {
    let dir = PathBuf::from(tmpdir)
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("semaphore-bench");
    std::fs::create_dir_all(&dir).expect("creating the output directory");
    dir
}

/// Whether a bench named `name` should run for these command-line `args`
/// (as `cargo bench` passes them): unless a name filter is given that does
/// not match. A filter is an argument that is neither a flag nor a flag's
/// value (`--measurement-time 3`); `--bench` takes no value.
pub fn selected(name: &str, args: &[String]) -> bool {
    let filters: Vec<&String> = args
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(i, a)| {
            let prev = &args[i - 1];
            !a.starts_with('-') && (*i == 1 || !prev.starts_with("--") || prev == "--bench")
        })
        .map(|(_, a)| a)
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}
