//! Owner liveness: a lease bound to its holder is freed
//! as soon as the holder's process is gone, proven by a kernel lock, not
//! guessed; and nothing but the process's end can end the holder.
//!
//! Each store handle that grants a bound lease holds an exclusive POSIX
//! record lock (`fcntl(F_SETLK)`, the whole file) on a file of its own,
//! `<db>-holders/<holder id>`, from its first bound grant until it is
//! dropped; its bound leases carry that id. The kernel releases the lock
//! the instant the process dies, however it dies (SIGKILL, a crash, the
//! OOM killer), and a lock is tied to the process and its open file, so
//! pid reuse cannot fake a live holder. A process that finds a foreign
//! holder's file *unlocked* (`F_GETLK` reports no lock) knows that holder
//! is gone, and treats its leases as expired.
//!
//! Why a record lock, not `flock` or an open file description lock
//! (`F_OFD_SETLK`): both of those belong to the open file description,
//! which `fork()` shares with the child, so a child that never touches
//! the store (Python's `multiprocessing` with the fork start method, a
//! pre-fork server) would keep a killed holder's slots for as long as it
//! lives. A record lock belongs to the process alone: a child inherits
//! none (rule "R16 whatever a process's children do"). What a record lock
//! asks in return, kept here:
//! - It is released when the process closes *any* descriptor of the file,
//!   so this process never opens a holder file of its own: a holder id
//!   starts with the id of the process that made it (4 bytes, then 12
//!   random ones), and the file of a holder of this process's is never
//!   opened, by this handle or any other in the process (several handles
//!   on one file, or the loadable extension beside the library).
//! - Locks of one process never conflict with each other, so a lock
//!   cannot tell this process's other holders' liveness: they are known
//!   instead. A holder whose handle was dropped (or abandoned, in tests)
//!   is recorded as ended for the whole process, and is gone; any other of
//!   this process's is alive. A holder of another process that happens to
//!   share this pid (one long dead, or one in another pid namespace
//!   sharing the file) is then never taken for gone by this process: its
//!   leases are left to their ttl, never freed early.
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

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;

use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

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
                let id = new_id();
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
        let was = std::mem::replace(&mut *self.mine.lock(), Mine::Failed);
        ended(was);
    }

    /// Whether holder `id` is known to be gone: its file is there and
    /// unlocked (its process died). `false` for this handle's own holder,
    /// for a missing file, and whenever the file cannot be checked.
    /// A holder of this process's (this handle's or another's) is never
    /// gone, and its file is never opened: closing it would release the
    /// process's lock.
    pub(crate) fn is_gone(&self, id: &HolderId) -> bool {
        if is_this_process(id) {
            return ENDED.lock().contains(id);
        }
        self.unlocked(id)
    }

    /// Whether holder `id`'s file is there and no process holds a lock
    /// on it. Never called for a holder of this process.
    fn unlocked(&self, id: &HolderId) -> bool {
        debug_assert!(!is_this_process(id));
        let Ok(file) = File::open(self.dir.join(name(id))) else {
            return false;
        };
        let mut probe = whole_file(libc::F_WRLCK);
        fcntl(&file, FcntlArg::F_GETLK(&mut probe)).is_ok()
            && probe.l_type == libc::F_UNLCK as libc::c_short
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
        if let Err(e) = fcntl(&file, FcntlArg::F_SETLK(&whole_file(libc::F_WRLCK))) {
            let _ = fs::remove_file(&temporary);
            return Err(e.into());
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
            // Called before this handle's own file exists.
            if !self.is_gone(&id) {
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

impl Drop for Holders {
    /// The handle's holder ends: its files close (so its lock is
    /// released), and the process records it as ended.
    fn drop(&mut self) {
        ended(std::mem::take(self.mine.get_mut()));
    }
}

/// The holders of this process whose handle was dropped (or abandoned):
/// gone, though no lock can say so to this process (see the module's
/// docs). 16 bytes a dropped handle that had a holder.
static ENDED: LazyLock<Mutex<HashSet<HolderId>>> = LazyLock::new(Mutex::default);

/// Records the holder `was`, if it had been made, as ended, and closes
/// its files.
fn ended(was: Mine) {
    if let Mine::Made { id, files, .. } = was {
        ENDED.lock().insert(id);
        drop(files);
    }
}

fn warn(dir: &Path, e: &io::Error) {
    tracing::warn!(
        target: "semaphore",
        dir = %dir.display(),
        "bound leases are left to their ttl: cannot make a holder file: {e}"
    );
}

/// The bytes of this process's id that start every holder id it makes.
fn this_process() -> [u8; 4] {
    std::process::id().to_be_bytes()
}

/// Whether holder `id` was made by this process (or by a dead or foreign
/// one with the same pid: see the module's docs).
fn is_this_process(id: &HolderId) -> bool {
    id[..4] == this_process()
}

/// A new holder id: this process's id, then 12 random bytes.
fn new_id() -> HolderId {
    let mut id = *uuid::Uuid::new_v4().as_bytes();
    id[..4].copy_from_slice(&this_process());
    id
}

/// A record lock (or a probe for one) of `kind` over the whole file.
fn whole_file(kind: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
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

    /// Whether another process finds a record lock on the file at `path`:
    /// this test binary run again as [`probe`], since no lock of this
    /// process's can be seen from it (and opening its file here would
    /// release it).
    fn locked_seen_from_another_process(path: &Path) -> bool {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "holder::tests::probe", "--nocapture"])
            .env("SEMAPHORE_HOLDER_PROBE", path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        match (
            said.contains("probe: locked"),
            said.contains("probe: unlocked"),
        ) {
            (true, false) => true,
            (false, true) => false,
            _ => panic!("the probe said neither: {said}"),
        }
    }

    /// The other process of [`locked_seen_from_another_process`]; nothing
    /// when run as a test of its own.
    #[test]
    fn probe() {
        let Some(path) = std::env::var_os("SEMAPHORE_HOLDER_PROBE") else {
            return;
        };
        let file = File::open(path).unwrap();
        let mut probe = whole_file(libc::F_WRLCK);
        fcntl(&file, FcntlArg::F_GETLK(&mut probe)).unwrap();
        let unlocked = probe.l_type == libc::F_UNLCK as libc::c_short;
        println!("probe: {}", if unlocked { "unlocked" } else { "locked" });
    }

    #[test]
    fn a_live_holder_is_never_gone_and_a_dropped_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let (a, b) = (Holders::new(&db), Holders::new(&db));
        let id = a.mine(&conn).expect("a holder file");
        let file = dir.path().join("h.db-holders").join(name(&id));
        assert!(!a.is_gone(&id), "its own holder");
        assert!(!b.is_gone(&id), "another handle's of this process, alive");
        assert!(!b.is_gone(&id), "and still after a look");
        assert!(
            locked_seen_from_another_process(&file),
            "another process finds it locked"
        );
        assert!(
            !b.is_gone(&id),
            "and the look of another process released nothing"
        );
        drop(a);
        assert!(b.is_gone(&id), "ended once its handle is dropped");
        assert!(
            !locked_seen_from_another_process(&file),
            "and unlocked for other processes"
        );
        assert!(
            !b.is_gone(&[7; 16]),
            "a holder with no file is not known gone"
        );
    }

    #[test]
    fn holder_ids_name_their_process_and_a_foreign_unlocked_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let a = Holders::new(&db);
        let id = a.mine(&conn).expect("a holder file");
        assert_eq!(id[..4], std::process::id().to_be_bytes());
        // What another process that died leaves: its file, unlocked.
        let mut foreign = id;
        foreign[..4].copy_from_slice(&(std::process::id() ^ 1).to_be_bytes());
        fs::write(dir.path().join("h.db-holders").join(name(&foreign)), b"").unwrap();
        assert!(a.is_gone(&foreign));
    }

    #[test]
    fn deleting_the_directory_ends_no_live_holder_and_the_file_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let (db, conn) = (dir.path().join("h.db"), database(dir.path()));
        let (a, b) = (Holders::new(&db), Holders::new(&db));
        let id = a.mine(&conn).expect("a holder file");
        let holders = dir.path().join("h.db-holders");
        // What a process that opened the file just before it was deleted
        // still reaches: the same file, by another name.
        let early = dir.path().join("early");
        fs::hard_link(holders.join(name(&id)), &early).unwrap();
        fs::remove_dir_all(&holders).unwrap();
        assert!(!b.is_gone(&id), "a missing file is not a gone holder");
        assert_eq!(a.mine(&conn), Some(id), "the next bound grant keeps its id");
        assert!(holders.join(name(&id)).exists(), "and makes its file again");
        assert!(!b.is_gone(&id), "alive");
        assert!(
            locked_seen_from_another_process(&holders.join(name(&id))),
            "the new file is locked"
        );
        assert!(
            locked_seen_from_another_process(&early),
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
