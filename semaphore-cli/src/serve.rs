//! `semaphore serve`: opens the store, binds, serves, and shuts down on
//! SIGTERM or Ctrl-C, answering every waiting borrow with 503.

use std::time::Duration;

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
            ServeError::Store(e) => write!(f, "opening the store: {e}"),
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

pub(crate) async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let choice = crate::store::Choice::from(crate::store::Flags {
        memory: args.memory,
        sqlite: args.sqlite.clone(),
        postgres: args.postgres.clone(),
        schema: args.postgres_schema.clone(),
        prepared: args.postgres_prepared_statements,
        redis: args.redis.clone(),
        prefix: args.redis_prefix.clone(),
        grace: args.redis_restart_grace,
        mysql: args.mysql.clone(),
        mysql_prefix: args.mysql_prefix.clone(),
    })
    .map_err(ServeError::Usage)?;
    let shown = choice.shown();
    // Every store but memory keeps places that outlive a server.
    let in_store = !matches!(choice, crate::store::Choice::Memory);
    let store = choice.open(None).await.map_err(ServeError::Store)?;
    let limits = Limits::default()
        .with_max_count(args.max_count)
        .with_max_ttl(args.max_ttl)
        .with_max_wait(args.max_wait);
    let (down, shutdown) = watch::channel(false);
    let (drain, draining) = watch::channel(false);
    tokio::spawn(drain_signals(drain));
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
        tickets: crate::tickets::Tickets::new(args.ticket_hold, in_store),
    };
    tokio::spawn(drop_tickets_on_drain(
        app.tickets.clone(),
        app.draining.clone(),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(ServeError::Io)?;
    let address = listener.local_addr().map_err(ServeError::Io)?;
    println!("listening on http://{address} ({shown})");
    let limits = crate::accept::Limits {
        connections: args.max_connections as usize,
        header_timeout: args.header_timeout,
    };
    let mut router = api::router(app);
    if let Some(token) = auth {
        router = router.layer(axum::middleware::from_fn_with_state(
            token,
            crate::auth::require,
        ));
    }
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

/// Drops every ticket each time the server starts draining: a draining
/// server grants nothing new, and a ticket's borrow would.
async fn drop_tickets_on_drain(
    tickets: crate::tickets::Tickets,
    mut draining: watch::Receiver<bool>,
) {
    while draining.wait_for(|on| *on).await.is_ok() {
        tickets.clear();
        if draining.wait_for(|on| !*on).await.is_err() {
            return;
        }
    }
}

/// SIGUSR1 starts draining (no new grants; returns and renewals go on;
/// `/readyz` answers 503), SIGUSR2 ends it.
async fn drain_signals(drain: watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut start), Ok(mut stop)) = (
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) else {
            return;
        };
        loop {
            let on = tokio::select! {
                _ = start.recv() => true,
                _ = stop.recv() => false,
            };
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
    }
    #[cfg(not(unix))]
    drop(drain);
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
