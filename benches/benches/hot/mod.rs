//! The hot-pool rate that lines 13, 15, 18 and 20 share: worker processes
//! of the bench's own binary, as many as [`rate_of`] asks with as many
//! tasks each, run one step in a loop for `SECONDS` from a common start;
//! steps per second, together.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use semaphore_benches::unix_us;
// Every store's `Pool` is the core's, re-exported.
use semaphore_memory::Pool;

/// The tasks of a worker process not told how many to run.
pub(crate) const TASKS: usize = 4;
pub(crate) const SECONDS: u64 = 3;
/// The variable that tells a worker process how many tasks to run.
const TASKS_VAR: &str = "SEMAPHORE_BENCH_TASKS";

/// The number of tasks this worker process runs.
pub(crate) fn tasks() -> usize {
    std::env::var(TASKS_VAR)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(TASKS)
}

/// A worker process: [`tasks`] tasks run `step` from `start_us` for
/// `SECONDS`; prints how many steps they finished.
pub(crate) async fn worker<F, Fut>(start_us: u64, step: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let end_us = start_us + SECONDS * 1_000_000;
    let done = Arc::new(AtomicU64::new(0));
    tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(unix_us()))).await;
    let tasks: Vec<_> = (0..tasks())
        .map(|_| {
            let (step, done) = (step.clone(), done.clone());
            tokio::spawn(async move {
                while unix_us() < end_us {
                    step().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    println!("{}", done.load(Ordering::Relaxed));
}

/// Runs `processes` worker processes of `role` with `args`, of `tasks`
/// tasks each; their steps per second, together.
pub(crate) fn rate_of(role: &str, args: &[&str], processes: usize, tasks: usize) -> f64 {
    rate_with(processes, |start_us| {
        let mut command = Command::new(std::env::current_exe().expect("this bench's path"));
        command
            .env(crate::wake::ROLE, role)
            .env(TASKS_VAR, tasks.to_string())
            .args(args)
            .arg(start_us.to_string());
        command
    })
}

/// `processes` worker processes, each the command `worker(start_us)`
/// makes, which starts its loop at `start_us` (unix µs), runs it for
/// `SECONDS` and prints how many steps it finished; their steps per
/// second, together.
pub(crate) fn rate_with(processes: usize, worker: impl Fn(u64) -> Command) -> f64 {
    let (outputs, _) = semaphore_benches::run_workers(processes, worker);
    let total: u64 = outputs
        .iter()
        .map(|out| out.trim().parse::<u64>().expect("a count"))
        .sum();
    total as f64 / SECONDS as f64
}

/// The hot loop of "ours": [`worker`]'s tasks each borrow a slot of `pool`
/// (ttl 30 s, waiting up to 10 s) and return it at once.
pub(crate) async fn borrow_and_return(start_us: u64, pool: Pool) {
    const TTL: Duration = Duration::from_secs(30);
    const WAIT: Duration = Duration::from_secs(10);
    worker(start_us, move || {
        let pool = pool.clone();
        async move {
            let lease = pool.borrow(TTL, WAIT).await.expect("borrow");
            lease.release().await.expect("return");
        }
    })
    .await;
}
