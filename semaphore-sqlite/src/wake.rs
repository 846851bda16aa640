//! How a waiter learns that a slot may be free, across the processes that
//! share the file: the queue of each process's head waiter (`queue`),
//! whether the process behind a queued head still runs (`liveness`), the
//! ring after a commit (`doorbell`) and the file-change watch that hears it
//! (`watch`).

// Only Linux rings; elsewhere the ring format is left to its tests.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod doorbell;
pub(crate) mod liveness;
pub(crate) mod queue;
pub(crate) mod quiet;
pub(crate) mod watch;
