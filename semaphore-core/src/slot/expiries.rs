//! The expiries of a slot table's leases, as a min-heap whose entries a
//! return or a renewal leaves behind and a later look drops (a
//! `BTreeSet` insert and remove cost about 270 instructions of a 3,400
//! instruction pair; a heap push of the latest expiry costs a few).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::SystemTime;

/// One lease's expiry when it was pushed: `(expires_at, lowest position,
/// token)`. The token tells a lease from a later one at the same position
/// and expiry, so an entry is *live* exactly while the lease at `lowest`
/// has this token and this expiry.
pub(super) type Entry = (SystemTime, u32, u64);

/// The entries, earliest first. The table keeps the earliest entry live
/// ([`settle`](Expiries::settle) after each change), so that
/// [`first`](Expiries::first) is the earliest expiry of an active lease,
/// and keeps stale entries under twice the live ones
/// ([`compact`](Expiries::compact)), so memory follows the leases held.
#[derive(Debug, Clone, Default)]
pub(super) struct Expiries(BinaryHeap<Reverse<Entry>>);

impl Expiries {
    /// The earliest entry, live or not.
    pub(super) fn first(&self) -> Option<Entry> {
        self.0.peek().map(|e| e.0)
    }

    pub(super) fn push(&mut self, entry: Entry) {
        self.0.push(Reverse(entry));
    }

    /// The entries, live or not.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn pop(&mut self) -> Option<Entry> {
        self.0.pop().map(|e| e.0)
    }

    /// Drops stale entries from the front, so that the first is live.
    pub(super) fn settle(&mut self, live: impl Fn(&Entry) -> bool) {
        while let Some(first) = self.first() {
            if live(&first) {
                return;
            }
            self.0.pop();
        }
    }

    /// Drops every stale entry once they outnumber the `leases` live ones
    /// (plus a little slack): O(n) once per O(n) pushes.
    pub(super) fn compact(&mut self, leases: usize, live: impl Fn(&Entry) -> bool) {
        if self.0.len() > 2 * leases + 16 {
            self.0.retain(|e| live(&e.0));
        }
    }
}
