//! The store handle's session: its row in
//! `P_sessions`, heartbeated on a connection of its own.
//!
//! The heartbeat's connection is made again whenever a beat fails or is
//! dropped midway (a stalled connection is not reused; one the server
//! closed, for `wait_timeout` or a `KILL`, is replaced), so that a
//! connection's loss alone ends nothing.

use std::time::{Duration, SystemTime};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, TxOpts};
use semaphore_core::store::{DecidingClock, Heartbeat, MAX_UNIX_MS, async_trait};
use semaphore_core::{Result, SessionId};

use crate::error::storage;
use crate::primitives::{NOW, instant};
use crate::schema::Tables;

const OPERATION: &str = "session";

/// The MySQL half of a [`Session`](semaphore_core::Session).
#[derive(Debug)]
pub(crate) struct Beats {
    pub(crate) opts: Opts,
    pub(crate) tables: Tables,
    pub(crate) time: DecidingClock,
    /// The connection, while its last call went through.
    pub(crate) conn: tokio::sync::Mutex<Option<Conn>>,
}

impl Beats {
    fn now_param(&self) -> Option<i64> {
        self.time
            .now_param()
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// The heartbeat's connection, made if there is none.
    async fn take(&self, kept: &mut Option<Conn>) -> Result<Conn> {
        match kept.take() {
            Some(conn) => Ok(conn),
            None => Conn::new(self.opts.clone())
                .await
                .map_err(storage(OPERATION)),
        }
    }

    /// One beat in one transaction: the clock read once, then the row
    /// moved if it lives, or made if `open` and missing.
    async fn beat_on(
        &self,
        conn: &mut Conn,
        id: &[u8],
        timeout: i64,
        open: bool,
    ) -> mysql_async::Result<Option<i64>> {
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
        let now: Option<i64> = tx
            .exec_first(format!("SELECT {NOW}"), (self.now_param(),))
            .await?;
        let now = now.unwrap_or_default();
        let ends = now.saturating_add(timeout).min(MAX as i64);
        tx.exec_drop(
            format!(
                "UPDATE {} SET expires_at = ? WHERE id = ? AND expires_at > ?",
                self.tables.sessions
            ),
            (ends, id.to_vec(), now),
        )
        .await?;
        let mut lives = tx.affected_rows() > 0;
        if !lives && open {
            tx.exec_drop(
                format!(
                    "INSERT IGNORE INTO {} (id, expires_at) VALUES (?, ?)",
                    self.tables.sessions
                ),
                (id.to_vec(), ends),
            )
            .await?;
            lives = tx.affected_rows() > 0;
            // Sessions ended a minute ago or more go: nothing can bring
            // them back, and their leases are not active.
            tx.exec_drop(
                format!("DELETE FROM {} WHERE expires_at < ?", self.tables.sessions),
                (now - 60_000,),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(lives.then_some(now))
    }
}

const MAX: u64 = MAX_UNIX_MS;

#[async_trait]
impl Heartbeat for Beats {
    async fn beat(
        &self,
        id: SessionId,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>> {
        let mut kept = self.conn.lock().await;
        let mut conn = self.take(&mut kept).await?;
        let timeout = semaphore_core::store::millis(timeout);
        let now = self
            .beat_on(&mut conn, id.as_uuid().as_bytes(), timeout, open)
            .await
            .map_err(storage(OPERATION))?;
        *kept = Some(conn);
        Ok(now.map(instant))
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        let mut kept = self.conn.lock().await;
        let mut conn = self.take(&mut kept).await?;
        conn.exec_drop(
            format!("DELETE FROM {} WHERE id = ?", self.tables.sessions),
            (id.as_uuid().as_bytes().to_vec(),),
        )
        .await
        .map_err(storage(OPERATION))?;
        *kept = Some(conn);
        Ok(())
    }
}
