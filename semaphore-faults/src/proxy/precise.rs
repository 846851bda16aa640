//! Sleeps finer than tokio's timer, for the proxy's delays.
//!
//! tokio's timer counts whole milliseconds and rounds every sleep up to
//! the next one, so a 0.25 ms delay would last 1 to 2 ms. Here one thread
//! keeps the deadlines of every sleeping future in order and waits on a
//! condition variable until the earliest (a futex wait with a nanosecond
//! timeout; Linux wakes it within its timer slack, 50 µs by default), then
//! wakes the futures whose deadline came.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::Instant;

/// The deadlines waited for, earliest first, and what wakes the thread.
struct Timer {
    queue: Mutex<BinaryHeap<Reverse<Entry>>>,
    changed: Condvar,
}

/// A future's deadline and its waker.
struct Entry {
    at: Instant,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

/// The one timer thread of this process, started at the first sleep.
fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("proxy-timer".into())
            .spawn(move || run(timer))
            .expect("the proxy's timer thread starts");
        timer
    })
}

/// The timer thread: wakes each future whose deadline came, and waits
/// until the next deadline or a new, earlier one.
fn run(timer: &Timer) {
    let mut queue = timer.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while queue.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(due)) = queue.pop() {
                due.waker.wake();
            }
        }
        queue = match queue.peek() {
            Some(Reverse(next)) => {
                let left = next.at.saturating_duration_since(now);
                timer
                    .changed
                    .wait_timeout(queue, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => timer.changed.wait(queue).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Sleeps until `at`, to within the kernel's timer slack (a deadline past
/// already ends it at once).
pub(crate) fn sleep_until(at: Instant) -> impl Future<Output = ()> {
    std::future::poll_fn(move |cx| {
        if Instant::now() >= at {
            return Poll::Ready(());
        }
        let timer = timer();
        let mut queue = timer.queue.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = queue.peek().is_none_or(|Reverse(e)| at < e.at);
        queue.push(Reverse(Entry {
            at,
            waker: cx.waker().clone(),
        }));
        drop(queue);
        if earliest {
            timer.changed.notify_one();
        }
        Poll::Pending
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Sleeps end at or after their deadline, in deadline order, whatever
    /// order they were started in.
    #[tokio::test]
    async fn sleeps_end_after_their_deadlines_in_order() {
        let start = Instant::now();
        let ends = std::sync::Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = [3u64, 1, 2]
            .into_iter()
            .map(|ms| {
                let ends = ends.clone();
                tokio::spawn(async move {
                    let at = start + Duration::from_millis(ms);
                    sleep_until(at).await;
                    assert!(Instant::now() >= at, "woken before its deadline");
                    ends.lock().unwrap().push(ms);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*ends.lock().unwrap(), [1, 2, 3]);
        sleep_until(start).await; // past: at once
    }
}
