//! What the holders and the orchestrator log: one JSON object a line,
//! each line written whole with one `write(2)` on a file opened with
//! `O_APPEND`, unbuffered, so that a `SIGKILL` loses nothing a holder
//! already acted on. Times are [`now_ns`](crate::clock::now_ns).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One event of a holder process, as it logs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The process started (before it connects).
    Start {
        /// When.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The orchestrator's slot the process runs in (its proxy).
        slot: u32,
        /// How it learns that a lease is lost.
        #[serde(default)]
        watch: Watch,
    },
    /// A borrow returned a lease: `t` is when it returned (the receipt),
    /// `asked` when the borrow was called.
    Grant {
        /// When the borrow returned.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// When the borrow was called.
        asked: u64,
        /// The lease's fencing token.
        token: u64,
        /// The positions it holds.
        positions: Vec<u32>,
        /// The lease id, for reading the logs by hand.
        lease: String,
    },
    /// The holder will hold the lease of the grant it just logged until
    /// `until`, unless told it lost it (the nemesis aims at long holds).
    Hold {
        /// When.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The lease's token.
        token: u64,
        /// When it means to release the lease.
        until: u64,
    },
    /// The holder acted on its positions: it read the time `t`, then
    /// `is_held()` said `true`.
    Act {
        /// The time read before the check.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The lease's token.
        token: u64,
        /// The positions acted on.
        positions: Vec<u32>,
    },
    /// The holder learned that the lease is no longer certainly held.
    Told {
        /// For `via: is_held`, the time read before the check that said
        /// `false`; for `via: lost`, when `lost()` resolved.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The lease's token.
        token: u64,
        /// How it learned.
        via: Via,
        /// `lost()`'s reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The clocks as the holder read them when told, for reading a
        /// `told late` by hand.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        clocks: Option<Clocks>,
    },
    /// The holder is about to return the lease (its own release): it acts
    /// no more on it from `t` on.
    Release {
        /// When the release was called.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The lease's token.
        token: u64,
    },
    /// What the release answered.
    Released {
        /// When it answered.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// The lease's token.
        token: u64,
        /// `true` (it was active), `false` (it was not), an error or a
        /// time-out, in words.
        outcome: String,
    },
    /// An operation failed (connect, register, borrow): the holder tries
    /// again.
    Failed {
        /// When.
        t: u64,
        /// The holder's process id.
        pid: u32,
        /// Which operation.
        op: String,
        /// The error, in words.
        error: String,
    },
    /// The process ends by itself, at the end of its run.
    Exit {
        /// When.
        t: u64,
        /// The holder's process id.
        pid: u32,
    },
}

/// How a holder watches its lease: the two ways a holder is told it lost it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Watch {
    /// It checks `is_held()` right before each act, and never awaits
    /// `lost()`: only the check without I/O protects it.
    IsHeld,
    /// It also races `lost()` against its work.
    #[default]
    Lost,
}

impl Watch {
    /// The name used on the holder's command line and in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Watch::IsHeld => "is-held",
            Watch::Lost => "lost",
        }
    }
}

/// How a holder learned that its lease is no longer certainly held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// `LeaseGuard::is_held()` said `false`.
    IsHeld,
    /// `LeaseGuard::lost()` resolved.
    Lost,
}

impl Event {
    /// The event's time.
    pub fn t(&self) -> u64 {
        match self {
            Event::Start { t, .. }
            | Event::Grant { t, .. }
            | Event::Hold { t, .. }
            | Event::Act { t, .. }
            | Event::Told { t, .. }
            | Event::Release { t, .. }
            | Event::Released { t, .. }
            | Event::Failed { t, .. }
            | Event::Exit { t, .. } => *t,
        }
    }

    /// The process that logged it.
    pub fn pid(&self) -> u32 {
        match self {
            Event::Start { pid, .. }
            | Event::Grant { pid, .. }
            | Event::Hold { pid, .. }
            | Event::Act { pid, .. }
            | Event::Told { pid, .. }
            | Event::Release { pid, .. }
            | Event::Released { pid, .. }
            | Event::Failed { pid, .. }
            | Event::Exit { pid, .. } => *pid,
        }
    }
}

/// The clocks a holder read when told it lost a lease (unix ms): its
/// store's deciding clock (for a networked store, its bound of the
/// server's clock), this machine's wall clock (a throwaway server's own
/// clock, on this machine), and the end of the lease's session as its last
/// heartbeat set it (on the deciding clock; none if the session was
/// replaced or the lease is unbound). A holder told after the next grant
/// whose deciding clock reads behind the wall clock had a view of the
/// server's clock that lagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// The store's deciding clock.
    pub deciding_ms: u64,
    /// This machine's wall clock.
    pub wall_ms: u64,
    /// The end of the lease's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_end_ms: Option<u64>,
}

/// A fault the nemesis injected, as the orchestrator logs it: one record
/// when it starts and, for a fault that heals, one when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// For `start`, the time read just before the fault was injected; for
    /// `end`, just after it was healed (so a stopped process's interval is
    /// never shorter than the real one).
    pub t: u64,
    /// Which fault.
    pub kind: FaultKind,
    /// Its start or its end.
    pub phase: Phase,
    /// The holder slot it targets, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The holder process it targets, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Details in words (a duration, what was killed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The faults of the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// One holder's proxy cuts every connection and refuses new ones for
    /// 100 ms to 3 s.
    Blip,
    /// One holder's proxy stops moving bytes, longer than the session
    /// timeout, then lets them flow again.
    Partition,
    /// One holder's proxy cuts every connection and refuses new ones for a
    /// while (longer than the session timeout).
    Cut,
    /// `SIGSTOP` of one holder past its ttl, then `SIGCONT` (phase `end`).
    Stop,
    /// `SIGKILL` of one holder; a new one takes its slot.
    Kill,
    /// The server restarts.
    Restart,
    /// The server's idle-session timeout is set short, then reset.
    IdleTimeout,
    /// The server kills client connections.
    ServerKill,
    /// SQLite: the store's side files and directories (`<db>-holders`,
    /// `<db>-semaphore-writer`, `<db>-semaphore-turnstile`) are deleted.
    DeleteSidecars,
    /// Redis Cluster: `SIGSTOP` of a node of the pool's shard (its master,
    /// mostly) for 1.5-5 s, then `SIGCONT`: past the cluster's node timeout
    /// (2 s) its replica is elected in its place, and the stopped master
    /// wakes with the calls it had queued.
    NodeStop,
    /// An etcd cluster of three: a member (its leader, mostly) cut off
    /// from its peers for 1.5-5 s, through the proxy they reach it by:
    /// nothing it sends them arrives (its clients still reach it), so the
    /// others elect a leader without it while it may still think it leads.
    NodePartition,
}

impl FaultKind {
    /// Every fault.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Blip,
        FaultKind::Partition,
        FaultKind::Cut,
        FaultKind::Stop,
        FaultKind::Kill,
        FaultKind::Restart,
        FaultKind::IdleTimeout,
        FaultKind::ServerKill,
        FaultKind::DeleteSidecars,
        FaultKind::NodeStop,
        FaultKind::NodePartition,
    ];

    /// The fault of this [`name`](FaultKind::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The name used in logs and summaries.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Blip => "blip",
            FaultKind::Partition => "partition",
            FaultKind::Cut => "cut",
            FaultKind::Stop => "stop",
            FaultKind::Kill => "kill",
            FaultKind::Restart => "restart",
            FaultKind::IdleTimeout => "idle_timeout",
            FaultKind::ServerKill => "server_kill",
            FaultKind::DeleteSidecars => "delete_sidecars",
            FaultKind::NodeStop => "node_stop",
            FaultKind::NodePartition => "node_partition",
        }
    }
}

/// A fault's start or end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Injected.
    Start,
    /// Healed.
    End,
}

/// A log file opened for appending, unbuffered: each [`write`](Log::write)
/// is one `write(2)` of one whole line.
#[derive(Debug)]
pub struct Log {
    file: File,
}

impl Log {
    /// Opens (creating) `path` with `O_APPEND`.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file })
    }

    /// Appends `record` as one JSON line. A write that fails is reported
    /// on standard error: the run goes on, and the checker sees less.
    pub fn write(&self, record: &impl Serialize) {
        let mut line = serde_json::to_vec(record).expect("log records serialize");
        line.push(b'\n');
        if let Err(e) = (&self.file).write_all(&line) {
            eprintln!("semaphore-faults: a log write failed: {e}");
        }
    }
}

/// Reads the JSON lines of `path` as `T`s; a line that does not parse (a
/// write cut short) is skipped and counted.
///
/// # Errors
/// If the file cannot be read.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<(Vec<T>, usize)> {
    let mut records = Vec::new();
    let mut skipped = 0;
    for line in io::BufReader::new(File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(record) => records.push(record),
            Err(_) => skipped += 1,
        }
    }
    Ok((records, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_a_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let log = Log::open(&path).unwrap();
        let events = vec![
            Event::Start {
                t: 1,
                pid: 7,
                slot: 0,
                watch: Watch::IsHeld,
            },
            Event::Grant {
                t: 3,
                pid: 7,
                asked: 2,
                token: 9,
                positions: vec![0, 1],
                lease: "x".into(),
            },
            Event::Told {
                t: 4,
                pid: 7,
                token: 9,
                via: Via::Lost,
                reason: Some("gone".into()),
                clocks: Some(Clocks {
                    deciding_ms: 5,
                    wall_ms: 6,
                    session_end_ms: None,
                }),
            },
        ];
        for e in &events {
            log.write(e);
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"ev\":\"act\",\"t\":")
            .unwrap();
        let (read, skipped) = read_lines::<Event>(&path).unwrap();
        assert_eq!(read, events);
        assert_eq!(skipped, 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(r#"{"ev":"start","t":1,"pid":7,"slot":0,"watch":"is_held"}"#),
            "{text}"
        );
    }
}
