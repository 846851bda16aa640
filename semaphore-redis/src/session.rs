//! The store handle's session (R16, amended): a key of its own,
//! `PREFIX:s:<session id>`, whose value is the session's end on the
//! server's clock, heartbeated on a connection of its own.
//!
//! The heartbeat's connection is made again whenever a beat fails or is
//! dropped midway (a stalled connection is not reused), so that a
//! partition that heals within the session timeout loses nothing.

use std::time::{Duration, SystemTime};

use redis::aio::MultiplexedConnection;
use semaphore_core::store::{DecidingClock, Heartbeat, async_trait, from_unix_ms, millis};
use semaphore_core::{Result, SessionId};

use crate::error::storage;
use crate::scripts::{self, Common, Kind};

const OPERATION: &str = "session";

/// The Redis half of a [`Session`](semaphore_core::Session).
#[derive(Debug)]
pub(crate) struct Beats {
    pub(crate) client: redis::Client,
    pub(crate) prefix: String,
    pub(crate) channel: String,
    pub(crate) time: DecidingClock,
    /// The connection, while its last call went through.
    pub(crate) connection: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Beats {
    /// Runs operation `op` of the script on session `id`'s key with
    /// `args`, connecting first if needed; the connection is kept only if
    /// the call went through.
    async fn call(&self, op: &str, id: SessionId, args: &[String]) -> Result<redis::Value> {
        let mut kept = self.connection.lock().await;
        let mut connection = match kept.take() {
            Some(connection) => connection,
            None => self
                .client
                .get_multiplexed_async_connection()
                .await
                .map_err(storage(OPERATION))?,
        };
        let common = Common {
            time: &self.time,
            waiter_ttl_ms: 0,
            channel: &self.channel,
            prefix: &self.prefix,
            grace_ms: 0,
        };
        let key = format!("{}:s:{}", self.prefix, id.as_uuid());
        let mut invocation = scripts::invocation(Kind::Shrink, op, [key], &common);
        for arg in args {
            invocation.arg(arg);
        }
        let value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(storage(OPERATION))?;
        *kept = Some(connection);
        Ok(value)
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
        let args = [
            millis(timeout).to_string(),
            if open { "1" } else { "0" }.to_string(),
        ];
        match self.call("beat", id, &args).await? {
            redis::Value::Int(now) => Ok(Some(from_unix_ms(u64::try_from(now).unwrap_or(0)))),
            _ => Ok(None),
        }
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        self.call("close", id, &[]).await.map(drop)
    }
}
