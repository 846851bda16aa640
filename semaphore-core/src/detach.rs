//! Running clean-up that nobody awaits (SPEC R12, R13): a dropped borrow's
//! late grant, a dropped guard's return, a dropped head's place in a shared
//! queue.
//!
//! The work must finish whatever becomes of the caller's runtime, so it
//! never depends on that runtime staying up:
//!
//! 1. It is polled once in place, which finishes it outright for stores that
//!    do no I/O.
//! 2. Still pending inside a runtime, it is spawned there, wrapped so that a
//!    runtime shutting down before it finishes (dropping the task unpolled)
//!    hands it on instead of losing it.
//! 3. Outside any runtime, or handed on at shutdown, it runs on the rescue
//!    thread: one thread per process, started the first time it is needed,
//!    with a current-thread runtime of its own. A future moved there may
//!    await a blocking task of the dying runtime: tokio finishes blocking
//!    tasks that have started, and their `JoinHandle` wakes any runtime.
//!
//! Only when the process itself exits (or cannot start a thread) is such
//! work lost; the leases involved then free themselves at their ttl.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Runs `work` to completion without an owner (see the module docs).
pub(crate) fn run_detached(work: BoxFuture<()>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let mut work = Rescued(Some(work));
            let mut cx = Context::from_waker(Waker::noop());
            if Pin::new(&mut work).poll(&mut cx).is_pending() {
                drop(runtime.spawn(work));
            }
        }
        // Not polled here: a store's future may need a runtime's reactor
        // even to start.
        Err(_) => rescue(work),
    }
}

/// Work that moves to the rescue thread if dropped before it finished: by a
/// runtime shutting down with the task still pending.
struct Rescued(Option<BoxFuture<()>>);

impl Future for Rescued {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Ready(());
        };
        std::task::ready!(work.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(())
    }
}

impl Drop for Rescued {
    fn drop(&mut self) {
        if let Some(work) = self.0.take() {
            rescue(work);
        }
    }
}

/// Hands `work` to the rescue thread, starting it if need be.
fn rescue(work: BoxFuture<()>) {
    static RESCUE: OnceLock<Option<UnboundedSender<BoxFuture<()>>>> = OnceLock::new();
    let sender = RESCUE.get_or_init(|| {
        let (tx, mut rx) = unbounded_channel::<BoxFuture<()>>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        std::thread::Builder::new()
            .name("semaphore-rescue".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(work) = rx.recv().await {
                        drop(tokio::spawn(work));
                    }
                });
            })
            .ok()?;
        Some(tx)
    });
    // With no thread to run it, the work is dropped: its leases free
    // themselves at their ttl.
    if let Some(sender) = sender {
        let _ = sender.send(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Work left pending on a runtime that is dropped still completes.
    #[test]
    fn work_pending_when_its_runtime_is_dropped_finishes_on_the_rescue_thread() {
        let (gate_tx, gate_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            run_detached(Box::pin(async move {
                let _ = gate_rx.await;
                done_tx.send(()).unwrap();
            }));
        });
        drop(runtime);
        gate_tx.send(()).unwrap();
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work never finished");
    }

    /// Outside any runtime, work runs on the rescue thread.
    #[test]
    fn work_detached_outside_a_runtime_finishes() {
        let (done_tx, done_rx) = mpsc::channel();
        run_detached(Box::pin(async move {
            tokio::task::yield_now().await;
            done_tx.send(()).unwrap();
        }));
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work never finished");
    }
}
