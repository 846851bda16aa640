//! `semaphore run`: holds one slot while a command runs (SPEC "CLI").
//!
//! The lease is short and kept alive (renewed every ttl/3) while the child
//! runs, and returned the moment it exits. If a renewal finds the lease
//! lost, the child gets SIGTERM, then SIGKILL after a grace period, and
//! `run` exits 70. INT, TERM, HUP, QUIT, USR1 and USR2 are forwarded to the
//! child's process group; the child dies with the wrapper (Linux: `setpriv
//! --pdeathsig KILL`).

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use semaphore_memory::{Error, LeaseGuard, Pool};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::RunArgs;
use crate::exit::{Exit, code};

/// How long a child gets between SIGTERM and SIGKILL once its lease is
/// lost.
const GRACE: Duration = Duration::from_secs(5);

pub(crate) async fn run(args: RunArgs, pool: Pool, name: String) -> Result<u8, Exit> {
    if let Some(count) = args.count {
        pool.register(count).await.map_err(Exit::from_store)?;
    }
    let mut lease = match pool.borrow_owned(args.ttl, args.wait).await {
        Ok(lease) => lease,
        Err(Error::Exhausted { waited, .. }) => {
            return Err(Exit::new(
                args.exhausted_code.unwrap_or(code::TEMPFAIL),
                format!("no slot of pool {name} freed up within {waited:?}"),
            ));
        }
        Err(e) => return Err(Exit::from_store(e)),
    };
    lease.keep_alive();
    let mut child = spawn(&args, &lease, &name)?;
    let status = supervise(&mut child, &lease).await;
    let _ = lease.release().await;
    status
}

fn spawn(
    args: &RunArgs,
    lease: &LeaseGuard<Pool>,
    name: &str,
) -> Result<tokio::process::Child, Exit> {
    let position = lease.position.to_string();
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| a.replace("{position}", &position))
        .collect();
    let (program, rest) = argv.split_first().ok_or_else(|| {
        Exit::new(
            code::USAGE,
            "no command to run: semaphore run ... -- CMD ARGS",
        )
    })?;
    let mut command = if cfg!(target_os = "linux") && which("setpriv") {
        let mut c = tokio::process::Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]);
        if args.shell {
            c.args(["sh", "-c", &argv.join(" ")]);
        } else {
            c.arg(program).args(rest);
        }
        c
    } else if args.shell {
        let mut c = tokio::process::Command::new("sh");
        c.args(["-c", &argv.join(" ")]);
        c
    } else {
        let mut c = tokio::process::Command::new(program);
        c.args(rest);
        c
    };
    command
        .env("SEMAPHORE_POSITION", &position)
        .env("SEMAPHORE_TOKEN", lease.token.to_string())
        .env("SEMAPHORE_LEASE_ID", lease.id.to_string())
        .env("SEMAPHORE_POOL", name)
        .env(
            "SEMAPHORE_EXPIRES_AT_MS",
            semaphore_memory::unix_ms(lease.expires_at).to_string(),
        )
        .process_group(0)
        .kill_on_drop(true);
    if let Some(devices) = &args.devices {
        let device = devices.get(lease.position as usize).ok_or_else(|| {
            Exit::new(
                code::USAGE,
                format!(
                    "--devices names {} devices, but the slot is position {}",
                    devices.len(),
                    lease.position
                ),
            )
        })?;
        command.env("CUDA_VISIBLE_DEVICES", device);
    }
    command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Exit::new(code::NOT_FOUND, format!("{program}: command not found"))
        }
        _ => Exit::new(
            code::CANNOT_EXECUTE,
            format!("{program}: cannot execute: {e}"),
        ),
    })
}

/// Waits for the child, forwarding signals, and ends it if the lease is
/// lost; the exit code to leave with.
async fn supervise(
    child: &mut tokio::process::Child,
    lease: &LeaseGuard<Pool>,
) -> Result<u8, Exit> {
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    let kinds = [
        (SignalKind::interrupt(), Signal::SIGINT),
        (SignalKind::terminate(), Signal::SIGTERM),
        (SignalKind::hangup(), Signal::SIGHUP),
        (SignalKind::quit(), Signal::SIGQUIT),
        (SignalKind::user_defined1(), Signal::SIGUSR1),
        (SignalKind::user_defined2(), Signal::SIGUSR2),
    ];
    let mut streams = Vec::new();
    for (kind, sig) in kinds {
        let stream =
            signal(kind).map_err(|e| Exit::new(code::SOFTWARE, format!("signal handler: {e}")))?;
        streams.push((stream, sig));
    }
    let lost = lease.lost();
    tokio::pin!(lost);
    loop {
        let forwarded = futures_any(&mut streams);
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Exit::new(code::SOFTWARE, format!("waiting for the command: {e}")))?;
                return Ok(exit_code(status));
            }
            sig = forwarded => {
                if let Some(group) = group {
                    let _ = killpg(group, sig);
                }
            }
            reason = &mut lost => {
                eprintln!("semaphore run: the lease was lost ({reason}); stopping the command");
                if let Some(group) = group {
                    let _ = killpg(group, Signal::SIGTERM);
                }
                if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
                    if let Some(group) = group {
                        let _ = killpg(group, Signal::SIGKILL);
                    }
                    let _ = child.wait().await;
                }
                return Err(Exit::new(code::LEASE_LOST, "the lease was lost while the command ran"));
            }
        }
    }
}

/// The next signal on any of `streams`.
async fn futures_any(streams: &mut [(tokio::signal::unix::Signal, Signal)]) -> Signal {
    std::future::poll_fn(|cx| {
        for (stream, sig) in streams.iter_mut() {
            if stream.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The child's own code, or 128+N if signal N killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        _ => 1,
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
