//! The store's two Lua scripts, each the common part and its operations:
//! those that add (refused whole when the server is out of memory) and
//! those that only end, move or read (allowed then).

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};
use semaphore_core::store::{DecidingClock, MAX_UNIX_MS};

static GROW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "#!lua\n",
        include_str!("scripts/common.lua"),
        include_str!("scripts/grow.lua")
    ))
});
static SHRINK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "#!lua flags=allow-oom\n",
        include_str!("scripts/common.lua"),
        include_str!("scripts/shrink.lua")
    ))
});

/// The script an operation is in.
pub(crate) fn script(kind: Kind) -> &'static Script {
    match kind {
        Kind::Grow => &GROW,
        Kind::Shrink => &SHRINK,
    }
}

/// Which of the two scripts an operation is in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Grow,
    Shrink,
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
) -> ScriptInvocation<'static> {
    let mut invocation = script(kind).prepare_invoke();
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
