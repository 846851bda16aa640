//! Owner liveness: a lease bound to its holder is freed
//! as soon as the holder's process is gone, proven by a kernel lock, not
//! guessed; and nothing but the process's end can end the holder.
//!
//! Each store handle that grants a bound lease holds an exclusive `flock`
//! on a file of its own, `<db>-holders/<holder id>`, from its first bound
//! grant until it is dropped; its bound leases carry that id. The kernel
//! releases the lock the instant the process dies, however it dies
//! (SIGKILL, a crash, the OOM killer), and a lock is tied to its open file,
//! so pid reuse cannot fake a live holder. A process that finds a foreign
//! holder's file *unlocked* (it takes the lock itself) knows that holder is
//! gone, and treats its leases as expired.
//!
//! Deleting files cannot end a live holder:
//! - A holder whose file is *missing* is not taken for gone: its leases
//!   are left to their ttl. So `rm -rf <db>-holders` (a tmp cleaner, an
//!   operator) frees nothing that a live process holds.
//! - A handle checks its own file at every bound grant, and makes it again
//!   if it was removed or replaced: under a temporary name, locked, then
//!   renamed into place, so that no one ever sees it unlocked. The files it
//!   made before stay open (and locked) for the handle's life, so that a
//!   process that opened one before it was deleted still finds it locked.
//! - A gone holder's file is removed only by the first bound grant of a
//!   handle (its sweep), in the same transaction that ends that holder's
//!   leases in every pool; a clean drop of a handle leaves its file,
//!   unlocked, for that sweep.
//!
//! What this costs, written down: a holder that dies while its file is
//! missing (deleted, and not yet made again by its next bound grant) has
//! its leases left to their ttl; so has one whose file the sweep removed
//! in a transaction that then failed. Where the directory cannot be made
//! (a read-only location), leases are left to their ttl, which bounds them
//! in every case.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::{Connection, params};

/// A holder's id, as stored in a lease row.
pub(crate) type HolderId = [u8; 16];

/// The holders of leases of one database file, as this store handle sees
/// them: its own (made on first use) and the others' liveness.
#[derive(Debug)]
pub(crate) struct Holders {
    dir: PathBuf,
    mine: Mutex<Mine>,
}

/// This handle's holder.
#[derive(Debug, Default)]
enum Mine {
    /// Not made yet.
    #[default]
    Unmade,
    /// The directory or the file cannot be made: bound leases are left to
    /// their ttl.
    Failed,
    /// Its id, and every file it made, the current one last: held open,
    /// and so locked, for as long as the handle lives; and the current
    /// one's device and inode, read once when it was made (an open file's
    /// never change), `None` if they could not be.
    Made {
        id: HolderId,
        files: Vec<File>,
        current: Option<(u64, u64)>,
    },
}

impl Holders {
    /// The holders of leases of the database at `db`.
    pub(crate) fn new(db: &Path) -> Self {
        let mut dir = db.as_os_str().to_owned();
        dir.push("-holders");
        Self {
            dir: PathBuf::from(dir),
            mine: Mutex::new(Mine::Unmade),
        }
    }

    /// This handle's holder id, its lock taken on first use, its file
    /// made again if it was removed; `None` if the directory or the file
    /// cannot be made, and then a bound lease is left to its ttl. On first
    /// use, also ends the leases of gone holders in `conn`'s transaction
    /// and removes their files. Blocking: file I/O.
    pub(crate) fn mine(&self, conn: &Connection) -> Option<HolderId> {
        let mut mine = self.mine.lock();
        match &mut *mine {
            Mine::Failed => None,
            Mine::Made { id, files, current } => {
                let id = *id;
                if !self.still_there(&id, *current) {
                    match self.make(&id) {
                        Ok(file) => {
                            *current = identity(&file);
                            files.push(file);
                        }
                        Err(e) => warn(&self.dir, &e),
                    }
                }
                Some(id)
            }
            Mine::Unmade => {
                let id = *uuid::Uuid::new_v4().as_bytes();
                let made = fs::create_dir_all(&self.dir).and_then(|()| {
                    self.sweep(conn);
                    self.make(&id)
                });
                match made {
                    Ok(file) => {
                        *mine = Mine::Made {
                            id,
                            current: identity(&file),
                            files: vec![file],
                        };
                        Some(id)
                    }
                    Err(e) => {
                        warn(&self.dir, &e);
                        *mine = Mine::Failed;
                        None
                    }
                }
            }
        }
    }

    /// Lets go of this handle's holder as a process killed outright would:
    /// its files close, unlocked, and later bound leases are left to their
    /// ttl. For tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn abandon(&self) {
        *self.mine.lock() = Mine::Failed;
    }

    /// Whether holder `id` is known to be gone: its file is there and
    /// unlocked (its process died). `false` for this handle's own holder,
    /// for a missing file, and whenever the file cannot be checked.
    pub(crate) fn is_gone(&self, id: &HolderId) -> bool {
        if matches!(&*self.mine.lock(), Mine::Made { id: mine, .. } if mine == id) {
            return false;
        }
        self.unlocked(id)
    }

    /// Whether holder `id`'s file is there and unlocked.
    fn unlocked(&self, id: &HolderId) -> bool {
        let Ok(file) = File::open(self.dir.join(name(id))) else {
            return false;
        };
        matches!(file.try_lock(), Ok(()))
    }

    /// Whether holder `id`'s file is still the one this handle locked,
    /// whose device and inode are `held`: one `stat` of the path.
    fn still_there(&self, id: &HolderId, held: Option<(u64, u64)>) -> bool {
        let Ok(on_disk) = fs::metadata(self.dir.join(name(id))) else {
            return false;
        };
        held == Some((on_disk.dev(), on_disk.ino()))
    }

    /// Makes holder `id`'s file: created under a temporary name, locked,
    /// then renamed into place, so that no one ever sees it unlocked.
    fn make(&self, id: &HolderId) -> io::Result<File> {
        fs::create_dir_all(&self.dir)?;
        let temporary = self.dir.join(format!(
            ".{}.{}.new",
            name(id),
            uuid::Uuid::new_v4().simple()
        ));
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
        fs::rename(&temporary, self.dir.join(name(id)))?;
        Ok(file)
    }

    /// Ends the leases of every gone holder (its file unlocked), in every
    /// pool, in `conn`'s transaction, and removes its file.
    fn sweep(&self, conn: &Connection) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| uuid::Uuid::try_parse(n).ok())
                .map(|u| *u.as_bytes())
            else {
                continue;
            };
            // Called before this handle's own file exists: any unlocked
            // file is a gone holder's.
            if !self.unlocked(&id) {
                continue;
            }
            let ended = conn
                .prepare_cached("DELETE FROM semaphore_leases WHERE holder = ?1")
                .and_then(|mut delete| delete.execute(params![id]));
            if ended.is_ok() {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

fn warn(dir: &Path, e: &io::Error) {
    tracing::warn!(
        target: "semaphore",
        dir = %dir.display(),
        "bound leases are left to their ttl: cannot make a holder file: {e}"
    );
}

/// The device and inode of an open file, if they can be read.
fn identity(file: &File) -> Option<(u64, u64)> {
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// A holder's file name: its id as 32 hex digits.
fn name(id: &HolderId) -> String {
    uuid::Uuid::from_bytes(*id).simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(dir: &Path) -> Connection {
        let conn = Connection::open(dir.join("h.db")).unwrap();
        conn.execute_batch("CREATE TABLE semaphore_leases (holder BLOB)")
            .unwrap();
        conn
    }

    #[test]
    fn a_live_holder_is_never_gone_and_a_dropped_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let (a, b) = (Holders::new(&db), Holders::new(&db));
        let id = a.mine(&conn).expect("a holder file");
        assert!(!a.is_gone(&id), "its own holder");
        assert!(!b.is_gone(&id), "locked by a live handle");
        assert!(!b.is_gone(&id), "and still after a look");
        drop(a);
        assert!(b.is_gone(&id), "unlocked once its handle is dropped");
        assert!(
            !b.is_gone(&[7; 16]),
            "a holder with no file is not known gone"
        );
    }

    #[test]
    fn deleting_the_directory_ends_no_live_holder_and_the_file_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let (a, b) = (Holders::new(&db), Holders::new(&db));
        let id = a.mine(&conn).expect("a holder file");
        let holders = dir.path().join("h.db-holders");
        // A process that opened the file just before it was deleted.
        let early = File::open(holders.join(name(&id))).unwrap();
        fs::remove_dir_all(&holders).unwrap();
        assert!(!b.is_gone(&id), "a missing file is not a gone holder");
        assert_eq!(a.mine(&conn), Some(id), "the next bound grant keeps its id");
        assert!(holders.join(name(&id)).exists(), "and makes its file again");
        assert!(!b.is_gone(&id), "locked again");
        assert!(
            matches!(early.try_lock(), Err(TryLockError::WouldBlock)),
            "the deleted file stays locked while its handle lives"
        );
    }

    #[test]
    fn the_first_bound_grant_sweeps_gone_holders_and_their_leases() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let holders = dir.path().join("h.db-holders");
        fs::create_dir_all(&holders).unwrap();
        let id = [9u8; 16];
        // What a SIGKILLed process leaves: its file, with no lock on it,
        // and a lease bound to it.
        fs::write(holders.join(name(&id)), b"").unwrap();
        conn.execute("INSERT INTO semaphore_leases VALUES (?1)", params![id])
            .unwrap();
        let b = Holders::new(&db);
        b.mine(&conn).expect("a holder file");
        assert!(!holders.join(name(&id)).exists(), "its file is removed");
        let left: i64 = conn
            .query_row("SELECT count(*) FROM semaphore_leases", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0, "and its lease ended");
    }
}
