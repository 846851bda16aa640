//! The wake-up that follows the commit (rule "Stores": wake-ups
//! across processes): a process whose commit can let a waiter in rings, right
//! after `COMMIT`, each process whose head queues on that pool in the file.
//!
//! A file-change notification fires on the WAL's writes, before the commit
//! is visible, so a head it wakes often looks too early and must wait for
//! the next telling (measured: p50 294-570 µs from commit to grant). A ring
//! comes after the commit, so the head's next look sees it.
//!
//! On Linux each process binds one datagram socket in the abstract
//! namespace, named after its pid and pid namespace, which the heads'
//! table already records: no new column, and processes of older versions
//! share the file unchanged (they neither ring nor are rung, and keep the
//! file watch). A ring carries the file's identity and the pool's id; the
//! receiving thread wakes the head of that pool in each store handle of its
//! process on that file. Sends never block (a full receive buffer drops the
//! ring), and a ring to a process that is gone fails quietly: the file
//! watch and the poll stay as the fallback for every case a ring misses.
//!
//! Anyone on the machine can send to an abstract socket. A stray datagram
//! can only make a head look at the file once more; rings carry nothing
//! that is trusted.
//!
//! Elsewhere than Linux, and if the socket cannot be bound, nothing rings
//! and waiters rely on the file watch, as before.

use semaphore_core::PoolId;

/// A file's identity: device and inode.
pub(crate) type FileId = (u64, u64);

#[cfg(target_os = "linux")]
pub(crate) use linux::Doorbell;
#[cfg(all(target_os = "linux", feature = "extension"))]
pub(crate) use linux::ring_from_outside;

#[cfg(not(target_os = "linux"))]
pub(crate) use other::Doorbell;
#[cfg(all(not(target_os = "linux"), feature = "extension"))]
pub(crate) use other::ring_from_outside;

/// What a ring says: the file's identity, then the pool's id.
const RING_LEN: usize = 32;

fn encode(file: FileId, pool: PoolId) -> [u8; RING_LEN] {
    let mut ring = [0u8; RING_LEN];
    ring[..8].copy_from_slice(&file.0.to_le_bytes());
    ring[8..16].copy_from_slice(&file.1.to_le_bytes());
    ring[16..].copy_from_slice(pool.as_uuid().as_bytes());
    ring
}

fn decode(ring: &[u8]) -> Option<(FileId, PoolId)> {
    let ring: &[u8; RING_LEN] = ring.try_into().ok()?;
    let word = |at: usize| u64::from_le_bytes(ring[at..at + 8].try_into().unwrap_or_default());
    let pool = uuid::Uuid::from_bytes(ring[16..].try_into().unwrap_or_default());
    Some(((word(0), word(8)), PoolId::from_uuid(pool)))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::net::Shutdown;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Weak};
    use std::thread::JoinHandle;

    use semaphore_core::store::ForkCheck;

    use parking_lot::Mutex;
    use semaphore_core::PoolId;
    use semaphore_core::store::Changes;

    use super::{FileId, RING_LEN, decode, encode};
    use crate::wake::liveness;

    /// This process's socket and receiving thread, shared by its store
    /// handles; ends when the last handle drops.
    static CURRENT: std::sync::Mutex<Weak<Receiver>> = std::sync::Mutex::new(Weak::new());

    /// The name of process `pid`'s socket, in pid namespace `namespace`.
    fn address(pid: i64, namespace: &str) -> io::Result<SocketAddr> {
        SocketAddr::from_abstract_name(format!("semaphore-sqlite/1/{namespace}/{pid}"))
    }

    /// Rings, for `pool` of `file`, the processes `pids` (of this pid
    /// namespace) from a process without a store handle on the file (the
    /// loadable extension's): it only sends, from an unbound socket made
    /// once, and binds nothing. This process itself is skipped: it has no
    /// waiters of its own to wake.
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    pub(crate) fn ring_from_outside(file: FileId, pool: PoolId, pids: &[i64]) {
        static SENDER: std::sync::OnceLock<Option<UnixDatagram>> = std::sync::OnceLock::new();
        let sender = SENDER.get_or_init(|| {
            let sender = UnixDatagram::unbound().ok()?;
            sender.set_nonblocking(true).ok()?;
            Some(sender)
        });
        let me = liveness::me();
        let Some(sender) = sender.as_ref().filter(|_| !me.namespace.is_empty()) else {
            return;
        };
        let ring = encode(file, pool);
        for &pid in pids.iter().filter(|&&pid| pid != me.pid) {
            if let Ok(to) = address(pid, &me.namespace) {
                // Gone, or its buffer full: the file watch covers it.
                let _ = sender.send_to_addr(&ring, &to);
            }
        }
    }

    struct Entry {
        key: u64,
        file: FileId,
        changes: Weak<Changes>,
    }

    #[derive(Default)]
    struct Registry {
        entries: Mutex<Vec<Entry>>,
        next: AtomicU64,
    }

    impl Registry {
        /// Wakes the head of `pool` in each handle on `file` but `except`.
        fn wake(&self, file: FileId, pool: PoolId, except: Option<u64>) {
            for entry in self.entries.lock().iter() {
                if entry.file == file
                    && Some(entry.key) != except
                    && let Some(changes) = entry.changes.upgrade()
                {
                    changes.notify(pool);
                }
            }
        }
    }

    struct Receiver {
        socket: UnixDatagram,
        /// Unbound and non-blocking: a ring never waits.
        sender: UnixDatagram,
        registry: Arc<Registry>,
        /// Set before the socket is shut down: the one thing that ends the
        /// receiving thread (an empty datagram, which anyone may send, reads
        /// the same as a shut-down socket).
        stopping: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
        /// The process that bound it: see its `Drop`.
        process: ForkCheck,
    }

    impl Receiver {
        fn start() -> io::Result<Self> {
            let me = liveness::me();
            if me.namespace.is_empty() {
                return Err(io::Error::other("this process's pid namespace is unknown"));
            }
            let socket = UnixDatagram::bind_addr(&address(me.pid, &me.namespace)?)?;
            let sender = UnixDatagram::unbound()?;
            sender.set_nonblocking(true)?;
            let registry = Arc::new(Registry::default());
            let stopping = Arc::new(AtomicBool::new(false));
            let (inbox, thread_registry, thread_stopping) =
                (socket.try_clone()?, registry.clone(), stopping.clone());
            // 15 bytes, all Linux keeps of a thread's name: tests find the
            // thread by it.
            let thread = std::thread::Builder::new()
                .name("sqlite-doorbell".into())
                .spawn(move || listen(&inbox, &thread_registry, &thread_stopping))?;
            Ok(Self {
                socket,
                sender,
                registry,
                stopping,
                thread: Some(thread),
                process: ForkCheck::here(),
            })
        }
    }

    impl Drop for Receiver {
        /// Ends the receiving thread (a shut-down socket ends its wait) and
        /// waits for it, so that the name is free for the next handle.
        /// In a child that `fork()` made of the process that bound it,
        /// nothing: the socket is shared with the parent (a shutdown here
        /// would end the parent's), and the thread is the parent's.
        fn drop(&mut self) {
            if self.process.check("close").is_err() {
                std::mem::forget(self.thread.take());
                return;
            }
            self.stopping.store(true, Ordering::SeqCst);
            let _ = self.socket.shutdown(Shutdown::Both);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Receives rings until the socket is shut down by [`Receiver`]'s drop.
    /// Datagrams that are not rings (any size, empty ones included) are
    /// dropped; an error other than the shutdown's is not the end either.
    fn listen(inbox: &UnixDatagram, registry: &Registry, stopping: &AtomicBool) {
        let mut buf = [0u8; RING_LEN + 1];
        while !stopping.load(Ordering::SeqCst) {
            match inbox.recv(&mut buf) {
                Ok(n) => {
                    if let Some((file, pool)) = decode(&buf[..n]) {
                        registry.wake(file, pool, None);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    tracing::debug!(error = %e, "semaphore-sqlite: wake-up socket receive failed");
                    // Not a busy loop if the error repeats.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    }

    /// One store handle's place at its process's socket.
    pub(crate) struct Doorbell {
        file: FileId,
        key: u64,
        receiver: Option<Arc<Receiver>>,
    }

    impl std::fmt::Debug for Doorbell {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Doorbell")
                .field("file", &self.file)
                .field("rings", &self.receiver.is_some())
                .finish()
        }
    }

    impl Doorbell {
        /// Registers a handle on `file` whose waiters `changes` wakes,
        /// binding this process's socket if no handle has. If it cannot be
        /// bound, the handle neither rings nor is rung (logged through
        /// `tracing`); its waiters keep the file watch.
        pub(crate) fn open(file: FileId, changes: Weak<Changes>) -> Self {
            let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
            let receiver = match current.upgrade() {
                Some(receiver) => Some(receiver),
                None => match Receiver::start() {
                    Ok(receiver) => {
                        let receiver = Arc::new(receiver);
                        *current = Arc::downgrade(&receiver);
                        Some(receiver)
                    }
                    Err(e) => {
                        tracing::warn!(
                            error = %e,
                            "semaphore-sqlite: cannot bind this process's wake-up socket; \
                             waiters learn of other processes' commits from the file watch only"
                        );
                        None
                    }
                },
            };
            let key = receiver.as_ref().map_or(0, |r| {
                let key = r.registry.next.fetch_add(1, Ordering::Relaxed);
                r.registry.entries.lock().push(Entry { key, file, changes });
                key
            });
            Self {
                file,
                key,
                receiver,
            }
        }

        /// Whether this handle rings: worth finding whom to ring.
        pub(crate) fn rings(&self) -> bool {
            self.receiver.is_some()
        }

        /// Rings, for `pool`, the processes `pids` (of this pid namespace)
        /// whose heads queue on it; in this process, the handles on the
        /// same file other than this one (whose waiters the caller wakes).
        pub(crate) fn ring(&self, pool: PoolId, pids: &[i64]) {
            let Some(receiver) = &self.receiver else {
                return;
            };
            let me = liveness::me();
            let ring = encode(self.file, pool);
            for &pid in pids {
                if pid == me.pid {
                    receiver.registry.wake(self.file, pool, Some(self.key));
                } else if let Ok(to) = address(pid, &me.namespace) {
                    // Gone, or its buffer full: the file watch covers it.
                    let _ = receiver.sender.send_to_addr(&ring, &to);
                }
            }
        }
    }

    impl Drop for Doorbell {
        fn drop(&mut self) {
            let Some(receiver) = self.receiver.take() else {
                return;
            };
            // Under the lock, so that a handle opened meanwhile finds
            // either this receiver alive or its name free.
            let _current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
            receiver
                .registry
                .entries
                .lock()
                .retain(|e| e.key != self.key);
            drop(receiver);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod other {
    use std::sync::Weak;

    use semaphore_core::PoolId;
    use semaphore_core::store::Changes;

    use super::FileId;

    /// Nothing rings here: waiters rely on the file watch.
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    pub(crate) fn ring_from_outside(_file: FileId, _pool: semaphore_core::PoolId, _pids: &[i64]) {}

    /// Nothing rings here: waiters rely on the file watch.
    #[derive(Debug)]
    pub(crate) struct Doorbell;

    impl Doorbell {
        pub(crate) fn open(_file: FileId, _changes: Weak<Changes>) -> Self {
            Self
        }

        pub(crate) fn rings(&self) -> bool {
            false
        }

        pub(crate) fn ring(&self, _pool: PoolId, _pids: &[i64]) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_decodes_to_what_was_encoded_and_nothing_else_decodes() {
        let pool = PoolId::from_name("ring");
        let ring = encode((7, 1 << 40), pool);
        assert_eq!(decode(&ring), Some(((7, 1 << 40), pool)));
        assert_eq!(decode(&ring[..31]), None);
        assert_eq!(decode(&[0u8; 33]), None);
    }
}
