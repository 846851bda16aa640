//! What the checker reports: the [`Violation`]s of the invariants, each
//! naming its leases ([`LeaseRef`]), and the run's figures ([`Report`]).

use std::collections::BTreeMap;

/// One lease, as the violations name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// Its holder's pid.
    pub pid: u32,
    /// Its token.
    pub token: u64,
    /// Its positions.
    pub positions: Vec<u32>,
    /// When its grant was received.
    pub granted: u64,
    /// Its first act, if any.
    pub first_act: Option<u64>,
    /// Its last act, if any.
    pub last_act: Option<u64>,
    /// When its holder was first told, if it was.
    pub told: Option<u64>,
    /// When its holder started to release it, if it did.
    pub release: Option<u64>,
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// (a) Two leases acted on one position at once.
    Overlap {
        /// The position.
        position: u32,
        /// The lease whose interval started first.
        a: LeaseRef,
        /// The lease whose interval started inside `a`'s.
        b: LeaseRef,
    },
    /// (b) A lease acted after a lease with a greater token had acted.
    TokenOrder {
        /// The position.
        position: u32,
        /// The lease with the greater token, which acted first.
        newer: LeaseRef,
        /// The lease with the smaller token, which acted after it.
        older: LeaseRef,
    },
    /// (c) A lease acted at or after the grant of the next lease on one of
    /// its positions.
    ActedAfterNextGrant {
        /// The lease that acted.
        lease: LeaseRef,
        /// The next lease.
        next: LeaseRef,
        /// The first act at or after `next`'s grant.
        act: u64,
    },
    /// (c) A running holder was not told by the grant of the next lease on
    /// one of its positions (plus the slack).
    ToldLate {
        /// The lease.
        lease: LeaseRef,
        /// The next lease.
        next: LeaseRef,
    },
    /// (d) One token granted twice.
    DuplicateToken {
        /// One grant.
        a: LeaseRef,
        /// Another.
        b: LeaseRef,
    },
}

impl Violation {
    /// When it showed: the act, grant or first act that broke the
    /// invariant.
    pub fn t(&self) -> u64 {
        match self {
            Violation::Overlap { b, .. } => b.first_act.unwrap_or(b.granted),
            Violation::TokenOrder { older, .. } => older.first_act.unwrap_or(older.granted),
            Violation::ActedAfterNextGrant { act, .. } => *act,
            Violation::ToldLate { next, .. } => next.granted,
            Violation::DuplicateToken { b, .. } => b.granted,
        }
    }

    /// The holder processes it involves.
    pub fn pids(&self) -> [u32; 2] {
        match self {
            Violation::Overlap { a, b, .. } | Violation::DuplicateToken { a, b } => [a.pid, b.pid],
            Violation::TokenOrder { newer, older, .. } => [newer.pid, older.pid],
            Violation::ActedAfterNextGrant { lease, next, .. }
            | Violation::ToldLate { lease, next } => [lease.pid, next.pid],
        }
    }

    /// The invariant's short name.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Overlap { .. } => "overlap",
            Violation::TokenOrder { .. } => "token order",
            Violation::ActedAfterNextGrant { .. } => "acted after next grant",
            Violation::ToldLate { .. } => "told late",
            Violation::DuplicateToken { .. } => "duplicate token",
        }
    }
}

/// The checker's answer: counts for the summary, and the violations.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The earliest time in the history: times print relative to it.
    pub origin: u64,
    /// Holder processes seen.
    pub processes: usize,
    /// Grants received.
    pub grants: usize,
    /// Grants of more than one slot.
    pub multi_slot_grants: usize,
    /// Acts.
    pub acts: usize,
    /// Acts whose lease has no grant in the logs (ignored).
    pub orphan_acts: usize,
    /// Leases whose holder was told, by how it learned first.
    pub told: BTreeMap<&'static str, usize>,
    /// Releases started.
    pub releases: usize,
    /// What the releases answered (`true`, `false`, `error`, `timeout`).
    pub released: BTreeMap<String, usize>,
    /// Failed operations, by operation.
    pub failed: BTreeMap<String, usize>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// Leases taken over by another before their holder's release whose
    /// holder was stopped or dead then (excused from being told).
    pub excused: usize,
    /// Leases taken over by another before their holder's release.
    pub taken_over: usize,
    /// Of those, the ones whose holder was running (neither stopped nor
    /// dead) when the next grant came: the event that matters, which a run
    /// must see often to judge it.
    pub running_takeovers: usize,
    /// Log lines that did not parse.
    pub skipped_lines: usize,
    /// The broken invariants.
    pub violations: Vec<Violation>,
    /// For each violation (same index), the faults that touched its
    /// holders or the server in the [`RECENT`] before it, in words.
    pub context: Vec<String>,
}

/// How far back a violation's context looks for faults: a ttl (3 s) and a
/// session timeout (2 s) of the suite's settings.
pub const RECENT: u64 = 5_000_000_000;

impl Report {
    /// Violations by kind.
    pub fn violations_by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut by = BTreeMap::new();
        for v in &self.violations {
            *by.entry(v.kind()).or_insert(0) += 1;
        }
        by
    }
}
