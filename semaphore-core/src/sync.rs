//! The wait engine's synchronization primitives: `parking_lot`'s mutex,
//! `std`'s atomics and `atomic-waker`'s waker, or, in a build with
//! `--cfg semaphore_loom` (`scripts/loom`), loom's, so that loom's model
//! checker explores every interleaving of the engine's threads
//! (the method of tokio's `loom` tests of its `batch_semaphore`).
//!
//! [`planted`] is the models' switch for a planted bug: always `false`
//! outside a loom build, where the compiler removes the branch.

#[cfg(not(semaphore_loom))]
pub(crate) use atomic_waker::AtomicWaker;
#[cfg(not(semaphore_loom))]
pub(crate) use parking_lot::Mutex;
#[cfg(not(semaphore_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(semaphore_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Whether the loom models run with the planted bug `name`
/// (`SEMAPHORE_LOOM_MUTANT`); never outside a loom build.
#[cfg(not(semaphore_loom))]
#[inline(always)]
pub(crate) const fn planted(_name: &str) -> bool {
    false
}

/// Whether the loom models run with the planted bug `name`
/// (`SEMAPHORE_LOOM_MUTANT`, read on each call).
#[cfg(semaphore_loom)]
pub(crate) fn planted(name: &str) -> bool {
    std::env::var("SEMAPHORE_LOOM_MUTANT").is_ok_and(|chosen| chosen == name)
}

/// Lets another thread run: nothing outside a loom build.
#[cfg(not(semaphore_loom))]
#[inline(always)]
pub(crate) fn yield_now() {}

/// Lets another model thread run (`loom::thread::yield_now`).
#[cfg(semaphore_loom)]
pub(crate) fn yield_now() {
    loom::thread::yield_now();
}

/// loom's mutex with `parking_lot`'s `lock` (no poisoning to unwrap).
#[cfg(semaphore_loom)]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(semaphore_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .expect("a model thread panicked holding the lock")
    }
}

/// loom's waker cell with `atomic-waker`'s `register`.
#[cfg(semaphore_loom)]
#[derive(Debug, Default)]
pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

#[cfg(semaphore_loom)]
impl AtomicWaker {
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.0.register_by_ref(waker);
    }

    pub(crate) fn wake(&self) {
        self.0.wake();
    }
}
