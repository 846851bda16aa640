//! The store's Lua code: one Redis function library (Redis 7 Functions),
//! loaded once per server (again when the server lost it), whose code runs
//! once at load. Its two functions are the common part and its operations:
//! those that add (refused whole when the server is out of memory) and
//! those that only end, move or read (allowed then). A call is one `FCALL`,
//! atomic on the server, with none of the per-call setup of a script sent
//! by `EVALSHA`. The library's and its functions' names carry a hash of its
//! code, so that versions of this crate sharing a server each call their
//! own.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, ToRedisArgs, Value};
use semaphore_core::store::{DecidingClock, MAX_UNIX_MS};

/// The library's code without its header and registrations.
const BODY: &str = concat!(
    include_str!("scripts/common.lua"),
    include_str!("scripts/grow.lua"),
    include_str!("scripts/shrink.lua"),
);

/// The library: its code, and the names of its two functions.
struct Library {
    code: String,
    grow: String,
    shrink: String,
}

static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let hash = redis::Script::new(BODY).get_hash().to_string();
    let version = &hash[..12];
    let (grow, shrink) = (
        format!("semaphore_grow_{version}"),
        format!("semaphore_shrink_{version}"),
    );
    let code = format!(
        "#!lua name=semaphore_{version}\n{BODY}\n\
         redis.register_function{{function_name = '{grow}',\n\
         \x20   callback = function(keys, args) begin(keys, args) return grow_ops() end}}\n\
         redis.register_function{{function_name = '{shrink}',\n\
         \x20   callback = function(keys, args) begin(keys, args) return shrink_ops() end,\n\
         \x20   flags = {{'allow-oom'}}}}\n"
    );
    Library { code, grow, shrink }
});

/// Loads the library on the server (on a cluster, on every master): at
/// connect, and when a call finds it missing (a restart that lost it, a
/// `FUNCTION FLUSH`, a replica promoted before it had it).
pub(crate) async fn load(connection: &mut impl ConnectionLike) -> RedisResult<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&LIBRARY.code)
        .exec_async(connection)
        .await
}

/// Which of the two functions an operation is in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Grow,
    Shrink,
}

/// One call of the library: a function, its keys and its arguments.
pub(crate) struct Invocation {
    kind: Kind,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    /// Adds a key.
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    fn fcall(&self) -> Cmd {
        let name = match self.kind {
            Kind::Grow => &LIBRARY.grow,
            Kind::Shrink => &LIBRARY.shrink,
        };
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(name)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    /// Calls the function: one round trip, or three if the server lost the
    /// library (it is loaded again, and the call made again).
    pub(crate) async fn invoke_async(
        &self,
        connection: &mut impl ConnectionLike,
    ) -> RedisResult<Value> {
        match self.fcall().query_async(connection).await {
            Err(e) if e.to_string().contains("Function not found") => {
                load(connection).await?;
                self.fcall().query_async(connection).await
            }
            answer => answer,
        }
    }
}

/// What every operation of the scripts is told besides its keys and its
/// own arguments.
pub(crate) struct Common<'a> {
    /// Gives the deciding instant in test mode (else the script reads
    /// `TIME`).
    pub(crate) time: &'a DecidingClock,
    /// How long a queued head's place outlives its last look (ms).
    pub(crate) waiter_ttl_ms: i64,
    /// Where the session and run keys and the wake-up channel are.
    pub(crate) place: &'a crate::slots::Place,
    /// The restart grace (ms).
    pub(crate) grace_ms: u64,
}

/// An invocation of operation `op` of script `kind` on `keys`, with the
/// arguments every operation takes; the caller adds its own.
pub(crate) fn invocation(
    kind: Kind,
    op: &str,
    keys: impl IntoIterator<Item = String>,
    common: &Common<'_>,
) -> Invocation {
    let mut invocation = Invocation {
        kind,
        keys: Vec::new(),
        args: Vec::new(),
    };
    for key in keys {
        invocation.key(key);
    }
    let now = common
        .time
        .now_param()
        .map_or(String::new(), |ms| ms.to_string());
    invocation
        .arg(op)
        .arg(now)
        .arg(MAX_UNIX_MS)
        .arg(common.waiter_ttl_ms)
        .arg(&common.place.channel)
        .arg(&common.place.prefix)
        .arg(common.grace_ms)
        .arg(common.place.publish);
    invocation
}
