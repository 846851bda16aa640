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
//! 3. Outside any runtime, or handed on at shutdown, it runs on the library
//!    runtime: one worker thread per process, started the first time it is
//!    needed ([`library_runtime`]). A future moved there may await a
//!    blocking task of the dying runtime: tokio finishes blocking tasks that
//!    have started, and their `JoinHandle` wakes any runtime.
//!
//! Only when the process itself exits (or cannot start a thread) is such
//! work lost; the leases involved then free themselves at their ttl.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

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

/// Spawns `work` on the current runtime, or else on the library's; its
/// abort handle, or `None` if no runtime could be had.
pub(crate) fn spawn(
    work: impl Future<Output = ()> + Send + 'static,
) -> Option<tokio::task::AbortHandle> {
    let handle = match tokio::runtime::Handle::try_current() {
        Ok(current) => current.spawn(work),
        Err(_) => library_runtime()?.spawn(work),
    };
    Some(handle.abort_handle())
}

/// Work that moves to the library runtime if dropped before it finished: by
/// a runtime shutting down with the task still pending.
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

/// Runs `work` on the library runtime, starting it if need be.
fn rescue(work: BoxFuture<()>) {
    // With no runtime to run it on, the work is dropped: its leases free
    // themselves at their ttl.
    if let Some(runtime) = library_runtime() {
        drop(runtime.spawn(work));
    }
}

/// The library's own runtime: one worker thread, started the first time it
/// is needed, alive until the process exits. Rescued clean-up runs on it,
/// and the blocking API drives its calls with it.
pub(crate) fn library_runtime() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("semaphore-runtime")
                .enable_all()
                .build()
                .ok()
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Work left pending on a runtime that is dropped still completes.
    #[test]
    fn work_pending_when_its_runtime_is_dropped_finishes_on_the_library_runtime() {
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

    /// Outside any runtime, work runs on the library runtime.
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
