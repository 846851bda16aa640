//! Criterion benchmarks live in `benches/`; `report` turns their estimates
//! into BENCHMARKS.md's table. The benches with a harness of their own
//! (percentiles, real processes) share the helpers below.

use std::path::{Path, PathBuf};

/// The `q` quantile (0.0 to 1.0) of `sorted`, which must not be empty.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
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
