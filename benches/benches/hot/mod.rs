//! The hot-pool rate that lines 15 and 18 share: `PROCESSES` worker
//! processes of the bench's own binary, `TASKS` tasks each, run one step
//! in a loop for `SECONDS` from a common start; steps per second, together.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use semaphore_benches::unix_us;

pub(crate) const PROCESSES: usize = 4;
pub(crate) const TASKS: usize = 4;
pub(crate) const SECONDS: u64 = 3;

/// A worker process: `TASKS` tasks run `step` from `start_us` for
/// `SECONDS`; prints how many steps they finished.
pub(crate) async fn worker<F, Fut>(start_us: u64, step: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let end_us = start_us + SECONDS * 1_000_000;
    let done = Arc::new(AtomicU64::new(0));
    tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(unix_us()))).await;
    let tasks: Vec<_> = (0..TASKS)
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

/// Runs `PROCESSES` worker processes of `role` with `args`; their steps
/// per second, together.
pub(crate) fn rate(role: &str, args: &[&str]) -> f64 {
    let start_us = unix_us() + 1_500_000;
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().expect("this bench's path"))
                .env(crate::wake::ROLE, role)
                .args(args)
                .arg(start_us.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    let total: u64 = children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("a worker's output");
            assert!(out.status.success(), "a worker failed");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .expect("a count")
        })
        .sum();
    total as f64 / SECONDS as f64
}
