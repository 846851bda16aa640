//! The command line (clap).

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod serve;
mod store;

pub(crate) use serve::ServeArgs;
pub(crate) use store::StoreArgs;

/// Numbered-slot semaphores with leases: a pool has `count` slots; a borrow
/// hands out the lowest free one as a lease with a ttl.
#[derive(Debug, Parser)]
#[command(name = "semaphore", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the HTTP API (PUT/GET/DELETE /l/{id}, POST /l/{id}/borrow,
    /// /return, /renew) over a store.
    Serve(ServeArgs),
    /// Hold one slot while CMD runs: the child gets SEMAPHORE_POSITION,
    /// SEMAPHORE_TOKEN, SEMAPHORE_LEASE_ID, SEMAPHORE_POOL and
    /// SEMAPHORE_EXPIRES_AT_MS (and CUDA_VISIBLE_DEVICES with --devices).
    ///
    /// CMD runs as it would on its own: in the foreground of the terminal
    /// (it can read it; Ctrl-C and Ctrl-Z reach it), and Ctrl-Z stops
    /// `semaphore run` with it. When the job is continued, the lease is
    /// renewed before CMD goes on; if it was lost meanwhile, CMD is ended
    /// (exit 70). INT, TERM, HUP, QUIT, USR1 and USR2 sent to `semaphore
    /// run` go to CMD's process group, followed by CONT.
    ///
    /// CMD and every process it starts share a process group. A guardian
    /// process ends that group with SIGKILL the moment `semaphore run`
    /// dies (SIGKILL included), and then returns the lease; and, if the
    /// lease cannot be kept (`semaphore run` stopped or hung, the store out
    /// of reach), it ends the group before the lease's local deadline:
    /// SIGTERM --kill-after before it, SIGKILL at it.
    /// Processes that leave the group (setsid, daemons) are not followed;
    /// processes CMD leaves running when it exits are not ended. The
    /// guardian is this same program; if it cannot start, nothing runs.
    ///
    /// Exit codes: CMD's own; 128+N if CMD was killed by signal N (or, on
    /// a terminal, signal N ended the wait for a slot); 75 when
    /// the wait elapsed (or -E CODE); 64 usage; 69 unknown pool; 74
    /// storage; 126/127 cannot execute / not found; 70 lease lost while
    /// running.
    Run(RunArgs),
    /// Create a pool or set its count.
    Register(RegisterArgs),
    /// Print a pool's count, in_use and available (and `draining` while it
    /// drains).
    Inspect(PoolArgs),
    /// Stop new grants on a pool while its holders finish (--off ends the
    /// drain): borrows fail (exit 75, HTTP 503) or, with
    /// --wait-while-draining, wait; returns and renewals go on. Every
    /// process and server sharing the store sees it.
    Drain(DrainArgs),
    /// List the store's pools in id order: id, count, in_use, available,
    /// the places queued in the store (tickets, and one per process whose
    /// borrowers wait), and whether each drains. Every pool, unless
    /// --limit; a pool named --pool NAME has the id `semaphore inspect
    /// --pool NAME --json` shows.
    Pools(PoolsArgs),
    /// What the store's pools are doing: each pool's count, in use,
    /// queued places, drain and fill; with --pool, its slots (owner,
    /// token, time left) and everyone known to wait for it, in line.
    /// --watch draws it again every --interval until Ctrl-C.
    Status(StatusArgs),
    /// Delete a pool and its leases.
    Delete(PoolArgs),
    /// Borrow a slot and print `export SEMAPHORE_...=` lines for a shell to
    /// eval; the lease is held until returned or its ttl (no renewal).
    /// Exits 75 (or -E CODE) when the wait elapses.
    Borrow(BorrowArgs),
    /// Return a lease early; prints whether it was active.
    Return(LeaseArgs),
    /// Renew a lease to a new ttl from now, keeping its position and token.
    Renew(RenewArgs),
    /// List a pool's holders: positions (0,1 for a lease of two slots),
    /// token, owner, expiry (ms), lease id.
    Holders(PoolArgs),
    /// Make the store's tables (and PostgreSQL's functions), or migrate
    /// them to this version, then exit: the step a deployment runs once per
    /// release as a role that may create, so that its processes may
    /// connect as a role that may not (PostgreSQL: --postgres-no-migrate;
    /// --grant ROLE grants that role what it needs).
    Migrate(MigrateArgs),
}

/// `migrate`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// PostgreSQL: grant ROLE what a store needs at run time on the schema
    /// (USAGE on it, DML on its tables, its sequences, EXECUTE on its
    /// functions), after migrating. May be repeated.
    #[arg(long, value_name = "ROLE")]
    pub(crate) grant: Vec<String>,
}

/// `borrow`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct BorrowArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArgs,
    /// Register the pool with N slots first (idempotent).
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u32>,
    /// How long to wait for a slot: a duration or inf.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = wait)]
    pub(crate) wait: Duration,
    /// Hold N slots as one lease; SEMAPHORE_POSITIONS lists them.
    #[arg(long, value_name = "N", default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) slots: u32,
    /// The lease's ttl.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// The exit code when the wait elapses with no slot (default 75).
    #[arg(short = 'E', value_name = "CODE")]
    pub(crate) exhausted_code: Option<u8>,
}

/// A pool and one of its leases.
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArgs,
    /// The lease's id (SEMAPHORE_LEASE_ID).
    #[arg(long, value_name = "UUID", env = "SEMAPHORE_LEASE_ID")]
    pub(crate) lease: uuid::Uuid,
}

/// `renew`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RenewArgs {
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
    /// The new ttl, from now.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
}

/// Which pool: by name (the same name means the same pool everywhere) or
/// by its UUID.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct PoolName {
    /// The pool's name (not empty).
    #[arg(long, value_name = "NAME", value_parser = pool_name)]
    pub(crate) pool: Option<String>,
    /// The pool's UUID.
    #[arg(long, value_name = "UUID")]
    pub(crate) pool_id: Option<uuid::Uuid>,
}

/// A store and a pool.
#[derive(Debug, Args)]
pub(crate) struct PoolArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) name: PoolName,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `pools`' arguments.
#[derive(Debug, Args)]
pub(crate) struct PoolsArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// List the pools whose id follows this one.
    #[arg(long, value_name = "UUID")]
    pub(crate) after: Option<uuid::Uuid>,
    /// List at most N pools (every pool without it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) limit: Option<u64>,
    /// Print one JSON object a line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `status`' arguments.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Show this pool: its slots and its waiters.
    #[arg(long, value_name = "NAME", value_parser = pool_name, conflicts_with = "pool_id")]
    pub(crate) pool: Option<String>,
    /// Show the pool of this UUID.
    #[arg(long, value_name = "UUID")]
    pub(crate) pool_id: Option<uuid::Uuid>,
    /// Draw it again every --interval until Ctrl-C (in place on a
    /// terminal).
    #[arg(long)]
    pub(crate) watch: bool,
    /// How often --watch looks (at least 100ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = interval,
        requires = "watch")]
    pub(crate) interval: Duration,
    /// Print JSON, one document a look.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--interval`: a duration of at least [`MIN_INTERVAL`](crate::status::MIN_INTERVAL).
fn interval(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d < crate::status::MIN_INTERVAL {
        return Err("the interval must be at least 100ms".into());
    }
    Ok(d)
}

/// `drain`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct DrainArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArgs,
    /// End the drain instead of starting it.
    #[arg(long)]
    pub(crate) off: bool,
}

/// `register`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RegisterArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArgs,
    /// The number of slots.
    #[arg(long, value_name = "N")]
    pub(crate) count: u32,
}

/// `run`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) name: PoolName,

    /// Register the pool with N slots first (idempotent); without it the
    /// pool must exist.
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u32>,

    /// How long to wait for a slot: a duration (30s, 5m, 1h30m) or inf.
    #[arg(long, value_name = "DURATION", default_value = "inf", value_parser = wait)]
    pub(crate) wait: Duration,

    /// The lease's ttl; while CMD runs it is renewed (and the store's
    /// session heartbeated) every sixth of the shorter of the ttl and the
    /// session timeout, at most every second: every second with the
    /// defaults. At least 1s.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = run_ttl)]
    pub(crate) ttl: Duration,

    /// Hold N slots as one lease: the N lowest free positions,
    /// given to CMD as SEMAPHORE_POSITIONS (0,1); waits until N are free
    /// at once, ahead of any later borrower.
    #[arg(long, value_name = "N", default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) slots: u32,

    /// Wait (within --wait) while the pool drains, instead of exiting 75 at
    /// once.
    #[arg(long)]
    pub(crate) wait_while_draining: bool,

    /// Devices, one per position (0,2,5): CMD gets CUDA_VISIBLE_DEVICES set
    /// to the device of each of its positions (2,5 for positions 1 and 2).
    /// Each device once: a device named twice is refused (exit 64).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = device_name)]
    pub(crate) devices: Option<Vec<String>>,

    /// The exit code when the wait elapses with no slot (default 75).
    #[arg(short = 'E', value_name = "CODE")]
    pub(crate) exhausted_code: Option<u8>,

    /// How long CMD gets between SIGTERM and SIGKILL when the lease may be
    /// lost (a renewal or heartbeat that cannot land): SIGTERM goes this
    /// long before the lease's local deadline, SIGKILL at it, so that CMD
    /// is dead before anyone else can be granted its slot.
    /// Default 5s, or less with a short --ttl or --session-timeout; one
    /// given must fit within two thirds of the shorter of --ttl and the
    /// session timeout, less a margin (a tenth of it, at most 1s) and two
    /// tellings of the deadline to the guardian (a third of it, at most
    /// 2s): at most 17s with the defaults, 233ms with --session-timeout 1s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) kill_after: Option<Duration>,

    /// The owner label the slot shows (`semaphore status`, `holders`, the
    /// service's page), at most 64 bytes; default: the host, this
    /// process's id and CMD's program (`gpu-box/4242 python`).
    #[arg(long, value_name = "LABEL")]
    pub(crate) owner: Option<String>,

    /// No waiting line: without it, while the slot is waited for and
    /// standard error is a terminal, one line there says where this run
    /// stands (`waiting for a slot of gpus: 3rd in line, 12 s`), cleared
    /// when the slot is granted.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,

    /// Run CMD ARGS as one `sh -c` line instead of executing argv directly.
    #[arg(long)]
    pub(crate) shell: bool,

    /// The command and its arguments; `{position}` in one is replaced by the
    /// slot's position (the lowest, with --slots), `{positions}` by them all
    /// (0,1).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

fn pool_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a pool name must not be empty".into());
    }
    Ok(text.to_string())
}

fn wait(text: &str) -> Result<Duration, String> {
    if text == "inf" {
        return Ok(Duration::MAX);
    }
    duration(text)
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 30s, 5m, 1h30m)"))
}

/// The shortest `--ttl` `semaphore run` takes: below it, the renewals and
/// the guardian's margin and SIGTERM period leave a healthy command no
/// room.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);

/// `run`'s `--ttl`: a duration of at least [`MIN_TTL`].
fn run_ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if ttl < MIN_TTL {
        return Err(format!(
            "--ttl must be at least {} for `semaphore run`: a shorter lease cannot be \
             renewed and guarded while the command runs",
            humantime::format_duration(MIN_TTL)
        ));
    }
    Ok(ttl)
}

/// A device name in `--devices`: not empty (`0,,1` is a typo, not a device).
fn device_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("a device name is empty (as in 0,,1): name one device per slot".into());
    }
    Ok(name.to_owned())
}
