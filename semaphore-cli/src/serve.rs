//! `semaphore serve`: opens the store, binds, serves, and shuts down on
//! SIGTERM or Ctrl-C, answering every waiting borrow with 503.

use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use semaphore_core::Limits;
use tokio::sync::watch;

use crate::api;
use crate::app::App;
use crate::cli::ServeArgs;

/// Why `serve` stopped, with the exit code it maps to (sysexits).
#[derive(Debug)]
pub(crate) enum ServeError {
    /// The store could not be opened.
    Store(semaphore_core::Error),
    /// The address could not be bound, or serving failed.
    Io(std::io::Error),
    /// The command line or environment named no usable store, or aliases
    /// that clash.
    Usage(crate::exit::Exit),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Store(e) => write!(f, "opening the store: {}", e.chain()),
            ServeError::Io(e) => write!(f, "{e}"),
            ServeError::Usage(e) => write!(f, "{}", e.message),
        }
    }
}

impl ServeError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            ServeError::Store(semaphore_core::Error::InvalidArgument { .. }) => 64,
            ServeError::Store(_) => 74,
            ServeError::Io(_) => 71,
            ServeError::Usage(e) => e.code,
        }
    }
}

pub(crate) async fn serve(args: ServeArgs, signals: DrainSignals) -> Result<(), ServeError> {
    let choice = crate::store::Choice::from(crate::store::Flags {
        memory: args.memory,
        ..args.store.flags()
    })
    .map_err(ServeError::Usage)?;
    if args.max_ttl < Duration::from_millis(1) {
        // Every lease would be granted expired (R5, "the smallest ttl").
        return Err(ServeError::Usage(crate::exit::Exit::new(
            crate::exit::code::USAGE,
            format!(
                "--max-ttl {:?} is under 1 ms, the resolution at which leases expire: \
                 every lease would be granted expired; give at least 1ms",
                args.max_ttl
            ),
        )));
    }
    let shown = choice.shown();
    let store = choice.open(None).await.map_err(ServeError::Store)?;
    let limits = Limits::default()
        .with_max_count(args.max_count)
        .with_max_ttl(args.max_ttl)
        .with_max_wait(args.max_wait);
    let (down, shutdown) = watch::channel(false);
    let (drain, draining) = watch::channel(false);
    drain_signals(signals, drain);
    let aliases = args
        .alias
        .iter()
        .map(|(name, id)| (name.clone(), semaphore_core::PoolId::from_uuid(*id)))
        .collect();
    let auth = args
        .auth_token_file
        .as_deref()
        .map(crate::auth::Token::read)
        .transpose()
        .map_err(ServeError::Usage)?;
    let metrics = crate::metrics::Metrics::install(aliases).map_err(ServeError::Usage)?;
    let app = App {
        store,
        limits,
        shutdown,
        draining,
        metrics,
        broken: Default::default(),
        ticket_hold: args.ticket_hold,
        loopback: args.listen.ip().is_loopback(),
        auth: auth.is_some(),
        listings: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
    };
    // Before the server says it listens: a SIGHUP from then on is caught.
    on_hangup(auth.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(ServeError::Io)?;
    let address = listener.local_addr().map_err(ServeError::Io)?;
    println!("listening on http://{address} ({shown})");
    let limits = crate::accept::Limits {
        connections: args.max_connections as usize,
        header_timeout: args.header_timeout,
        per_address: args
            .max_connections_per_address
            .unwrap_or((args.max_connections / 4).max(1))
            .min(args.max_connections) as usize,
        write_timeout: args.write_timeout,
    };
    let mut router = api::router(app);
    if let Some(token) = auth {
        router = router.layer(axum::middleware::from_fn_with_state(
            token,
            crate::auth::require,
        ));
    }
    // Around auth: a request for a host this server is not known as is
    // refused whatever it bears (DNS rebinding).
    let hosts = crate::hosts::AllowedHosts::new(address, &args.allowed_host);
    router = router.layer(axum::middleware::from_fn_with_state(
        std::sync::Arc::new(hosts),
        crate::hosts::answer_known,
    ));
    // Around those: a header sent twice is refused before anyone acts on
    // either copy.
    router = router.layer(axum::middleware::from_fn(
        crate::single_headers::refuse_repeats,
    ));
    // Outermost: every body is read within its deadline, before anything
    // else looks at the request.
    let pending_bodies = args.max_pending_bodies.unwrap_or(args.max_connections / 4) as usize;
    let router = router.layer(axum::middleware::from_fn_with_state(
        crate::body_deadline::BodyLimits::new(args.body_timeout, pending_bodies),
        crate::body_deadline::read_within,
    ));
    let mut accepting = std::pin::pin!(crate::accept::serve(listener, router, limits));
    tokio::select! {
        result = &mut accepting => result.map_err(ServeError::Io)?,
        () = stop_signal() => {}
    }
    // Waiting borrows answer 503 at once; open connections (keep-alive,
    // slow clients) get 0.8 s to finish, so that the process is gone within
    // 1 s of the signal.
    let _ = down.send(true);
    let _ = tokio::time::timeout(Duration::from_millis(800), &mut accepting).await;
    Ok(())
}

/// SIGUSR1 and SIGUSR2, blocked in every thread before the runtime starts
/// and taken one at a time by one thread of their own (`sigwait`).
///
/// A handler in each thread (tokio's) runs two signals sent back to back
/// on two threads at once, in either order: `kill -USR1; kill -USR2` left
/// the server draining in 4 of 10 tries. Taken by `sigwait`, a signal
/// sent after the other was taken comes after it, and two pending at once
/// come lowest number first (the kernel's order: USR1, then USR2).
pub(crate) struct DrainSignals(Option<SigSet>);

impl DrainSignals {
    /// Blocks SIGUSR1 and SIGUSR2 in this thread and so in every thread it
    /// starts later (the runtime's): call it before building the runtime.
    /// Processes started from the server inherit the block.
    pub(crate) fn block() -> Self {
        let mut set = SigSet::empty();
        set.add(Signal::SIGUSR1);
        set.add(Signal::SIGUSR2);
        Self(set.thread_block().ok().map(|()| set))
    }

    /// None blocked: for the commands other than `serve`.
    pub(crate) fn none() -> Self {
        Self(None)
    }
}

/// SIGUSR1 starts draining (no new grants; returns and renewals go on;
/// `/readyz` answers 503), SIGUSR2 ends it.
fn drain_signals(signals: DrainSignals, drain: watch::Sender<bool>) {
    let Some(set) = signals.0 else {
        eprintln!("semaphore serve: cannot block SIGUSR1 and SIGUSR2: drain by signal is off");
        return;
    };
    let taken = std::thread::Builder::new()
        .name("drain-signals".into())
        .spawn(move || {
            while let Ok(signal) = set.wait() {
                let on = signal == Signal::SIGUSR1;
                if drain.send_replace(on) != on {
                    eprintln!(
                        "semaphore serve: {}",
                        if on {
                            "draining: new borrows answer 503, returns and renewals go on"
                        } else {
                            "no longer draining"
                        }
                    );
                }
            }
        });
    if let Err(e) = taken {
        eprintln!(
            "semaphore serve: cannot start the drain signals' thread ({e}): drain by signal is off"
        );
    }
}

/// SIGHUP reads the auth token's file again, if there is one; it never
/// ends the server (its default action would: a server started from a
/// terminal that closes, or sent the signal that reloads other daemons'
/// configuration, must go on serving). Listening starts before this
/// returns, so that a SIGHUP sent once the server says it listens is
/// caught.
fn on_hangup(token: Option<crate::auth::Token>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            eprintln!("semaphore serve: cannot listen for SIGHUP, which would end the server");
            return;
        };
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                if let Some(token) = &token {
                    token.reload();
                }
            }
        });
    }
    #[cfg(not(unix))]
    drop(token);
}

/// SIGTERM or Ctrl-C (SIGINT).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
