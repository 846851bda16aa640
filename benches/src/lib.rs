//! Criterion benchmarks live in `benches/`; `report` turns their estimates
//! into BENCHMARKS.md's table. The benches with a harness of their own
//! (percentiles, real processes) share the helpers below.

pub mod commits;

use std::path::{Path, PathBuf};

/// The median of `runs` (the upper one of an even count), which must not be
/// empty: what every table reports of its rounds.
pub fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

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

/// CPU time of the process `root` and of its children, in nanoseconds:
/// `root`'s own time and that of its children it has reaped (a database
/// server's ended connections), plus each live child's, from
/// `/proc/PID/stat` (clock ticks of 10 ms); 0 where `/proc` cannot tell.
/// Sampled before and after a run, it gives a server's CPU for the run.
pub fn tree_cpu_ns(root: u32) -> u64 {
    /// The fields after the command's name and state: ppid is 0, utime
    /// 10, stime 11, cutime 12, cstime 13.
    fn fields(pid: &str) -> Option<Vec<u64>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        Some(
            rest.split_whitespace()
                .skip(1)
                .take(14)
                .map(|f| f.parse().unwrap_or(0))
                .collect(),
        )
    }
    const TICK_NS: u64 = 10_000_000;
    let own = fields(&root.to_string()).map_or(0, |f| f[10] + f[11] + f[12] + f[13]);
    let children: u64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| fields(e.ok()?.file_name().to_str()?))
        .filter(|f| f[0] == u64::from(root))
        .map(|f| f[10] + f[11])
        .sum();
    (own + children) * TICK_NS
}

/// Running totals by name (a server's counters), as what happened between
/// `before` and `after` per unit of work (`units` of them): the names at
/// `min` per unit or more, for a profile.
pub fn per_unit(
    after: &std::collections::BTreeMap<String, f64>,
    before: &std::collections::BTreeMap<String, f64>,
    units: f64,
    min: f64,
) -> serde_json::Map<String, serde_json::Value> {
    after
        .iter()
        .map(|(name, n)| (name, (n - before.get(name).copied().unwrap_or(0.0)) / units))
        .filter(|(_, per)| *per >= min)
        .map(|(name, per)| (name.clone(), serde_json::json!(per)))
        .collect()
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

/// The variable that makes a bench's own binary one of its other
/// processes; its value is the role the process plays.
pub const ROLE: &str = "SEMAPHORE_BENCH_ROLE";

/// The start of `main` in a bench with a harness of its own that
/// re-invokes itself as its other processes (a holder, workers), each with
/// [`ROLE`] set and the store's URL and prefix (or schema) as its first
/// two arguments.
///
/// A process whose [`ROLE`] is one of `roles` connects with
/// `store(args[1], args[2])`, plays its role with `play(role, store,
/// args)` (`args` the process's command-line arguments), and gets `false`.
/// Any other process gets whether `cargo bench`'s filter selects the bench
/// `name` (see [`selected`]): whether it runs the bench.
///
/// # Panics
/// In a role's process started with fewer than two arguments.
pub async fn role_or_bench<S>(
    name: &str,
    roles: &[&str],
    store: impl AsyncFnOnce(&str, &str) -> S,
    play: impl AsyncFnOnce(&str, S, &[String]),
) -> bool {
    let args: Vec<String> = std::env::args().collect();
    let role = std::env::var(ROLE)
        .ok()
        .filter(|role| roles.contains(&role.as_str()));
    if let Some(role) = role {
        let store = store(&args[1], &args[2]).await;
        play(&role, store, &args).await;
        return false;
    }
    selected(name, &args)
}

/// The folder `out/<name>`, with `package` as its `package.json` and
/// `files` (name, text) beside it, its npm packages installed unless
/// they are already: where a bench's peer written for node runs.
///
/// # Panics
/// If the folder cannot be written, `npm` is missing, or the install
/// fails, saying so.
pub fn npm_folder(out: &Path, name: &str, package: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = out.join(name);
    std::fs::create_dir_all(&dir).expect("the peer's folder");
    std::fs::write(dir.join("package.json"), package).expect("the peer's package.json");
    for (file, text) in files {
        std::fs::write(dir.join(file), text).expect("the peer's worker");
    }
    if !dir.join("node_modules").exists() {
        let status = std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("this bench's peer needs node and npm (apt-get install nodejs npm)");
        assert!(status.success(), "npm install in {} failed", dir.display());
    }
    dir
}

/// Starts `processes` worker processes, each the command `worker(start_us)`
/// makes, which starts its work at `start_us` (unix µs, 1.5 s from now, so
/// that every process is ready by then); each one's standard output, once
/// all have exited, and `start_us`.
///
/// # Panics
/// If a worker cannot be started or fails.
pub fn run_workers(
    processes: usize,
    worker: impl Fn(u64) -> std::process::Command,
) -> (Vec<String>, u64) {
    let start_us = unix_us() + 1_500_000;
    let children: Vec<_> = (0..processes)
        .map(|_| {
            worker(start_us)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    let outputs = children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("a worker's output");
            assert!(out.status.success(), "a worker failed");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect();
    (outputs, start_us)
}
