//! A queued borrower's wake-up ([`Signal`]): what `tokio::sync::Notify`'s
//! `notify_one` gives a single waiting task, without Notify's list of
//! waiters and its lock (about 400 instructions per wake-up on
//! BENCHMARKS.md line 2).

use crate::sync::{AtomicBool, Ordering};
use std::future::poll_fn;
use std::task::Poll;

use crate::sync::AtomicWaker;

/// A wake-up for the one task that waits on a queued borrower. A wake-up
/// given while it does not wait is kept for its next wait, as
/// `Notify::notify_one` keeps a permit; several wake-ups before a wait
/// count as one.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    set: AtomicBool,
    waker: AtomicWaker,
}

impl Signal {
    /// Wakes the waiting task, or the next wait.
    pub(crate) fn notify_one(&self) {
        // A swap, not a store: loom (tokio-rs/loom#254) lets a plain store
        // land inside a concurrent swap, and would report wake-ups lost
        // that cannot be; a swap costs a wake-up nothing that counts.
        self.set.swap(true, Ordering::Release);
        self.waker.wake();
    }

    /// Completes once a wake-up was given since the last one was taken.
    /// Cancel safe: a wake-up is only taken when this completes. Only one
    /// task may wait at a time (a second one's waker replaces the first's).
    pub(crate) async fn notified(&self) {
        poll_fn(|cx| {
            if self.set.swap(false, Ordering::AcqRel) {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            if crate::sync::planted("signal_no_recheck") {
                return Poll::Pending;
            }
            // A wake-up between the check and the registration woke the
            // old waker, or none: look again.
            if self.set.swap(false, Ordering::AcqRel) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_before_the_wait_is_kept_once() {
        let signal = Signal::default();
        signal.notify_one();
        signal.notify_one();
        signal.notified().await;
        let again = tokio::time::timeout(std::time::Duration::from_millis(10), signal.notified());
        assert!(again.await.is_err(), "two wake-ups before a wait are one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_task_is_woken() {
        let signal = std::sync::Arc::new(Signal::default());
        let waiting = tokio::spawn({
            let signal = signal.clone();
            async move { signal.notified().await }
        });
        tokio::task::yield_now().await;
        signal.notify_one();
        // A lost wake-up fails here (paused time runs on once every task
        // is idle), rather than hanging the test.
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the waiting task was never woken")
            .unwrap();
    }
}
