//! The holder processes: one per slot, each through the slot's proxy,
//! started, replaced when killed or when they exit early, and waited for
//! at the end of the run. Even slots run `is-held` holders (they check
//! `is_held()` before each act and nothing else), odd slots `lost`
//! holders (they also race `lost()`), so that a bug in either way of
//! telling a holder shows.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Config, POOL};
use crate::clock::now_ns;
use crate::event::{Event, Watch};
use crate::proxy::Proxies;
use crate::server::Server;

/// One holder's place: its proxy, and the process now in it.
pub(super) struct Slot {
    pub(super) index: u32,
    pub(super) proxy: Option<Proxies>,
    child: Option<Child>,
    pub(super) pid: u32,
    generation: u32,
    /// How its holders watch their leases.
    pub(super) watch: Watch,
    /// No new fault on this slot before this time (ns).
    pub(super) busy_until: u64,
}

/// The holder processes; killed when dropped.
pub(super) struct Holders<'a> {
    pub(super) config: &'a Config,
    server: &'a Server,
    dir: PathBuf,
    namespace: String,
    until: u64,
    pub(super) slots: Vec<Slot>,
}

impl Drop for Holders<'_> {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl<'a> Holders<'a> {
    /// The holders of a run, one slot per proxy (`None`: the store is not
    /// networked), none started yet.
    pub(super) fn new(
        config: &'a Config,
        server: &'a Server,
        dir: PathBuf,
        namespace: String,
        until: u64,
        proxies: &[Option<Proxies>],
    ) -> Self {
        Holders {
            config,
            server,
            dir,
            namespace,
            until,
            slots: proxies
                .iter()
                .enumerate()
                .map(|(i, proxy)| Slot {
                    index: i as u32,
                    proxy: proxy.clone(),
                    child: None,
                    pid: 0,
                    generation: 0,
                    watch: if i % 2 == 0 {
                        Watch::IsHeld
                    } else {
                        Watch::Lost
                    },
                    busy_until: 0,
                })
                .collect(),
        }
    }
}

impl Holders<'_> {
    /// Starts a new holder process in slot `i`. Only ever called on the
    /// orchestrator's thread (see the module's docs).
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let config = self.config;
        let slot = &mut self.slots[i];
        slot.generation += 1;
        let reach = self.server.holder_args(slot.proxy.as_ref(), slot.index);
        let name = format!("holder-{}-{}", slot.index, slot.generation);
        let stderr = fs::File::create(self.dir.join(format!("{name}.stderr")))
            .map_err(|e| format!("{name}.stderr: {e}"))?;
        let seed = config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (u64::from(slot.index) << 32)
            ^ u64::from(slot.generation);
        let mut command = Command::new(&config.holder_bin);
        command
            .args(["--store", config.store.name()])
            .args(&reach)
            .args(["--namespace", &self.namespace, "--pool", POOL])
            .args(["--count", &config.count.to_string()])
            .args(["--ttl-ms", &config.ttl.as_millis().to_string()])
            .args([
                "--session-ms",
                &config.session_timeout.as_millis().to_string(),
            ])
            .args(["--until-ns", &self.until.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--slot", &slot.index.to_string()])
            .args(["--two-slot-percent", &config.two_slot_percent.to_string()])
            .args(["--watch", slot.watch.name()])
            .arg("--log")
            .arg(self.dir.join(format!("{name}.jsonl")))
            .env("FAULTS_PARENT_PID", std::process::id().to_string())
            .env("SEMAPHORE_MUTANT", config.mutant.as_deref().unwrap_or(""))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", config.holder_bin.display()))?;
        slot.pid = child.id();
        slot.child = Some(child);
        Ok(())
    }

    /// Holders that exited by themselves before the end of their run: a
    /// problem each; a new holder takes the slot.
    pub(super) fn reap_early_exits(&mut self, problems: &mut Vec<String>) {
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            let Some(child) = slot.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                problems.push(format!(
                    "holder pid {} (slot {}) exited by itself ({status}) before the end of its run; \
                     see holder-{}-{}.stderr",
                    slot.pid, slot.index, slot.index, slot.generation
                ));
                slot.child = None;
                if let Err(e) = self.spawn(i) {
                    problems.push(e);
                }
            }
        }
    }

    /// Starts every slot's first holder.
    ///
    /// # Panics
    /// If one cannot be started.
    pub(super) fn spawn_all(&mut self) {
        for i in 0..self.slots.len() {
            if let Err(e) = self.spawn(i) {
                panic!("{e}");
            }
        }
    }

    /// The slots open to a new fault at `now`: not busy with one, and
    /// with a holder running.
    pub(super) fn free(&self, now: u64) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].busy_until <= now && self.slots[i].child.is_some())
            .collect()
    }

    /// Until when slot `i`'s holder means to hold the lease it holds now,
    /// if it holds one and has not been told it lost it: read from the
    /// tail of its log (its last `hold`, with no `told` or `release`
    /// after it).
    pub(super) fn holding_until(&self, i: usize) -> Option<u64> {
        let slot = &self.slots[i];
        let path = self
            .dir
            .join(format!("holder-{}-{}.jsonl", slot.index, slot.generation));
        let tail = read_tail(&path, 16 * 1024)?;
        for line in tail.lines().rev() {
            match serde_json::from_str::<Event>(line) {
                Ok(Event::Hold { until, .. }) => return Some(until),
                Ok(Event::Told { .. } | Event::Release { .. } | Event::Start { .. }) => {
                    return None;
                }
                _ => {}
            }
        }
        None
    }

    /// Kills slot `i`'s holder (`SIGKILL`) and starts a new one in its
    /// place.
    pub(super) fn kill_and_replace(&mut self, i: usize) -> Result<(), String> {
        if let Some(mut child) = self.slots[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn(i)
    }

    /// Waits for the holders to end their run by themselves, until
    /// `deadline` (ns); a problem for each that ended badly, and for each
    /// still running then, which is killed.
    pub(super) async fn wait_for_end(&mut self, deadline: u64, problems: &mut Vec<String>) {
        loop {
            let mut running = 0;
            for slot in &mut self.slots {
                if let Some(child) = slot.child.as_mut()
                    && matches!(child.try_wait(), Ok(None))
                {
                    running += 1;
                }
            }
            if running == 0 || now_ns() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                match child.try_wait() {
                    Ok(Some(status)) if !status.success() => problems.push(format!(
                        "holder pid {} (slot {}) ended with {status}; see holder-{}-{}.stderr",
                        slot.pid, slot.index, slot.index, slot.generation
                    )),
                    Ok(Some(_)) => {}
                    _ => {
                        problems.push(format!(
                        "holder pid {} (slot {}) was still running 25 s after the end of its run: killed",
                        slot.pid, slot.index
                    ));
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            }
        }
    }
}

/// The last `bytes` of the file at `path` (fewer if it is shorter), from
/// its first whole line.
fn read_tail(path: &std::path::Path, bytes: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(bytes);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    Some(match (from, text.find('\n')) {
        (0, _) | (_, None) => text.into_owned(),
        (_, Some(cut)) => text[cut + 1..].to_string(),
    })
}
