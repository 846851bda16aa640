//! Reading a run's logs back, and the run's summary.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::{Config, secs};
use crate::check::{History, Report};
use crate::event::{Event, FaultRecord, read_lines};

/// Every holder log (`holder-*.jsonl`) and the faults log
/// (`faults.jsonl`) of a run's directory.
pub fn read_history(dir: &Path) -> History {
    let mut history = History::default();
    let Ok(entries) = fs::read_dir(dir) else {
        return history;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "faults.jsonl" {
            if let Ok((faults, skipped)) = read_lines::<FaultRecord>(&path) {
                history.faults.extend(faults);
                history.skipped_lines += skipped;
            }
        } else if name.starts_with("holder-")
            && name.ends_with(".jsonl")
            && let Ok((events, skipped)) = read_lines::<Event>(&path)
        {
            history.events.extend(events);
            history.skipped_lines += skipped;
        }
    }
    history
}

/// The summary: the settings, the report, the problems (each once, with
/// its count), where the logs are and how to replay the run.
pub(super) fn summary(config: &Config, report: &Report, problems: &[String], dir: &Path) -> String {
    let mut s = format!(
        "semaphore-faults summary: store {}, seed {}, {} of faults + {} settling, {} holders, \
         count {}, ttl {} ms, session timeout {} ms\n",
        config.store.name(),
        config.seed,
        secs(config.duration),
        secs(config.settle),
        config.holders,
        config.count,
        config.ttl.as_millis(),
        config.session_timeout.as_millis()
    );
    if let Some(only) = &config.faults {
        s += &format!(
            "faults picked from: {}\n",
            if only.is_empty() {
                "none".to_string()
            } else {
                only.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
            }
        );
    }
    s += &report.to_string();
    if !problems.is_empty() {
        let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
        for p in problems {
            *counted.entry(p.as_str()).or_insert(0) += 1;
        }
        s += &format!("problems: {}\n", problems.len());
        for (p, n) in counted {
            s += &if n > 1 {
                format!("  - {p} (x{n})\n")
            } else {
                format!("  - {p}\n")
            };
        }
    }
    s += &format!(
        "logs: {}{}\nreplay: SEMAPHORE_FAULTS_SEED={} SEMAPHORE_FAULTS_SECONDS={}{}",
        dir.display(),
        if report.violations.is_empty() && problems.is_empty() && !config.keep_logs {
            " (removed: the run passed; SEMAPHORE_FAULTS_KEEP=1 keeps them)"
        } else {
            ""
        },
        config.seed,
        config.duration.as_secs(),
        config.faults.as_ref().map_or(String::new(), |only| format!(
            " SEMAPHORE_FAULTS_KINDS={}",
            if only.is_empty() {
                "none".to_string()
            } else {
                only.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
            }
        ))
    );
    s
}
