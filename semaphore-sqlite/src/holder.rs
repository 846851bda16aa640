//! Owner liveness (SPEC R16): a lease bound to its holder is freed as soon
//! as the holder's process is gone, proven by a kernel lock, not guessed.
//!
//! Each store handle that grants a bound lease holds an exclusive `flock`
//! on a file of its own, `<db>-holders/<holder id>`, from its first bound
//! grant until it is dropped; its bound leases carry that id. The kernel
//! releases the lock the instant the process dies, however it dies
//! (SIGKILL, a crash, the OOM killer), and a lock is tied to its open file,
//! so pid reuse cannot fake a live holder. A process that finds a foreign
//! holder's file unlocked (it takes the lock itself) or missing knows that
//! holder is gone, drops the file, and treats its leases as expired. This is
//! `flock(1)`'s guarantee, kept across the processes sharing the file.
//!
//! A live holder never loses a lease this way: its file is created under a
//! temporary name, locked, and only then renamed into place, and a file is
//! removed only by one who holds its lock, which no one can while its holder
//! lives. Where the directory cannot be made (a read-only location), leases
//! are left to their ttl, which bounds them in every case.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A holder's id, as stored in a lease row.
pub(crate) type HolderId = [u8; 16];

/// The holders of leases of one database file, as this store handle sees
/// them: its own (made on first use) and the others' liveness.
#[derive(Debug)]
pub(crate) struct Holders {
    dir: PathBuf,
    mine: OnceLock<Option<Mine>>,
}

/// This handle's holder: its id and the locked file that proves it lives.
#[derive(Debug)]
struct Mine {
    id: HolderId,
    path: PathBuf,
    /// Held open, and so locked, for as long as the handle lives.
    _file: File,
}

impl Drop for Mine {
    fn drop(&mut self) {
        // A clean exit leaves no file behind; a crash leaves one for the
        // next look to find unlocked and remove.
        let _ = fs::remove_file(&self.path);
    }
}

impl Holders {
    /// The holders of leases of the database at `db`.
    pub(crate) fn new(db: &Path) -> Self {
        let mut dir = db.as_os_str().to_owned();
        dir.push("-holders");
        Self {
            dir: PathBuf::from(dir),
            mine: OnceLock::new(),
        }
    }

    /// This handle's holder id, its lock taken on first use; `None` if the
    /// directory or the file cannot be made, and then a bound lease is
    /// left to its ttl. Blocking: file I/O on first use.
    pub(crate) fn mine(&self) -> Option<HolderId> {
        self.mine
            .get_or_init(|| match self.create() {
                Ok(mine) => Some(mine),
                Err(e) => {
                    tracing::warn!(
                        target: "semaphore",
                        dir = %self.dir.display(),
                        "bound leases are left to their ttl: cannot make a holder file: {e}"
                    );
                    None
                }
            })
            .as_ref()
            .map(|m| m.id)
    }

    /// Whether holder `id` is known to be gone: its file is missing, or
    /// unlocked (its process died). `false` for this handle's own holder
    /// and whenever the file cannot be checked. A gone holder's file is
    /// removed.
    pub(crate) fn is_gone(&self, id: &HolderId) -> bool {
        if self
            .mine
            .get()
            .and_then(Option::as_ref)
            .is_some_and(|m| &m.id == id)
        {
            return false;
        }
        let path = self.dir.join(name(id));
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) => return e.kind() == io::ErrorKind::NotFound,
        };
        match file.try_lock() {
            Ok(()) => {
                let _ = fs::remove_file(&path);
                true
            }
            Err(TryLockError::WouldBlock | TryLockError::Error(_)) => false,
        }
    }

    /// Makes the directory, removes the files of gone holders, and makes
    /// this handle's file: created under a temporary name, locked, then
    /// renamed into place, so that no one ever sees it unlocked.
    fn create(&self) -> io::Result<Mine> {
        fs::create_dir_all(&self.dir)?;
        self.sweep();
        let id = *uuid::Uuid::new_v4().as_bytes();
        let temporary = self.dir.join(format!(".{}.new", name(&id)));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        if let Err(e) = file.try_lock() {
            let _ = fs::remove_file(&temporary);
            return Err(match e {
                TryLockError::Error(e) => e,
                TryLockError::WouldBlock => io::Error::other("a fresh file was locked"),
            });
        }
        let path = self.dir.join(name(&id));
        fs::rename(&temporary, &path)?;
        Ok(Mine {
            id,
            path,
            _file: file,
        })
    }

    /// Removes the files of holders that are gone (their processes died
    /// without removing them).
    fn sweep(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|n| uuid::Uuid::try_parse(n).ok())
                .map(|u| *u.as_bytes());
            if let Some(id) = id {
                self.is_gone(&id);
            }
        }
    }
}

/// A holder's file name: its id as 32 hex digits.
fn name(id: &HolderId) -> String {
    uuid::Uuid::from_bytes(*id).simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_is_never_gone_and_a_dropped_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("h.db");
        let (a, b) = (Holders::new(&db), Holders::new(&db));
        let id = a.mine().expect("a holder file");
        assert!(!a.is_gone(&id), "its own holder");
        assert!(!b.is_gone(&id), "locked by a live handle");
        assert!(!b.is_gone(&id), "and still after a look");
        drop(a);
        assert!(b.is_gone(&id), "unlocked once its handle is dropped");
        assert!(b.is_gone(&[7; 16]), "a holder with no file");
    }

    #[test]
    fn a_crashed_holders_file_is_found_unlocked_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("h.db");
        let holders = dir.path().join("h.db-holders");
        fs::create_dir_all(&holders).unwrap();
        let id = [9u8; 16];
        // What a SIGKILLed process leaves: its file, with no lock on it.
        fs::write(holders.join(name(&id)), b"").unwrap();
        let b = Holders::new(&db);
        b.mine().expect("a holder file");
        assert!(
            !holders.join(name(&id)).exists(),
            "the first use swept the dead holder's file"
        );
        assert!(b.is_gone(&id));
    }
}
