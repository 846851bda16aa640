//! The store handle's session: its record in
//! `semaphore_sessions`, heartbeated on a connection of its own.
//!
//! The heartbeat has its own connection, made from the listener's
//! configuration (so it reaches the server directly, not through a pooler)
//! and made again whenever it closed (an idle-session timeout, a restart, a
//! connection killed) or a beat failed: a pool of busy connections never
//! delays a heartbeat, and a stalled connection is dropped, not reused.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::store::{DecidingClock, Heartbeat, async_trait, millis};
use semaphore_core::{Result, SessionId};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls};

use crate::error::storage;

use crate::sql::{Sql, instant};

const OPERATION: &str = "session";

/// The PostgreSQL half of a [`Session`](semaphore_core::Session).
#[derive(Debug)]
pub(crate) struct Beats {
    pub(crate) config: Config,
    pub(crate) sql: Arc<Sql>,
    pub(crate) time: DecidingClock,
    /// The connection, while it is open and its last call went through.
    pub(crate) client: tokio::sync::Mutex<Option<Client>>,
}

impl Beats {
    /// Runs `statement` on the heartbeat's connection, connecting first if
    /// it is closed. The connection is kept only if the call went through:
    /// a call dropped or failed midway closes it.
    async fn call(
        &self,
        statement: &str,
        params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let mut kept = self.client.lock().await;
        let client = match kept.take().filter(|c| !c.is_closed()) {
            Some(client) => client,
            None => {
                let (client, connection) = self
                    .config
                    .connect(NoTls)
                    .await
                    .map_err(storage(OPERATION))?;
                tokio::spawn(connection);
                client
            }
        };
        let rows = client
            .query_typed(statement, params)
            .await
            .map_err(storage(OPERATION))?;
        *kept = Some(client);
        Ok(rows)
    }
}

#[async_trait]
impl Heartbeat for Beats {
    async fn beat(
        &self,
        id: SessionId,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>> {
        let now = self.time.now_param().map(|ms| ms as i64);
        let rows = self
            .call(
                &self.sql.beat,
                &[
                    (id.as_uuid(), Type::UUID),
                    (&millis(timeout), Type::INT8),
                    (&open, Type::BOOL),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        let row = crate::primitives::first(&rows, OPERATION)?;
        let at: Option<i64> = row.try_get(0).map_err(storage(OPERATION))?;
        Ok(at.map(instant))
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        self.call(&self.sql.close, &[(id.as_uuid(), Type::UUID)])
            .await
            .map(drop)
    }
}
