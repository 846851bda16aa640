//! The loop every primitive of [`MysqlStore`] runs in: on a pooled
//! connection, in a transaction ([`MysqlStore::in_tx`]) or in autocommit
//! ([`MysqlStore::autocommit`]); a connection that the server closed while
//! it idled is replaced, and a deadlock's victim is run again, all within
//! [`CALL_TIMEOUT`](semaphore_core::store::CALL_TIMEOUT).

use std::future::Future;
use std::pin::Pin;

use mysql_async::{Conn, Transaction, TxOpts};
use semaphore_core::{Error, Result};

use super::MysqlStore;
use crate::error::{DEADLOCK_RETRIES, closed, deadlocked, storage};
use crate::primitives::{Sql, Step};

/// A primitive's statements on one connection, as a boxed future that
/// borrows the [`Step`] and the connection or transaction for `'t`.
pub(super) type Work<'t, T> = Pin<Box<dyn Future<Output = Sql<T>> + Send + 't>>;

/// A primitive in a transaction: given the step and the transaction. The
/// step is lent for the transaction's `'c`, which says that `'r` outlives
/// `'c` and so `'t`: the work may borrow what its caller lends for `'r`.
type InTx<'f, 'r, T> =
    &'f mut (dyn for<'t, 'c> FnMut(&'c Step<'r>, &'t mut Transaction<'c>) -> Work<'t, T> + Send);

/// A primitive of one statement in autocommit: given the step (`'r`
/// outlives `'t`, so that the work may borrow what its caller lends for
/// `'r`) and the connection.
type Autocommit<'f, 'r, T> =
    &'f mut (dyn for<'t> FnMut(&'t Step<'r>, &'t mut Conn) -> Work<'t, T> + Send);

/// How a primitive runs on its connection.
enum Mode<'f, 'r, T> {
    /// `START TRANSACTION`, the work, `COMMIT`.
    InTx(InTx<'f, 'r, T>),
    /// The work's one statement, in autocommit.
    Autocommit(Autocommit<'f, 'r, T>),
}

/// How an attempt failed, which decides whether it is made again.
enum Failed {
    /// `START TRANSACTION`, before anything was done: made again on another
    /// connection if this one was closed.
    Start(mysql_async::Error),
    /// A transaction's work, rolled back whole (the transaction drops):
    /// made again if InnoDB chose it as a deadlock's victim.
    Work(mysql_async::Error),
    /// A statement in autocommit: made again on another connection if this
    /// one was closed, else if it was a deadlock's victim.
    Statement(mysql_async::Error),
    /// `COMMIT`: never made again.
    Commit(mysql_async::Error),
}

impl MysqlStore {
    /// Runs `work` (given a [`Step`] and the transaction) in a transaction
    /// on a pooled connection, committed if it succeeds; rolled back
    /// otherwise, or if the future is dropped. A pooled connection that the
    /// server closed while it idled (a restart, a `KILL`, `wait_timeout`)
    /// fails the transaction's first statement, before anything was done:
    /// it is dropped and another taken, up to the pool's size and once
    /// more. A transaction that InnoDB rolled back as a deadlock's victim,
    /// or whose statement waited past the lock wait timeout, is run again,
    /// up to [`DEADLOCK_RETRIES`] times. At most
    /// [`CALL_TIMEOUT`](semaphore_core::store::CALL_TIMEOUT) in all.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Storage`] of
    /// operation `op` if the database failed for good, or did not answer in
    /// time.
    pub(super) async fn in_tx<'r, T>(
        &'r self,
        op: &'static str,
        mut work: impl for<'t, 'c> FnMut(&'c Step<'r>, &'t mut Transaction<'c>) -> Work<'t, T> + Send,
    ) -> Result<T> {
        self.retried(op, Mode::InTx(&mut work)).await
    }

    /// Runs `work` (given a [`Step`] and the connection) on a pooled
    /// connection in autocommit: for a primitive that is one statement. A
    /// connection the server closed while it idled is dropped and another
    /// taken, as in [`MysqlStore::in_tx`]; a statement whose connection
    /// broke after the server ran it is then run again, which for a return
    /// reports `false` for a lease it did end. A statement rolled back as a
    /// deadlock's victim (a return's `DELETE` crossing a borrow's locks) is
    /// run again as in [`MysqlStore::in_tx`].
    ///
    /// # Errors
    /// As [`MysqlStore::in_tx`]'s.
    pub(super) async fn autocommit<'r, T>(
        &'r self,
        op: &'static str,
        mut work: impl for<'t> FnMut(&'t Step<'r>, &'t mut Conn) -> Work<'t, T> + Send,
    ) -> Result<T> {
        self.retried(op, Mode::Autocommit(&mut work)).await
    }

    /// Makes attempts of `mode` on pooled connections until one succeeds,
    /// or fails in a way [`Failed`] does not make again, or has been made
    /// again as often as that allows: up to the pool's size and once more
    /// for a closed connection, [`DEADLOCK_RETRIES`] times for a deadlock.
    ///
    /// # Errors
    /// As [`MysqlStore::in_tx`]'s.
    async fn retried<'r, T>(&'r self, op: &'static str, mut mode: Mode<'_, 'r, T>) -> Result<T> {
        self.process.check(op)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation: op });
        }
        // Bounded: a stalled network fails the call (rolled back) instead
        // of hanging it.
        semaphore_core::store::bounded(op, async {
            let (mut stale, mut deadlocks) = (0, 0);
            loop {
                let mut conn = self.pool.get_conn().await.map_err(storage(op))?;
                let failed = match &mut mode {
                    Mode::InTx(work) => self.attempt_in_tx(&mut conn, &mut **work).await,
                    Mode::Autocommit(work) => (*work)(&self.step(), &mut conn)
                        .await
                        .map_err(Failed::Statement),
                };
                let (e, may_be_closed, may_be_victim) = match failed {
                    Ok(out) => return Ok(out),
                    Err(Failed::Start(e)) => (e, true, false),
                    Err(Failed::Work(e)) => (e, false, true),
                    Err(Failed::Statement(e)) => (e, true, true),
                    Err(Failed::Commit(e)) => (e, false, false),
                };
                if may_be_closed && stale <= self.pool_size && closed(&e) {
                    stale += 1;
                } else if may_be_victim && deadlocks < DEADLOCK_RETRIES && deadlocked(&e) {
                    deadlocks += 1;
                } else {
                    return Err(storage(op)(e));
                }
            }
        })
        .await
    }

    /// One attempt of `work` in a transaction on `conn`.
    async fn attempt_in_tx<'r, T>(
        &'r self,
        conn: &mut Conn,
        work: InTx<'_, 'r, T>,
    ) -> std::result::Result<T, Failed> {
        // Declared before the transaction, so dropped after it: the work
        // borrows it for the transaction's lifetime. Made after it starts.
        #[expect(clippy::needless_late_init, reason = "the drop order")]
        let step;
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(Failed::Start)?;
        step = self.step();
        let out = work(&step, &mut tx).await.map_err(Failed::Work)?;
        tx.commit().await.map_err(Failed::Commit)?;
        Ok(out)
    }
}
