//! The report in words: each violation's description and the faults
//! before it, and the summary's text.

use std::collections::BTreeMap;
use std::fmt;

use super::{History, LeaseRef, RECENT, Report, Violation};
use crate::event::{FaultRecord, Phase};

/// The faults on `v`'s holders or on the server that were in progress in
/// the [`RECENT`] before it.
pub(super) fn context(history: &History, v: &Violation, origin: u64) -> String {
    let t = v.t();
    let pids = v.pids();
    let mut faults: Vec<&FaultRecord> = history.faults.iter().collect();
    faults.sort_by_key(|f| f.t);
    let mut found = Vec::new();
    for (i, start) in faults.iter().enumerate() {
        if start.phase != Phase::Start || start.t > t {
            continue;
        }
        if start.pid.is_some_and(|p| !pids.contains(&p)) {
            continue;
        }
        let end = faults[i + 1..]
            .iter()
            .find(|f| f.phase == Phase::End && f.kind == start.kind && f.pid == start.pid)
            .map(|f| f.t);
        if end.unwrap_or(start.t) + RECENT < t {
            continue;
        }
        let mut text = format!("{} at {}", start.kind.name(), At(start.t, origin));
        if let Some(pid) = start.pid {
            text += &format!(" of pid {pid}");
        }
        if let Some(end) = end {
            text += &format!(" until {}", At(end, origin));
        }
        if !start.detail.is_empty() {
            text += &format!(" ({})", start.detail);
        }
        found.push(text);
    }
    found.join("; ")
}

/// A time relative to the report's origin, in seconds.
struct At(u64, u64);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} s", self.0.saturating_sub(self.1) as f64 / 1e9)
    }
}

fn ms(ns: i128) -> String {
    format!("{:+.1} ms", ns as f64 / 1e6)
}

impl Report {
    fn lease(&self, l: &LeaseRef) -> String {
        let o = self.origin;
        let mut s = format!(
            "token {} (pid {}, positions {:?}, granted {}",
            l.token,
            l.pid,
            l.positions,
            At(l.granted, o)
        );
        match (l.first_act, l.last_act) {
            (Some(a), Some(b)) => s += &format!(", acted {} .. {}", At(a, o), At(b, o)),
            _ => s += ", never acted",
        }
        match l.told {
            Some(t) => s += &format!(", told {}", At(t, o)),
            None => s += ", never told",
        }
        if let Some(r) = l.release {
            s += &format!(", released {}", At(r, o));
        }
        s + ")"
    }

    /// One violation in words.
    pub fn describe(&self, v: &Violation) -> String {
        let o = self.origin;
        match v {
            Violation::Overlap { position, a, b } => format!(
                "overlap on position {position}: {} and {} acted at once",
                self.lease(a),
                self.lease(b)
            ),
            Violation::TokenOrder {
                position,
                newer,
                older,
            } => format!(
                "token order on position {position}: {} acted after {}",
                self.lease(older),
                self.lease(newer)
            ),
            Violation::ActedAfterNextGrant { lease, next, act } => format!(
                "acted after next grant: {} acted at {} ({} after the grant of {})",
                self.lease(lease),
                At(*act, o),
                ms(i128::from(*act) - i128::from(next.granted)),
                self.lease(next)
            ),
            Violation::ToldLate { lease, next } => format!(
                "told late: {} was not told by the grant of {}{}",
                self.lease(lease),
                self.lease(next),
                match lease.told {
                    Some(t) => format!(
                        " (told {} after it)",
                        ms(i128::from(t) - i128::from(next.granted))
                    ),
                    None => String::new(),
                }
            ),
            Violation::DuplicateToken { a, b } => format!(
                "duplicate token {}: {} and {}",
                a.token,
                self.lease(a),
                self.lease(b)
            ),
        }
    }
}

fn list<K: fmt::Display>(map: &BTreeMap<K, usize>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many violations the summary spells out.
const SHOWN: usize = 25;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "grants {} ({} of 2+ slots), acts {}, holder processes {}",
            self.grants, self.multi_slot_grants, self.acts, self.processes
        )?;
        writeln!(
            f,
            "told: {}; releases {} (answered: {}); failed operations: {}",
            list(&self.told),
            self.releases,
            list(&self.released),
            list(&self.failed)
        )?;
        writeln!(f, "faults: {}", list(&self.faults))?;
        writeln!(
            f,
            "leases taken over before their release: {}, of running holders {} \
             (excused from being told: {}, holder stopped or dead)",
            self.taken_over, self.running_takeovers, self.excused
        )?;
        if self.orphan_acts + self.skipped_lines > 0 {
            writeln!(
                f,
                "ignored: {} acts without a grant, {} lines cut short",
                self.orphan_acts, self.skipped_lines
            )?;
        }
        writeln!(
            f,
            "violations: {} ({})",
            self.violations.len(),
            list(&self.violations_by_kind())
        )?;
        for (i, v) in self.violations.iter().take(SHOWN).enumerate() {
            writeln!(f, "  {}. {}", i + 1, self.describe(v))?;
            match self.context.get(i).filter(|c| !c.is_empty()) {
                Some(c) => writeln!(f, "     faults before it: {c}")?,
                None => writeln!(
                    f,
                    "     faults before it: none on these holders or the server"
                )?,
            }
        }
        if self.violations.len() > SHOWN {
            writeln!(f, "  ... and {} more", self.violations.len() - SHOWN)?;
        }
        Ok(())
    }
}
