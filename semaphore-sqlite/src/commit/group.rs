//! Group commit on the SQLite store (rule "Group commit"): this handle's
//! writes that arrive while one of its write transactions runs wait in the
//! core's [`Batches`], and the next transaction carries them all, each in a
//! savepoint of its own. One turn at the writers' lock, one `BEGIN
//! IMMEDIATE` and one commit then serve many borrows and returns, which is
//! what a process with many tasks on one file pays for.
//!
//! Only where commits `fsync` ([`Synchronous::Full`](crate::Synchronous::Full)):
//! there a batch shares one `fsync`, 1.7-1.9x the pairs/s of 16 tasks
//! (BENCHMARKS.md line 20). Where they do not, a batch saves only a
//! `BEGIN` and a `COMMIT` and holds the writers' lock longer, which was
//! measured slower with several processes on the file; each write then
//! runs alone ([`placement`](crate::commit::placement)).
//!
//! Each write keeps its own answer: one that fails is rolled back to its
//! savepoint and answered with its error, and the others commit. If the
//! transaction cannot begin or commit, every write of the batch is
//! answered with that failure, and none took effect; so too if a write's
//! failure makes SQLite roll back the whole transaction itself (a full
//! disk, an I/O error): that write answers its own error, the others a
//! retryable one, and the rest are not run.

use std::sync::Arc;

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};
use semaphore_core::store::Batches;
use semaphore_core::{Error, Result};
use tokio::sync::oneshot;

use crate::commit::writer::WriterQueue;
use crate::error::storage;
use crate::file::Files;
use crate::time::Time;

/// A failure of the whole batch, as each write reports it under its own
/// operation's name.
type Failure<'a> = &'a dyn Fn(&'static str) -> Error;

/// One write of a batch: run in the batch's transaction (or told of the
/// batch's failure), it answers its caller once the batch has committed.
type Job = Box<dyn FnOnce(Step<'_>) -> Done + Send>;

enum Step<'a> {
    /// Run the write; `alone` if it is the batch's only one.
    Run {
        conn: &'a Connection,
        now: i64,
        alone: bool,
    },
    /// The batch failed before the write ran.
    Failed(Failure<'a>),
}

/// Answers a write's caller once its batch ended: with the commit's
/// failure, if any.
type Answer = Box<dyn for<'a> FnOnce(Option<Failure<'a>>) + Send>;

/// A write that ran, waiting for the batch's end to answer.
struct Done {
    /// Whether the write succeeded (so far).
    ok: bool,
    answer: Answer,
}

/// What a flight needs: the handle's connection, the writers' lock, the
/// files to check and the clock to read, and the writes queued.
#[derive(Debug)]
pub(crate) struct Group {
    conn: Arc<Mutex<Connection>>,
    writers: Option<Arc<WriterQueue>>,
    files: Arc<Files>,
    time: Time,
    batches: Batches<Job>,
}

impl Group {
    pub(crate) fn new(
        conn: Arc<Mutex<Connection>>,
        writers: Option<Arc<WriterQueue>>,
        files: Arc<Files>,
        time: Time,
    ) -> Self {
        Self {
            conn,
            writers,
            files,
            time,
            batches: Batches::new(),
        }
    }

    /// Runs `f` in the next batch's transaction, starting a flight on the
    /// runtime's blocking pool if none is in progress. Must be called
    /// inside a tokio runtime.
    pub(crate) async fn write<T: Send + 'static>(
        self: &Arc<Self>,
        operation: &'static str,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        if self.batches.push(job(operation, f, reply)) {
            let flight = Flight {
                group: self.clone(),
                ran_out: false,
            };
            // Not awaited: a caller that is dropped leaves the flight to
            // run the writes queued behind it.
            drop(tokio::task::spawn_blocking(move || flight.run()));
        }
        answer.await.map_err(|_| Error::Storage {
            operation,
            retryable: false,
            source: "the SQLite store's write batch ended without an answer (its runtime shut \
                     down)"
                .into(),
        })?
    }

    /// Runs batches until none is left, each after the connection and the
    /// writers' lock are taken, so that the writes that came meanwhile
    /// join it.
    fn fly(&self) {
        loop {
            let mut conn = self.conn.lock();
            let entered = self.writers.as_deref().map(WriterQueue::enter).transpose();
            let jobs = self.batches.next();
            if jobs.is_empty() {
                return;
            }
            match entered {
                Ok(_entered) => self.run(&mut conn, jobs),
                Err(e) => {
                    let fail = |operation| Error::Storage {
                        operation,
                        retryable: true,
                        source: Box::new(std::io::Error::new(e.kind(), e.to_string())),
                    };
                    fail_all(jobs, &fail);
                }
            }
        }
    }

    /// One transaction for `jobs`.
    fn run(&self, conn: &mut Connection, jobs: Vec<Job>) {
        if let Err(e) = self.files.check() {
            let fail = |operation| Error::Storage {
                operation,
                retryable: false,
                source: Box::new(std::io::Error::new(e.kind(), e.to_string())),
            };
            return fail_all(jobs, &fail);
        }
        let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => return fail_all(jobs, &like(&storage("write")(e))),
        };
        let now = match self.time.now() {
            Ok(now) => now,
            Err(e) => return fail_all(jobs, &like(&e)),
        };
        let alone = jobs.len() == 1;
        let mut done: Vec<Done> = Vec::with_capacity(jobs.len());
        let mut jobs = jobs.into_iter();
        for job in jobs.by_ref() {
            done.push(job(Step::Run {
                conn: &tx,
                now,
                alone,
            }));
            if tx.is_autocommit() {
                // A write's failure made SQLite roll back the whole
                // transaction itself (a full disk, an I/O error, out of
                // memory, a trigger's `RAISE(ROLLBACK)`): none of the
                // batch took effect, and a write run now would commit on
                // its own. Each is answered so: the failed one with its
                // own error, the others with this one, retryable.
                let lost = |operation| Error::Storage {
                    operation,
                    retryable: true,
                    source: "SQLite rolled back the write batch this write was in, as another \
                             write of it failed; nothing of the batch took effect"
                        .into(),
                };
                for done in done {
                    (done.answer)(Some(&lost));
                }
                return fail_all(jobs.collect(), &lost);
            }
        }
        // A write alone that failed is rolled back whole (dropping the
        // transaction), and answers its own error.
        let ended = if alone && !done[0].ok {
            Ok(())
        } else {
            tx.commit().map_err(storage("commit"))
        };
        let failure = ended.as_ref().err().map(like);
        for done in done {
            (done.answer)(failure.as_ref().map(|f| f as Failure<'_>));
        }
    }
}

/// A flight on the blocking pool. Dropped before it started (its runtime
/// shuts down, and its blocking pool refuses new work), it runs on a
/// thread of its own instead, so that the writes queued still land and
/// answer whoever still waits: a guard dropped during its runtime's
/// shutdown is returned. Dropped as a write panicked, it abandons
/// the queue: the writes queued are dropped, which answers each with an
/// error, and the next write starts a new flight instead of queueing
/// behind one that will never run.
struct Flight {
    group: Arc<Group>,
    ran_out: bool,
}

impl Flight {
    fn run(mut self) {
        self.group.fly();
        self.ran_out = true;
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.ran_out {
            return;
        }
        if std::thread::panicking() {
            drop(self.group.batches.abandon());
            return;
        }
        // The flight is made on the thread: a spawn that fails drops only
        // the group, not another flight that would try again.
        let group = self.group.clone();
        let spawned = std::thread::Builder::new()
            .name("semaphore-sqlite-batch".into())
            .spawn(move || {
                Flight {
                    group,
                    ran_out: false,
                }
                .run()
            });
        if spawned.is_err() {
            // No thread either: answered, not lost in silence.
            drop(self.group.batches.abandon());
        }
    }
}

/// Answers every job of `jobs` with `fail`, unrun.
fn fail_all(jobs: Vec<Job>, fail: Failure<'_>) {
    for job in jobs {
        (job(Step::Failed(fail)).answer)(None);
    }
}

/// A failure like `e`, for each write to report under its own operation.
fn like(e: &Error) -> impl Fn(&'static str) -> Error + use<> {
    let retryable = e.is_retryable();
    let message = match e {
        Error::Storage { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    move |operation| Error::Storage {
        operation,
        retryable,
        source: message.clone().into(),
    }
}

/// The job that runs `f` and answers `reply`.
fn job<T: Send + 'static>(
    operation: &'static str,
    f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    reply: oneshot::Sender<Result<T>>,
) -> Job {
    Box::new(move |step| {
        let out = match step {
            Step::Failed(fail) => Err(fail(operation)),
            Step::Run { conn, now, alone } if alone => f(conn, now).map_err(storage(operation)),
            Step::Run { conn, now, .. } => in_savepoint(conn, |c| f(c, now), operation),
        };
        Done {
            ok: out.is_ok(),
            answer: Box::new(move |failed| {
                let answer = match (out, failed) {
                    (Ok(_), Some(fail)) => Err(fail(operation)),
                    (out, _) => out,
                };
                // A caller gone (dropped) leaves its answer here: a borrow
                // granted meanwhile is returned by the core.
                let _ = reply.send(answer);
            }),
        }
    })
}

/// `f` inside a savepoint of its own: rolled back to it if it fails, so
/// that the batch's other writes still commit.
fn in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    operation: &'static str,
) -> Result<T> {
    conn.execute_batch("SAVEPOINT batched")
        .map_err(storage(operation))?;
    match f(conn) {
        Ok(out) => match conn.execute_batch("RELEASE batched") {
            Ok(()) => Ok(out),
            Err(e) => {
                // Answered as failed, so it must not commit.
                let _ = conn.execute_batch("ROLLBACK TO batched; RELEASE batched");
                Err(storage(operation)(e))
            }
        },
        Err(e) => {
            // Unless SQLite rolled back the whole transaction itself (the
            // batch sees it, and answers each write).
            if !conn.is_autocommit() {
                conn.execute_batch("ROLLBACK TO batched; RELEASE batched")
                    .map_err(storage(operation))?;
            }
            Err(storage(operation)(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file of [`group_on`], in its directory.
    const FILE: &str = "group.db";

    /// A group on a fresh file `FILE` in `dir`, with table `t`.
    fn group_on(dir: &tempfile::TempDir) -> Arc<Group> {
        let path = dir.path().join(FILE);
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let files = Arc::new(Files::of(&path).unwrap());
        let time = crate::SqliteOptions::default().time;
        Arc::new(Group::new(Arc::new(Mutex::new(conn)), None, files, time))
    }

    /// A flight whose runtime has shut down is refused by its blocking
    /// pool and runs on a thread of its own: the write it carries lands and
    /// is answered (a guard dropped during a shutdown is returned),
    /// and the handle's next write, on another runtime, is not stranded
    /// behind it.
    #[test]
    fn a_flight_its_runtime_refuses_runs_on_a_thread_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let group = group_on(&dir);
        let dying = tokio::runtime::Runtime::new().unwrap();
        let dead = dying.handle().clone();
        drop(dying);
        let mut first =
            Box::pin(group.write("test", |c, _| c.execute("INSERT INTO t VALUES (1)", [])));
        {
            let _inside = dead.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = first.as_mut().poll(&mut cx);
            assert!(
                !matches!(polled, std::task::Poll::Ready(Err(_))),
                "the write was dropped with its flight: {polled:?}"
            );
        }
        let next = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        next.block_on(async {
            let within = std::time::Duration::from_secs(30);
            let first = tokio::time::timeout(within, first).await;
            assert!(matches!(first, Ok(Ok(1))), "the first write: {first:?}");
            let second = group.write("test", |c, _| c.execute("INSERT INTO t VALUES (2)", []));
            let second = tokio::time::timeout(within, second).await;
            assert!(
                matches!(second, Ok(Ok(1))),
                "the next write was stranded: {second:?}"
            );
        });
        let rows: i64 = group
            .conn
            .lock()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    /// Three writes queued while the connection is busy go in one
    /// transaction (the third does not see the first's row from another
    /// connection: it is not committed yet); the second fails, is rolled
    /// back to its savepoint and answers its error, and the other two
    /// commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::await_holding_lock)] // on purpose: the writes queue behind it
    async fn a_batch_commits_each_write_but_the_one_that_failed() {
        let dir = tempfile::tempdir().unwrap();
        let group = group_on(&dir);
        let path = dir.path().join(FILE);
        let conn = group.conn.clone();
        let busy = conn.lock();
        let writes: Vec<_> = (0..3)
            .map(|i: i64| {
                let (group, path) = (group.clone(), path.clone());
                let write = async move {
                    group
                        .write("test", move |c, _| {
                            let seen: i64 = Connection::open(&path)?.query_row(
                                "SELECT count(*) FROM t",
                                [],
                                |r| r.get(0),
                            )?;
                            c.execute("INSERT INTO t VALUES (?1)", [i])?;
                            match i {
                                1 => Err(rusqlite::Error::QueryReturnedNoRows),
                                _ => Ok(seen),
                            }
                        })
                        .await
                };
                tokio::spawn(write)
            })
            .collect();
        while group.batches.waiting() != 3 {
            tokio::task::yield_now().await;
        }
        drop(busy);
        let mut answers = Vec::new();
        for write in writes {
            answers.push(write.await.unwrap());
        }
        assert_eq!(answers[0].as_ref().ok(), Some(&0));
        assert!(answers[1].is_err(), "{:?}", answers[1]);
        assert_eq!(
            answers[2].as_ref().ok(),
            Some(&0),
            "the first write was committed before the third ran: not one batch"
        );
        let rows: Vec<i64> = {
            let conn = conn.lock();
            let mut rows = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
            rows.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(rows, [0, 2]);
    }
}
