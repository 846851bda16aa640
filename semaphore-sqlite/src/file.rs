//! Which files a store opened, and the check that their paths still name
//! them (nothing lost on failure).
//!
//! SQLite keeps writing to a database file, or to its `-wal` and `-shm`
//! files, after they were deleted or replaced under it, where no other
//! process will ever look: a lease granted there is invisible to everyone
//! else, who may grant the same slot and token again. The store checks
//! before every transaction that the three paths still name the files it
//! opened (one `stat` each), and refuses otherwise.

use std::path::{Path, PathBuf};

/// The identity of one file: device and inode on Unix.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    id: (u64, u64),
}

impl FileIdentity {
    pub(crate) fn of(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            id: Self::stat(path)?,
        })
    }

    #[cfg(unix)]
    fn stat(path: &Path) -> std::io::Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok((meta.dev(), meta.ino()))
    }

    #[cfg(not(unix))]
    fn stat(path: &Path) -> std::io::Result<(u64, u64)> {
        std::fs::metadata(path).map(|_| (0, 0))
    }

    /// Device and inode, as opened.
    pub(crate) fn id(&self) -> (u64, u64) {
        self.id
    }

    /// Whether `path` names the file opened (a caller's connection, say).
    pub(crate) fn names(&self, path: &Path) -> bool {
        Self::stat(path).is_ok_and(|id| id == self.id)
    }

    /// `Ok` if the path still names the file opened.
    pub(crate) fn check(&self) -> std::io::Result<()> {
        match Self::stat(&self.path) {
            Ok(id) if id == self.id => Ok(()),
            Ok(_) => Err(std::io::Error::other(format!(
                "{} was replaced by another file since the store opened it; open the store again",
                self.path.display()
            ))),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!(
                    "{} is gone since the store opened it ({e}); open the store again",
                    self.path.display()
                ),
            )),
        }
    }
}

/// The database file and its WAL and shared-memory files, as opened.
#[derive(Debug)]
pub(crate) struct Files {
    pub(crate) db: FileIdentity,
    wal: FileIdentity,
    shm: FileIdentity,
}

impl Files {
    /// The identities of `db`, `db-wal` and `db-shm`, which must exist: open
    /// them first (a connection in WAL mode that has read the file).
    pub(crate) fn of(db: &Path) -> std::io::Result<Self> {
        let with = |suffix: &str| {
            let mut name = db.as_os_str().to_os_string();
            name.push(suffix);
            FileIdentity::of(Path::new(&name))
        };
        Ok(Self {
            db: FileIdentity::of(db)?,
            wal: with("-wal")?,
            shm: with("-shm")?,
        })
    }

    /// `Ok` if all three paths still name the files opened.
    pub(crate) fn check(&self) -> std::io::Result<()> {
        self.db.check()?;
        self.wal.check()?;
        self.shm.check()
    }
}
