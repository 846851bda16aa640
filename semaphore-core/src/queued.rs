//! Who waits for a pool: [`QueuedPlace`], one place in line, as a store
//! keeps it ([`Store::queue`](crate::store::Store::queue)) and as
//! [`Pool::queue`](crate::Pool::queue) shows every borrower known to wait.

use std::time::SystemTime;

use crate::id::WaiterId;

/// One borrower waiting for a pool, as [`Pool::queue`](crate::Pool::queue)
/// lists them: one place in line.
///
/// A store shared by processes keeps one place for each process's queued
/// head (the process's other waiters wait behind it, in that process's
/// memory, and are shown only by that process) and one for each held
/// place (an HTTP ticket, which any process may poll).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct QueuedPlace {
    /// The borrower's id in the store's queue; `None` for a borrower of
    /// this process that has not asked from its place yet.
    pub waiter: Option<WaiterId>,
    /// How many slots it waits for.
    pub slots: u32,
    /// When it took its place: by the store's deciding clock, whole
    /// milliseconds, for a place the store keeps; by this process's view
    /// of it for a borrower of this process.
    pub since: SystemTime,
    /// Whose place it is.
    pub kind: PlaceKind,
}

/// Whose place a [`QueuedPlace`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum PlaceKind {
    /// A borrower of this process, waiting in its queue.
    Here,
    /// A held place ([`HeldPlace`](crate::HeldPlace)): an HTTP ticket,
    /// bound to no process.
    Held,
    /// Another process's queued head (more of that process's borrowers may
    /// wait behind it, in its memory).
    Process,
}

impl QueuedPlace {
    /// A place a store keeps: `held` for a held place, else a process's
    /// queued head; for stores.
    pub fn kept(waiter: WaiterId, slots: u32, since: SystemTime, held: bool) -> Self {
        Self {
            waiter: Some(waiter),
            slots,
            since,
            kind: if held {
                PlaceKind::Held
            } else {
                PlaceKind::Process
            },
        }
    }
}
